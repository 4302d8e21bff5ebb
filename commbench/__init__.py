"""commbench: a collective-communication benchmark for PyTorch distributed.

The Python API is ``commbench.load`` (docs/python-api.md). Importing commbench stays light: neither
torch nor pandas is imported until something asks for them.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas

__version__ = "0.1.0"
__all__ = ["__version__", "load"]


def load(paths: str | Path | Iterable[str | Path]) -> "pandas.DataFrame":
    """Every row of the saved runs ``paths`` names, with its run's metadata, as one pandas DataFrame.

    ``paths``: a results.json or results.csv, a run directory, a glob ("results/*/results.json"), or a list
    of these. A missing or foreign file, or a glob that matches nothing, raises commbench.errors.UsageError
    naming it. The columns are described in docs/python-api.md.
    """
    from commbench.results.frame import runs_frame  # pandas is imported here, not with commbench
    from commbench.results.saved import load_runs

    return runs_frame(load_runs(paths))
