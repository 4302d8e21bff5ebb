"""torchrun prefix-matches its own options, even after `-m commbench`: ours must never be a prefix."""

import json
import pickle

import click
import pytest
from torch.distributed.run import get_args_parser

from commbench.cli import cli
from tests.dist_helpers import torchrun

ONLY_WITHOUT_A_LAUNCHER = {"--nproc"}  # torchrun's own --nproc-per-node is the launcher's word for it


def _torchrun_options() -> set[str]:
    return {option for action in get_args_parser()._actions for option in action.option_strings}


def _all_commands(command: click.Command) -> list[click.Command]:
    """A command and, for a group (`pattern`), every command under it."""
    found = [command]
    for child in getattr(command, "commands", {}).values():
        found.extend(_all_commands(child))
    return found


def _options(command: click.Command) -> set[str]:
    return {name for param in command.params if isinstance(param, click.Option)
            for name in [*param.opts, *param.secondary_opts] if name.startswith("--")}


def _commbench_options() -> set[str]:
    found = set()
    for command in _all_commands(cli):
        found |= _options(command)
    return found


def test_every_command_is_checked():
    names = {command.name for command in _all_commands(cli)}
    assert {"run", "list", "pattern", "fsdp", "tp", "moe", "pp", "3d", "replay"} <= names
    assert {"--bucket-mb", "--no-reshard", "--compute-size"} <= _commbench_options()


def test_no_option_is_a_prefix_of_a_torchrun_option():
    theirs = _torchrun_options()
    clashes = {ours: sorted(t for t in theirs if t.startswith(ours))
               for ours in _commbench_options() - ONLY_WITHOUT_A_LAUNCHER - {"--help"}}
    assert {ours: names for ours, names in clashes.items() if names} == {}


