"""`commbench iterations RUN [--collective C] [--size S]`: what a saved run's per-iteration times show
(--per-iteration), row by row: every spike with its iteration, rank and host (and the rank it waited
for), the rank last to arrive over the iterations, each host's times, the first op against the steady
state and the CV (results/iterations.py computes them; nccl-tests' analyze_perf_json.py reads its JSON
for the same).

Invariants: reads the run through results/saved.py and imports no torch; a run without per-iteration
rows, or a collective or size it does not hold, is a one-line usage error; a damaged block is one too,
naming the row.
"""

from commbench.core.sizes import format_size, parse_size
from commbench.errors import UsageError
from commbench.results.iterations import BadIterations, Iterations, by_host, row_lines
from commbench.results.saved import load_run


def iterations_command(path: str, collectives: list[str] | None, size: str | None) -> None:
    run = load_run(path)
    rows = [row for row in run.rows if row.iteration_us]
    if not rows:
        raise UsageError(f"{path}: no row keeps per-iteration times (run with --per-iteration)")
    if collectives:
        held = sorted({row.collective for row in rows})
        unknown = [name for name in collectives if name not in held]
        if unknown:
            raise UsageError(f"--collective {unknown[0]}: no per-iteration rows of it in {path} (it holds "
                             f"{', '.join(held)})")
        rows = [row for row in rows if row.collective in collectives]
    if size is not None:
        wanted = parse_size(size)
        held_sizes = sorted({row.size_bytes for row in rows})
        if wanted not in held_sizes:
            raise UsageError(f"--size {size}: no per-iteration row of that size (the sizes are "
                             f"{', '.join(format_size(held) for held in held_sizes)})")
        rows = [row for row in rows if row.size_bytes == wanted]
    hostnames = [str(name) for name in run.meta.get("hostnames") or []]
    groups = (run.meta.get("groups") or {}).get("members") or None
    print(f"iterations: {run.describe()}")
    for row in rows:
        try:
            found = Iterations.of(row)
        except BadIterations as exc:
            raise UsageError(f"{path}: {exc}") from None
        if found is None:
            continue
        print()
        print("\n".join(row_lines(found, hostnames, groups, every_spike=True)))
        hosts = by_host(found, hostnames)
        if len(hosts) > 1:
            for host in hosts:
                print(f"  {host.host}: ranks {','.join(map(str, host.ranks))}, p50 {host.p50_us:.1f} µs, "
                      f"p99 {host.p99_us:.1f} µs")
