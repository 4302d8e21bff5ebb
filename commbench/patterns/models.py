"""Model specs: a model's parameter shapes grouped into FSDP units, and its dimensions, from a preset or
a YAML file.

A spec file::

    name: my-model                # optional; the file's stem otherwise
    description: free text        # optional
    dims: {hidden: 768, layers: 12, heads: 12, ffn: 3072, vocab: 50257, context: 1024}
    units:
      - name: root                # the root module's own parameters (everything outside the blocks)
        root: true
        params:
          wte.weight: [50257, 768]  # parameter name: shape, as the module holds it (nn.Linear: [out, in])
      - name: block               # expanded into block0, block1, ... block11
        repeat: 12
        params:
          attn.c_attn.weight: [2304, 768]

Units made by ``repeat`` are the model's layers, the ones ``--layers N`` cuts down to the first N. A
``root`` unit, if any, comes first: FSDP never reshards the root after the forward pass. ``dims`` are what
the activation patterns (tp, moe, pp, 3d) size their messages from; ``dims.layers`` must equal the layer
units. Presets are the files in configs/models/ (``commbench pattern fsdp --model gpt2-small``).
"""

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from commbench.core.shipped import configs_dir, shipped_file
from commbench.core.untrusted import INT64, load_yaml, present, shown
from commbench.core.words import plural
from commbench.errors import UsageError, did_you_mean

_UNIT_KEYS = ("name", "params", "repeat", "root")
# A model has at most this many units, repeats included (docs/limits.md): the largest published models
# have a few hundred layers, and every unit is planned, built and issued each step.
MAX_UNITS = 4096
_TOP_KEYS = ("name", "description", "dims", "units")
_DIM_KEYS = ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "context", "experts", "top_k")
_REQUIRED_DIMS = ("hidden", "layers", "heads", "ffn", "vocab", "context")


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
    root: bool = False  # the root module's own parameters: gathered once, kept from forward to backward

    @property
    def numel(self) -> int:
        return sum(param.numel for param in self.params)


@dataclass(frozen=True)
class ModelDims:
    """The dimensions activation sizes come from (Megatron's names in parentheses)."""

    hidden: int  # d_model (hidden_size)
    layers: int  # transformer layers (num_layers)
    heads: int  # attention heads (num_attention_heads)
    ffn: int  # the MLP's inner size (ffn_hidden_size); an expert's, for a mixture of experts
    vocab: int
    context: int  # the longest sequence it was trained on
    kv_heads: int = 0  # grouped-query attention's key/value heads; 0: as many as heads
    experts: int = 0  # experts per MoE layer; 0: a dense model
    top_k: int = 0  # experts each token is routed to

    @property
    def is_moe(self) -> bool:
        return self.experts > 0


@dataclass(frozen=True)
class ModelSpec:
    name: str
    units: tuple[UnitSpec, ...]
    source: str  # the preset name or the file it came from
    description: str = ""
    dims: ModelDims | None = None
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
            raise UsageError(f"--layers {layers}: model {self.name} has {plural(self.layer_count, 'layer')}; "
                             f"choose 1 to {self.layer_count}")
        kept: list[UnitSpec] = []
        seen = 0
        for unit in self.units:
            if unit.layer:
                seen += 1
                if seen > layers:
                    continue
            kept.append(unit)
        dims = None if self.dims is None else replace(self.dims, layers=layers)
        return replace(self, units=tuple(kept), layers_kept=layers, dims=dims)

    def require_dims(self, pattern: str) -> ModelDims:
        """The dims, or UsageError naming what the pattern needs."""
        if self.dims is None:
            raise UsageError(f"model {self.name} ({self.source}) has no 'dims' (hidden, layers, heads, ffn, "
                             f"vocab, context): pattern {pattern} sizes its messages from them")
        return self.dims


def preset_names() -> list[str]:
    root = configs_dir()
    folder = None if root is None else root / "models"
    return sorted(path.stem for path in folder.glob("*.yaml")) if folder and folder.is_dir() else []