@pytest.mark.processes
def test_every_run_option_reaches_commbench_through_torchrun(tmp_path):
    json_path, csv_path = tmp_path / "r.json", tmp_path / "r.csv"
    sweep_file = tmp_path / "sweep.yaml"  # each rank reads it; every option typed below overrides it
    sweep_file.write_text("defaults:\n  iters: 9\n  format: jsonl\nbenchmarks:\n  - name: passthrough\n"
                          "    collectives: [all_reduce]\n    warmup: 4\n")
    floor = tmp_path / "floor.yaml"  # a baseline every row passes: --fail-below must not fail the run
    floor.write_text("expect:\n  - {busbw_gbps: 1.0e-9}\n")
    result = torchrun(2, "--config", str(sweep_file), "--collective", "broadcast", "--sizes", "2K",
                      "--dtype", "bfloat16",
                      "--mode", "both", "--op", "max", "--warmup", "2", "--iters", "3", "--root", "1",
                      "--time-per-size", "0.25", "--min-iters", "2", "--max-iters", "9", "--precision", "0.2",
                      "--barrier", "per-iter", "--cuda-graph", "0", "--max-memory", "1G",
                      "--backend", "gloo", "--device", "cpu", "--timeout", "77", "--output-dir",
                      str(tmp_path / "dir"), "--csv", str(csv_path), "--json", str(json_path), "--quiet",
                      "--group-size", "2", "--group-layout", "strided", "--per-rank",
                      "--skew-threshold", "50", "--format", "nccl-tests",
                      "--placement", "in-place", "--check", "--check-every", "2", "--splits", "spread:0.25",
                      "--p2p-window", "4", "--premul-factor", "0.25", "--duration", "1h", "--repeat", "1",
                      "--nccl-debug", "--expect", str(floor), "--fail-below", "1",
                      "--impl", "c10d", "--profile-kernels", "--per-iteration", "--misalign", "4",
                      "--buffers", "2", "--flush-cache", "--memory", "--concurrent", "1",
                      "--concurrent-groups", "same", "--with-compute", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
    meta = json.loads(json_path.read_text())["meta"]
    config = meta["config"]
    assert config["name"] == "passthrough" and [b["name"] for b in meta["benchmarks"]] == ["passthrough"]
    assert config["output_format"] == "nccl-tests"
    assert config["collectives"] == ["broadcast"] and config["sizes"] == [2048]
    assert config["dtypes"] == ["bfloat16"] and config["modes"] == ["sync", "async"]
    assert config["ops"] == ["max"] and (config["warmup"], config["iters"], config["root"]) == (2, 3, 1)
    assert (config["backend"], config["device"], config["timeout_s"]) == ("gloo", "cpu", 77.0)
    assert config["quiet"] is True and config["output_dir"] == str(tmp_path / "dir")
    assert (config["time_per_size"], config["min_iters"], config["max_iters"]) == (0.25, 2, 9)
    assert (config["precision"], config["barrier"], config["cuda_graph"]) == (0.2, "per-iter", 0)
    assert config["max_memory"] == 1 << 30
    assert (config["group_size"], config["group_layout"], config["groups"]) == (2, "strided", None)
    assert config["per_rank"] is True and config["skew_threshold_percent"] == 50.0
    assert config["placements"] == ["in-place"] and config["check"] is True and config["check_every"] == 2
    assert (config["splits"], config["p2p_window"], config["premul_factor"]) == ("spread:0.25", 4, 0.25)
    assert (config["nccl_debug"], config["expect"], config["fail_below"]) == (True, str(floor), 1.0)
    assert (config["duration_s"], config["passes"]) == (3600.0, 1)  # one pass: --repeat bounds the soak
    assert config["impls"] == ["c10d"] and config["profile_kernels"] is True
    assert (config["per_iteration"], config["misalign"], config["buffer_sets"]) == (True, 4, 2)
    assert (config["flush_cache"], config["memory"], config["concurrent"]) == (True, True, 1)
    assert (config["concurrent_groups"], config["with_compute"]) == ("same", 0)
    assert csv_path.read_text().count("\n") == 3  # header + sync + async
    rows = json.loads(json_path.read_text())["rows"]
    assert [(row["placement"], row["wrong"]) for row in rows] == [("in-place", 0), ("in-place", 0)]
    # --groups excludes --group-size, so it passes through in a run of its own
    preset = torchrun(2, "--sizes", "1K", "--iters", "1", "--groups", "intra-node", "--json",
                      str(tmp_path / "p.json"), "--csv", str(tmp_path / "p.csv"), "--quiet")
    assert preset.returncode == 0, preset.stderr
    assert json.loads((tmp_path / "p.json").read_text())["meta"]["groups"]["layout"] == "intra-node"
    run_options = {name for param in cli.commands["run"].params if isinstance(param, click.Option)
                   for name in param.opts if name.startswith("--")}
    exercised = {"--collective", "--sizes", "--dtype", "--mode", "--op", "--warmup", "--iters", "--root",
                 "--backend", "--device", "--timeout", "--output-dir", "--csv", "--json", "--quiet",
                 "--time-per-size", "--min-iters", "--max-iters", "--precision", "--barrier", "--cuda-graph",
                 "--max-memory", "--group-size", "--group-layout", "--per-rank", "--skew-threshold",
                 "--groups", "--config", "--format",
                 "--placement", "--check", "--check-every", "--splits", "--p2p-window", "--premul-factor",
                 "--nccl-debug", "--expect", "--fail-below", "--duration", "--repeat", "--impl",
                 "--profile-kernels", "--per-iteration", "--misalign", "--buffers", "--flush-cache",
                 "--memory", "--concurrent", "--concurrent-groups", "--with-compute"}
    # a new option added to `run` must be added to this pass-through run too
    assert run_options - ONLY_WITHOUT_A_LAUNCHER - {"--help"} == exercised


@pytest.mark.processes
def test_every_pattern_option_reaches_commbench_through_torchrun(tmp_path):
    json_path, csv_path = tmp_path / "p.json", tmp_path / "p.csv"
    result = torchrun(2, "pattern", "fsdp", "--model", "tiny", "--layers", "1", "--bucket-mb", "0,unit",
                      "--fsdp-version", "1", "--predivide", "1", "--postdivide", "2", "--fallback", "list",
                      "--no-reshard", "--overlap", "--compute-size", "16", "--check", "--dtype", "float32",
                      "--param-dtype", "bfloat16", "--reduce-dtype", "float32", "--warmup", "1",
                      "--iters", "2", "--backend", "gloo", "--device", "cpu", "--timeout", "66",
                      "--output-dir", str(tmp_path / "dir"), "--csv", str(csv_path), "--json", str(json_path),
                      "--max-memory", "3G", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
    payload = json.loads(json_path.read_text())
    config, rows = payload["meta"]["config"], payload["rows"]
    assert payload["meta"]["launcher"] == "torchrun" and payload["meta"]["world_size"] == 2
    assert (config["model"], config["layers"], config["buckets"]) == ("tiny", 1, ["0", "unit"])
    assert (config["predivide"], config["postdivide"], config["fallback"]) == (1.0, 2.0, "list")
    assert (config["reshard"], config["overlap"], config["compute_size"], config["check"]) == (
        False, True, "16", True)
    assert (config["dtype"], config["warmup"], config["iters"]) == ("float32", 1, 2)
    mixed = (config["fsdp_version"], config["param_dtype"], config["reduce_dtype"])
    assert mixed == (1, "bfloat16", "float32")
    assert (config["backend"], config["device"], config["timeout_s"]) == ("gloo", "cpu", 66.0)
    assert config["quiet"] is True and config["output_dir"] == str(tmp_path / "dir")
    assert config["max_memory"] == 3 * 2**30
    assert {row["collective"] for row in rows} >= {"all_gather", "reduce_scatter", "step"}  # list APIs
    assert {row["model"] for row in rows} == {"tiny/layers=1"}
    assert csv_path.read_text().count("\n") == len(rows) + 1
    assert {row["variant"] for row in rows} == {"fsdp1"}
    exercised = {"--model", "--layers", "--bucket-mb", "--predivide", "--postdivide", "--fallback",
                 "--reshard", "--no-reshard", "--overlap", "--compute-size", "--check", "--dtype", "--warmup",
                 "--iters", "--backend", "--device", "--timeout", "--output-dir", "--csv", "--json",
                 "--quiet", "--fsdp-version", "--param-dtype", "--reduce-dtype", "--max-memory"}
    # a new option added to `pattern fsdp` must be added to this pass-through run too
    options = _options(cli.commands["pattern"].commands["fsdp"])
    assert options - ONLY_WITHOUT_A_LAUNCHER - {"--help"} == exercised


@pytest.mark.processes
def test_every_activation_pattern_option_reaches_commbench_through_torchrun(tmp_path):
    launch = ["--backend", "gloo", "--device", "cpu", "--timeout", "55", "--output-dir",
              str(tmp_path / "dir"), "--quiet", "--check", "--warmup", "1", "--iters", "1", "--dtype",
              "float32", "--micro-batch-size", "2"]
    runs = {
        "3d": ["--model", "gpt2-small", "--layers", "2", "--seq-len", "4", "--tp", "2", "--pp", "1",
               "--dp", "1", "--no-sequence-parallel", "--micro-batches", "3", "--compute-size", "8"],
        "moe": ["--model", "tiny-moe", "--layers", "1", "--seq-len", "4", "--routing-skew", "0.5",
                "--seed", "7"],
    }
    configs = {}
    for command, options in runs.items():
        json_path = tmp_path / f"{command}.json"
        result = torchrun(2, "pattern", command, *options, *launch, "--json", str(json_path), "--csv",
                          str(tmp_path / f"{command}.csv"))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == ""
        configs[command] = json.loads(json_path.read_text())["meta"]["config"]
    three_d, moe = configs["3d"], configs["moe"]
    assert (three_d["pattern"], three_d["model"], three_d["layers"]) == ("3d", "gpt2-small", 2)
    assert (three_d["tp"], three_d["pp"], three_d["dp"], three_d["sequence_parallel"]) == (2, 1, 1, False)
    assert (three_d["seq_len"], three_d["micro_batches"], three_d["compute_size"]) == (4, 3, 8)
    assert three_d["micro_batch_size"] == 2
    assert (moe["routing_skew"], moe["seed"], moe["model"]) == (0.5, 7, "tiny-moe")
    for config in configs.values():
        assert (config["check"], config["warmup"], config["iters"]) == (True, 1, 1)
        assert config["dtype"] == "float32"
        assert (config["backend"], config["timeout_s"], config["quiet"]) == ("gloo", 55.0, True)
    exercised = {name for options in [*runs.values(), launch] for name in options if name.startswith("--")}
    exercised |= {"--sequence-parallel", "--json", "--csv"}
    # tp's and pp's options are among 3d's: a new option on any of them must be added to these runs
    for command in ("tp", "moe", "pp", "3d"):
        options = _options(cli.commands["pattern"].commands[command])
        assert options - ONLY_WITHOUT_A_LAUNCHER - {"--help"} <= exercised, command


@pytest.mark.processes
def test_every_replay_option_reaches_commbench_through_torchrun(tmp_path, recordings):
    """On four ranks a two-rank recording runs as two copies side by side (mapping.py's rule)."""
    ddp = recordings.recording("ddp").directory
    json_path, csv_path, prefix = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "again" / "rank_"
    result = torchrun(4, "replay", str(ddp), "--select", "last:2", "--warmup", "1", "--iters", "2",
                      "--keep-gaps", "--check", "--record", str(prefix), "--backend", "gloo", "--device",
                      "cpu", "--timeout", "77", "--output-dir", str(tmp_path / "dir"), "--csv", str(csv_path),
                      "--json", str(json_path), "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
    payload = json.loads(json_path.read_text())
    meta, rows = payload["meta"], payload["rows"]
    config = meta["config"]
    assert meta["launcher"] == "torchrun" and meta["world_size"] == 4
    assert (config["traces"], config["select"]) == ([str(ddp)], "last:2")
    assert (config["warmup"], config["iters"]) == (1, 2)
    assert (config["keep_gaps"], config["check"], config["record"]) == (True, True, str(prefix))
    assert (config["backend"], config["device"], config["timeout_s"]) == ("gloo", "cpu", 77.0)
    assert config["quiet"] is True and config["output_dir"] == str(tmp_path / "dir")
    operations = [row for row in rows if row["collective"] != "pass"]
    # DDP's last two steps: two bucket all-reduces each, in each copy of the job
    assert {(row["group_name"], row["group_ranks"], row["ops"], row["wrong"]) for row in operations} == {
        ("0:default_pg/0", "0,1", 2, 0), ("0:default_pg/1", "2,3", 2, 0)}
    assert len(operations) == 4 and csv_path.read_text().count("\n") == len(rows) + 1
    assert sorted(path.name for path in prefix.parent.iterdir()) == [f"rank_{rank}" for rank in range(4)]
    # --keep-gaps: the last operation waits for its recorded offset, so a pass lasts at least that long
    wall = next(row for row in rows if row["collective"] == "pass" and row["phase"] == "wall")
    created = [pickle.loads(path.read_bytes())["entries"][-4]["time_created_ns"] for path in ddp.iterdir()]
    last = [pickle.loads(path.read_bytes())["entries"][-1]["time_created_ns"] for path in ddp.iterdir()]
    assert wall["time_us_min"] >= max(end - start for start, end in zip(created, last, strict=True)) / 1e3
    exercised = {"--select", "--warmup", "--iters", "--keep-gaps", "--check", "--record", "--backend",
                 "--device", "--timeout", "--output-dir", "--csv", "--json", "--quiet"}
    # a new option added to `replay` must be added to this pass-through run too
    assert _options(cli.commands["replay"]) - ONLY_WITHOUT_A_LAUNCHER - {"--help"} == exercised


@pytest.mark.processes
def test_torchrun_s_own_option_after_dash_m_commbench_is_told_to_go_before_it(tmp_path):
    """The hint is one torchrun accepts: not --nproc, which torchrun rejects as an ambiguous prefix. Every
    rank parses the same command line, and only rank 0 says what is wrong with it (before, each rank did,
    unless torchrun had stopped the other first: one line or two, by chance)."""
    result = torchrun(2, "--nproc-per-node", "2", "--sizes", "1K", "--output-dir", str(tmp_path))
    assert result.returncode != 0 and "Did you mean" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert lines == ["commbench: error: --nproc-per-node is torchrun's option, not commbench's: give it "
                     "before -m commbench, as in `torchrun --nproc-per-node ... -m commbench ...` (without a "
                     "launcher, commbench spawns --nproc local ranks)"]  # said by rank 0 alone
    assert not list(tmp_path.iterdir())


def test_a_rank_behind_rank_0_says_a_usage_error_only_when_its_launcher_leaves_it_running(
        monkeypatch, capsys):
    """Ranks other than 0 wait for the launcher to stop them once rank 0 has said the mistake (so rank
    0 is never stopped before it speaks); a rank left running past the grace says it itself."""
    import importlib
    import time

    entry = importlib.import_module("commbench.cli.main")

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setattr(entry, "USAGE_ERROR_GRACE_S", 0.5)
    started = time.monotonic()
    assert entry.main(["--sizes", "1X"]) == 2
    assert time.monotonic() - started >= 0.5  # it waited before speaking
    assert capsys.readouterr().err.count("commbench: error: malformed size '1X'") == 1


def test_the_torchrun_options_named_in_hints_are_torchrun_s():
    from commbench.cli.options import TORCHRUN_OPTIONS

    assert TORCHRUN_OPTIONS <= _torchrun_options()
