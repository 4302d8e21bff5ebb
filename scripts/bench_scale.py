"""What commbench's own work costs at 8 to 4,096 ranks, measured in one process per step and world.

    python scripts/bench_scale.py                        # N = 8, 64, 512, 1024, 4096: minutes
    python scripts/bench_scale.py --worlds 8,64 --sizes 1K:2K --samples 20 --full-fabric-up-to 64

No world of that many processes is started. Where the real code path needs a process group, torch's
``fake`` backend (FakeStore: every collective returns at once, an all_gather hands back copies of this
rank's input) stands in for N ranks, so rank 0 runs commbench's own sweep (run_benchmarks' steps: the
availability probe once, outside the timing, then run_sweep with its Recording: the CSV, the JSON and
the console) at world size N; the time per size is then rank 0's own
work per size, the network's share left out (docs/clusters.md#at-scale models it). The other inputs are
synthetic and made in commbench's own forms: rows through results.rows.make_row and the ResultWriter,
fabric rows through fabric.measure.round_rows, a recorded world as a replay Trace.

Each step runs in a fresh subprocess per world, so its peak memory is its own: the peak resident set
(VmHWM, reset before the step) above what the process held when the step began. Printed per step and
world: seconds, peak MiB, and the growth exponent of each against the previous world
(log(t2 / t1) / log(N2 / N1): 1 is linear, 2 quadratic). Then the targets, each PASS or FAIL:
- rank 0's own work per measured size at 4,096 ranks under 1 s (the sweep at --samples' largest);
- fabric's analysis of a full 1,024-rank matrix under 30 s and 4 GiB;
- no step growing faster than N log N between the two largest worlds it ran at (N^2 log N for the
  steps over every pair of a full fabric schedule), with 0.25 of slack on the exponent for noise.
The load average is printed before and after: absolute times on a shared machine are noisy.
"""

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RANKS_PER_HOST = 8
SAMPLE_K = 8  # fabric --sample K at scale (docs/clusters.md)
SLACK = 0.25  # on a growth exponent: noise between two timings on a shared machine
SIZE_TARGET_S = 1.0
ANALYSIS_TARGET_S, ANALYSIS_TARGET_MIB = 30.0, 4096


def hostnames(world: int) -> list[str]:
    return [f"node{rank // RANKS_PER_HOST:04d}" for rank in range(world)]


# --- measuring one step in this process ----------------------------------------------------------------
def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def measured(step, repeats: int = 1):
    """step() timed, with the peak resident memory it added (VmHWM after resetting it); with
    ``repeats``, the fastest of that many runs (a shared machine's noise only ever adds time)."""
    best = None
    for _ in range(repeats):
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
        except OSError:
            pass
        before = _status_kib("VmRSS")
        started = time.perf_counter()
        extra = step() or {}
        seconds = time.perf_counter() - started
        found = {"seconds": seconds, "peak_mib": max(0, _status_kib("VmHWM") - before) / 1024, **extra}
        if best is None or seconds < best["seconds"]:
            best = {**found, "peak_mib": max(found["peak_mib"], best["peak_mib"] if best else 0.0)}
    return best


# --- the steps (each run by a worker: python bench_scale.py --worker STEP --world N ...) ----------------
def _fake_backend(world: int):
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from commbench.backends.torch_dist import TorchDistBackend

    if dist.is_initialized():  # --in-process: one step after another in this process
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    return TorchDistBackend("gloo", torch.device("cpu"))


class ControlCounter:
    """Counts rank 0's control operations and the bytes each rank contributes to them."""

    def __init__(self) -> None:
        self.calls = {"all_gather": 0, "broadcast": 0, "barrier": 0}
        self.payload = {"all_gather": 0, "broadcast": 0}

    def install(self) -> None:
        from commbench.coordination import ControlGroup

        originals = {name: getattr(ControlGroup, name)
                     for name in ("all_gather_array", "_all_gather", "_broadcast", "barrier")}
        counter = self

        def counted(name: str, kind: str, payload):
            def wrapper(group, *args):
                counter.calls[kind] += 1
                if payload is not None:
                    counter.payload[kind] += payload(*args)
                return originals[name](group, *args)
            return wrapper

        # floats are gathered by all_gather_array, objects by _all_gather (after their sizes)
        ControlGroup.all_gather_array = counted("all_gather_array", "all_gather",
                                                lambda values: 8 * len(values))
        ControlGroup._all_gather = counted("_all_gather", "all_gather", lambda local: local.nbytes)
        ControlGroup._broadcast = counted("_broadcast", "broadcast", lambda tensor, root: tensor.nbytes)
        ControlGroup.barrier = counted("barrier", "barrier", None)


