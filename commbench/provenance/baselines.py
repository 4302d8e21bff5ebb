"""The baselines file (configs/baselines.yaml, shipped): link peaks, GPU models' NVLink generations, and
named baselines of published bus bandwidths; and `--expect` files, which hold one baseline.

Invariants: files are read with yaml.safe_load and checked here, so a bad file or an unknown name is a
UsageError naming the file and the key before any process group starts; a loaded Baseline never
changes. GB/s figures are 1e9 bytes per second in one direction, as busbw is.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from commbench.core.shipped import configs_dir
from commbench.core.sizes import parse_size
from commbench.errors import UsageError, did_you_mean

PASS_PCT = 90.0  # a row at or above this % of its expected busbw passes ...
WARN_PCT = 75.0  # ... at or above this it warns, below it fails (--fail-below moves this line)
EXPECT_KEYS = {"collective", "world_size", "device", "backend", "dtype", "min_size", "max_size", "busbw_gbps",
               "note"}


@dataclass(frozen=True)
class Link:
    name: str
    gbps: float
    links: int | None  # NVLink: links per GPU the figure counts
    description: str
    source: str

    @property
    def per_link_gbps(self) -> float | None:
        return self.gbps / self.links if self.links else None


@dataclass(frozen=True)
class Expectation:
    """One entry of a baseline: the rows it covers and the busbw they should reach."""

    busbw_gbps: float
    collectives: tuple[str, ...] = ()  # empty: any
    world_size: int | None = None
    device: str | None = None
    backend: str | None = None
    dtype: str | None = None
    min_bytes: int = 0
    max_bytes: int | None = None

    def covers(self, collective: str, world_size: int, device: str, backend: str, dtype: str,
               size_bytes: int) -> bool:
        return ((not self.collectives or collective in self.collectives)
                and self.world_size in (None, world_size) and self.device in (None, device)
                and self.backend in (None, backend) and self.dtype in (None, dtype)
                and size_bytes >= self.min_bytes and (self.max_bytes is None or size_bytes <= self.max_bytes))


@dataclass(frozen=True)
class Baseline:
    name: str
    description: str
    source: str
    expectations: tuple[Expectation, ...]
    pass_pct: float = PASS_PCT
    warn_pct: float = WARN_PCT


@dataclass(frozen=True)
class GpuModel:
    """A GPU model (a part of its name) and its NVLink: the generation, and how many links it has when
    the model has fewer than its generation's full count (H800, A800)."""

    match: str
    link: str
    links: int | None = None  # None: the generation's count (Link.links)


@dataclass(frozen=True)
class Baselines:
    links: dict[str, Link]
    gpu_models: tuple[GpuModel, ...]  # first match wins
    baselines: dict[str, Baseline]

    def model_of(self, name: str) -> GpuModel | None:
        return next((model for model in self.gpu_models if model.match in name), None)

    def link_of_model(self, name: str) -> Link | None:
        model = self.model_of(name)
        return None if model is None else self.links.get(model.link)

    def links_of_model(self, name: str) -> int | None:
        """How many NVLinks a GPU of this model has (None: not a model in the table)."""
        model, link = self.model_of(name), self.link_of_model(name)
        if model is None or link is None:
            return None
        return model.links or link.links


def shipped_path() -> Path:
    root = configs_dir()
    if root is None or not (root / "baselines.yaml").is_file():
        raise UsageError("the shipped baselines file configs/baselines.yaml is not installed")
    return root / "baselines.yaml"


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such baselines file") from None
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: not a readable YAML file ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping at the top")
    return data


