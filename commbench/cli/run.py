"""`commbench [run] OPTIONS` and `commbench sweep FILE.yaml`: the command line (or a sweep file with the
options typed on top) into resolved RunConfigs, launched with the sweep as the ranks' work.
"""

from dataclasses import replace
from typing import Any

import click
from click.core import ParameterSource

from commbench.cli.options import DEFAULTS, launch_options, soak_options
from commbench.config.launch import LAUNCH_FIELDS, OUTPUT_FORMATS
from commbench.config.sweep import (
    DEFAULT_SIZES,
    REDUCE_OPS,
    RUN_FIELDS,
    SCALAR_TEXT_PARSERS,
    RunConfig,
    is_list_field,
    list_field_from_text,
    resolve,
    run_config,
)
from commbench.config.sweepfile import load_sweep


@click.command()
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
              help="Untimed ops per size (adaptive counts: at most this many, until op times stop falling, "
                   "within 1/5 of --time-per-size).")
@click.option("--iters", type=int, default=None,
              help="Timed ops per size and mode; turns adaptive iteration counts off [default: adaptive].")
@click.option("--time-per-size", type=float, default=DEFAULTS["time_per_size"], show_default=True,
              help="Adaptive: seconds of timed ops per size and mode.")
@click.option("--min-iters", type=int, default=DEFAULTS["min_iters"], show_default=True,
              help="Adaptive: fewest timed ops per size (6 at least, for the 95% interval).")
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
@click.option("--impl", default=",".join(DEFAULTS["impls"]), show_default=True,
              help="Comma list of implementations to run each collective by, or 'all' (c10d, nccl-ubr, "
                   "nccl-symm, symm-one-shot, ...; docs/implementations.md); one that cannot run here "
                   "is a row saying why.")
@click.option("--profile-kernels", is_flag=True,
              help="Record what one op per size ran (torch's profiler: kernel names on CUDA) and judge "
                   "whether each implementation ran on its own path.")
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


@click.command("sweep", params=[click.Argument(["sweep_file"], metavar="FILE.yaml"),
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
    flags = {param.name: param.opts[0] for param in command.params}
    found = {}
    for name, value in values.items():
        field_name = by_param.get(name)
        if field_name is None:
            continue
        if isinstance(value, str) and is_list_field(field_name):
            value = list_field_from_text(field_name, value, flags.get(name, ""))
        elif isinstance(value, str) and field_name in SCALAR_TEXT_PARSERS:
            value = SCALAR_TEXT_PARSERS[field_name](value)
        found[field_name] = value
    return found


def _launch(ctx: click.Context, config_file: str | None, options: dict[str, Any]) -> int:
    typed = {name for name in options
             if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}
    configs = command_line_configs(ctx.command, config_file, options, typed, list(ctx.obj["argv"]))
    # torch comes in on the ranks: a usage error above, and a launcher that spawns, answer without it
    from commbench.running.launch import deferred, launch

    return launch(configs, work=deferred("commbench.running.runner", "run_benchmarks"))


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
