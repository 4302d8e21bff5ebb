"""`commbench explain RUN [--collective C] [--size S]`: a saved run's rows against what its hardware
allows, with the reasons each falls short (the engine: provenance/explain/, docs/explain.md).

Invariants: reads the run through results/saved.py and imports no torch; a collective or size the run
does not hold is a one-line usage error naming what it does hold.
"""

from commbench.core.sizes import format_size, parse_size
from commbench.errors import UsageError
from commbench.provenance.explain.engine import explain_run
from commbench.provenance.explain.text import series_lines
from commbench.results.saved import load_run


def explain_command(path: str, collectives: list[str] | None, size: str | None) -> None:
    run = load_run(path)
    explained = explain_run(run.meta, run.rows)  # fits recomputed from the rows, as report does
    if not explained:
        raise UsageError(f"{path}: no sweep rows with a busbw to explain (errors, barrier, or a pattern's, "
                         "replay's or fabric's rows)")
    if collectives:
        held = sorted({str(series.series.get("collective")) for series in explained})
        unknown = [name for name in collectives if name not in held]
        if unknown:
            raise UsageError(f"--collective {unknown[0]}: not in {path} (it holds {', '.join(held)})")
        explained = [series for series in explained if series.series.get("collective") in collectives]
    sizes = None
    if size is not None:
        wanted = parse_size(size)
        held_sizes = sorted({row.size_bytes for series in explained for row in series.rows})
        if wanted not in held_sizes:
            raise UsageError(f"--size {size}: no row of that size (the sizes are "
                             f"{', '.join(format_size(held) for held in held_sizes)})")
        sizes = {wanted}
    print(f"explain: {run.describe()}")
    for series in explained:
        print()
        print("\n".join(series_lines(series, sizes)))