def _number(path: Path, where: str, value: Any) -> float:
    """A finite number above 0 (YAML's .nan and .inf are floats: a verdict against them judges nothing)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise UsageError(f"{path}: {where}: expected a number above 0, got {value!r}")
    return float(value)


def _size(path: Path, where: str, value: Any) -> int:
    try:
        return parse_size(str(value))
    except UsageError as exc:
        raise UsageError(f"{path}: {where}: {exc}") from None


def _expectation(path: Path, where: str, entry: Any) -> Expectation:
    if not isinstance(entry, dict):
        raise UsageError(f"{path}: {where}: expected a mapping such as {{collective: all_reduce, "
                         "busbw_gbps: 100}}")
    unknown = set(entry) - EXPECT_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise UsageError(f"{path}: {where}: unknown key {key!r}{did_you_mean(key, sorted(EXPECT_KEYS))}")
    if "busbw_gbps" not in entry:
        raise UsageError(f"{path}: {where}: busbw_gbps is missing")
    collectives = entry.get("collective", ())
    world_size = entry.get("world_size")
    if world_size is not None and (isinstance(world_size, bool) or not isinstance(world_size, int)):
        raise UsageError(f"{path}: {where}: world_size: expected a whole number, got {world_size!r}")
    return Expectation(
        busbw_gbps=_number(path, f"{where}: busbw_gbps", entry["busbw_gbps"]),
        collectives=tuple([collectives] if isinstance(collectives, str) else collectives),
        world_size=world_size, device=entry.get("device"), backend=entry.get("backend"),
        dtype=entry.get("dtype"), min_bytes=_size(path, f"{where}: min_size", entry.get("min_size", 0)),
        max_bytes=(None if entry.get("max_size") is None
                   else _size(path, f"{where}: max_size", entry["max_size"])))


def parse_baseline(path: Path, name: str, data: Any) -> Baseline:
    where = f"baseline {name}" if name else "baseline"
    if not isinstance(data, dict) or not isinstance(data.get("expect"), list) or not data["expect"]:
        raise UsageError(f"{path}: {where}: expected a mapping with an 'expect' list of entries")
    expectations = tuple(_expectation(path, f"{where}: expect[{index}]", entry)
                         for index, entry in enumerate(data["expect"]))
    pass_pct = _number(path, f"{where}: pass_pct", data.get("pass_pct", PASS_PCT))
    warn_pct = _number(path, f"{where}: warn_pct", data.get("warn_pct", WARN_PCT))
    if warn_pct > pass_pct:
        raise UsageError(f"{path}: {where}: warn_pct {warn_pct:g} is above pass_pct {pass_pct:g}")
    return Baseline(name or path.stem, str(data.get("description", "")), str(data.get("source", "")),
                    expectations, pass_pct, warn_pct)


def load_baselines(path: Path | None = None) -> Baselines:
    path = path or shipped_path()
    data = _load_yaml(path)
    links = {}
    for name, entry in (data.get("links") or {}).items():
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: links: {name}: expected a mapping with gbps and source")
        links[name] = Link(name, _number(path, f"links: {name}: gbps", entry.get("gbps")), entry.get("links"),
                           str(entry.get("description", "")), str(entry.get("source", "")))
    models = tuple(GpuModel(str(entry["match"]), str(entry["link"]),
                            entry["links"] if isinstance(entry.get("links"), int) else None)
                   for entry in data.get("gpu_models") or []
                   if isinstance(entry, dict) and "match" in entry and "link" in entry)
    named = {name: parse_baseline(path, name, entry) for name, entry in (data.get("baselines") or {}).items()}
    return Baselines(links, models, named)


def resolve_expect(spec: str) -> Baseline:
    """--expect: a YAML file holding one baseline, or the name of a shipped one."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return parse_baseline(path, "", _load_yaml(path))
    shipped = load_baselines().baselines
    if spec not in shipped:
        raise UsageError(f"--expect {spec!r} is neither a file nor a shipped baseline"
                         f"{did_you_mean(spec, sorted(shipped))}; shipped: {', '.join(sorted(shipped))}")
    return shipped[spec]


def check_judging(expect: str | None, fail_below: float | None) -> None:
    """--expect and --fail-below, checked before anything starts."""
    if expect is not None:
        resolve_expect(expect)
    if fail_below is not None and not 0 < fail_below <= 1000:
        raise UsageError(f"--fail-below {fail_below:g} must be a percentage above 0 (of the expected busbw "
                         "or the link peak), e.g. 80")
