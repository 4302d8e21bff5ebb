"""One declaration per option: a field declared once is an option in --help, a sweep-file key and a
value of the resolved config; a feature registered once is a command (even one that starts no ranks);
the values a user types are checked by their declarations; docs/options.md is what the declarations say.

Pure: builds commands and configs in this process; starts no rank.
"""

import math
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from commbench.cli import cli, main
from commbench.cli.commands import add_features, typed_values
from commbench.cli.reference import option_tables, replace_block
from commbench.cli.run import command_line_configs, sweep_commands
from commbench.cli.run import run as run_command
from commbench.config.launch import SOAK, SWEEP, LaunchConfig
from commbench.config.options import check_options, declared, offered, option, parse_list
from commbench.config.sweep import RunConfig
from commbench.errors import UsageError
from commbench.running.features import Feature, registered_features

ROOT = Path(__file__).resolve().parents[1]


@dataclass(kw_only=True)
class ToyRunConfig(RunConfig):
    """A sweep with one more option: the one edit adding an option is this field."""

    toy_window: int = option(7, minimum=1, help="Messages the toy keeps in flight.")


def _typed(command: click.Command, args: list[str], config: type = ToyRunConfig) -> dict[str, object]:
    """The fields a command line types, as the command's callback reads them (it would launch next)."""
    ctx = command.make_context(command.name, args, obj={"argv": args})
    return typed_values(ctx, offered(config, {SOAK, SWEEP}), ctx.params)


def test_an_option_declared_once_is_in_help_a_sweep_file_and_the_config(tmp_path):
    run, sweep = sweep_commands(ToyRunConfig)
    shown = " ".join(run.get_help(click.Context(run, info_name="run")).split())
    assert "--toy-window INTEGER Messages the toy keeps in flight. [default: 7]" in shown
    assert "--toy-window" in sweep.get_help(click.Context(sweep, info_name="sweep"))
    typed_line = _typed(run, ["--toy-window", "3", "--sizes", "1K"])
    (typed,) = command_line_configs(None, typed_line, [], ToyRunConfig)
    assert (typed.toy_window, typed.sizes) == (3, [1024])
    assert command_line_configs(None, {}, [], ToyRunConfig)[0].toy_window == 7
    path = tmp_path / "toy.yaml"
    path.write_text("defaults:\n  toy-window: 5\nbenchmarks:\n  - collectives: [all_reduce]\n"
                    "  - collectives: [broadcast]\n    toy_window: 9\n")
    first, second = command_line_configs(str(path), {}, [], ToyRunConfig)
    assert (first.toy_window, second.toy_window) == (5, 9)
    over = _typed(sweep, [str(path), "--toy-window", "2"])  # the command line beats the file
    overridden = command_line_configs(str(path), over, [], ToyRunConfig)
    assert [config.toy_window for config in overridden] == [2, 2]


def test_a_declared_range_refuses_a_value_on_the_command_line_and_in_a_sweep_file(tmp_path):
    run, _ = sweep_commands(ToyRunConfig)
    with pytest.raises(UsageError, match="^--toy-window 0 must be at least 1$"):
        command_line_configs(None, _typed(run, ["--toy-window", "0"]), [], ToyRunConfig)
    path = tmp_path / "toy.yaml"
    path.write_text("benchmarks:\n  - collectives: [all_reduce]\n    toy-window: -2\n")
    with pytest.raises(UsageError, match=f"^{path}:3: toy-window: --toy-window -2 must be at least 1$"):
        command_line_configs(str(path), {}, [], ToyRunConfig)


@dataclass(kw_only=True)
class GreetingConfig:
    """A feature's config without a LaunchConfig: it starts no ranks."""

    words: list[str] = option(factory=list, positional=True, metavar="WORD...", help="What to say.")
    times: int = option(1, minimum=1, help="How often.")
    tone: str = option("plain", choices=("plain", "loud"), help="How.")


def _greet(config: GreetingConfig) -> int:
    text = " ".join(config.words)
    click.echo(" / ".join([text.upper() if config.tone == "loud" else text] * config.times))
    return 3


