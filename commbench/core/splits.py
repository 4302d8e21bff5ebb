"""Uneven (v) collectives: how many elements each rank sends, from a file or a generated spread.

``--splits`` is generated for every size, ``spread:F`` (0 <= F <= 1: a linear spread over the pairs),
``distance:F`` (F >= 0: pairs weighted by how far apart their ranks are) or ``zipf:S`` (S >= 0: every
rank sends the most to rank 0, less to each next, as an MoE router's tokens favour its hottest experts),
or a FILE (CSV or YAML) holding a world x world matrix of bytes: entry [i][j] is what rank i sends to
rank j in all_to_allv. The formulas are in docs/measurement.md ("Uneven (v) collectives"); the
functions here are their only definition.
"""

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from commbench.core.sizes import MAX_SIZE_BYTES, TOO_LARGE, SizeTooLarge, parse_size, readable_size
from commbench.core.untrusted import CONFIG_BYTES, parse_yaml, present, read_text, shown
from commbench.core.words import plural
from commbench.errors import UsageError

DEFAULT_SPLITS = "spread:0.5"
_YAML_SUFFIXES = (".yaml", ".yml", ".json")


GENERATORS = ("spread", "distance", "zipf")  # the generated kinds, each with its factor


@dataclass(frozen=True)
class SplitSpec:
    """A parsed --splits: a generated kind with its factor, or a byte matrix read from ``path``."""

    text: str
    spread: float | None = None  # the factor of the generated kind
    matrix: tuple[tuple[int, ...], ...] | None = None
    path: str = ""
    kind: str = "spread"  # spread, distance or zipf (a file: its matrix)

    @property
    def from_file(self) -> bool:
        return self.matrix is not None


@dataclass(frozen=True)
class SizePlan:
    """What one size means for a collective: elements per rank chunk, bytes used, and for v-collectives
    the per rank chunks or the per pair matrix."""

    count_per_rank: int  # the largest chunk (or pair) in elements
    size_bytes: int  # the largest per-rank byte count (docs/measurement.md#uneven-v-collectives)
    chunk_counts: tuple[int, ...] = ()
    pair_counts: tuple[tuple[int, ...], ...] = ()


_FACTORS = {"spread": ("F", "0 <= F <= 1", "spread:0.5"), "distance": ("F", "F >= 0", "distance:1"),
            "zipf": ("S", "S >= 0", "zipf:1.2")}


def parse_splits(text: str) -> SplitSpec:
    """``spread:F``, ``distance:F``, ``zipf:S`` or a CSV/YAML file of a square byte matrix; UsageError
    naming the problem."""
    text = text.strip()
    kind, colon, value = text.partition(":")
    if kind in GENERATORS and colon:
        name, bounds, example = _FACTORS[kind]
        try:
            factor = float(value)
        except ValueError:
            raise UsageError(f"malformed --splits {text!r}: expected {kind}:{name} with {bounds}, "
                             f"e.g. {example}") from None
        if not math.isfinite(factor) or factor < 0 or (kind == "spread" and factor > 1):
            within = "the spread must be between 0 and 1" if kind == "spread" else \
                f"{name} must be a finite number, at least 0"
            raise UsageError(f"--splits {text!r}: {within}")
        return SplitSpec(text=text, spread=factor, kind=kind)
    if not text:
        raise UsageError("empty --splits: give spread:F, distance:F, zipf:S or a CSV/YAML file of a world x "
                         "world byte matrix")
    return SplitSpec(text=text, matrix=_load_matrix(Path(text)), path=text)


