"""What the regression gate prints and which exit status it returns, line by line, for each kind of
finding: slowdowns (which point is named, which side's passes are quoted, the interval and q-value),
sides that do not cover the same rows, points it cannot judge (how many are listed, whether the hint to
repeat applies, failure or warning with allow_unjudged), comparisons of which nothing was judged, and
compare's own output around it (headings, notes, the key, rows on one side only). Runs are made of
chosen pass times (tests/gate_helpers.py) written to files and read by `compare_command`, as `commbench
compare` reads them. Expected ratios, intervals, spreads and q-values are computed here, from scipy's
Welch t and a textbook Benjamini-Hochberg, not by the product's functions."""

import dataclasses
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from commbench.analysis.compare import compare_runs
from commbench.analysis.gate import Printer, compare_command, slowdowns
from commbench.errors import UsageError
from tests.gate_helpers import pass_row, saved_run, side, write_run

GATE = "regression gate (--fail-above 10%)"
HINT = ("run both sides with --repeat 5 or more (or give a side several files: compare --base BASE.json ... "
        "NEW.json ...)")
SUFFIX = " (gloo, cpu, 2 ranks, hosts unknown)"  # how a test run describes itself in headings


def _write_rows(path: Path, rows: list, status: str = "complete") -> Path:
    """A results.json of these rows, its run id the file's stem."""
    meta = {"run_id": path.stem, "status": status, "backend": "gloo", "device": "cpu", "world_size": 2}
    path.write_text(json.dumps({"meta": meta, "rows": [dataclasses.asdict(row) for row in rows]}))
    return path


def _rows(points: dict) -> list:
    return saved_run(points).rows


def _error_rows(point: tuple[str, int], passes: int) -> list:
    """A point the backend rejected in every pass: rows without a time, with the error."""
    times = dict.fromkeys(("time_us_p50", "time_us_p95", "time_us_min", "time_us_max", "time_us_mean",
                           "algbw_gbps", "busbw_gbps"))
    return [dataclasses.replace(pass_row(point, 1.0, repeat), error="op not supported", **times)
            for repeat in range(passes)]


def _zero_second_pass(rows: list) -> list:
    """These rows with the p50 of the last point's second pass 0 (a time that is no time)."""
    last = [index for index, row in enumerate(rows) if row.size_bytes == rows[-1].size_bytes]
    rows[last[1]] = dataclasses.replace(rows[last[1]], time_us_p50=0.0)
    return rows


def _compare(capsys, paths, fail_above=10.0, level=0.05, markdown=False, **options):
    """(exit status, stdout lines, stderr lines) of `compare PATHS --fail-above PCT`."""
    status = compare_command([str(path) for path in paths], fail_above, level, markdown, **options)
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def _gate_lines(out: list[str]) -> list[str]:
    """The gate's part of stdout: from its first line on."""
    starts = [index for index, line in enumerate(out) if line.startswith("regression gate")]
    return out[starts[0]:] if starts else []


def _welch(base: list[float], new: list[float], line: float) -> tuple[float, float, float, float]:
    """(new/base, the 95% interval's ends, the one-sided p-value that new/base exceeds ``line``) by
    Welch's t on the passes' log p50s."""
    base_logs, new_logs = np.log(base), np.log(new)
    ratio = math.exp(new_logs.mean() - base_logs.mean())
    test = stats.ttest_ind(new_logs, base_logs, equal_var=False)
    low, high = test.confidence_interval(0.95)
    beyond = stats.ttest_ind(new_logs - math.log(line), base_logs, equal_var=False, alternative="greater")
    return ratio, math.exp(low), math.exp(high), float(beyond.pvalue)


def _bh(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg q-values: the p-value of rank k (ascending) times m / k, made monotone from
    the largest down, at most 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda index: p_values[index])
    q = [0.0] * m
    smallest = 1.0
    for rank in range(m, 0, -1):
        index = order[rank - 1]
        smallest = min(smallest, p_values[index] * m / rank)
        q[index] = smallest
    return q


