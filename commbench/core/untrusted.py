"""Files from elsewhere, read safely: the one place commbench opens a file it did not write in this run
(saved runs, sweep and model files, --expect and --splits files, recordings of other jobs).

Invariants, each a one-line UsageError naming the file (exit status 2) rather than a hang, a memory
blow-up or a traceback:
- only a regular file is read: a FIFO, a device, a socket or a directory is named for what it is, and
  looking never blocks (the path is stat'ed before it is opened, and opened without waiting);
- at most the kind's cap of bytes is read, and at most the same cap is inflated from gzip (a small file
  that inflates to gigabytes stops at the cap);
- JSON and YAML nest at most MAX_NESTING containers deep, checked before anything recursive runs;
- YAML builds plain values only: strings, numbers, booleans, null, lists and mappings. Tags other than
  the plain types' and aliases (``*name``, the "billion laughs") are refused; a date stays a string;
- a value shown in a message is cut short (``shown``), so a message stays one line whatever the file holds.
The caps are docs/limits.md's "Files commbench reads".
"""

import json
import math
import os
import pickletools
import re
import reprlib
import stat
import struct
import zlib
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from commbench.core.sizes import approximate_size, format_size
from commbench.errors import UsageError

MiB = 1 << 20
CONFIG_BYTES = 16 * MiB  # a sweep file, a model file, an --expect or baselines file, a --splits file
RESULTS_BYTES = 1024 * MiB  # a saved run's results.json or results.csv
RECORDING_BYTES = 1024 * MiB  # a Flight Recorder dump or a profiler trace, as stored and once inflated
MAX_NESTING = 64  # containers inside one another in a JSON or YAML file (commbench's own reach 6)
MAX_RECORDED_RANKS = 1 << 20  # ranks a recording may name (a rank, a world size, a group's member)
INT64 = 1 << 63  # a whole number from a file is below 2^63 in size: pandas' Int64, torch's counts

_GZIP_MAGIC = b"\x1f\x8b"
_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def file_kind(mode: int) -> str:
    """What a file of this st_mode is, in words ('a FIFO (named pipe)')."""
    return "a regular file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def present(path: Path) -> bool:
    """Whether something is at ``path``. Where looking fails for another reason than its absence (a
    name too long, no permission), True: the reader goes on and says why it cannot read it."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except (OSError, ValueError):
        return True
    return True


def is_directory(path: Path) -> bool:
    """Whether ``path`` is a directory; False where looking fails (a name too long: not a directory)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def read_bytes(path: Path, what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (a ``what``: 'results file'), at most ``limit`` of them."""
    try:
        found = os.stat(path)
        if not stat.S_ISREG(found.st_mode):
            raise UsageError(f"{path} is {file_kind(found.st_mode)}, not a regular file: a {what} is read "
                             "only from a regular file")
        if found.st_size > limit:
            raise _too_large(path, what, limit, f"{approximate_size(found.st_size)}, more")
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it does not wait
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {what}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise UsageError(f"{path}: cannot read the {what}: {_reason(exc)}") from None
    try:
        opened = os.fstat(handle)
        if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino) or not stat.S_ISREG(opened.st_mode):
            raise UsageError(f"{path} changed while it was opened: give a file that stays put")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {_reason(exc)}") from None
    finally:
        os.close(handle)
    if len(data) > limit:
        raise _too_large(path, what, limit)
    return data


def inflate(data: bytes, path: Path, what: str, limit: int) -> bytes:
    """``data`` inflated when it is gzip (one member or several), at most ``limit`` bytes of it; other
    data as it is."""
    if data[:2] != _GZIP_MAGIC:
        return data
    parts: list[bytes] = []
    total = 0
    rest = data
    while rest:
        if rest[:2] != _GZIP_MAGIC:
            raise UsageError(f"{path}: not a gzip file after {format_size(len(data) - len(rest))}: a corrupt "
                             f"{what}")
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            part = inflater.decompress(rest, limit + 1 - total)
        except zlib.error as exc:
            raise UsageError(f"{path}: truncated or corrupt gzip data ({exc})") from None
        total += len(part)
        if total > limit:
            raise _too_large(path, what, limit, "inflates to more")
        if not inflater.eof:
            raise UsageError(f"{path}: truncated gzip data: the {what} ends inside a compressed stream")
        parts.append(part)
        rest = inflater.unused_data
    return parts[0] if len(parts) == 1 else b"".join(parts)


def decode_text(data: bytes, path: Path, what: str) -> str:
    """UTF-8 text (a byte order mark allowed); UsageError naming where it is not."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}): "
                         f"a {what} is text") from None


