"""Message sizes and durations as users type them: sizes 1K:1G, 1K:1G:x4, 1M:64M:+8M, 1K,3K,1M, 4096;
durations 90s, 10m, 1h30m, 2h.

K, M and G are powers of 1024 (KiB, MiB, GiB); a trailing B or iB is accepted.

Limits (docs/limits.md), checked here before anything is planned: a size is at most MAX_SIZE_BYTES (a
size beyond any machine's memory is a typo, and one beyond 2^63 bytes overflows every count computed
from it), and a list or range holds at most MAX_SIZES sizes (a range is counted before it is built:
1:1T:+1 is a trillion sizes).
"""

import math
import re
from fractions import Fraction

from commbench.errors import UsageError

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
MAX_SIZE_BYTES = 1024**5  # more than any host or device holds
MAX_SIZE_TEXT = "1 PiB"
TOO_LARGE = f"is above the largest size commbench measures, {MAX_SIZE_TEXT} (docs/limits.md)"
MAX_SIZES = 10_000  # sizes in one --sizes list or range


class SizeTooLarge(UsageError):
    """A size past MAX_SIZE_BYTES: a reader that names the size its own way catches this one."""


def parse_size(text: str) -> int:
    """One size in bytes: '4096', '64K', '1.5M', '1GiB'; at most MAX_SIZE_BYTES."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UsageError(f"malformed size {text!r}: expected bytes such as 4096, 64K, 1M or 1G")
    number, unit = match.groups()
    if len(number.split(".")[0].lstrip("0")) > 20:  # beyond the limit whatever the unit
        raise SizeTooLarge(f"size {text[:40]!r} {TOO_LARGE}")
    try:
        value = Fraction(number) * _UNITS[unit.upper()]  # exact: a float turns 400 digits into infinity
    except ValueError:  # more digits than Python makes a number of (after a fraction's dot)
        raise UsageError(f"size {text[:24]!r}...: too many digits") from None
    if value.denominator != 1:
        raise UsageError(f"size {text!r} is not a whole number of bytes")
    if value > MAX_SIZE_BYTES:
        raise SizeTooLarge(f"size {text!r} {TOO_LARGE}")
    return int(value)


def parse_sizes(spec: str) -> list[int]:
    """A size list or range, in bytes, ascending order kept as the user wrote it for lists."""
    spec = spec.strip()
    if not spec:
        raise UsageError("empty --sizes: give a size such as 1M, a list 1K,4K or a range 1K:1G")
    if ":" in spec:
        return _parse_range(spec)
    parts = [part for part in spec.split(",") if part.strip()]
    _check_count(len(parts), spec)
    sizes = [parse_size(part) for part in parts]
    if not sizes:
        raise UsageError(f"malformed sizes {spec!r}")
    return sizes


def _check_count(count: int, spec: str) -> None:
    if count > MAX_SIZES:
        shown = spec if len(spec) <= 40 else spec[:37] + "..."
        raise UsageError(f"--sizes {shown!r} holds {count:,} sizes, more than the {MAX_SIZES:,} one run "
                         "measures: use a coarser step (x2, +1M) or fewer sizes (docs/limits.md)")


def _parse_range(spec: str) -> list[int]:
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise UsageError(f"malformed size range {spec!r}: expected MIN:MAX, MIN:MAX:xFACTOR or MIN:MAX:+STEP")
    low, high = parse_size(parts[0]), parse_size(parts[1])
    if low > high:
        raise UsageError(f"size range {spec!r}: minimum {parts[0]} is above maximum {parts[1]}")
    step = parts[2].strip() if len(parts) == 3 else "x2"
    if step.startswith(("x", "X", "*")):
        try:
            factor = float(step[1:])
        except ValueError:
            raise UsageError(f"malformed size factor {step!r} in {spec!r}: expected x2, x4, ...") from None
        if not math.isfinite(factor):
            raise UsageError(f"size factor {step!r} in {spec!r} must be a finite number above 1")
        if factor <= 1:
            raise UsageError(f"size factor {step!r} in {spec!r} must be above 1")
        if low == 0:
            raise UsageError(f"size range {spec!r} starts at 0 and cannot grow by a factor")
        _check_count(math.floor(math.log(high / low) / math.log(factor) + 1e-9) + 1, spec)
        sizes, size = [], float(low)
        while size <= high * (1 + 1e-12):
            sizes.append(int(round(size)))
            size *= factor
        return sizes
    if step.startswith("+"):
        increment = parse_size(step[1:])
        if increment <= 0:
            raise UsageError(f"size step {step!r} in {spec!r} must be above 0")
        _check_count((high - low) // increment + 1, spec)
        return list(range(low, high + 1, increment))
    raise UsageError(f"malformed size step {step!r} in {spec!r}: expected xFACTOR (x2) or +STEP (+8M)")


def format_size(num_bytes: int) -> str:
    """Bytes in the largest power-of-1024 unit that holds them exactly: 1 KiB, 1536 KiB, 1020 B."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if num_bytes >= scale and num_bytes % scale == 0:
            return f"{num_bytes // scale} {unit}"
    return f"{num_bytes} B"


def readable_size(num_bytes: int) -> str:
    """A size as a reader takes it in: exact where a unit holds it whole (4 KiB, 1020 B), else to a
    tenth of its unit (641.5 KiB, not 656896 B). Where exactness matters (a size rounded to fit a
    collective: 4 KiB -> 4092 B), format_size."""
    exact = format_size(num_bytes)
    return exact if not exact.endswith(" B") or num_bytes < 1024 else approximate_size(num_bytes)


def approximate_size(num_bytes: float) -> str:
    """'12.3 GiB', '640.0 MiB', '512 B': a size that is not a whole number of units (memory, a size the
    α-β fit derives)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes:.0f} B"


_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


def parse_duration(text: str) -> float:
    """Seconds from '10m', '90s', '1h30m', '2h' or a bare number of seconds; UsageError otherwise."""
    spec = text.strip().lower()
    parts = list(_PART_RE.finditer(spec))
    if not spec or "".join(part.group(0) for part in parts) != spec:
        raise UsageError(f"--duration {text!r}: expected a time such as 90s, 10m, 1h30m or 2h")
    seconds = sum(float(part.group(1)) * _UNIT_SECONDS[part.group(2) or "s"] for part in parts)
    if seconds <= 0:
        raise UsageError(f"--duration {text!r} must be above 0 seconds")
    return seconds