def _load_matrix(path: Path) -> tuple[tuple[int, ...], ...]:
    if not present(path):
        raise UsageError(f"splits file {path}: no such file")
    content = read_text(path, "splits file", CONFIG_BYTES)
    if path.suffix.lower() in _YAML_SUFFIXES:
        rows = parse_yaml(content, path)  # JSON is YAML
        if isinstance(rows, dict) and "splits" in rows:
            rows = rows["splits"]
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise UsageError(f"splits file {path}: expected a list of rows (a world x world matrix of "
                             "bytes), e.g. [[0, 4096], [8192, 0]]")
    elif path.suffix.lower() == ".csv":
        try:
            rows = [[cell.strip() for cell in row] for row in csv.reader(content.splitlines())
                    if row and not row[0].lstrip().startswith("#")]
        except csv.Error as exc:
            raise UsageError(f"splits file {path}: not a valid CSV ({exc})") from None
    else:
        raise UsageError(f"splits file {path}: unknown format {path.suffix or '(no suffix)'}; "
                         "use .csv or .yaml")
    if not rows:
        raise UsageError(f"splits file {path}: empty; expected a world x world matrix of bytes")
    matrix = tuple(tuple(_entry(path, i, j, cell) for j, cell in enumerate(row))
                   for i, row in enumerate(rows))
    width = len(matrix)
    for i, row in enumerate(matrix):
        if len(row) != width:
            raise UsageError(f"splits file {path}: not square: row {i} has {plural(len(row), 'entry')}, "
                             f"the matrix has {plural(width, 'row')}")
    if not any(any(row) for row in matrix):
        raise UsageError(f"splits file {path}: every entry is 0; nothing would move")
    return matrix


def _entry(path: Path, i: int, j: int, cell: object) -> int:
    where = f"splits file {path}: entry [{i}][{j}]"
    if isinstance(cell, bool):
        raise UsageError(f"{where} = {shown(cell)} is not a byte count")
    if isinstance(cell, int):
        value = cell
    elif isinstance(cell, float) and cell.is_integer():
        value = int(cell)
    elif isinstance(cell, str) and cell.strip().startswith("-"):
        raise UsageError(f"{where} = {cell.strip()} is negative")
    elif isinstance(cell, str):
        try:
            value = parse_size(cell)
        except SizeTooLarge:
            raise UsageError(f"{where} = {shown(cell)} {TOO_LARGE}") from None
        except UsageError:
            raise UsageError(f"{where} = {shown(cell)} is not a byte count (e.g. 4096 or 4K)") from None
    else:
        raise UsageError(f"{where} = {shown(cell)} is not a byte count")
    if value < 0:
        raise UsageError(f"{where} = {value} is negative")
    if value > MAX_SIZE_BYTES:
        raise UsageError(f"{where} = {shown(value)} {TOO_LARGE}")
    return value


def check_element_sizes(spec: SplitSpec, dtypes: dict[str, int]) -> None:
    """Every entry of a splits file must be whole elements of every dtype of the run."""
    if spec.matrix is None:
        return
    for dtype, element_size in dtypes.items():
        for i, row in enumerate(spec.matrix):
            for j, value in enumerate(row):
                if value % element_size:
                    raise UsageError(f"splits file {spec.path}: entry [{i}][{j}] = {value} bytes is not a "
                                     f"whole number of {dtype} elements ({element_size} bytes)")


def check_world_size(spec: SplitSpec, world_size: int) -> None:
    """A splits file must be world x world."""
    if spec.matrix is not None and len(spec.matrix) != world_size:
        raise UsageError(f"splits file {spec.path}: a {len(spec.matrix)} x {len(spec.matrix)} matrix, but "
                         f"the run has {plural(world_size, 'rank')} (it needs {world_size} x {world_size})")


# --- the generated spread ------------------------------------------------------------------------

def spread_weight(position: int, world_size: int, spread: float) -> float:
    """1 + F x d with d running linearly from -1 (position 0) to +1 (position n - 1)."""
    if world_size == 1:
        return 1.0
    return 1.0 + spread * (2.0 * position / (world_size - 1) - 1.0)


def uniform_count(size_bytes: int, world_size: int, element_size: int) -> int:
    """Elements per pair (or per rank chunk) of the uniform collective of this size."""
    return size_bytes // (world_size * element_size)


def ring_distance(i: int, j: int, world_size: int) -> int:
    """How far apart ranks i and j are on a ring of ``world_size``: 0 for a rank and itself."""
    gap = abs(i - j)
    return min(gap, world_size - gap)


