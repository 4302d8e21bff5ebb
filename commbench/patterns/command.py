"""The workload patterns' registrations (running/features.py), one per pattern, under `commbench
pattern`: each names its config (config.py: its fields declare the options), its resolution, its work
on the ranks (run.py) and its result kind (kind.py). The activation patterns share ParallelConfig; each
offers the options declared for it. Importing this module does not import torch.
"""

from commbench.patterns.config import (
    DEFAULT_MOE_MODEL,
    FSDP,
    FsdpConfig,
    ParallelConfig,
    resolve_fsdp,
    resolve_parallel,
)
from commbench.patterns.kind import FSDP_KIND, activation_kind
from commbench.running.features import Feature, FeatureGroup, register_feature
from commbench.running.launch import deferred

PATTERN = FeatureGroup(
    "pattern", "Workload patterns: the collectives of a training step, as a training stack issues them.")
WORK = "commbench.patterns.run"


def _activation(name: str, summary: str, **defaults: object) -> Feature:
    return Feature(name=name, summary=summary, config=ParallelConfig, resolve=resolve_parallel,
                   work=deferred(WORK, f"run_{name}"), kinds=(activation_kind(name),), group=PATTERN,
                   defaults={"pattern": name, **defaults})


PATTERNS = [register_feature(feature) for feature in (
    Feature(name=FSDP, config=FsdpConfig, resolve=resolve_fsdp, work=deferred(WORK, "run_fsdp"),
            kinds=(FSDP_KIND,), group=PATTERN,
            summary="One FSDP2 or FSDP1 training step, as torch issues it: all-gathers, padded "
                    "reduce-scatters, bucketing, and (--overlap) their overlap with compute."),
    _activation("tp", "Tensor (and sequence) parallelism, Megatron-LM's layout: per layer the all-gathers "
                      "and reduce-scatters (or all-reduces) of the activations, forward and backward."),
    _activation("moe", "Expert parallelism: per MoE layer the count exchange and the dispatch and combine "
                       "all-to-all(v) of a top-k router's tokens, with the per-step imbalance.",
                model=DEFAULT_MOE_MODEL),
    _activation("pp", "Pipeline parallelism: 1F1B's activations forward and gradients backward between "
                      "stages, point to point, with the bubble."),
    _activation("3d", "Tensor, pipeline and data parallelism on one world, each group running its pattern "
                      "at once: per-group times and the step's critical path.", pp=1),
)]
