"""--check on real gloo groups: every collective x several dtypes and reduce ops at 2, 3 and 4 ranks, the
v-collectives with non-uniform splits, and a corrupted element that must be counted and located.

Each world size is one CLI run over many collectives, dtypes and ops (ranks start once per run)."""

import json
import runpy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from commbench.config.sweep import resolve, run_config
from commbench.measure.collectives import REGISTRY
from commbench.running.runner import PREMUL_BFLOAT16_HINT, run_sweep, sweep_failure
from commbench.writers.output import NullOutput
from tests.corrupting_backend import CorruptingBackend
from tests.dist_helpers import ROOT, collectives_gloo_refuses, commbench, run_ranks

pytestmark = pytest.mark.processes

WITH_PLACEMENTS = {name for name, c in REGISTRY.items() if len(c.placements) > 1}
REDUCING = {name for name, c in REGISTRY.items() if c.reduces}
V_COLLECTIVES = "all_to_allv,reduce_scatter_v,all_gather_v"


def _rows(run_dir: Path) -> tuple[list[dict], dict]:
    payload = json.loads(next(run_dir.glob("*/results.json")).read_text())
    return payload["rows"], payload["meta"]


def _assert_all_right(rows: list[dict]) -> None:
    bad = [(r["collective"], r["dtype"], r["op"], r["placement"], r["mode"], r["size_bytes"], r["wrong"],
            r["first_wrong"], r["error"]) for r in rows if r["wrong"] != 0 or r["error"]]
    assert bad == []


