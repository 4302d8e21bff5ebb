"""Real jobs that go wrong, for commbench diagnose's tests and scripts/bench_diagnose.py.

Each job runs on every rank of a fresh gloo world (``run_job``) and leaves, on each rank that lives to
do it, that rank's Flight Recorder dump in ``out_dir``, the way a user's job or torch does:
- when a collective raises (gloo's peer closed the connection, or a timeout), the rank dumps there, as a
  job's exception handler calling ``_dump_fr_trace()`` would;
- a rank still waiting, or busy outside communication, when ``dump_after_s`` has passed dumps from a
  thread, as torch's watchdog does on every rank when one of them times out (TORCH_NCCL_DUMP_ON_TIMEOUT);
- a rank that gloo aborts (it aborts the process on some mismatches) or that dies leaves no dump.
Subgroups carry a description (``group_desc``), as a mesh's do; each scenario lives in a subgroup of its
own where several share a job, so the world group stays healthy.
"""

import datetime
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

DUMP_PREFIX = "fr_rank_"


# How a job's ranks write their dumps: the pickle with Python stacks (torch's default), the pickle
# without them (symbolising stacks costs each rank a second or more), or the JSON form (never stacks).
PICKLE, PICKLE_WITHOUT_STACKS, JSON = "pickle", "pickle without stacks", "json"


def dump(out_dir: str, rank: int, form: str = PICKLE) -> None:
    """This rank's Flight Recorder, in ``form``, written whole (renamed into place)."""
    recorder = torch._C._distributed_c10d
    data = recorder._dump_fr_trace_json() if form == JSON else \
        recorder._dump_fr_trace(includeStackTraces=form == PICKLE)
    path = Path(out_dir, f"{DUMP_PREFIX}{rank}")
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _rank_main(job: Callable, rank: int, world_size: int, store: str, out_dir: str,
               how: tuple[float, int, str]) -> None:
    dump_after_s, entries, form = how
    warnings.simplefilter("ignore", FutureWarning)  # all_gather_into_tensor's new name, in torch 2.13
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(entries)  # read when the first group starts
    dist.init_process_group("gloo", init_method=f"tcp://{store}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=4 * dump_after_s))
    dumped = threading.Lock()

    def dump_once() -> None:
        """Dump and end the process; a second caller waits for the first to end it."""
        if dumped.acquire(blocking=False):
            dump(out_dir, rank, form)
            os._exit(0)
        dumped.acquire()  # never returns: the holder ends the process

    watchdog = threading.Timer(dump_after_s, dump_once)
    watchdog.daemon = True
    watchdog.start()
    try:
        job(rank, world_size)
    except RuntimeError:  # a collective failed: a peer went, or gloo gave up waiting
        dump_once()
    dump_once()


def run_job(job: Callable, world_size: int, out_dir: Path, dump_after_s: float = 3.0, entries: int = 2000,
            form: str = PICKLE) -> dict[int, int]:
    """``job(rank, world_size)`` on ``world_size`` fresh processes (forked from commbench's fork server,
    which has torch imported) in one gloo world, each keeping its last ``entries`` operations (torch's
    default 2000) and dumping them in ``form``; their exit codes by rank (-6: gloo aborted it)."""
    from commbench.running.spawn import forking_context, free_port

    out_dir.mkdir(parents=True, exist_ok=True)
    context = forking_context()
    store = f"127.0.0.1:{free_port()}"
    procs = [context.Process(target=_rank_main, args=(job, rank, world_size, store, str(out_dir),
                                                      (dump_after_s, entries, form)))
             for rank in range(world_size)]
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=60 + 4 * dump_after_s)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    return {rank: proc.exitcode for rank, proc in enumerate(procs)}


def _park() -> None:
    """Nothing more to do: wait (the watchdog dumps and ends the process)."""
    time.sleep(3600)


def _groups(spec: dict[str, list[int]]) -> dict[str, dist.ProcessGroup]:
    """Every rank creates every group, in one order, as torch requires."""
    return {name: dist.new_group(ranks, group_desc=name) for name, ranks in spec.items()}


# --- the jobs ------------------------------------------------------------------------------------

def healthy(rank: int, world_size: int) -> None:
    """The control: world and subgroup collectives, coalesced all-reduces, a gather; all complete."""
    pair = _groups({"pair": [0, 1]})["pair"]
    x = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(x)
        dist.all_reduce_coalesced([torch.ones(2), torch.ones(3)])
        with dist._coalescing_manager(async_ops=True) as coalesced:
            dist.all_reduce(torch.ones(5))
            dist.all_reduce(torch.ones(6))
        coalesced.wait()
    if rank in (0, 1):
        dist.all_gather_into_tensor(torch.empty(16), x, group=pair)
    dist.gather(x, [torch.empty(8) for _ in range(world_size)] if rank == 0 else None, dst=0)
    dist.barrier()