def _spread_pct(p50s: list[float]) -> float:
    """The base's pass spread: 1.4826 x the median of |ln(p50 / median)|, as exp() - 1 in percent."""
    median = float(np.median(p50s))
    return 100.0 * (math.exp(1.4826 * float(np.median(np.abs(np.log(np.array(p50s) / median))))) - 1.0)


# --- slowdowns -------------------------------------------------------------------------------------


def test_each_slowdown_is_a_line_with_its_ratio_interval_base_spread_and_q_value(tmp_path, capsys):
    """Two points (two collectives, one point each: no collective taken together), both slower than
    1.1x; the base has 3 passes and the new side 5, and the line quotes the base's."""
    base = {("all_reduce", 1024): [760.0, 800.0, 845.0], ("broadcast", 1024): [400.0, 430.0, 410.0]}
    new = {("all_reduce", 1024): [1700.0, 1610.0, 1650.0, 1580.0, 1720.0],
           ("broadcast", 1024): [610.0, 560.0, 590.0, 640.0, 575.0]}
    paths = [_write_rows(tmp_path / "base.json", _rows(base)), _write_rows(tmp_path / "new.json", _rows(new))]
    status, out, err = _compare(capsys, paths)
    found = [_welch(base[point], new[point], 1.1) for point in base]
    q_values = _bh([each[3] for each in found])
    lines = []
    for (collective, _), (ratio, low, high, _p), q, op in zip(base, found, q_values, ("sum", ""),
                                                              strict=True):
        what = " ".join(part for part in (collective, "float32", op, "sync") if part)
        spread = _spread_pct(base[(collective, 1024)])
        lines.append(f"{paths[1]}: {what} 1 KiB: {ratio:.2f}x slower (new/base {ratio:.2f}, 95% {low:.2f}-"
                     f"{high:.2f}; base spread ±{spread:.0f}% over 3 passes; q={q:.2g})")
    count = "2 significant slowdowns above 10% (2 points, 0 collectives taken together)"
    assert status == 1
    assert _gate_lines(out) == [f"{GATE}: FAILED, {count}:"] + [f"  {line}" for line in lines]
    assert err == [f"commbench: regression: {count} (first: {lines[0]})"]


def test_a_collective_taken_together_quotes_the_base_side_s_passes(tmp_path, capsys):
    """Every point 1.3x slower, each too noisy alone (its passes e^±0.3 apart); 10 passes on the base
    side and 6 on the new, each pass a few percent off the others as a whole."""
    sign = np.where(np.add.outer(np.arange(12), np.arange(10)) % 2 == 0, 1.0, -1.0)
    base_passes = np.exp(0.04 * np.array([0.3, -1.1, 0.5, 0.9, -0.2, -0.7, 1.2, 0.1, -0.6, 0.4]))
    new_passes = np.exp(0.04 * np.array([0.8, -0.4, 0.2, -1.0, 0.6, -0.1]))
    base = 800.0 * np.exp(0.3 * sign) * base_passes
    new = 1040.0 * np.exp(0.3 * sign[:, :6]) * new_passes
    paths = [write_run(tmp_path / "base.json", side(base)), write_run(tmp_path / "new.json", side(new))]
    status, out, err = _compare(capsys, paths)
    base_means = [float(np.exp(np.log(base[:, index]).mean())) for index in range(10)]
    new_means = [float(np.exp(np.log(new[:, index]).mean())) for index in range(6)]
    ratio, low, high, p = _welch(base_means, new_means, 1.1)
    what = "all_reduce, its 12 points together (each pass's geometric mean)"
    line = (f"{paths[1]}: {what}: {ratio:.2f}x slower (new/base {ratio:.2f}, 95% {low:.2f}-{high:.2f}; "
            f"base spread ±{_spread_pct(base_means):.0f}% over 10 passes; q={p:.2g})")
    count = "1 significant slowdown above 10% (0 points, 1 collective taken together)"
    assert status == 1
    assert _gate_lines(out) == [f"{GATE}: FAILED, {count}:", f"  {line}"]
    assert err == [f"commbench: regression: {count} (first: {line})"]


