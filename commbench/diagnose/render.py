"""The verdict as text, verdict first, in one screen: the findings (the root first), then each group with
a finding in detail (where it stopped, who was last doing what, the first divergence side by side),
then the healthy groups in a line, then what the dumps could not tell."""

from commbench.diagnose.verdict import Finding, GroupReport, Operation, RankState, Verdict, ranks_text

MAX_STATES = 6  # rank states shown per group; the rest are counted
MAX_HEALTHY = 6  # healthy groups named; the rest are counted


def render(verdict: Verdict) -> list[str]:
    lines = [f"commbench diagnose: {len(verdict.ranks)} dumps of {verdict.world_size} ranks "
             f"({verdict.backend}, Flight Recorder {verdict.version}) from {verdict.source}"]
    if not verdict.findings:
        lines.append("verdict: nothing found: in every group the members issued the same collectives and "
                     "all reached the last one")
    else:
        first, *others = verdict.findings
        lines.append(f"verdict: {first.kind}: {first.reading}")
        lines += [f"  also {finding.kind}: {finding.reading}" for finding in others]
    for report in verdict.groups:
        if report.finding is not None:
            lines += _group(report)
    lines += _healthy([report for report in verdict.groups if report.finding is None])
    lines += [f"note: {note}" for note in verdict.notes]
    return lines


def _group(report: GroupReport) -> list[str]:
    finding = report.finding
    assert finding is not None
    members = ranks_text(list(report.members)) if report.members else "no members known"
    inferred = "" if report.members_known else ", members inferred from the dumps"
    stopped = f": stopped at {report.stopped_at.describe()}" if report.stopped_at else ""
    lines = ["", f"group {report.label} ({members}{inferred}){stopped}"]
    if finding.sides:
        lines += _side_by_side(finding)
    shown = report.states[:MAX_STATES]
    width = max(len(ranks_text(list(state.ranks))) for state in shown) if shown else 0
    lines += [f"  {ranks_text(list(state.ranks)):<{width}}  {_state(state)}" for state in shown]
    if len(report.states) > MAX_STATES:
        lines.append(f"  ... and {len(report.states) - MAX_STATES} more states")
    return lines


def _state(state: RankState) -> str:
    if state.last is None:
        return state.note or "nothing recorded in this group"
    text = f"last {_operation(state.last)}"
    return f"{text}; {state.note}" if state.note else text


def _operation(operation: Operation) -> str:
    stack = f" at {operation.stack}" if operation.stack else ""
    return f"{operation.describe()} {operation.status}{stack}"


def _side_by_side(finding: Finding) -> list[str]:
    columns = [(ranks_text(list(ranks)), operation) for ranks, operation in finding.sides]
    rows = [("", [ranks for ranks, _ in columns]),
            ("op", [operation.recorded for _, operation in columns]),
            ("sizes", [operation.sizes for _, operation in columns]),
            ("dtype", [operation.dtype for _, operation in columns]),
            ("state", [operation.status for _, operation in columns]),
            ("issued at", [operation.stack or "-" for _, operation in columns])]
    widths = [max(len(values[index]) for _, values in rows) for index in range(len(columns))]
    lines = [f"  first divergence, #{finding.seq}, side by side:"]
    for label, values in rows:
        cells = "  ".join(f"{value:<{width}}" for value, width in zip(values, widths, strict=True))
        lines.append(f"    {label:<9}  {cells}".rstrip())
    return lines


def _healthy(reports: list[GroupReport]) -> list[str]:
    if not reports:
        return []
    named = [f"{report.label} at {report.stopped_at.describe()}" if report.stopped_at else report.label
             for report in reports[:MAX_HEALTHY]]
    more = f" and {len(reports) - MAX_HEALTHY} more" if len(reports) > MAX_HEALTHY else ""
    return ["", f"nothing found in group{'s' if len(reports) > 1 else ''} {', '.join(named)}{more}"]