def test_a_feature_that_starts_no_ranks_is_a_command_with_its_declared_options(capsys):
    resolved: list[GreetingConfig] = []

    def resolve(config: GreetingConfig) -> GreetingConfig:
        check_options(config)
        resolved.append(config)
        return config

    group = click.Group("commbench")
    add_features(group, [Feature(name="greet", summary="Say words; starts no ranks.", config=GreetingConfig,
                                 resolve=resolve, start=_greet)])
    command = group.commands["greet"]
    shown = " ".join(command.get_help(click.Context(command, info_name="greet")).split())
    assert "WORD..." in shown and "--tone TEXT How. [default: plain]" in shown
    assert "--nproc" not in shown and "--quiet" not in shown  # no launch settings without a launch config
    assert group.main(["greet", "hi", "there", "--times", "2", "--tone", "loud"], standalone_mode=False,
                      obj={"argv": []}) == 3
    assert capsys.readouterr().out == "HI THERE / HI THERE\n"
    assert resolved[0].words == ["hi", "there"]
    with pytest.raises(UsageError, match=r"^unknown --tone 'lound' \(did you mean loud\?\); choose from "):
        group.main(["greet", "x", "--tone", "lound"], standalone_mode=False, obj={"argv": []})


def test_every_registered_feature_is_a_command_and_quiet_is_declared_once():
    for feature in registered_features():
        parent = cli.commands[feature.group.name] if feature.group else cli
        assert feature.name in parent.commands  # type: ignore[attr-defined]
    quiet = [item for config in {RunConfig, LaunchConfig, *(f.config for f in registered_features())}
             for item in declared(config) if item.flag == "--quiet"]
    assert len(quiet) == 1


def test_every_declared_default_passes_its_own_checks():
    for config in {RunConfig, LaunchConfig, *(feature.config for feature in registered_features())}:
        check_options(config())


def test_the_docs_option_tables_are_the_declarations():
    page = (ROOT / "docs" / "options.md").read_text()
    assert page == replace_block(page, option_tables(registered_features())), \
        "docs/options.md is out of date: run python scripts/options_table.py"


FLOAT_OPTIONS = [item.flag for item in (*declared(RunConfig), *declared(LaunchConfig))
                 if item.kind is float and item.option.parse is None]


@given(flag=st.sampled_from(FLOAT_OPTIONS), value=st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_option_is_resolved_finite_or_refused_naming_it(flag, value):
    typed = _typed(run_command, ["--sizes", "1K", flag, repr(value)], RunConfig)
    try:
        (config,) = command_line_configs(None, typed, [])
    except UsageError as refused:
        message = str(refused)
        assert message.startswith(f"{flag} ") and "\n" not in message
        assert math.isfinite(value) or message == f"{flag} {value:g} must be a finite number"
    else:
        (name,) = [name for name in typed if name != "sizes"]
        assert math.isfinite(value) and getattr(config, name, getattr(config.launch, name, None)) == value


def test_bad_option_values_are_one_line_usage_errors(capsys):
    assert main(["--timeout", "nan"]) == 2
    assert capsys.readouterr().err == "commbench: error: --timeout nan must be a finite number\n"
    assert main(["pattern", "moe", "--routing-skew", "inf"]) == 2
    assert capsys.readouterr().err == "commbench: error: --routing-skew inf must be a finite number\n"
    assert main(["--barrier", "per-iteration"]) == 2
    assert "unknown --barrier 'per-iteration' (did you mean per-iter?)" in capsys.readouterr().err


NAMES = st.lists(st.text(alphabet="abcdefgh_-0123456789", min_size=1, max_size=8), min_size=1, max_size=6)


@given(names=NAMES)
def test_a_comma_list_reads_back_the_names_written_and_refuses_an_empty_one(names):
    text = ",".join(names)
    assert parse_list(text) == names
    with pytest.raises(UsageError, match="an empty name in the comma list"):
        parse_list(text + ",")
