"""The features' registry: fabric, each workload pattern and replay (and what comes next) each register
one ``Feature``, and the command line makes a command of each (cli/commands.py) without importing any
feature by name beyond the import that registers it.

A feature is: a name, a configuration dataclass whose fields declare its options (config/options.py),
how that configuration is resolved (checked and completed: a UsageError on bad input, before any rank
starts and before torch is imported), and how it runs: the work each rank runs once its process group
is up (``work``, a ``running.launch.deferred`` whose signature is every work function's:
``(configs, backend, output, session) -> list[Row]``), or, for a feature that starts no ranks, ``start``
alone. Its result kinds (results/kinds.py: console tables, plot figure, report page, comparison) are
registered with it.

Invariants: a name is registered once per group (again only as the same object); registering imports
no torch (work is deferred); the registry keeps registration order, which is the order of --help.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from commbench.config.launch import SOAK
from commbench.results.kinds import ResultKind, register_kind


@dataclass(frozen=True)
class FeatureGroup:
    """A command that groups features' commands (`commbench pattern fsdp`)."""

    name: str
    summary: str  # its help


@dataclass(frozen=True, kw_only=True)
class Feature:
    """One command a feature package adds."""

    name: str  # the command: `commbench NAME`, or `commbench GROUP NAME`
    summary: str  # the command's help (its first sentence is its line in the group's list)
    config: type  # a dataclass of declared options, nesting a LaunchConfig at `launch` when it starts ranks
    resolve: Callable[[Any], Any]  # the config checked and completed; UsageError on bad input, no torch
    # what each rank runs (running.launch.deferred, a running.rank.Work: named loosely here, so that a
    # feature that starts no ranks registers without importing the ranks' side); None: it starts none
    work: Callable[..., Any] | None = None
    start: Callable[[Any], int] | None = None  # how a resolved config runs, when not launch([config], work)
    kinds: tuple[ResultKind, ...] = ()  # how its rows show, registered with it
    group: FeatureGroup | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)  # field values this command starts from
    soaks: bool = False  # it offers --duration and --repeat (the launch settings declared for SOAK)

    def tags(self) -> set[str]:
        """What a declared option's ``only`` may name for this command to offer it."""
        return {self.name, *([SOAK] if self.soaks else [])}

    def run(self, config: Any) -> int:
        """Resolve ``config`` and run it: the exit status."""
        resolved = self.resolve(config)
        if self.start is not None:
            return self.start(resolved)
        if self.work is None:
            raise TypeError(f"feature {self.name!r} has neither work for the ranks nor a start of its own")
        from commbench.running.launch import launch

        return launch([resolved], self.work)


_FEATURES: dict[tuple[str, str], Feature] = {}


def register_feature(feature: Feature) -> Feature:
    """Add a feature (its name new in its group, or this very feature again) and its result kinds."""
    key = (feature.group.name if feature.group else "", feature.name)
    known = _FEATURES.get(key)
    if known is not None and known is not feature:
        raise ValueError(f"feature {' '.join(filter(None, key))!r} is already registered")
    for kind in feature.kinds:
        register_kind(kind)
    _FEATURES[key] = feature
    return feature


def registered_features() -> list[Feature]:
    """Every registered feature, in the order they were registered."""
    return list(_FEATURES.values())
