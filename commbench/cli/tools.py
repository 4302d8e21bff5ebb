"""`commbench env` (this host, as runs record it) and `commbench list` (what the backend supports here,
with the launch settings --backend, --device and --nproc as every measuring command declares them).
"""

from typing import Any

import click

from commbench.cli.commands import click_params, typed_values
from commbench.config.launch import LaunchConfig, resolve_backend_and_device
from commbench.config.options import build, check_options, declared


@click.command("env")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text, or the JSON record every run stores per host.")
def env_command(output_format: str) -> None:
    """This host's hardware and software, as every run records it; starts no process group."""
    from commbench.provenance.describe import print_env

    print_env(output_format)


LIST_OPTIONS = [item for item in declared(LaunchConfig) if item.name in ("backend", "device", "nproc")]


def _list(**values: Any) -> int:
    from commbench.running.launch import launch_list

    ctx = click.get_current_context()
    setup = build(LaunchConfig, typed_values(ctx, LIST_OPTIONS, values))
    check_options(setup)
    backend, device = resolve_backend_and_device(setup.backend, setup.device)
    # A short timeout: a probe that one rank refuses and another waits on must not stall the listing.
    # The ranks it spawns run this command line again.
    return launch_list(LaunchConfig(backend=backend, device=device, nproc=setup.nproc, timeout_s=30.0,
                                    argv=list(ctx.obj["argv"])))


list_command = click.Command(
    "list", callback=_list, params=click_params(LIST_OPTIONS),
    help="What the backend supports here: each collective, dtype, reduce op and mode, probed with tiny ops.")