DESYNC_GROUPS = {"differs": [0, 1, 2], "stuck": [3, 4, 5], "skips": [6, 7]}


def desyncs(rank: int, world_size: int) -> None:
    """Eight ranks, a fault in each of three subgroups after two good world all-reduces:
    'differs': rank 2 issues an all_gather where ranks 0 and 1 issue an all_reduce;
    'stuck': rank 5 computes forever while ranks 3 and 4 wait in an all_reduce;
    'skips': rank 7 skips one of three all_reduces (its second is rank 6's third)."""
    groups = _groups(DESYNC_GROUPS)
    x = torch.ones(4)
    dist.all_reduce(x)
    dist.all_reduce(x)
    if rank in DESYNC_GROUPS["differs"]:
        group = groups["differs"]
        dist.all_reduce(x, group=group)
        if rank == 2:
            dist.all_gather_into_tensor(torch.empty(12), x, group=group)
        else:
            dist.all_reduce(x, group=group)
    elif rank in DESYNC_GROUPS["stuck"]:
        group = groups["stuck"]
        dist.all_reduce(x, group=group)
        if rank == 5:
            _park()  # a data loader or a loss computation that never returns
        dist.all_reduce(x, group=group)
    else:
        group = groups["skips"]
        dist.all_reduce(x, group=group)
        if rank != 7:
            dist.all_reduce(x, group=group)  # rank 7 takes another path past this one
        dist.all_reduce(x, group=group)
    _park()


MISMATCH_GROUPS = {"size": [0, 1, 2, 3], "dtype": [4, 5, 6, 7]}


def mismatches(rank: int, world_size: int) -> None:
    """Nine ranks, after a good world all-reduce and a good all-reduce in each subgroup:
    'size': rank 2 all-reduces 16 elements where ranks 0 and 1 all-reduce 8;
    'dtype': rank 5 all-reduces float64 where ranks 3 and 4 all-reduce float32;
    'coalesced': rank 8 coalesces three tensors where ranks 6 and 7 coalesce two.
    gloo aborts some of these ranks outright: they leave no dump."""
    groups = _groups(MISMATCH_GROUPS)
    dist.all_reduce(torch.ones(4))
    name = next(name for name, members in MISMATCH_GROUPS.items() if rank in members)
    group = groups[name]
    dist.all_reduce(torch.ones(4), group=group)
    if name == "size":
        dist.all_reduce(torch.ones(16 if rank == 2 else 8), group=group)
    else:
        dist.all_reduce(torch.ones(8, dtype=torch.float64 if rank == 5 else torch.float32), group=group)
    _park()


STALL_GROUPS = {"pipe": [0, 1, 2, 3], "coalesced": [4, 5, 6], "dies": [4, 5, 6, 7]}


def stalls(rank: int, world_size: int) -> None:
    """Eight ranks, after a good world all_gather:
    'pipe': four pipeline stages agree on the step (an all-reduce), then ranks 1 and 2 each receive from
    the other first, so neither sends; ranks 0 and 3 go on to the step's last all-reduce and wait there;
    'coalesced': rank 6 coalesces its two all-reduces in the other order ([6], [5] where ranks 4 and 5
    coalesce [5], [6]): the same bytes, so gloo completes it, with the tensors summed crosswise;
    'dies': an all_gather and an all_reduce, then rank 7 dies and ranks 4 to 6 wait for it in the next."""
    groups = _groups(STALL_GROUPS)
    x = torch.ones(4)
    dist.all_gather_into_tensor(torch.empty(4 * world_size), x)
    if rank in STALL_GROUPS["pipe"]:
        dist.all_reduce(x, group=groups["pipe"])
        if rank in (1, 2):
            peer = 3 - rank
            dist.recv(x, peer)
            dist.send(x, peer)
        dist.all_reduce(x, group=groups["pipe"])
        _park()
    if rank in STALL_GROUPS["coalesced"]:
        sizes = (6, 5) if rank == 6 else (5, 6)
        with dist._coalescing_manager(group=groups["coalesced"], async_ops=True) as coalesced:
            for size in sizes:
                dist.all_reduce(torch.ones(size), group=groups["coalesced"])
        coalesced.wait()
    group = groups["dies"]
    dist.all_gather_into_tensor(torch.empty(16), x, group=group)
    dist.all_reduce(x, group=group)
    if rank == 7:
        os._exit(1)  # killed: out of memory, a node lost
    dist.all_reduce(x, group=group)
    _park()


