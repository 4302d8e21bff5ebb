"""The activation patterns (tp, moe, pp, 3d): the mesh, the schedules and sizes from the model's dims (the
formulas docs/patterns.md gives), the router, --check's verdicts, bad input, and each command on 4 real
gloo ranks with --check. tests/test_patterns_parallel_torch.py compares tp and pp with torch's own."""

import json

import pytest
import torch

from commbench.backends.base import CollectiveArgs
from commbench.backends.torch_dist import TorchDistBackend
from commbench.config.launch import LaunchConfig
from commbench.errors import UsageError
from commbench.patterns.command import PATTERNS
from commbench.patterns.config import DEFAULT_MOE_MODEL, ParallelConfig, resolve_parallel
from commbench.patterns.measure import step_dry
from commbench.patterns.models import ModelSpec, ParamSpec, UnitSpec, load_model, preset_names
from commbench.patterns.moe import MoeStep, Router, imbalance
from commbench.patterns.parallel import GroupInfo, Mesh, make_groups
from commbench.patterns.parallel_run import build_3d, build_moe, build_pp, build_tp
from commbench.patterns.pp import bubble_fraction, one_f_one_b
from commbench.patterns.schedule import Label
from commbench.patterns.threed import stage_layers, tensor_parallel_shard
from commbench.patterns.tp import TensorParallel, TpShape, TpStep
from commbench.patterns.verify import CollectiveChecker
from tests.dist_helpers import commbench

CPU = torch.device("cpu")
DRY_BACKEND = TorchDistBackend("gloo", CPU)  # a dry step never calls it


def _group(name: str, rank: int, size: int) -> GroupInfo:
    return GroupInfo(name, None, rank, size, tuple(range(size)), "world")


# --- the mesh and the schedules ---------------------------------------------------------------------

