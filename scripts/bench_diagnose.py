"""commbench diagnose, measured: the real scenarios side by side with torch's fr_trace, the scale target,
and what keeping the Flight Recorder on costs a commbench run.

- scenarios: the jobs of tests/diagnose_programs.py run here on gloo (2 and 8 ranks); for each, what
  `commbench diagnose` named and how long it took, beside `python -m torch.distributed.flight_recorder.
  fr_trace` on the same dumps, and on a copy whose pg_config lists the groups as NCCL's dumps do (gloo's
  lists none, which fr_trace cannot read).
- scale: a real 8-rank job's dumps (tensor 4 x data 2 parallel, 2,000 entries each) replicated to
  --ranks ranks of --entries entries, groups renamed to a 4 x ranks/4 mesh, creation times jittered,
  with three faults: one rank stuck a step behind, one rank's last data-parallel all-reduce of another
  size, one rank's dump absent. `commbench diagnose --json` runs on them in a process of its own; its
  wall time and the peak memory of its process tree (workers included) are printed against the targets
  (issue 33: 4,096 x 2,000 in at most 30 s and 4 GiB), and whether it named the three faults. With
  --baseline CHECKOUT, the commbench of another checkout (main, say) runs on the same dumps right after,
  its wall and CPU time beside this one's.
- overhead: what recording costs each collective: CPU time per all_reduce on a 1-rank gloo group (no
  network: the op's own CPU work) with the recorder off, at commbench's size and at torch's default, in
  processes of their own, rounds alternating; and how long a dump takes, without and with stacks.

    python scripts/bench_diagnose.py [--part all|scenarios|scale|overhead] [--ranks 4096] [--entries 2000]
                                     [--baseline CHECKOUT]

Exit status 1 when a scale target or the scale verdict is missed.
"""

import argparse
import json
import math
import os
import pickle
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the jobs live with the tests: tests/diagnose_programs.py

from tests import diagnose_programs as programs  # noqa: E402

GROUPS = {"healthy": {"pair": [0, 1]}, "desyncs": programs.DESYNC_GROUPS,
          "mismatches": programs.MISMATCH_GROUPS, "stalls": programs.STALL_GROUPS}
FR_TRACE = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
TP = 4  # the mesh's tensor-parallel size (the template's and the replicas')


def timed(command: list[str], out: Path | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL,
                          cwd=ROOT)
    seconds = time.perf_counter() - start
    if out is not None:
        out.write_text(done.stdout)
    return seconds, done


# --- scenarios -----------------------------------------------------------------------------------

def ours(directory: Path) -> tuple[float, str]:
    seconds, done = timed([sys.executable, "-m", "commbench", "diagnose", str(directory), "--json"])
    if done.returncode not in (0, 1):
        return seconds, done.stderr.strip()
    findings = json.loads(done.stdout)["findings"]
    named = [f"{item['kind']}{'/' + item['detail'] if item['detail'] else ''} {item['group']} "
             f"{item['culprits']}" for item in findings]
    return seconds, "; ".join(named) or "nothing"


def fr_trace(directory: Path, complete: bool) -> tuple[float, str]:
    extra = [] if complete else ["--allow-incomplete-ranks"]
    seconds, done = timed([*FR_TRACE, str(directory), *extra])
    text = done.stdout + done.stderr
    if done.returncode != 0:
        return seconds, text.strip().splitlines()[-1]
    named = []
    for block in re.split(r"\n(?=group info: )", text)[1:]:
        group = re.match(r"group info: (\S+)", block).group(1)
        culprit = re.search(r"error msg: (Culprit rank \d+); Error type: (\w+)", block)
        missing = re.search(r"missing ranks: (\{[^}]*\})", block)
        named.append(f"{group} {culprit.group(1)} {culprit.group(2)}" if culprit else
                     f"{group} missing {missing.group(1) if missing else '?'}")
    return seconds, "; ".join(named) or "nothing"