def test_a_slowdown_just_below_the_line_passes_however_certain(tmp_path, capsys):
    """1.995x slower in every pass alike (no noise at all): below the line 2.0 of --fail-above 100."""
    base = side(np.full((1, 3), 800.0))
    paths = [write_run(tmp_path / "base.json", base),
             write_run(tmp_path / "new.json", side(np.full((1, 3), 800.0 * 1.995)))]
    status, out, _ = _compare(capsys, paths, fail_above=100.0)
    assert status == 0
    assert _gate_lines(out) == [
        "regression gate (--fail-above 100%): passed, no significant slowdown above 100%"]


def test_a_point_exactly_at_the_line_is_not_beyond_it_even_at_a_lax_level(tmp_path, capsys):
    """The same passes on both sides (new/base exactly 1) against --fail-above 0: the one-sided p-value
    is one half, significant at a level of 0.6, but the estimate is not above the line."""
    points = {("all_reduce", 1024): [800.0, 900.0]}
    paths = [write_run(tmp_path / "base.json", points), write_run(tmp_path / "new.json", points)]
    status, out, _ = _compare(capsys, paths, fail_above=0.0, level=0.6)
    assert status == 0 and _gate_lines(out)[0].endswith("passed, no significant slowdown above 0%")


@pytest.mark.parametrize("fail_above, fails", [(0.0, True), (0.5, False)])
def test_a_fail_above_of_0_or_a_fraction_of_a_percent_is_a_line(tmp_path, capsys, fail_above, fails):
    """0.4% slower in every pass alike: beyond the line 1.0, within 1.005."""
    paths = [write_run(tmp_path / "base.json", side(np.full((2, 3), 800.0))),
             write_run(tmp_path / "new.json", side(np.full((2, 3), 803.2)))]
    status, _, _ = _compare(capsys, paths, fail_above=fail_above)
    assert status == (1 if fails else 0)


def test_a_q_value_equal_to_the_significance_level_is_significant():
    """At most the level: a point whose q-value is the level itself fails the gate."""
    base = side(np.array([[700.0, 800.0, 900.0]]))
    new = side(np.array([[1015.0, 1160.0, 1305.0]]))
    found = slowdowns(compare_runs(saved_run(base), saved_run(new), 0.05), 10.0)
    assert len(found) == 1
    level = found[0].q_value
    assert len(slowdowns(compare_runs(saved_run(base), saved_run(new), level), 10.0)) == 1
    assert slowdowns(compare_runs(saved_run(base), saved_run(new), level * (1 - 1e-9)), 10.0) == []


# --- sides that do not cover the same rows ----------------------------------------------------------


@pytest.mark.parametrize("files", [1, 2, 3])
def test_each_comparison_that_does_not_cover_the_same_rows_is_named_and_counted(tmp_path, capsys, files):
    """The base has 1 KiB and 2 KiB (3 passes, 3 rows each); each new file only 1 KiB, with the same
    passes (no slowdown)."""
    base = {("all_reduce", 1024): [800.0] * 3, ("all_reduce", 2048): [800.0] * 3}
    new = {("all_reduce", 1024): [800.0] * 3}
    base_path = write_run(tmp_path / "base.json", base)
    news = [write_run(tmp_path / f"new{index}.json", new) for index in range(files)]
    status, out, err = _compare(capsys, [base_path, *news])
    problems = [f"{path}: 3 rows only in {base_path} and 0 only in {path}: the files do not measure the same "
                "points" for path in news]
    which = "1 comparison does" if files == 1 else f"{files} comparisons do"
    more = f" (and {files - 1} more comparisons)" if files > 1 else ""
    assert status == 1
    assert _gate_lines(out) == [f"{GATE}: FAILED, {which} not cover the same rows:"] + [
        f"  {problem}" for problem in problems]
    assert err == [f"commbench: regression gate: {problems[0]}{more}"]


