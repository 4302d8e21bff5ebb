"""Run commbench against what an attacker or a careless user would give it, and print a table.

    python scripts/adversarial.py              # every case
    python scripts/adversarial.py -k fifo      # the cases whose name holds 'fifo'
    python scripts/adversarial.py --list       # the cases' names and what each expects

Every case runs in a process group of its own, bounded by a timeout (the group is killed after it) and
under a memory limit (RLIMIT_AS in the child, inherited by the ranks it starts). What it observed is
one of: ok (exit 0), usage (exit 2 with one line 'commbench: error: ...'), failed (exit 1 with one such
line, or the regression gate's one 'commbench: regression ...' line), traceback, hang (the timeout),
memory (MemoryError or killed), or 'exit N' / 'N lines' for anything else. A case also fails when a
file it named as an input changed, or a special file it named (a character device, a FIFO) is no longer
that special file. Exit status: 0 when every case passed.

A case is one row of CASES: ``Case(name, expected, prepare)``, where ``prepare(work)`` makes what the
case needs under ``work.tmp`` (a directory of its own) and returns an ``Invocation``: the command line
(``commbench(...)`` or a ``python(...)`` snippet), its environment, the files to keep unchanged, the
special files to keep special, a timeout of its own, and an optional ``during(process)`` called while
it runs (to stop or signal it). ``work.saved_run()`` and ``work.recording()`` make, once, a real run's
results and a real job's Flight Recorder dumps to copy and damage.
"""

import argparse
import gzip
import hashlib
import json
import os
import pickle
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
DEFAULT_TIMEOUT_S = 120.0  # ranks import torch: tens of seconds on a crowded machine
DEFAULT_MEMORY = 8 * GIB  # address space per process: torch's CPU build maps ~2 GiB on import
TINY_RUN = ("--collective", "all_reduce", "--sizes", "1K,4K", "--iters", "2", "--warmup", "1", "--nproc",
            "2", "--quiet")
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

USAGE, OK, FAILED = "usage", "ok", "failed"


@dataclass
class Invocation:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    keep: list[Path] = field(default_factory=list)  # inputs that must be left as they were
    special: list[Path] = field(default_factory=list)  # special files that must stay special
    timeout: float = DEFAULT_TIMEOUT_S
    during: Callable[[subprocess.Popen], None] | None = None
    after: Callable[[], str | None] | None = None  # a problem it left behind, in words; None if none
    umask: int | None = None  # the umask the command runs under
    skip: str = ""  # why the case cannot run here


def commbench(*args: str | Path, **settings) -> Invocation:
    return Invocation([sys.executable, "-m", "commbench", *map(str, args)], **settings)


def python(code: str, *args: str | Path, **settings) -> Invocation:
    """A snippet that exits 2 with commbench's one line on a UsageError, as the CLI does."""
    wrapped = ("import sys\nfrom commbench.errors import UsageError\ntry:\n"
               + "".join(f"    {line}\n" for line in code.splitlines())
               + "except UsageError as exc:\n    print(f'commbench: error: {exc}', file=sys.stderr)\n"
               "    sys.exit(2)\n")
    return Invocation([sys.executable, "-c", wrapped, *map(str, args)], **settings)


@dataclass
class Case:
    name: str
    expected: str
    prepare: Callable[["Work"], Invocation]