def with_pg_config(directory: Path, groups: dict[str, list[int]], world_size: int, into: Path) -> Path:
    """A copy of the dumps, as pickles, whose pg_config lists every group (torch names them '0', '1', ...
    in creation order) with its ranks, as NCCL's dumps do."""
    into.mkdir(parents=True, exist_ok=True)
    listed = {"0": ("default_pg", list(range(world_size)))}
    listed |= {str(index): (name, ranks) for index, (name, ranks) in enumerate(groups.items(), start=1)}
    for path in directory.iterdir():
        data = path.read_bytes()  # our own job's dump; fr_trace reads pickles only
        dump = pickle.loads(data) if data[:1] == b"\x80" else json.loads(data)
        dump["pg_config"] = {name: {"name": name, "desc": desc, "ranks": json.dumps(ranks)}
                             for name, (desc, ranks) in listed.items()}
        (into / path.name).write_bytes(pickle.dumps(dump))
    return into


def scenarios(work: Path) -> None:
    print("scenarios: the real jobs of tests/diagnose_programs.py, each rank dumping its own recorder")
    for name, (job, ranks, form) in programs.JOBS.items():
        directory = work / "scenarios" / name
        programs.run_job(job, ranks, directory, form=form)
        dumps = len(list(directory.iterdir()))
        print(f"\n{name} ({ranks} ranks, {dumps} dumps)")
        for label, (seconds, named) in (
                ("commbench diagnose", ours(directory)),
                ("fr_trace", fr_trace(directory, dumps == ranks)),
                ("fr_trace, pg_config", fr_trace(with_pg_config(directory, GROUPS[name], ranks,
                                                                work / "listed" / name), dumps == ranks))):
            print(f"  {label:<20} {seconds:6.2f} s  {named}")


# --- scale ---------------------------------------------------------------------------------------

def template(work: Path, entries: int) -> list[dict]:
    """The 8 ranks' dumps of a real healthy tensor x data parallel job, ``entries`` entries each."""
    directory = work / "template"
    steps = math.ceil(entries / 11) + 2
    programs.run_job(partial(programs.mesh_steps, steps=steps), 8, directory, dump_after_s=600,
                     entries=entries, form=programs.PICKLE)
    return [pickle.loads((directory / f"{programs.DUMP_PREFIX}{rank}").read_bytes()) for rank in range(8)]


