"""The α-β (Hockney) fit: known α and β recovered from synthetic sweeps, and the fits a real run stores."""

import json
import random
import re

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from commbench.results.fit import ERROR_LIMIT, SeriesFit, describe_fit, fit_hockney, fit_line
from commbench.results.saved import load_run
from tests.test_collectives import NCCL_TESTS_FACTORS

SIZES = [2**k for k in range(3, 31)]  # 8 B to 1 GiB


def _times(alpha_us: float, beta_gbps: float, noise: float = 0.0, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [(alpha_us + size / (beta_gbps * 1e3)) * (1 + rng.uniform(-noise, noise)) for size in SIZES]


@pytest.mark.parametrize("alpha, beta", [(25.1, 180.0), (3.0, 450.0), (150.0, 0.5), (0.8, 12.5)])
def test_exact_data_gives_back_alpha_and_beta(alpha, beta):
    found = fit_hockney(SIZES, _times(alpha, beta))
    assert found.alpha_us == pytest.approx(alpha, rel=1e-9)
    assert found.beta_gbps == pytest.approx(beta, rel=1e-9)
    assert found.rms_relative_error < 1e-9 and found.points == len(SIZES)


def test_relative_weights_keep_alpha_under_noise():
    # 5% multiplicative noise: with 1/t^2 weights both ends count, and α stays within a few percent.
    # Unweighted least squares would fit the GiB sizes and make α whatever their noise says.
    times = _times(25.0, 180.0, noise=0.05, seed=7)
    found = fit_hockney(SIZES, times)
    assert found.alpha_us == pytest.approx(25.0, rel=0.05)
    assert found.beta_gbps == pytest.approx(180.0, rel=0.05)
    n = len(SIZES)
    mean_s, mean_t = sum(SIZES) / n, sum(times) / n
    slope = sum((s - mean_s) * (t - mean_t) for s, t in zip(SIZES, times, strict=True)) / \
        sum((s - mean_s) ** 2 for s in SIZES)
    unweighted_alpha = mean_t - slope * mean_s
    assert abs(unweighted_alpha - 25.0) > 10 * abs(found.alpha_us - 25.0)


def test_constraints_hold_at_the_edges():
    proportional = [size / 1e3 * 0.9 for size in SIZES[10:]]  # pure bandwidth, a little curvature below
    proportional[0] *= 0.5  # would pull the unconstrained α below zero
    edge = fit_hockney(SIZES[10:], proportional)
    assert edge.alpha_us == 0.0 and edge.beta_gbps > 0
    flat = fit_hockney([1024, 2048, 4096], [31.0, 30.0, 29.5])  # the time does not grow with size
    assert flat.beta_gbps is None and flat.alpha_us == pytest.approx(30.0, rel=0.05)
    assert fit_hockney([1024], [5.0]) is None and fit_hockney([0, 1024], [1.0, 2.0]) is None


def test_the_quoted_line():
    assert describe_fit(25.1, 180.0, 315.0) == "α = 25.1 µs, β = 180 GB/s (busbw 315 GB/s)"
    assert describe_fit(3.14159, 0.3071, 0.3071) == "α = 3.14 µs, β = 0.307 GB/s"


def _bounded_least_squares(sizes: list[int], times_us: list[float]) -> tuple[float, float | None]:
    """(α µs, β GB/s) minimising Σ ((t - α - s/β) / t)² with α >= 0 and 1/β >= 0, by scipy's bounded
    linear least squares on (α, 1/β): each row of the system is [1/t, s/t] . (α, 1/β) = 1."""
    a = np.array([[1.0 / t, s / t] for s, t in zip(sizes, times_us, strict=True)])
    solution = lsq_linear(a, np.ones(len(sizes)), bounds=([0.0, 0.0], [np.inf, np.inf]), tol=1e-14,
                          method="bvls")
    alpha, per_byte = solution.x
    return float(alpha), (1e-3 / per_byte if per_byte > 0 else None)


def test_bounded_least_squares_is_the_fit_on_synthetic_series():
    """The independent solver below finds what is known: exact α and β from exact times, and for times
    that do not grow with size no β and α the 1/t²-weighted mean time, Σ(1/t) / Σ(1/t²)."""
    exact = _bounded_least_squares(SIZES[:12], _times(25.0, 180.0)[:12])
    assert exact == pytest.approx((25.0, 180.0), rel=1e-9)
    times = [31.0, 30.0, 29.5]
    alpha, beta = _bounded_least_squares([1024, 2048, 4096], times)
    assert beta is None
    assert alpha == pytest.approx(sum(1 / t for t in times) / sum(1 / t**2 for t in times), rel=1e-9)


def test_a_run_stores_one_fit_per_series_and_they_match_its_rows(two_runs):
    for saved in two_runs:
        stored = json.loads(saved.json.read_text())["fits"]
        run = load_run(saved.json)
        assert run.fits == stored
        assert {(f["benchmark"], f["collective"], f["mode"]) for f in stored} == {
            ("gate", c, m) for c in ("all_reduce", "all_gather_base") for m in ("sync", "async")} | {
            ("rooted", "broadcast", "sync")}
        for fit in stored:
            series = [row for row in run.rows if row.benchmark == fit["benchmark"]
                      and row.collective == fit["collective"] and row.mode == fit["mode"]]
            alpha, beta = _bounded_least_squares([row.size_bytes for row in series],
                                                 [row.time_us_p50 for row in series])
            assert fit["alpha_us"] == pytest.approx(alpha, rel=1e-6, abs=1e-9)
            assert (fit["beta_gbps"] is None) == (beta is None)
            if beta is not None:
                assert fit["beta_gbps"] == pytest.approx(beta, rel=1e-6)
                factor = NCCL_TESTS_FACTORS[fit["collective"]](series[0].world_size)
                assert fit["beta_bus_gbps"] == pytest.approx(beta * factor, rel=1e-6)
            assert fit["weights"] == "1/t^2" and fit["points"] == len(series)
            peak = max(row.size_bytes / row.time_us_p50 / 1e3 for row in series)  # bytes per µs -> GB/s
            assert fit["peak_algbw_gbps"] == pytest.approx(peak, rel=1e-6)


N_HALF = 25e-6 * 180e9  # α·β in bytes: the size whose time is half latency, half bandwidth (4.5 MB)


def test_a_sweep_that_stops_below_the_half_bandwidth_size_gives_an_extrapolated_beta():
    # Exact model times: β is recovered exactly either way; what changes is whether the sweep saw it.
    whole = fit_hockney(SIZES, _times(25.0, 180.0))
    assert whole.reliability == "ok" and whole.peak_algbw_gbps == pytest.approx(180.0, rel=0.01)
    reaching = [size for size in SIZES if size <= 2 * N_HALF]  # up to 4 MiB < n½ < 8 MiB: algbw ≥ β/2
    short = [size for size in SIZES if size <= 64 * 1024]  # algbw ≤ 2.6 GB/s, β is 70x that
    found = fit_hockney(reaching, [25.0 + size / 180e3 for size in reaching])
    assert found.beta_gbps == pytest.approx(180.0) and found.reliability == "ok"
    assert found.peak_algbw_gbps > 180.0 / 2
    found = fit_hockney(short, [25.0 + size / 180e3 for size in short])
    assert found.beta_gbps == pytest.approx(180.0) and found.reliability == "extrapolated"
    assert found.beta_gbps / found.peak_algbw_gbps == pytest.approx(70, rel=0.03)


def test_a_fit_far_from_its_points_is_a_poor_fit():
    noisy = fit_hockney(SIZES, _times(25.0, 180.0, noise=0.9, seed=3))
    assert noisy.rms_relative_error > ERROR_LIMIT and "poor fit" in noisy.reliability
    assert fit_hockney(SIZES, _times(25.0, 180.0, noise=0.05, seed=3)).reliability == "ok"


def test_unreliable_fits_say_so_in_the_line_users_quote_and_in_the_saved_fit():
    short = [size for size in SIZES if size <= 64 * 1024]
    series = {"collective": "all_reduce", "mode": "sync"}
    extrapolated = SeriesFit(series, "", fit_hockney(short, [25.0 + s / 180e3 for s in short]), 1.0, 8, 65536)
    assert fit_line(extrapolated, with_mode=True) == (
        "sync α-β fit: α = 25.0 µs, β = 180 GB/s · unreliable: β extrapolated, 69.7x the highest algbw "
        "measured (2.58 GB/s)")  # 64 KiB in 25 µs + 64 KiB / 180 GB/s
    assert extrapolated.to_dict()["reliability"] == "extrapolated"
    reliable = SeriesFit(series, "", fit_hockney(SIZES, _times(25.0, 180.0)), 1.0, 8, 2**30)
    assert "unreliable" not in fit_line(reliable, with_mode=False)
    assert reliable.to_dict()["reliability"] == "ok"


def test_the_console_formats_mark_exactly_the_unreliable_fits_a_run_saved(two_runs):
    saved = two_runs[0]  # nccl-tests format: the fit is a '#' line under each table
    stored = json.loads(saved.json.read_text())["fits"]
    # a fit's own line, not explain's note (which may quote the fit: "latency-bound: ... the α-β fit gives")
    fit_lines = [line for line in saved.stdout.splitlines() if re.match(r"# (\w+ )?α-β fit: ", line)]
    assert len(fit_lines) == len(stored)
    marked = sum("· unreliable: " in line for line in fit_lines)
    assert marked == sum(fit["reliability"] != "ok" for fit in stored)
