"""The third first-hour walk (issue 35): what a newcomer met at a 100-column terminal or in a pipe, and
each edge fixed as they would expect. One real run of passes serves most tests (module-scoped: two
collectives, both modes, --check, --per-rank, --repeat 2, piped with COLUMNS=100); the rest are pure or
start one short run of their own. scripts/first_hour.sh walks the documented commands the same way.
"""

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

import commbench
from commbench.cli import main
from commbench.core.sizes import readable_size
from commbench.core.splits import SizePlan
from commbench.core.splits import describe as describe_splits
from commbench.results.model import RunMeta
from commbench.results.passes import pass_summaries
from commbench.results.saved import SavedRun, load_run
from commbench.running.launch import replaced_files
from commbench.running.probe import Probe, support_tables
from commbench.running.recording import launcher_status_note
from commbench.writers.console import (
    TABLE_WIDTH,
    TextTable,
    group_title,
    header_lines,
    make_console,
    pass_label,
    passes_table,
    print_table,
    run_table,
    straggler_line,
)
from tests.dist_helpers import FOREGROUND_PYTHON, ROOT, launcherless_env
from tests.process_helpers import wait_for_rows

sys.path.insert(0, str(ROOT / "scripts"))
from first_hour_check import check  # noqa: E402 - the walk's checker, from scripts/