MESH_GROUPS = {"tp0": [0, 1, 2, 3], "tp1": [4, 5, 6, 7], "dp0": [0, 4], "dp1": [1, 5], "dp2": [2, 6],
               "dp3": [3, 7]}
MESH_STEPS = 185  # 11 operations a step: the 2,000 entries torch keeps by default, and more


def mesh_steps(rank: int, world_size: int, steps: int = MESH_STEPS) -> None:
    """Eight healthy ranks as tensor (4) x data (2) parallelism: per step and layer a tensor-parallel
    all_gather and all_reduce, a data-parallel all_reduce of gradients; a world all-reduce per step.
    scripts/bench_diagnose.py replicates its dumps to thousands of ranks."""
    groups = _groups(MESH_GROUPS)
    tp = groups[f"tp{rank // 4}"]
    dp = groups[f"dp{rank % 4}"]
    activation, gradient = torch.ones(64), torch.ones(256)
    for _ in range(steps):
        for _layer in range(3):
            dist.all_gather_into_tensor(torch.empty(256), activation, group=tp)
            dist.all_reduce(activation, group=tp)
            dist.all_reduce(gradient, group=dp)
        dist.all_reduce(torch.ones(1), group=dist.group.WORLD)
        dist.all_gather_into_tensor(torch.empty(8), torch.ones(1))


SPLIT_GROUPS = {"extra": [0, 1, 2], "tie": [3, 4]}


def splits(rank: int, world_size: int) -> None:
    """Five ranks, after a good all-reduce in each subgroup:
    'extra': rank 0 issues one more all-reduce, which ranks 1 and 2 never do;
    'tie': rank 3 all-reduces where rank 4 all-gathers: two sides of one rank each, no majority."""
    groups = _groups(SPLIT_GROUPS)
    x = torch.ones(4)
    name = next(name for name, members in SPLIT_GROUPS.items() if rank in members)
    group = groups[name]
    dist.all_reduce(x, group=group)
    if rank == 0:
        dist.all_reduce(x, group=group)
    elif rank == 4:
        dist.all_gather_into_tensor(torch.empty(8), x, group=group)
    elif rank == 3:
        dist.all_reduce(x, group=group)
    _park()


# name -> (job, ranks, how its ranks dump): the skipped collective is told by its call site, so the
# desyncs job keeps its stacks; the others show the faster and the JSON forms read alike
JOBS = {"healthy": (healthy, 2, PICKLE), "desyncs": (desyncs, 8, PICKLE),
        "mismatches": (mismatches, 8, JSON), "stalls": (stalls, 8, PICKLE_WITHOUT_STACKS),
        "splits": (splits, 5, PICKLE_WITHOUT_STACKS)}


def streams(rank: int, world_size: int) -> None:
    """All-reduces of 4 MiB, again and again; after the first three each rank prints 'streaming', so
    the test can cut a host's link while they stream."""
    tensor = torch.ones(2**20)
    for count in range(10**6):
        dist.all_reduce(tensor)
        if count == 2:
            print("streaming", flush=True)


def capture(root: Path) -> None:
    """Every job of JOBS run once, its dumps kept in ``root``/NAME: tests/data/diagnose/ (its README says
    how they were made), which the fast tests of the diagnose engine read."""
    for name, (job, ranks, form) in JOBS.items():
        if (root / name).exists():
            raise SystemExit(f"{root / name} exists: remove it first")
        codes = run_job(job, ranks, root / name, form=form)
        print(f"{name}: exit codes {codes}")


def main(argv: list[str]) -> None:
    """One rank of ``streams``, as a test host (tests/netns.py) runs it: ``python -m
    tests.diagnose_programs RANK WORLD_SIZE STORE_HOST:PORT OUT_DIR DUMP_AFTER_S``; or ``python -m
    tests.diagnose_programs capture DIR``: every job's dumps kept in DIR."""
    if argv[:1] == ["capture"]:
        capture(Path(argv[1]))
        return
    rank, world_size, store, out_dir, dump_after_s = argv
    _rank_main(streams, int(rank), int(world_size), store, out_dir,
               (float(dump_after_s), 2000, PICKLE_WITHOUT_STACKS))


if __name__ == "__main__":
    main(sys.argv[1:])
