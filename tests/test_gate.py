"""The regression gate's decision, rows in and a verdict out, in milliseconds: runs made of chosen pass
times (tests/gate_helpers.py) judged by `compare_command`, the gate as `commbench compare --fail-above`
runs it, and by `slowdowns`, what it fails on. The rule is gate.py's docstring: a point, or a
collective's points taken together, fails when its one-sided p-value beyond the line 1 + PCT/100,
adjusted by Benjamini-Hochberg, is at most --significance-level and its estimate is above the line; the
sides must measure the same points; a point with one pass on a side is not judged. The multi-process
tests of the same rules on real runs are in tests/test_compare.py."""

import numpy as np
import pytest

from commbench.analysis.compare import compare_runs
from commbench.analysis.gate import compare_command, slowdowns
from commbench.errors import UsageError
from tests.gate_helpers import saved_run, side, write_run
from tests.test_gate_statistics import welch_p_beyond

RNG_SEED = 5


def _passes(points: int, passes: int, spread: float, factor: float = 1.0, seed: int = RNG_SEED) -> np.ndarray:
    """[point][pass] p50s around 800 µs x ``factor``, log-normal with ``spread``."""
    rng = np.random.default_rng(seed)
    return np.exp(rng.normal(np.log(800.0 * factor), spread, size=(points, passes)))


def _gate(tmp_path, base, new, capsys, fail_above=10.0, level=0.05, markdown=False):
    """(exit status, stdout, stderr) of `compare BASE NEW --fail-above PCT` on these sides."""
    paths = [str(write_run(tmp_path / "base.json", base)), str(write_run(tmp_path / "new.json", new))]
    status = compare_command(paths, fail_above, level, markdown)
    out, err = capsys.readouterr()
    return status, out, err


def test_identical_passes_pass_the_gate_and_say_so(tmp_path, capsys):
    passes = side(_passes(4, 5, 0.05))
    status, out, err = _gate(tmp_path, passes, passes, capsys)
    assert status == 0
    assert "regression gate (--fail-above 10%): passed, no significant slowdown above 10%" in out
    assert "regression" not in err


def test_a_point_slower_than_the_line_in_every_pass_fails_the_gate_naming_it(tmp_path, capsys):
    base = _passes(12, 5, 0.02)
    new = base.copy()
    new[1] *= 2.0  # the second point, 2 KiB: twice as slow in every pass (the 12 together: 1.06x)
    status, out, err = _gate(tmp_path, side(base), side(new), capsys)
    assert status == 1
    assert "FAILED, 1 significant slowdown above 10% (1 point, 0 collectives taken together)" in out
    assert "all_reduce" in out and "2 KiB" in out and "2.00x slower" in out
    assert err.startswith("commbench: regression: 1 significant slowdown above 10%")
    found = slowdowns(compare_runs(saved_run(side(base)), saved_run(side(new))), 10.0)
    assert len(found) == 1 and not found[0].collective
    assert found[0].change.ratio == pytest.approx(2.0) and found[0].base_passes == 5


@pytest.mark.parametrize("fail_above, fails", [(10.0, True), (49.0, True), (51.0, False), (100.0, False)])
def test_the_line_is_one_plus_the_percentage(tmp_path, capsys, fail_above, fails):
    """1.5x slower, every pass alike: beyond 1.49 and not beyond 1.51."""
    base = np.full((2, 5), 800.0)
    status, out, _ = _gate(tmp_path, side(base), side(base * 1.5), capsys, fail_above=fail_above)
    assert status == (1 if fails else 0)
    assert ("FAILED" in out) == fails


def test_a_significant_slowdown_within_the_line_passes(tmp_path, capsys):
    """1.05x slower in every pass, passes tight: significant against no change, but not beyond 1.1."""
    base = _passes(3, 8, 0.005)
    status, out, _ = _gate(tmp_path, side(base), side(base * 1.05), capsys)
    assert status == 0 and "passed" in out
    comparison = compare_runs(saved_run(side(base)), saved_run(side(base * 1.05)))
    assert all(pair.significant for pair in comparison.pairs)  # the table calls it significant
    assert slowdowns(comparison, 10.0) == []
    assert len(slowdowns(comparison, 2.0)) == 3 + 1  # beyond 1.02: each point, and the collective