BOX = set("┏┃┡│└")


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A run as a newcomer pipes it: its output, and the CSV it was told to write (--csv alone)."""
    where = tmp_path_factory.mktemp("walk")
    csv_path = where / "r.csv"
    result = subprocess.run(
        [sys.executable, "-m", "commbench", "--collective", "all_gather_base,barrier", "--sizes", "1K,4K",
         "--mode", "both", "--check", "--per-rank", "--repeat", "2", "--iters", "3", "--warmup", "1",
         "--csv", str(csv_path)], capture_output=True, text=True, timeout=240, cwd=where,
        env=launcherless_env({"COLUMNS": "100"}), stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return result.stdout, csv_path


def _saved(walked: tuple[str, Path]) -> SavedRun:
    return load_run(walked[1].with_suffix(".json"))


# --- 7: tables, the header and notes at 100 columns ---------------------------------------------

@pytest.mark.processes
def test_every_table_and_the_header_of_a_wide_run_fit_100_columns_uncut(walked):
    out, _ = walked
    found = check("the walk's run", out, 0)
    assert [problem for problem in found.problems if not problem.startswith("no interval")] == []
    assert found.tables >= 6 and 0 < found.widest_table <= TABLE_WIDTH  # both modes and --check: narrowed
    assert "…" not in out


def test_the_header_is_lines_of_at_most_100_columns_holding_every_part():
    meta = RunMeta(run_id="20261205-120000-abcdef", started_at="", command=[], commbench_version="0.1.0",
                   torch_version="2.13.0+cu130", python_version="3.11", backend="nccl", device="cuda",
                   world_size=4096, launcher="torchrun", hostnames=[f"node{i}" for i in range(512)],
                   versions={"nccl": "2.28.9", "cuda": "13.0", "driver": "580.95.05"},
                   env={}, config={}, groups={"count": 512, "size": 8, "layout": "contiguous"})
    lines = header_lines(meta)
    assert len(lines) > 1 and all(len(line) <= TABLE_WIDTH for line in lines)
    joined = " · ".join(lines)
    for part in ("world size 4096 · 512 groups of 8 (contiguous)", "nccl 2.28.9", "512 hosts",
                 "launcher torchrun", "run 20261205-120000-abcdef", "sizes in binary units (1K = 1024 B)"):
        assert part in joined


def test_a_note_off_a_terminal_is_one_line_however_long(capsys):
    console = make_console()  # pytest's stdout is no terminal, as a pipe is not
    text = "explain: " + " ".join(f"word{index}" for index in range(80))
    console.print(f"note: {text}")
    assert capsys.readouterr().out.splitlines() == [f"note: {text}"]  # grep finds it whole


def test_a_table_too_wide_even_narrowed_runs_past_the_width_rather_than_cutting_cells():
    buffer = io.StringIO()
    console = Console(file=buffer, width=40, soft_wrap=True)
    wide = TextTable("wide", ["collective name", "busbw GB/s"], [["reduce_scatter_base" * 2, "412.3"]])
    print_table(console, wide)
    text = buffer.getvalue()
    assert "reduce_scatter_base" * 2 in text and "…" not in text


# --- 1: list ---------------------------------------------------------------------------------------

def test_list_tables_fit_100_columns_with_every_dtype_mark():
    dtypes = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64",
              "float8_e4m3fn", "float8_e5m2"]
    probes = [Probe(name, dtype, op, mode, None if not dtype.startswith("float8") else "no float8")
              for name, op in (("all_reduce", "sum"), ("all_reduce", "avg"), ("reduce_scatter_v", "sum"),
                               ("all_to_allv", ""), ("reduce_scatter_base", "avg"))
              for dtype in dtypes for mode in ("sync", "async")]
    probes.append(Probe("reduce_scatter_base", "int8", "max", "sync", None))  # the others refuse it
    for table in support_tables(probes, 8):
        buffer = io.StringIO()
        print_table(Console(file=buffer, width=TABLE_WIDTH, soft_wrap=True), table)
        lines = buffer.getvalue().splitlines()
        assert max(len(line) for line in lines) <= TABLE_WIDTH and "…" not in buffer.getvalue()
    collectives, by_dtype, ops = support_tables(probes, 8)
    assert by_dtype.columns[-2:] == ["f8e4m3", "f8e5m2"]
    assert "barrier" not in {row[0] for row in by_dtype.rows}  # no data, no dtype
    assert dict((row[0], row[1:]) for row in ops.rows)["max"][4] == "some"  # int8 max: one collective of 5
    assert "some: max i8 runs on reduce_scatter_base only" in ops.footer


# --- 2: repeated runs read as passes -------------------------------------------------------------

@pytest.mark.processes
def test_each_pass_s_tables_say_their_pass_and_the_passes_end_with_a_summary(walked):
    out, _ = walked
    assert out.count("all_gather_base · float32 · out-of-place · pass 1 of 2") == 1
    assert out.count("all_gather_base · float32 · out-of-place · pass 2 of 2") == 1
    assert out.count("barrier · pass 2 of 2") == 1
    assert out.index("across 2 passes") > out.index("pass 2 of 2") and out.count("across 2 passes") == 2
    summaries = pass_summaries(_saved(walked).rows)
    assert {summary.passes for summary in summaries} == {2}
    table = passes_table([summary for summary in summaries if summary.first.collective == "all_gather_base"])
    first = next(summary for summary in summaries if summary.first.collective == "all_gather_base")
    assert table.columns[:3] == ["size", "mode", "passes"]
    assert first.fastest_us <= first.p50_us <= first.slowest_us


def test_a_pass_label_only_for_a_soak():
    row = replace(_toy_row(), repeat=2)
    assert pass_label(row, {"passes": 10}) == "pass 3 of 10"
    assert pass_label(row, {"duration_s": 60.0, "passes": 10}) == "pass 3"  # the count is not known
    assert pass_label(row, {"passes": None}) == "" and pass_label(row, {"passes": 1}) == ""


# --- 3, 9: plots and the report of repeated runs -------------------------------------------------

@pytest.mark.processes
def test_a_plot_of_passes_draws_each_size_once_with_a_band_and_every_line_its_colour(walked):
    from commbench.analysis.plot import draw

    run = _saved(walked)
    figure = draw([run, replace(run, path=Path("other.json"))])
    bandwidth, latency = figure.axes[:2]
    lines = latency.get_lines()
    assert len(lines) == 4  # two runs x all_gather_base's sync and async (the barrier has no size)
    for line in lines:
        sizes = list(line.get_xdata())
        assert sizes == sorted(set(sizes))  # one point per size: no zigzag through the passes
    colours = {tuple(line.get_color()) if not isinstance(line.get_color(), str) else line.get_color()
               for line in lines}
    assert len(colours) == len(lines)
    assert latency.collections  # the passes' band
    figure.canvas.draw()
    low, high = latency.get_xlim()
    shown = [label.get_text() for label in latency.get_xticklabels()
             if low <= label.get_position()[0] <= high]
    assert shown == ["1K", "4K"]


def test_a_narrow_range_of_sizes_gets_tick_labels_at_the_sizes_measured():
    from commbench.analysis.plot import _format_axes, require_matplotlib

    pyplot = require_matplotlib()
    figure = pyplot.figure()
    panels = tuple(figure.subplots(1, 2))
    sizes = [5_000_000, 6_000_000, 9_000_000]  # a replay's: no power of 4 between them
    for axes in panels:
        axes.plot(sizes, [1.0, 2.0, 3.0])
    _format_axes(panels, sizes)
    figure.canvas.draw()
    assert [label.get_text() for label in panels[1].get_xticklabels()] == ["4.77M", "5.72M", "8.58M"]
    pyplot.close(figure)


@pytest.mark.processes
def test_the_report_numbers_passes_from_1_with_a_pass_column_and_a_summary(walked):
    from commbench.analysis.report import build_report

    page = build_report([_saved(walked)], plots_missing="not needed here")
    assert "<th>pass</th>" in page and "across 2 passes" in page
    assert "soak: 2 passes" in page


# --- 6: stragglers --------------------------------------------------------------------------------

def _toy_row(**changes):
    from commbench.results.model import Row

    base = Row(collective="all_reduce", backend="gloo", device="cpu", world_size=2, dtype="float32",
               mode="sync", op="sum", size_bytes=1024, requested_bytes=1024, count_per_rank=256, iters=8,
               warmup=1, time_us_p50=100.0, time_us_p95=120.0, time_us_min=90.0, time_us_max=130.0,
               time_us_mean=100.0, algbw_gbps=0.01, busbw_gbps=0.01, busbw_factor=1.0)
    return replace(base, **changes)


def test_a_straggler_is_named_only_when_one_rank_is_last_in_three_quarters_of_the_sizes():
    sizes = [1024 << index for index in range(8)]
    consistent = [_toy_row(size_bytes=size, skew_us_max=80.0, slowest_rank=1) for size in sizes]
    line = straggler_line(consistent, ["h0", "h1"], 25.0)
    assert line == ("straggler: rank 1 (h1) arrived last in 8 of 8 sizes: the others waited for it up to "
                    "80.0 µs per op (80% of the p50 time, at 1 KiB)")
    scattered = [replace(row, slowest_rank=index % 2) for index, row in enumerate(consistent)]
    assert straggler_line(scattered, ["h0", "h1"], 25.0) is None  # a busy host, not a slow rank
    few = consistent[:5] + [replace(row, skew_us_max=5.0) for row in consistent[5:]]
    assert straggler_line(few, ["h0", "h1"], 25.0) is None  # 5 of 8 sizes: no pattern
    most = consistent[:6] + [replace(row, skew_us_max=5.0) for row in consistent[6:]]
    assert "arrived last in 6 of 8 sizes" in straggler_line(most, ["h0", "h1"], 25.0)
    async_only = [replace(row, mode="async") for row in consistent]
    assert straggler_line(async_only, ["h0", "h1"], 25.0) is None  # async skews say nothing
    assert straggler_line(consistent[:2], ["h0", "h1"], 25.0) is None  # two rows show no pattern
    huge = [replace(row, time_us_p50=1.0, skew_us_max=130.0) for row in consistent]
    assert "(130x the p50 time, at 1 KiB)" in straggler_line(huge, ["h0", "h1"], 25.0)


@pytest.mark.processes
def test_the_per_rank_table_names_its_last_column(walked):
    out, _ = walked
    assert "┃ straggler    ┃" in out and "arrived last" in out


# --- 8: Ctrl-C and signals ------------------------------------------------------------------------

def _fork_server(launcher: int) -> int | None:
    """The pid of the fork server ``launcher`` started, if it has started one."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"PPid:\t{launcher}\n" in (entry / "status").read_text() and \
                    b"forkserver" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") >= 0


