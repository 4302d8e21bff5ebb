"""Every bad input: one line on stderr naming the problem, exit status 2, no traceback, no hang."""

import pytest

from commbench.cli import main
from tests.dist_helpers import commbench

CASES = [
    (["--collective", "all_redcue"], "unknown collective 'all_redcue' (did you mean all_reduce?)"),
    (["--collective", ""], "no collective given"),
    (["--sizes", "1M:1K"], "minimum 1M is above maximum 1K"),
    (["--sizes", "12Q"], "malformed size '12Q'"),
    (["--sizes", "1K:1M:y3"], "malformed size step"),
    (["--dtype", "float7"], "unknown dtype 'float7'"),
    (["--backend", "nccl"], "backend nccl is not available"),
    (["--backend", "mpi"], "backend mpi is not available"),
    (["--backend", "glooo"], "unknown backend 'glooo' (did you mean gloo?)"),
    (["--device", "cuda"], "--device cuda but CUDA is not available"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--nproc", "0"], "--nproc 0 must be at least 1"),
    (["--iters", "0"], "--iters 0 must be at least 1"),
    (["--mode", "eager"], "unknown mode 'eager'"),
    (["--op", "sums"], "unknown reduce op 'sums' (did you mean sum?)"),
    (["--root", "2"], "--root 2 is outside the world of 2 ranks"),
    (["--timeout", "0"], "--timeout 0 must be above 0"),
]

# Refused while the command line is read, before launch: checked in-process (no ranks would start).
IN_PROCESS_CASES = [
    (["--impl", "symm-oneshot"], "unknown implementation 'symm-oneshot' (did you mean symm-one-shot?)"),
    (["--impl", ","], "--impl ',': an empty name in the comma list"),
    (["--impl", "nvshmem-a2av", "--collective", "all_reduce"],
     "--impl nvshmem-a2av runs all_to_all_single, all_to_allv: none of the collectives asked for"),
    (["--placement", "sideways"], "unknown placement 'sideways'"),
    (["--placement", "in-plac"], "unknown placement 'in-plac' (did you mean in-place?)"),
    (["--check-every", "-1"], "--check-every -1 must be at least 0"),
    (["--p2p-window", "0"], "--p2p-window 0 must be at least 1"),
    (["--premul-factor", "inf"], "--premul-factor inf must be a finite number"),
    (["--splits", "spread:1.5"], "the spread must be between 0 and 1"),
    (["--splits", "missing.csv"], "splits file missing.csv: no such file"),
    (["--collective", "all_reduce,,reduce"], "--collective 'all_reduce,,reduce': an empty name in the comma"),
    (["--dtype", "float32,"], "--dtype 'float32,': an empty name in the comma list"),
    (["--mode", ",async"], "--mode ',async': an empty name in the comma list"),
    (["sweeep", "smoke"],
     "no such command 'sweeep' (did you mean sweep?); the commands are compare, diagnose, env,"),
    (["pattern", "fsdp", "--bucket-mb", "unit,,1"], "--bucket-mb 'unit,,1': an empty name in the comma list"),
    # click's own refusals, said as ours are: lower case, option names bare, one suggestion
    (["--iters", "many"], "error: invalid value for --iters: 'many' is not a valid integer"),
    (["--collectiv", "all_reduce"], "error: no such option --collectiv (did you mean --collective?)"),
    (["sweep"], "error: missing argument 'FILE.yaml'"),
    (["--backend", "GLOO"], "unknown backend 'GLOO' (did you mean gloo?)"),
]


@pytest.mark.processes
@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_exits_2_with_one_line(args, message):
    result = commbench(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("commbench: error: ")
    assert message in lines[0]
    assert result.stdout == ""  # refused before anything started


@pytest.mark.parametrize("args, message", IN_PROCESS_CASES, ids=[" ".join(a) for a, _ in IN_PROCESS_CASES])
def test_bad_options_exit_2_with_one_line(args, message, capsys):
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [captured.err.strip()]
    assert captured.err.startswith("commbench: error: ") and message in captured.err


@pytest.mark.processes
def test_mpirun_without_master_address_is_bad_input():
    result = commbench("--sizes", "1K", env={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
                       timeout=60)
    assert result.returncode == 2
    assert "MASTER_ADDR and MASTER_PORT are not" in result.stderr
    assert "Traceback" not in result.stderr


SAVED_OUTPUT_CASES = [
    (["plot", "RUN", "--output", "FILE/x.png"], "--output: FILE is a file, not a directory"),
    (["plot", "RUN", "--output", "/proc/x.png"], "--output: cannot write the image in /proc"),
    (["report", "RUN", "--output", "/proc/x.html"], "--output: cannot write the report in /proc"),
    (["report", "RUN", "--output", "FILE/deeper/x.html"], "--output: FILE is a file, not a directory"),
    (["report", "RUN", "--output", "DIR"], "--output DIR is a directory: give the file to write"),
]


@pytest.mark.parametrize("args, message", SAVED_OUTPUT_CASES,
                         ids=[" ".join(args) for args, _ in SAVED_OUTPUT_CASES])
def test_plot_and_report_check_their_output_before_reading_any_run(args, message, tmp_path, capsys,
                                                                     monkeypatch):
    """Checked first, like --output-dir: the run named need not even exist for the output to be refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("")
    (tmp_path / "DIR").mkdir()
    assert main(args) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert captured.out == "" and line.startswith(f"commbench: error: {message}")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["DIR", "FILE"]
