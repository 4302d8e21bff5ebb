"""A count with its noun, as every message, table and page prints one: '1 rank', '3 ranks', '2 passes'.

The one pluraliser: English's regular plurals (pass -> passes, entry -> entries, rank -> ranks); a noun
of several words takes the plural on its last (wrong element -> wrong elements); an irregular plural is
given (``many``).
"""

_SIBILANT_ENDINGS = ("s", "x", "z", "ch", "sh")
_VOWELS = "aeiou"


def plural_form(noun: str) -> str:
    """The regular plural of ``noun``."""
    if noun.endswith(_SIBILANT_ENDINGS):
        return noun + "es"
    if len(noun) > 1 and noun.endswith("y") and noun[-2] not in _VOWELS:
        return noun[:-1] + "ies"
    return noun + "s"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """'1 rank', '0 ranks', '3 ranks': the count, then the noun, plural unless the count is 1."""
    return f"{count} {noun if count == 1 else many or plural_form(noun)}"
