"""One declaration per option: a configuration dataclass's field carries its option's flag, help,
default, parser, validation and the commands that offer it, as torchtitan declares a config field and
its help in one place:

    warmup: int = option(5, minimum=0, help="Untimed ops per size.")

Everything else follows from the declarations: the command line's options (cli/commands.py makes
click's from them), the sweep file's keys and value types (sweepfile.py), the checks each resolution
starts with (``check_options``: ranges, finite numbers, choices with a did-you-mean), ``--help`` and the
option tables of docs/options.md. A field without a declaration is set by the program (the command
line it was typed as, a pattern's name), never by a user.

Invariants: an option's value is its field's value (a comma list is a list, a size a number of bytes),
so the command line and a sweep file fill a configuration the same way; an option's parameter name is
its field's name; importing this module imports neither torch nor click.
"""

import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any

from commbench.errors import UsageError, did_you_mean

OPTION = "commbench.option"  # the key of a field's metadata that holds its Option


@dataclass(frozen=True, kw_only=True)
class Option:
    """What a field's option is, besides the field's own name, type and default."""

    help: str
    flag: str | None = ""  # the long option; "": --NAME from the field's name; None: a sweep-file key only
    off_flag: str = ""  # a boolean's negative (--no-reshard); "": a plain flag, off unless given
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None  # text into the field's value (a size, a time); None: by type
    shown_default: str | None = None  # how --help shows the default; None: the default itself; "": nothing
    choices: tuple[Any, ...] = ()
    noun: str = ""  # what a refused choice is called ("unknown backend 'x'"); "": the flag
    minimum: float | None = None  # the range, inclusive (minimum, maximum) or exclusive (above, below)
    maximum: float | None = None
    above: float | None = None
    below: float | None = None
    bounds: str = ""  # what a refusal says after the value ("must be above 0 seconds"); "": from the range
    only: tuple[str, ...] = ()  # offered only by commands with one of these tags (a pattern, "soak"); (): all
    positional: bool = False  # an argument (TRACE...) rather than an option


def option(default: Any = MISSING, *, factory: Callable[[], Any] | Any = MISSING, **declared: Any) -> Any:
    """A dataclass field declaring an option: ``default`` (or a ``factory`` for lists) is the field's
    default, the keywords are ``Option``'s."""
    return field(default=default, default_factory=factory, metadata={OPTION: Option(**declared)})


@dataclass(frozen=True)
class Declared:
    """A declared field with what its annotation says: the type of its values and whether None is one."""

    name: str
    option: Option
    kind: Any  # int, float, str, bool or list[...]; None taken out
    optional: bool
    default: Any

    @property
    def flag(self) -> str:
        """The long option ('' for a sweep-file key that has none)."""
        if self.option.flag is None:
            return ""
        return self.option.flag or "--" + self.name.replace("_", "-")

    @property
    def label(self) -> str:
        """How messages name it: its flag, or its key where it has none."""
        return self.flag or self.name

    @property
    def is_list(self) -> bool:
        return typing.get_origin(self.kind) is list

    @property
    def item_kind(self) -> Any:
        return typing.get_args(self.kind)[0] if self.is_list else None

    def keys(self) -> list[str]:
        """The sweep-file keys that set it: its field's name and its flag's, each with - or _."""
        spelled = [self.name, *([self.flag[2:]] if self.flag else [])]
        return list(dict.fromkeys(form for name in spelled
                                  for form in (name, name.replace("_", "-"), name.replace("-", "_"))))

    def shown(self, default: Any = MISSING) -> str | None:
        """The default as --help shows it (``default``: a command's own), None when none is shown."""
        if self.option.shown_default is not None and default is MISSING:
            return self.option.shown_default or None
        value = self.default if default is MISSING else default
        if value is None or value is False or value == "" or value == []:
            return None
        if value is True:
            return self.flag[2:]
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    def from_text(self, text: str, flag: str = "") -> Any:
        """The value of this field from text as typed (the command line's form); ``flag`` names it in a
        comma list's message."""
        if self.option.parse is not None:
            return self.option.parse(text)
        if self.is_list:
            parts = parse_list(text, flag)
            if self.item_kind in (int, float):
                try:
                    return [self.item_kind(part) for part in parts]
                except ValueError:
                    raise UsageError(f"{self.label}: expected a comma list of numbers, got {text!r}") \
                        from None
            return parts
        return text

    def check(self, value: Any) -> None:
        """UsageError when ``value`` is out of this option's range or choices, or not a finite number."""
        if value is None or self.is_list or isinstance(value, bool):
            return
        if self.option.choices and value not in self.option.choices:
            names = [str(choice) for choice in self.option.choices]
            raise UsageError(f"unknown {self.option.noun or self.label} {value!r}"
                             f"{did_you_mean(str(value), names)}; choose from {', '.join(names)}")
        if not isinstance(value, int | float):
            return
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        if not math.isfinite(value):
            raise UsageError(f"{self.label} {shown} must be a finite number")
        low, high = self.option.minimum, self.option.maximum
        above, below = self.option.above, self.option.below
        if (low is not None and value < low) or (high is not None and value > high) or \
                (above is not None and value <= above) or (below is not None and value >= below):
            raise UsageError(f"{self.label} {shown} {self.option.bounds or self._bounds()}")

    def _bounds(self) -> str:
        """The range in words: at least, above, at most, below, or between."""
        declared = self.option
        low = declared.minimum if declared.minimum is not None else declared.above
        high = declared.maximum if declared.maximum is not None else declared.below
        if high is None:
            return f"must be {'at least' if declared.minimum is not None else 'above'} {low:g}"
        if low is None:
            return f"must be {'at most' if declared.maximum is not None else 'below'} {high:g}"
        return f"must be between {low:g} and {high:g}"