def test_every_collective_two_ranks_both_modes_both_placements(tmp_path):
    # spread:1.0 gives some ranks (and pairs) empty chunks in the v-collectives
    result = commbench(*"--collective all --dtype float32,bfloat16,int8,float64 --placement both --mode both "
                        "--check --splits spread:1.0 --sizes 1K,24K --iters 2 --warmup 1 --nproc 2".split(),
                       "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    rows, meta = _rows(tmp_path)
    _assert_all_right(rows)
    assert meta["status"] == "complete"
    # every collective this torch's gloo runs (all_to_all from torch 2.12); the others named, not measured
    assert meta["unavailable"] == collectives_gloo_refuses()
    assert {r["collective"] for r in rows} == set(REGISTRY) - set(collectives_gloo_refuses())
    assert {r["dtype"] for r in rows} == {"float32", "bfloat16", "int8", "float64"}
    for name in WITH_PLACEMENTS:
        assert {r["placement"] for r in rows if r["collective"] == name} == {"in-place", "out-of-place"}
    assert {r["mode"] for r in rows if r["collective"] == "all_gather_v"} == {"sync", "async"}
    assert {r["mode"] for r in rows if r["collective"] == "ping_pong"} == {"sync"}
    assert "ping_pong runs in sync mode only" in result.stdout
    assert "wrong" in result.stdout  # the tables show the column


def test_the_done_when_command_reduced_three_ranks(tmp_path):
    # The command with sizes 1K and 1M instead of every power of two in between and fewer
    # iterations (the full command is timed in the note); what is checked is the same.
    result = commbench(*"--collective all --dtype float32,bfloat16,int32 --op sum,max --placement both "
                        "--check --sizes 1K:1M:x1024 --iters 2 --warmup 1 --nproc 3".split(),
                       "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    rows, meta = _rows(tmp_path)
    _assert_all_right(rows)
    assert {r["collective"] for r in rows} == set(REGISTRY) - set(collectives_gloo_refuses())
    assert meta["unavailable"] == collectives_gloo_refuses()
    assert {r["op"] for r in rows if r["collective"] in REDUCING} == {"sum", "max"}
    assert {r["world_size"] for r in rows} == {3}
    assert "spread:0.5 splits" in result.stdout  # the default: the v-collectives ran non-uniform


def test_every_reduce_op_four_ranks_splits_from_yaml(tmp_path):
    splits = tmp_path / "splits.yaml"  # uneven, one pair empty
    splits.write_text("splits:\n  - [0, 64K, 8, 8]\n  - [4096, 256, 8, 0]\n  - [8, 8, 8, 8]\n"
                      "  - [16, 1K, 2K, 4K]\n")
    result = commbench(*"--collective all --dtype float16,uint8,int64 --op sum,avg,min,max,prod --check "
                        "--check-every 1 --sizes 4K --iters 2 --warmup 0 --nproc 4 --splits".split(),
                       str(splits), "--output-dir", str(tmp_path / "out"))
    rows, meta = _rows(tmp_path / "out")
    assert meta["unavailable"] == collectives_gloo_refuses()  # left out, not error rows
    # gloo's avg divides in floating point and cannot store the result in an integer tensor
    rejected = [r for r in rows if r["error"]]
    assert {(r["dtype"], r["op"]) for r in rejected} == {("uint8", "avg"), ("int64", "avg")}
    assert all("can't be cast" in r["error"] for r in rejected)
    _assert_all_right([r for r in rows if not r["error"]])
    checked_twice = [r for r in rows if not r["error"] and r["collective"] != "barrier"]
    assert checked_twice and all(len(r["samples_us"]) == 2 for r in checked_twice)
    assert {(r["collective"], r["op"]) for r in rows if r["collective"] in REDUCING} == {
        (name, op) for name in REDUCING for op in ("sum", "avg", "min", "max", "prod")}
    # the largest per-rank byte count: what rank 1 receives (column 1)
    assert {r["size_bytes"] for r in rows if r["collective"] == "all_to_allv"} == {64 * 1024 + 256 + 8 + 1024}
    # the sweep went on past the rejected rows, and the exit status says rows failed
    assert result.returncode == 1
    assert f"{len(rejected)} rows failed (first: " in result.stderr
    assert meta["status"] == "failed" and "rows failed" in meta["error"]


SPLITS_CSV = """# bytes rank i sends rank j
0, 4K, 8
12, 0, 1K
400, 4, 64
"""


def test_uneven_collectives_from_a_csv_file(tmp_path):
    splits = tmp_path / "splits.csv"
    splits.write_text(SPLITS_CSV)
    result = commbench("--collective", V_COLLECTIVES, "--splits", str(splits), "--dtype", "float32,int8",
                       *"--mode both --check --sizes 1M --iters 2 --nproc 3".split(),
                       "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    rows, meta = _rows(tmp_path / "out")
    _assert_all_right(rows)
    assert len(rows) == 3 * 2 * 2
    matrix = [[0, 4096, 8], [12, 0, 1024], [400, 4, 64]]
    assert meta["config"]["split_matrix"] == matrix
    sent = [sum(row) for row in matrix]
    received = [sum(row[j] for row in matrix) for j in range(3)]
    element = {"float32": 4, "int8": 1}
    for row in rows:
        if row["collective"] == "all_to_allv":  # the largest per-rank byte count
            assert row["size_bytes"] == max(sent + received)
        if row["collective"] == "all_gather_v":  # rank r's chunk: the mean of row r
            chunks = [total // (3 * element[row["dtype"]]) for total in sent]
            assert row["size_bytes"] == sum(chunks) * element[row["dtype"]]
            assert row["count_per_rank"] == max(chunks)
    assert "--sizes does not apply" in result.stdout


# --- a corrupted element ---------------------------------------------------------------------------

CORRUPTED = ["all_reduce", "all_gather", "all_gather_base", "reduce_scatter_v", "all_to_allv", "ring"]


def _sweeps_with_one_wrong_element(rank: int, world_size: int) -> dict[str, tuple]:
    """The same corrupted sweep checked once per size (both modes), every 2 iterations, and not at all."""
    backend = CorruptingBackend(bad_rank=1, index=5)
    found = {}
    variants = [("once", True, 0, ["sync", "async"]), ("every 2", True, 2, ["sync"]),
                ("unchecked", False, 0, ["sync"])]
    for name, check, check_every, modes in variants:
        config = resolve(run_config(collectives=CORRUPTED, sizes=[1024], check=check, check_every=check_every,
                                    iters=4, warmup=1, modes=modes, backend="gloo", device="cpu"))
        rows = run_sweep(config, backend, NullOutput())
        found[name] = ([(row.collective, row.mode, row.wrong, row.first_wrong) for row in rows],
                       sweep_failure(rows))
        if name == "once":  # the same wrong rows had they been NCCL's bfloat16 premul_sum
            relabelled = [replace(row, backend="nccl", op="premul_sum", dtype="bfloat16") for row in rows]
            found["as premul"] = sweep_failure(relabelled)
    return found


@pytest.fixture(scope="module")
def corrupted_sweeps() -> list[dict[str, tuple]]:
    return run_ranks(_sweeps_with_one_wrong_element, 2)


def test_a_corrupted_element_is_counted_and_located_in_both_modes(corrupted_sweeps):
    rows, failure = corrupted_sweeps[0]["once"]
    assert corrupted_sweeps[1]["once"] == (rows, failure)  # every rank knows the outcome
    assert [(name, mode) for name, mode, _, _ in rows] == [(name, mode) for name in CORRUPTED
                                                            for mode in ("sync", "async")]
    for name, mode, wrong, first_wrong in rows:
        assert wrong == 1, (name, mode)
        assert first_wrong.startswith("rank 1 index 5: expected "), (name, mode, first_wrong)
    assert failure.startswith(f"{2 * len(CORRUPTED)} rows had wrong values (first: all_reduce (float32, sum, "
                              "in-place, sync) at 1 KiB: 1 wrong element, the first at rank 1 index 5")


def test_wrong_bfloat16_premul_sum_on_nccl_names_the_known_torch_fault(corrupted_sweeps):
    _, failure = corrupted_sweeps[0]["once"]
    assert PREMUL_BFLOAT16_HINT not in failure
    assert corrupted_sweeps[0]["as premul"].endswith("; " + PREMUL_BFLOAT16_HINT)
    assert "pytorch/pytorch#190745" in PREMUL_BFLOAT16_HINT


def test_check_every_counts_the_element_in_each_checked_op(corrupted_sweeps):
    rows, _ = corrupted_sweeps[0]["every 2"]
    assert [wrong for _, _, wrong, _ in rows] == [2] * len(CORRUPTED)  # 4 iterations, a check every 2


def test_without_the_check_the_corruption_goes_unnoticed(corrupted_sweeps):
    # what the check is for: the same corrupted run passes when nothing compares the outputs
    rows, failure = corrupted_sweeps[0]["unchecked"]
    assert [wrong for _, _, wrong, _ in rows] == [None] * len(CORRUPTED) and failure is None


@pytest.mark.cuda
def test_nccl_premul_sum_and_uneven_lists(tmp_path):
    """Every row right, but premul_sum where plain torch is wrong too: torch 2.11 hands NCCL a 4-byte
    float factor for bfloat16 (pytorch/pytorch#190745), and --check must report that, not hide it."""
    nproc = min(2, torch.cuda.device_count())
    result = commbench(*"--backend nccl --device cuda --collective all --op sum,avg,premul_sum --dtype "
                        "float32,bfloat16 --placement both --check --sizes 4K,1M --iters 2 --nproc".split(),
                       str(nproc), "--output-dir", str(tmp_path / "runs"))
    probe = subprocess.run([sys.executable, str(ROOT / "scripts" / "premul_probe.py"), "--nproc",
                            str(nproc), "--json", str(tmp_path / "probe.json")],
                           capture_output=True, text=True, timeout=180)
    assert probe.returncode == 0, probe.stderr[-2000:]
    plain_wrong = {key for key, found in json.loads((tmp_path / "probe.json").read_text()).items()
                   if found["wrong"]}
    calls = runpy.run_path(str(ROOT / "scripts" / "premul_probe.py"))["COMMBENCH_CALLS"]
    rows, _ = _rows(tmp_path / "runs")
    premul = [row for row in rows if row["op"] == "premul_sum"]
    keys = [(f"{calls[row['collective']]} {row['dtype']}", bool(row["wrong"])) for row in premul]
    ours_wrong = {key for key, wrong in keys if wrong}
    assert ours_wrong == plain_wrong & {key for key, _ in keys}
    assert result.returncode == (1 if ours_wrong else 0), result.stderr[-2000:]
    _assert_all_right([row for row in rows if row["op"] != "premul_sum"])
    assert not [row for row in premul if row["error"]]


def test_check_in_strided_groups(tmp_path):
    # two groups of 2 ({0, 2} and {1, 3}) check at once: roots, peers and values are the groups' own
    result = commbench(*"--collective all_reduce,broadcast,all_gather_v,ring,ping_pong --group-size 2 "
                        "--group-layout strided --root 1 --check --sizes 4K --iters 2 --nproc 4".split(),
                       "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    rows, _ = _rows(tmp_path)
    _assert_all_right(rows)
    assert {(r["group_size"], r["group_count"]) for r in rows} == {(2, 2)} and len(rows) == 5
