"""Text on a console that cannot show every character: an ASCII-only locale (LC_ALL=C without UTF-8
coercion, PYTHONIOENCODING=ascii), or a file name that is not UTF-8.

commbench's tables and notes use µ, ±, ×, arrows and box drawing. Where the console's encoding lacks
one, it is written as one ASCII character ('µs' as 'us', '±' as '~', '×' as 'x', an accented letter
without its accent), so tables keep their columns (rich draws their boxes in ASCII itself); a byte of a
file name that is not UTF-8 is written as '\\xff'. Invariant: printing never raises
UnicodeEncodeError on stdout or stderr once ``prepare_streams`` has run (cli/main.py calls it first,
on the launcher and on every rank).
"""

import codecs
import io
import sys
import unicodedata
from typing import TextIO

ERRORS = "commbench-text"
# One ASCII character for each character commbench prints, so that a table keeps its columns (rich
# measured them before the text reached the stream); box drawing (U+2500-U+257F) is handled apart.
ASCII_FORMS = {"µ": "u", "μ": "u", "±": "~", "×": "x", "·": "-", "→": ">", "←": "<", "↔": "-", "≈": "~",
               "≤": "<", "≥": ">", "≠": "#", "α": "a", "β": "b", "Δ": "d", "…": ".", "—": "-", "–": "-",
               "‘": "'", "’": "'", "“": '"', "”": '"', "•": "*", "✓": "+", "✗": "x", "▲": "^", "▼": "v",
               "°": "o", "\u00a0": " "}


def ascii_form(character: str) -> str:
    """One character as ASCII: its listed form, a line for box drawing, its letter without accents
    (é: e), a byte of a non-UTF-8 file name as \\xNN, else '?'."""
    if character in ASCII_FORMS:
        return ASCII_FORMS[character]
    code = ord(character)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by the file system's decoding
        return f"\\x{code - 0xDC00:02x}"
    if 0x2500 <= code <= 0x257F:
        name = unicodedata.name(character, "")
        return "-" if "HORIZONTAL" in name and "VERTICAL" not in name else \
            "|" if "VERTICAL" in name and "HORIZONTAL" not in name else "+"
    plain = unicodedata.normalize("NFKD", character).encode("ascii", "ignore").decode()
    return plain[:1] or "?"


def _replace(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(ascii_form(character) for character in error.object[error.start:error.end]), error.end


codecs.register_error(ERRORS, _replace)


def prepare_streams(*streams: TextIO | None) -> None:
    """Make stdout and stderr (or the streams given) write what their encoding lacks in ASCII rather
    than raise; a stream that cannot be reconfigured (not a text file, closed) is left as it is."""
    for stream in streams or (sys.stdout, sys.stderr):
        if not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            stream.reconfigure(errors=ERRORS)
        except (ValueError, OSError):  # closed, or a stream that does not allow it
            continue