@pytest.mark.processes
def test_ctrl_c_while_the_fork_server_imports_torch_exits_130_without_a_traceback():
    proc = subprocess.Popen([*FOREGROUND_PYTHON, "-m", "commbench", "--sizes", "1K"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=launcherless_env(),
                            cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True)
    server = None
    try:
        deadline = time.monotonic() + 60
        while server is None and proc.poll() is None and time.monotonic() < deadline:
            server = _fork_server(proc.pid)
            time.sleep(0.02)
        assert server is not None, "no fork server started"
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
        _, stderr = proc.communicate(timeout=60)
        deadline = time.monotonic() + 60  # the server ends once it sees its launcher gone
        while not _gone(server) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        if server is not None and not _gone(server):
            os.kill(server, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr


@pytest.mark.processes
def test_under_torchrun_s_variables_sigterm_ends_each_rank_with_143_and_rank_0_says_torchrun_s_rule(
        tmp_path):
    from commbench.running.spawn import free_port

    port = str(free_port())
    csv_path = tmp_path / "r.csv"
    torchrun = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                "TORCHELASTIC_RUN_ID": "walk"}  # what torchrun gives each rank, its rank aside
    procs = [subprocess.Popen(
        [sys.executable, "-m", "commbench", "--sizes", "1K:2000K:+1K", "--iters", "2", "--warmup", "0",
         "--csv", str(csv_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        stdin=subprocess.DEVNULL, env=launcherless_env({**torchrun, "RANK": rank, "LOCAL_RANK": rank}))
        for rank in ("0", "1")]
    try:
        wait_for_rows(csv_path, 2, procs[0])
        for proc in procs:
            proc.send_signal(signal.SIGTERM)  # torchrun sends each of its ranks the signal it got
        outputs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert [proc.returncode for proc in procs] == [143, 143], outputs
    assert "(the ranks exit 143; torchrun's own status after a signal is 1 by its rule" in outputs[0][0]


def test_only_torchrun_gets_the_note_on_its_exit_status():
    assert launcher_status_note("local", "SIGINT") == ""
    assert launcher_status_note("torchrun", "SIGINT").startswith(" (the ranks exit 130;")


# --- the smaller edges ----------------------------------------------------------------------------

@pytest.mark.processes
def test_csv_alone_puts_the_json_beside_it_so_load_has_the_metadata(walked):
    _, csv_path = walked
    frame = commbench.load(csv_path)
    meta = json.loads(csv_path.with_suffix(".json").read_text())["meta"]
    assert meta["status"] == "complete" and set(frame["run_id"]) == {meta["run_id"]}


def test_a_result_file_that_holds_results_is_said_to_be_replaced(tmp_path):
    (tmp_path / "old.csv").write_text("collective\nall_reduce\n")
    (tmp_path / "empty.json").write_text("")
    found = replaced_files([("--csv", tmp_path / "old.csv"), ("--json", tmp_path / "empty.json"),
                            ("--json", tmp_path / "new.json")])
    assert found == [f"commbench: warning: --csv {tmp_path / 'old.csv'} already holds results: this run "
                     "replaces them"]


@pytest.mark.processes
def test_each_run_table_says_why_an_interval_is_missing_and_the_first_says_what_the_units_are(walked):
    out, _ = walked
    assert out.count("key: µs per op, the slowest rank's · ±95%: the p50's 95% interval · GB/s: 10^9") == 1
    assert "±95% -: 4 rows (1 KiB, 4 KiB) had as few as 1 sample; the median's 95% interval needs 6" in out


def test_one_rank_says_why_its_busbw_is_0_and_a_verdict_far_above_its_floor_is_a_multiple():
    alone = run_table([_toy_row(world_size=1, group_size=1, busbw_gbps=0.0, busbw_factor=0.0)])
    assert any(line.startswith("busbw 0: at 1 rank nothing crosses a link") for line in alone.footer)
    judged = run_table([_toy_row(verdict="PASS", expected_gbps=0.0001, busbw_gbps=1.4273)])
    assert judged.rows[0][judged.columns.index("verdict")] == "PASS 14,273x"


def test_titles_name_a_benchmark_once_and_give_the_barrier_no_dtype():
    assert group_title(_toy_row(collective="barrier", benchmark="barrier", op="")) == "barrier"
    assert group_title(_toy_row(benchmark="latency")) == "latency · all_reduce · float32 · op sum"


def test_uneven_sizes_are_said_in_units_not_raw_bytes():
    assert describe_splits(SizePlan(3000, 12000, chunk_counts=[128, 3000]), 4) == "512 B to 11.7 KiB per rank"
    assert [readable_size(size) for size in (656896, 4096, 1020)] == ["641.5 KiB", "4 KiB", "1020 B"]


def test_help_keeps_each_command_s_sentence_and_sweep_names_the_shipped_sweeps(capsys):
    assert main(["--help"]) == 0
    commands = capsys.readouterr().out.split("Commands:")[1].split("Options of")[0]
    assert "..." not in commands and "each later file against the first, or the files against --base" in \
        " ".join(commands.split())
    assert main(["sweep", "--help"]) == 0
    assert "bandwidth, fsdp, full, latency, smoke" in " ".join(capsys.readouterr().out.split())
    assert main(["--help"]) == 0
    quiet = "only errors, warnings and, on stderr, where the files are"
    assert quiet in " ".join(capsys.readouterr().out.split())


def test_the_top_folder_of_a_recording_points_at_the_folders_that_hold_it(tmp_path, capsys):
    for name in ("ddp", "fsdp2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trace_rank_0.json").write_text("{}")
    assert main(["replay", str(tmp_path)]) == 2
    assert (f"the directory holds no trace files; its folders ddp, fsdp2 hold files: give one "
            f"(for example {tmp_path / 'ddp'})") in capsys.readouterr().err


def test_a_foreign_file_names_the_field_it_lacks(tmp_path, capsys):
    (tmp_path / "other.json").write_text('{"name": "not ours"}')
    assert main(["plot", str(tmp_path / "other.json"), "--output", str(tmp_path / "p.png")]) == 2
    assert capsys.readouterr().err == (f"commbench: error: {tmp_path / 'other.json'}: not a commbench "
                                       "results.json (it has no 'rows' field)\n")


def test_one_rank_of_a_busy_host_is_one_rank():
    from tests.explain_helpers import cpu_host, row, run_meta
    from tests.test_explain_rules import reasons

    meta = run_meta({"vm": cpu_host(cpus=2, load=9.0)}, {"vm": 1}, backend="gloo")
    found = reasons(meta, [row("broadcast", 1, 64 << 20, 0.5, backend="gloo")])["cores-shared"]
    assert "with 1 rank of this run" in found.text


def test_the_python_api_s_best_busbw_example_keeps_to_sweeps(tmp_path):
    import pandas

    text = (ROOT / "docs" / "python-api.md").read_text()
    snippet = text[text.index("sweeps = df["):text.index("# per-sample")]
    df = pandas.DataFrame({"hosts": ["h", "h"], "collective": ["all_reduce"] * 2, "busbw_gbps": [1.0, 9.0],
                           "pattern": ["", "fsdp"]})
    scope: dict = {"df": df}
    exec(snippet, scope)  # the documented lines, as a reader pastes them
    assert scope["best"].loc["h", "all_reduce"] == 1.0  # not the pattern's row


# --- scripts/first_hour.sh's checker --------------------------------------------------------------

def _rendered(table, width: int) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=width, soft_wrap=True).print(table)
    return buffer.getvalue()


def test_the_walk_s_checker_finds_each_kind_of_problem():
    from commbench.writers.console import rich_table

    wide = TextTable("wide", [f"column {index}" for index in range(12)], [["12345.678"] * 12])
    one_sample = run_table([_toy_row(samples=1, samples_us=[100.0]),
                            _toy_row(size_bytes=2048, samples=20, samples_us=[100.0] * 20, ci95_rel=0.05)])
    assert check("wide", _rendered(rich_table(wide), 200), 0).problems[0].startswith("145 columns: ┏")
    squeezed = check("squeezed", _rendered(rich_table(wide), 60), 0).problems
    assert squeezed and all(problem.startswith("cut: ") for problem in squeezed)
    assert check("no interval", _rendered(rich_table(one_sample), 100), 0).problems == [
        "no interval: all_reduce · float32 · op sum at 1 KiB"]
    failed = check("failed", "Traceback (most recent call last):\n  boom", 1).problems
    assert failed == ["exit status 1", "a traceback"]
    long_note = check("note", "note: " + "word " * 40, 0)
    assert long_note.problems == [] and long_note.long_prose == 1  # prose stays whole, never a problem
