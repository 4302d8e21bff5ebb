"""Provenance in real runs: per-host hardware in the JSON of a run whose ranks report two host names,
--expect verdicts and --fail-below's exit status on CPU ranks, --nccl-debug's variables, the report."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.analysis.report import report_command
from commbench.provenance.baselines import load_baselines
from commbench.provenance.peaks import run_peak
from commbench.running.spawn import free_port
from tests.dist_helpers import ROOT, commbench, launcherless_env

pytestmark = pytest.mark.processes
TINY = ["--collective", "all_reduce", "--iters", "2", "--warmup", "1", "--timeout", "60"]


def _payload(directory: Path) -> dict:
    (path,) = directory.glob("*/results.json")
    return json.loads(path.read_text())


def test_a_runs_json_holds_hardware_for_every_host(tmp_path):
    """Four ranks started as a launcher would, two per host name (COMMBENCH_HOSTNAME)."""
    port, procs = str(free_port()), []
    command = [sys.executable, "-m", "commbench", *TINY, "--sizes", "4K", "--nccl-debug", "--output-dir",
               str(tmp_path)]
    for rank, host in enumerate(["node-a", "node-a", "node-b", "node-b"]):
        env = launcherless_env({"RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_RANK": str(rank % 2),
                                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "COMMBENCH_HOSTNAME": host})
        procs.append(subprocess.Popen(command, env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL))
    outputs = [proc.communicate(timeout=180) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 4, [err for _, err in outputs]
    meta = _payload(tmp_path)["meta"]
    assert meta["hostnames"] == ["node-a", "node-a", "node-b", "node-b"]
    assert set(meta["hardware"]) == {"node-a", "node-b"}
    for record in meta["hardware"].values():  # each probed by the first rank of its host name
        assert record["host"] == socket.gethostname() and record["cpu"]["logical_cpus"] == os.cpu_count()
        assert "lo" in {interface["name"] for interface in record["network"]}
    assert "hardware: 2 hosts (node-a, node-b): " in outputs[0][0]
    # every row carries the peak the rule gives for the recorded hardware (across hosts: the NIC's speed)
    peak = run_peak(meta["hardware"], meta["hostnames"], meta["groups"]["members"], "cpu", load_baselines())
    for row in _payload(tmp_path)["rows"]:
        assert row["peak_gbps"] == (None if peak is None else round(peak.gbps, 4))
    # --nccl-debug set NCCL's variables before the start; gloo wrote no log, and that is said
    assert meta["env"]["NCCL_DEBUG"] == "INFO" and meta["env"]["NCCL_DEBUG_SUBSYS"] == "INIT,TUNING,COLL,REG"
    assert meta["nccl_log"]["files"] == [] and "no NCCL log was written" in outputs[0][0]
    assert not list(tmp_path.glob(".nccl-*"))  # the staging directories are gone


# A floor any working CPU run passes (100 KB/s busbw from 64 KiB up), and a row below 64 KiB gets no verdict:
# the verdicts come from this file's entry, not from a figure of real hardware.
CPU_FLOOR = """\
description: gloo on CPU ranks of one host, a floor any working run passes
source: tests/test_provenance_runs.py
expect:
  - {device: cpu, min_size: 64K, busbw_gbps: 0.0001}
"""


@pytest.fixture(scope="module")
def passing_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    where = tmp_path_factory.mktemp("passing")
    baseline = where / "cpu-floor.yaml"
    baseline.write_text(CPU_FLOOR)
    result = commbench(*TINY, "--sizes", "32K,64K,128K", "--expect", str(baseline), "--fail-below", "50",
                       "--output-dir", str(where / "out"))
    return result, where / "out"


def test_a_cpu_baseline_passes_and_the_summary_is_recorded(passing_run):
    result, where = passing_run
    assert result.returncode == 0, result.stderr
    payload = _payload(where)
    rows, expectations = payload["rows"], payload["meta"]["expectations"]
    assert [row["verdict"] for row in rows] == ["", "PASS", "PASS"]  # 32 KiB: below the entry's min_size
    assert [row["expected_gbps"] for row in rows] == [None, 0.0001, 0.0001]
    assert all(row["peak_source"].startswith("loopback") for row in rows)
    assert all(row["pct_of_peak"] == pytest.approx(100 * row["busbw_gbps"] / row["peak_gbps"], abs=0.01)
               for row in rows)
    assert (expectations["PASS"], expectations["FAIL"], expectations["baseline"]) == (2, 0, "cpu-floor")
    assert "verdicts against baseline cpu-floor" in result.stdout and "2 PASS" in result.stdout


@pytest.mark.parametrize("fail_below, status", [(["--fail-below", "50"], 1), ([], 0)],
                         ids=["fail-below", "expect-alone"])
def test_an_absurd_baseline_fails_rows_and_only_fail_below_fails_the_run(tmp_path, fail_below, status):
    baseline = tmp_path / "absurd.yaml"
    baseline.write_text("description: faster than any machine\nexpect:\n  - {busbw_gbps: 1000000}\n")
    result = commbench(*TINY, "--sizes", "64K,128K", "--expect", str(baseline), *fail_below,
                       "--output-dir", str(tmp_path / "out"))
    assert result.returncode == status, result.stderr
    payload = _payload(tmp_path / "out")
    assert [row["verdict"] for row in payload["rows"]] == ["FAIL", "FAIL"]  # every row kept
    if status:
        message = result.stderr.strip().splitlines()[-1]  # after the spawner's 'starting ...' line
        assert message.startswith("commbench: error: 2 of 2 judged rows below --fail-below 50% (first: "
                                  "all_reduce (float32, sum, in-place, sync) at 64 KiB: busbw ")
        assert payload["meta"]["status"] == "failed" and "Traceback" not in result.stderr
    else:
        assert payload["meta"]["status"] == "complete" and "2 FAIL" in result.stdout


def test_the_report_shows_hardware_and_percent_of_peak(passing_run, tmp_path):
    pytest.importorskip("matplotlib")
    _, where = passing_run
    (path,) = where.glob("*/results.json")
    report_command([str(path)], str(tmp_path / "report.html"))
    page = (tmp_path / "report.html").read_text()
    assert "hardware by host" in page and f"<td>{socket.gethostname()}</td>" in page
    assert "busbw against the peak" in page and "loopback (nominal" in page and "2 PASS" in page
