"""Shared test set-up.

- Every test that starts a process carries the `processes` marker, so `pytest -m "not processes"` is a
  loop of seconds; a test without it that starts one fails, naming the marker.
- Runs shared by the analysis tests (compare, plot, report, formats, fits, load): the same two-benchmark
  sweep run twice by the real CLI, once as `sweep FILE` in nccl-tests format and once as `--config FILE`
  in JSON-lines format; two tiny runs of six collectives; a tiny run of one other collective; a run of
  ten passes (--repeat 10) for the regression gate.
  Session-scoped: made once, only when a test asks for them; a test that asks for one is marked
  `processes` (RUN_FIXTURES).
- Recordings of real torch programs and their replays (`recordings`, tests/replay_helpers.py).
- The suite runs gloo on CPU on any machine: CUDA is hidden (CUDA_VISIBLE_DEVICES="", set before
  torch is imported, so the processes the tests start inherit it) unless COMMBENCH_TEST_CUDA=1, which
  keeps the GPUs for the CUDA-only tests (scripts/gpu_check.sh runs those). On a GPU workstation the
  CLI's defaults would otherwise be NCCL on CUDA, and two local ranks on one GPU.
- Property-based tests (hypothesis) have no deadline (a loaded machine makes any example slow) and skip
  the too-slow health check for the same reason; under CI=true they draw the same examples every run
  (derandomize), so a landing never depends on which examples a run happened to draw, while a
  developer's runs keep exploring.
- A test that needs a GPU carries the `cuda` marker: where torch sees none it is skipped, and the summary
  says how many such tests did not run and why, so that a leg without a GPU does not pass them silently.
"""

import os

if os.environ.get("COMMBENCH_TEST_CUDA") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

import multiprocessing.process  # noqa: E402 - after the device choice above
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch.cuda  # noqa: F401 - see _ProcessGuard
from hypothesis import HealthCheck, settings

from commbench.core.words import plural
from tests.dist_helpers import ROOT, commbench
from tests.netns import netns_cluster  # noqa: F401 - the test-hosts fixture, for every test module
from tests.replay_helpers import Recordings

settings.register_profile("commbench", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=os.environ.get("CI", "").lower() == "true")
settings.load_profile("commbench")

SWEEP = ROOT / "tests" / "data" / "two_benchmarks.yaml"
ITERS = "30"  # overrides the file's 5 and 7: enough samples per row for the rank test


@dataclass
class SavedRunFiles:
    json: Path
    csv: Path
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[SavedRunFiles, SavedRunFiles]:
    where = tmp_path_factory.mktemp("runs")
    made = []
    for name, entry, output_format in (("a", ["sweep", str(SWEEP)], "nccl-tests"),
                                       ("b", ["--config", str(SWEEP)], "jsonl")):
        json_path, csv_path = where / f"{name}.json", where / f"{name}.csv"
        result = commbench(*entry, "--iters", ITERS, "--format", output_format, "--json", str(json_path),
                           "--csv", str(csv_path))
        assert result.returncode == 0, result.stderr
        made.append(SavedRunFiles(json_path, csv_path, result.stdout, result.stderr))
    return made[0], made[1]


@pytest.fixture(scope="session")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    """Real programs' recordings and their replays (tests/replay_helpers.py), each made on first use."""
    return Recordings(tmp_path_factory.mktemp("recordings"))


SIX_COLLECTIVES = "all_reduce,all_gather_base,reduce_scatter_base,broadcast,all_to_all_single,reduce"
TINY = ("--iters", "3", "--warmup", "1", "--quiet")


def _tiny_run(where: Path, name: str, *args: str) -> SavedRunFiles:
    json_path, csv_path = where / f"{name}.json", where / f"{name}.csv"
    result = commbench(*args, *TINY, "--json", str(json_path), "--csv", str(csv_path))
    assert result.returncode == 0, result.stderr
    return SavedRunFiles(json_path, csv_path, result.stdout, result.stderr)