def read_text(path: Path, what: str, limit: int) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes of it."""
    return decode_text(read_bytes(path, what, limit), path, what)


# --- JSON -------------------------------------------------------------------------------------------

_ESCAPES = (b"\\\\", b'\\"')  # escaped backslashes, then escaped quotes: what is left ends no string
_JSON_STRING = re.compile(rb'"[^"]*"')
_INNERMOST_PAIR = re.compile(rb"\[\]|\{\}")  # one scan: a pair emptied by it waits for the next
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b'[]{}"')))


def json_nesting_exceeds(data: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether JSON text nests containers more than ``limit`` deep, found at C speed: strings removed,
    then the innermost bracket pairs removed ``limit`` times. Text whose brackets do not pair up says
    False: the parser then names what is wrong with it."""
    for escape in _ESCAPES:
        data = data.replace(escape, b"")
    brackets = _JSON_STRING.sub(b"", data.translate(None, _NOT_BRACKETS)).replace(b'"', b"")
    for _ in range(limit):
        if not brackets:
            return False
        inner = _INNERMOST_PAIR.sub(b"", brackets)
        if len(inner) == len(brackets):
            return False
        brackets = inner
    return bool(brackets)


def parse_json(data: bytes | str, path: Path, what: str) -> Any:
    """JSON text as Python values; UsageError for deeper nesting than MAX_NESTING or broken JSON."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if json_nesting_exceeds(raw):
        raise UsageError(f"{path}: not a {what} (containers nested more than {MAX_NESTING} deep)")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UsageError(f"{path}: not a {what} (not valid JSON: {_reason(exc)})") from None


# --- pickles ----------------------------------------------------------------------------------------

def _pickle_arguments() -> tuple[dict[int, int], dict[int, str], set[int]]:
    """Each opcode's argument, from the standard library's table: fixed bytes, a length prefix (its
    struct format), or text up to a newline."""
    fixed, sized, to_newline = {}, {}, set()
    for opcode in pickletools.opcodes:
        code, width = ord(opcode.code), opcode.arg.n if opcode.arg else 0
        if width >= 0:
            fixed[code] = width
        elif width == pickletools.UP_TO_NEWLINE:
            to_newline.add(code)
        else:
            sized[code] = {pickletools.TAKEN_FROM_ARGUMENT1: "<B", pickletools.TAKEN_FROM_ARGUMENT4: "<i",
                           pickletools.TAKEN_FROM_ARGUMENT4U: "<I",
                           pickletools.TAKEN_FROM_ARGUMENT8U: "<Q"}[width]
    return fixed, sized, to_newline


_FIXED_ARGUMENT, _SIZED_ARGUMENT, _LINE_ARGUMENT = _pickle_arguments()
# a number, text, bytes, None, a boolean, an empty list, dict or set (an empty tuple is a tuple)
_PUSHES_VALUE = set(b"IJKML\x8a\x8bSTUBC\x8e\x96N\x88\x89V\x8cX\x8dFG]}\x8f")
_NESTS = set(b")t\x85\x86\x87\x91")  # EMPTY_TUPLE, TUPLE, TUPLE1-3, FROZENSET: hashed item by item
MAX_HASHED_VALUES = 1_000_000  # values in one tuple or frozenset of a pickle, a shared one each time


def pickle_nesting_exceeds(data: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether a pickle builds a tuple (or frozenset) nested more than ``limit`` deep or holding more
    than MAX_HASHED_VALUES values, counting a value each time it is shared. Python hashes a tuple (as a
    dict key, a set member) through its items in C, unguarded: a deep one crashes the process with a
    segmentation fault that no handler sees, and a small pickle whose tuples share their items (the
    memo) takes longer than the age of the universe. Other containers cannot be hashed. The opcodes
    are followed as the unpickler would (its stack and memo, holding each value's depth and count); an
    opcode the unpickler refuses, or a stream that does not make sense, ends the walk with False: the
    unpickler then says what is wrong. Pure Python: about ten times the unpickler's own time."""
    stack: list[tuple[int, int]] = []  # each value's (tuple depth, values in it counting itself)
    marks: list[int] = []
    memo: dict[int, tuple[int, int]] = {}
    position, size = 0, len(data)
    while position < size:
        code, start = data[position], position + 1
        position = start + _argument_length(data, code, start)
        if code in _PUSHES_VALUE:
            stack.append((0, 1))
        elif code == 0x28:  # MARK
            marks.append(len(stack))
        elif code in _NESTS:
            first = (len(stack) - (code - 0x84) if code in (0x85, 0x86, 0x87) else len(stack) if code == 0x29
                     else marks.pop() if marks else -1)
            if first < 0:
                return False
            items = stack[first:]
            built = (1 + max((depth for depth, _ in items), default=0), 1 + sum(count for _, count in items))
            if built[0] > limit or built[1] > MAX_HASHED_VALUES:
                return True
            del stack[first:]
            stack.append(built)
        elif not _follow_plain(code, data[start:position], stack, marks, memo):
            return False
    return False