def test_the_mesh_puts_tensor_parallel_ranks_next_to_each_other():
    mesh = Mesh(("pp", "dp", "tp"), (2, 2, 2))
    assert mesh.members("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh.members("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh.members("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [mesh.coordinate(6, name) for name in mesh.names] == [1, 1, 0]
    config = ParallelConfig(pattern="3d", model="tiny", tp=2)
    assert config.mesh(8).sizes == (1, 4, 2)  # dp: the world / (tp x pp)
    with pytest.raises(UsageError, match="pp 1 x dp 3 x tp 1 = 3 ranks, but the world has 4"):
        ParallelConfig(pattern="3d", model="tiny", dp=3).mesh(4)


def _toward(actions, neighbour):
    """A stage's messages to one neighbour, in order, each as the set of what it moves: ('send', kind,
    micro-batch) and ('recv', kind, micro-batch)."""
    found = []
    for action in actions:
        if action.kind == "message" and action.neighbour == neighbour:
            parts = set()
            if action.sends:
                parts.add(("send", action.sends))
            if action.receives:
                parts.add(("recv", action.receives))
            found.append(parts)
    return found


@pytest.mark.parametrize("stages, micro_batches", [(2, 1), (3, 4), (4, 8), (4, 2)])
def test_1f1b_runs_every_micro_batch_once_each_way_and_neighbours_pair_their_messages(stages, micro_batches):
    flip = {"send": "recv", "recv": "send"}
    for stage in range(stages):
        actions = one_f_one_b(stage, stages, micro_batches)
        for kind in ("forward", "backward"):
            assert [a.micro_batch for a in actions if a.kind == kind] == list(range(micro_batches))
        if stage + 1 < stages:  # what this stage does toward the next, the next does toward it, mirrored
            mine = _toward(actions, +1)
            theirs = [{(flip[way], kind) for way, kind in parts}
                      for parts in _toward(one_f_one_b(stage + 1, stages, micro_batches), -1)]
            assert mine == theirs
    assert bubble_fraction(4, 8) == 3 / 11 and bubble_fraction(1, 8) == 0


def test_a_stage_s_1f1b_warms_up_then_alternates():
    kinds = [(a.kind, a.micro_batch) for a in one_f_one_b(0, 4, 5) if a.kind != "message"]
    # stage 0 of 4: three forwards of warm-up, then one forward and one backward, then the rest backward
    assert kinds == [("forward", 0), ("forward", 1), ("forward", 2), ("forward", 3), ("backward", 0),
                     ("forward", 4), ("backward", 1), ("backward", 2), ("backward", 3), ("backward", 4)]


# --- sizes from the model's dims ------------------------------------------------------------------------

def test_tensor_parallel_sizes_follow_tokens_times_hidden():
    tokens, hidden, tp = 8, 16, 4  # --model tiny --seq-len 8
    for sequence_parallel, forward, backward in ((True, 4, 6), (False, 2, 2)):
        shape = TpShape(tokens * hidden, torch.bfloat16, sequence_parallel)
        step = TpStep(TensorParallel(_group("tp", 1, tp), shape, CPU), ["block0", "block1"])
        labels = step_dry(DRY_BACKEND, step, "tp")
        assert [label.phase for label in labels] == ["forward"] * 2 * forward + ["backward"] * 2 * backward
        # nccl-tests' size: the whole activation, whether gathered, scattered or reduced
        assert {label.size_bytes for label in labels} == {tokens * hidden * 2}
        shards = {label.count_per_rank for label in labels if label.collective != "all_reduce"}
        assert shards <= {tokens * hidden // tp} and {label.group_size for label in labels} == {tp}
    assert step_dry(DRY_BACKEND, TpStep(TensorParallel(_group("tp", 0, 1), shape, CPU), ["b"]), "tp") == []


def test_the_router_draws_top_k_distinct_experts_per_token_and_skew_unbalances_it():
    router = Router(experts=8, top_k=2, tokens=512, ranks=4, skew=1.0, seed=3)
    counts = router.counts(layer=0, draw=0)
    assert counts.shape == (4, 8) and counts.sum(dim=1).tolist() == [512 * 2] * 4
    assert int(counts.max()) <= 512  # a token never picks one expert twice
    assert torch.equal(counts, router.counts(layer=0, draw=0))  # seeded: every rank draws the same
    assert not torch.equal(counts, router.counts(layer=0, draw=1))  # and every step differently
    assert not torch.equal(router.popularity(0), router.popularity(1))  # a different hot expert per layer
    uniform = Router(8, 2, 512, 4, skew=0.0, seed=3)
    skewed = Router(8, 2, 512, 4, skew=2.0, seed=3)
    flat = imbalance(uniform.per_rank(uniform.counts(0, 0)))
    assert 1.0 <= flat < 1.15 < imbalance(skewed.per_rank(skewed.counts(0, 0)))


def test_moe_sizes_follow_the_routers_counts():
    dims = load_model("tiny-moe").dims
    ranks, tokens = 2, 32
    router = Router(dims.experts, dims.top_k, tokens, ranks, 1.0, 0)
    for rank in range(ranks):
        shape = (dims.hidden, torch.bfloat16, CPU)
        step = MoeStep(router, _group("ep", rank, ranks), ["block0", "block1"], 1, shape)
        labels = step_dry(DRY_BACKEND, step, "moe")
        # per layer: the count exchange, dispatch and combine forward; two all-to-alls backward
        assert [label.collective for label in labels[:3]] == ["all_to_all_single", *["all_to_allv"] * 2]
        assert len(labels) == 2 * 5 and labels[0].size_bytes == dims.experts * 8
        owned = slice(rank * dims.experts // ranks, (rank + 1) * dims.experts // ranks)  # its experts
        for layer in range(2):
            # a rank sends each of its tokens to top_k experts and receives every rank's tokens for the
            # experts it holds, counted from the router's draw itself
            received = int(router.counts(layer, 0)[:, owned].sum())
            moved = max(tokens * dims.top_k, received) * dims.hidden
            dispatch = [label for label in labels
                        if label.unit == f"block{layer}" and label.collective == "all_to_allv"]
            assert {label.count_per_rank for label in dispatch} == {moved}
            assert {label.size_bytes for label in dispatch} == {moved * 2}


def test_a_3d_stage_holds_its_share_of_the_layers_and_dp_shards_the_tensor_parallel_slice():
    layers = [f"block{index}" for index in range(5)]
    assert [stage_layers(layers, 2, stage) for stage in (0, 1)] == [layers[:3], layers[3:]]
    gpt2 = load_model("gpt2-small")
    block = gpt2.units[1]
    assert tensor_parallel_shard(gpt2, 2, 4) == _first_chunks(block.params, 2, 4)
    assert tensor_parallel_shard(gpt2, 1, 1) == block.numel
    # dims that do not divide: the first chunk is the largest (the padded share)
    odd = UnitSpec("block0", (ParamSpec("w", (7, 5)), ParamSpec("b", (7,)), ParamSpec("v", (3, 2, 2))),
                   layer=True)
    model = ModelSpec("odd", (odd,), "test")
    # 7x5 -> 4x5 -> 2x5; 7 -> 3; 3x2x2 -> 2x2x2 -> 1x2x2
    assert tensor_parallel_shard(model, 2, 3) == _first_chunks(odd.params, 2, 3) == 10 + 3 + 4


def _first_chunks(params, tp: int, dp: int) -> int:
    """torch's own chunking of shape-only tensors: tensor parallelism keeps a matrix's first of tp dim-0
    chunks (a vector whole), then FSDP2 keeps the first (largest) of dp dim-0 chunks of that slice."""
    total = 0
    for param in params:
        whole = torch.empty(param.shape, device="meta")
        sliced = whole.chunk(tp, dim=0)[0] if whole.dim() > 1 else whole
        total += sliced.chunk(dp, dim=0)[0].numel()
    return total


# --- --check's verdicts -------------------------------------------------------------------------------

def _exchange(label: Label, make_args, size: int) -> list[tuple[CollectiveChecker, CollectiveArgs]]:
    """Each rank's checker and args after fill(); the collective is then done by hand below."""
    found = []
    for rank in range(size):
        groups = {label.group: _group(label.group, rank, size)}
        checker = CollectiveChecker(groups, _group("world", rank, size))
        args = make_args()
        checker.fill(label, args)
        found.append((checker, args))
    return found


def test_check_passes_a_right_result_and_names_a_wrong_element():
    size = 2
    gather = Label("all_gather_base", "block0", "forward", 0, 3, group="tp", group_size=size)
    ranks = _exchange(gather, lambda: CollectiveArgs(input=torch.zeros(3), output=torch.zeros(6)), size)
    result = torch.cat([args.input for _, args in ranks])
    for checker, args in ranks:
        args.output.copy_(result)
        checker.verify(gather, args)
        assert checker.mismatches == []
    averaged = Label("reduce_scatter_base", "block1", "backward", 0, 4, op="avg", group="dp", group_size=size)
    ranks = _exchange(averaged, lambda: CollectiveArgs(input=torch.zeros(8), output=torch.zeros(4)), size)
    total = sum(args.input.view(size, -1) for _, args in ranks) / size
    for rank, (checker, args) in enumerate(ranks):
        args.output.copy_(total[rank])
        if rank == 1:
            args.output[2] += 1
        checker.verify(averaged, args)
    assert ranks[0][0].mismatches == []
    wrong, right = float(total[1][2] + 1), float(total[1][2])
    assert ranks[1][0].mismatches == ["reduce_scatter_base of unit block1 (backward, dp): element 2 the "
                                      f"reduction is {wrong:g}, expected {right:g}"]


# --- bad input ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, world, message", [
    (dict(pattern="tp", tp=3), 4, "--tp 3 x --pp 1 = 3 ranks do not divide the world of 4"),
    (dict(pattern="tp", seq_len=6), 4, "sequence parallel splits 6 x 1 tokens over 4 tensor-parallel ranks"),
    (dict(pattern="moe"), 2, "model tiny has no experts"),
    (dict(pattern="moe", model="tiny-moe"), 3, "4 experts do not divide over 3 expert-parallel ranks"),
    (dict(pattern="pp"), 4, "4 pipeline stages need at least as many layers; the model has 2"),
    (dict(pattern="3d", tp=2, pp=2, dp=2), 4, "pp 2 x dp 2 x tp 2 = 8 ranks, but the world has 4"),
])
def test_worlds_the_pattern_cannot_tile_are_refused(changes, world, message):
    config = ParallelConfig(**{"model": "tiny", "seq_len": 8, **changes})
    with pytest.raises(UsageError) as caught:
        config.check_world(world)
    assert message in str(caught.value)


@pytest.mark.parametrize("changes, message", [
    (dict(routing_skew=-1.0), "--routing-skew -1 must be between 0 (uniform) and 10"),
    (dict(dtype="int32"), "--dtype int32: activations and gradients are floating point"),
    (dict(micro_batches=0), "--micro-batches 0 must be at least 1"),
    (dict(seq_len=0), "--seq-len 0 must be at least 1"),
    (dict(model="gpt2-smal"), "unknown model 'gpt2-smal'"),
    (dict(launch=LaunchConfig(backend="nccl")), "backend nccl is not available"),
])
def test_resolve_refuses_bad_options(changes, message):
    with pytest.raises(UsageError) as caught:
        resolve_parallel(ParallelConfig(**{"pattern": "tp", "model": "tiny", **changes}))
    assert message in str(caught.value)


def test_a_model_without_dims_is_refused_naming_the_pattern(tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text("units:\n  - name: a\n    params: {w: [4, 4]}\n")
    with pytest.raises(UsageError, match="has no 'dims'.*pattern pp sizes its messages from them"):
        resolve_parallel(ParallelConfig(pattern="pp", model=str(path)))


# --- defaults that run ---------------------------------------------------------------------------------

class _RankOfAWorld(TorchDistBackend):
    """One rank of a world that never starts: enough to build a pattern's step and run it dry (a dry
    step issues nothing, so no process group is made)."""

    def __init__(self, rank: int, world_size: int) -> None:
        super().__init__("gloo", CPU)
        self._rank, self._world_size = rank, world_size

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    def new_groups(self, members: list[list[int]]) -> object:
        return object()  # a handle the dry step never uses


BUILDS = {"tp": build_tp, "moe": build_moe, "pp": build_pp, "3d": build_3d}


@pytest.mark.parametrize("pattern", ["tp", "moe", "pp", "3d"])
@pytest.mark.parametrize("world", [2, 4])
def test_each_pattern_s_default_model_runs_at_its_defaults(pattern, world):
    """What `commbench pattern NAME --nproc WORLD` does before timing, on every rank: the defaults
    resolved and checked, the mesh's groups, the pattern's step built for the default model and run
    dry; every rank issues collectives in its mesh's groups (real runs, at smaller models, are the
    processes tests below)."""
    feature = next(each for each in PATTERNS if each.name == pattern)  # the command's own defaults
    config = resolve_parallel(ParallelConfig(**feature.defaults))
    assert config.model == (DEFAULT_MOE_MODEL if pattern == "moe" else "gpt2-small")
    config.check_world(world)
    model = load_model(config.model, config.layers)
    sized = config.for_world(model, world)
    mesh = sized.mesh(world)
    # moe's ranks are alike (one dimension, one seeded router every rank draws alike) and drawing its
    # routes is most of its cost: its last rank stands for all
    for rank in [world - 1] if pattern == "moe" else range(world):
        backend = _RankOfAWorld(rank, world)
        groups = make_groups(backend, mesh)
        labels = step_dry(backend, BUILDS[pattern](sized, model, groups, backend).step, pattern)
        assert labels, f"rank {rank} issues nothing"
        assert all(label.size_bytes > 0 for label in labels)
        assert {label.group for label in labels} <= set(mesh.names) | {""}
        assert {label.group_size for label in labels} <= {*mesh.sizes, 0, world}


@pytest.mark.parametrize("pattern", ["tp", "3d"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_without_seq_len_every_preset_s_context_splits_over_the_tensor_parallel_ranks(pattern, world):
    for model_name in preset_names():
        config = ParallelConfig(pattern=pattern, model=model_name, tp=world if pattern == "3d" else None)
        config.check_world(world)
        model = load_model(model_name)
        sized = config.for_world(model, world)
        context = min(model.dims.context, 4096)
        assert sized.tokens(model) % world == 0 and context - world < sized.seq_len <= context
    given = ParallelConfig(pattern="tp", model="tiny", seq_len=33)
    assert given.for_world(load_model("tiny"), 2).seq_len == 33  # a length the user gave is theirs


# --- the commands on real ranks ----------------------------------------------------------------------

def _run(tmp_path, ranks: int, *args: str) -> tuple[list[dict], str]:
    json_path = tmp_path / "r.json"
    result = commbench("pattern", *args, "--check", "--iters", "2", "--nproc", str(ranks), "--json",
                       str(json_path), "--csv", str(tmp_path / "r.csv"))
    assert result.returncode == 0, result.stderr
    assert "checked" in result.stdout
    return json.loads(json_path.read_text())["rows"], result.stdout


@pytest.mark.processes
def test_tp_runs_with_check(tmp_path):
    rows, out = _run(tmp_path, 2, "tp", "--model", "tiny", "--seq-len", "8")
    parts = [row for row in rows if row["collective"] != "step"]
    groups = {(row["parallel"], row["group_size"], row["group_layout"]) for row in parts}
    assert groups == {("tp", 2, "world")}
    assert {row["variant"] for row in rows} == {"sp"} and "time per step" in out
    step = next(row for row in rows if row["phase"] == "step")
    assert step["calls_per_step"] == 2 * 2 * (2 + 3)  # layers x blocks x (forward + backward)


@pytest.mark.processes
def test_moe_reports_the_imbalance_with_check(tmp_path):
    rows, out = _run(tmp_path, 2, "moe", "--model", "tiny-moe", "--seq-len", "16", "--routing-skew", "1.5")
    step = next(row for row in rows if row["phase"] == "step")
    assert step["imbalance"] >= 1 and step["variant"] == "top2-zipf1.5"
    dispatch = [row for row in rows if row["collective"] == "all_to_allv" and row["phase"] == "forward"]
    assert len(dispatch) == 2 and all(row["imbalance"] >= 1 for row in dispatch)
    assert "routing imbalance per timed step" in out


@pytest.mark.processes
def test_the_issue_s_defaults_run_moe_without_a_model_and_tp_on_tiny_at_two_ranks(tmp_path):
    moe = commbench("pattern", "moe", "--layers", "1", "--seq-len", "64", "--iters", "1", "--quiet",
                    "--json", str(tmp_path / "moe.json"), "--csv", str(tmp_path / "moe.csv"))
    assert moe.returncode == 0, moe.stderr
    rows = json.loads((tmp_path / "moe.json").read_text())["rows"]
    assert {row["model"] for row in rows} == {"mixtral-8x7b/layers=1"}
    tp = commbench("pattern", "tp", "--model", "tiny", "--nproc", "2", "--output-dir", str(tmp_path / "tp"))
    assert tp.returncode == 0, tp.stderr
    assert "sequence length 32 (the model's 33 shortened so that sequence parallelism splits it over 2 " \
           "tensor-parallel ranks; --seq-len sets it)" in tp.stdout


@pytest.mark.processes
def test_pp_and_3d_report_the_bubble_and_the_critical_path_with_check(tmp_path):
    rows, out = _run(tmp_path, 2, "pp", "--model", "tiny", "--seq-len", "8", "--micro-batches", "4",
                     "--compute-size", "32")
    step = next(row for row in rows if row["phase"] == "step")
    assert 0 < step["bubble_pct"] < 100 and "1F1B bubble in theory" in out
    assert {row["unit"] for row in rows if row["parallel"] == "pp"} == {"stage0", "stage1"}
    rows, out = _run(tmp_path, 4, "3d", "--model", "tiny", "--seq-len", "8", "--pp", "2", "--dp", "2",
                     "--micro-batches", "2", "--compute-size", "16")
    assert {row["parallel"] for row in rows if row["phase"] == "comm"} == {"pp", "dp"}
    groups = {(row["parallel"], row["group_size"], row["group_count"], row["group_layout"]) for row in rows
              if row["collective"] != "step"}
    assert groups == {("pp", 2, 2, "strided"), ("dp", 2, 2, "contiguous")}  # pp outermost, dp next
    path = {row["parallel"] or row["unit"] for row in rows if row["phase"] == "critical path"}
    assert path == {"pp", "dp", "compute", "other"} and "critical path: rank" in out
    reduced = [row for row in rows if row["parallel"] == "dp" and row["collective"] == "reduce_scatter_base"]
    assert reduced and {row["op"] for row in reduced} == {"avg"}
