"""Model specs: a model's parameter shapes grouped into FSDP units, from a preset or a YAML file.

A spec file::

    name: my-model                # optional; the file's stem otherwise
    description: free text        # optional
    units:
      - name: embeddings
        params:
          wte: [50257, 768]       # parameter name: shape
      - name: block               # expanded into block0, block1, ... block11
        repeat: 12
        params:
          attn.weight: [768, 2304]

Units made by ``repeat`` are the model's layers, the ones ``--layers N`` cuts down to the first N.
Presets are the files in configs/models/ (``commbench pattern fsdp --model gpt2-small``).
"""

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from commbench.errors import UsageError, did_you_mean
from commbench.shipped import configs_dir, shipped_file

_UNIT_KEYS = ("name", "params", "repeat")
_TOP_KEYS = ("name", "description", "units")


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class UnitSpec:
    name: str
    params: tuple[ParamSpec, ...]
    layer: bool = False  # made by `repeat`: one of the layers --layers counts

    @property
    def numel(self) -> int:
        return sum(param.numel for param in self.params)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    units: tuple[UnitSpec, ...]
    source: str  # the preset name or the file it came from
    description: str = ""
    layers_kept: int | None = None  # set by cut(): the model keeps its first N of `layer_count` layers
    layer_count: int = 0

    @property
    def numel(self) -> int:
        return sum(unit.numel for unit in self.units)

    @property
    def param_count(self) -> int:
        return sum(len(unit.params) for unit in self.units)

    @property
    def label(self) -> str:
        """The name rows carry: a cut model is a different measurement from the whole one."""
        return self.name if self.layers_kept is None else f"{self.name}/layers={self.layers_kept}"

    def cut(self, layers: int | None) -> "ModelSpec":
        """The model with only its first ``layers`` layer units (the other units stay)."""
        if layers is None:
            return self
        if self.layer_count == 0:
            raise UsageError(f"--layers {layers}: model {self.name} ({self.source}) has no layer units "
                             "(units made with 'repeat:') to cut")
        if not 1 <= layers <= self.layer_count:
            raise UsageError(f"--layers {layers}: model {self.name} has {self.layer_count} layers; "
                             f"choose 1 to {self.layer_count}")
        kept: list[UnitSpec] = []
        seen = 0
        for unit in self.units:
            if unit.layer:
                seen += 1
                if seen > layers:
                    continue
            kept.append(unit)
        return replace(self, units=tuple(kept), layers_kept=layers)


def preset_names() -> list[str]:
    root = configs_dir()
    folder = None if root is None else root / "models"
    return sorted(path.stem for path in folder.glob("*.yaml")) if folder and folder.is_dir() else []


def load_model(spec: str, layers: int | None = None) -> ModelSpec:
    """A preset name or a YAML file path, validated; UsageError naming the file and the problem."""
    if layers is not None and layers < 1:
        raise UsageError(f"--layers {layers} must be at least 1")
    path = Path(spec)
    if path.suffix not in (".yaml", ".yml") and not path.exists():
        presets = preset_names()
        if spec not in presets:
            raise UsageError(f"unknown model {spec!r}{did_you_mean(spec, presets)}: give a preset "
                             f"({', '.join(presets) or 'none found'}) or a YAML file of units")
        path = shipped_file(spec, "models") or path
    if not path.is_file():
        raise UsageError(f"model spec {spec}: no such file")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        position = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise UsageError(f"{path}: not valid YAML{position}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot be read ({exc})") from None
    return parse_model(document, str(path), default_name=path.stem).cut(layers)


def parse_model(document: Any, source: str, default_name: str = "model") -> ModelSpec:
    """A ModelSpec from a parsed YAML document; ``source`` names it in error messages."""
    if not isinstance(document, dict):
        raise UsageError(f"{source}: expected a mapping with 'units', got {_kind(document)}")
    _no_unknown_keys(document, _TOP_KEYS, source)
    name = document.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"{source}: 'name' must be a non-empty string")
    units_raw = document.get("units")
    if not isinstance(units_raw, list) or not units_raw:
        raise UsageError(f"{source}: 'units' must be a non-empty list of units")
    units: list[UnitSpec] = []
    for position, raw in enumerate(units_raw):
        units.extend(_parse_unit(raw, f"{source}: units[{position}]"))
    seen: set[str] = set()
    for unit in units:
        if unit.name in seen:
            raise UsageError(f"{source}: unit name {unit.name!r} appears twice")
        seen.add(unit.name)
    description = document.get("description", "")
    return ModelSpec(name=name.strip(), units=tuple(units), source=source,
                     description=str(description).strip(), layer_count=sum(u.layer for u in units))


def _parse_unit(raw: Any, where: str) -> list[UnitSpec]:
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: expected a mapping with 'name' and 'params', got {_kind(raw)}")
    _no_unknown_keys(raw, _UNIT_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"{where}: 'name' must be a non-empty string")
    where = f"{where} ({name})"
    params_raw = raw.get("params")
    if not isinstance(params_raw, dict) or not params_raw:
        raise UsageError(f"{where}: 'params' must be a non-empty mapping of parameter name to shape")
    params = tuple(_parse_param(param_name, shape, where) for param_name, shape in params_raw.items())
    repeat = raw.get("repeat")
    if repeat is None:
        return [UnitSpec(name.strip(), params)]
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise UsageError(f"{where}: 'repeat' must be a whole number of at least 1, got {repeat!r}")
    return [UnitSpec(f"{name.strip()}{index}", params, layer=True) for index in range(repeat)]


def _parse_param(name: Any, shape: Any, where: str) -> ParamSpec:
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: parameter name {name!r} must be a string")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = [shape]
    valid = isinstance(shape, list) and shape and all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim >= 1 for dim in shape)
    if not valid:
        raise UsageError(f"{where}: parameter {name!r}: shape must be a list of positive whole numbers, "
                         f"got {shape!r}")
    return ParamSpec(name, tuple(shape))


def _no_unknown_keys(mapping: dict, known: tuple[str, ...], where: str) -> None:
    for key in mapping:
        if key not in known:
            raise UsageError(f"{where}: unknown key {key!r}{did_you_mean(str(key), list(known))}; "
                             f"expected {', '.join(known)}")


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
