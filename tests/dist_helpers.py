"""Run a function on N real gloo ranks (separate processes) and collect what each returns."""

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from commbench.running.spawn import run_on_local_ranks

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


# The interpreter as a terminal's shell starts a foreground command: SIGINT at its default, whatever this
# process was given. A script's `cmd &` (no job control) starts cmd with SIGINT ignored, its children
# inherit that and Python keeps it, so a test of what Ctrl-C does starts its command through this.
FOREGROUND_PYTHON = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, "
                     "signal.SIG_DFL); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"]


def launcherless_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without a launcher's variables (a test may be run under one), plus ``env``."""
    clean = {key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES}
    return {**clean, **(env or {})}


def run_ranks(fn: Callable, world_size: int, *args: Any, timeout: float = 120.0) -> list[Any]:
    """``fn(rank, world_size, *args)`` on each rank of a fresh gloo group; the return values by rank."""
    try:
        return run_on_local_ranks(fn, world_size, *args, timeout_s=timeout)
    except RuntimeError as exc:
        raise AssertionError(str(exc)) from None


def commbench(*args: str, timeout: float = 240.0, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI, as a user would, in a separate process."""
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True,
                          timeout=timeout, env=launcherless_env(env), cwd=cwd or ROOT,
                          stdin=subprocess.DEVNULL)


def torchrun(nproc: int, *args: str, timeout: float = 240.0, cwd: Path | None = None
             ) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node N -m commbench ARGS`."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(nproc), "-m", "commbench", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=launcherless_env(), cwd=cwd or ROOT, stdin=subprocess.DEVNULL)


def _plain_refusals(rank: int, world_size: int) -> dict[str, str]:
    import torch

    from commbench.backends.torch_dist import TorchDistBackend
    from commbench.measure.collectives import REGISTRY
    from commbench.running.probe import try_op

    backend = TorchDistBackend("gloo", torch.device("cpu"))
    refused = {}
    for name, collective in REGISTRY.items():  # every rank tries every one: a refusal is raised locally
        error = try_op(backend, collective, "float32", "sum" if collective.reduces else "", "sync")
        if error is not None:
            refused[name] = error
        backend.barrier()
    return refused


@functools.cache
def collectives_gloo_refuses() -> dict[str, str]:
    """The collectives this torch's gloo refuses outright (float32, op sum, sync), found by one tiny real
    op of each on two fresh ranks (probe.try_op, as `commbench list` runs them), with rank 0's reason:
    what a `--collective all` run must leave out and name. Empty on torch 2.12 and later."""
    return run_ranks(_plain_refusals, 2)[0]
