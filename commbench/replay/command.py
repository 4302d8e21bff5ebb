"""`commbench replay`'s registration (running/features.py): its options are ReplayConfig's declared
fields (config.py) with the launch settings every measuring command offers; without a launcher or
--nproc it spawns as many ranks as the recording has. Importing this module does not import torch.
"""

from commbench.replay.config import ReplayConfig, resolve_replay
from commbench.replay.kind import REPLAY
from commbench.running.features import Feature, register_feature
from commbench.running.launch import deferred

REPLAY_FEATURE = register_feature(Feature(
    name="replay",
    summary="Replay and time a job's communication from torch's Flight Recorder dumps or profiler traces "
            "(one per rank); without a launcher or --nproc, as many ranks as recorded. See docs/replay.md.",
    config=ReplayConfig, resolve=resolve_replay, work=deferred("commbench.replay.run", "run_replay"),
    kinds=(REPLAY,), defaults={"nproc": 0}))
