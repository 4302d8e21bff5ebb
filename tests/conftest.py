"""Runs shared by the analysis tests (compare, plot, report, formats, fits): the same two-benchmark
sweep run twice by the real CLI, once as `sweep FILE` in nccl-tests format and once as `--config FILE`
in JSON-lines format. Session-scoped: made once, only when a test asks for them."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dist_helpers import ROOT, commbench
from tests.replay_helpers import Recordings

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
