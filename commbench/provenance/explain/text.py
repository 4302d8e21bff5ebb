"""explain in words: a row's sentence ("at 1 GiB: 362 GB/s, 75% of what NVLS allows here (481); NCCL used
RING (370): NCCL_NVLS_ENABLE=0 is set"), the console line under a table, `commbench explain`'s listing,
and the HTML report's section.

Invariants: pure formatting of engine.py's explanations; every text from a results file is HTML-escaped
in the report's section; numbers are GB/s of busbw unless the text says otherwise.
"""

from html import escape

from commbench.core.sizes import approximate_size, format_size
from commbench.provenance.explain.bounds import Bound
from commbench.provenance.explain.engine import RowExplanation, SeriesExplanation
from commbench.provenance.explain.reason import Reason
from commbench.provenance.explain.regime import Regime

NAMES = {"GLOO": "gloo", "P2P": "Send/Recv"}


def number(value: float | None) -> str:
    """Three significant digits without an exponent: 481, 37.0, 4.13, 0.176."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def name(bound: Bound) -> str:
    return NAMES.get(bound.algorithm, bound.algorithm)


def row_sentence(row: RowExplanation, no_bound: str = "") -> str:
    """'at 1 GiB: 362 GB/s, 75% of what NVLS allows here (481); NCCL used RING (370): <first reason>'."""
    text = f"at {format_size(row.size_bytes)}: {number(row.busbw_gbps)} GB/s"
    if row.best is None:
        return f"{text}; no bound" + (f": {no_bound}" if no_bound else "") + (
            f": {row.reasons[0].text}" if row.reasons and not no_bound else "")
    text += f", {row.pct_of_best:.0f}% of what {name(row.best)} allows here ({number(row.best.gbps)})"
    ran = row.ran
    if ran is not None and ran.algorithm != row.best.algorithm and row.ran_known:
        protocol = f"/{row.protocol}" if row.protocol else ""
        text += f"; NCCL used {name(ran)}{protocol} ({number(ran.gbps)})"
    elif row.allowed is not None and row.allowed.algorithm != row.best.algorithm:
        text += f"; NCCL's variables leave {name(row.allowed)} ({number(row.allowed.gbps)})"
    elif row.allowed is None:
        text += "; NCCL's variables leave no algorithm the model knows"
    return text + (f": {row.reasons[0].text}" if row.reasons else "")


def console_line(series: SeriesExplanation) -> str | None:
    """The line under a console table: its first series' largest size."""
    row = series.headline()
    return None if row is None else f"explain: {row_sentence(row, series.no_bound)}"


def regime_text(regime: Regime | None) -> str:
    if regime is None:
        return "no α-β fit with a β (fewer than 2 sizes, or the time does not grow with size)"
    text = (f"α = {regime.alpha_us:.3g} µs, β = {number(regime.beta_gbps)} GB/s (busbw "
            f"{number(regime.beta_bus_gbps)}): latency-bound below {approximate_size(regime.half_bytes)}, "
            f"90% of β from {approximate_size(regime.near_peak_bytes)}")
    if regime.reliable:
        return text
    return f"{text} (unreliable fit: {regime.reliability}; the rules do not use it)"


def reason_lines(reasons: tuple[Reason, ...], indent: str = "    ") -> list[str]:
    lines = []
    for index, reason in enumerate(reasons, 1):
        cost = "cost not estimated" if reason.loss is None else f"costs ~{reason.loss:.0%}"
        lines.append(f"{indent}{index}. {reason.text} [{reason.rule}; {cost}; {reason.basis}]")
        evidence = ", ".join(f"{key}={value}" for key, value in reason.evidence.items())
        if evidence:
            lines.append(f"{indent}   read: {evidence}")
    return lines


def bound_lines(bounds: tuple[Bound, ...], indent: str = "    ") -> list[str]:
    lines = []
    for bound in bounds:
        if not bound.available:
            lines.append(f"{indent}{name(bound):<15}      -  {bound.why_not}")
            continue
        lines.append(f"{indent}{name(bound):<15} {number(bound.gbps):>6}  {bound.limit}: {bound.formula}")
        lines.append(f"{indent}{'':<23}peak: {bound.peak}")
        if bound.sources:
            lines.append(f"{indent}{'':<23}sources: {', '.join(bound.sources)}")
    return lines


def series_lines(series: SeriesExplanation, sizes: set[int] | None = None) -> list[str]:
    """`commbench explain`'s listing of one series: where it ran, the bounds, the regime, a line per row
    and the ranked reasons (every row's in full with ``sizes``)."""
    lines = [series.title, f"  where: {series.where or series.no_bound}"]
    if series.hardware:
        lines += ["  what each algorithm allows here (busbw GB/s; docs/explain.md):",
                  *bound_lines(series.hardware)]
    changed = [bound for bound, plain in zip(series.allowed, series.hardware, strict=False) if bound != plain]
    if changed:
        lines += ["  what rank 0's NCCL variables leave of them:", *bound_lines(tuple(changed))]
    if series.no_bound:
        lines.append(f"  no bound: {series.no_bound}")
    lines.append(f"  size regime: {regime_text(series.regime)}")
    shown = [row for row in series.rows if sizes is None or row.size_bytes in sizes]
    lines.append("  rows:")
    lines += [f"    {row.mode:<5} {row_sentence(row)}" for row in shown]
    if sizes is None:
        reasons = series.reasons()
        lines += (["  reasons, most costly first:", *reason_lines(reasons)] if reasons
                  else ["  reasons: none found"])
        return lines
    for row in shown:
        lines += [f"  reasons at {format_size(row.size_bytes)} {row.mode}, most costly first:",
                  *(reason_lines(row.reasons) or ["    none found"])]
    return lines


def html_section(explained: list[SeriesExplanation], label: str = "") -> str:
    """The report's section for one run: a table of each series' largest size against its best bound,
    with what ran and the reasons, then each series' bounds folded under it."""
    if not explained:
        return ""
    rows = []
    for series in explained:
        row = series.headline()
        if row is None:
            continue
        reasons = "; ".join(f"{reason.text}" + ("" if reason.loss is None else f" (~{reason.loss:.0%})")
                            for reason in series.reasons())
        cells = [series.title, format_size(row.size_bytes), number(row.busbw_gbps),
                 "-" if row.best is None else f"{name(row.best)} {number(row.best.gbps)}",
                 "-" if row.pct_of_best is None else f"{row.pct_of_best:.0f}%",
                 "-" if row.ran is None else name(row.ran) + ("" if row.ran_known else " (assumed)"),
                 regime_text(series.regime), reasons or series.no_bound or "none found"]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    head = "".join(f"<th>{escape(column)}</th>" for column in (
        "series", "size", "busbw GB/s", "best here GB/s", "% of best", "ran", "size regime",
        "reasons, most costly first"))
    caption = f"explain: what this hardware allows and why rows fall short{f': {label}' if label else ''}"
    details = "".join(f"<details><summary>{escape(series.title)}: bounds</summary><pre>"
                      f"{escape(chr(10).join(bound_lines(series.hardware, '')))}</pre></details>"
                      for series in explained if series.hardware)
    return (f"<table><caption>{escape(caption)} (docs/explain.md)</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{details}")