def load_model(spec: str, layers: int | None = None) -> ModelSpec:
    """A preset name or a YAML file path, validated; UsageError naming the file and the problem."""
    if layers is not None and layers < 1:
        raise UsageError(f"--layers {layers} must be at least 1")
    path = Path(spec)
    if path.suffix not in (".yaml", ".yml") and not present(path):
        presets = preset_names()
        if spec not in presets:
            raise UsageError(f"unknown model {spec!r}{did_you_mean(spec, presets)}: give a preset "
                             f"({', '.join(presets) or 'none found'}) or a YAML file of units")
        path = shipped_file(spec, "models") or path
    if not present(path):
        raise UsageError(f"model spec {spec}: no such file")
    document = load_yaml(path, "model file")
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
        units.extend(_parse_unit(raw, f"{source}: units[{position}]", MAX_UNITS - len(units)))
    seen: set[str] = set()
    for unit in units:
        if unit.name in seen:
            raise UsageError(f"{source}: unit name {shown(unit.name)} appears twice")
        seen.add(unit.name)
    if any(unit.root for unit in units[1:]):
        raise UsageError(f"{source}: the root unit must come first (FSDP gathers the root before any block)")
    layer_count = sum(u.layer for u in units)
    dims = None if document.get("dims") is None else _parse_dims(document["dims"], source, layer_count)
    description = document.get("description", "")
    return ModelSpec(name=name.strip(), units=tuple(units), source=source,
                     description=str(description).strip(), dims=dims, layer_count=layer_count)


def _parse_dims(raw: Any, source: str, layer_count: int) -> ModelDims:
    where = f"{source}: dims"
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: expected a mapping of dimension to whole number, got {_kind(raw)}")
    _no_unknown_keys(raw, _DIM_KEYS, where)
    for key in _REQUIRED_DIMS:
        if key not in raw:
            raise UsageError(f"{where}: {key!r} is missing (needed: {', '.join(_REQUIRED_DIMS)})")
    for key, value in raw.items():
        minimum = 1 if key in _REQUIRED_DIMS else 0
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value < INT64:
            raise UsageError(f"{where}: {key} must be a whole number of at least {minimum} and below 2^63, "
                             f"got {shown(value)}")
    dims = ModelDims(**raw)
    if layer_count and dims.layers != layer_count:
        raise UsageError(f"{where}: layers is {dims.layers} but the spec has {layer_count} layer units")
    if dims.experts and not 1 <= dims.top_k <= dims.experts:
        raise UsageError(f"{where}: top_k must be 1 to experts ({dims.experts}), got {dims.top_k}")
    return dims


def _parse_unit(raw: Any, where: str, room: int) -> list[UnitSpec]:
    """A unit entry as its units (``repeat`` makes several); UsageError past ``room`` more units."""
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
    repeat, root = raw.get("repeat"), raw.get("root", False)
    if not isinstance(root, bool):
        raise UsageError(f"{where}: 'root' must be true or false, got {shown(root)}")
    if root and repeat is not None:
        raise UsageError(f"{where}: a root unit cannot repeat")
    if repeat is not None and (isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1):
        raise UsageError(f"{where}: 'repeat' must be a whole number of at least 1, got {shown(repeat)}")
    if (1 if repeat is None else repeat) > room:
        raise UsageError(f"{where}: 'repeat: {repeat}' makes the model more than {MAX_UNITS} units, the most "
                         "commbench plans (docs/limits.md)")
    if repeat is None:
        return [UnitSpec(name.strip(), params, root=root)]
    return [UnitSpec(f"{name.strip()}{index}", params, layer=True) for index in range(repeat)]


def _parse_param(name: Any, shape: Any, where: str) -> ParamSpec:
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: parameter name {shown(name)} must be a string")
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = [shape]
    valid = isinstance(shape, list) and shape and all(
        isinstance(dim, int) and not isinstance(dim, bool) and 1 <= dim < INT64 for dim in shape)
    if not valid:
        raise UsageError(f"{where}: parameter {shown(name)}: shape must be a list of positive whole numbers "
                         f"(each below 2^63), got {_shape_text(shape)}")
    return ParamSpec(name, tuple(shape))


def _shape_text(shape: Any) -> str:
    """A shape as a message shows it: its dimensions when they are few and plain, else its kind."""
    plain = all(isinstance(dim, int | float | str) for dim in shape) if isinstance(shape, list) else False
    if plain and len(shape) <= 8:
        return "[" + ", ".join(shown(dim, 24) for dim in shape) + "]"
    return shown(shape)


def _no_unknown_keys(mapping: dict, known: tuple[str, ...], where: str) -> None:
    for key in mapping:
        if key not in known:
            raise UsageError(f"{where}: unknown key {shown(key)}{did_you_mean(str(key), list(known))}; "
                             f"expected {', '.join(known)}")


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