def test_a_slowdown_beyond_the_line_that_the_passes_cannot_tell_from_noise_passes(tmp_path, capsys):
    """One point 1.3x slower on average, its passes spread by 50%: two passes a side say nothing."""
    base = np.array([[800.0, 1600.0]])
    new = np.array([[1900.0, 1000.0]])
    status, out, _ = _gate(tmp_path, side(base), side(new), capsys)
    assert status == 0 and "passed" in out


def test_a_slowdown_spread_over_a_collective_s_points_fails_it_taken_together(tmp_path, capsys):
    """Every point 1.3x slower, each too noisy to show it alone (its passes e^±0.3 apart); the passes'
    means over the points do (the noise cancels over them: half the points are up in each pass)."""
    sign = np.where(np.add.outer(np.arange(12), np.arange(10)) % 2 == 0, 1.0, -1.0)
    base, new = 800.0 * np.exp(0.3 * sign), 1040.0 * np.exp(0.3 * sign)
    comparison = compare_runs(saved_run(side(base)), saved_run(side(new)))
    found = slowdowns(comparison, 10.0)
    assert [each.collective for each in found] == [True]
    assert found[0].what.startswith("all_reduce, its 12 points together")
    status, out, err = _gate(tmp_path, side(base), side(new), capsys)
    assert status == 1 and "(0 points, 1 collective taken together)" in out
    assert "its 12 points together" in err


def test_a_single_slow_point_among_many_is_adjusted_for_the_many(tmp_path, capsys):
    """Forty points: one 1.45x slower with noisy passes, significant on its own (p <= 5%) but not once
    Benjamini-Hochberg counts the forty tests; the same point alone fails."""
    base = np.full((40, 3), 800.0)
    new = base.copy()
    base[7] = [700.0, 800.0, 900.0]
    new[7] = [1015.0, 1160.0, 1305.0]
    alone = compare_runs(saved_run(side(base[7:8])), saved_run(side(new[7:8])))
    assert [each.collective for each in slowdowns(alone, 10.0)] == [False]
    assert 0.05 / 40 < welch_p_beyond(base[7], new[7], 1.1) <= 0.05
    status, out, _ = _gate(tmp_path, side(base), side(new), capsys)
    assert status == 0 and "passed" in out


def test_one_pass_a_side_is_not_judged_and_fails_the_gate_which_says_to_repeat(tmp_path, capsys):
    base = np.full((3, 1), 800.0)
    # 20x slower, and not judged (one pass says nothing of the next run): the gate fails closed
    status, out, err = _gate(tmp_path, side(base), side(base * 20.0), capsys)
    assert status == 1 and "FAILED, 3 points not judged" in out and "passed" not in out
    assert out.count("1 pass on the base side and 1 on the new (at least 2 a side)") == 3
    assert "significant slowdown" not in out  # nothing is claimed from samples within one pass
    assert err.startswith("commbench: regression gate: FAILED: 3 points not judged")
    assert "--repeat 5 or more" in err


def test_one_pass_on_one_point_leaves_the_others_judged(tmp_path, capsys):
    base = {("all_reduce", 1024): [800.0], ("all_reduce", 2048): [800.0, 800.0, 800.0]}
    new = {("all_reduce", 1024): [800.0], ("all_reduce", 2048): [1600.0, 1600.0, 1600.0]}
    status, out, _ = _gate(tmp_path, base, new, capsys)
    assert status == 1 and "1 of 2 points have one pass on a side" in out
    assert "1 significant slowdown above 10%" in out  # the judged point, 2x slower, is found
    assert "1 point not judged" in out and "sync 1 KiB: 1 pass on the base side" in out


def test_sides_that_do_not_measure_the_same_points_fail_the_gate(tmp_path, capsys):
    base = {("all_reduce", 1024): [800.0] * 3, ("all_reduce", 2048): [800.0] * 3}
    new = {("all_reduce", 1024): [800.0] * 3}
    status, out, err = _gate(tmp_path, base, new, capsys)
    assert status == 1 and "FAILED, 1 comparison does not cover the same rows" in out
    assert err.startswith("commbench: regression gate: ")
    status, out, err = _gate(tmp_path, new, base, capsys)  # the new side measured more
    assert status == 1 and "does not cover the same rows" in out


