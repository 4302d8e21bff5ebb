"""The commands on saved results: compare, plot, report, explain and iterations. Each imports its module
when it runs, so `commbench --help` stays fast; none imports torch.
"""

import click

from commbench.config.sweep import parse_list


@click.command()
@click.argument("files", nargs=-1, required=True, metavar="BASE.json NEW.json [MORE.json ...]")
@click.option("--base", "base_files", multiple=True, metavar="FILE",
              help="A base file (repeat, or a glob): their passes pool into the base side, and the files "
                   "given pool into one new side.")
@click.option("--fail-above", type=float, default=None, metavar="PCT",
              help="Exit 1 when a point is significantly more than PCT percent slower (a CI regression "
                   "gate; needs passes: --repeat 5 or more on both sides).")
@click.option("--significance-level", type=float, default=0.05, show_default=True,
              help="The false discovery rate over a comparison's points (Benjamini-Hochberg) at which a "
                   "change counts as significant.")
@click.option("--markdown", is_flag=True, help="Print Markdown tables instead of console tables.")
@click.option("--allow-unjudged", is_flag=True,
              help="With --fail-above: let points the gate cannot judge (fewer than two passes a side, a "
                   "point on one side only) pass, named in a warning, instead of failing the gate.")
def compare(files: tuple[str, ...], base_files: tuple[str, ...], fail_above: float | None,
            significance_level: float, markdown: bool, allow_unjudged: bool) -> int:
    """Compare saved runs point by point: each later file against the first, or the files against
    --base. Passes (--repeat) are the evidence: docs/results.md#comparing-runs-commbench-compare."""
    from commbench.analysis.gate import compare_command

    return compare_command(list(files), fail_above, significance_level, markdown, list(base_files),
                           allow_unjudged)


@click.command()
@click.argument("files", nargs=-1, required=True, metavar="RUN.json [RUN2.json ...]")
@click.option("--output", "-o", "output_path", default="commbench.png", show_default=True,
              help="The image to write (.png, .svg or .pdf).")
@click.option("--collective", default=None, help="Plot only these collectives (comma list).")
def plot(files: tuple[str, ...], output_path: str, collective: str | None) -> None:
    """Plot busbw and latency against size for saved runs."""
    from commbench.analysis.plot import plot_command

    collectives = None if collective is None else parse_list(collective, "--collective")
    plot_command(list(files), output_path, collectives)


@click.command()
@click.argument("files", nargs=-1, required=True, metavar="RUN.json [RUN2.json ...]")
@click.option("--output", "-o", "output_path", default="report.html", show_default=True,
              help="The HTML page to write.")
def report(files: tuple[str, ...], output_path: str) -> None:
    """Write one self-contained HTML page: metadata, plots, tables, α-β fits and a comparison."""
    from commbench.analysis.report import report_command

    report_command(list(files), output_path)


@click.command()
@click.argument("run", metavar="RUN")
@click.option("--collective", default=None, help="Explain only these collectives (comma list).")
@click.option("--size", default=None, metavar="SIZE",
              help="Give every reason, with what it read, for the rows of this size (e.g. 1G); without it "
                   "each row gets a line and the series its ranked reasons.")
def explain(run: str, collective: str | None, size: str | None) -> None:
    """What this hardware allows for each saved row, and why a row falls short (docs/explain.md)."""
    from commbench.analysis.explain import explain_command

    collectives = None if collective is None else parse_list(collective, "--collective")
    explain_command(run, collectives, size)


@click.command()
@click.argument("run", metavar="RUN")
@click.option("--collective", default=None, help="Only these collectives (comma list).")
@click.option("--size", default=None, metavar="SIZE", help="Only the rows of this size (e.g. 64K).")
def iterations(run: str, collective: str | None, size: str | None) -> None:
    """What a run's per-iteration times (--per-iteration) show: spikes by iteration, rank and host, the
    rank last to arrive, each host's times, the first op's cost and the CV (docs/measurement.md)."""
    from commbench.analysis.iterations import iterations_command

    collectives = None if collective is None else parse_list(collective, "--collective")
    iterations_command(run, collectives, size)
