"""How far each row is from the peak and from what it should reach: the columns a row gets from its
run's provenance (NCCL's choice, the link peak, the expected busbw and a verdict), and the run's summary.

The verdict rule (docs/provenance.md): pct = 100 x busbw / reference, the reference being the expected
busbw of the --expect baseline's first entry that covers the row, or, with --fail-below alone, the row's
link peak. FAIL below F, the --fail-below PCT or else the baseline's warn_pct; PASS at or above
max(pass_pct, F); WARN between. Only --fail-below makes a FAIL exit 1.

Invariants: annotate_row returns a new Row and never raises; every rank computes the same verdicts from
the same agreed numbers, so every rank ends with the same exit status; a row without busbw (an error
row, barrier) or without a reference gets no verdict.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from commbench.provenance.baselines import Baseline
from commbench.provenance.nccl_debug import NcclLogReader
from commbench.provenance.paths import path_columns
from commbench.provenance.peaks import Peak
from commbench.results.model import Row, describe_row

VERDICTS = ("PASS", "WARN", "FAIL")


@dataclass(frozen=True)
class Judging:
    """What --expect and --fail-below ask for."""

    baseline: Baseline | None = None
    fail_below: float | None = None

    @property
    def active(self) -> bool:
        return self.baseline is not None or self.fail_below is not None

    def boundaries(self) -> tuple[float, float]:
        """(the FAIL line, the PASS line) in percent of the reference."""
        fail = self.fail_below if self.fail_below is not None else (self.baseline.warn_pct if self.baseline
                                                                    else 0.0)
        return fail, max(self.baseline.pass_pct if self.baseline else fail, fail)


@dataclass
class RowContext:
    """What a run knows once started that its rows are annotated with."""

    peak: Peak | None = None
    judging: Judging = Judging()
    nccl: NcclLogReader | None = None  # rank 0 with --nccl-debug

    def annotate(self, row: Row) -> Row:
        return annotate_row(row, self)


def expected_busbw(row: Row, baseline: Baseline) -> float | None:
    for expectation in baseline.expectations:
        if expectation.covers(row.collective, row.world_size, row.device, row.backend, row.dtype,
                              row.size_bytes):
            return expectation.busbw_gbps
    return None


def verdict(pct: float, judging: Judging) -> str:
    fail, passing = judging.boundaries()
    return "FAIL" if pct < fail else "PASS" if pct >= passing else "WARN"


def _nccl_columns(row: Row, reader: NcclLogReader) -> dict[str, Any]:
    reader.refresh()
    choice = reader.choice_for(row.collective, row.dtype, row.count_per_rank, row.group_size)
    if choice is None:
        return {}
    return {"nccl_algo": choice.algorithm, "nccl_proto": choice.protocol, "nccl_channels": choice.channels,
            "nccl_transport": choice.transport}


def annotate_row(row: Row, context: RowContext | None) -> Row:
    """The row with its provenance columns filled in (unchanged without a context)."""
    if context is None:
        return row
    columns: dict[str, Any] = {}
    if context.nccl is not None and not row.error:
        columns.update(_nccl_columns(row, context.nccl))
        columns.update(path_columns(replace(row, **columns), context.nccl))
    busbw = row.busbw_gbps
    if context.peak is not None and busbw is not None:
        columns.update(peak_gbps=round(context.peak.gbps, 4), peak_source=context.peak.source,
                       pct_of_peak=round(100 * busbw / context.peak.gbps, 2))
    judging = context.judging
    expected = expected_busbw(row, judging.baseline) if judging.baseline is not None else None
    reference = expected if judging.baseline is not None else (
        context.peak.gbps if context.peak is not None and judging.fail_below is not None else None)
    if expected is not None:
        columns["expected_gbps"] = expected
    if reference is not None and busbw is not None:
        columns["verdict"] = verdict(100 * busbw / reference, judging)
    return replace(row, **columns) if columns else row


def judged_summary(rows: Sequence[Row], judging: Judging) -> dict[str, Any]:
    """Counts of each verdict, rows without one, and the first FAIL, for the run's metadata."""
    counts = Counter(row.verdict for row in rows if row.verdict)
    fails = [row for row in rows if row.verdict == "FAIL"]
    fail_line, pass_line = judging.boundaries()
    summary: dict[str, Any] = {verdict_name: counts.get(verdict_name, 0) for verdict_name in VERDICTS}
    summary.update(unjudged=sum(1 for row in rows if not row.verdict), fail_below_pct=fail_line,
                   pass_pct=pass_line, baseline=judging.baseline.name if judging.baseline else "",
                   reference="expected busbw" if judging.baseline else "link peak")
    if fails:
        summary["first_fail"] = _describe_fail(fails[0], judging)
    return summary


def _describe_fail(row: Row, judging: Judging) -> str:
    reference = row.judged_against or 0.0
    what = "expected" if judging.baseline is not None else "peak"
    busbw = row.busbw_gbps or 0.0
    return (f"{describe_row(row)}: busbw {busbw:.4g} GB/s, {100 * busbw / reference:.1f}% "
            f"of {reference:.4g} GB/s {what}")


def summary_line(summary: dict[str, Any]) -> str:
    counts = ", ".join(f"{summary[name]} {name}" for name in VERDICTS)
    against = f"baseline {summary['baseline']}" if summary["baseline"] else "the link peak"
    line = (f"verdicts against {against} (FAIL below {summary['fail_below_pct']:g}%, PASS from "
            f"{summary['pass_pct']:g}% of the {summary['reference']}): {counts}, "
            f"{summary['unjudged']} not judged")
    return line + (f"; first FAIL: {summary['first_fail']}" if "first_fail" in summary else "")


def below_failure(summary: dict[str, Any], judging: Judging) -> str | None:
    """Why --fail-below makes the run exit 1 (None: it passes, or was not asked for)."""
    if judging.fail_below is None:
        return None
    judged = sum(summary[name] for name in VERDICTS)
    if judged == 0:
        return (f"--fail-below {judging.fail_below:g}: no row could be judged (no row has "
                f"{'an expected busbw in the baseline' if judging.baseline else 'a known link peak'})")
    if summary["FAIL"]:
        return (f"{summary['FAIL']} of {judged} judged rows below --fail-below {judging.fail_below:g}% "
                f"(first: {summary['first_fail']})")
    return None
