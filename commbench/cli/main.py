"""The command line's entry: the `commbench` group (`run` is the default command), its commands, and
``main``, which maps errors to exit statuses: 0 ok, 1 a failed run, 2 bad input, 128 + N on signal N.

This module composes the application: it imports each feature's registration (fabric, the patterns,
replay, diagnose: running/features.py), which registers its result kinds too (how its rows show;
results/kinds.py), and adds a command for each registered feature beside the sweep's and the tools', so
the console, plot, report and compare find every kind without importing a feature.
"""

import os
import re
import sys
import time

import click

import commbench.diagnose.command  # noqa: F401 (registers `diagnose`)
import commbench.fabric.command  # noqa: F401 (registers `fabric`)
import commbench.patterns.command  # noqa: F401 (registers `pattern fsdp|tp|moe|pp|3d`)
import commbench.replay.command  # noqa: F401 (registers `replay`)
from commbench import __version__
from commbench.cli.commands import WholeHelpGroup, add_features
from commbench.cli.options import TORCHRUN_OPTIONS, launcher_option_text
from commbench.cli.run import run, sweep
from commbench.cli.saved import compare, explain, iterations, plot, report
from commbench.cli.tools import env_command, list_command
from commbench.diagnose.command import with_verdict
from commbench.errors import AlreadyReported, RunError, Terminated, UsageError, did_you_mean
from commbench.running.features import registered_features
from commbench.running.launcher import detect


class DefaultGroup(WholeHelpGroup):
    """A group whose first argument, when it is not a command name, starts the default `run`."""

    default_command = "run"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            # `run` takes options only: a first word that is no command is a command mistyped
            raise UsageError(f"no such command {args[0]!r}{did_you_mean(args[0], sorted(self.commands))}; "
                             f"the commands are {', '.join(sorted(self.commands))} (`commbench --help`)")
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands, then every option of the default command: `commbench --help` shows what
        `commbench --sizes ...` takes, not only where to look for it."""
        super().format_help(ctx, formatter)
        default = self.commands[self.default_command]
        run_ctx = click.Context(default, info_name=self.default_command, parent=ctx)
        records = [record for param in default.get_params(run_ctx)
                   if (record := param.get_help_record(run_ctx)) is not None]
        with formatter.section(f"Options of a benchmark run (commbench [OPTIONS], the {self.default_command} "
                               "command)"):
            formatter.write_dl(records)


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["--help", "-h"]})
@click.version_option(__version__, "--version", prog_name="commbench")
def cli() -> None:
    """Collective-communication benchmark for PyTorch distributed.

    Without a command, runs a benchmark (the `run` command): `commbench --collective all_reduce`.
    """


for command in (run, sweep, compare, plot, report, explain, iterations, env_command, list_command):
    cli.add_command(command)
add_features(cli, registered_features())


def _one_line(text: str) -> str:
    return " ".join(text.split())


def click_message(exc: click.ClickException) -> str:
    """click's message in commbench's style: lower case, no closing full stop, option names bare, one
    suggestion as our own hints give it ('no such option --sise (did you mean --sizes?)')."""
    if isinstance(exc, click.NoSuchOption):
        names = sorted(exc.possibilities or [])
        return f"no such option {exc.option_name}{did_you_mean(exc.option_name, names)}"
    text = _one_line(exc.format_message()).rstrip(".")
    text = re.sub(r"'(--?[\w-]+)'", r"\1", text)
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


# How long a rank other than 0 waits for its launcher to stop it after a command-line mistake, before
# saying the mistake itself (a launcher that leaves the others running once one exits, or a rank 0 that
# never started).
USAGE_ERROR_GRACE_S = 30.0


def _rank_behind_rank_0() -> bool:
    """Whether a launcher started this process as a rank other than 0."""
    try:
        info = detect(os.environ)
    except UsageError:
        return False
    return info is not None and info.rank != 0


def _say_usage_error(text: str) -> None:
    """A command-line mistake, said once. Every rank parses the same command line and rank 0 says it;
    the others wait instead of exiting at once, since a launcher (torchrun, mpirun, srun) stops every
    rank when one exits, and a rank that exited first could have rank 0 stopped before it spoke. Once
    rank 0 has said it and exited, the launcher ends the waiting ranks; one still here after the grace
    says it too."""
    if _rank_behind_rank_0():
        time.sleep(USAGE_ERROR_GRACE_S)
    print(f"commbench: error: {_one_line(text)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point: returns the exit status (0 ok, 1 failed run, 2 bad input, 128+N on signal N)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        result = cli.main(args=args, prog_name="commbench", standalone_mode=False, obj={"argv": args})
    except click.NoSuchOption as exc:
        known = exc.option_name in TORCHRUN_OPTIONS
        _say_usage_error(launcher_option_text(exc.option_name) if known else click_message(exc))
        return 2
    except click.ClickException as exc:
        _say_usage_error(click_message(exc))
        return 2
    except UsageError as exc:
        _say_usage_error(str(exc))
        return exc.exit_code
    except RunError as exc:
        # rank 0 (or the only process) reads the dumps a failed run's ranks left, and says what they show
        message = str(exc) if _rank_behind_rank_0() else with_verdict(str(exc))
        print(f"commbench: error: {_one_line(message)}", file=sys.stderr)
        return exc.exit_code
    except (Terminated, AlreadyReported) as exc:
        return exc.exit_code
    except (KeyboardInterrupt, click.Abort):
        return 130
    return result if isinstance(result, int) else 0
