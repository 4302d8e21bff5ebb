"""Runs made of chosen pass times, for the regression gate's fast tests and scripts/gate_rates.py: a
point is a (collective, size), its passes rows of that key (one per --repeat pass), each with the p50
given. The gate then judges them as it judges saved runs: `compare_runs` joins the sides and
`slowdowns` decides, or `compare_command` reads files and returns the exit status."""

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from commbench.analysis.compare import compare_runs
from commbench.analysis.gate import slowdowns
from commbench.results.model import Row
from commbench.results.saved import SavedRun

Point = tuple[str, int]  # (collective, size in bytes)


def pass_row(point: Point, p50_us: float, repeat: int) -> Row:
    """One pass of one point, as a 2-rank gloo sweep saves it (only the p50 is what the gate reads)."""
    collective, size = point
    return Row(collective=collective, backend="gloo", device="cpu", world_size=2, dtype="float32",
               mode="sync", op="sum" if collective == "all_reduce" else "", size_bytes=size,
               requested_bytes=size, count_per_rank=size // 4, iters=20, warmup=2, time_us_p50=p50_us,
               time_us_p95=p50_us, time_us_min=p50_us, time_us_max=p50_us, time_us_mean=p50_us,
               algbw_gbps=size / p50_us / 1e3, busbw_gbps=size / p50_us / 1e3, busbw_factor=1.0,
               repeat=repeat)


def saved_run(points: Mapping[Point, Sequence[float]], name: str = "run") -> SavedRun:
    """A complete run whose points have these pass p50s (microseconds), passes in order."""
    rows = [pass_row(point, float(p50), repeat) for point, p50s in points.items()
            for repeat, p50 in enumerate(p50s)]
    return SavedRun(meta={"run_id": name, "status": "complete", "backend": "gloo", "device": "cpu",
                          "world_size": 2}, rows=rows, path=Path(f"{name}.json"))


def write_run(path: Path, points: Mapping[Point, Sequence[float]]) -> Path:
    """The run of ``saved_run`` as a results.json file."""
    run = saved_run(points, path.stem)
    path.write_text(json.dumps({"meta": run.meta, "rows": [dataclasses.asdict(row) for row in run.rows]}))
    return path


def side(passes: np.ndarray, collective: str = "all_reduce") -> dict[Point, list[float]]:
    """A run's points from a [point][pass] array of p50s: point i is ``collective`` at 1 KiB x 2^i."""
    return {(collective, 1024 << index): list(row) for index, row in enumerate(passes)}


def gate_fails(base: np.ndarray, new: np.ndarray, fail_above_pct: float, level: float = 0.05) -> bool:
    """Whether `compare --fail-above PCT` finds a slowdown between two runs of [point][pass] p50s."""
    comparison = compare_runs(saved_run(side(base), "base"), saved_run(side(new), "new"), level)
    return bool(slowdowns(comparison, fail_above_pct))
