"""The two ways commbench stops early: the user asked for something wrong, or the run failed."""


class UsageError(Exception):
    """Bad input: a one-line message, exit status 2, before any process group starts."""

    exit_code = 2


class RunError(Exception):
    """A failure while measuring: names the collective, size and rank; exit status 1."""

    exit_code = 1


class Terminated(Exception):
    """SIGTERM arrived: stop, keep what was measured, exit 128 + signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.exit_code = 128 + signum


def did_you_mean(word: str, choices: list[str]) -> str:
    """A ' (did you mean X?)' suffix for the closest choice, or '' when nothing is close."""
    import difflib

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