def test_sides_with_no_point_in_common_fail_the_gate(tmp_path, capsys):
    base = {("all_reduce", 1024): [800.0] * 3}
    new = {("broadcast", 1024): [800.0] * 3}
    status, out, _ = _gate(tmp_path, base, new, capsys)
    assert status == 1 and "no rows in common" in out


def test_without_a_gate_a_slowdown_or_a_mismatch_exits_0_and_a_mismatch_warns(tmp_path, capsys):
    base = {("all_reduce", 1024): [800.0] * 3, ("all_reduce", 2048): [800.0] * 3}
    new = {("all_reduce", 1024): [8000.0] * 3}
    status, out, err = _gate(tmp_path, base, new, capsys, fail_above=None)
    assert status == 0 and "regression gate" not in out
    assert err.startswith("commbench: warning: ")


def test_every_new_file_is_a_comparison_of_its_own_and_each_is_counted(tmp_path, capsys):
    base = side(np.full((2, 3), 800.0))
    paths = [str(write_run(tmp_path / f"{name}.json", points)) for name, points in
             (("base", base), ("same", base), ("slow", side(np.full((2, 3), 2400.0))),
              ("also", side(np.full((2, 3), 2400.0))))]
    assert compare_command(paths, 10.0, 0.05, False) == 1
    out, err = capsys.readouterr()
    assert "FAILED, 6 significant slowdowns above 10% (4 points, 2 collectives taken together)" in out
    assert err.count("\n") == 1 and "slow.json" in err


def test_files_given_with_base_pool_into_one_side_each(tmp_path, capsys):
    """--base A B C D: the passes of A and B are the base's, those of C and D the new side's."""
    one = side(np.full((2, 1), 800.0))
    slow = side(np.full((2, 1), 2400.0))
    paths = [str(write_run(tmp_path / f"{name}.json", points)) for name, points in
             (("a", one), ("b", one), ("c", slow), ("d", slow))]
    assert compare_command(paths[2:], 10.0, 0.05, False, base_paths=paths[:2]) == 1
    out, _ = capsys.readouterr()
    assert "FAILED" in out and "2 files" in out


def test_the_significance_level_is_the_false_discovery_rate_the_gate_uses(tmp_path, capsys):
    """A point whose p-value beyond the line lies between 0.01 and 0.05 fails at 0.05 and not at 0.01."""
    base = np.array([[700.0, 800.0, 900.0]])
    new = np.array([[1015.0, 1160.0, 1305.0]])
    assert 0.01 < welch_p_beyond(base[0], new[0], 1.1) <= 0.05
    assert _gate(tmp_path, side(base), side(new), capsys, level=0.05)[0] == 1
    assert _gate(tmp_path, side(base), side(new), capsys, level=0.01)[0] == 0


@pytest.mark.parametrize("level, fail_above, message", [
    (0.0, 10.0, "--significance-level 0 must be between 0 and 1"),
    (1.0, 10.0, "--significance-level 1 must be between 0 and 1"),
    (0.05, -1.0, "--fail-above -1 must be a percentage of 0 or more"),
])
def test_bad_settings_are_refused_before_any_file_is_read(level, fail_above, message):
    with pytest.raises(UsageError, match=message):
        compare_command(["missing-a.json", "missing-b.json"], fail_above, level, False)


def test_one_file_is_not_a_comparison(tmp_path):
    path = str(write_run(tmp_path / "only.json", side(np.full((1, 3), 800.0))))
    with pytest.raises(UsageError, match="compare needs two different results files"):
        compare_command([path], 10.0, 0.05, False)


def test_markdown_output_lists_the_slowdowns_as_items(tmp_path, capsys):
    base = np.full((2, 3), 800.0)
    status, out, _ = _gate(tmp_path, side(base), side(base * 3.0), capsys, markdown=True)
    assert status == 1
    assert out.startswith("## base base")
    assert "\n- base.json" not in out and "\n- " in out  # each slowdown an item
