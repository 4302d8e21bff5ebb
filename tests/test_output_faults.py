"""Where a run's output goes away under it: a closed stdout (`commbench ... | head -2`) stops the run
quietly with its files whole and its status saying why; a file that cannot grow (a full disk, here the
file size limit, which fails a write as a full disk does) keeps the CSV and the JSON alike and says so,
instead of blaming a lost store."""

import json
import resource
import subprocess
import sys

import pytest

from tests.dist_helpers import ROOT, launcherless_env
from tests.process_helpers import csv_rows, rank_processes, wait_until_gone

pytestmark = pytest.mark.processes

SWEEP = ["--collective", "all_reduce", "--iters", "2", "--warmup", "0"]
# A table a pass, so that rank 0 writes to stdout again and again while the ranks still measure.
PASSES = ["--sizes", "1K,2K", "--repeat", "100"]
MANY_SIZES = ["--sizes", "1K:2000K:+1K"]
NOT_SAID = ("frame #", "Traceback", "lost the rendezvous store")


def _run(tmp_path, *extra: str, **options) -> subprocess.Popen:
    files = ["--csv", str(tmp_path / "r.csv"), "--json", str(tmp_path / "r.json"),
             "--output-dir", str(tmp_path)]  # the run's directory (Flight Recorder dumps) too
    return subprocess.Popen([sys.executable, "-m", "commbench", *SWEEP, *extra, *files],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=launcherless_env(),
                            cwd=ROOT, stdin=subprocess.DEVNULL, **options)


def _files_alike(tmp_path) -> dict:
    payload = json.loads((tmp_path / "r.json").read_text())
    rows = csv_rows(tmp_path / "r.csv")
    assert rows and [int(row["size_bytes"]) for row in rows] == [row["size_bytes"] for row in payload["rows"]]
    return payload["meta"]


def test_a_closed_stdout_stops_the_run_quietly_with_its_files_whole(tmp_path):
    proc = _run(tmp_path, *PASSES)
    ranks = rank_processes(proc.pid, 2)
    try:
        # what `| head -N` reads before it exits, N the lines up to the end of the first table
        first = [proc.stdout.readline()]
        while first[-1] and not first[-1].startswith("└") and len(first) < 40:
            first.append(proc.stdout.readline())
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert first[0].startswith("commbench ") and proc.returncode == 141, stderr  # 128 + SIGPIPE
    assert not any(words in stderr for words in NOT_SAID), stderr
    meta = _files_alike(tmp_path)
    assert (meta["status"], meta["error"]) == ("interrupted", "stopped by SIGPIPE (stdout was closed)")
    assert wait_until_gone(list(ranks.values()), 10) == []


def _file_size_limit() -> None:  # in the child, before it starts: 128 KiB per file
    resource.setrlimit(resource.RLIMIT_FSIZE, (128 << 10, 128 << 10))


def test_a_file_that_cannot_grow_keeps_both_files_alike_and_says_why(tmp_path):
    proc = _run(tmp_path, *MANY_SIZES, "--quiet", preexec_fn=_file_size_limit)
    try:
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr
    said = [line for line in stderr.splitlines() if line.startswith("commbench: error: rank 0 could not")]
    kept = len(csv_rows(tmp_path / "r.csv"))
    # the line may go on with where the ranks' Flight Recorder dumps are and diagnose's verdict on them
    assert len(said) == 1 and said[0].startswith(
        f"commbench: error: rank 0 could not write {tmp_path / 'r.json'}: File too large (the file size "
        f"limit (ulimit -f) is reached); the files keep the {kept} rows measured before"), stderr
    assert said[0].endswith("measured before") or "measured before; Flight Recorder dumps in " in said[0]
    assert not any(words in stderr for words in NOT_SAID), stderr
    meta = _files_alike(tmp_path)
    assert meta["status"] == "failed" and "the file size limit" in meta["error"]
