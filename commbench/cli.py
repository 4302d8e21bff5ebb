"""The command line. `commbench [run] OPTIONS` and `commbench sweep FILE.yaml` benchmark; compare, plot
and report read saved results.json files; list probes what the backend supports.

Every option has a full long name that is not a prefix of one of torchrun's options, so options written
after `torchrun ... -m commbench` reach commbench (the one exception is --nproc, which only means
something without a launcher; under torchrun use torchrun's --nproc-per-node).
"""

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click
from click.core import ParameterSource

from commbench import __version__
from commbench.config import (
    DEFAULT_SIZES,
    LAUNCH_FIELDS,
    OUTPUT_FORMATS,
    REDUCE_OPS,
    RUN_FIELDS,
    SCALAR_TEXT_PARSERS,
    LaunchConfig,
    RunConfig,
    flat_fields,
    is_list_field,
    list_field_from_text,
    parse_list,
    resolve,
    resolve_backend_and_device,
    run_config,
)
from commbench.errors import AlreadyReported, RunError, Terminated, UsageError
from commbench.fabric.command import fabric_command
from commbench.patterns.commands import pattern_group
from commbench.sweepfile import load_sweep

DEFAULTS = flat_fields(RunConfig())


class DefaultGroup(click.Group):
    """A group whose first argument, when it is not a command name, starts the default `run`."""

    default_command = "run"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def launch_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options every measuring command shares: where the ranks come from and where rows go."""
    options = [
        click.option("--backend", default=None,
                     help="gloo, nccl, mpi or ucc [default: nccl with CUDA, else gloo]."),
        click.option("--device", default=None, help="cpu or cuda [default: cuda for nccl/ucc, else cpu]."),
        click.option("--nproc", type=int, default=DEFAULTS["nproc"], show_default=True,
                     help="Local ranks to spawn when no launcher (torchrun, mpirun, srun) started "
                          "commbench."),
        click.option("--timeout", "timeout_s", type=float, default=DEFAULTS["timeout_s"], show_default=True,
                     help="Seconds allowed for process-group start, each collective and each size's "
                          "check-in."),
        click.option("--output-dir", default=DEFAULTS["output_dir"], show_default=True,
                     help="Each run writes DIR/<run-id>/results.csv and results.json."),
        click.option("--csv", "csv_path", default=None, help="Write the CSV exactly here instead."),
        click.option("--json", "json_path", default=None, help="Write the JSON exactly here instead."),
    ]
    for option in reversed(options):  # decorators apply bottom-up: keep the listed order in --help
        command = option(command)
    return command


def soak_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--duration and --repeat: repeat the whole run (a soak), every row stamped with its pass and time."""
    command = click.option("--repeat", "passes", type=int, default=None, metavar="N",
                           help="Soak: run N times (with --duration: at most N times).")(command)
    return click.option("--duration", "duration_s", default=None, metavar="TIME",
                        help="Soak: repeat the run until this much time (90s, 10m, 1h30m) has passed; drift "
                             "and spikes are reported.")(command)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["--help", "-h"]})
@click.version_option(__version__, "--version", prog_name="commbench")
def cli() -> None:
    """Collective-communication benchmark for PyTorch distributed.

    Without a command, runs a benchmark (the `run` command): `commbench --collective all_reduce`.
    """


@cli.command()
@click.option("--config", "config_file", default=None, metavar="FILE.yaml",
              help="Run a sweep file (like `commbench sweep FILE.yaml`); options typed here override it.")
@click.option("--collective", default=",".join(DEFAULTS["collectives"]), show_default=True,
              help="Comma list of collectives, or 'all' (see `commbench list`).")
@click.option("--sizes", default=DEFAULT_SIZES, show_default=True,
              help="Sizes in bytes: 1K:1G (doubling), 1K:1G:x4, 1M:64M:+8M, 1K,3K,1M or 4096. "
                   "K/M/G are powers of 1024.")
@click.option("--dtype", default=",".join(DEFAULTS["dtypes"]), show_default=True,
              help="Comma list of dtypes.")
@click.option("--mode", default="sync", show_default=True, help="sync, async or both.")
@click.option("--op", default="sum", show_default=True,
              help=f"Reduce ops for reducing collectives, comma list of {', '.join(REDUCE_OPS)}.")
