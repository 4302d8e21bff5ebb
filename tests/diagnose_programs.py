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
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(BUFFERS.get(job, {}).get(rank, entries))  # read at init
    dist.init_process_group("gloo", init_method=f"tcp://{store}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=4 * dump_after_s))
    dumped = threading.Lock()

    def dump_once() -> None:
        """Dump and end the process; a second caller waits for the first to end it."""
        if dumped.acquire(blocking=False):
            dump(out_dir, rank, form)
            _end_once_all_dumped(out_dir, world_size, dump_after_s)
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


ORDER_GROUPS = {"tail": [6, 7], "first": [0, 1], "second": [0, 1], "skips": [2, 3, 4], "extra": [5, 6, 7],
                "idle": [8, 9], "dead": [10, 11]}


def orders(rank: int, world_size: int) -> None:
    """Twelve ranks, only in subgroups (the world group issues nothing), after a good all-reduce in
    each but 'idle' and 'dead':
    'first' and 'second' (both ranks 0 and 1): rank 0 all-reduces in 'first' then in 'second', rank 1
    in 'second' then in 'first': each waits in the group the other has not reached;
    'skips': ranks 2 and 3 all-reduce int32 then float32; rank 4 only the float32, which gloo pairs with
    their int32 (the same bytes), so theirs completes and their float32 waits;
    'extra': rank 7 all-reduces int32 before the float32 that ranks 5 and 6 all-reduce (gloo pairs the
    first two): its float32 waits; 'tail' (ranks 6 and 7, one good all-reduce first): rank 6's second
    waits for rank 7, held up in 'extra';
    'idle': rank 8 computes from the start, recording nothing, while rank 9 all-reduces;
    'dead': rank 10 dies before its first collective; rank 11 issues nothing."""
    groups = _groups(ORDER_GROUPS)
    x, whole = torch.ones(4), torch.ones(4, dtype=torch.int32)
    if rank in ORDER_GROUPS["tail"]:
        dist.all_reduce(x, group=groups["tail"])
    if rank == 10:
        os._exit(1)  # a process killed: no dump
    if rank == 8:
        _park()
    name = next(name for name, members in ORDER_GROUPS.items() if rank in members and name != "tail")
    if rank == 11:
        _park()  # its group's other member is dead: it issues nothing there
    if name == "idle":
        dist.all_reduce(x, group=groups[name])
    elif name == "first":
        dist.all_reduce(x, group=groups["first"])
        dist.all_reduce(x, group=groups["second"])
        for each in ("first", "second") if rank == 0 else ("second", "first"):
            dist.all_reduce(x, group=groups[each])
    else:
        group = groups[name]
        dist.all_reduce(x, group=group)
        if rank in (2, 3, 7):
            dist.all_reduce(whole, group=group)
        dist.all_reduce(x, group=group)
        if rank == 6:
            dist.all_reduce(x, group=groups["tail"])
    _park()


VARIANT_GROUPS = {"skip": [0, 1, 2], "extra": [3, 4, 5], "tie": [6, 7], "hold": [8, 9, 10],
                  "side": [8, 9, 10]}


def variants(rank: int, world_size: int) -> None:
    """Eleven ranks, only in subgroups, where what is skipped or added differs from what came before it
    (in 'orders' it is the all-reduce just before):
    'skip': a good all-reduce of 2 elements, then ranks 0 and 1 all-reduce 4 int32 and 4 float32, rank 2
    only the 4 float32 (gloo pairs it with their int32): their float32 waits;
    'extra': rank 5 all-reduces 4 int32 as its group's first collective, then 4 float32 as ranks 3 and 4
    do (gloo pairs their float32 with its int32): its float32 waits;
    'tie': after a good all-reduce, rank 6 all-reduces int32 then float32, rank 7 float32 then int32:
    each is the other's order, no majority (gloo pairs both; nothing waits);
    'hold' and 'side' (both ranks 8-10), after a good all-reduce in each: rank 8 all-reduces in 'hold'
    then 'side', ranks 9 and 10 in 'side' then 'hold': crossed orders where two ranks are behind and
    one ahead."""
    groups = _groups(VARIANT_GROUPS)
    x, whole = torch.ones(4), torch.ones(4, dtype=torch.int32)
    name = next(name for name, members in VARIANT_GROUPS.items() if rank in members)
    group = groups[name]
    if name == "skip":
        dist.all_reduce(torch.ones(2), group=group)
        if rank != 2:
            dist.all_reduce(whole, group=group)
        dist.all_reduce(x, group=group)
    elif name == "extra":
        if rank == 5:
            dist.all_reduce(whole, group=group)
        dist.all_reduce(x, group=group)
    elif name == "tie":
        dist.all_reduce(torch.ones(2), group=group)
        for each in (whole, x) if rank == 6 else (x, whole):
            dist.all_reduce(each, group=group)
    else:
        dist.all_reduce(x, group=groups["hold"])
        dist.all_reduce(x, group=groups["side"])
        for each in ("hold", "side") if rank == 8 else ("side", "hold"):
            dist.all_reduce(x, group=groups[each])
    _park()


HOLD_GROUPS = {"gate": [0, 1, 2], "left": [1, 3], "right": [2, 3], "mix": [0, 1, 3]}


def holds(rank: int, world_size: int) -> None:
    """Five ranks, where the ranks a group waits for are held in different places:
    the world group: ranks 0-3 start an all-reduce (not waiting for it) and rank 4 issues nothing at all,
    so its dump records nothing and the world group stops at its first collective;
    'gate', 'left', 'right', 'mix', after a good all-reduce in each: rank 0 starts an all-reduce in 'mix'
    and all-reduces in 'gate', rank 1 in 'left', rank 2 in 'right', and rank 3, their partner in 'left',
    'right' and 'mix', issues nothing more: ranks 1 and 2, behind in 'gate', are each held in another
    group; of ranks 1 and 3, behind in 'mix', rank 1 is held in 'left' and rank 3 in none."""
    groups = _groups(HOLD_GROUPS)
    if rank == 4:
        _park()
    started = [dist.all_reduce(torch.ones(4), async_op=True)]  # never completes: rank 4 never joins
    x = torch.ones(4)
    for name in HOLD_GROUPS:
        if rank in HOLD_GROUPS[name]:
            dist.all_reduce(x, group=groups[name])
    if rank == 0:
        started.append(dist.all_reduce(torch.ones(4), group=groups["mix"], async_op=True))
    if rank < 3:
        dist.all_reduce(x, group=groups[("gate", "left", "right")[rank]])
    del started
    _park()


UNREACHABLE_GROUPS = {"side": [0, 1, 5], "pair": [2, 3, 5], "all": [0, 1, 2, 4, 5], "other": [3, 5]}


def unreachable(rank: int, world_size: int) -> None:
    """Six ranks, where rank 5 (whose dump a test leaves out: a host that cannot be reached) completes
    an all_gather in 'side' with ranks 0-1, one in the world group and one in 'pair' with ranks 2-3, and
    then issues nothing more; its Flight Recorder keeps two entries (BUFFERS), so its dump holds no
    'side' entry. Ranks 0, 1, 2 and 4 then wait in an all_gather in 'all', and rank 3 in one in 'other',
    for rank 5: every group's sizes imply a member whose dump (rank 5's) is absent or holds nothing of
    it, while the members that left one are in flight in one group ('all') or in two."""
    groups = _groups(UNREACHABLE_GROUPS)
    x = torch.ones(4)

    def gathered(name: str | None = None) -> None:
        size = len(UNREACHABLE_GROUPS[name]) if name else world_size
        dist.all_gather([torch.empty(4) for _ in range(size)], x, group=groups[name] if name else None)

    if rank in UNREACHABLE_GROUPS["side"]:
        gathered("side")
    gathered()
    if rank in UNREACHABLE_GROUPS["pair"]:
        gathered("pair")
    if rank == 5:
        _park()
    gathered("other" if rank == 3 else "all")


SIDE_GROUPS = {"three": [0, 1, 2, 3, 4, 5], "next": [6, 7, 8, 9], "gathers": [7, 8, 10],
               "queued": [7, 8, 9, 11]}
QUEUED = {7: 2, 8: 1, 9: 3, 11: 0}  # all-reduces each rank of 'queued' starts past its three good ones


def sides(rank: int, world_size: int) -> None:
    """Twelve ranks, only subgroups:
    'three': ranks 1-3 all-reduce float32, ranks 4-5 int32 and rank 0 all-gathers: a majority and two
    minorities, each differing its own way (all wait: gloo pairs none of it);
    'next': ranks 6-8 all-reduce float32 then int32, rank 9 issues only the int32 one (gloo pairs it
    with their float32: the same bytes) and stops; rank 6 waits in the second, ranks 7-8 go on to
    'gathers' first;
    'gathers': rank 10 gathers 4 elements from each, rank 8 sends 8: gloo aborts rank 10;
    'queued': after three all-reduces, rank 9 starts three more without waiting (as NCCL's enqueueing
    does), rank 7 two, rank 8 one and rank 11 none, so none completes: ranks 7-8 wait for rank 11."""
    groups = _groups(SIDE_GROUPS)
    x = torch.ones(8)
    started = []  # kept until the process ends
    if rank in SIDE_GROUPS["three"]:
        if rank == 0:
            dist.all_gather([torch.empty(8) for _ in range(6)], x, group=groups["three"])
        else:
            dist.all_reduce(x if rank < 4 else torch.ones(8, dtype=torch.int32), group=groups["three"])
    if rank in SIDE_GROUPS["next"]:
        if rank != 9:
            dist.all_reduce(x, group=groups["next"])
        if rank in (6, 9):
            dist.all_reduce(torch.ones(8, dtype=torch.int32), group=groups["next"])
    if rank in SIDE_GROUPS["gathers"]:
        gathered = [torch.empty(4) for _ in range(3)] if rank == 10 else None
        dist.gather(torch.ones(8 if rank == 8 else 4), gathered, dst=10, group=groups["gathers"])
    if rank in SIDE_GROUPS["queued"]:
        for _ in range(3):
            dist.all_reduce(x, group=groups["queued"])
        started += [dist.all_reduce(x, group=groups["queued"], async_op=True) for _ in range(QUEUED[rank])]
    _park()
    del started


def call_sites(rank: int, world_size: int) -> None:
    """Five ranks, with their stacks, in the world group after a good all-reduce: ranks 2 and 3 issue
    all-reduces from two lines; rank 4 only from the second (gloo pairs it with their first: it skipped
    one); rank 1 from the first, then computes; rank 0 from the first, then starts an all-reduce in
    'aside', which rank 1 never joins, and keeps a Flight Recorder of one entry (BUFFERS), so its dump
    holds nothing of the world group. Of ranks 0, 1 and 4, behind at #3, only rank 4's #2 came from
    another line than the others'."""
    aside = dist.new_group([0, 1], group_desc="aside")
    x = torch.ones(4)
    dist.all_reduce(x)
    if rank != 4:
        dist.all_reduce(x)  # the first line: rank 4 goes past it (call_sites)
    if rank in (2, 3, 4):
        dist.all_reduce(x)
    started = dist.all_reduce(x, group=aside, async_op=True) if rank == 0 else None
    _park()
    del started


# job -> {rank: the entries its Flight Recorder keeps} where a rank keeps fewer than run_job's
BUFFERS = {unreachable: {5: 2}, call_sites: {0: 1}}


# name -> (job, ranks, how its ranks dump): the skipped collective is told by its call site, so the
# desyncs job keeps its stacks; the others show the faster and the JSON forms read alike
JOBS = {"healthy": (healthy, 2, PICKLE), "desyncs": (desyncs, 8, PICKLE),
        "mismatches": (mismatches, 8, JSON), "stalls": (stalls, 8, PICKLE_WITHOUT_STACKS),
        "splits": (splits, 5, PICKLE_WITHOUT_STACKS), "orders": (orders, 12, PICKLE_WITHOUT_STACKS),
        "variants": (variants, 11, PICKLE_WITHOUT_STACKS), "holds": (holds, 5, PICKLE_WITHOUT_STACKS),
        "unreachable": (unreachable, 6, PICKLE_WITHOUT_STACKS), "sides": (sides, 12, PICKLE_WITHOUT_STACKS),
        "call_sites": (call_sites, 5, PICKLE)}


def _wait_for_the_cut() -> None:
    """Until this host's link (GLOO_SOCKET_IFNAME's) is down: the test cut it (at most a minute)."""
    state = Path("/sys/class/net", os.environ["GLOO_SOCKET_IFNAME"], "operstate")
    deadline = time.monotonic() + 60
    while state.read_text().strip() == "up" and time.monotonic() < deadline:
        time.sleep(0.02)


def cut_all_reduce(rank: int, world_size: int, queued: bool = False) -> None:
    """Three all-reduces of 4 MiB, then 'streaming'; rank 1 enters the fourth only once its link is
    down. Both ranks are in it, and neither can complete it: each needs the other's data. ``queued``
    ('cut_queued'): rank 0 starts the fourth and a fifth without waiting for either (as NCCL queues
    collectives on its stream) and then issues nothing: nobody completes the fourth, and rank 0 left it
    in flight to go past it."""
    tensor = torch.ones(2**20)
    for _ in range(3):
        dist.all_reduce(tensor)
    print("streaming", flush=True)
    if rank == 1:
        _wait_for_the_cut()
    elif queued:
        dist.all_reduce(tensor, async_op=True)
        dist.all_reduce(torch.ones(2**20), async_op=True)
        _park()
    dist.all_reduce(tensor)


def _wait_for(path: Path) -> None:
    """Until ``path`` exists: the test's sign that it changed this host's link (at most a minute)."""
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def crawl_broadcast(rank: int, world_size: int) -> None:
    """Three broadcasts of 1 MiB from rank 0, then 'streaming'; rank 1 enters the fourth only once its
    link crawls (the test slows it and says so with a file 'slowed' beside the dumps). Rank 0 hands
    its 1 MiB to its socket (whose buffer takes 4 MiB) and is done with the fourth; rank 1 still waits
    for it, arriving at the crawl's rate, when both dump. On three ranks ('crawl_past_one'), rank 2 (on
    a host whose link stays fast) receives the fourth and then computes, issuing nothing more, while
    rank 0 goes on to a fifth: of the two ranks behind it, rank 1 is still in the fourth, which ranks 0
    and 2 completed, and rank 2 is in no collective."""
    tensor = torch.ones(2**18)
    for _ in range(3):
        dist.broadcast(tensor, src=0)
    print("streaming", flush=True)
    if rank == 1:
        _wait_for(Path(os.environ["COMMBENCH_TEST_SIGNALS"], "slowed"))
    dist.broadcast(tensor, src=0)
    if rank == 2:
        _park()
    dist.broadcast(tensor, src=0)


# name -> (the job each rank runs, what happens to host 1's link once all stream, ranks) for run_link:
# that many test hosts, one rank each
LINK_JOBS = {"cut_all_reduce": (cut_all_reduce, "cut", 2), "crawl_broadcast": (crawl_broadcast, "crawl", 2),
             "crawl_past_one": (crawl_broadcast, "crawl", 3),
             "cut_queued": (lambda rank, world_size: cut_all_reduce(rank, world_size, queued=True), "cut", 2)}
CRAWL = "100kbit"  # 1 MiB takes over a minute at this rate


def run_link(name: str, out_dir: Path, dump_after_s: float = 6.0) -> list[int]:
    """``LINK_JOBS[name]`` on its test hosts (network namespaces, tests/netns.py: root and iproute2),
    one rank each; once all stream, host 1's link goes down ('cut') or slows to CRAWL ('crawl'). The
    ranks stay alive, and dump from their watchdog thread at ``dump_after_s``. Their exit codes; every
    process and namespace is gone when it returns or raises."""
    import shutil  # here, not above: the captured dumps' stacks name the jobs' lines as they are
    import subprocess
    import tempfile

    from tests.dist_helpers import ROOT, launcherless_env
    from tests.netns import MASTER_PORT, NetnsCluster

    _, change, ranks = LINK_JOBS[name]
    out_dir.mkdir(parents=True, exist_ok=True)
    signals = Path(tempfile.mkdtemp(prefix="commbench-link-"))
    cluster = NetnsCluster(ranks).create()
    try:
        # host 0's sockets start with a 4 MiB send buffer: a 1 MiB send is handed over at once
        subprocess.run(["ip", "netns", "exec", cluster.hosts[0].namespace, "sysctl", "-q", "-w",
                        "net.ipv4.tcp_wmem=4096 4194304 4194304"], check=True)
        procs = []
        for host in cluster.hosts:
            env = launcherless_env({"GLOO_SOCKET_IFNAME": host.interface, "PYTHONPATH": str(ROOT),
                                    "COMMBENCH_TEST_SIGNALS": str(signals)})
            procs.append(cluster.start(host.index, [
                sys.executable, "-m", "tests.diagnose_programs", name, str(host.index), str(ranks),
                f"{cluster.hosts[0].address}:{MASTER_PORT}", str(out_dir), str(dump_after_s)], env))
        for proc in procs:
            if proc.stdout.readline().strip() != "streaming":
                proc.kill()
                raise RuntimeError(f"{name}: a rank did not start streaming: {proc.communicate()[1]}")
        if change == "cut":
            subprocess.run(["ip", "-n", cluster.switch, "link", "set", cluster.hosts[1].switch_port, "down"],
                           check=True)
        else:
            cluster.slow(1, CRAWL)
            (signals / "slowed").touch()
        return [proc.wait(timeout=60 + 4 * dump_after_s) for proc in procs]
    finally:
        cluster.teardown()
        shutil.rmtree(signals, ignore_errors=True)


def capture(root: Path, names: list[str]) -> None:
    """The jobs ``names`` (of JOBS and LINK_JOBS; none named: every one, LINK_JOBS only where network
    namespaces can be made) run once, each one's dumps kept in ``root``/NAME: tests/data/diagnose/ (its
    README says how they were made), which the fast tests of the diagnose engine read."""
    from tests.netns import unavailable_reason

    unknown = [name for name in names if name not in JOBS and name not in LINK_JOBS]
    if unknown:
        raise SystemExit(f"no such job: {', '.join(unknown)} (jobs: {', '.join([*JOBS, *LINK_JOBS])})")
    names = names or [*JOBS, *([] if unavailable_reason() else LINK_JOBS)]
    for name in names:
        if (root / name).exists():
            raise SystemExit(f"{root / name} exists: remove it first")
    for name in names:
        if name in JOBS:
            job, ranks, form = JOBS[name]
            codes = list(run_job(job, ranks, root / name, form=form).values())
        else:
            codes = run_link(name, root / name)
        print(f"{name}: exit codes {codes}")


def main(argv: list[str]) -> None:
    """One rank of a LINK_JOBS job, as a test host (tests/netns.py) runs it: ``python -m
    tests.diagnose_programs JOB RANK WORLD_SIZE STORE_HOST:PORT OUT_DIR DUMP_AFTER_S``; or ``python -m
    tests.diagnose_programs capture DIR [JOB ...]``: the dumps of every job (or of those named) kept in
    DIR/JOB."""
    if argv[:1] == ["capture"]:
        capture(Path(argv[1]), argv[2:])
        return
    name, rank, world_size, store, out_dir, dump_after_s = argv
    _rank_main(LINK_JOBS[name][0], int(rank), int(world_size), store, out_dir,
               (float(dump_after_s), 200, PICKLE_WITHOUT_STACKS))


def _end_once_all_dumped(out_dir: str, world_size: int, most_s: float) -> None:
    """End this process once every rank's dump is in ``out_dir`` (at most ``most_s`` from now): a rank
    that ended at once would close its connections and fail the collectives the others still wait in
    before they dump, changing what they record. (Defined here, below the jobs: the captured stacks
    name the jobs' lines.)"""
    deadline = time.monotonic() + most_s
    while time.monotonic() < deadline and not all(
            Path(out_dir, f"{DUMP_PREFIX}{rank}").exists() for rank in range(world_size)):
        time.sleep(0.02)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