class Work:
    """A case's scratch directory, and real results and recordings made once for every case."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tmp = root
        self._made: dict[str, Path] = {}

    def case_directory(self, name: str) -> Path:
        self.tmp = self.root / "cases" / name
        self.tmp.mkdir(parents=True)
        return self.tmp

    def saved_run(self) -> Path:
        """A directory holding results.json and results.csv of a real tiny run."""
        if "run" not in self._made:
            where = self.root / "made" / "run"
            done = subprocess.run([sys.executable, "-m", "commbench", *TINY_RUN, "--json",
                                   str(where / "results.json"), "--csv", str(where / "results.csv")],
                                  capture_output=True, text=True, env=clean_env(), cwd=ROOT,
                                  stdin=subprocess.DEVNULL, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"could not make a real run to damage: {done.stderr[-2000:]}")
            self._made["run"] = where
        return self._made["run"]

    def copy_of_run(self, name: str = "run") -> Path:
        """A copy of the real run's files in this case's directory."""
        target = self.tmp / name
        shutil.copytree(self.saved_run(), target)
        return target

    def recording(self, which: str = "ddp") -> Path:
        """A directory of a real two-rank job's recording (scripts/record_example.py): DDP's Flight
        Recorder dumps ("ddp") or FSDP2's profiler traces ("fsdp2")."""
        if "recording" not in self._made:
            where = self.root / "made" / "recording"
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   "--nproc_per_node", "2", str(ROOT / "scripts" / "record_example.py"),
                                   str(where)], capture_output=True, text=True, env=clean_env(), cwd=ROOT,
                                  stdin=subprocess.DEVNULL, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"could not record a real job: {done.stderr[-2000:]}")
            self._made["recording"] = where
        return self._made["recording"] / which

    def copy_of_recording(self, which: str = "ddp") -> Path:
        target = self.tmp / which
        shutil.copytree(self.recording(which), target)
        return target

    def fifo(self, name: str) -> Path:
        path = self.tmp / name
        os.mkfifo(path)
        return path

    def null_device(self, name: str) -> Path | None:
        """A character device like /dev/null, of this case's own (mknod needs root); None otherwise.
        The system's own /dev/null is never given to a case: a bug would replace it for everyone."""
        path = self.tmp / name
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            return None
        return path

    def write(self, name: str, content: str | bytes) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES}
    env["CUDA_VISIBLE_DEVICES"] = ""  # gloo on CPU on any machine
    return {**env, **(extra or {})}


# --- what the cases give ----------------------------------------------------------------------------

def deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


def deep_yaml(depth: int = 5_000) -> str:
    return "benchmarks:\n  - name: " + "[" * depth + "]" * depth + "\n"


