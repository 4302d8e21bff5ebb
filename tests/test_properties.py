"""Property-based tests over every parser and reader: whatever the text or file, the answer is a result or
a one-line UsageError, never another exception (issue 32).

Inputs are generated (sizes, durations, option values, split matrices) or made by commbench or torch and
then damaged: results files written by commbench's own writer, the shipped sweep, model and baseline
files, and recordings of real torch programs (tests/replay_programs.py). A loaded saved run also goes
through what reads it: the frame, compare, plot's lines and report's page.

Size ranges are drawn with ends below a million bytes and steps of x1.5 or more: how many sizes a range
may hold, like how many units a model's ``repeat`` may make, is a limit of its own (part B of the
issue, with its own tests), not a parser's crash."""

import copy
import json
import math
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from commbench.analysis.compare import compare_runs, pair_tables, summary_table
from commbench.analysis.plot import collect_lines
from commbench.analysis.report import build_report
from commbench.config.launch import LaunchConfig
from commbench.config.options import declared, nested
from commbench.config.sweep import RunConfig
from commbench.config.sweepfile import load_sweep
from commbench.core.shipped import configs_dir
from commbench.core.sizes import parse_duration, parse_size, parse_sizes
from commbench.core.splits import parse_splits, plan_all_to_allv
from commbench.errors import UsageError
from commbench.fabric.config import FabricConfig
from commbench.patterns.config import FsdpConfig, ParallelConfig
from commbench.patterns.models import load_model
from commbench.provenance.baselines import parse_baseline
from commbench.replay.config import ReplayConfig
from commbench.replay.loading import load_trace
from commbench.replay.mapping import map_trace
from commbench.replay.validate import validate
from commbench.results.frame import runs_frame
from commbench.results.saved import load_run
from commbench.writers.files import readable_json
from tests.test_hostile_inputs import saved_run

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                      HealthCheck.too_slow])


def one_line(call, *args) -> Any:
    """``call(*args)``: its result, or None after a one-line UsageError; any other exception fails."""
    try:
        return call(*args)
    except UsageError as exc:
        assert "\n" not in str(exc) and str(exc)
        return None


# --- values a file or a command line may hold ----------------------------------------------------------

ODD_TEXT = st.sampled_from(["nan", "inf", "-inf", "1e400", "²", "١٢", "0x10", "-0", "", " ", "1_000", "９",
                            "Infinity", "[", "{}", "!!int", "*a", "a" * 300])
HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
    st.sampled_from([10 ** 30, -1, 0, 2 ** 63, 10 ** 400]),
    st.floats(), st.text(max_size=6), ODD_TEXT,
    st.lists(st.integers(-5, 5) | st.text(max_size=2), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2),
    st.integers(70, 200).map(lambda depth: json.loads("[" * depth + "]" * depth)))


def json_paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON tree, as the keys and indexes that reach it."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += json_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            found += json_paths(item, (*prefix, index))
    return found


def replaced(tree: Any, path: tuple, value: Any) -> Any:
    """A copy of ``tree`` with what ``path`` reaches replaced by ``value``."""
    if not path:
        return value
    copied = copy.copy(tree)
    copied[path[0]] = replaced(tree[path[0]], path[1:], value)
    return copied


# --- sizes, durations, option values -----------------------------------------------------------------

SIZE_TEXT = st.text(alphabet="0123456789.KMGTkmgtiIbB x+,-_eE²", max_size=24)
SMALL_SIZE = st.integers(0, 1 << 20).map(str) | st.sampled_from(["1K", "512K", "1M", "0", "1.5K", "-1"])
STEP = st.sampled_from(["x2", "x4", "x1.5", "x1", "x0.5", "xnan", "xinf", "x-2", "xabc", "+1K", "+4K", "+0",
                        "+-1", "+x", "*2", "y3", ""])
RANGE_TEXT = st.builds(lambda low, high, step: f"{low}:{high}" + (f":{step}" if step else ""),
                       SMALL_SIZE, SMALL_SIZE, STEP)


@FAST
@given(text=SIZE_TEXT)
def test_any_size_or_list_of_sizes_is_bytes_or_one_line(text):
    size = one_line(parse_size, text)
    assert size is None or (type(size) is int and size >= 0)
    sizes = one_line(parse_sizes, text.replace(":", ""))
    assert sizes is None or all(type(item) is int for item in sizes)


@FAST
@given(text=RANGE_TEXT)
def test_any_size_range_is_sizes_or_one_line(text):
    sizes = one_line(parse_sizes, text)
    assert sizes is None or all(type(item) is int and item >= 0 for item in sizes)


@FAST
@given(text=st.text(alphabet="0123456789.hmsdHMS nainfe-+", max_size=16))
def test_any_duration_is_seconds_or_one_line(text):
    seconds = one_line(parse_duration, text)
    assert seconds is None or isinstance(seconds, float | int)