class Faults:
    """Which replica ranks go wrong: each in its own tensor- and data-parallel group."""

    def __init__(self, ranks: int) -> None:
        self.stuck = (ranks // 3) // 8 * 8 + 1  # a step behind in all its groups
        self.resized = (2 * ranks // 3) // 8 * 8 + 2  # its last data-parallel all-reduce: another size
        self.dead = ranks - 1  # no dump; the world all_gather's output still counts it


_TEMPLATES: list[dict] = []


def _load_templates(path: str) -> None:
    _TEMPLATES.extend(pickle.loads(Path(path).read_bytes()))


def write_replica(rank: int, ranks: int, entries: int, out: str) -> None:
    """Replica ``rank`` of template rank rank % 8, its groups renamed to the big mesh's (torch's names:
    '0' the world, then the ranks/4 tensor-parallel groups, then the 4 data-parallel ones)."""
    faults = Faults(ranks)
    if rank == faults.dead:
        return
    dump = _TEMPLATES[rank % 8]
    renamed = {"0": ("0", "default_pg")}
    for name, desc in {tuple(entry["process_group"]) for entry in dump["entries"]} - {("0", "default_pg")}:
        kind = desc[:2]
        renamed[name] = (str(1 + rank // TP), desc[:2]) if kind == "tp" else (
            str(1 + ranks // TP + rank % TP), desc[:2])
    chosen = dump["entries"][-entries:]
    if rank == faults.stuck:
        chosen = chosen[:-11]  # one step short
    copies = []
    for entry in chosen:
        copy = dict(entry, process_group=renamed[entry["process_group"][0]],
                    time_created_ns=entry["time_created_ns"] + rank * 997)
        if copy["process_group"][0] == "0" and copy["profiling_name"].endswith("all_gather"):
            copy["output_sizes"] = [[ranks, *entry["input_sizes"][0]]]
        copies.append(copy)
    if rank == faults.resized:
        last = max(index for index, entry in enumerate(copies) if entry["process_group"][1] == "dp")
        copies[last] = dict(copies[last], input_sizes=[[257]], output_sizes=[[257]])
    Path(out, f"{programs.DUMP_PREFIX}{rank}").write_bytes(pickle.dumps(dict(dump, entries=copies)))


def replicate(templates: list[dict], ranks: int, entries: int, out: Path) -> None:
    out.mkdir(parents=True)
    stored = out.parent / "templates.pickle"
    stored.write_bytes(pickle.dumps(templates))
    workers = len(os.sched_getaffinity(0))
    with ProcessPoolExecutor(workers, initializer=_load_templates, initargs=(str(stored),)) as pool:
        list(pool.map(partial(write_replica, ranks=ranks, entries=entries, out=str(out)), range(ranks),
                      chunksize=64))


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants (Linux /proc)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, AttributeError):
            continue
    return total


def cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def measured(command: list[str], out: Path, checkout: Path = ROOT) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds of the process tree, its peak resident bytes, exit status); stdout
    into ``out``. The CPU time counts the workers too (a process's waited-for children are its own).
    ``checkout``: where commbench is imported from."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with out.open("w") as stdout:
        cpu = cpu_of_children()
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=checkout,
                                env=env)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.05)
        seconds = time.perf_counter() - start
    return seconds, cpu_of_children() - cpu, peak, proc.returncode


def scale(work: Path, ranks: int, entries: int, time_target: float, memory_target: float,
          baseline: Path | None = None) -> bool:
    if ranks % 8 or ranks < 16:
        raise SystemExit("--ranks must be a multiple of 8, at least 16")
    print(f"\nscale: {ranks} ranks x {entries} entries (a real 8-rank job's dumps replicated)")
    start = time.perf_counter()
    out = work / "scale" / "dumps"
    replicate(template(work, entries), ranks, entries, out)
    size = sum(path.stat().st_size for path in out.iterdir())
    made = time.perf_counter() - start
    print(f"  made {len(list(out.iterdir()))} dumps, {size / 2**20:.0f} MiB, in {made:.0f} s")
    seconds, cpu, peak, status = measured([sys.executable, "-m", "commbench", "diagnose", str(out), "--json"],
                                     work / "scale" / "verdict.json")
    if status not in (0, 1):
        raise SystemExit(f"commbench diagnose failed ({status})")
    findings = json.loads((work / "scale" / "verdict.json").read_text())["findings"]
    faults = Faults(ranks)
    named = {(item["kind"], rank) for item in findings for rank in item["culprits"]}
    expected = {("behind", faults.stuck), ("mismatch", faults.resized), ("missing", faults.dead)}
    others = sorted({rank for _, rank in named} - {rank for _, rank in expected})
    right = expected <= named and not others
    fast, small = seconds <= time_target, peak <= memory_target * 2**30
    print(f"  commbench diagnose: {seconds:.1f} s [{'PASS' if fast else 'FAIL'}: at most {time_target:g} s], "
          f"peak memory {peak / 2**30:.2f} GiB [{'PASS' if small else 'FAIL'}: at most "
          f"{memory_target:g} GiB] on {len(os.sched_getaffinity(0))} cores, load average "
          f"{os.getloadavg()[0]:.1f}; CPU time {cpu:.1f} s, workers included")
    print(f"  named: behind {faults.stuck}, mismatch {faults.resized}, missing {faults.dead}: "
          f"{'PASS' if right else 'FAIL'}" + (f" (also named {others})" if others else ""))
    if baseline is not None:
        verdict = work / "scale" / "baseline.json"
        then, then_cpu, then_peak, status = measured(
            [sys.executable, "-m", "commbench", "diagnose", str(out), "--json"], verdict, baseline)
        same = status in (0, 1) and json.loads(verdict.read_text())["findings"] == findings
        print(f"  baseline ({baseline}), right after on the same dumps: {then:.1f} s, CPU time "
              f"{then_cpu:.1f} s, peak memory {then_peak / 2**30:.2f} GiB, load average "
              f"{os.getloadavg()[0]:.1f}; its verdict {'the same' if same else 'differs'}; this checkout's "
              f"CPU time is {cpu / then_cpu:.2f}x its")
    return fast and small and right


# --- overhead ------------------------------------------------------------------------------------

PROBE_OPS = 3000


def probe(port: int) -> None:
    """In a process of its own (the recorder's size is read once, when the first group starts): CPU time
    per all_reduce of 1 KiB on a 1-rank gloo group, then how long a dump takes without and with stacks."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    tensor = torch.ones(256)
    for _ in range(200):
        dist.all_reduce(tensor)
    start = time.process_time()
    for _ in range(PROBE_OPS):
        dist.all_reduce(tensor)
    cpu_us = (time.process_time() - start) / PROBE_OPS * 1e6
    dumps = []
    for stacks in (False, True):
        start = time.perf_counter()
        torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=stacks)
        dumps.append(time.perf_counter() - start)
    print(json.dumps({"cpu_us": cpu_us, "dump_s": dumps[0], "dump_stacks_s": dumps[1]}))


def overhead(rounds: int) -> None:
    from commbench.running.spawn import FLIGHT_RECORDER_ENTRIES, free_port

    print(f"\noverhead: CPU time per all_reduce (1 KiB, a 1-rank gloo group, {PROBE_OPS} ops), the recorder "
          "off, as commbench's launcher keeps it, and at torch's default; rounds alternate")
    sizes = {"off": 0, "commbench's": FLIGHT_RECORDER_ENTRIES, "torch default": 2000}
    found: dict[str, list[dict]] = {label: [] for label in sizes}
    for round_index in range(rounds):
        order = list(sizes) if round_index % 2 == 0 else list(reversed(sizes))
        for label in order:
            env = {**os.environ, "TORCH_FR_BUFFER_SIZE": str(sizes[label])}
            done = subprocess.run([sys.executable, __file__, "--probe", str(free_port())], env=env,
                                  capture_output=True, text=True, check=True, cwd=ROOT, timeout=600)
            found[label].append(json.loads(done.stdout.splitlines()[-1]))
    off = statistics.median(item["cpu_us"] for item in found["off"])
    for label, entries in sizes.items():
        cpu = statistics.median(item["cpu_us"] for item in found[label])
        dump = "" if not entries else (
            f"; a dump takes {statistics.median(item['dump_s'] for item in found[label]) * 1e3:.0f} ms "
            f"({statistics.median(item['dump_stacks_s'] for item in found[label]):.1f} s with stacks)")
        print(f"  {label:<14} {entries:>5} entries: {cpu:5.1f} us CPU per op (+{cpu - off:.1f} us){dump}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["all", "scenarios", "scale", "overhead"], default="all")
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--time-target", type=float, default=30.0, help="seconds")
    parser.add_argument("--memory-target", type=float, default=4.0, help="GiB")
    parser.add_argument("--rounds", type=int, default=5, help="overhead's rounds")
    parser.add_argument("--probe", type=int, metavar="PORT", help=argparse.SUPPRESS)  # overhead's process
    parser.add_argument("--keep", metavar="DIR", help="work in DIR (new) and keep the dumps made there")
    parser.add_argument("--baseline", metavar="CHECKOUT", type=Path,
                        help="scale: also run the commbench of CHECKOUT (a source tree) on the same dumps")
    args = parser.parse_args()
    if args.probe:
        probe(args.probe)
        return 0
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_diagnose_"))
    work.mkdir(parents=True, exist_ok=bool(not args.keep))
    try:
        if args.part in ("all", "scenarios"):
            scenarios(work)
        ok = True
        if args.part in ("all", "scale"):
            ok = scale(work, args.ranks, args.entries, args.time_target, args.memory_target,
                       args.baseline)
        if args.part in ("all", "overhead"):
            overhead(args.rounds)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
