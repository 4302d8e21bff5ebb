"""Rows kept as columns: a block of rows measured together (RowBlock), and a growing sequence of rows
kept as blocks (RowColumns).

A fabric pass of N ranks has 2N(N-1) rows, two million at 1,024 ranks, and as Row objects each took
2.2 KB. Kept as columns, a field with one value over a block is stored once, and a field that varies is
a numpy array in the narrowest form that holds its values exactly: whole numbers in the smallest integer
type that fits them, numbers that are whole thousandths (the µs of results.rows.microseconds, which the
clocks resolve to the nanosecond) as int32 counts of thousandths, other numbers as float64, text as
codes into the distinct values; None, where a field allows it, as a mask beside; a field whose values
are another's (a fabric row's busbw is its algbw) shares that field's array. A per-sample or per-rank
list is the lists' lengths and their values end to end, kept the same way. Anything else (a value of a
type its field does not declare) stays a Python object. So every Row read back equals the Row stored,
field for field and type for type.

Reading a row builds a Row on demand; ``values(name)`` gives one field over all the rows as an array
(numbers as float64 with NaN for None, whole-number fields without None as int64, text as objects), which
is how fabric's analysis reads two million rows without making a Row of each. A results.json holds a
block as its columns too (``saved``; docs/results.md).
"""

import base64
import binascii
import bisect
import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from itertools import chain, repeat
from types import NoneType
from typing import Any, overload

import numpy as np

from commbench.core.untrusted import shown
from commbench.results.model import ROW_KINDS, Row

FIELDS = tuple(item.name for item in fields(Row))
_EVERY_FIELD = operator.attrgetter(*FIELDS)  # a row's values, in FIELDS order
PENDING_ROWS = 256  # rows appended one by one are sealed into a block this many at a time
THOUSANDTHS = 1000.0
INT32 = 2**31 - 1
# The dtypes of a packed array in results.json (numpy's names, little-endian): none others are read.
WHOLE_DTYPES = ("|i1", "<i2", "<i4", "<i8")
PACKED_DTYPES = (*WHOLE_DTYPES, "<f8", "|b1")


def packed(data: np.ndarray) -> dict[str, str]:
    """A numpy array as results.json holds it: {"dtype": its numpy name, little-endian, "b64": its
    bytes in base64}."""
    little = data.astype(data.dtype.newbyteorder("<"), copy=False)
    return {"dtype": little.dtype.str, "b64": base64.b64encode(little.tobytes()).decode("ascii")}