def distance_row(i: int, world_size: int, factor: float) -> list[float]:
    """distance:F, rank i's share of what it sends to each rank j: (1 + d(i, j))^-F over the row's sum."""
    weights = [(1.0 + ring_distance(i, j, world_size)) ** -factor for j in range(world_size)]
    total = sum(weights)
    return [weight / total for weight in weights]


def zipf_weight(j: int, exponent: float) -> float:
    """zipf:S, what every rank sends rank j against what it sends rank 0: (j + 1)^-S."""
    return (j + 1.0) ** -exponent


def pair_counts(spec: SplitSpec, size_bytes: int, world_size: int, element_size: int
                ) -> tuple[tuple[int, ...], ...]:
    """all_to_allv: [i][j] = elements rank i sends rank j."""
    if spec.matrix is not None:
        return tuple(tuple(value // element_size for value in row) for row in spec.matrix)
    base = uniform_count(size_bytes, world_size, element_size)
    factor = spec.spread or 0.0
    n = world_size
    if spec.kind == "distance":  # each rank sends n x c in all, the nearest ranks the most
        return tuple(tuple(math.floor(n * base * share) for share in distance_row(i, n, factor))
                     for i in range(n))
    if spec.kind == "zipf":  # rank 0, the hottest, receives n x c: the busiest rank moves the size
        return tuple(tuple(math.floor(base * zipf_weight(j, factor)) for j in range(n)) for _ in range(n))
    return tuple(tuple(math.floor(base * spread_weight((i + j) % n, n, factor)) for j in range(n))
                 for i in range(n))


def chunk_counts(spec: SplitSpec, size_bytes: int, world_size: int, element_size: int,
                 by_row: bool) -> tuple[int, ...]:
    """all_gather_v (by_row) and reduce_scatter_v: elements in each rank's chunk.

    From a file, rank r's chunk is the mean of row r (what r sends, for all_gather_v) or of column r
    (what r receives, for reduce_scatter_v), rounded down to whole elements; distance:F and zipf:S take
    the same means of their all_to_allv matrix (in elements).
    """
    if spec.matrix is not None:
        n = len(spec.matrix)
        totals = [sum(spec.matrix[r]) if by_row else sum(row[r] for row in spec.matrix) for r in range(n)]
        return tuple(total // (n * element_size) for total in totals)
    if spec.kind != "spread":
        pairs = pair_counts(spec, size_bytes, world_size, element_size)
        totals = [sum(pairs[r]) if by_row else sum(row[r] for row in pairs) for r in range(world_size)]
        return tuple(total // world_size for total in totals)
    base = uniform_count(size_bytes, world_size, element_size)
    spread = spec.spread or 0.0
    return tuple(math.floor(base * spread_weight(r, world_size, spread)) for r in range(world_size))


def plan_all_to_allv(spec: SplitSpec, size_bytes: int, world_size: int, element_size: int) -> SizePlan:
    pairs = pair_counts(spec, size_bytes, world_size, element_size)
    sent = [sum(row) for row in pairs]
    received = [sum(row[r] for row in pairs) for r in range(world_size)]
    largest = max(max(sent), max(received))
    return SizePlan(max(max(row) for row in pairs), largest * element_size, pair_counts=pairs)


def plan_gathered(by_row: bool):
    """all_gather_v (by_row) or reduce_scatter_v: every rank holds the whole concatenation."""
    def plan(spec: SplitSpec, size_bytes: int, world_size: int, element_size: int) -> SizePlan:
        chunks = chunk_counts(spec, size_bytes, world_size, element_size, by_row)
        return SizePlan(max(chunks), sum(chunks) * element_size, chunk_counts=chunks)
    return plan


def describe(plan: SizePlan, element_size: int) -> str:
    """A short account of a plan's unevenness for notes: the smallest and largest chunk, '512 B to 12.1
    KiB per rank' (in the units the tables use, not raw byte counts)."""
    counts = [c for row in plan.pair_counts for c in row] if plan.pair_counts else list(plan.chunk_counts)
    low, high = min(counts) * element_size, max(counts) * element_size
    kind = "per pair" if plan.pair_counts else "per rank"
    return f"{readable_size(low)} to {readable_size(high)} {kind}"
