"""`commbench fabric`'s registration (running/features.py), and its launch: the options are
FabricConfig's declared fields (config.py) with the launch settings every measuring command offers and
the soak's; the command line makes the command. Importing this module does not import torch.
"""

import os
from collections.abc import Mapping

from commbench.errors import UsageError
from commbench.fabric.config import (
    FabricConfig,
    Outcome,
    available_host_bytes,
    memory_problem,
    resolve_fabric,
)
from commbench.fabric.kind import FABRIC
from commbench.running.features import Feature, register_feature


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
    outcome = Outcome()  # what the ranks concluded, filled by run_fabric on this rank
    work = deferred("commbench.fabric.run", "run_fabric", outcome=outcome)
    status = launch([config], work, environ)
    return 1 if status == 0 and config.fail_on_outlier and outcome.suspects else status


FABRIC_FEATURE = register_feature(Feature(
    name="fabric",
    summary="Every pair of ranks both ways (bandwidth and latency), host by host: the slow GPU, link or "
            "node.",
    config=FabricConfig, resolve=resolve_fabric, start=launch_fabric, kinds=(FABRIC,), soaks=True))
