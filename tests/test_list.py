"""`commbench list`: what the backend supports, found by running tiny ops on real ranks."""

import pytest
import torch

from commbench.cli import main
from commbench.measure.collectives import REGISTRY
from tests.dist_helpers import collectives_gloo_refuses, commbench


def _row(stdout: str, *first_cells: str, table: str = "") -> list[str]:
    """The cells of the table row that starts with ``first_cells`` (in the table whose title starts with
    ``table``)."""
    lines = stdout.splitlines()
    start = next((index for index, line in enumerate(lines) if table and line.startswith(table)), 0)
    for line in lines[start:]:
        cells = [cell.strip() for cell in line.replace("┃", "│").strip("│ ").split("│")]
        if cells[: len(first_cells)] == list(first_cells):
            return cells
    raise AssertionError(f"no row {first_cells} in:\n{stdout}")


@pytest.mark.processes
def test_list_probes_gloo_on_two_local_ranks():
    result = commbench("list", timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("backend gloo · device cpu · 2 ranks")
    assert max(len(line) for line in out.splitlines() if "│" in line or "┃" in line) <= 100  # any terminal
    header = _row(out, "collective", "busbw factor n=2/4/8")
    assert header[2:] == ["placements", "sync", "async"]
    assert _row(out, "collective", table="dtypes")[1] == "fp32"
    refused = collectives_gloo_refuses()  # all_to_all before torch 2.12
    for name in REGISTRY:
        cells = _row(out, name)
        # every collective this gloo has runs in both modes; ping_pong's round trip has no async form
        expected = ["✗", "✗"] if name in refused else ["✓", "-"] if name == "ping_pong" else ["✓", "✓"]
        assert cells[3:5] == expected, cells
    # a collective refused in every form is named once, with the torch that has it (probe.FIRST_TORCH)
    named = [line for line in out.splitlines() if line.startswith("unavailable here: ")]
    assert len(named) == len(refused)
    for line, (name, why) in zip(named, refused.items(), strict=True):
        assert line.startswith(f"unavailable here: {name} ({why}")
        assert line.endswith("--collective all leaves it out")
        assert ("; torch's gloo has it from 2.12)" in line) == (name == "all_to_all")
    assert _row(out, "all_reduce")[1] == "1/1.5/1.75"  # 2(n-1)/n
    assert _row(out, "all_reduce")[2] == "in-place, out-of-place"  # the default first
    assert _row(out, "broadcast")[2] == "in-place"
    assert _row(out, "all_reduce", table="dtypes")[1] == "✓"  # float32
    dtypes = out[out.index("dtypes (sync, op sum)"):out.index("reduce ops")]
    assert "│ barrier " not in dtypes and "│ all_reduce " in dtypes  # no data, no dtype: not in that table
    # premul_sum is NCCL's: gloo refuses it, and the listing says why
    assert set(_row(out, "premul_sum", table="reduce ops")[1:]) == {"✗"}
    assert _row(out, "sum", table="reduce ops")[1] == "✓"
    assert "why refused:" in out
    assert "premul_sum is NCCL's pre-multiplied sum; the gloo backend does not have it" in out
    # the parity options, with what --flush-cache writes over on this host
    from commbench.core.devices import approximate_bytes
    from commbench.measure.cache import cpu_cache_bytes

    assert "--splits): spread:F, distance:F, zipf:S or a file" in out
    cache = cpu_cache_bytes()
    assert (f"--flush-cache writes {approximate_bytes(cache)} here (the last-level cache, from sysfs)"
            if cache else "--flush-cache writes 64 MiB here (a default") in out


def test_list_refuses_an_unavailable_backend_before_starting(capsys):
    if torch.cuda.is_available():
        pytest.skip("nccl is available here")
    assert main(["list", "--backend", "nccl"]) == 2
    assert "backend nccl is not available" in capsys.readouterr().err


@pytest.mark.processes
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (and COMMBENCH_TEST_CUDA=1)")
def test_list_probes_nccl_on_cuda():
    result = commbench("list", "--backend", "nccl", timeout=180)
    assert result.returncode == 0, result.stderr
    assert "backend nccl · device cuda" in result.stdout
    assert _row(result.stdout, "all_reduce")[5] == "✓"