@click.option("--warmup", type=int, default=DEFAULTS["warmup"], show_default=True,
              help="Untimed ops per size (adaptive counts: fewer if they would take 1/5 of --time-per-size).")
@click.option("--iters", type=int, default=None,
              help="Timed ops per size and mode; turns adaptive iteration counts off [default: adaptive].")
@click.option("--time-per-size", type=float, default=DEFAULTS["time_per_size"], show_default=True,
              help="Adaptive: seconds of timed ops per size and mode.")
@click.option("--min-iters", type=int, default=DEFAULTS["min_iters"], show_default=True,
              help="Adaptive: fewest timed ops per size.")
@click.option("--max-iters", type=int, default=DEFAULTS["max_iters"], show_default=True,
              help="Adaptive: most timed ops per size.")
@click.option("--precision", type=float, default=DEFAULTS["precision"], show_default=True,
              help="Adaptive: stop once the median is known to +- this fraction (95% confidence).")
@click.option("--barrier", type=click.Choice(["none", "per-iter"]), default=DEFAULTS["barrier"],
              show_default=True, help="Sync mode: a barrier before every timed op (outside its time).")
@click.option("--cuda-graph", type=int, default=DEFAULTS["cuda_graph"], show_default=True,
              help="CUDA + NCCL, sync mode only: capture --iters ops (default 20) in a CUDA graph, replay "
                   "N times.")
@click.option("--max-memory", default=None,
              help="Refuse, before allocating, sizes whose buffers and torch's temporaries need more than "
                   "this per rank (e.g. 8G) [default: 90% of the free device or available host memory].")
@click.option("--root", type=int, default=DEFAULTS["root"], show_default=True,
              help="Root rank of broadcast, reduce, gather and scatter.")
@soak_options
@launch_options
@click.option("--format", "output_format", default=DEFAULTS["output_format"], show_default=True,
              help=f"Console output: {', '.join(OUTPUT_FORMATS)} (nccl-tests' columns; JSON lines "
                   "on stdout).")
@click.option("--quiet", is_flag=True, help="Print nothing but errors; files are still written.")
@click.option("--group-size", type=int, default=None,
              help="Split the world into groups of this many ranks that run each collective at once "
                   "(bandwidth is per group).")
@click.option("--group-layout", default=None,
              help="contiguous (ranks 0..K-1, K..2K-1, ...) or strided (r, r+G, r+2G, ... for G groups) "
                   "[default: contiguous].")
@click.option("--groups", "groups", default=None,
              help="Groups from the ranks' hosts: intra-node (the ranks of each host) or inter-node "
                   "(one rank per host).")
@click.option("--per-rank", is_flag=True, help="Print each rank's mean time and arrival skew per size.")
@click.option("--skew-threshold", "skew_threshold_percent", type=float,
              default=DEFAULTS["skew_threshold_percent"], show_default=True,
              help="Name the slowest rank when a rank's arrival skew exceeds this percentage of the "
                   "p50 time.")
@click.option("--placement", default=None,
              help="out-of-place, in-place or both, for all_reduce, reduce_scatter_base and all_gather_base "
                   "[default: all_reduce in place, the others out of place].")
@click.option("--check", is_flag=True,
              help="After timing each size, run one op on known values and count wrong elements.")
@click.option("--check-every", type=int, default=DEFAULTS["check_every"], show_default=True,
              help="Also check after every N timed ops (implies --check; 0: once per size).")
@click.option("--splits", default=DEFAULTS["splits"], show_default=True,
              help="v-collectives: spread:F (0..1) or a CSV/YAML file of a world x world byte matrix.")
@click.option("--p2p-window", type=int, default=DEFAULTS["p2p_window"], show_default=True,
              help="Messages in flight per op for p2p_uni and p2p_bidir.")
@click.option("--premul-factor", type=float, default=DEFAULTS["premul_factor"], show_default=True,
              help="The factor of --op premul_sum (NCCL only).")
@click.option("--nccl-debug", is_flag=True,
              help="Run with NCCL's INFO log (INIT, TUNING, COLL) in per-rank files beside the results; rows "
                   "get NCCL's algorithm, protocol, channels and transport.")
@click.option("--expect", default=None, metavar="FILE|NAME",
              help="Judge each row PASS, WARN or FAIL against a baseline: a YAML file or a name from "
                   "configs/baselines.yaml (docs/provenance.md).")
