"""`commbench list`: what the backend supports on this machine, found by running tiny real ops.

Every collective is tried with every dtype (sync, op sum), once in async mode (float32), and every
reducing collective with every reduce op and dtype: 2 elements per rank, through the same descriptors
and Backend methods the runner uses. An op is supported when it completes on every rank; the ranks
agree on each outcome before the next probe, so one refusal cannot leave them out of step. The
listing is three tables of at most 100 columns: collectives, their dtypes, and the reduce ops.
"""

from dataclasses import dataclass

from rich.console import Console

from commbench.backends.base import Backend, CollectiveArgs
from commbench.config.sweep import REDUCE_OPS
from commbench.core.devices import approximate_bytes
from commbench.core.dtypes import element_size, known_dtypes, torch_dtype
from commbench.core.splits import DEFAULT_SPLITS, parse_splits
from commbench.errors import brief
from commbench.measure.cache import cache_bytes
from commbench.measure.collectives import MODES, REGISTRY, Collective, Layout
from commbench.writers.console import TextTable, print_table

PROBE_ELEMENTS = 2  # per rank chunk: small enough to be instant, more than one element per rank
SHORT_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int8": "i8",
               "uint8": "u8", "int32": "i32", "int64": "i64", "float8_e4m3fn": "f8e4m3",
               "float8_e5m2": "f8e5m2"}
# From which torch release a backend runs a collective that earlier releases refuse outright. Verified
# by running a 2-rank gloo all_to_all (the list form) on CPU: refused on torch 2.11.0 ("Backend gloo does
# not support alltoall"), ran on 2.12.0, 2.13.0 and 2.14.1. `commbench list` on those four found no other
# collective refused on one of them and run on another.
FIRST_TORCH = {("gloo", "all_to_all"): "2.12"}


@dataclass(frozen=True)
class Probe:
    collective: str
    dtype: str
    op: str  # '' for collectives that do not reduce
    mode: str
    error: str | None  # None: supported; else the first rank's first error line

    @property
    def supported(self) -> bool:
        return self.error is None


def try_op(backend: Backend, collective: Collective, dtype: str, op: str, mode: str) -> str | None:
    """None when one tiny op completes on this rank, else its error's first line."""
    try:
        n = backend.world_size
        # v-collectives: uneven counts of about PROBE_ELEMENTS per rank (or pair), from the default spread
        plan = collective.plan_size(2 * PROBE_ELEMENTS * n * element_size(dtype), n, element_size(dtype),
                                    parse_splits(DEFAULT_SPLITS))
        layout = Layout(PROBE_ELEMENTS, n, backend.rank, 0, torch_dtype(dtype), backend.device,
                        chunk_counts=plan.chunk_counts, pair_counts=plan.pair_counts)
        buffers = collective.build(layout)
        for tensor in buffers.tensors():
            tensor.zero_()
        args = CollectiveArgs(op=op or "sum", root=0, async_op=mode == "async", **buffers.call_options())
        collective.issue(backend, args)
        backend.complete(args)
    except Exception as exc:  # a refusal is the answer we are looking for
        return brief(exc)[:160]
    return None


def probe_all(backend: Backend) -> list[Probe]:
    dtypes = known_dtypes()
    plan: list[tuple[str, str, str, str]] = []
    for collective in REGISTRY.values():
        sum_op = "sum" if collective.reduces else ""
        for dtype in dtypes if collective.sized else dtypes[:1]:
            plan.append((collective.name, dtype, sum_op, "sync"))
        if "async" in collective.modes:  # ping_pong is sync only
            plan.append((collective.name, dtypes[0], sum_op, "async"))
        if collective.reduces:
            plan.extend((collective.name, dtype, op, "sync") for op in REDUCE_OPS if op != "sum"
                        for dtype in dtypes)
    found = []
    for name, dtype, op, mode in plan:
        errors = backend.all_gather_object(try_op(backend, REGISTRY[name], dtype, op, mode))
        found.append(Probe(name, dtype, op, mode, next((e for e in errors if e is not None), None)))
    return found


def since_note(backend: str, collective: str) -> str:
    """'; torch's gloo has it from 2.12' where a later torch runs what this one refuses, else ''."""
    first = FIRST_TORCH.get((backend, collective))
    return f"; torch's {backend} has it from {first}" if first else ""


def refused_collectives(probes: list[Probe]) -> dict[str, str]:
    """The collectives refused in every probe (no dtype, op or mode runs), with the first reason."""
    refused: dict[str, str] = {}
    for name in dict.fromkeys(probe.collective for probe in probes):
        mine = [probe for probe in probes if probe.collective == name]
        if not any(probe.supported for probe in mine):
            refused[name] = mine[0].error or ""
    return refused


