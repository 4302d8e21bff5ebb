"""The command line. `commbench [run] OPTIONS` benchmarks; other commands work on saved results.

Every option has a full long name that is not a prefix of one of torchrun's options, so options written
after `torchrun ... -m commbench` reach commbench (the one exception is --nproc, which only means
something without a launcher; under torchrun use torchrun's --nproc-per-node).
"""

import sys

import click

from commbench import __version__
from commbench.collectives import PLACEMENTS, REGISTRY
from commbench.config import MODES, REDUCE_OPS, RunConfig, parse_list, parse_placements, resolve
from commbench.dtypes import known_dtypes
from commbench.errors import AlreadyReported, RunError, Terminated, UsageError
from commbench.sizes import parse_size, parse_sizes

DEFAULTS = RunConfig()


class DefaultGroup(click.Group):
    """A group whose first argument, when it is not a command name, starts the default `run`."""

    default_command = "run"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["--help", "-h"]})
@click.version_option(__version__, "--version", prog_name="commbench")
def cli() -> None:
    """Collective-communication benchmark for PyTorch distributed.

    Without a command, runs a benchmark (the `run` command): `commbench --collective all_reduce`.
    """


@cli.command()
@click.option("--collective", default=",".join(DEFAULTS.collectives), show_default=True,
              help="Comma list of collectives, or 'all' (see `commbench list`).")
@click.option("--sizes", default="1K:16M", show_default=True,
              help="Sizes in bytes: 1K:1G (doubling), 1K:1G:x4, 1M:64M:+8M, 1K,3K,1M or 4096. "
                   "K/M/G are powers of 1024.")
@click.option("--dtype", default=",".join(DEFAULTS.dtypes), show_default=True, help="Comma list of dtypes.")
@click.option("--mode", default="sync", show_default=True, help="sync, async or both.")
@click.option("--op", default="sum", show_default=True,
              help=f"Reduce ops for reducing collectives, comma list of {', '.join(REDUCE_OPS)}.")
@click.option("--placement", default=None,
              help="out-of-place, in-place or both, for all_reduce, reduce_scatter_base and all_gather_base "
                   "[default: all_reduce in place, the others out of place].")
@click.option("--check", is_flag=True,
              help="After timing each size, run one op on known values and count wrong elements.")
@click.option("--check-every", type=int, default=DEFAULTS.check_every, show_default=True,
              help="Also check after every N timed iterations (implies --check; 0: once per size).")
@click.option("--splits", default=DEFAULTS.splits, show_default=True,
              help="v-collectives: spread:F (0..1) or a CSV/YAML file of a world x world byte matrix.")
@click.option("--p2p-window", type=int, default=DEFAULTS.p2p_window, show_default=True,
              help="Messages in flight per op for p2p_uni and p2p_bidir.")
@click.option("--premul-factor", type=float, default=DEFAULTS.premul_factor, show_default=True,
              help="The factor of --op premul_sum (NCCL only).")
@click.option("--warmup", type=int, default=DEFAULTS.warmup, show_default=True, help="Untimed ops per size.")
@click.option("--iters", type=int, default=None,
              help="Timed ops per size and mode; turns adaptive iteration counts off [default: adaptive].")
@click.option("--time-per-size", type=float, default=DEFAULTS.time_per_size, show_default=True,
              help="Adaptive: seconds of timed ops per size and mode.")
@click.option("--min-iters", type=int, default=DEFAULTS.min_iters, show_default=True,
              help="Adaptive: fewest timed ops per size.")
@click.option("--max-iters", type=int, default=DEFAULTS.max_iters, show_default=True,
              help="Adaptive: most timed ops per size.")
@click.option("--precision", type=float, default=DEFAULTS.precision, show_default=True,
              help="Adaptive: stop once the median is known to +- this fraction (95% confidence).")
@click.option("--barrier", type=click.Choice(["none", "per-iter"]), default=DEFAULTS.barrier,
              show_default=True, help="Sync mode: a barrier before every timed op (outside its time).")
@click.option("--cuda-graph", type=int, default=DEFAULTS.cuda_graph, show_default=True,
              help="CUDA + NCCL only: capture --iters ops (default 20) in a CUDA graph, replay N times.")
@click.option("--max-memory", default=None,
              help="Refuse, before allocating, sizes whose buffers need more than this per rank (e.g. 8G).")
@click.option("--root", type=int, default=DEFAULTS.root, show_default=True,
              help="Root rank of broadcast, reduce, gather and scatter.")
@click.option("--backend", default=None, help="gloo, nccl, mpi or ucc [default: nccl with CUDA, else gloo].")
@click.option("--device", default=None, help="cpu or cuda [default: cuda for nccl/ucc, else cpu].")
@click.option("--nproc", type=int, default=DEFAULTS.nproc, show_default=True,
              help="Local ranks to spawn when no launcher (torchrun, mpirun, srun) started commbench.")
@click.option("--timeout", "timeout_s", type=float, default=DEFAULTS.timeout_s, show_default=True,
              help="Seconds allowed for process-group start and for each collective.")
@click.option("--output-dir", default=DEFAULTS.output_dir, show_default=True,
              help="Each run writes DIR/<run-id>/results.csv and results.json.")
@click.option("--csv", "csv_path", default=None, help="Write the CSV exactly here instead.")
@click.option("--json", "json_path", default=None, help="Write the JSON exactly here instead.")
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
              default=DEFAULTS.skew_threshold_percent, show_default=True,
              help="Name the slowest rank when a rank's arrival skew exceeds this percentage of the "
                   "p50 time.")