def _timed(module, name: str, totals: dict[str, float]) -> None:
    """Wrap module.name so its seconds add up in totals[name]."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - started

    setattr(module, name, wrapper)


def _warm() -> None:
    """What the file commands import once, whatever the world: not part of a step's cost."""
    import matplotlib.pyplot  # noqa: F401 - report draws its figures with it

    import commbench.analysis.compare
    import commbench.analysis.report
    import commbench.cli.main
    import commbench.results.fit
    import commbench.results.frame  # noqa: F401


def step_sweep(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    """Rank 0 of a sweep of all_reduce at world size N (fake backend), --iters S: seconds per size
    besides the loops that issue the (fake) ops, which time the network on a real run; split into
    control (gathers, broadcasts, barriers on the fake group: the Python side of them and the fake
    all_gather's copies), row building, files and console, and the rest (buffers, planning)."""
    from commbench.backends import torch_dist
    from commbench.config.sweep import resolve, run_config
    from commbench.core.groups import Membership, world_plan
    from commbench.core.sizes import parse_sizes
    from commbench.measure import sampling
    from commbench.running import availability, recording, runner
    from commbench.writers.output import NullOutput

    _warm()
    backend = _fake_backend(world)
    names = hostnames(world)
    config = resolve(run_config(collectives=["all_reduce"], sizes=parse_sizes(args.sizes), iters=args.samples,
                                warmup=1, backend="gloo", device="cpu", csv_path=str(workdir / "sweep.csv"),
                                json_path=str(workdir / "sweep.json"), argv=["--iters", str(args.samples)]))
    plan = world_plan(world)
    meta = recording.build_meta([config], backend, names, {}, plan, "local")
    # run_benchmarks' first step, once per run like the start: not part of the cost per size
    config = availability.settle(config, backend, NullOutput())
    counter = ControlCounter()
    counter.install()
    parts: dict[str, float] = {}
    control_calls = ("all_gather_floats", "all_gather_array", "all_gather_object", "broadcast_object",
                     "barrier")
    for name in control_calls:
        _timed(torch_dist.TorchDistBackend, name, parts)
    _timed(runner, "make_row", parts)
    for name in ("time_sync", "time_async", "warm_up"):  # warm_up: a fixed --warmup, as --iters runs
        _timed(sampling, name, parts)
    _timed(runner, "_probe", parts)
    _timed(recording.Recording, "row", parts)
    _timed(recording.Recording, "table_done", parts)
    sizes = len(config.sizes)

    def sweep() -> dict:
        output = recording.Recording(meta, config.launch)
        session = runner.Session(Membership(plan, None, 0), hostnames=tuple(names))
        runner.run_sweep(config, backend, output, session)  # run_benchmarks' sweep, once settled
        output.finish("complete")
        return {}

    result = measured(sweep)
    control = sum(parts.get(name, 0.0) for name in control_calls)
    table = parts.get("table_done", 0.0)
    loops = sum(parts.get(name, 0.0) for name in ("time_sync", "time_async", "warm_up", "_probe"))
    return {**result, "per_size_s": (result["seconds"] - table - loops) / sizes, "loops_s": loops / sizes,
            "table_s": table, "sizes": sizes,
            "control_s": control / sizes, "rows_s": parts.get("make_row", 0.0) / sizes,
            "files_console_s": parts.get("row", 0.0) / sizes,
            "calls": {kind: count / sizes for kind, count in counter.calls.items()},
            "payload": {kind: count / sizes for kind, count in counter.payload.items()},
            "json_bytes": (workdir / "sweep.json").stat().st_size,
            "csv_bytes": (workdir / "sweep.csv").stat().st_size}


def _cli(*arguments: str) -> None:
    from commbench.cli.main import cli  # imported before the step is measured: see _warm

    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        try:
            cli.main(list(arguments), standalone_mode=False)
        finally:
            sys.stdout = stdout


def step_load(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    import commbench

    _warm()
    return measured(lambda: {"rows": len(commbench.load(str(workdir / "sweep.json")))}, repeats=3)


def step_compare(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    path = str(workdir / "sweep.json")
    _warm()
    return measured(lambda: _cli("compare", "--base", path, path), repeats=3)


def step_report(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    path = str(workdir / "sweep.json")
    _warm()
    return measured(lambda: _cli("report", path, "--output", str(workdir / "report.html")))


def step_schedule(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    from commbench.fabric.schedule import make_schedule

    names = hostnames(world)
    return measured(lambda: {"pairs": make_schedule(names, None).pair_count})


def step_schedule_sample(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    from commbench.fabric.schedule import make_schedule

    names = hostnames(world)
    return measured(lambda: {"pairs": make_schedule(names, min(SAMPLE_K, world - 1)).pair_count}, repeats=3)


def _fabric_context(world: int, backend):
    from commbench.core.groups import Membership, world_plan
    from commbench.fabric.config import FabricConfig
    from commbench.fabric.measure import FabricContext, NodeGroups
    from commbench.fabric.schedule import make_schedule
    from commbench.running.runner import Session

    names = hostnames(world)
    session = Session(Membership(world_plan(world), None, 0), hostnames=tuple(names))
    return FabricContext(backend, FabricConfig(), names, make_schedule(names, None), None,
                         NodeGroups((), (), None, None), session)


def _round_times(world: int, round_index: int) -> list[list[float]]:
    """Every rank's seconds for a round (fabric.measure.time_round's layout), slightly different each."""
    from commbench.fabric.config import FabricConfig, phase_iters

    count = sum(phase_iters(FabricConfig()))
    return [[2.7e-3 * (1 + 0.01 * ((rank * 7 + round_index + index) % 13)) for index in range(count)]
            for rank in range(world)]


def step_fabric_round(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    """Rank 0's rows of one concurrent round of a full schedule: N/2 pairs, four rows each."""
    from commbench.fabric.measure import round_rows

    ctx = _fabric_context(world, _fake_backend(world))
    times = _round_times(world, 0)
    return measured(lambda: {"rows": len(round_rows(ctx, ctx.schedule.rounds[0], times, ctx.phase))},
                    repeats=3)


def _fabric_rows(world: int, sample: int | None) -> tuple[list, list[str]]:
    """A whole pass's rows as a saved fabric run holds them (four per pair: bandwidth and latency, each
    way, with their samples), the rounds of ``sample`` (None: every pair). Built as Rows straight away:
    fabric's own row building, 2N(N-1) make_row calls, is measured per round by its own step and would
    take most of this script's time at 1,024 ranks. Host node0001 is slow, so there is a suspect."""
    from commbench.fabric.config import FabricConfig, phase_iters
    from commbench.fabric.schedule import make_schedule
    from commbench.results.model import Row

    names = hostnames(world)
    config = FabricConfig()
    counts = phase_iters(config)
    # each row's samples, rounded as microseconds() rounds them (their JSON is as long as a real row's),
    # copied with + 0.0 so that every row holds floats of its own, as a measured row does
    templates = {(phase, jitter, slow): [round((2700.0 if phase < 2 else 12.0) * slow * (1 + 0.01 * jitter)
                                               * (1 + 0.001 * k), 3) for k in range(counts[phase])]
                 for phase in range(4) for jitter in range(11) for slow in (1.0, 4.0)}
    rows = []
    gc.disable()  # millions of new rows: the collector would walk them again and again
    common = dict(backend="gloo", device="cpu", world_size=world, dtype="uint8", mode="sync", op="",
                  warmup=config.warmup, busbw_factor=1.0, pattern="fabric", phase="concurrent")
    for index, one in enumerate(make_schedule(names, sample).rounds):
        for first, second in one.pairs:
            slow = 4.0 if "node0001" in (names[first], names[second]) else 1.0
            for phase, (src, dst) in enumerate(((first, second), (second, first)) * 2):
                template = templates[(phase, (src * 7 + dst * 3 + index) % 11, slow)]
                samples = [value + 0.0 for value in template]
                p50 = samples[len(samples) // 2]
                size = config.size if phase < 2 else config.latency_size
                rows.append(Row(collective="p2p_uni" if phase < 2 else "ping_pong", size_bytes=size,
                                requested_bytes=size, count_per_rank=size, iters=counts[phase],
                                time_us_p50=p50, time_us_p95=samples[-1], time_us_min=samples[0],
                                time_us_max=samples[-1], time_us_mean=p50, algbw_gbps=size / p50 / 1e3,
                                busbw_gbps=size / p50 / 1e3, samples=counts[phase], samples_us=samples,
                                rank_mean_us=[p50, p50], src_rank=src, dst_rank=dst, **common))
    gc.enable()
    return rows, names


def _analysis(world: int, sample: int | None) -> dict:
    """fabric's analysis of a pass's rows; ``rows_mib``, what the rows themselves hold, beside it."""
    from commbench.fabric.analysis import analyse
    from commbench.fabric.config import FabricConfig  # noqa: F401 - imported before anything is measured

    built: dict = {}

    def build() -> dict:
        built["rows"], built["names"] = _fabric_rows(world, sample)
        return {}

    rows_cost = measured(build)
    rows, names = built["rows"], built["names"]
    result = measured(lambda: {"suspects": len(analyse(rows, names, 2.0).suspects)},
                      repeats=1 if sample is None else 3)
    return {**result, "rows": len(rows), "rows_mib": rows_cost["peak_mib"]}


def step_analysis_full(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    return _analysis(world, None)


def step_analysis_sampled(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    return _analysis(world, min(SAMPLE_K, world - 1))


def step_fabric_files(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    """A --sample 8 fabric pass's results written as rank 0 writes them (a batch of rows per round,
    then the analysis as the `fabric` part of results.json): time, memory, and the files' bytes."""
    from commbench.fabric.analysis import analyse
    from commbench.results.model import RunMeta
    from commbench.writers.files import ResultWriter

    rows, names = _fabric_rows(world, min(SAMPLE_K, world - 1))
    meta = RunMeta(run_id="bench", started_at="", command=["commbench", "fabric", "--sample", str(SAMPLE_K)],
                   commbench_version="", torch_version="", python_version="", backend="gloo", device="cpu",
                   world_size=world, launcher="local", hostnames=names, versions={}, env={}, config={})
    csv_path, json_path = workdir / "fabric.csv", workdir / "fabric.json"

    def write() -> dict:
        writer = ResultWriter(meta, csv_path, json_path)
        for start in range(0, len(rows), 2 * world):  # a round's rows at a time, as the run hands them
            writer.add_all(rows[start:start + 2 * world])
        writer.set_section("fabric", analyse(rows, names, 2.0).to_dict())
        writer.finish("complete", "")
        return {}

    result = measured(write)
    json_bytes = json_path.stat().st_size
    return {**result, "rows": len(rows), "json_bytes": json_bytes, "csv_bytes": csv_path.stat().st_size}


def _recorded_world(world: int):
    """A recorded job of ``world`` ranks: tensor parallel in 8s, pipeline stages of 4 with sends and
    receives, data parallel across: 20 collectives and 8 point-to-point ops per rank."""
    from commbench.replay.model import RecordedGroup, RecordedOp, Trace

    tp, pp = 8, 4
    dp = max(1, world // (tp * pp))
    groups = {"0": RecordedGroup("0", "default_pg", tuple(range(world)))}
    member_of: dict[int, dict[str, str]] = {rank: {} for rank in range(world)}

    def add(kind: str, ranks: list[int]) -> None:
        name = str(len(groups))
        groups[name] = RecordedGroup(name, kind, tuple(sorted(ranks)))
        for rank in ranks:
            member_of[rank][kind] = name

    for start in range(0, world, tp):
        add("mesh_tp", list(range(start, min(start + tp, world))))
    for stage_start in range(0, world, tp * pp * dp):
        block = range(stage_start, min(stage_start + tp * pp * dp, world))
        for offset in range(tp * dp):
            add("mesh_pp", [rank for rank in block if (rank - stage_start) % (tp * dp) == offset])
    for offset in range(tp * pp):
        add("mesh_dp", [rank for rank in range(world) if rank % (tp * pp) == offset])
    ops = {}
    for rank in range(world):
        mine = []
        for step in range(10):
            for kind, name in (("mesh_tp", "all_reduce"), ("mesh_dp", "reduce_scatter")):
                group = member_of[rank].get(kind)
                if group is None:
                    continue
                size = len(groups[group].ranks)
                shape = (1024,) if name == "all_reduce" else (1024 // size or 1,)
                inputs = ((1024,),) if name == "all_reduce" else ((1024 // size * size or size,),)
                outputs = ((1024,),) if name == "all_reduce" else (shape,)
                mine.append(RecordedOp(rank, name, name, group, shape, "bfloat16", inputs, outputs,
                                       seq=step, created_ns=step * 1000))
        stage = groups.get(member_of[rank].get("mesh_pp", ""))
        if stage is not None and len(stage.ranks) > 1:
            position = stage.ranks.index(rank)
            for step in range(4):
                for peer, name in ((position + 1, "send"), (position - 1, "recv")):
                    if 0 <= peer < len(stage.ranks):
                        mine.append(RecordedOp(rank, name, name, member_of[rank]["mesh_pp"], (512,),
                                               "bfloat16", ((512,),), ((512,),), seq=step, peer=peer))
        ops[rank] = mine
    return Trace("synthetic", "flight-recorder", world, ops, groups)


def step_replay_map(world: int, workdir: Path, args: argparse.Namespace) -> dict:
    """validate + map_trace of a recorded N-rank job onto N/8 ranks (at least 8)."""
    from commbench.replay.mapping import map_trace
    from commbench.replay.validate import validate

    trace = _recorded_world(world)
    smaller = max(8, world // 8)

    def mapping() -> dict:
        plan = map_trace(validate(trace), smaller)
        return {"ops": sum(len(ops) for ops in plan.ops.values()), "groups": len(plan.groups)}

    return measured(mapping, repeats=3)


STEPS = {  # name: (function, growth allowed: "nlogn" or "n2logn" for every pair of a full schedule)
    "sweep": (step_sweep, "nlogn"),
    "load": (step_load, "nlogn"),
    "compare": (step_compare, "nlogn"),
    "report": (step_report, "nlogn"),
    "fabric schedule": (step_schedule, "n2logn"),
    "fabric schedule --sample": (step_schedule_sample, "nlogn"),
    "fabric round rows": (step_fabric_round, "nlogn"),
    "fabric analysis full": (step_analysis_full, "n2logn"),
    "fabric analysis --sample": (step_analysis_sampled, "nlogn"),
    "fabric files --sample": (step_fabric_files, "nlogn"),
    "replay map": (step_replay_map, "nlogn"),
}
NEEDS_SWEEP = ("load", "compare", "report")
FULL_ONLY = ("fabric analysis full",)


# --- the run: every step at every world, each in a worker ---------------------------------------------
def run_worker(args: argparse.Namespace) -> int:
    function, _ = STEPS[args.worker]
    result = function(args.world, Path(args.workdir), args)
    Path(args.result).write_text(json.dumps(result))
    return 0


def run_step(name: str, world: int, workdir: Path, args: argparse.Namespace) -> dict | None:
    if args.in_process:
        try:
            return STEPS[name][0](world, workdir, args)
        except Exception as exc:  # noqa: BLE001 - reported as the step's outcome, as a worker's would be
            return {"error": f"{type(exc).__name__}: {exc}"}
    result_path = workdir / f"result-{name.replace(' ', '_')}.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--worker", name, "--world", str(world), "--workdir", str(workdir),
               "--result", str(result_path), "--sizes", args.sizes, "--samples", str(args.samples)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.step_timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"over {args.step_timeout:g} s"}
    if done.returncode != 0 or not result_path.exists():
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(result_path.read_text())


def exponent(small: tuple[int, float], large: tuple[int, float]) -> float | None:
    (n1, v1), (n2, v2) = small, large
    if v1 <= 0 or v2 <= 0:
        return None
    return math.log(v2 / v1) / math.log(n2 / n1)


def allowed_exponent(kind: str, n1: int, n2: int) -> float:
    """The exponent of N log N (or N^2 log N) between n1 and n2."""
    power = 2 if kind == "n2logn" else 1
    return math.log((n2 ** power * math.log(n2)) / (n1 ** power * math.log(n1))) / math.log(n2 / n1)


def load_line() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def print_step(name: str, results: dict[int, dict]) -> list[str]:
    """The step's line per world; the growth verdict (a FAIL line, if any) returned."""
    print(f"\n{name}")
    previous: tuple[int, dict] | None = None
    for world, result in sorted(results.items()):
        if "error" in result:
            print(f"  N={world:5d}  not measured: {result['error']}")
            previous = None
            continue
        growth = ""
        if previous is not None:
            time_exp = exponent((previous[0], previous[1]["seconds"]), (world, result["seconds"]))
            memory_exp = exponent((previous[0], previous[1]["peak_mib"]), (world, result["peak_mib"]))
            growth = f"  growth: time N^{time_exp:.2f}" if time_exp is not None else "  growth: time -"
            growth += f", memory N^{memory_exp:.2f}" if memory_exp is not None else ""
        extra = describe_extra(name, result)
        print(f"  N={world:5d}  {result['seconds']:9.3f} s  {result['peak_mib']:8.1f} MiB{growth}{extra}")
        previous = (world, result)
    return growth_verdicts(name, results)


def describe_extra(name: str, result: dict) -> str:
    if name == "sweep":
        calls, payload = result["calls"], result["payload"]
        return (f"  per size {result['per_size_s']:.3f} s (control {result['control_s']:.3f} s, rows "
                f"{result['rows_s']:.3f} s, files and console {result['files_console_s']:.3f} s), at the "
                f"table's end {result['table_s']:.3f} s; the fake ops' loops {result['loops_s']:.3f} s "
                f"per size besides; control per size: {calls['all_gather']:g} "
                f"all_gathers ({payload['all_gather']:.0f} B from each rank), {calls['broadcast']:g} "
                f"broadcasts, {calls['barrier']:g} barriers; results.json "
                f"{result['json_bytes'] / 2**20:.2f} MiB, results.csv {result['csv_bytes'] / 2**20:.3f} MiB")
    found = [f"{key} {value}" for key, value in result.items()
             if key in ("rows", "pairs", "ops", "groups", "suspects")]
    if "rows_mib" in result:
        found.append(f"the rows themselves {result['rows_mib']:.0f} MiB")
    if "json_bytes" in result:
        per_row = result["json_bytes"] / result["rows"]
        found.append(f"results.json {result['json_bytes'] / 2**20:.1f} MiB ({per_row:.0f} B a row), "
                     f"results.csv {result['csv_bytes'] / 2**20:.1f} MiB")
    return f"  ({', '.join(found)})" if found else ""


def growth_verdicts(name: str, results: dict[int, dict]) -> list[str]:
    measured_worlds = sorted(world for world, result in results.items() if "error" not in result)
    if len(measured_worlds) < 2:
        return []
    n1, n2 = measured_worlds[-2:]
    kind = STEPS[name][1]
    bound = allowed_exponent(kind, n1, n2) + SLACK
    lines = []
    for quantity, unit in (("seconds", "time"), ("peak_mib", "memory")):
        small, large = results[n1][quantity], results[n2][quantity]
        if quantity == "peak_mib" and large < 16:  # a few MiB is the allocator's noise
            continue
        if quantity == "seconds" and large < 0.05:
            continue
        found = exponent((n1, small), (n2, large))
        if found is None:
            continue
        verdict = "PASS" if found <= bound else "FAIL"
        label = "N^2 log N" if kind == "n2logn" else "N log N"
        lines.append(f"[{verdict}] {name}: {unit} grows as N^{found:.2f} from {n1} to {n2} ranks "
                     f"(at most {label}: N^{bound - SLACK:.2f}, +{SLACK} for noise)")
    return lines


def targets(all_results: dict[str, dict[int, dict]], worlds: list[int]) -> list[str]:
    lines = []
    largest = max(worlds)
    sweep = all_results.get("sweep", {}).get(largest, {})
    if "per_size_s" in sweep:
        per_size = sweep["per_size_s"]
        verdict = "PASS" if largest < 4096 or per_size < SIZE_TARGET_S else "FAIL"
        if largest < 4096:
            verdict = "not judged: 4096 ranks not run"
        lines.append(f"[{verdict}] rank 0's own work per size at {largest} ranks: {per_size:.3f} s "
                     f"(target at 4096: under {SIZE_TARGET_S:g} s)")
    analysis = all_results.get("fabric analysis full", {}).get(1024)
    if analysis is None or "error" in analysis:
        why = "1024 ranks not run" if analysis is None else analysis["error"]
        what = "fabric analysis of a full 1024-rank matrix"
        lines.append(f"[FAIL] {what}: not measured ({why})" if 1024 in worlds
                     else f"[not judged] {what}: not run")
    else:
        held = analysis["peak_mib"] + analysis["rows_mib"]
        ok = analysis["seconds"] < ANALYSIS_TARGET_S and held < ANALYSIS_TARGET_MIB
        lines.append(f"[{'PASS' if ok else 'FAIL'}] fabric analysis of a full 1024-rank matrix "
                     f"({analysis['rows']} rows): {analysis['seconds']:.1f} s, {held:.0f} MiB with the rows "
                     f"({analysis['rows_mib']:.0f} MiB of them; targets: under {ANALYSIS_TARGET_S:g} s and "
                     f"{ANALYSIS_TARGET_MIB} MiB)")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", default="8,64,512,1024,4096", help="world sizes, comma separated")
    parser.add_argument("--sizes", default="1K:16K", help="the sweep's sizes (per size: the mean)")
    parser.add_argument("--samples", type=int, default=1000,
                        help="samples per size (--iters): 1000 is the most the adaptive default takes")
    parser.add_argument("--full-fabric-up-to", type=int, default=1024,
                        help="the largest world whose full fabric pass (every pair) is analysed")
    parser.add_argument("--steps", default=",".join(STEPS), help="which steps, comma separated")
    parser.add_argument("--step-timeout", type=float, default=300.0)
    parser.add_argument("--in-process", action="store_true",
                        help="every step in this process (quick, for tests: peak memory then counts "
                             "what earlier steps left behind)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(args)
    worlds = sorted(int(text) for text in args.worlds.split(","))
    steps = [name.strip() for name in args.steps.split(",")]
    print(f"commbench at scale, one process per step and world; load average (1, 5, 15 min) {load_line()} "
          f"before; {os.cpu_count()} CPUs")
    started = time.monotonic()
    all_results: dict[str, dict[int, dict]] = {name: {} for name in steps}
    verdicts: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch:
        for name in steps:
            for world in worlds:
                if name in FULL_ONLY and world > args.full_fabric_up_to:
                    continue
                workdir = Path(scratch) / str(world)
                workdir.mkdir(exist_ok=True)
                if name in NEEDS_SWEEP and "error" in all_results.get("sweep", {}).get(world, {"error": ""}):
                    all_results[name][world] = {"error": "no sweep file at this world"}
                    continue
                all_results[name][world] = run_step(name, world, workdir, args)
            verdicts += print_step(name, all_results[name])
    print(f"\ntargets (load average {load_line()} after; {time.monotonic() - started:.0f} s in all)")
    verdicts = targets(all_results, worlds) + verdicts
    for line in verdicts:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