@cache
def declared(cls: type) -> tuple[Declared, ...]:
    """The declared fields of the dataclass ``cls``, in field order (a nested config's are not among
    them: see ``offered``)."""
    hints = typing.get_type_hints(cls)
    found = []
    for item in fields(cls):
        declaration = item.metadata.get(OPTION)
        if declaration is not None:
            kind, optional = _without_none(hints[item.name])
            found.append(Declared(item.name, declaration, kind, optional, _default(item)))
    return tuple(found)


@cache
def nested(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that hold a configuration of their own (``launch``), by name."""
    hints = typing.get_type_hints(cls)
    return {item.name: hints[item.name] for item in fields(cls)
            if is_dataclass(hints[item.name]) and isinstance(hints[item.name], type)}


def offered(cls: type, tags: set[str]) -> list[Declared]:
    """The options a command built on ``cls`` offers, its own first, then its nested configs': those
    declared for every command and those whose ``only`` names one of ``tags``."""
    own = [item for item in declared(cls) if not item.option.only or tags & set(item.option.only)]
    return own + [item for inner in nested(cls).values() for item in offered(inner, tags)]


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """A ``cls`` from flat field values (a nested config takes the values of its own fields); fields not
    given keep their defaults."""
    given = {name: values[name] for name in (item.name for item in fields(cls)) if name in values}
    for name, inner in nested(cls).items():
        if name not in given:
            given[name] = build(inner, values)
    return cls(**given)


def flat_values(config: Any) -> dict[str, Any]:
    """Every field of a config by its flat name, a nested config's included (the inverse of build)."""
    values: dict[str, Any] = {}
    for item in fields(config):
        value = getattr(config, item.name)
        if item.name in nested(type(config)):
            values.update(flat_values(value))
        else:
            values[item.name] = value
    return values


def check_options(config: Any) -> None:
    """UsageError for the first of ``config``'s own declared values out of its range or choices, or not
    finite (a nested config is checked by its own resolution)."""
    for item in declared(type(config)):
        item.check(getattr(config, item.name))


def parse_list(text: str, flag: str = "") -> list[str]:
    """The names of a comma list. An empty one (``a,,b``, a comma at an end) is a UsageError rather than
    skipped: it is most often a name lost to a typo."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 1 and not all(parts):
        raise UsageError(f"{flag + ' ' if flag else ''}{text!r}: an empty name in the comma list (two commas "
                         "together, or one at an end)")
    return [part for part in parts if part]


def _without_none(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        others = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return (others[0] if len(others) == 1 else hint), len(others) < len(typing.get_args(hint))
    return hint, False


def _default(item: Field) -> Any:
    if item.default is not MISSING:
        return item.default
    return item.default_factory() if item.default_factory is not MISSING else None