def _argument_length(data: bytes, code: int, start: int) -> int:
    if code in _FIXED_ARGUMENT:
        return _FIXED_ARGUMENT[code]
    if code in _SIZED_ARGUMENT:
        form = _SIZED_ARGUMENT[code]
        width = struct.calcsize(form)
        length = struct.unpack_from(form, data, start)[0] if start + width <= len(data) else -1
        return width + length if length >= 0 else len(data)  # a negative length: the walk ends
    if code in _LINE_ARGUMENT:
        end = data.find(b"\n", start)
        return len(data) if end < 0 else end + 1 - start
    return 0


def _memo_index(opcode: str, argument: bytes) -> int | None:
    """The memo slot a GET or PUT names: one byte, four bytes or text, the same slot however written."""
    if opcode in "gp":
        text = argument.strip()
        return int(text) if text.isdigit() else None
    return int.from_bytes(argument, "little")


def _follow_plain(code: int, argument: bytes, stack: list[tuple[int, int]], marks: list[int],
                  memo: dict[int, tuple[int, int]]) -> bool:
    """One opcode that builds no tuple, on the depth stack; False where the unpickler stops (STOP, an
    opcode it refuses) or the stream does not make sense."""
    opcode = chr(code)
    if opcode in "ld":  # LIST, DICT: a new container of the items since the mark
        if not marks:
            return False
        del stack[marks.pop():]
        stack.append((0, 1))
    elif opcode in "eu\x901":  # APPENDS, SETITEMS, ADDITEMS, POP_MARK
        if not marks:
            return False
        del stack[marks.pop():]
    elif opcode in "as0":  # APPEND, SETITEM, POP (which may pop a mark)
        if opcode == "0" and marks and marks[-1] == len(stack):
            marks.pop()
            return True
        taken = 2 if opcode == "s" else 1
        if len(stack) < taken:
            return False
        del stack[-taken:]
    elif opcode == "2":  # DUP
        if not stack:
            return False
        stack.append(stack[-1])
    elif opcode in "hjg":  # BINGET, LONG_BINGET, GET
        index = _memo_index(opcode, argument)
        if index is None:
            return False
        stack.append(memo.get(index, (0, 1)))
    elif opcode in "qrp\x94":  # BINPUT, LONG_BINPUT, PUT, MEMOIZE
        index = len(memo) if opcode == "\x94" else _memo_index(opcode, argument)
        if not stack or index is None:
            return False
        memo[index] = stack[-1]
    else:
        return opcode in "\x80\x95"  # PROTO and FRAME change nothing; anything else ends the walk
    return True


# --- YAML -------------------------------------------------------------------------------------------

_YAML_TAG = "tag:yaml.org,2002:"
_PLAIN_TAGS = {f"{_YAML_TAG}{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map")}
_NESTING_EVENTS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)


class UntrustedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, further bounded: containers at most MAX_NESTING deep, no aliases, no tags
    but the plain types', dates left as strings, and a value that cannot be built (``!!int abc``,
    ``0x_``) a ConstructorError at its line rather than a ValueError."""

    yaml_implicit_resolvers = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != f"{_YAML_TAG}timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.nesting = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise ComposerError(None, None, f"an alias (*{event.anchor}): write the value out instead",
                                event.start_mark)
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and tag not in _PLAIN_TAGS:
            raise ComposerError(None, None, f"the tag {_tag_name(tag)}: only plain values are read "
                                "(strings, numbers, true/false, null, lists, mappings)", event.start_mark)
        nests = isinstance(event, _NESTING_EVENTS)
        if nests:
            self.nesting += 1
            if self.nesting > MAX_NESTING:
                raise ComposerError(None, None, f"containers nested more than {MAX_NESTING} deep",
                                    event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self.nesting -= nests

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # PyYAML's builders fail as they may ('!!int' alone: an IndexError)
            raise ConstructorError(None, None, f"cannot read {shown(node.value)} as "
                                   f"{_tag_name(node.tag)} ({_reason(exc)})", node.start_mark) from None


def yaml_problem(path: Path, exc: yaml.YAMLError) -> UsageError:
    """A YAML error as one line, 'FILE:LINE: not valid YAML: problem', naming where it started."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        context = ""
        if exc.context and exc.context_mark is not None and exc.problem:
            context = f" ({exc.context} started on line {exc.context_mark.line + 1})"
        return UsageError(f"{path}{line}: not valid YAML: {exc.problem or exc.context}{context}")
    if isinstance(exc, yaml.reader.ReaderError):
        return UsageError(f"{path}: not valid YAML: character {exc.character:#x} at offset {exc.position} is "
                          "not allowed")
    return UsageError(f"{path}: not valid YAML: {_reason(exc)}")


def yaml_root(text: str, path: Path) -> tuple[UntrustedLoader, yaml.Node | None]:
    """The loader and the composed root node of one YAML document (None when empty), for a reader that
    wants each value's line; build values with ``loader.construct_object(node)`` inside ``yaml_errors``."""
    try:
        loader = UntrustedLoader(text)
        return loader, loader.get_single_node()
    except yaml.YAMLError as exc:
        raise yaml_problem(path, exc) from None
    except RecursionError:
        raise UsageError(f"{path}: containers nested too deep: not valid YAML") from None


def load_yaml(path: Path, what: str, limit: int = CONFIG_BYTES) -> Any:
    """The plain values of the YAML file ``path`` (None for an empty one)."""
    return parse_yaml(read_text(path, what, limit), path)


def parse_yaml(text: str, path: Path) -> Any:
    loader, root = yaml_root(text, path)
    if root is None:
        return None
    try:
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise yaml_problem(path, exc) from None
    finally:
        loader.dispose()


# --- values ----------------------------------------------------------------------------------------

_WHOLE_NUMBER_TEXT = re.compile(r"-?[0-9]{1,19}")  # ASCII: '²'.isdigit() is True, int('²') fails


def whole_number(value: Any, minimum: int = -INT64, below: int = INT64) -> int | None:
    """A whole number from a file: an int, or text of ASCII digits (some writers give numbers as
    text), within [minimum, below); None for anything else (a float, a list, 'NaN', '²', 10^30)."""
    if isinstance(value, str) and _WHOLE_NUMBER_TEXT.fullmatch(value.strip()):
        value = int(value)
    if type(value) is int and minimum <= value < below:
        return value
    return None


def finite_number(value: Any) -> float | None:
    """A number from a file as a float when it is one and finite; None otherwise (NaN, a string)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int beyond a float's range
            return None
        return number if math.isfinite(number) else None
    return None


# --- values in messages -----------------------------------------------------------------------------

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 6, 6, 4
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = 40


def shown(value: Any, width: int = 60) -> str:
    """A value from a file as a message shows it: a short repr ('[1, 2, 3, ...]'), at most ``width``
    characters, whatever its size or depth."""
    if isinstance(value, int) and value.bit_length() > 13_000:  # Python turns at most 4300 digits into text
        return f"an integer of {math.floor(value.bit_length() * math.log10(2)) + 1} digits"
    text = _SHORT.repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _too_large(path: Path, what: str, limit: int, found: str = "more") -> UsageError:
    return UsageError(f"{path}: {found} than the {format_size(limit)} a {what} may hold (docs/limits.md)")


def _tag_name(tag: str) -> str:
    """A tag as it was written: !!binary for YAML's own, !name for a local one."""
    return "!!" + tag.removeprefix(_YAML_TAG) if tag.startswith(_YAML_TAG) else tag


def _reason(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    line = " ".join(text.split())
    return line if len(line) <= 120 else line[:117] + "..."
