"""torchrun prefix-matches its own options, even after `-m commbench`: ours must never be a prefix."""

import json

import click
from torch.distributed.run import get_args_parser

from commbench.cli import cli
from tests.dist_helpers import torchrun

ONLY_WITHOUT_A_LAUNCHER = {"--nproc"}  # torchrun's own --nproc-per-node is the launcher's word for it


def _torchrun_options() -> set[str]:
    return {option for action in get_args_parser()._actions for option in action.option_strings}


def _commbench_options() -> set[str]:
    found = set()
    commands = [cli, *cli.commands.values()]
    for command in commands:
        for param in command.params:
            if isinstance(param, click.Option):
                found.update(name for name in [*param.opts, *param.secondary_opts] if name.startswith("--"))
    return found


def test_no_option_is_a_prefix_of_a_torchrun_option():
    theirs = _torchrun_options()
    clashes = {ours: sorted(t for t in theirs if t.startswith(ours))
               for ours in _commbench_options() - ONLY_WITHOUT_A_LAUNCHER - {"--help"}}
    assert {ours: names for ours, names in clashes.items() if names} == {}


def test_every_run_option_reaches_commbench_through_torchrun(tmp_path):
    json_path, csv_path = tmp_path / "r.json", tmp_path / "r.csv"
    sweep_file = tmp_path / "sweep.yaml"  # each rank reads it; every option typed below overrides it
    sweep_file.write_text("defaults:\n  iters: 9\n  format: jsonl\nbenchmarks:\n  - name: passthrough\n"
                          "    collectives: [all_reduce]\n    warmup: 4\n")
    result = torchrun(2, "--config", str(sweep_file), "--collective", "broadcast", "--sizes", "2K",
                      "--dtype", "bfloat16",
                      "--mode", "both", "--op", "max", "--warmup", "2", "--iters", "3", "--root", "1",
                      "--backend", "gloo", "--device", "cpu", "--timeout", "77", "--output-dir",
                      str(tmp_path / "dir"), "--csv", str(csv_path), "--json", str(json_path),
                      "--format", "nccl-tests", "--quiet")
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
    assert csv_path.read_text().count("\n") == 3  # header + sync + async
    run_options = {name for param in cli.commands["run"].params if isinstance(param, click.Option)
                   for name in param.opts if name.startswith("--")}
    exercised = {"--collective", "--sizes", "--dtype", "--mode", "--op", "--warmup", "--iters", "--root",
                 "--backend", "--device", "--timeout", "--output-dir", "--csv", "--json", "--quiet",
                 "--config", "--format"}
    # a new option added to `run` must be added to this pass-through run too
    assert run_options - ONLY_WITHOUT_A_LAUNCHER - {"--help"} == exercised
