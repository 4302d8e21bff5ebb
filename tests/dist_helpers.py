"""Run a function on N real gloo ranks (separate processes) and collect what each returns."""

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank_main(fn: Callable, rank: int, world_size: int, port: int, args: tuple, results: Any) -> None:
    import torch.distributed as dist

    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size)
        value = fn(rank, world_size, *args)
        dist.barrier()
        dist.destroy_process_group()
        results.put((rank, "ok", value))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


def run_ranks(fn: Callable, world_size: int, *args: Any, timeout: float = 120.0) -> list[Any]:
    """``fn(rank, world_size, *args)`` on each rank of a fresh gloo group; the return values by rank."""
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    procs = [context.Process(target=_rank_main, args=(fn, rank, world_size, port, args, results))
             for rank in range(world_size)]
    for proc in procs:
        proc.start()
    collected: dict[int, Any] = {}
    errors: list[str] = []
    try:
        for _ in range(world_size):
            rank, status, value = results.get(timeout=timeout)
            if status == "ok":
                collected[rank] = value
            else:
                errors.append(f"rank {rank}:\n{value}")
                break
    finally:
        for proc in procs:
            proc.join(timeout=10 if not errors else 1)
            if proc.is_alive():
                proc.kill()
    if errors:
        raise AssertionError("\n".join(errors))
    return [collected[rank] for rank in range(world_size)]


def commbench(*args: str, timeout: float = 240.0, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI, as a user would, in a separate process."""
    full_env = {**os.environ, **(env or {})}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if env is None or name not in env:
            full_env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "commbench", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd or ROOT, stdin=subprocess.DEVNULL)


def torchrun(nproc: int, *args: str, timeout: float = 240.0, cwd: Path | None = None
             ) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node N -m commbench ARGS`."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(nproc), "-m", "commbench", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd or ROOT, stdin=subprocess.DEVNULL)
