"""The options the measuring commands share: where the ranks come from and where rows go (every
measuring command), and the soak's (the sweep and fabric).

Every option has a full long name that is not a prefix of one of torchrun's options, so options written
after `torchrun ... -m commbench` reach commbench (the one exception is --nproc, which only means
something without a launcher; under torchrun use torchrun's --nproc-per-node).
"""

from collections.abc import Callable
from typing import Any

import click

from commbench.config.sweep import RunConfig, flat_fields

DEFAULTS = flat_fields(RunConfig())

# torchrun's options a user may type after `-m commbench` by mistake: they must come before it.
TORCHRUN_OPTIONS = {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank",
                    "--standalone", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
                    "--rdzv-id", "--rdzv_id", "--master-addr", "--master_addr", "--master-port",
                    "--master_port", "--max-restarts", "--max_restarts"}


def launcher_option_text(option: str) -> str:
    """Why ``option`` (one of torchrun's) is not commbench's, whoever launched it: a hint to give it
    before -m commbench is right under torchrun, where a hint of --nproc would not be (torchrun takes
    --nproc as an ambiguous prefix of its own options)."""
    spawning = " (without a launcher, commbench spawns --nproc local ranks)" if "nproc" in option else ""
    return (f"{option} is torchrun's option, not commbench's: give it before -m commbench, as in "
            f"`torchrun {option} ... -m commbench ...`{spawning}")


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
