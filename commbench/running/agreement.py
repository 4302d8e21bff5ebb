"""How the ranks of a sweep act alike: every rank learns whether any rank failed a step, and the first
failure, before anyone goes on (an op one rank cannot run is skipped by all, instead of leaving the
others waiting inside a collective)."""

from collections.abc import Callable
from typing import Any

from commbench.backends.base import Backend
from commbench.core.words import plural
from commbench.errors import RunError, Terminated, UsageError, brief
from commbench.running.buffers import AllocationFailed


def attempt(action: Callable[[], Any]) -> tuple[Any, str | None]:
    """``action()``'s value, or the first line of the error it raised."""
    try:
        return action(), None
    except (RunError, UsageError, Terminated):
        raise
    except AllocationFailed as exc:  # already one line, naming what a reader needs
        return None, str(exc)
    except Exception as exc:
        return None, brief(exc)


def agree(backend: Backend, error: str | None) -> str | None:
    """Every rank learns whether any rank failed, and the first failure: ranks then act alike."""
    return agree_with_time(backend, error, 0.0)[0]


def agree_with_time(backend: Backend, error: str | None, seconds: float) -> tuple[str | None, float]:
    """``agree``, and the largest of the ranks' ``seconds``, in the same gather."""
    # one array, not a list per rank: thousands of small lists per size also wake the garbage collector
    flags = backend.all_gather_array([0.0 if error is None else 1.0, seconds])
    slowest = float(flags[:, 1].max())
    if not flags[:, 0].any():
        return None, slowest
    texts = backend.all_gather_object(error)
    failing = [rank for rank, text in enumerate(texts) if text is not None]
    if len(failing) == len(texts) and len(set(texts)) == 1:
        return f"{texts[0]} (on every rank)", slowest
    others = len(failing) - 1
    return f"rank {failing[0]}: {texts[failing[0]]}" + (f" (and {plural(others, 'other rank')})"
                                                         if others else ""), slowest