@click.option("--fail-below", type=float, default=None, metavar="PCT",
              help="Exit 1 when a row's busbw is below PCT percent of its --expect busbw, or without "
                   "--expect of its link peak.")
@click.pass_context
def run(ctx: click.Context, config_file: str | None, **options: Any) -> int:
    """Benchmark collectives over a range of message sizes (the default command)."""
    return _launch(ctx, config_file, options)


@cli.command("sweep", params=[click.Argument(["sweep_file"], metavar="FILE.yaml"),
                              *[param for param in run.params if param.name != "config_file"]])
@click.pass_context
def sweep(ctx: click.Context, sweep_file: str, **options: Any) -> int:
    """Run the benchmarks of a sweep file in one process group; options typed here override the file.

    Every benchmark's rows go to one results.csv and results.json. The defaults shown below apply only
    to settings the file leaves out. See configs/ for examples.
    """
    return _launch(ctx, sweep_file, options)


def option_fields(command: click.Command) -> dict[str, str]:
    """Each option's parameter name -> the configuration field it sets (`collective` -> `collectives`)."""
    known = {*RUN_FIELDS, *LAUNCH_FIELDS}
    found = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.name:
            for name in (param.name, param.name + "s"):
                if name in known:
                    found[param.name] = name
                    break
    return found


def sweep_file_aliases(command: click.Command) -> dict[str, str]:
    """The command line's spellings as sweep-file keys: `collective`, `timeout`, `output-dir`, ..."""
    by_param = option_fields(command)
    return {opt[2:]: by_param[param.name] for param in command.params if param.name in by_param
            for opt in param.opts if opt.startswith("--")}


def fields_from_options(values: dict[str, Any], command: click.Command) -> dict[str, Any]:
    """Configuration fields from the options' values: list fields are parsed from their text form."""
    by_param = option_fields(command)
    found = {}
    for name, value in values.items():
        field_name = by_param.get(name)
        if field_name is None:
            continue
        if isinstance(value, str) and is_list_field(field_name):
            value = list_field_from_text(field_name, value)
        elif isinstance(value, str) and field_name in SCALAR_TEXT_PARSERS:
            value = SCALAR_TEXT_PARSERS[field_name](value)
        found[field_name] = value
    return found


def _launch(ctx: click.Context, config_file: str | None, options: dict[str, Any]) -> int:
    typed = {name for name in options
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}
    configs = command_line_configs(ctx.command, config_file, options, typed, list(ctx.obj["argv"]))
    # torch comes in on the ranks: a usage error above, and a launcher that spawns, answer without it
    from commbench.launch import deferred, launch

    return launch(configs, work=deferred("commbench.runner", "run_benchmarks"))


def command_line_configs(command: click.Command, config_file: str | None, options: dict[str, Any],
                         typed: set[str], argv: list[str]) -> list[RunConfig]:
    """The resolved benchmarks of a command line: its options, or a sweep file with the options the
    user typed (``typed``) on top. UsageError on any problem, before anything starts."""
    values = fields_from_options(options, command)
    if config_file is None:
        return [resolve(run_config(**values, argv=argv))]
    overrides = fields_from_options({name: options[name] for name in typed}, command)
    configs = load_sweep(config_file, base=values, overrides=overrides, aliases=sweep_file_aliases(command))
    return [replace(config, launch=replace(config.launch, argv=argv)) for config in configs]


# --- reading saved results ----------------------------------------------------------------------

@cli.command()
@click.argument("files", nargs=-1, required=True, metavar="BASE.json NEW.json [MORE.json ...]")
@click.option("--fail-above", type=float, default=None, metavar="PCT",
              help="Exit 1 when a significant slowdown exceeds PCT percent (a CI regression gate).")
@click.option("--significance-level", type=float, default=0.05, show_default=True,
              help="p-value below which a difference counts as significant (Mann-Whitney U test).")
@click.option("--markdown", is_flag=True, help="Print Markdown tables instead of console tables.")
def compare(files: tuple[str, ...], fail_above: float | None, significance_level: float,
            markdown: bool) -> int:
    """Compare saved runs row by row: each later file against the first."""
    from commbench.compare import compare_command

    return compare_command(list(files), fail_above, significance_level, markdown)


@cli.command()
@click.argument("files", nargs=-1, required=True, metavar="RUN.json [RUN2.json ...]")
@click.option("--output", "-o", "output_path", default="commbench.png", show_default=True,
              help="The image to write (.png, .svg or .pdf).")
