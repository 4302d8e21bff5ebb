"""The option tables of docs/options.md, made from the declarations (config/options.py) and the commands
that offer them: the sweep's (`run`, `sweep` and sweep files) and each registered feature's. One table
per configuration, its options in declaration order, then one of the launch settings every configuration
nests, saying which commands offer each.

scripts/options_table.py writes them between the page's markers; tests/test_options.py fails when the
page is not what this module makes.
"""

from dataclasses import MISSING, dataclass, field
from typing import Any

from commbench.config.launch import SOAK, SWEEP, LaunchConfig
from commbench.config.options import Declared, declared, nested
from commbench.config.sweep import RunConfig
from commbench.running.features import Feature

BEGIN = "<!-- options: made by scripts/options_table.py from the declarations; do not edit by hand -->"
END = "<!-- end of options -->"


@dataclass(frozen=True)
class Command:
    """A command as the tables name it, with what decides the options it offers and their defaults."""

    name: str
    config: type
    tags: set[str]
    defaults: dict[str, Any] = field(default_factory=dict)

    def offers(self, item: Declared) -> bool:
        return not item.option.only or bool(self.tags & set(item.option.only))


def commands(features: list[Feature]) -> list[Command]:
    """The sweep's command, then each feature's, as `commbench ...` would be typed."""
    found = [Command("commbench run, sweep", RunConfig, {SOAK, SWEEP})]
    for feature in features:
        words = ["commbench", *([feature.group.name] if feature.group else []), feature.name]
        found.append(Command(" ".join(words), feature.config, feature.tags(), dict(feature.defaults)))
    return found


def option_tables(features: list[Feature]) -> str:
    """The Markdown between the markers: a section per configuration, then the launch settings'."""
    every = commands(features)
    sections = []
    for config in dict.fromkeys(command.config for command in every):
        sharing = [command for command in every if command.config is config]
        sections.append(_section(config, sharing, sweep_file=config is RunConfig))
    launching = [command for command in every if LaunchConfig in nested(command.config).values()]
    sections.append(_launch_section(launching))
    return "\n".join([BEGIN, "", *sections, END])


def _section(config: type, sharing: list[Command], sweep_file: bool) -> str:
    stem = sharing[0].name.rsplit(" ", 1)[0]  # `commbench pattern` for tp, moe, pp and 3d
    title = f"## `{stem} {'|'.join(command.name.split()[-1] for command in sharing)}`"
    if sweep_file:
        title = "## `commbench [run]`, `commbench sweep` and sweep files"
    options = declared(config)
    partial = len(sharing) > 1 and any(not all(c.offers(item) for c in sharing) for item in options)
    header = ["option", "default", *(["commands"] if partial else []),
              *(["sweep-file keys"] if sweep_file else []), "what it sets"]
    rows = []
    for item in options:
        offering = [command for command in sharing if command.offers(item)]
        cells = [_flag(item), _default(item, offering)]
        if partial:
            cells.append(", ".join(command.name.split()[-1] for command in offering))
        if sweep_file:
            cells.append(_keys(item))
        rows.append([*cells, _escape(item.option.help)])
    return "\n".join([title, "", *_table(header, rows), ""])


def _launch_section(launching: list[Command]) -> str:
    """The launch settings: the sweep file's `defaults` take them too; not every command offers each."""
    rows = []
    for item in declared(LaunchConfig):
        offering = [command for command in launching if command.offers(item)]
        who = "every measuring command" if len(offering) == len(launching) else \
            ", ".join(command.name.removeprefix("commbench ") for command in offering)
        rows.append([_flag(item), _default(item, offering), who, _keys(item), _escape(item.option.help)])
    header = ["option", "default", "commands", "sweep-file keys (under `defaults`)", "what it sets"]
    return "\n".join(["## Launch settings: where ranks come from and where rows go", "",
                      *_table(header, rows), ""])


def _flag(item: Declared) -> str:
    if item.option.positional:
        return f"`{item.option.metavar}`"
    if not item.flag:
        return "(sweep files only)"
    return f"`{item.flag}` / `{item.option.off_flag}`" if item.option.off_flag else f"`{item.flag}`"


def _default(item: Declared, offering: list[Command]) -> str:
    """The default the commands show, the most common first, then where a command's own differs."""
    shown = {command.name: item.shown(command.defaults.get(item.name, MISSING)) for command in offering}
    values = list(shown.values())
    usual = max(dict.fromkeys(values), key=values.count)
    others = ", ".join(f"{name.split()[-1]}: {_code(value) or 'none'}" for name, value in shown.items()
                       if value != usual)
    return _code(usual) + (f" ({others})" if others else "")


def _code(value: str | None) -> str:
    """A default as code; none (the help says what happens then) as an empty cell."""
    return f"`{value}`" if value is not None else ""


def _keys(item: Declared) -> str:
    spelled = dict.fromkeys([item.name, *([item.flag[2:]] if item.flag else [])])
    return ", ".join(f"`{key}`" for key in spelled)


def _escape(text: str) -> str:
    """Help text as a table cell: a bar would end the cell, <run-id> would read as a tag."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}",
            *(f"| {' | '.join(row)} |" for row in rows)]


def replace_block(page: str, tables: str) -> str:
    """``page`` with what lies between its markers replaced by ``tables``; ValueError without them."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no block between {BEGIN!r} and {END!r}")
    return page[:start] + tables + page[end + len(END):]
