"""The `commbench fabric` command line: its options, and the FabricConfig they make.

commbench.cli builds the command with the launch options every measuring command shares
(``fabric_command(launch_options)``), so the launch settings are spelled and nested as everywhere else
and this module needs nothing of the CLI module. Every option has a full long name that no torchrun
option starts with. Importing this module does not import torch.
"""

import os
from collections.abc import Callable, Mapping
from typing import Any

import click

from commbench.config.launch import LAUNCH_FIELDS, LaunchConfig
from commbench.core.sizes import parse_size
from commbench.errors import UsageError
from commbench.fabric.config import FabricConfig, Outcome, available_host_bytes, memory_problem

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def fabric_command(launch_options: Decorator, soak_options: Decorator) -> click.Command:
    """The `fabric` command, its own options first, then ``soak_options`` and ``launch_options``."""

    @click.command("fabric")
    @click.option("--size", default="64M", show_default=True, help="Bytes per message of the bandwidth test.")
    @click.option("--latency-size", default="8", show_default=True,
                  help="Bytes per message of the ping-pong.")
    @click.option("--iters", type=int, default=10, show_default=True,
                  help="Timed messages per pair and direction.")
    @click.option("--warmup", type=int, default=2, show_default=True, help="Untimed messages before them.")
    @click.option("--serial", is_flag=True,
                  help="Measure one pair at a time instead of a round's pairs at once.")
    @click.option("--sample", type=int, default=None, metavar="K",
                  help="Pair each rank with K peers (K rounds, covering every host) instead of every rank.")
    @click.option("--slow-factor", type=float, default=2.0, show_default=True,
                  help="A pair is an outlier only when this many times off its class's median.")
    @click.option("--fail-on-outlier", is_flag=True, help="Exit 1 when a host, rank or link is named.")
    @soak_options
    @launch_options
    @click.option("--quiet", is_flag=True, help="Print nothing but errors; files are still written.")
    @click.pass_context
    def fabric(ctx: click.Context, size: str, latency_size: str, duration_s: str | None,
               **options: Any) -> int:
        """Every pair of ranks both ways (bandwidth and latency), host by host: the slow GPU, link or node."""
        from commbench.core.sizes import parse_duration
        from commbench.fabric.config import resolve_fabric

        launch_values = {name: options.pop(name) for name in LAUNCH_FIELDS if name in options}
        duration = None if duration_s is None else parse_duration(duration_s)
        setup = LaunchConfig(**launch_values, duration_s=duration, argv=list(ctx.obj["argv"]))
        config = FabricConfig(launch=setup, size=parse_size(size), latency_size=parse_size(latency_size),
                              **options)
        return launch_fabric(resolve_fabric(config))

    return fabric


def launch_fabric(config: FabricConfig, environ: Mapping[str, str] | None = None) -> int:
    """The launch glue, the one place fabric meets commbench.running.launch: refuse buffers that cannot fit
    before spawning local ranks (launch checks the world), run run_fabric on the ranks (spawned, or
    this one of a launched job), and exit 1 when --fail-on-outlier is set and the ranks named suspects."""
    from commbench.running.launch import deferred, launch
    from commbench.running.launcher import detect

    environ = os.environ if environ is None else environ
    setup = config.launch
    if detect(environ, setup.backend) is None and setup.device == "cpu":
        problem = memory_problem(config, setup.nproc, available_host_bytes())  # they share this host
        if problem is not None:
            raise UsageError(problem)
    outcome = Outcome()
    work = deferred("commbench.fabric.run", "run_fabric", outcome=outcome)
    status = launch([config], work, environ)
    return 1 if status == 0 and config.fail_on_outlier and outcome.suspects else status
