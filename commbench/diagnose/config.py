"""`commbench diagnose`'s configuration: each field declares its option (config/options.py). The command
reads dumps and starts no ranks, so it nests no launch settings. Importing this module imports neither
torch nor numpy.
"""

from dataclasses import dataclass

from commbench.config.options import check_options, option


@dataclass(kw_only=True)
class DiagnoseConfig:
    """One `commbench diagnose` run."""

    dumps: list[str] = option(factory=list, positional=True, metavar="DUMPS...",
                              help="Flight Recorder dumps, one per rank: directories, globs or files.")
    as_json: bool = option(False, flag="--json", help="The verdict as JSON on stdout, for tools.")
    world_size: int | None = option(None, minimum=1, help="Ranks the job had, when the dumps may not show "
                                    "them all (its last ranks left none).")


def resolve_diagnose(config: DiagnoseConfig) -> DiagnoseConfig:
    """The config checked (UsageError on a value out of range); the dumps are read when it runs."""
    check_options(config)
    return config