def test_sides_with_no_point_in_common_say_so_on_a_line_of_their_own(tmp_path, capsys):
    paths = [write_run(tmp_path / "base.json", {("all_reduce", 1024): [800.0] * 3}),
             write_run(tmp_path / "new.json", {("broadcast", 1024): [800.0] * 3})]
    status, out, _ = _compare(capsys, paths)
    assert status == 1 and "no rows in common" in out
    paths = [write_run(tmp_path / "base.json", {("all_reduce", 1024): [800.0] * 3}),
             write_run(tmp_path / "new.json", {("all_reduce", 1024): [800.0] * 3})]
    status, out, _ = _compare(capsys, paths)
    assert status == 0 and "no rows in common" not in out


# --- what the gate cannot judge ---------------------------------------------------------------------


def _one_pass_points(tmp_path, points: int) -> list[Path]:
    passes = side(np.full((points, 1), 800.0))
    return [write_run(tmp_path / "base.json", passes), write_run(tmp_path / "new.json", passes)]


def _one_pass_reason(path: Path, size: str) -> str:
    return (f"{path}: all_reduce float32 sum sync {size}: 1 pass on the base side and 1 on the new (at "
            "least 2 a side)")


@pytest.mark.parametrize("points", [10, 12])
def test_the_gate_lists_ten_points_it_cannot_judge_and_counts_the_rest(tmp_path, capsys, points):
    paths = _one_pass_points(tmp_path, points)
    status, out, err = _compare(capsys, paths)
    sizes = ["1 KiB", "2 KiB", "4 KiB", "8 KiB", "16 KiB", "32 KiB", "64 KiB", "128 KiB", "256 KiB",
             "512 KiB"]
    listed = [f"  {_one_pass_reason(paths[1], size)}" for size in sizes]
    first = _one_pass_reason(paths[1], "1 KiB")
    more = [f"  ... and {points - 10} more"] if points > 10 else []
    what = f"{points} points not judged"
    assert status == 1
    assert _gate_lines(out) == [f"{GATE}: FAILED, {what}: what the gate cannot judge fails it:", *listed,
                                *more]
    assert err == [f"commbench: regression gate: FAILED: {what} (first: {first}); {HINT}"]


def test_allowed_points_the_gate_cannot_judge_are_a_warning_and_pass(tmp_path, capsys):
    paths = _one_pass_points(tmp_path, 2)
    status, out, err = _compare(capsys, paths, allow_unjudged=True)
    assert status == 0
    first, second = _one_pass_reason(paths[1], "1 KiB"), _one_pass_reason(paths[1], "2 KiB")
    assert _gate_lines(out) == [f"{GATE}: 2 points not judged, allowed:", f"  {first}", f"  {second}"]
    assert err == [f"commbench: warning: regression gate: 2 points not judged (first: {first}); {HINT}"]


def test_allowed_unjudged_points_beside_judged_ones_let_the_gate_say_it_passed(tmp_path, capsys):
    base = {("all_reduce", 1024): [800.0], ("all_reduce", 2048): [800.0] * 3}
    paths = [write_run(tmp_path / "base.json", base), write_run(tmp_path / "new.json", base)]
    status, out, _ = _compare(capsys, paths, allow_unjudged=True)
    assert status == 0
    assert _gate_lines(out) == [f"{GATE}: 1 point not judged, allowed:",
                                f"  {_one_pass_reason(paths[1], '1 KiB')}",
                                f"{GATE}: passed, no significant slowdown above 10%"]


def test_a_pass_without_a_time_is_not_judged_and_no_repeat_is_suggested(tmp_path, capsys):
    """Three passes a side, one new pass with a p50 of 0: more passes would not help."""
    points = {("all_reduce", 1024): [800.0] * 3}
    paths = [write_run(tmp_path / "base.json", points),
             _write_rows(tmp_path / "new.json", _zero_second_pass(_rows(points)))]
    status, out, err = _compare(capsys, paths)
    reason = f"{paths[1]}: all_reduce float32 sum sync 1 KiB: new pass 2 of 3 has a p50 of 0 µs"
    assert status == 1
    assert _gate_lines(out) == [f"{GATE}: FAILED, 1 point not judged: what the gate cannot judge fails it:",
                                f"  {reason}"]
    assert err == [f"commbench: regression gate: FAILED: 1 point not judged (first: {reason})"]


