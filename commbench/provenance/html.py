"""Provenance in the HTML report: the hardware table of a run, and each series' busbw against its peak
and expected value beside the plots.

Invariants: fragments of the report's page; every text from a results file is HTML-escaped; runs saved
before provenance existed (no hardware, no peak columns) give a short "not recorded" line, not an error.
"""

from html import escape
from typing import Any

from commbench.provenance.describe import cpu_text, gpu_text, memory_text, network_text, record_part
from commbench.results.model import Row


def _table(caption: str, columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(column)}</th>" for column in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>" for cells in rows)
    return (f"<table><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def hardware_table_html(meta: dict[str, Any]) -> str:
    """One row per host of the run: CPU, memory, GPUs, network, kernel, software, what was not found."""
    hardware = meta.get("hardware") or {}
    if not hardware:
        return "<p>hardware: not recorded (a run saved before commbench recorded it)</p>"
    rows = []
    for host, record in hardware.items():
        software = record_part(record, "software")
        rows.append([host, cpu_text(record), memory_text(record),
                     str(record_part(record, "numa").get("nodes", "")), gpu_text(record),
                     network_text(record), str(record_part(record, "os").get("kernel", "")),
                     ", ".join(map(str, _listed(record_part(record, "container").get("hints")))),
                     f"torch {software.get('torch', '?')}, cuda {software.get('cuda') or '-'}, "
                     f"nccl {software.get('nccl') or '-'}",
                     "; ".join(f"{name}: {why}" for name, why in record_part(record, "missing").items())])
    columns = ["host", "CPU", "memory", "NUMA nodes", "GPUs", "network", "kernel", "container", "software",
               "not found"]
    parts = [_table("hardware by host", columns, rows)]
    topologies = [(host, record_part(record, "gpus").get("topology")) for host, record in hardware.items()]
    parts += [f"<details><summary>GPU topology of {escape(host)}</summary>"
              f"<pre>{escape(str(matrix))}</pre></details>" for host, matrix in topologies if matrix]
    return "".join(parts)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _series_name(row: Row) -> str:
    parts = (row.benchmark, row.collective, row.dtype, row.op, row.placement, row.mode)
    return " · ".join(part for part in parts if part)


def peak_table_html(rows: list[Row], label: str = "") -> str:
    """Per series: the best busbw, its size, the peak and % of it, the expected busbw, verdict counts."""
    by_series: dict[str, list[Row]] = {}
    for row in rows:
        if row.busbw_gbps is not None:
            by_series.setdefault(_series_name(row), []).append(row)
    if not any(row.peak_gbps is not None or row.verdict for found in by_series.values() for row in found):
        return ""
    table_rows = []
    for name, found in by_series.items():
        best = max(found, key=lambda row: row.busbw_gbps or 0.0)
        verdicts = {verdict: sum(row.verdict == verdict for row in found)
                    for verdict in ("PASS", "WARN", "FAIL")}
        nccl = " ".join(part for part in (best.nccl_algo, best.nccl_proto, best.nccl_transport) if part)
        counted = " ".join(f"{count} {verdict}" for verdict, count in verdicts.items() if count)
        table_rows.append([name, f"{best.busbw_gbps:.4g}", str(best.size_bytes),
                           "-" if best.peak_gbps is None else f"{best.peak_gbps:.4g}",
                           "-" if best.pct_of_peak is None else f"{best.pct_of_peak:.1f}%",
                           "-" if best.expected_gbps is None else f"{best.expected_gbps:.4g}",
                           counted or "-",
                           nccl or "-", best.peak_source])
    columns = ["series", "best busbw GB/s", "at bytes", "peak GB/s", "% of peak", "expected GB/s", "verdicts",
               "NCCL at best", "peak from"]
    caption = f"busbw against the peak{f': {label}' if label else ''} (docs/provenance.md: the peak rule)"
    return _table(caption, columns, table_rows)