def every_option() -> list:
    """Each declared option of every configuration a command is made from."""
    found = {}
    for config in (RunConfig, LaunchConfig, FsdpConfig, ParallelConfig, FabricConfig, ReplayConfig):
        inner = [item for kind in nested(config).values() for item in declared(kind)]
        for item in (*declared(config), *inner):
            found[(item.name, item.flag)] = item
    return list(found.values())


OPTIONS = every_option()
OPTION_TEXT = st.text(alphabet="0123456789.,:x+-abcdefgKMGnsi ²_", max_size=20) | ODD_TEXT


@settings(max_examples=150, deadline=None)
@given(option=st.sampled_from(OPTIONS), text=OPTION_TEXT, data=st.data())
def test_any_option_value_is_a_value_or_one_line(option, text, data):
    if option.option.parse is parse_sizes:  # ranges drawn small: see the module's docstring
        text = data.draw(RANGE_TEXT | SIZE_TEXT.map(lambda typed: typed.replace(":", "")))

    def value_of(typed: str) -> Any:
        value = option.from_text(typed, option.flag)
        option.check(value)
        return value

    one_line(value_of, text)


# --- results files -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def written_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A run written by commbench's writer, with this host's hardware record as a run records it."""
    from commbench.provenance.hardware import probe_host

    payload = json.loads(saved_run(tmp_path_factory.mktemp("written") / "run.json").read_text())
    payload["meta"]["hardware"] = json.loads(readable_json({"node0": probe_host()}))
    return payload


def use_saved(run) -> None:
    """What the commands on saved files do with a run that loaded."""
    runs_frame([run])
    comparison = compare_runs(run, run)
    pair_tables(comparison)
    summary_table(comparison)
    collect_lines([run])


@FAST
@given(data=st.data(), value=HOSTILE)
def test_a_damaged_results_file_loads_and_is_used_or_is_one_line(written_run, tmp_path_factory, data, value):
    path = data.draw(st.sampled_from(json_paths(written_run)))
    target = tmp_path_factory.mktemp("damaged") / "run.json"
    target.write_text(json.dumps(replaced(written_run, path, value)))
    run = one_line(load_run, target)
    if run is not None:
        use_saved(run)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), value=HOSTILE)
def test_a_damaged_results_file_makes_a_report_page_or_is_one_line(written_run, tmp_path_factory, data,
                                                                    value):
    path = data.draw(st.sampled_from([path for path in json_paths(written_run) if path[:1] == ("meta",)]))
    target = tmp_path_factory.mktemp("damaged") / "run.json"
    target.write_text(json.dumps(replaced(written_run, path, value)))
    run = one_line(load_run, target)
    if run is not None:
        build_report([run], "plots left out")


# --- sweep, model, baseline and split files --------------------------------------------------------------

SHIPPED = configs_dir()
SWEEP_KEYS = sorted({key for item in (*declared(RunConfig), *declared(LaunchConfig)) for key in item.keys()})
YAML_MARKS = st.sampled_from(["!!int ", "!!str ", "!!binary ", "!!python/name:os.system ", "*a ", "&a ",
                              "[", "{", ": ", "- ", "\t", "'", "\ud800", "2024-13-45 ", "0x_ "])


def yaml_file(tmp_path_factory: pytest.TempPathFactory, document: Any, mark: str = "", at: int = 0,
              suffix: str = ".yaml") -> Path:
    """The document as YAML, with ``mark`` written in at character ``at`` (a tag, an alias, a bracket)."""
    text = yaml.safe_dump(document, default_flow_style=None, allow_unicode=True)
    at = at % (len(text) + 1)
    path = tmp_path_factory.mktemp("yaml") / f"input{suffix}"
    path.write_bytes((text[:at] + mark + text[at:]).encode("utf-8", "surrogatepass"))  # a lone surrogate
    return path


@FAST
@given(defaults=st.dictionaries(st.sampled_from(SWEEP_KEYS) | st.text(max_size=4), HOSTILE.filter(
           lambda value: ":" not in str(value)), max_size=2),
       benchmark=st.dictionaries(st.sampled_from(["collectives", "sizes", "iters", "dtypes", "name", "mode"]),
                                 HOSTILE.filter(lambda value: ":" not in str(value)), max_size=3),
       mark=st.just("") | YAML_MARKS, at=st.integers(0, 400))
def test_any_sweep_file_is_benchmarks_or_one_line(tmp_path_factory, defaults, benchmark, mark, at):
    path = yaml_file(tmp_path_factory, {"defaults": defaults, "benchmarks": [benchmark]}, mark, at)
    one_line(load_sweep, path, {})


@pytest.fixture(scope="module")
def shipped_model() -> dict:
    return yaml.safe_load((SHIPPED / "models" / "tiny.yaml").read_text())


