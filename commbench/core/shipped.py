"""Where the sweep files and model presets that ship with commbench are.

In a source checkout they are the repository's configs/; an installed wheel carries the same files under
<prefix>/share/commbench/configs (pyproject's data-files).
"""

import sys
from pathlib import Path

NOT_SWEEPS = ("baselines",)  # configs/baselines.yaml is --expect's data (commbench.provenance), not a sweep


def configs_dir() -> Path | None:
    for candidate in (Path(__file__).resolve().parents[2] / "configs",
                      Path(sys.prefix) / "share" / "commbench" / "configs"):
        if candidate.is_dir():
            return candidate
    return None


def shipped_names(folder: str = "") -> list[str]:
    """The bare names of the shipped files in configs/[folder/]: `commbench sweep NAME` runs one."""
    root = configs_dir()
    if root is None:
        return []
    names = sorted(path.stem for path in (root / folder).glob("*.yaml"))
    return names if folder else [name for name in names if name not in NOT_SWEEPS]


def shipped_file(name: str, folder: str = "") -> Path | None:
    """configs/[folder/]NAME.yaml, when NAME is a bare name of a shipped file."""
    root = configs_dir()
    if root is None or "/" in name or name.endswith((".yaml", ".yml")) or (not folder and name in NOT_SWEEPS):
        return None
    path = root / folder / f"{name}.yaml"
    return path if path.is_file() else None
