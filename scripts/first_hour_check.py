"""Check what a command printed as a newcomer meets it at a 100-column terminal or in a pipe
(scripts/first_hour.sh runs the commands and calls this on their outputs).

    python scripts/first_hour_check.py OUT...    # files made by first_hour.sh: '$ command', its output,
                                                 # then 'exit N'

A problem is any of:
- a traceback;
- a table line (box drawing), a table's title, or a line of the run's header over 100 columns;
- a cut heading or cell (rich's '…');
- a row of a run table whose ±95% is '-' (a row without an interval; its p50 measured);
- an exit status other than 0.
Other lines (notes, fits, keys, results lines) are prose: off a terminal they are never wrapped, so grep
finds each whole, and one over 100 columns is counted, not a problem. Prints, per command, what it ran
and what it found, then every problem; exits 1 when there is one.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

WIDTH = 100
BOX = set("┏┓┗┛┃━┡┩╇┳┻│─└┘├┤┼┬┴┌┐╋")
INTERVAL = "±95%"


@dataclass
class Found:
    command: str
    status: int | None
    lines: int = 0
    widest_table: int = 0
    long_prose: int = 0
    tables: int = 0
    rows_checked: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        status = "no exit status" if self.status is None else f"exit {self.status}"
        return (f"{status}; {self.lines} lines, {self.tables} tables (widest line {self.widest_table}), "
                f"{self.rows_checked} rows with a ±95% column, {self.long_prose} prose lines over {WIDTH} "
                f"columns kept whole; {len(self.problems)} problems")


def is_table_line(line: str) -> bool:
    return any(character in BOX for character in line)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("┃│").replace("┃", "│").split("│")]


def table_blocks(lines: list[str]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Each rich table: (its title, its headings joined over their lines, its data rows' cells)."""
    found = []
    index = 0
    while index < len(lines):
        if not lines[index].lstrip().startswith("┏"):
            index += 1
            continue
        title = lines[index - 1].strip() if index > 0 and not is_table_line(lines[index - 1]) else ""
        heading_parts: list[list[str]] = []
        index += 1
        while index < len(lines) and lines[index].lstrip().startswith("┃"):
            heading_parts.append(_cells(lines[index]))
            index += 1
        headings = [" ".join(part[column] for part in heading_parts if column < len(part) and part[column])
                    for column in range(max((len(part) for part in heading_parts), default=0))]
        rows = []
        while index < len(lines) and is_table_line(lines[index]):
            line = lines[index].lstrip()
            index += 1
            if line.startswith("└"):
                break
            if line.startswith("│"):
                rows.append(_cells(line))
        found.append((title, headings, rows))
    return found


def header_lines(lines: list[str]) -> list[str]:
    """The run's header: its lines before the first note, table or message (a first table's title may
    come with them: it must fit too). None for output that is not a run's."""
    if not lines or not lines[0].startswith("commbench ") or lines[0].startswith("commbench: "):
        return []
    header = []
    for line in lines:
        if line.startswith(("note:", "commbench:")) or is_table_line(line) or not line.strip():
            break
        header.append(line)
    return header


def check(command: str, text: str, status: int | None) -> Found:
    """What is wrong with one command's output (module docstring)."""
    found = Found(command, status)
    lines = text.splitlines()
    found.lines = len(lines)
    if status not in (0, None):
        found.problems.append(f"exit status {status}")
    if "Traceback (most recent call last)" in text:
        found.problems.append("a traceback")
    titles = {index - 1 for index, line in enumerate(lines) if line.lstrip().startswith("┏") and index > 0}
    fixed = set(header_lines(lines))
    for index, line in enumerate(lines):
        width = len(line.rstrip())
        table = is_table_line(line)
        if table:
            found.widest_table = max(found.widest_table, width)
        if "…" in line and (table or index in titles):
            found.problems.append(f"cut: {line.strip()[:80]}")
        if width <= WIDTH:
            continue
        if table or index in titles or line in fixed:
            found.problems.append(f"{width} columns: {line.rstrip()[:80]}...")
        else:
            found.long_prose += 1
    for title, headings, rows in table_blocks(lines):
        found.tables += 1
        if INTERVAL not in headings:
            continue
        interval, size = headings.index(INTERVAL), headings.index("size") if "size" in headings else 0
        p50 = next((position for position, heading in enumerate(headings) if heading.startswith("p50")), None)
        mode = headings.index("mode") if "mode" in headings else None
        last_size = ""
        for cells in rows:
            if len(cells) != len(headings):
                continue
            last_size = cells[size] or last_size
            found.rows_checked += 1
            measured = p50 is None or cells[p50] != "-"
            if cells[interval] == "-" and measured:
                which = f" {cells[mode]}" if mode is not None else ""
                found.problems.append(f"no interval: {title or 'a table'} at {last_size}{which}")
    return found


def read(path: Path) -> tuple[str, str, int | None]:
    """A file of first_hour.sh: the command (its first line, '$ ...'), the output, the exit status."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    command = lines[0][2:] if lines and lines[0].startswith("$ ") else path.name
    status = None
    if lines and lines[-1].startswith("exit "):
        status = int(lines[-1].split()[1])
        lines = lines[:-1]
    return command, "\n".join(lines[1:]), status


def main(paths: list[str]) -> int:
    problems = 0
    for name in paths:
        command, text, status = read(Path(name))
        found = check(command, text, status)
        print(f"$ {command}\n  {found.summary()}")
        for problem in found.problems:
            print(f"  PROBLEM {problem}")
        problems += len(found.problems)
    print(f"first hour: {len(paths)} commands, {problems} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
