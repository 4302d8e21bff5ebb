"""Run commbench against what an attacker or a careless user would give it, and print a table.

    python scripts/adversarial.py              # every case
    python scripts/adversarial.py -k fifo      # the cases whose name holds 'fifo'
    python scripts/adversarial.py --list       # the cases' names and what each expects

Every case runs in a process group of its own, bounded by a timeout (the group is killed after it) and
under a memory limit (RLIMIT_AS in the child, inherited by the ranks it starts). What it observed is
one of: ok (exit 0), usage (exit 2 with one line 'commbench: error: ...'), failed (exit 1 with one such
line), traceback, hang (the timeout), memory (MemoryError or killed), or 'exit N' / 'N lines' for
anything else. A case also fails when a file it named as an input changed, or a special file it named
(a character device, a FIFO) is no longer that special file. Exit status: 0 when every case passed.

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
import os
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

    def recording(self) -> Path:
        """A directory of a real two-rank DDP job's Flight Recorder dumps (scripts/record_example.py)."""
        if "recording" not in self._made:
            where = self.root / "made" / "recording"
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                   "--nproc_per_node", "2", str(ROOT / "scripts" / "record_example.py"),
                                   str(where)], capture_output=True, text=True, env=clean_env(), cwd=ROOT,
                                  stdin=subprocess.DEVNULL, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"could not record a real job: {done.stderr[-2000:]}")
            self._made["recording"] = where / "ddp"
        return self._made["recording"]

    def copy_of_recording(self) -> Path:
        target = self.tmp / "recording"
        shutil.copytree(self.recording(), target)
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


# --- the cases --------------------------------------------------------------------------------------

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


def compare_deep_json(work: Work) -> Invocation:
    return commbench("compare", work.write("a.json", deep_json()), work.write("b.json", deep_json()),
                     timeout=60)


def sweep_fifo(work: Work) -> Invocation:
    return commbench("sweep", work.fifo("sweep.yaml"), timeout=60)


def sweep_deep_yaml(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", deep_yaml()), timeout=60)


def sweep_billion_laughs(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", BILLION_LAUGHS), timeout=60)


def sweep_tag_on_plain_value(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", "benchmarks:\n  - iters: !!int abc\n"), timeout=60)


def sweep_impossible_date(work: Work) -> Invocation:
    return commbench("sweep", work.write("sweep.yaml", "benchmarks:\n  - name: 2024-13-45\n"), timeout=60)


def replay_gzip_bomb(work: Work) -> Invocation:
    return commbench("replay", work.write("trace_rank_0.json.gz", gzip_bomb(4 * GIB)), timeout=90)


def report_over_its_input(work: Work) -> Invocation:
    run = work.copy_of_run()
    return commbench("report", run / "results.json", "-o", run / "results.json", keep=[run / "results.json"],
                     timeout=90)


def run_csv_to_null_device(work: Work) -> Invocation:
    null = work.null_device("null")
    if null is None:
        return Invocation([], skip="mknod needs root")
    return commbench(*TINY_RUN, "--csv", null, "--json", work.tmp / "results.json", special=[null])


def run_json_to_null_device(work: Work) -> Invocation:
    null = work.null_device("null")
    if null is None:
        return Invocation([], skip="mknod needs root")
    return commbench(*TINY_RUN, "--json", null, "--csv", work.tmp / "results.csv", special=[null])


CASES = [
    Case("compare-fifo", USAGE, compare_fifo),
    Case("compare-dev-zero", USAGE, compare_dev_zero),
    Case("compare-run-dir-fifo", USAGE, compare_directory_with_fifo),
    Case("load-fifo", USAGE, load_fifo),
    Case("compare-deep-json", USAGE, compare_deep_json),
    Case("sweep-fifo", USAGE, sweep_fifo),
    Case("sweep-deep-yaml", USAGE, sweep_deep_yaml),
    Case("sweep-billion-laughs", USAGE, sweep_billion_laughs),
    Case("sweep-yaml-tag", USAGE, sweep_tag_on_plain_value),
    Case("sweep-yaml-bad-date", USAGE, sweep_impossible_date),
    Case("replay-gzip-bomb", USAGE, replay_gzip_bomb),
    Case("report-over-input", USAGE, report_over_its_input),
    Case("run-csv-null-device", OK, run_csv_to_null_device),
    Case("run-json-null-device", OK, run_json_to_null_device),
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


def limited(memory: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return apply


def classify(returncode: int | None, stderr: str, timed_out: bool) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    if timed_out:
        return "hang"
    if "Traceback (most recent call last)" in stderr:
        return "memory" if "MemoryError" in stderr else "traceback"
    if returncode in (-signal.SIGKILL, 128 + signal.SIGKILL, -signal.SIGSEGV):
        return "memory"
    errors = [line for line in lines if line.startswith("commbench: error:")]
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
                               stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=limited(memory))
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
