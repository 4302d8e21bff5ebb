"""Sweep files: YAML with `defaults` and a list of `benchmarks`, each a RunConfig.

    defaults: {iters: 50, dtypes: [bfloat16]}
    benchmarks:
      - name: fsdp
        collectives: [reduce_scatter_base, all_gather_base]
        sizes: 1M:256M

The keys are the declared options of RunConfig and LaunchConfig (config/options.py), by field name or
by the command line's spelling (`collective` or `collectives`, `timeout` or `timeout_s`, `output-dir` or
`output_dir`); the accepted types and parsers are the declarations', so an option declared on either is a
valid key without touching this module. Launch settings apply to the whole run: they may appear under
`defaults`, never in one benchmark.
A value is what the command line would take (a comma string) or its YAML form (a list). Every problem
is reported as ``FILE:LINE: key: problem`` (a UsageError, exit 2), before any process group starts: the
line comes from PyYAML's composed nodes.

Precedence, lowest first: the declared defaults, the file's `defaults`, the benchmark's own keys, then
the options typed on the command line.
"""

import difflib
from pathlib import Path
from typing import Any

import yaml

from commbench.config.options import Declared, build, declared, nested, parse_list
from commbench.config.sweep import RunConfig, resolve
from commbench.core.shipped import shipped_file, shipped_names
from commbench.errors import UsageError, did_you_mean

TOP_LEVEL_KEYS = ("defaults", "benchmarks")


def field_keys(config: type = RunConfig) -> dict[str, Declared]:
    """Every key a sweep file may use, mapped onto the declared option it sets: a benchmark's own and the
    whole run's (those of the configs it nests: the launch settings)."""
    options = [*declared(config), *(item for inner in nested(config).values() for item in declared(inner))]
    return {key: item for item in options for key in item.keys()}


def run_wide(config: type = RunConfig) -> set[str]:
    """The fields that apply to the whole run (a nested config's), which no single benchmark may set."""
    return {item.name for inner in nested(config).values() for item in declared(inner)}


class _Located:
    """A value from the file with where it came from."""

    def __init__(self, key: str, field: str, value: Any, line: int) -> None:
        self.key, self.field, self.value, self.line = key, field, value, line


def load_sweep(path: str | Path, overrides: dict[str, Any], config: type = RunConfig) -> list[RunConfig]:
    """The resolved benchmarks of a sweep file, each a ``config`` (RunConfig, or a class that adds
    options to it); ``overrides`` holds the fields the user typed. UsageError, with file and line, on any
    problem."""
    found = Path(path)
    if not found.exists():  # a bare name such as `smoke` is one of the sweep files commbench ships
        found = shipped_file(str(path)) or found
    return _SweepFile(found, config).configs(overrides)


