"""explain on real gloo runs of this machine: the line under the table, the explain part of results.json,
`commbench explain` and the report's section all name a bound measured here (one thread's memory copy
rate, recorded at start), and ranks pinned to fewer CPUs than there are ranks are named as
oversubscribed. Runs are small (2 ranks, three sizes) and every process ends with its run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dist_helpers import ROOT, commbench, launcherless_env

pytestmark = pytest.mark.processes
SIZES = ("--sizes", "256K:4M:x4", "--time-per-size", "0.1", "--collective", "all_reduce")


def saved(output_dir: Path) -> dict:
    [path] = output_dir.glob("*/results.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    output_dir = tmp_path_factory.mktemp("explained")
    done = commbench("--backend", "gloo", "--nproc", "2", *SIZES, "--output-dir", str(output_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    return done, output_dir


def test_a_gloo_run_is_explained_against_this_machines_memory_copy(gloo_run):
    done, output_dir = gloo_run
    payload = saved(output_dir)
    [record] = payload["meta"]["hardware"].values()
    copy = record["memory_copy"]["gbps"]
    cpus = record["load"]["usable_cpus"]
    [series] = payload["explain"]["series"]
    best = series["best"]
    assert best["algorithm"] == "GLOO" and "memory copy" in best["limit"]
    assert best["gbps"] == pytest.approx(copy / 2 * min(1.0, cpus / 2), rel=1e-3)
    [line] = [line for line in done.stdout.splitlines() if "explain:" in line]
    assert "at 4 MiB: " in line and f"% of what gloo allows here ({best['gbps']:.3g}" in line
    headline = series["rows"][-1]
    assert headline["size_bytes"] == 4 << 20 and headline["pct_of_best"] == pytest.approx(
        100 * headline["busbw_gbps"] / best["gbps"], rel=1e-3)


def test_the_explain_command_reads_the_saved_run(gloo_run):
    _, output_dir = gloo_run
    done = commbench("explain", str(output_dir), "--size", "4M")
    assert done.returncode == 0, done.stderr
    assert "memory copy" in done.stdout and "reasons at 4 MiB sync" in done.stdout
    refused = commbench("explain", str(output_dir), "--collective", "all_gather")
    assert refused.returncode == 2 and "holds all_reduce" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_report_has_an_explain_section(gloo_run, tmp_path):
    _, output_dir = gloo_run
    page = tmp_path / "report.html"
    done = commbench("report", str(output_dir), "--output", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "explain: what this hardware allows" in text and "memory copy" in text


def test_more_ranks_than_usable_cpus_are_named_oversubscribed(tmp_path):
    """Two ranks pinned to one CPU (the affinity a scheduler would set), whatever this machine has."""
    cpu = min(os.sched_getaffinity(0))
    done = subprocess.run([sys.executable, "-m", "commbench", "--backend", "gloo", "--nproc", "2", *SIZES,
                           "--output-dir", str(tmp_path)], capture_output=True, text=True, timeout=240,
                          env=launcherless_env(), cwd=ROOT, stdin=subprocess.DEVNULL,
                          preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert done.returncode == 0, done.stderr[-2000:]
    [series] = saved(tmp_path)["explain"]["series"]
    oversubscribed = [reason for reason in series["reasons"] if reason["rule"] == "oversubscribed"]
    assert oversubscribed and "2 ranks on 1 usable CPU" in oversubscribed[0]["text"]
    assert "x 1/2 (CPUs per rank)" in series["best"]["formula"]