@pytest.fixture(scope="session")
def six_collective_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[SavedRunFiles, SavedRunFiles]:
    """Two tiny runs of six collectives in both modes; the second adds a size (16 KiB), so some of its
    rows are in one file only."""
    where = tmp_path_factory.mktemp("six")
    return (_tiny_run(where, "six_a", "--collective", SIX_COLLECTIVES, "--mode", "both", "--sizes", "1K,4K"),
            _tiny_run(where, "six_b", "--collective", SIX_COLLECTIVES, "--mode", "both",
                      "--sizes", "1K,4K,16K"))


@pytest.fixture(scope="session")
def reduce_scatter_run(tmp_path_factory: pytest.TempPathFactory) -> SavedRunFiles:
    """A tiny run of a collective the six-collective runs do not measure, at their sizes."""
    where = tmp_path_factory.mktemp("rs")
    return _tiny_run(where, "rs", "--collective", "reduce_scatter", "--sizes", "1K,4K")


@pytest.fixture(scope="session")
def repeated_run(tmp_path_factory: pytest.TempPathFactory) -> SavedRunFiles:
    """One run of ten passes (--repeat 10) of two collectives at three sizes: what the gate judges."""
    where = tmp_path_factory.mktemp("repeated")
    json_path, csv_path = where / "repeated.json", where / "repeated.csv"
    result = commbench("--collective", "all_reduce,reduce_scatter_base", "--sizes", "1K,16K,256K", "--iters",
                       "20", "--warmup", "2", "--repeat", "10", "--quiet", "--json", str(json_path), "--csv",
                       str(csv_path))
    assert result.returncode == 0, result.stderr
    return SavedRunFiles(json_path, csv_path, result.stdout, result.stderr)


RUN_FIXTURES = {"two_runs", "six_collective_runs", "reduce_scatter_run", "repeated_run", "recordings"}


def _why_no_gpu() -> str | None:
    """Why the `cuda` tests cannot run here, or None when torch sees a GPU."""
    if os.environ.get("COMMBENCH_TEST_CUDA") != "1":
        return "CUDA is hidden from the suite (COMMBENCH_TEST_CUDA=1 keeps it)"
    import torch

    return None if torch.cuda.is_available() else "torch sees no GPU here"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for a saved run starts real CLI runs (once per session): it is a processes test.
    A `cuda` test is skipped, naming why, where there is no GPU to run it on."""
    needs_gpu = [item for item in items if item.get_closest_marker("cuda") is not None]
    why = _why_no_gpu() if needs_gpu else None
    for item in items:
        if isinstance(item, pytest.Function) and RUN_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.processes)
    if why is not None:
        for item in needs_gpu:
            item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {why}"))


@pytest.hookimpl(trylast=True)  # after the short summary, beside the counts
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many tests need a GPU and did not run: CI's legs have none, and must say so."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if "cuda" in getattr(report, "keywords", {})]
    if skipped:
        verb = "needs" if len(skipped) == 1 else "need"
        terminalreporter.write_line(f"{plural(len(skipped), 'test')} {verb} a GPU and did not run: "
                                    f"{_why_no_gpu() or 'skipped'}; scripts/gpu_check.sh runs them on one")


class _ProcessGuard:
    """Refuses to start a process while a test without the `processes` marker runs (its fixtures too:
    set before any of them, in the setup hook). torch 2.14's CUDA build runs ldconfig the first time
    torch.cuda is imported: this module imports it, so no test that touches it first is refused."""

    def __init__(self) -> None:
        self.test: str | None = None  # the unmarked test running now, if any
        self._popen_init = subprocess.Popen.__init__
        self._process_start = multiprocessing.process.BaseProcess.start

    def install(self) -> None:
        guard = self

        def popen_init(popen: subprocess.Popen, *args: object, **kwargs: object) -> None:
            guard.check()
            guard._popen_init(popen, *args, **kwargs)

        def process_start(process: multiprocessing.process.BaseProcess) -> None:
            guard.check()
            guard._process_start(process)

        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = process_start  # type: ignore[method-assign]

    def check(self) -> None:
        if self.test is not None:
            raise AssertionError(f"{self.test} starts a process: mark it @pytest.mark.processes")


_GUARD = _ProcessGuard()


def pytest_sessionstart(session: pytest.Session) -> None:
    _GUARD.install()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _GUARD.test = None if item.get_closest_marker("processes") is not None else item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _GUARD.test = None
