"""`commbench env` (this host, as runs record it), `commbench replay` (a recorded job's communication)
and `commbench list` (what the backend supports here).
"""

from typing import Any

import click
from click.core import ParameterSource

from commbench.cli.options import launch_options
from commbench.config.launch import LAUNCH_FIELDS, LaunchConfig, resolve_backend_and_device
from commbench.errors import UsageError


@click.command("env")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text, or the JSON record every run stores per host.")
def env_command(output_format: str) -> None:
    """This host's hardware and software, as every run records it; starts no process group."""
    from commbench.provenance.describe import print_env

    print_env(output_format)


@click.command("replay")
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


@click.command("list")
@click.option("--backend", default=None, help="gloo, nccl, mpi or ucc [default: nccl with CUDA, else gloo].")
@click.option("--device", default=None, help="cpu or cuda [default: cuda for nccl/ucc, else cpu].")
@click.option("--nproc", type=int, default=2, show_default=True,
              help="Local ranks to probe with when no launcher started commbench.")
@click.pass_context
def list_command(ctx: click.Context, backend: str | None, device: str | None, nproc: int) -> int:
    """What the backend supports here: each collective, dtype, reduce op and mode, probed with tiny ops."""
    from commbench.running.launch import launch_list

    if nproc < 1:
        raise UsageError(f"--nproc {nproc} must be at least 1")
    backend, device = resolve_backend_and_device(backend, device)
    # A short timeout: a probe that one rank refuses and another waits on must not stall the listing.
    return launch_list(LaunchConfig(backend=backend, device=device, nproc=nproc, timeout_s=30.0,
                                    argv=list(ctx.obj["argv"])))
