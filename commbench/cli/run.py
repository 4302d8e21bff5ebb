"""`commbench [run] OPTIONS` and `commbench sweep FILE.yaml`: the command line (or a sweep file with the
options typed on top) into resolved RunConfigs, launched with the sweep as the ranks' work. Their options
are RunConfig's declared fields and every launch setting (config/options.py).
"""

from dataclasses import replace
from typing import Any

import click

from commbench.cli.commands import click_params, filled, typed_values
from commbench.config.launch import SOAK, SWEEP
from commbench.config.options import offered
from commbench.config.sweep import RunConfig, resolve
from commbench.config.sweepfile import load_sweep
from commbench.core.shipped import shipped_names

RUN_HELP = "Benchmark collectives over a range of message sizes (the default command)."
SWEEP_HELP = """Run the benchmarks of a sweep file in one process group; options typed here override the file.

FILE.yaml is a sweep file, or the name of one commbench ships (configs/): {shipped}. Every benchmark's
rows go to one results.csv and results.json. The defaults shown below apply only to settings the file
leaves out.
"""


def sweep_commands(config: type[RunConfig] = RunConfig) -> tuple[click.Command, click.Command]:
    """The `run` and `sweep` commands of ``config`` (RunConfig, or a class adding options to it)."""
    options = offered(config, {SOAK, SWEEP})
    params = click_params(options)

    def launch_sweep(config_file: str | None, values: dict[str, Any]) -> int:
        ctx = click.get_current_context()
        configs = command_line_configs(config_file, typed_values(ctx, options, values), list(ctx.obj["argv"]),
                                       config)
        # torch comes in on the ranks: a usage error above, and a launcher that spawns, answer without it
        from commbench.running.launch import deferred, launch

        return launch(configs, work=deferred("commbench.running.runner", "run_benchmarks"))

    config_file = click.Option(["--config", "config_file"], default=None, metavar="FILE.yaml",
                               help="Run a sweep file (like `commbench sweep FILE.yaml`); options typed here "
                                    "override it.")
    run = click.Command("run", params=[config_file, *params], help=RUN_HELP,
                        callback=lambda config_file, **values: launch_sweep(config_file, values))
    sweep = click.Command("sweep", params=[click.Argument(["sweep_file"], metavar="FILE.yaml"), *params],
                          help=SWEEP_HELP.format(shipped=", ".join(shipped_names()) or "none found"),
                          callback=lambda sweep_file, **values: launch_sweep(sweep_file, values))
    return run, sweep


def command_line_configs(config_file: str | None, typed: dict[str, Any], argv: list[str],
                         config: type[RunConfig] = RunConfig) -> list[RunConfig]:
    """The resolved benchmarks of a command line: the fields the user typed (``typed``) over the
    declared defaults, or a sweep file with them on top. UsageError on any problem, before anything
    starts."""
    if config_file is None:
        return [resolve(filled(config, typed, argv))]
    configs = load_sweep(config_file, overrides=typed, config=config)
    return [replace(benchmark, launch=replace(benchmark.launch, argv=argv)) for benchmark in configs]


run, sweep = sweep_commands()