@FAST
@given(data=st.data(), value=HOSTILE, mark=st.just("") | YAML_MARKS, at=st.integers(0, 2000))
def test_a_damaged_model_file_is_a_model_or_one_line(shipped_model, tmp_path_factory, data, value, mark, at):
    path = data.draw(st.sampled_from(json_paths(shipped_model)))
    assume(not (path[-1:] == ("repeat",) and isinstance(value, int) and value > 10_000))  # part B's limit
    target = yaml_file(tmp_path_factory, replaced(shipped_model, path, value), mark, at)
    model = one_line(load_model, str(target))
    assert model is None or model.numel >= 0


@pytest.fixture(scope="module")
def shipped_baselines() -> dict:
    return yaml.safe_load((SHIPPED / "baselines.yaml").read_text())


@FAST
@given(data=st.data(), value=HOSTILE)
def test_a_damaged_expect_baseline_is_a_baseline_or_one_line(shipped_baselines, tmp_path_factory, data,
                                                              value):
    name = data.draw(st.sampled_from(sorted(shipped_baselines["baselines"])))
    baseline = shipped_baselines["baselines"][name]
    path = data.draw(st.sampled_from(json_paths(baseline)))
    target = yaml_file(tmp_path_factory, replaced(baseline, path, value))
    found = one_line(parse_baseline, target, "", yaml.safe_load(target.read_text()))
    assert found is None or all(math.isfinite(item.busbw_gbps) for item in found.expectations)


CELL = st.integers(0, 1 << 20) | HOSTILE.filter(lambda value: not isinstance(value, dict))


@FAST
@given(matrix=st.lists(st.lists(CELL, min_size=1, max_size=4), min_size=1, max_size=4),
       as_csv=st.booleans())
def test_any_splits_file_is_a_matrix_or_one_line(tmp_path_factory, matrix, as_csv):
    folder = tmp_path_factory.mktemp("splits")
    if as_csv:
        path = folder / "splits.csv"
        path.write_text("\n".join(",".join(str(cell) for cell in row) for row in matrix))
    else:
        path = yaml_file(tmp_path_factory, {"splits": matrix})
    spec = one_line(parse_splits, str(path))
    if spec is not None:
        plan = plan_all_to_allv(spec, 1 << 20, len(spec.matrix), 4)
        assert plan.size_bytes >= 0


# --- recordings of real torch programs ---------------------------------------------------------------

def replay_reads(directory: Path) -> None:
    """What every process of `commbench replay DIR` does before a rank starts."""
    trace = validate(load_trace([str(directory)]))
    map_trace(trace, trace.world_size)


def damaged_copy(source: Path, folder: Path, damage) -> Path:
    shutil.copytree(source, folder, dirs_exist_ok=True)
    first = sorted(folder.iterdir())[0]
    first.write_bytes(damage(first.read_bytes()))
    return folder


@pytest.mark.processes
@FAST
@given(data=st.data(), value=HOSTILE)
def test_a_real_flight_recorder_dump_damaged_anywhere_is_a_trace_or_one_line(recordings, tmp_path_factory,
                                                                               data, value):
    source = recordings.recording("ddp").directory
    dump = pickle.loads(sorted(source.iterdir())[0].read_bytes())
    path = data.draw(st.sampled_from(json_paths(dump)))
    folder = damaged_copy(source, tmp_path_factory.mktemp("dump"),
                          lambda _: pickle.dumps(replaced(dump, path, value), protocol=2))
    one_line(replay_reads, folder)


@pytest.mark.processes
@FAST
@given(data=st.data(), value=HOSTILE)
def test_a_real_profiler_trace_damaged_anywhere_is_a_trace_or_one_line(recordings, tmp_path_factory, data,
                                                                        value):
    source = recordings.recording("pipeline").directory
    trace = json.loads(sorted(source.iterdir())[0].read_text())
    events = [path for path in json_paths(trace) if path[:1] == ("traceEvents",)]
    others = [path for path in json_paths(trace) if path[:1] != ("traceEvents",)]
    path = data.draw(st.sampled_from(events + others))
    folder = damaged_copy(source, tmp_path_factory.mktemp("trace"),
                          lambda _: json.dumps(replaced(trace, path, value)).encode())
    one_line(replay_reads, folder)


@pytest.mark.processes
@FAST
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=4),
       which=st.sampled_from(["ddp", "pipeline"]))
def test_a_real_recording_cut_or_with_bytes_changed_is_a_trace_or_one_line(recordings, tmp_path_factory, cut,
                                                                           flips, which):
    def damage(data: bytes) -> bytes:
        changed = bytearray(data[: max(1, int(len(data) * cut))] if cut < 1 else data)
        for where, byte in flips:
            changed[min(len(changed) - 1, int(where * len(changed)))] = byte
        return bytes(changed)

    one_line(replay_reads, damaged_copy(recordings.recording(which).directory,
                                        tmp_path_factory.mktemp("bytes"), damage))