def test_the_repeat_hint_applies_when_any_unjudged_point_lacks_passes_not_only_the_last(tmp_path, capsys):
    """1 KiB has one pass a side, then 2 KiB a pass with a p50 of 0."""
    base = {("all_reduce", 1024): [800.0], ("all_reduce", 2048): [800.0] * 3}
    paths = [write_run(tmp_path / "base.json", base),
             _write_rows(tmp_path / "new.json", _zero_second_pass(_rows(base)))]
    status, _, err = _compare(capsys, paths)
    assert status == 1 and len(err) == 1 and err[0].endswith(f"); {HINT}")


def test_a_comparison_with_no_time_on_both_sides_of_any_point_is_nothing_judged(tmp_path, capsys):
    rows = _error_rows(("all_reduce", 1024), 3) + _error_rows(("all_reduce", 2048), 3)
    base = _write_rows(tmp_path / "base.json", rows)
    news = [_write_rows(tmp_path / "new.json", rows), _write_rows(tmp_path / "other.json", rows)]
    what = f"nothing judged for {news[0]} (no point has a time on both sides)"
    status, out, err = _compare(capsys, [base, news[0]])
    assert status == 1
    assert _gate_lines(out) == [f"{GATE}: FAILED, {what}: what the gate cannot judge fails it:"]
    assert err == [f"commbench: regression gate: FAILED: {what} (first: {news[0]})"]
    status, out, err = _compare(capsys, [base, *news], allow_unjudged=True)
    what = f"nothing judged for {news[0]}, {news[1]} (no point has a time on both sides)"
    assert status == 0
    assert _gate_lines(out) == [f"{GATE}: {what}, allowed:"]  # and no "passed": nothing was
    assert err == [f"commbench: warning: regression gate: {what} (first: {news[0]})"]


def test_a_failed_gate_never_also_says_it_passed(tmp_path, capsys):
    paths = [write_run(tmp_path / "base.json", side(np.full((2, 3), 800.0))),
             write_run(tmp_path / "new.json", side(np.full((2, 3), 2400.0)))]
    status, out, _ = _compare(capsys, paths)
    assert status == 1 and not [line for line in out if "passed" in line]


# --- the files given ---------------------------------------------------------------------------------

TWO_FILES = ("compare needs two different results files{}: BASE.json NEW.json [MORE.json ...] (or --base "
             "BASE.json NEW.json)")


def test_one_file_given_once_or_twice_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_run(tmp_path / "only.json", side(np.full((1, 3), 800.0)))
    with pytest.raises(UsageError) as once:
        compare_command(["only.json"], 10.0, 0.05, False)
    assert str(once.value) == TWO_FILES.format("")
    with pytest.raises(UsageError) as twice:
        compare_command(["only.json", "./only.json"], 10.0, 0.05, False)
    assert str(twice.value) == TWO_FILES.format(" (only.json is given twice)")


def test_two_names_of_one_file_are_refused_as_the_same_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    write_run(tmp_path / "run.json", side(np.full((1, 3), 800.0)))
    with pytest.raises(UsageError) as refused:
        compare_command(["run.json", "sub/../run.json"], 10.0, 0.05, False)
    assert str(refused.value) == ("run.json and sub/../run.json are the same run (sub/../run.json): compare "
                                  "needs two different results files")


# --- compare's output around the gate ----------------------------------------------------------------


def test_a_file_name_with_brackets_is_printed_as_given(tmp_path, capsys):
    """Not read as rich markup: [red] stays in the name."""
    paths = [write_run(tmp_path / "base.json", side(np.full((2, 3), 800.0))),
             write_run(tmp_path / "new[red].json", side(np.full((2, 3), 2400.0)))]
    _, out, _ = _compare(capsys, paths)
    assert out[0] == f"base base{SUFFIX} vs new new[red]{SUFFIX}"
    assert _gate_lines(out)[1].startswith(f"  {paths[1]}: all_reduce")