class _SweepFile:
    def __init__(self, path: Path, config: type) -> None:
        self.path = path
        self.config = config
        self.keys = field_keys(config)
        self.run_wide = run_wide(config)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise UsageError(f"{path}: no such sweep file{_shipped_hint(path)}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: cannot read the sweep file: {exc}") from None
        self.loader = yaml.SafeLoader(text)
        try:
            self.root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 1
            context = ""
            if exc.context and exc.context_mark is not None:
                context = f" ({exc.context} started on line {exc.context_mark.line + 1})"
            raise UsageError(f"{path}:{line}: not valid YAML: {exc.problem or exc.context}{context}") \
                from None
        except yaml.YAMLError as exc:
            raise UsageError(f"{path}: not valid YAML: {exc}") from None

    # --- reading the file ---------------------------------------------------------------------
    def fail(self, node: yaml.Node, text: str) -> UsageError:
        return UsageError(f"{self.path}:{node.start_mark.line + 1}: {text}")

    def mapping(self, node: yaml.Node, what: str) -> list[tuple[str, yaml.Node, yaml.Node]]:
        """(key, key node, value node) of a mapping, refusing non-string and repeated keys."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what}: expected a mapping of keys to values, got {_kind(node)}")
        seen: dict[str, int] = {}
        pairs = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, f"{what}: a key must be a plain name")
            key = key_node.value
            if key in seen:
                raise self.fail(key_node, f"{key}: repeated key (first on line {seen[key]})")
            seen[key] = key_node.start_mark.line + 1
            pairs.append((key, key_node, value_node))
        return pairs

    def entries(self, node: yaml.Node, what: str, in_benchmark: bool) -> dict[str, _Located]:
        found: dict[str, _Located] = {}
        for key, key_node, value_node in self.mapping(node, what):
            option = self.keys.get(key)
            if option is None:
                raise self.fail(key_node, f"{key}: unknown key{did_you_mean(key, sorted(self.keys))}")
            field = option.name
            if field in found:
                raise self.fail(key_node, f"{key}: sets {field} again (already set by "
                                          f"{found[field].key!r} on line {found[field].line})")
            if in_benchmark and field in self.run_wide:
                raise self.fail(key_node, f"{key}: applies to the whole run (one process group); set it "
                                          "under defaults or on the command line")
            found[field] = _Located(key, field, self.value(option, key, value_node),
                                    key_node.start_mark.line + 1)
        return found

    def value(self, option: Declared, key: str, node: yaml.Node) -> Any:
        """The node as a value for the declared option ``option``, by its type and parser."""
        kind = option.kind
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            if option.optional:
                return None
            raise self.fail(node, f"{key}: needs a value")
        if option.is_list:
            return self.list_value(option, key, node)
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, f"{key}: expected {_type_name(kind)}, got {_kind(node)}")
        constructed = self.loader.construct_object(node)
        if option.option.parse is not None and isinstance(constructed, str):
            try:
                return option.option.parse(constructed)
            except UsageError as exc:
                raise self.fail(node, f"{key}: {exc}") from None
        if kind is bool:
            if not isinstance(constructed, bool):
                raise self.fail(node, f"{key}: expected true or false, got {node.value!r}")
            return constructed
        if kind is int:
            if isinstance(constructed, bool) or not isinstance(constructed, int):
                raise self.fail(node, f"{key}: expected an integer, got {node.value!r}")
            return constructed
        if kind is float:
            if isinstance(constructed, bool) or not isinstance(constructed, int | float):
                raise self.fail(node, f"{key}: expected a number, got {node.value!r}")
            return float(constructed)
        if kind is str:
            if isinstance(constructed, bool):
                raise self.fail(node, f"{key}: expected a string, got {node.value!r} (quote it)")
            return node.value  # the text as written: `name: 2024` is the string '2024'
        raise self.fail(node, f"{key}: cannot be set from a sweep file")

    def list_value(self, option: Declared, key: str, node: yaml.Node) -> list:
        """A YAML list, or one scalar holding a comma list, as the command line takes it."""
        parse, item_kind = option.option.parse, option.item_kind
        if isinstance(node, yaml.SequenceNode):
            items = []
            for item in node.value:
                if not isinstance(item, yaml.ScalarNode):
                    raise self.fail(item, f"{key}: expected a list of plain values, found {_kind(item)}")
                items.append((item, item.value))  # raw text: YAML 1.1 would read 4:16 as sexagesimal
        elif isinstance(node, yaml.ScalarNode):
            try:
                parts = [node.value] if parse is not None else parse_list(node.value, f"{key}:")
            except UsageError as exc:
                raise self.fail(node, str(exc)) from None
            items = [(node, part) for part in parts]
        else:
            raise self.fail(node, f"{key}: expected a list or a comma-separated string, got {_kind(node)}")
        values: list = []
        for item_node, text in items:
            if parse is not None:
                try:
                    values.extend(parse(text))
                except UsageError as exc:
                    raise self.fail(item_node, f"{key}: {exc}") from None
            elif item_kind is int:
                try:
                    values.append(int(text))
                except ValueError:
                    raise self.fail(item_node, f"{key}: expected integers, got {text!r}") from None
            elif item_kind is float:
                try:
                    values.append(float(text))
                except ValueError:
                    raise self.fail(item_node, f"{key}: expected numbers, got {text!r}") from None
            else:
                values.append(text)
        return values

    # --- benchmarks ---------------------------------------------------------------------------
    def configs(self, overrides: dict[str, Any]) -> list[RunConfig]:
        if self.root is None:
            raise UsageError(f"{self.path}:1: the sweep file is empty: it needs a `benchmarks:` list")
        top = {key: (key_node, value) for key, key_node, value in self.mapping(self.root, "the file")}
        for key, (key_node, _) in top.items():
            if key not in TOP_LEVEL_KEYS:
                hint = did_you_mean(key, list(TOP_LEVEL_KEYS))
                if not hint and key in self.keys:
                    hint = " (settings go under defaults: or in a benchmark)"
                raise self.fail(key_node, f"{key}: unknown top-level key{hint}; "
                                          f"expected {', '.join(TOP_LEVEL_KEYS)}")
        defaults = self.entries(top["defaults"][1], "defaults", in_benchmark=False) \
            if "defaults" in top else {}
        if "benchmarks" not in top:
            raise self.fail(self.root, "no `benchmarks:` list: a sweep file needs at least one benchmark")
        listed = top["benchmarks"][1]
        if not isinstance(listed, yaml.SequenceNode) or not listed.value:
            raise self.fail(listed, f"benchmarks: expected a list of benchmarks, got {_kind(listed)}")
        configs: list[RunConfig] = []
        names: dict[str, int] = {}
        for node in listed.value:
            entries = self.entries(node, "benchmark", in_benchmark=True)
            named = entries.get("name")
            if named is not None and named.value:
                if named.value in names:
                    raise self.fail(node, f"name: benchmark {named.value!r} is already on line "
                                          f"{names[named.value]}")
                names[named.value] = named.line
            configs.append(self.resolve_one(node, defaults, entries, overrides))
        return configs

    def resolve_one(self, node: yaml.Node, defaults: dict[str, _Located], entries: dict[str, _Located],
                    overrides: dict[str, Any]) -> RunConfig:
        from_file = {**defaults, **entries}
        values = {**{name: located.value for name, located in from_file.items()}, **overrides}
        try:
            return resolve(build(self.config, values))
        except UsageError as problem:
            # Name the key to blame: the first value that is wrong on its own, the command line's first.
            for name, value in overrides.items():
                alone = self.fails_alone(name, value)
                if alone:
                    raise UsageError(alone) from None
            for located in [*entries.values(), *defaults.values()]:
                alone = None if located.field in overrides else self.fails_alone(located.field, located.value)
                if alone:
                    raise UsageError(f"{self.path}:{located.line}: {located.key}: {alone}") from None
            name = entries["name"].value if "name" in entries else ""
            label = f"benchmark {name!r}" if name else "benchmark"
            raise self.fail(node, f"{label}: {problem}") from None

    def fails_alone(self, name: str, value: Any) -> str | None:
        """The problem ``value`` has on top of the declared defaults, or None."""
        try:
            resolve(build(self.config, {name: value}))
        except UsageError as exc:
            return str(exc)
        return None


def _shipped_hint(path: Path) -> str:
    """Where a missing file's name is close to a shipped sweep's, the command that runs that one;
    otherwise the shipped sweeps' names."""
    names = shipped_names()
    close = difflib.get_close_matches(path.stem, names, n=1, cutoff=0.6) if path.parent == Path(".") else []
    if close:
        return f" (did you mean `commbench sweep {close[0]}`? shipped sweeps run by bare name)"
    return f"; the shipped sweeps are {', '.join(names)}" if names else ""


def _type_name(kind: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"{node.value!r}"
