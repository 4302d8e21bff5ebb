"""The command line made from the declarations: each declared option (config/options.py) becomes a
click option or argument, and each registered feature (running/features.py) a command.

click only reads the command line here: an option's parameter name is its field's name, its default is
shown in --help but click holds none, and what the user typed becomes field values (``typed_values``)
that fill the configuration over the declared defaults. So a configuration's defaults are its fields',
whether it is filled from the command line, a sweep file or Python.
"""

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, replace
from typing import Any

import click
from click.core import ParameterSource

from commbench.config.options import Declared, build, nested, offered
from commbench.running.features import Feature, FeatureGroup

TYPED = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def click_params(options: Sequence[Declared], defaults: Mapping[str, Any] | None = None
                 ) -> list[click.Parameter]:
    """The click parameters of ``options``, arguments first; ``defaults`` are a command's own defaults
    (shown in --help) where they differ from the fields'."""
    defaults = defaults or {}
    found: list[click.Parameter] = [click.Argument([item.name], nargs=-1, required=True,
                                                   metavar=item.option.metavar)
                                    for item in options if item.option.positional]
    for item in options:
        if item.flag and not item.option.positional:
            found.append(_click_option(item, defaults.get(item.name, MISSING)))
    return found


class DeclaredOption(click.Option):
    """A declared option: --help shows the default as the declaration says it (the config's value, or
    words such as 'the world'); click itself holds none, so what was not typed is never passed on."""

    def __init__(self, *args: Any, shown: str | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shown = shown

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if self.shown is not None:
            extra["default"] = self.shown
        return extra


def _click_option(item: Declared, default: Any) -> click.Option:
    declared = item.option
    shown = item.shown(default)
    if item.kind is bool:
        flags = f"{item.flag}/{declared.off_flag}" if declared.off_flag else item.flag
        return DeclaredOption([flags, item.name], is_flag=True, default=None, shown=shown,
                              help=declared.help)
    plain = item.kind in (int, float) and declared.parse is None
    return DeclaredOption([item.flag, item.name], type=item.kind if plain else click.STRING, default=None,
                          shown=shown, metavar=declared.metavar, help=declared.help)


def typed_values(ctx: click.Context, options: Sequence[Declared], values: Mapping[str, Any]
                 ) -> dict[str, Any]:
    """The field values of the options the user typed (those left out keep their defaults): text
    becomes what the field holds (a comma list a list, a size a number of bytes)."""
    found: dict[str, Any] = {}
    for item in options:
        if item.name not in values:
            continue
        value = values[item.name]
        if item.option.positional:
            found[item.name] = list(value)
        elif ctx.get_parameter_source(item.name) in TYPED:
            found[item.name] = item.from_text(value, item.flag) if isinstance(value, str) else value
    return found


def filled(config: type, values: Mapping[str, Any], argv: list[str]) -> Any:
    """A ``config`` from field values, with the command line recorded where it nests a launch config."""
    made = build(config, values)
    if "launch" in nested(config):
        made = replace(made, launch=replace(made.launch, argv=argv))
    return made


def feature_command(feature: Feature) -> click.Command:
    """The command of a registered feature: its config's options and the launch settings it offers;
    running it resolves the config (UsageError before any rank starts) and runs the feature."""
    options = offered(feature.config, feature.tags())

    def callback(**values: Any) -> int:
        ctx = click.get_current_context()
        typed = typed_values(ctx, options, values)
        return feature.run(filled(feature.config, {**feature.defaults, **typed}, list(ctx.obj["argv"])))

    return click.Command(feature.name, callback=callback, params=click_params(options, feature.defaults),
                         help=feature.summary)


def add_features(group: click.Group, features: Sequence[Feature]) -> None:
    """Each feature's command, in its own group (`pattern`) or in ``group``."""
    groups: dict[str, click.Group] = {}
    for feature in features:
        parent = group
        if feature.group is not None:
            if feature.group.name not in groups:
                groups[feature.group.name] = _group(feature.group)
                group.add_command(groups[feature.group.name])
            parent = groups[feature.group.name]
        parent.add_command(feature_command(feature))


class WholeHelpGroup(click.Group):
    """A group whose --help gives each command's first sentence whole (click cuts it at the width)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, command.get_short_help_str(limit=1_000)) for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _group(declared: FeatureGroup) -> click.Group:
    def listing() -> int:
        ctx = click.get_current_context()
        if ctx.invoked_subcommand is None:  # the group alone lists its commands
            click.echo(ctx.get_help())
        return 0

    return WholeHelpGroup(declared.name, callback=listing, invoke_without_command=True, help=declared.summary)