@click.option("--collective", default=None, help="Plot only these collectives (comma list).")
def plot(files: tuple[str, ...], output_path: str, collective: str | None) -> None:
    """Plot busbw and latency against size for saved runs."""
    from commbench.plot import plot_command

    plot_command(list(files), output_path, None if collective is None else parse_list(collective))


@cli.command()
@click.argument("files", nargs=-1, required=True, metavar="RUN.json [RUN2.json ...]")
@click.option("--output", "-o", "output_path", default="report.html", show_default=True,
              help="The HTML page to write.")
def report(files: tuple[str, ...], output_path: str) -> None:
    """Write one self-contained HTML page: metadata, plots, tables, α-β fits and a comparison."""
    from commbench.report import report_command

    report_command(list(files), output_path)


# The pattern commands (fsdp, tp, moe, pp, 3d) live beside the patterns, fabric's in fabric/command.py;
# they share the launch options.
cli.add_command(pattern_group(launch_options))
cli.add_command(fabric_command(launch_options, soak_options))


@cli.command("env")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text, or the JSON record every run stores per host.")
def env_command(output_format: str) -> None:
    """This host's hardware and software, as every run records it; starts no process group."""
    from commbench.provenance.describe import print_env

    print_env(output_format)


@cli.command("replay")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE...")
@click.option("--select", default="all", show_default=True, help="all, seq:A-B or last:N (docs/replay.md).")
@click.option("--warmup", type=int, default=1, show_default=True, help="Untimed passes.")
@click.option("--iters", type=int, default=5, show_default=True, help="Timed passes.")
@click.option("--keep-gaps", is_flag=True, help="Keep each operation's recorded offset within a pass.")
@click.option("--check", is_flag=True, help="One more pass with known values; count wrong elements.")
@click.option("--record", metavar="PREFIX", help="One more pass, recorded as the input was, to PREFIX<rank>.")
@launch_options
@click.option("--quiet", is_flag=True, help="Print nothing but errors; files are still written.")
@click.pass_context
def replay(ctx: click.Context, traces: tuple[str, ...], **options: Any) -> int:
    """Replay and time a job's communication from torch's Flight Recorder dumps or profiler traces
    (one per rank); without a launcher or --nproc, as many ranks as recorded. See docs/replay.md."""
    from commbench.replay.command import ReplayConfig, launch_replay, resolve_replay

    launch_values = {name: options.pop(name) for name in LAUNCH_FIELDS if name in options}
    if ctx.get_parameter_source("nproc") != ParameterSource.COMMANDLINE:
        launch_values["nproc"] = 0  # as many ranks as the recording has
    setup = LaunchConfig(**launch_values, argv=list(ctx.obj["argv"]))
    return launch_replay(resolve_replay(ReplayConfig(launch=setup, traces=list(traces), **options)))


@cli.command("list")
@click.option("--backend", default=None, help="gloo, nccl, mpi or ucc [default: nccl with CUDA, else gloo].")
@click.option("--device", default=None, help="cpu or cuda [default: cuda for nccl/ucc, else cpu].")
@click.option("--nproc", type=int, default=2, show_default=True,
              help="Local ranks to probe with when no launcher started commbench.")
@click.pass_context
def list_command(ctx: click.Context, backend: str | None, device: str | None, nproc: int) -> int:
    """What the backend supports here: each collective, dtype, reduce op and mode, probed with tiny ops."""
    from commbench.launch import launch_list

    if nproc < 1:
        raise UsageError(f"--nproc {nproc} must be at least 1")
    backend, device = resolve_backend_and_device(backend, device)
    # A short timeout: a probe that one rank refuses and another waits on must not stall the listing.
    return launch_list(LaunchConfig(backend=backend, device=device, nproc=nproc, timeout_s=30.0,
                                    argv=list(ctx.obj["argv"])))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit status (0 ok, 1 failed run, 2 bad input, 128+N on signal N)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        result = cli.main(args=args, prog_name="commbench", standalone_mode=False, obj={"argv": args})
    except click.ClickException as exc:
        print(f"commbench: error: {_one_line(exc.format_message())}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"commbench: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except RunError as exc:
        print(f"commbench: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except (Terminated, AlreadyReported) as exc:
        return exc.exit_code
    except (KeyboardInterrupt, click.Abort):
        return 130
    return result if isinstance(result, int) else 0
