"""Sweep files: real runs of `sweep FILE` and `--config FILE`, the shipped configs, and every bad file
reported as FILE:LINE: key: problem with exit status 2 before anything starts."""

import json
from pathlib import Path

import click
import pytest

from commbench.cli import main
from commbench.cli.run import command_line_configs, run
from commbench.config.launch import LaunchConfig
from commbench.config.options import declared
from commbench.config.sweep import RunConfig
from commbench.config.sweepfile import field_keys
from tests.dist_helpers import ROOT, commbench


def _configs(path: Path, **typed: object) -> list[RunConfig]:
    """The benchmarks of a sweep file with ``typed`` as the fields typed on the command line."""
    return command_line_configs(str(path), dict(typed), ["sweep", str(path)])


@pytest.mark.processes
def test_one_run_of_a_sweep_writes_every_benchmark_to_one_file(two_runs):
    for saved in two_runs:
        payload = json.loads(saved.json.read_text())
        rows, meta = payload["rows"], payload["meta"]
        assert meta["status"] == "complete"
        assert [b["name"] for b in meta["benchmarks"]] == ["gate", "rooted"]
        assert {(row["benchmark"], row["collective"]) for row in rows} == {
            ("gate", "all_reduce"), ("gate", "all_gather_base"), ("rooted", "broadcast")}
        # --iters 30 on the command line beats the file's defaults (5) and the benchmark's own 7
        assert {row["iters"] for row in rows} == {30}
        assert {row["warmup"] for row in rows} == {1}  # from the file's defaults
        assert {row["root"] for row in rows if row["collective"] == "broadcast"} == {1}
        assert {row["root"] for row in rows if row["collective"] != "broadcast"} == {-1}
        assert {row["size_bytes"] for row in rows if row["benchmark"] == "rooted"} == {65536, 262144}
        assert len(rows) == 2 * 4 * 2 + 2  # gate: 2 collectives x 4 sizes x 2 modes; rooted: 2 sizes


@pytest.mark.processes
def test_smoke_config_finishes(tmp_path):
    result = commbench("sweep", str(ROOT / "configs" / "smoke.yaml"), "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (run_dir,) = tmp_path.iterdir()
    rows = json.loads((run_dir / "results.json").read_text())["rows"]
    assert {(row["collective"], row["mode"]) for row in rows} == {
        (c, m) for c in ("all_reduce", "reduce_scatter_base", "all_gather_base") for m in ("sync", "async")}
    assert "smoke · all_reduce · float32 · op sum" in result.stdout
    assert result.stdout.count("α-β fit: α = ") == 6  # one per collective and mode, under the tables


# baselines.yaml ships beside the sweep files but is --expect's data (commbench.provenance), not a sweep.
SWEEP_FILES = sorted(path for path in (ROOT / "configs").glob("*.yaml") if path.name != "baselines.yaml")


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.name)
def test_every_shipped_config_is_valid(path):
    configs = _configs(path)
    assert configs and all(config.collectives and config.sizes for config in configs)
    assert all(config.launch.argv == ["sweep", str(path)] for config in configs)


def test_shipped_configs_cover_the_documented_sweeps():
    fsdp = _configs(ROOT / "configs" / "fsdp.yaml")
    assert {c for config in fsdp for c in config.collectives} == {"reduce_scatter_base", "all_gather_base"}
    assert "bfloat16" in fsdp[0].dtypes
    assert max(_configs(ROOT / "configs" / "latency.yaml")[0].sizes) <= 64 * 1024
    assert min(_configs(ROOT / "configs" / "bandwidth.yaml")[0].sizes) >= 16 * 1024**2


def test_every_declared_option_and_run_option_is_a_key():
    keys = field_keys()
    assert {item.name for item in (*declared(RunConfig), *declared(LaunchConfig))} <= set(keys)
    assert {"argv", "all_collectives", "split_matrix", "launch"}.isdisjoint(keys)  # set by the program
    spelled = {opt[2:] for param in run.params if isinstance(param, click.Option) for opt in param.opts
               if opt.startswith("--")} - {"config"}
    assert spelled <= set(keys)


def test_values_take_the_command_lines_forms_and_yaml_lists(tmp_path):
    path = tmp_path / "forms.yaml"
    path.write_text("defaults:\n  dtype: float32,bf16\n  timeout: 50\nbenchmarks:\n"
                    "  - collective: all_reduce,broadcast\n    sizes: 4:16\n    mode: both\n"
                    "  - collectives: [all_gather_base]\n    sizes: [8:32, 1K, 4096]\n    op: max\n")
    first, second = _configs(path)
    assert first.sizes == [4, 8, 16]  # not YAML 1.1's sexagesimal 4:16 = 256
    assert first.collectives == ["all_reduce", "broadcast"] and first.modes == ["sync", "async"]
    assert first.dtypes == ["float32", "bfloat16"] and first.launch.timeout_s == 50.0
    assert second.sizes == [8, 16, 32, 1024, 4096] and second.ops == ["max"]