def unpacked(saved: Any, count: int | None, what: str, dtypes: Sequence[str] = PACKED_DTYPES) -> np.ndarray:
    """The array of a packed one (``packed``), read only, of ``count`` values when that is given;
    ValueError naming ``what`` when it is not {"dtype", "b64"} of one of ``dtypes`` and that length."""
    if not (isinstance(saved, dict) and set(saved) == {"dtype", "b64"} and saved["dtype"] in dtypes
            and isinstance(saved["b64"], str)):
        raise ValueError(f"{what} is not a packed array ({{dtype: one of {', '.join(dtypes)}, b64: text}})")
    try:
        data = base64.b64decode(saved["b64"].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError(f"{what}: its b64 is not base64") from None
    dtype = np.dtype(saved["dtype"])
    if len(data) % dtype.itemsize or (count is not None and len(data) != count * dtype.itemsize):
        found = f"{len(data) / dtype.itemsize:g}"
        raise ValueError(f"{what} holds {found} values, not {count if count is not None else 'whole ones'}")
    array = np.frombuffer(data, dtype=dtype)
    if dtype == np.bool_ and array.view(np.uint8).max(initial=0) > 1:
        raise ValueError(f"{what} holds a byte that is neither true nor false")
    return array


def _missing(values: Sequence) -> np.ndarray | None:
    if None not in values:
        return None
    return np.fromiter(map(operator.is_, values, repeat(None)), dtype=bool, count=len(values))


def _narrowest(data: np.ndarray) -> np.ndarray:
    if not data.size:
        return data.astype(np.int8)
    low, high = int(data.min()), int(data.max())
    for kind in (np.int8, np.int16, np.int32):
        bounds = np.iinfo(kind)
        if bounds.min <= low and high <= bounds.max:
            return data.astype(kind)
    return data


@dataclass(frozen=True, slots=True)
class Numbers:
    """Numbers of one kind (int or float), None where ``missing``; floats that are whole thousandths are
    kept as int32 counts of them (``thousandths``)."""

    data: np.ndarray
    floats: bool
    thousandths: bool
    missing: np.ndarray | None

    @classmethod
    def of(cls, values: Sequence, floats: bool) -> "Numbers | None":
        """The numbers, or None when a value is of another type (then they are kept as objects)."""
        if not set(map(type, values)) <= {float if floats else int, NoneType}:
            return None
        missing = _missing(values)
        filled = values if missing is None else [0 if value is None else value for value in values]
        if not floats:
            try:
                data = np.array(filled, dtype=np.int64) if filled else np.zeros(0, dtype=np.int64)
            except OverflowError:  # beyond 64 bits: kept as objects
                return None
            return cls(_narrowest(data), False, False, missing)
        data = np.array(filled, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            counts = np.rint(data * THOUSANDTHS)
            if np.isfinite(counts).all() and (np.abs(counts) <= INT32).all():
                whole = counts.astype(np.int32)
                back = whole / THOUSANDTHS  # what item() and decode() give back
                if ((back == data) & (np.signbit(back) == np.signbit(data))).all():
                    return cls(whole, True, True, missing)
        return cls(data, True, False, missing)

    def array(self) -> np.ndarray:
        """float64 for floats, int64 for ints; float64 with NaN for None where there is one."""
        if self.thousandths:
            found = self.data.astype(np.float64) / THOUSANDTHS
        elif self.floats or self.missing is not None:
            found = self.data.astype(np.float64)
        else:
            return self.data.astype(np.int64)
        if self.missing is not None:
            found[self.missing] = np.nan
        return found

    def decode(self) -> list:
        found = (self.data.astype(np.float64) / THOUSANDTHS if self.thousandths else self.data).tolist()
        if self.missing is not None:
            for index in np.flatnonzero(self.missing).tolist():
                found[index] = None
        return found

    def item(self, index: int) -> Any:
        if self.missing is not None and self.missing[index]:
            return None
        value = self.data[index].item()
        return value / THOUSANDTHS if self.thousandths else value

    def saved(self) -> dict[str, Any]:
        """{**packed(data), "thousandths": true if so, "none": packed(mask) if any}; a number that is not
        finite is saved as None (JSON's null, as a row's own object holds it)."""
        missing = self.missing
        if self.floats and not self.thousandths:
            infinite = ~np.isfinite(self.data)
            if infinite.any():
                missing = infinite if missing is None else missing | infinite
        found: dict[str, Any] = packed(self.data if missing is None else np.where(missing, 0, self.data))
        if self.thousandths:
            found["thousandths"] = True
        if missing is not None and missing.any():
            found["none"] = packed(missing)
        return found

    @classmethod
    def from_saved(cls, saved: Any, count: int | None, floats: bool, what: str) -> "Numbers":
        """The numbers ``saved`` holds (ValueError when it is not their form): ints of an integer dtype,
        floats as float64 or as whole thousandths."""
        if not isinstance(saved, dict) or not {"dtype", "b64"} <= set(saved) <= \
                {"dtype", "b64", "thousandths", "none"}:
            raise ValueError(f"{what} is not packed numbers ({{dtype, b64, thousandths, none}})")
        thousandths = saved.get("thousandths", False)
        if type(thousandths) is not bool or thousandths and not floats:
            wanted = "true or false" if floats else "false: the field holds whole numbers"
            raise ValueError(f"{what}: thousandths is {shown(thousandths)}, not {wanted}")
        dtypes = WHOLE_DTYPES if thousandths or not floats else ("<f8",)
        data = unpacked({"dtype": saved["dtype"], "b64": saved["b64"]}, count, what, dtypes)
        missing = None
        if "none" in saved:
            missing = unpacked(saved["none"], len(data), f"{what}'s none", ("|b1",))
        return cls(data, floats, bool(thousandths), missing)


@dataclass(frozen=True, slots=True)
class Codes:
    """Text (or any values) as codes into their distinct values."""

    codes: np.ndarray
    distinct: tuple

    @classmethod
    def of(cls, values: Sequence) -> "Codes":
        distinct = tuple(dict.fromkeys(values))
        number = {value: code for code, value in enumerate(distinct)}
        codes = np.fromiter(map(number.__getitem__, values), dtype=np.int64, count=len(values))
        return cls(_narrowest(codes), distinct)

    def array(self) -> np.ndarray:
        distinct = np.empty(len(self.distinct), dtype=object)
        distinct[:] = self.distinct
        return distinct[self.codes]

    def decode(self) -> list:
        return [self.distinct[code] for code in self.codes.tolist()]

    def item(self, index: int) -> Any:
        return self.distinct[int(self.codes[index])]

    def saved(self) -> dict[str, Any] | list:
        """{"text": the distinct values, "codes": packed(codes)} for text; other values as a list."""
        if not all(type(value) is str for value in self.distinct):
            return self.decode()
        return {"text": list(self.distinct), "codes": packed(self.codes)}

    @classmethod
    def from_saved(cls, saved: Any, count: int, what: str) -> "Codes":
        text = saved.get("text") if isinstance(saved, dict) else None
        if not (isinstance(text, list) and set(saved) == {"text", "codes"}
                and all(type(value) is str for value in text)):
            raise ValueError(f"{what} is not text as codes ({{text: [text, ...], codes: packed}})")
        codes = unpacked(saved["codes"], count, f"{what}'s codes", WHOLE_DTYPES)
        if len(codes) and not 0 <= int(codes.min()) <= int(codes.max()) < len(saved["text"]):
            raise ValueError(f"{what}'s codes are not all positions in its {len(saved['text'])} texts")
        return cls(codes, tuple(saved["text"]))


@dataclass(frozen=True, slots=True)
class Objects:
    """Values kept as they are: what no other form holds exactly."""

    values: tuple

    def array(self) -> np.ndarray:
        found = np.empty(len(self.values), dtype=object)
        found[:] = self.values
        return found

    def decode(self) -> list:
        return list(self.values)

    def item(self, index: int) -> Any:
        return self.values[index]

    def saved(self) -> list:
        return list(self.values)


@dataclass(frozen=True, slots=True)
class Lists:
    """A list per row: their lengths, and their items end to end."""

    lengths: np.ndarray
    items: "Numbers | Objects"

    @classmethod
    def of(cls, values: Sequence) -> "Lists | Objects":
        if set(map(type, values)) != {list}:
            return Objects(tuple(values))
        lengths = _narrowest(np.fromiter(map(len, values), dtype=np.int64, count=len(values)))
        flat = list(chain.from_iterable(values))
        items = Numbers.of(flat, True)
        return cls(lengths, items if items is not None else Objects(tuple(flat)))

    def array(self) -> np.ndarray:
        found = np.empty(len(self.lengths), dtype=object)
        found[:] = self.decode()
        return found

    def decode(self) -> list:
        flat = self.items.decode()
        ends = np.cumsum(self.lengths, dtype=np.int64).tolist()
        return [flat[end - length:end] for end, length in zip(ends, self.lengths.tolist(), strict=True)]

    def item(self, index: int) -> list:
        start = int(self.lengths[:index].sum(dtype=np.int64))
        return [self.items.item(position) for position in range(start, start + int(self.lengths[index]))]

    def saved(self) -> dict[str, Any] | list:
        """{"lengths": packed(lengths), "items": the items as Numbers.saved} for lists of numbers; others
        as a list of lists."""
        if not isinstance(self.items, Numbers):
            return self.decode()
        return {"lengths": packed(self.lengths), "items": self.items.saved()}

    @classmethod
    def from_saved(cls, saved: Any, count: int, what: str) -> "Lists":
        if not (isinstance(saved, dict) and set(saved) == {"lengths", "items"}):
            raise ValueError(f"{what} is not lists as {{lengths: packed, items: packed numbers}}")
        lengths = unpacked(saved["lengths"], count, f"{what}'s lengths", WHOLE_DTYPES)
        items = Numbers.from_saved(saved["items"], None, True, f"{what}'s items")
        # each length within the items first, so that their sum (of at most count x items) cannot wrap
        if len(lengths) and not 0 <= int(lengths.min()) <= int(lengths.max()) <= len(items.data) or \
                int(lengths.sum(dtype=np.int64)) != len(items.data):
            raise ValueError(f"{what}'s lengths are not those of its {len(items.data)} items")
        return cls(lengths, items)


Column = Numbers | Codes | Objects | Lists


def _encode(name: str, values: Sequence) -> Column:
    kind, _ = ROW_KINDS[name]
    if kind is list:
        return Lists.of(values)
    if kind is str:
        return Codes.of(values) if set(map(type, values)) == {str} else Objects(tuple(values))
    found = Numbers.of(values, floats=kind is float)
    return found if found is not None else Objects(tuple(values))


def _shared(column: Column, earlier: Iterable[Column]) -> Column:
    """An earlier column that holds the same numbers in the same form, or ``column``: one array for
    fields that agree on every row (a fabric row's busbw is its algbw, its count its size)."""
    if not isinstance(column, Numbers):
        return column
    form = (column.floats, column.thousandths, column.data.dtype, column.missing is None)
    for other in earlier:
        if isinstance(other, Numbers) and (other.floats, other.thousandths, other.data.dtype,
                                           other.missing is None) == form \
                and np.array_equal(other.data, column.data) \
                and (column.missing is None or np.array_equal(other.missing, column.missing)):
            return other
    return column


def _same(values: Sequence) -> bool:
    """Whether one stored value gives back every one of them exactly (lists: only when all are empty,
    since a row's list is its own)."""
    first = values[0]
    kinds = set(map(type, values))
    if kinds == {list}:
        return not any(values)
    if len(kinds) > 1 or values.count(first) != len(values):  # count: identical, or equal
        return False
    if type(first) is float and first != first:  # NaN: counted by identity only if every one is the same
        return all(map(operator.is_, values, repeat(first)))
    return type(first) is not float or first != 0 or len({math.copysign(1.0, value) for value in values}) == 1


class Columnar(Sequence[Row]):
    """Rows that give one field over all of them as an array (values), so that what reads many rows
    reads their columns instead of building each (values_of). Indexing by a position or a slice is
    here; each kind builds the row at a position (_at)."""

    __slots__ = ()

    def values(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def _at(self, position: int) -> Row:
        """The row at ``position``, from 0 to len(self) - 1."""
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        count = len(self)
        if isinstance(index, slice):
            return [self._at(position) for position in range(*index.indices(count))]
        if not -count <= index < count:
            raise IndexError(index)
        return self._at(index % count)


class RowBlock(Columnar):
    """Rows measured together (a fabric round's), column by column: ``same`` holds the fields with one
    value over the block, ``each`` the others. Immutable: ``with_same`` makes a block that shares the
    columns."""

    __slots__ = ("count", "same", "each")

    def __init__(self, count: int, same: dict[str, Any], each: dict[str, Column]) -> None:
        self.count, self.same, self.each = count, same, each

    @classmethod
    def of(cls, rows: Sequence[Row]) -> "RowBlock":
        if isinstance(rows, RowBlock):
            return rows
        same: dict[str, Any] = {}
        each: dict[str, Column] = {}
        columns = zip(*map(_EVERY_FIELD, rows), strict=True) if len(rows) else ([] for _ in FIELDS)
        for name, values in zip(FIELDS, columns, strict=True):
            if values and _same(values):
                same[name] = values[0]
            else:
                each[name] = _shared(_encode(name, values), each.values())
        return cls(len(rows), same, each)

    def __len__(self) -> int:
        return self.count

    def _at(self, position: int) -> Row:
        return self._row({name: column.item(position) for name, column in self.each.items()})

    def __iter__(self) -> Iterator[Row]:
        return map(Row, *self.columns(FIELDS))

    def columns(self, names: Sequence[str], none: Any = None) -> list[Iterable]:
        """Each field's value per row, in the order of ``names``: the rows column by column (a list in
        ``same`` copied for each row, so that each row's list is its own), ``none`` for None (the CSV's
        empty cell)."""
        found: list[Iterable] = []
        for name in names:
            column = self.each.get(name)
            if column is not None:
                values = column.decode()
                if none is not None and None in values:
                    values = [none if value is None else value for value in values]
                found.append(values)
                continue
            value = self.same[name]
            if type(value) is list:
                found.append(map(list, repeat(value, self.count)))
            else:
                found.append(repeat(none if value is None else value, self.count))
        return found

    def _row(self, varying: dict[str, Any]) -> Row:
        return Row(**{name: list(value) if type(value) is list else value  # each row's list its own
                      for name, value in self.same.items()}, **varying)

    def values(self, name: str) -> np.ndarray:
        """One field over the block's rows (see the module docstring for the dtypes)."""
        column = self.each.get(name)
        if column is not None:
            return column.array()
        kind, _ = ROW_KINDS[name]
        value = self.same[name]
        if kind in (int, float) and value is None:
            return np.full(self.count, np.nan)
        if kind in (int, float) and type(value) is kind and (kind is float or -2**63 <= value < 2**63):
            return np.full(self.count, value, dtype=np.int64 if kind is int else np.float64)
        found = np.empty(self.count, dtype=object)
        found[:] = [value] * self.count
        return found

    def with_same(self, **values: Any) -> "RowBlock":
        """The same rows with these fields set to one value each (a soak stamps its pass and time)."""
        each = {name: column for name, column in self.each.items() if name not in values}
        return RowBlock(self.count, {**self.same, **values}, each)

    def saved(self) -> dict[str, Any]:
        """The block as results.json holds it: {"block_of": count, "same": {field: value}, "each": {field:
        its values}}, each column packed (numbers, text and lists of numbers: the columns' own arrays as
        packed arrays) or a list of a value per row (docs/results.md); never without a column, so that a
        file holds a value for every row it stands for."""
        each: dict[str, Any] = {name: column.saved() for name, column in self.each.items()}
        same = dict(self.same)
        if not each:
            each[FIELDS[0]] = [same.pop(FIELDS[0])] * self.count
        return {"block_of": self.count, "same": same, "each": each}

    @classmethod
    def from_saved(cls, count: int, same: dict[str, Any], each: dict[str, Any]) -> "RowBlock":
        """The block of a results.json's {"block_of": count, "same", "each"} whose every value is already
        checked for its field (results/saved.py): each column packed (``saved``) or a list of a value per
        row. ValueError naming the field when a packed column is not of its field's form or length."""
        columns: dict[str, Column] = {}
        for name, values in each.items():
            packed_form = not isinstance(values, list)
            columns[name] = _packed_column(name, values, count) if packed_form else _encode(name, values)
        return cls(count, same, columns)


def _packed_column(name: str, saved: Any, count: int) -> Column:
    kind, _ = ROW_KINDS[name]
    if kind is list:
        return Lists.from_saved(saved, count, name)
    if kind is str:
        return Codes.from_saved(saved, count, name)
    return Numbers.from_saved(saved, count, kind is float, name)


class RowColumns(Columnar):
    """A growing sequence of rows kept as blocks: a block appended as it is (its columns shared), rows
    appended one by one sealed into a block PENDING_ROWS at a time. Reading a row builds it."""

    def __init__(self, rows: Iterable[Row] = ()) -> None:
        self._blocks: list[RowBlock] = []
        self._ends: list[int] = []  # the number of rows up to the end of each block
        self._pending: list[Row] = []
        self.extend(rows)

    @property
    def blocks(self) -> list[RowBlock]:
        self._seal()
        return list(self._blocks)

    def append(self, row: Row) -> None:
        self._pending.append(row)
        if len(self._pending) >= PENDING_ROWS:
            self._seal()

    def extend(self, rows: Iterable[Row]) -> None:
        if isinstance(rows, RowBlock | RowColumns):  # their blocks, shared
            self._seal()
            for block in [rows] if isinstance(rows, RowBlock) else rows.blocks:
                self._add(block)
            return
        for row in rows:
            self.append(row)

    def _add(self, block: RowBlock) -> None:
        if len(block):
            self._blocks.append(block)
            self._ends.append(len(self) + len(block))

    def _seal(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._add(RowBlock.of(pending))

    def __len__(self) -> int:
        return (self._ends[-1] if self._ends else 0) + len(self._pending)

    def _at(self, position: int) -> Row:
        self._seal()
        which = bisect.bisect_right(self._ends, position)
        return self._blocks[which][position - (self._ends[which - 1] if which else 0)]

    def __iter__(self) -> Iterator[Row]:
        self._seal()
        for block in list(self._blocks):
            yield from block

    def values(self, name: str) -> np.ndarray:
        """One field over every row, as RowBlock.values gives it (float64 where one block has a None
        and another an int64 column), filled a block at a time."""
        found = np.zeros(0, dtype=np.float64)
        start = 0
        for block in self.blocks:
            part = block.values(name)
            if not start:
                found = np.empty(len(self), dtype=part.dtype)
            elif part.dtype != found.dtype and found.dtype != object:
                found = found.astype(object if part.dtype == object else np.float64)
            found[start:start + len(part)] = part
            start += len(part)
        return found


class RowsAt(Columnar):
    """The rows of ``rows`` at ``positions``, in that order, picked out without copying them (a pass's
    rows out of a run's)."""

    def __init__(self, rows: Columnar, positions: np.ndarray) -> None:
        self.rows, self.positions = rows, positions

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        if isinstance(index, slice):
            return [self.rows[position] for position in self.positions[index].tolist()]
        return self.rows[int(self.positions[index])]

    def __iter__(self) -> Iterator[Row]:
        return map(self.rows.__getitem__, self.positions.tolist())

    def values(self, name: str) -> np.ndarray:
        return self.rows.values(name)[self.positions]


def rows_at(rows: Sequence[Row], positions: np.ndarray) -> Sequence[Row]:
    """The rows at ``positions`` (a numpy array of them), in that order: a view of columnar rows, a list
    of others."""
    if isinstance(rows, Columnar):
        return RowsAt(rows, positions)
    return [rows[position] for position in positions.tolist()]


def values_of(rows: Sequence[Row], name: str) -> np.ndarray:
    """One field over ``rows`` (a list of Rows, or Columnar rows: a RowBlock, RowColumns, RowsAt), as
    RowBlock.values gives it."""
    if isinstance(rows, Columnar):
        return rows.values(name)
    return _encode(name, list(map(operator.attrgetter(name), rows))).array()