@click.pass_context
def run(ctx: click.Context, collective: str, sizes: str, dtype: str, mode: str, op: str,
        max_memory: str | None, placement: str | None, **options) -> int:
    """Benchmark collectives over a range of message sizes (the default command)."""
    from commbench.launch import launch

    config = RunConfig(
        collectives=parse_list(collective),
        sizes=parse_sizes(sizes),
        dtypes=parse_list(dtype),
        modes=parse_list(mode),
        ops=parse_list(op),
        max_memory=None if max_memory is None else parse_size(max_memory),
        placements=parse_placements(placement) if placement is not None else [],
        argv=list(ctx.obj["argv"]),
        **options,
    )
    return launch(resolve(config))


@cli.group(invoke_without_command=True)
@click.pass_context
def pattern(ctx: click.Context) -> int:
    """Workload patterns: the collectives of a training step, as a training stack issues them."""
    if ctx.invoked_subcommand is None:  # `commbench pattern` alone lists the patterns
        click.echo(ctx.get_help())
    return 0


@pattern.command("fsdp")
@click.option("--model", "model", default="gpt2-small", show_default=True,
              help="A preset (configs/models: gpt2-small, llama-7b, tiny) or a YAML file of units and "
                   "parameter shapes.")
@click.option("--layers", type=int, default=None,
              help="Keep only the model's first N layer units (cuts a big model down for CPU).")
@click.option("--bucket-mb", "buckets", default="unit", show_default=True,
              help="Comma list of reduce-scatter bucketings: 'unit' (one per FSDP unit) or a bucket size in "
                   "MiB (0: one reduce-scatter per parameter), e.g. unit,0,1,5,25,100.")
@click.option("--predivide", type=float, default=None,
              help="Divide gradients by this before the reduce-scatter [default: FSDP's split of the world "
                   "size near its square root].")
@click.option("--postdivide", type=float, default=None,
              help="Divide reduced gradients by this [default: world size / predivide].")
@click.option("--fallback", type=click.Choice(["none", "list"]), default="none", show_default=True,
              help="'list': list reduce_scatter and all_gather over views instead of the flat APIs.")
@click.option("--reshard/--no-reshard", default=True, show_default=True,
              help="Re-gather each unit's parameters in the backward pass (FSDP's FULL_SHARD).")
@click.option("--overlap", is_flag=True,
              help="Also time the step with a matmul per unit and pass while collectives are in flight.")
@click.option("--compute-size", default="auto", show_default=True,
              help="The --overlap matmul's size N (N x N), or auto: as long as the communication.")
@click.option("--check", is_flag=True,
              help="Verify gathered parameters and reduced gradients, bucketed against unbucketed.")
@click.option("--dtype", default="float32", show_default=True,
              help="Parameter and gradient dtype: float32, bfloat16, float16 or float64.")
@click.option("--warmup", type=int, default=0, show_default=True, help="Untimed steps per bucketing.")
@click.option("--iters", type=int, default=3, show_default=True, help="Timed steps per bucketing.")
@click.option("--backend", default=None, help="gloo, nccl, mpi or ucc [default: nccl with CUDA, else gloo].")
@click.option("--device", default=None, help="cpu or cuda [default: cuda for nccl/ucc, else cpu].")
@click.option("--nproc", type=int, default=DEFAULTS.nproc, show_default=True,
              help="Local ranks to spawn when no launcher (torchrun, mpirun, srun) started commbench.")
@click.option("--timeout", "timeout_s", type=float, default=DEFAULTS.timeout_s, show_default=True,
              help="Seconds allowed for process-group start and for each collective.")
@click.option("--output-dir", default=DEFAULTS.output_dir, show_default=True,
              help="Each run writes DIR/<run-id>/results.csv and results.json.")
@click.option("--csv", "csv_path", default=None, help="Write the CSV exactly here instead.")
@click.option("--json", "json_path", default=None, help="Write the JSON exactly here instead.")
@click.option("--quiet", is_flag=True, help="Print nothing but errors; files are still written.")
@click.pass_context
def fsdp(ctx: click.Context, buckets: str, **options) -> int:
    """One FSDP training step per unit of a model: all-gathers, padded and divided reduce-scatters,
    bucketing, and (--overlap) their overlap with compute."""
    from commbench.launch import launch
    from commbench.patterns.fsdp import FsdpConfig, resolve_fsdp, run_fsdp

    config = FsdpConfig(buckets=parse_list(buckets) or [buckets], argv=list(ctx.obj["argv"]), **options)
    return launch(resolve_fsdp(config), work=run_fsdp)


@cli.command("list")
def list_command() -> None:
    """The collectives, dtypes, reduce ops and modes commbench knows."""
    click.echo("collectives (busbw factor at n ranks; placements, the default first):")
    for collective in REGISTRY.values():
        factor = ", ".join(f"n={n}: {collective.busbw_factor(n):.3g}" for n in (2, 4, 8))
        placements = ", ".join(p for p in collective.placements if p) or "-"
        modes = "" if len(collective.modes) > 1 else f"; {collective.modes[0]} only"
        click.echo(f"  {collective.name:<20} {collective.summary}  [{factor}; {placements}{modes}]")
    click.echo(f"dtypes: {', '.join(known_dtypes())}")
    click.echo(f"reduce ops: {', '.join(REDUCE_OPS)}")
    click.echo(f"modes: {', '.join(MODES)}, both")
    click.echo(f"placements: {', '.join(PLACEMENTS)}, both")


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