def test_command_line_options_override_the_file(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text("defaults:\n  iters: 0\nbenchmarks:\n  - collectives: [all_reduce]\n    warmup: 9\n")
    (config,) = _configs(path, iters=3, warmup=2)  # the file's iters: 0 alone would be refused
    assert (config.iters, config.warmup) == (3, 2)


# A valid file: the cases add a line to its benchmark, or put a `defaults:` block before it.
ONE = "benchmarks:\n  - collectives: [all_reduce]\n"

# (file text, the line the message must name, what it must say)
BAD_FILES = [
    (ONE + "    itres: 3\n", 3, "itres: unknown key (did you mean iters?)"),
    ("defaults:\n  iters: many\n" + ONE, 2, "iters: expected an integer, got 'many'"),
    (ONE + "    sizes: [1K, 12Q]\n", 3, "sizes: malformed size '12Q'"),
    ("benchmarks:\n  - collectives: [all_redcue]\n", 2,
     "collectives: unknown collective 'all_redcue' (did you mean all_reduce?)"),
    (ONE + "\n    dtypes: [float7]\n", 4, "dtypes: unknown dtype 'float7'"),
    (ONE + "    backend: gloo\n", 3, "backend: applies to the whole run"),
    ("benchmarks:\n  - collectives: [all_reduce\n", 3, "not valid YAML"),
    ("benchmark:\n  - collectives: [all_reduce]\n", 1,
     "benchmark: unknown top-level key (did you mean benchmarks?)"),
    ("iters: 3\n" + ONE, 1, "settings go under defaults"),
    ("defaults:\n  iters: 3\n", 1, "no `benchmarks:` list"),
    ("benchmarks: []\n", 1, "benchmarks: expected a list of benchmarks"),
    ("benchmarks:\n  - all_reduce\n", 2, "benchmark: expected a mapping"),
    ("benchmarks:\n  - collective: all_reduce\n    collectives: [broadcast]\n", 3,
     "collectives: sets collectives again (already set by 'collective' on line 2)"),
    (ONE + "    iters: 2\n    iters: 3\n", 4, "iters: repeated key (first on line 3)"),
    ("benchmarks:\n  - collectives: {all_reduce: 1}\n", 2,
     "collectives: expected a list or a comma-separated"),
    (ONE + "    quiet: 3\n", 3, "quiet: applies to the whole run"),
    ("defaults:\n  quiet: 3\n" + ONE, 2, "quiet: expected true or false"),
    ("defaults:\n  mode: eager\n" + ONE, 2, "mode: unknown mode 'eager'"),
    ("defaults:\n  format: xml\n" + ONE, 2, "format: unknown format 'xml'"),
    ("benchmarks:\n  - name: a\n    collectives: [all_reduce]\n  - name: a\n    collectives: [broadcast]\n",
     4, "name: benchmark 'a' is already on line 2"),
    ("", 1, "the sweep file is empty"),
    ("benchmarks:\n  - collectives: all_reduce,,reduce\n", 2,
     "collectives: 'all_reduce,,reduce': an empty name in the comma list"),
]


@pytest.mark.parametrize("text, line, message", BAD_FILES, ids=[m for _, _, m in BAD_FILES])
def test_bad_file_names_file_line_and_key(tmp_path, capsys, text, line, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["sweep", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"commbench: error: {path}:{line}: "), lines[0]
    assert message in lines[0]
    assert captured.out == ""


@pytest.mark.processes
@pytest.mark.parametrize("entry", [["sweep"], ["--config"]], ids=["sweep FILE", "--config FILE"])
def test_bad_file_through_the_real_cli_exits_2_before_any_rank_starts(tmp_path, entry):
    path = tmp_path / "bad.yaml"
    path.write_text("defaults:\n  iters: 20\nbenchmarks:\n  - collectives: [all_reduce]\n    sizes: 1M:1K\n")
    result = commbench(*entry, str(path), "--collective", "broadcast", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"commbench: error: {path}:5: sizes: size range '1M:1K': minimum 1M is "
                                     "above maximum 1K")
    assert result.stdout == ""


def test_missing_file(capsys):
    assert main(["sweep", "no/such.yaml"]) == 2
    assert "no/such.yaml: no such sweep file" in capsys.readouterr().err
