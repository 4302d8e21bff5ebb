"""The ways commbench stops early: the user asked for something wrong, the run failed, or a signal came.

``failures_named`` is the one place a backend's exception becomes a RunError naming what failed and where;
``brief`` the one way to shorten an exception's text for a message.
"""

import difflib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class UsageError(Exception):
    """Bad input: a one-line message, exit status 2, before any process group starts."""

    exit_code = 2


class RunError(Exception):
    """A failure while measuring: names the collective, size and rank; exit status 1."""

    exit_code = 1


class Terminated(Exception):
    """SIGTERM arrived: stop, keep what was measured, exit 128 + signal number. ``agreed``: every rank
    stops at this same point (a check-in between steps), so none is left in a collective."""

    def __init__(self, signum: int, agreed: bool = False) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.exit_code = 128 + signum
        self.agreed = agreed


class AlreadyReported(Exception):
    """Stop with this exit status, silently: another rank (rank 0) printed the message."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"exit status {exit_code}")
        self.exit_code = exit_code


def brief(exc: BaseException) -> str:
    """An exception's message as one short line: the first line, without a leading [file:line]
    location, cut after its first sentence when long (backends append advice and stack frames)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    line = re.sub(r"^\[[^\]]*:\d+\]\s*", "", line)
    if len(line) > 120 and ". " in line:
        line = line[: line.index(". ")]
    return line.rstrip(".")


def did_you_mean(word: str, choices: list[str]) -> str:
    """A ' (did you mean X?)' suffix for the closest choice, or '' when nothing is close; case does not
    keep a choice from being close (GLOO: gloo)."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""


@contextmanager
def failures_named(describe: Callable[[], str]) -> Iterator[None]:
    """Turn any other exception raised inside into a RunError: ``describe()`` says what failed and
    where ('all_reduce (float32, sum, sync) failed at size 4 KiB on rank 0'), then the backend's words.
    commbench's own stops (usage errors, run errors, signals) pass through unchanged."""
    try:
        yield
    except (RunError, UsageError, Terminated):
        raise
    except Exception as exc:
        raise RunError(f"{describe()}: {brief(exc)}") from exc