def _mark(probe: Probe | None) -> str:
    if probe is None:
        return "-"
    return "✓" if probe.supported else "✗"


def support_tables(probes: list[Probe], world_size: int) -> list[TextTable]:
    """Three tables that each fit 100 columns: the collectives (bus factor, placements, modes), the dtypes
    each runs (sync, op sum), and the reduce ops by dtype over every reducing collective."""
    by_key = {(p.collective, p.dtype, p.op, p.mode): p for p in probes}
    dtypes = list(dict.fromkeys(p.dtype for p in probes))
    short = [SHORT_DTYPE.get(d, d) for d in dtypes]
    first = dtypes[0]
    rows, dtype_rows = [], []
    for collective in REGISTRY.values():
        sum_op = "sum" if collective.reduces else ""
        factor = "/".join(f"{collective.busbw_factor(n):.3g}" for n in (2, 4, 8)) if collective.sized else "-"
        rows.append([collective.name, factor, ", ".join(p for p in collective.placements if p) or "-",
                     *(_mark(by_key.get((collective.name, first, sum_op, mode))) for mode in MODES)])
        if collective.sized:  # the barrier moves no data: it has no dtype
            dtype_rows.append([collective.name,
                               *(_mark(by_key.get((collective.name, d, sum_op, "sync"))) for d in dtypes)])
    columns = ["collective", "busbw factor n=2/4/8", "placements", *MODES]
    collectives = TextTable(f"collectives ({world_size} ranks; modes in {first}, op sum)", columns, rows,
                            left_columns=3)
    by_dtype = TextTable("dtypes (sync, op sum)", ["collective", *short], dtype_rows, left_columns=1)
    reducing = [c.name for c in REGISTRY.values() if c.reduces]
    op_rows, exceptions = [], []
    for op in REDUCE_OPS:
        cells = [op]
        for dtype, name in zip(dtypes, short, strict=True):
            found = [by_key.get((collective, dtype, op, "sync")) for collective in reducing]
            ran = [collective for collective, probe in zip(reducing, found, strict=True)
                   if probe is not None and probe.supported]
            cells.append("✓" if len(ran) == len(reducing) else "✗" if not ran else "some")
            if 0 < len(ran) < len(reducing):
                exceptions.append(f"some: {op} {name} runs on {', '.join(ran)} only")
        op_rows.append(cells)
    ops = TextTable(f"reduce ops (sync) by dtype, on every reducing collective ({len(reducing)})",
                    ["op", *short], op_rows, left_columns=1, footer=exceptions)
    return [collectives, by_dtype, ops]


def why_unsupported(probes: list[Probe]) -> list[str]:
    """One line per distinct refusal: how often, an example, the backend's words."""
    reasons: dict[str, list[Probe]] = {}
    for probe in probes:
        if probe.error is not None:
            reasons.setdefault(probe.error, []).append(probe)
    lines = []
    for reason, refused in reasons.items():
        example = refused[0]
        parts = (example.collective, example.dtype, example.op, example.mode)
        what = " ".join(part for part in parts if part)
        others = f" and {len(refused) - 1} more" if len(refused) > 1 else ""
        lines.append(f"✗ {what}{others}: {reason}")
    return lines


def print_support(console: Console, probes: list[Probe], backend: Backend) -> None:
    console.print(f"backend {backend.name} · device {backend.device.type} · {backend.world_size} ranks")
    console.print("each cell is one tiny op run on every rank: ✓ ran, ✗ refused, - not applicable")
    for table in support_tables(probes, backend.world_size):
        print_table(console, table)
    reasons = why_unsupported(probes)
    if reasons:
        console.print("why refused:")
        for line in reasons:
            console.print(f"  {line}", markup=False)
    for name, reason in refused_collectives(probes).items():
        console.print(f"unavailable here: {name} ({reason}{since_note(backend.name, name)}); "
                      f"--collective all leaves it out", markup=False)
    dtypes = [d for d in known_dtypes()
              if any(p.supported and p.dtype == d and p.collective == "all_reduce" for p in probes)]
    console.print(f"dtypes with all_reduce: {', '.join(dtypes) or 'none'}", markup=False)
    console.print(f"modes: {', '.join(MODES)}, both (a sync and an async row per size)", markup=False)
    console.print("v-collectives' splits (--splits): spread:F, distance:F, zipf:S or a file of a world x "
                  "world byte matrix", markup=False)
    flushed, source = cache_bytes(backend.device)
    console.print(f"--flush-cache writes {approximate_bytes(flushed)} here ({source}); --buffers N, "
                  "--misalign BYTES, --per-iteration, --memory, --concurrent N and --with-compute N: "
                  "docs/measurement.md", markup=False)