BILLION_LAUGHS = "\n".join(
    ["defaults:", '  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"  a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]" for level in range(1, 10)]
    + ["benchmarks:", "  - name: *a9", ""])


def gzip_bomb(inflated: int) -> bytes:
    """Gzip members of 64 MiB of zeros each, concatenated: a few KiB per member."""
    member = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
    return member * (inflated // (64 << 20))


# --- the cases: files commbench reads --------------------------------------------------------------

def with_row(run: Path, **changes) -> Path:
    """The run's results.json with its first row changed (as json.dumps writes NaN and infinity)."""
    path = run / "results.json"
    payload = json.loads(path.read_text())
    payload["rows"][0].update(changes)
    path.write_text(json.dumps(payload))
    return path


def with_meta(run: Path, **changes) -> Path:
    path = run / "results.json"
    payload = json.loads(path.read_text())
    payload["meta"].update(changes)
    path.write_text(json.dumps(payload))
    return path


def compare_fifo(work: Work) -> Invocation:
    return commbench("compare", work.fifo("base.json"), work.fifo("new.json"), timeout=60)


def compare_dev_zero(work: Work) -> Invocation:
    return commbench("compare", "/dev/zero", work.write("new.json", "{}"), timeout=60)


def compare_directory_with_fifo(work: Work) -> Invocation:
    run = work.tmp / "run"
    run.mkdir()
    os.mkfifo(run / "results.json")
    return commbench("compare", run, work.write("new.json", "{}"), timeout=60)


def load_fifo(work: Work) -> Invocation:
    return python("import commbench\ncommbench.load(sys.argv[1])", work.fifo("results.json"), timeout=60)


def load_deep_json(work: Work) -> Invocation:
    return python("import commbench\ncommbench.load(sys.argv[1])", work.write("deep.json", deep_json()),
                  timeout=60)


def compare_deep_json(work: Work) -> Invocation:
    return commbench("compare", work.write("a.json", deep_json()), work.write("b.json", deep_json()),
                     timeout=60)


def compare_long_path(work: Work) -> Invocation:
    return commbench("compare", work.tmp / ("a" * 300 + ".json"), work.write("b.json", "{}"), timeout=60)


def plot_infinite_time(work: Work) -> Invocation:
    return commbench("plot", with_row(work.copy_of_run(), time_us_p50=float("inf")), "-o", work.tmp / "p.png")


def report_infinite_time(work: Work) -> Invocation:
    bad = with_row(work.copy_of_run(), time_us_p50=float("inf"))
    return commbench("report", bad, "-o", work.tmp / "r.html")


def compare_huge_size(work: Work) -> Invocation:
    first = with_row(work.copy_of_run("a"), size_bytes=10 ** 30)
    return commbench("compare", first, work.copy_of_run("b") / "results.json", timeout=60)


def report_wrong_meta(work: Work) -> Invocation:
    return commbench("report", with_meta(work.copy_of_run(), hostnames=[1, "a"], versions={"nccl": [2]}),
                     "-o", work.tmp / "r.html")


def sweep_fifo(work: Work) -> Invocation:
    return commbench("sweep", work.fifo("sweep.yaml"), timeout=60)


def sweep_dev_zero(work: Work) -> Invocation:
    return commbench("sweep", "/dev/zero", timeout=60)


def sweep_deep_yaml(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", deep_yaml()), timeout=60)


def sweep_billion_laughs(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", BILLION_LAUGHS), timeout=60)


def sweep_tag_on_plain_value(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", "benchmarks:\n  - iters: !!int abc\n"), timeout=60)


def sweep_impossible_date(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", "benchmarks:\n  - name: 2024-13-45\n    iters: x\n"),
                     timeout=60)


def sweep_python_object(work: Work) -> Invocation:
    marker = work.tmp / "ran"
    text = f"benchmarks:\n  - name: !!python/object/apply:os.system ['touch {marker}']\n"
    return commbench("sweep", work.write("sweep.yaml", text), timeout=60,
                     after=lambda: "the YAML ran a command" if marker.exists() else None)


def model_fifo(work: Work) -> Invocation:
    return commbench("pattern", "fsdp", "--model", work.fifo("model.yaml"), timeout=60)


def model_deep_yaml(work: Work) -> Invocation:
    model = work.write("model.yaml", "units: " + "[" * 5000 + "]" * 5000)
    return commbench("pattern", "fsdp", "--model", model, timeout=60)


def expect_fifo(work: Work) -> Invocation:
    return commbench("--expect", work.fifo("expect.yaml"), timeout=60)


def expect_nan(work: Work) -> Invocation:
    return commbench("--expect", work.write("expect.yaml", "expect: [{busbw_gbps: .nan}]\n"), timeout=60)


def splits_fifo(work: Work) -> Invocation:
    return commbench("--collective", "all_to_allv", "--splits", work.fifo("splits.csv"), timeout=60)


def splits_huge_entry(work: Work) -> Invocation:
    return commbench("--collective", "all_to_allv", "--splits",
                     work.write("splits.csv", "0,4K\n" + "9" * 400 + ",0\n"), timeout=60)


def replay_gzip_bomb(work: Work) -> Invocation:
    return commbench("replay", work.write("trace_rank_0.json.gz", gzip_bomb(4 * GIB)), timeout=90)


def replay_fifo(work: Work) -> Invocation:
    return commbench("replay", work.fifo("nccl_trace_rank_0"), timeout=60)


def replay_deep_json(work: Work) -> Invocation:
    return commbench("replay", work.write("trace_rank_0.json", deep_json()), timeout=60)


def replay_deep_tuple_pickle(work: Work) -> Invocation:
    bomb = b"\x80\x02}" + b"N" + b"\x85" * 1_000_000 + b"K\x01s."  # {((((None,),),...): 1}: a segfault
    return commbench("replay", work.write("nccl_trace_rank_0", bomb), timeout=60)


def replay_shared_tuple_pickle(work: Work) -> Invocation:
    """{t64: 1} where t0 = (1,) and each t(i) = (t(i-1), t(i-1)) through the memo: 2^64 values to hash
    from a few hundred bytes (written opcode by opcode: building it here would hash it here)."""
    opcodes = [b"\x80\x02}K\x01\x85q\x00"]  # PROTO 2, EMPTY_DICT, (1,), BINPUT 0
    opcodes += [bytes([0x68, level - 1, 0x68, level - 1, 0x86, 0x71, level]) for level in range(1, 65)]
    dump = work.write("nccl_trace_rank_0", b"".join(opcodes) + b"K\x01s.")  # BININT1 1, SETITEM, STOP
    return commbench("replay", dump, timeout=60)


def damaged_dump(work: Work, change: Callable[[dict], None]) -> Path:
    recording = work.copy_of_recording()
    dump = recording / "nccl_trace_rank_0"
    payload = pickle.loads(dump.read_bytes())
    change(payload)
    dump.write_bytes(pickle.dumps(payload, protocol=2))
    return recording


def replay_odd_digits(work: Work) -> Invocation:
    recording = damaged_dump(work, lambda dump: dump["entries"][0].update(collective_seq_id="²"))
    return commbench("replay", recording, timeout=90)


def replay_list_for_a_number(work: Work) -> Invocation:
    recording = damaged_dump(work, lambda dump: dump["entries"][0].update(time_created_ns=[1, 2]))
    return commbench("replay", recording, timeout=90)


def replay_nan_timestamps(work: Work) -> Invocation:
    traces = work.copy_of_recording("fsdp2")
    for path in traces.iterdir():
        payload = json.loads(path.read_text())
        for event in payload["traceEvents"]:
            event["ts"] = float("nan") if "ts" in event else event.get("ts")
        path.write_text(json.dumps(payload))
    return commbench("replay", traces, timeout=120)



# diagnose reads the same dumps through the same reader (commbench/recordings/files.py)
def diagnose_gzip_bomb(work: Work) -> Invocation:
    return commbench("diagnose", work.write("nccl_trace_rank_0.gz", gzip_bomb(4 * GIB)), timeout=90)


def diagnose_fifo(work: Work) -> Invocation:
    return commbench("diagnose", work.fifo("nccl_trace_rank_0"), timeout=60)


def diagnose_deep_tuple_pickle(work: Work) -> Invocation:
    bomb = b"\x80\x02}" + b"N" + b"\x85" * 1_000_000 + b"K\x01s."  # as replay-pickle-deep-tuple
    return commbench("diagnose", work.write("nccl_trace_rank_0", bomb), timeout=60)


def diagnose_odd_digits(work: Work) -> Invocation:
    recording = damaged_dump(work, lambda dump: dump["entries"][0].update(collective_seq_id="²"))
    return commbench("diagnose", recording, timeout=90)

# --- the cases: what commbench writes ---------------------------------------------------------------

def null_device_case(work: Work, make: Callable[[Path], Invocation]) -> Invocation:
    null = work.null_device("null")
    if null is None:
        return Invocation([], skip="mknod needs root")
    invocation = make(null)
    invocation.special.append(null)
    return invocation


def run_csv_to_null_device(work: Work) -> Invocation:
    return null_device_case(work, lambda null: commbench(*TINY_RUN, "--csv", null, "--json",
                                                         work.tmp / "results.json"))


def run_json_to_null_device(work: Work) -> Invocation:
    return null_device_case(work, lambda null: commbench(*TINY_RUN, "--json", null, "--csv",
                                                         work.tmp / "results.csv"))


def report_to_null_device(work: Work) -> Invocation:
    run = work.copy_of_run()
    return null_device_case(work, lambda null: commbench("report", run / "results.json", "-o", null))


def run_json_to_fifo(work: Work) -> Invocation:
    fifo = work.fifo("results.json")
    return commbench(*TINY_RUN, "--json", fifo, special=[fifo], timeout=60)


def report_to_fifo_nobody_reads(work: Work) -> Invocation:
    fifo = work.fifo("page.html")
    return commbench("report", work.copy_of_run() / "results.json", "-o", fifo, special=[fifo], timeout=60)


def report_over_its_input(work: Work) -> Invocation:
    run = work.copy_of_run()
    return commbench("report", run / "results.json", "-o", run / "results.json", keep=[run / "results.json"],
                     timeout=90)


def report_over_its_run_directory(work: Work) -> Invocation:
    run = work.copy_of_run()
    return commbench("report", run, "-o", run / "." / "results.json", keep=[run / "results.json"], timeout=90)


def sweep_json_over_the_sweep_file(work: Work) -> Invocation:
    sweep = work.write("sweep.yaml", "benchmarks:\n  - collectives: all_reduce\n    sizes: 1K\n")
    return commbench("sweep", sweep, "--json", sweep, "--nproc", "2", keep=[sweep], timeout=60)


def run_csv_over_the_splits_file(work: Work) -> Invocation:
    splits = work.write("splits.csv", "0,4096\n4096,0\n")
    return commbench("--collective", "all_to_allv", "--splits", splits, "--csv", splits, keep=[splits],
                     timeout=60)


def replay_record_over_the_recording(work: Work) -> Invocation:
    recording = work.copy_of_recording()
    dumps = sorted(recording.iterdir())
    return commbench("replay", recording, "--record", recording / "nccl_trace_rank_", keep=dumps, timeout=120)


def mode_of(path: Path, expected: int) -> Callable[[], str | None]:
    def check() -> str | None:
        if not path.exists():
            return f"no {path.name}"
        mode = stat.S_IMODE(path.stat().st_mode)
        return None if mode == expected else f"{path.name} is {mode:04o}, not {expected:04o}"
    return check


def run_under_umask_022(work: Work) -> Invocation:
    json_path = work.tmp / "results.json"
    return commbench(*TINY_RUN, "--json", json_path, "--csv", work.tmp / "results.csv", umask=0o022,
                     after=mode_of(json_path, 0o644))


def report_keeps_the_mode(work: Work) -> Invocation:
    page = work.write("page.html", "old")
    page.chmod(0o640)
    return commbench("report", work.copy_of_run() / "results.json", "-o", page, after=mode_of(page, 0o640))


def report_to_a_non_utf8_path(work: Work) -> Invocation:
    page = work.tmp / os.fsdecode(b"page-\xff.html")

    def written() -> str | None:
        return None if page.exists() and page.stat().st_size > 1000 else "the page is empty"

    return commbench("report", work.copy_of_run() / "results.json", "-o", page,
                     env={"PYTHONIOENCODING": "utf-8"}, after=written)


# --- the cases: consoles ---------------------------------------------------------------------------

ASCII_CONSOLE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
                 "PYTHONIOENCODING": "ascii"}


def run_on_ascii_console(work: Work) -> Invocation:
    return commbench("--collective", "all_reduce", "--sizes", "1K", "--iters", "2", "--warmup", "1",
                     "--nproc", "2", "--output-dir", work.tmp, env=ASCII_CONSOLE)


def compare_on_ascii_console(work: Work) -> Invocation:
    base, new = work.copy_of_run("a") / "results.json", work.copy_of_run("b") / "results.json"
    return commbench("compare", base, new, env=ASCII_CONSOLE, timeout=60)


def list_on_ascii_console(work: Work) -> Invocation:
    return commbench("list", "--nproc", "2", env=ASCII_CONSOLE)



# --- limits on work and waiting (docs/limits.md) ----------------------------------------------------

def sizes_past_the_limit(work: Work) -> Invocation:
    return commbench("--sizes", "9223372036854775808", timeout=60)


def sizes_too_many(work: Work) -> Invocation:
    return commbench("--sizes", "1:1T:+1", timeout=60)


def sizes_nan_factor(work: Work) -> Invocation:
    return commbench("--sizes", "1K:1M:xnan", timeout=60)


def too_many_local_ranks(work: Work) -> Invocation:
    return commbench("--nproc", "100000", timeout=60)


def master_port_out_of_range(work: Work) -> Invocation:
    variables = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "99999"}
    return commbench("--sizes", "1K", env=variables, timeout=60)


def model_repeat_past_the_limit(work: Work) -> Invocation:
    model = work.write("model.yaml",
                       "units:\n  - name: block\n    params: {w: [4, 4]}\n    repeat: 100000000\n")
    return commbench("pattern", "fsdp", "--model", model, timeout=60)


def gate_on_one_pass_a_side(work: Work) -> Invocation:
    run = work.copy_of_run()
    return commbench("compare", run / "results.json", work.copy_of_run("b") / "results.json",
                     "--fail-above", "10", timeout=60)


def run_into_a_closed_stdout(work: Work) -> Invocation:
    # `commbench ... | head -2`: the reader goes after two lines; the run stops quietly, its files whole
    argv = [sys.executable, "-m", "commbench", *TINY_RUN[:-1], "--output-dir", str(work.tmp)]  # not quiet
    script = (f"import subprocess, sys\n"
              f"run = subprocess.Popen({argv!r}, "
              "stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
              "run.stdout.readline(); run.stdout.readline(); run.stdout.close()\n"
              "err = run.stderr.read().decode(); code = run.wait()\n"
              "print(err, file=sys.stderr, end='')\n"
              "sys.exit(0 if 'Traceback' not in err and 'terminate called' not in err else 3)\n")
    return Invocation([sys.executable, "-c", script], timeout=180)


CASES = [
    # files commbench reads
    Case("compare-fifo", USAGE, compare_fifo),
    Case("compare-dev-zero", USAGE, compare_dev_zero),
    Case("compare-run-dir-fifo", USAGE, compare_directory_with_fifo),
    Case("compare-deep-json", USAGE, compare_deep_json),
    Case("compare-long-path", USAGE, compare_long_path),
    Case("compare-size-10^30", USAGE, compare_huge_size),
    Case("load-fifo", USAGE, load_fifo),
    Case("load-deep-json", USAGE, load_deep_json),
    Case("plot-infinite-time", USAGE, plot_infinite_time),
    Case("report-infinite-time", USAGE, report_infinite_time),
    Case("report-wrong-typed-meta", USAGE, report_wrong_meta),
    Case("sweep-fifo", USAGE, sweep_fifo),
    Case("sweep-dev-zero", USAGE, sweep_dev_zero),
    Case("sweep-deep-yaml", USAGE, sweep_deep_yaml),
    Case("sweep-billion-laughs", USAGE, sweep_billion_laughs),
    Case("sweep-yaml-tag", USAGE, sweep_tag_on_plain_value),
    Case("sweep-yaml-bad-date", USAGE, sweep_impossible_date),
    Case("sweep-yaml-python-object", USAGE, sweep_python_object),
    Case("model-fifo", USAGE, model_fifo),
    Case("model-deep-yaml", USAGE, model_deep_yaml),
    Case("expect-fifo", USAGE, expect_fifo),
    Case("expect-nan", USAGE, expect_nan),
    Case("splits-fifo", USAGE, splits_fifo),
    Case("splits-400-digits", USAGE, splits_huge_entry),
    Case("replay-gzip-bomb", USAGE, replay_gzip_bomb),
    Case("replay-fifo", USAGE, replay_fifo),
    Case("replay-deep-json", USAGE, replay_deep_json),
    Case("replay-pickle-deep-tuple", USAGE, replay_deep_tuple_pickle),
    Case("replay-pickle-shared-tuples", USAGE, replay_shared_tuple_pickle),
    Case("replay-odd-digits", USAGE, replay_odd_digits),
    Case("replay-list-for-number", USAGE, replay_list_for_a_number),
    Case("replay-nan-timestamps", USAGE, replay_nan_timestamps),
    Case("diagnose-gzip-bomb", USAGE, diagnose_gzip_bomb),
    Case("diagnose-fifo", USAGE, diagnose_fifo),
    Case("diagnose-pickle-deep-tuple", USAGE, diagnose_deep_tuple_pickle),
    Case("diagnose-odd-digits", USAGE, diagnose_odd_digits),
    # what commbench writes
    Case("run-csv-null-device", OK, run_csv_to_null_device),
    Case("run-json-null-device", OK, run_json_to_null_device),
    Case("report-null-device", OK, report_to_null_device),
    Case("run-json-fifo", USAGE, run_json_to_fifo),
    Case("report-fifo-no-reader", USAGE, report_to_fifo_nobody_reads),
    Case("report-over-input", USAGE, report_over_its_input),
    Case("report-over-input-dir", USAGE, report_over_its_run_directory),
    Case("sweep-json-over-sweep-file", USAGE, sweep_json_over_the_sweep_file),
    Case("run-csv-over-splits-file", USAGE, run_csv_over_the_splits_file),
    Case("replay-record-over-input", USAGE, replay_record_over_the_recording),
    Case("run-umask-022", OK, run_under_umask_022),
    Case("report-keeps-mode", OK, report_keeps_the_mode),
    Case("report-non-utf8-path", OK, report_to_a_non_utf8_path),
    # consoles
    Case("run-ascii-console", OK, run_on_ascii_console),
    Case("compare-ascii-console", OK, compare_on_ascii_console),
    Case("list-ascii-console", OK, list_on_ascii_console),
    # limits on work and waiting, the gate, a closed stdout
    Case("sizes-past-1-PiB", USAGE, sizes_past_the_limit),
    Case("sizes-a-trillion", USAGE, sizes_too_many),
    Case("sizes-nan-factor", USAGE, sizes_nan_factor),
    Case("nproc-100000", USAGE, too_many_local_ranks),
    Case("master-port-99999", USAGE, master_port_out_of_range),
    Case("model-repeat-10^8", USAGE, model_repeat_past_the_limit),
    Case("gate-one-pass-a-side", FAILED, gate_on_one_pass_a_side),
    Case("run-stdout-closed", OK, run_into_a_closed_stdout),
]


# --- running a case ---------------------------------------------------------------------------------

def fingerprint(path: Path) -> tuple:
    """What must not change about a file: its type, device numbers, mode and content."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ("missing",)
    content = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else ""
    return stat.S_IFMT(info.st_mode), info.st_rdev, stat.S_IMODE(info.st_mode), content


def special_kind(path: Path) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    return {stat.S_IFCHR: "character device", stat.S_IFIFO: "FIFO", stat.S_IFBLK: "block device",
            stat.S_IFSOCK: "socket", stat.S_IFREG: "regular file"}.get(stat.S_IFMT(mode), "other")


def limited(memory: int, umask: int | None) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if umask is not None:
            os.umask(umask)
    return apply


def classify(returncode: int | None, stderr: str, timed_out: bool) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    if timed_out:
        return "hang"
    if "Traceback (most recent call last)" in stderr:
        return "memory" if "MemoryError" in stderr else "traceback"
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL, -signal.SIGSEGV):
        return "memory"
    # one line says why: an error, or on exit 1 the regression gate's verdict ("commbench: regression ...")
    said = ("commbench: error:", "commbench: regression") if returncode == 1 else ("commbench: error:",)
    errors = [line for line in lines if line.startswith(said)]
    if returncode == 0:
        return OK
    if returncode in (1, 2):
        name = USAGE if returncode == 2 else FAILED
        return name if len(errors) == 1 else f"{name} ({len(errors)} error lines)"
    return f"exit {returncode}"


@dataclass
class Outcome:
    case: Case
    observed: str
    returncode: int | None
    problems: list[str]
    seconds: float
    detail: str

    @property
    def passed(self) -> bool:
        return self.observed == self.case.expected and not self.problems or self.observed == "skipped"


def run_case(case: Case, work: Work, memory: int) -> Outcome:
    work.case_directory(case.name)
    invocation = case.prepare(work)
    if invocation.skip:
        return Outcome(case, "skipped", None, [], 0.0, invocation.skip)
    before = {path: fingerprint(path) for path in invocation.keep}
    kinds = {path: special_kind(path) for path in invocation.special}
    started = time.monotonic()
    process = subprocess.Popen(invocation.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", env=clean_env(invocation.env), cwd=work.tmp,
                               stdin=subprocess.DEVNULL, start_new_session=True,
                               preexec_fn=limited(memory, invocation.umask))
    if invocation.during is not None:
        invocation.during(process)
    timed_out = False
    try:
        _, stderr = process.communicate(timeout=invocation.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
    try:
        os.killpg(process.pid, signal.SIGKILL)  # a rank left behind by the case
    except ProcessLookupError:
        pass
    seconds = time.monotonic() - started
    problems = [f"input changed: {path.name}" for path, seen in before.items() if fingerprint(path) != seen]
    problems += [f"{path.name} is now a {special_kind(path)}, was a {kind}" for path, kind in kinds.items()
                 if special_kind(path) != kind]
    left = invocation.after() if invocation.after is not None else None
    problems += [left] if left else []
    observed = classify(process.returncode, stderr, timed_out)
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return Outcome(case, observed, None if timed_out else process.returncode, problems, seconds, last[:160])


def table(outcomes: list[Outcome]) -> str:
    header = ("case", "expected", "observed", "exit", "s", "result")
    rows = [(outcome.case.name, outcome.case.expected,
             "; ".join([outcome.observed, *outcome.problems]), "-" if outcome.returncode is None
             else str(outcome.returncode), f"{outcome.seconds:.1f}",
             "skip" if outcome.observed == "skipped" else "PASS" if outcome.passed else "FAIL")
            for outcome in outcomes]
    widths = [max(len(row[index]) for row in [header, *rows]) for index in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    return "\n".join([lines[0], "  ".join("-" * width for width in widths), *lines[1:]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="select", default="", help="Only the cases whose name holds this.")
    parser.add_argument("--list", action="store_true", help="List the cases and exit.")
    parser.add_argument("--memory-gib", type=float, default=DEFAULT_MEMORY / GIB,
                        help="Address space per process (RLIMIT_AS).")
    parser.add_argument("--details", action="store_true", help="Print each case's last line of stderr.")
    args = parser.parse_args()
    cases = [case for case in CASES if args.select in case.name]
    if args.list:
        for case in cases:
            print(f"{case.name:32} {case.expected}")
        return 0
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="commbench-adversarial-") as root:
        work = Work(Path(root))
        for case in cases:
            outcome = run_case(case, work, int(args.memory_gib * GIB))
            outcomes.append(outcome)
            print(f"{case.name}: {outcome.observed} ({outcome.seconds:.1f} s)", file=sys.stderr, flush=True)
            if args.details and outcome.detail:
                print(f"    {outcome.detail}", file=sys.stderr)
    print(table(outcomes))
    failed = [outcome for outcome in outcomes if not outcome.passed]
    print(f"\n{len(outcomes) - len(failed)} of {len(outcomes)} cases passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