def test_on_a_terminal_a_line_is_written_whole_and_uncoloured(monkeypatch):
    """A line longer than the terminal is not broken at words (the terminal wraps it; grep finds it
    whole), and numbers are not highlighted in colour."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "40")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    text = "regression gate (--fail-above 10%): passed, no significant slowdown above 10% in 12 points"
    Printer(markdown=False).say(text)
    assert terminal.getvalue() == text + "\n"


def test_the_console_heading_is_one_line_up_to_the_table_width_then_two(tmp_path, capsys):
    base = side(np.full((1, 3), 800.0))
    # "base " + 4 + SUFFIX + " vs new " + 11 + SUFFIX: 100 columns, the table width
    paths = [write_run(tmp_path / "base.json", base), write_run(tmp_path / "new_run_abc.json", base)]
    _, out, _ = _compare(capsys, paths, fail_above=None)
    heading = f"base base{SUFFIX} vs new new_run_abc{SUFFIX}"
    assert len(heading) == 100 and out[0] == heading
    paths[1] = write_run(tmp_path / "new_run_abcd.json", base)
    _, out, _ = _compare(capsys, paths, fail_above=None)
    assert out[:2] == [f"base base{SUFFIX}", f"vs new new_run_abcd{SUFFIX}"]


def test_the_markdown_heading_is_one_line_however_long(tmp_path, capsys):
    base = side(np.full((1, 3), 800.0))
    paths = [write_run(tmp_path / "base.json", base), write_run(tmp_path / f"{'n' * 80}.json", base)]
    _, out, _ = _compare(capsys, paths, fail_above=None, markdown=True)
    assert out[:2] == [f"## base base{SUFFIX} vs new {'n' * 80}{SUFFIX}", ""]
    assert any(line.startswith("| ") for line in out)  # the tables, as Markdown tables


def test_an_incomplete_run_is_noted_with_its_status(tmp_path, capsys):
    points = {("all_reduce", 1024): [800.0] * 3}
    paths = [write_run(tmp_path / "base.json", points),
             _write_rows(tmp_path / "new.json", _rows(points), status="interrupted")]
    _, out, _ = _compare(capsys, paths, fail_above=None)
    assert out[1] == f"note: {paths[1]} is not a complete run (status interrupted)"


def test_the_statistics_note_and_the_key_follow_the_tables(tmp_path, capsys):
    base = {("all_reduce", 1024): [800.0], ("all_reduce", 2048): [800.0] * 3}
    paths = [write_run(tmp_path / "base.json", base), write_run(tmp_path / "new.json", base)]
    _, out, _ = _compare(capsys, paths, fail_above=None)
    note = ("passes are the evidence: 95% intervals by Welch's t on the passes' log p50s, significance by "
            "Benjamini-Hochberg at a false discovery rate of 0.05; 1 of 2 points have one pass on a side and "
            f"no significance: {HINT}")
    assert note in out
    assert out[out.index(note) + 1].startswith("key: q: a point's p-value adjusted")


@pytest.mark.parametrize("markdown, indent", [(False, "  "), (True, "      ")])
def test_rows_on_one_side_only_are_listed_by_series(tmp_path, capsys, markdown, indent):
    """In Markdown the series lines are indented by four more spaces: a code block under their heading
    line, not a list."""
    base = {("all_reduce", 1024): [800.0] * 3, ("all_reduce", 2048): [800.0] * 3}
    paths = [write_run(tmp_path / "base.json", base),
             write_run(tmp_path / "new.json", {("all_reduce", 1024): [800.0] * 3})]
    _, out, _ = _compare(capsys, paths, fail_above=None, markdown=markdown)
    at = out.index("only in base (3 rows):")
    assert out[at + 1] == f"{indent}all_reduce · float32 · op sum · sync · gloo · 2 ranks: 2 KiB"
