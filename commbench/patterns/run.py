"""What each rank runs for a workload pattern: the work each registration in command.py names, with the
one signature every feature's work has, ``(configs, backend, output, session) -> rows``. A pattern runs
its one config on the world; of the session it takes the memory budget and the rows' provenance.
Imports torch: only the ranks import this module.
"""

from commbench.backends.base import Backend
from commbench.patterns.config import FsdpConfig, ParallelConfig
from commbench.patterns.fsdp import measure_fsdp
from commbench.patterns.parallel_run import build_3d, build_moe, build_pp, build_tp, measure_parallel
from commbench.results.model import Row
from commbench.running.runner import Session
from commbench.writers.output import Output


def run_fsdp(configs: list[FsdpConfig], backend: Backend, output: Output, session: Session) -> list[Row]:
    (config,) = configs
    return measure_fsdp(config, backend, output, session)


def run_tp(configs: list[ParallelConfig], backend: Backend, output: Output, session: Session) -> list[Row]:
    (config,) = configs
    return measure_parallel(config, build_tp, backend, output, session)


def run_moe(configs: list[ParallelConfig], backend: Backend, output: Output, session: Session) -> list[Row]:
    (config,) = configs
    return measure_parallel(config, build_moe, backend, output, session)


def run_pp(configs: list[ParallelConfig], backend: Backend, output: Output, session: Session) -> list[Row]:
    (config,) = configs
    return measure_parallel(config, build_pp, backend, output, session)


def run_3d(configs: list[ParallelConfig], backend: Backend, output: Output, session: Session) -> list[Row]:
    (config,) = configs
    return measure_parallel(config, build_3d, backend, output, session)
