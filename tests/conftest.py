"""Shared test set-up.

- Every test that starts a process carries the `processes` marker, so `pytest -m "not processes"` is a
  loop of seconds; a test without it that starts one fails, naming the marker.
- Runs shared by the analysis tests (compare, plot, report, formats, fits): the same two-benchmark sweep
  run twice by the real CLI, once as `sweep FILE` in nccl-tests format and once as `--config FILE` in
  JSON-lines format. Session-scoped: made once, only when a test asks for them.
"""

import multiprocessing.process
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dist_helpers import ROOT, commbench

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


class _ProcessGuard:
    """Refuses to start a process while a test without the `processes` marker runs (its fixtures too:
    set before any of them, in the setup hook)."""

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
