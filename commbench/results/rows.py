"""Building rows: the one function that turns what was timed into a Row, for sweeps and patterns alike.

Every timed row gets the same statistics from its samples (max over ranks, in µs): p50/p95/p99, min,
max, mean, stdev, CV and the median's 95% interval, and the p50 of the host-observed times (when the
timer gave them); algbw = size / p50 and busbw = algbw x the
collective's factor; each rank's own mean; and, when arrivals were recorded, each rank's arrival skew and
the rank its group waited for; with ``per_iteration``, every rank's time and arrival of every sample
(results/iterations.py). A row that was not timed (``sampled`` None: the backend refused it, its
buffers could not be allocated) keeps its identity and error and has no numbers.
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from commbench.measure.stats import (
    algbw_gbps,
    arrival_skews,
    has_samples,
    last_to_arrive,
    rank_means,
    slowest_rank_per_iteration,
    summarize,
)
from commbench.results.iterations import encode
from commbench.results.model import Row

if TYPE_CHECKING:
    from commbench.measure.sampling import Sampled

class RowAnnotator(Protocol):
    """What a run adds to each row once it has started (provenance.verdicts.RowContext: NCCL's choice,
    the link peak, the expected busbw and a verdict)."""

    def annotate(self, row: Row) -> Row: ...


_TIMES = ("time_us_p50", "time_us_p95", "time_us_min", "time_us_max", "time_us_mean", "algbw_gbps",
          "busbw_gbps")


def microseconds(seconds: list[float]) -> list[float]:
    return [round(value * 1e6, 3) for value in seconds]  # the clocks resolve nanoseconds


def measured_fields(sampled: "Sampled", size_bytes: int, busbw_factor: float, time_scale: float = 1.0,
                    members: list[list[int]] | None = None, per_iteration: bool = False) -> dict[str, Any]:
    """The Row fields a measurement decides. ``time_scale`` converts a sample to the reported time
    (half a round trip, one message of a window); ``members`` are the groups arrivals compare within;
    ``per_iteration`` keeps every rank's samples and arrivals."""
    samples_us = microseconds([value * time_scale for value in sampled.slowest])
    summary = summarize(samples_us)
    host_us = microseconds([value * time_scale for value in
                            slowest_rank_per_iteration(sampled.per_rank_host_seconds)]) \
        if has_samples(sampled.per_rank_host_seconds) else []
    algbw = algbw_gbps(size_bytes, summary.p50 * 1e-6)
    skews = arrival_skews(sampled.per_rank_arrivals, members) if has_samples(sampled.per_rank_arrivals) \
        else []
    means_us = microseconds([mean * time_scale for mean in rank_means(sampled.per_rank_seconds)])
    iterations = {}
    if per_iteration:
        iterations["iteration_us"] = encode(sampled.per_rank_seconds, 1e6 * time_scale)
        if has_samples(sampled.per_rank_arrivals):
            iterations["iteration_arrival_us"] = encode(sampled.per_rank_arrivals)
    return dict(**iterations,
        iters=sampled.ops, samples=len(samples_us), time_us_p50=summary.p50, time_us_p95=summary.p95,
        time_us_p99=summary.p99, time_us_min=summary.min, time_us_max=summary.max,
        time_us_mean=summary.mean, time_us_stdev=summary.stdev, time_us_cv=summary.cv,
        ci95_rel=summary.ci95_rel, host_time_us_p50=summarize(host_us).p50 if host_us else None,
        algbw_gbps=algbw,
        busbw_gbps=None if algbw is None else algbw * busbw_factor,
        skew_us_max=microseconds([max(skews)])[0] if skews else None,
        slowest_rank=last_to_arrive(skews, members) if skews else None,
        samples_us=samples_us, rank_mean_us=means_us, rank_skew_us=microseconds(skews))


def make_row(sampled: "Sampled | None", *, time_scale: float = 1.0, members: list[list[int]] | None = None,
             context: RowAnnotator | None = None, per_iteration: bool = False, **identity: Any) -> Row:
    """A row from what identifies it (``identity``: collective, backend, sizes, dtype, ..., busbw_factor,
    and a pattern's columns) and what was timed (``sampled``; None: not timed), with the provenance
    columns its run's ``context`` gives (NCCL's choice, peak, expected busbw, verdict); with
    ``per_iteration``, every rank's samples."""
    if sampled is None:
        row = Row(**dict.fromkeys(_TIMES), **{"iters": 0, "samples": 0, **identity})
    else:
        row = Row(**identity, **measured_fields(sampled, identity["size_bytes"], identity["busbw_factor"],
                                                time_scale, members, per_iteration))
    return row if context is None else context.annotate(row)


@dataclass(frozen=True)
class Measuring:
    """How a sweep's row was measured, beyond its samples: when its rank began (its probe op; '': when
    the row is made), the probe's seconds (max over ranks), --flush-cache's bytes and the warm-up ops
    run (None: not timed, --warmup's count)."""

    measured_from: str = ""
    first_op_s: float | None = None
    flush_bytes: int = 0
    warmup: int | None = None


def utc_stamp() -> str:
    """Now, as rows stamp when they were measured: UTC, ISO 8601, to the millisecond."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")
