"""The registry: buffer shapes for a size and world size, and nccl-tests' bus-bandwidth factors."""

from dataclasses import replace

import pytest
import torch

from commbench.core.splits import parse_splits
from commbench.errors import UsageError
from commbench.measure.collectives import (
    IN_PLACE,
    OUT_OF_PLACE,
    PLACEMENTS,
    REGISTRY,
    Layout,
    placements_for,
    resolve_collectives,
)
from commbench.measure.planning import SizeLimits, plan_sizes

NCCL_TESTS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "reduce_scatter_base": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_gather_base": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_to_all_single": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
    # v-collectives: their uniform counterpart's factor, applied to the largest per-rank byte count
    "all_to_allv": lambda n: (n - 1) / n,
    "reduce_scatter_v": lambda n: (n - 1) / n,
    "all_gather_v": lambda n: (n - 1) / n,
    # point-to-point: what one rank sends (and receives), as nccl-tests' sendrecv
    "ping": lambda n: 1.0,
    "ping_pong": lambda n: 1.0,
    "p2p_uni": lambda n: 1.0,
    "p2p_bidir": lambda n: 1.0,
    "ring": lambda n: 1.0,
}
UNIFORM = sorted(name for name in NCCL_TESTS_FACTORS if REGISTRY[name].uneven is None)


def test_every_collective_the_issue_names_is_registered():
    assert set(REGISTRY) == {*NCCL_TESTS_FACTORS, "barrier"}


@pytest.mark.parametrize("name", sorted(NCCL_TESTS_FACTORS))
@pytest.mark.parametrize("n", range(2, 9))
def test_busbw_factor_matches_nccl_tests(name, n):
    assert REGISTRY[name].busbw_factor(n) == pytest.approx(NCCL_TESTS_FACTORS[name](n))


def _numel(part):
    if part is None:
        return 0
    if isinstance(part, list):
        return sum(t.numel() for t in part)
    return part.numel()


@pytest.mark.parametrize("name", UNIFORM)
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_size_is_the_larger_buffer(name, world_size):
    collective = REGISTRY[name]
    count, used = collective.plan(64 * 1024, world_size, 4)
    root_buffers = collective.build(Layout(count, world_size, 0, 0, torch.float32, torch.device("cpu")))
    larger = max(_numel(root_buffers.input), _numel(root_buffers.output))
    assert larger * 4 == used
    assert used <= 64 * 1024 and 64 * 1024 - used < 4 * collective.shards(world_size)


def test_flat_and_list_layouts():
    layout = Layout(5, 3, 1, 0, torch.float32, torch.device("cpu"))
    rs = REGISTRY["reduce_scatter_base"].build(layout)
    assert rs.input.shape == (15,) and rs.output.shape == (5,)
    ag = REGISTRY["all_gather_base"].build(layout)
    assert ag.input.shape == (5,) and ag.output.shape == (15,)
    lists = REGISTRY["all_gather"].build(layout)
    assert len(lists.output) == 3 and all(t.shape == (5,) for t in lists.output)
    gather = REGISTRY["gather"].build(layout)
    assert gather.output is None  # only the root holds the gathered chunks
    scatter = REGISTRY["scatter"].build(layout)
    assert scatter.input is None


def test_send_recv_pairs_ranks_and_leaves_an_odd_rank_out():
    peers = [REGISTRY["send_recv"].build(Layout(1, 3, rank, 0, torch.float32, torch.device("cpu"))).peer
             for rank in range(3)]
    assert peers == [1, 0, None]


def test_plan_rounds_down_and_says_so():
    limits = SizeLimits(3, "float32")
    planned, notes = plan_sizes(REGISTRY["reduce_scatter_base"], [1000, 1024, 4, 1001], limits)
    assert [(p.requested, p.used, p.count_per_rank) for p in planned] == [(1000, 996, 83), (1024, 1020, 85)]
    text = " ".join(notes)
    assert "1000 B -> 996 B" in text and "multiple of 12 B" in text
    assert "skipped sizes below 12 B: 4 B" in text
    assert "1001 B rounded onto a size already measured" in text


def test_plan_leaves_valid_sizes_alone():
    planned, notes = plan_sizes(REGISTRY["all_reduce"], [1024, 2048], SizeLimits(3, "bfloat16"))
    assert [(p.used, p.count_per_rank) for p in planned] == [(1024, 512), (2048, 1024)]
    assert notes == []


def test_resolve_collectives():
    assert resolve_collectives("all_reduce, broadcast,all_reduce") == ["all_reduce", "broadcast"]
    assert resolve_collectives("all") == list(REGISTRY)
    with pytest.raises(UsageError, match="did you mean reduce_scatter_base"):
        resolve_collectives("reduce_scater_base")


CPU = torch.device("cpu")


def _layout(count: int, world_size: int, rank: int, placement: str = "", **extra) -> Layout:
    return Layout(count, world_size, rank, 0, torch.float32, CPU, placement, **extra)


def _shares_memory(view: torch.Tensor, whole: torch.Tensor, offset: int) -> bool:
    return view.data_ptr() == whole.data_ptr() + offset * whole.element_size()


def test_in_place_layouts_are_views_as_real_code_uses_them():
    rs = REGISTRY["reduce_scatter_base"].build(_layout(5, 3, 1, IN_PLACE))
    assert rs.input.shape == (15,) and _shares_memory(rs.output, rs.input, 5) and rs.output.shape == (5,)
    ag = REGISTRY["all_gather_base"].build(_layout(5, 3, 2, IN_PLACE))
    assert ag.output.shape == (15,) and _shares_memory(ag.input, ag.output, 10) and ag.input.shape == (5,)
    ar = REGISTRY["all_reduce"].build(_layout(5, 3, 0, IN_PLACE))
    assert ar.input is ar.output
    for name in ("reduce_scatter_base", "all_gather_base", "all_reduce"):
        apart = REGISTRY[name].build(_layout(5, 3, 1, OUT_OF_PLACE))
        assert apart.input.data_ptr() != apart.output.data_ptr()


def test_placements_run_what_a_collective_has():
    assert placements_for(REGISTRY["all_reduce"], []) == [IN_PLACE]  # torch's all_reduce is in place
    assert placements_for(REGISTRY["reduce_scatter_base"], []) == [OUT_OF_PLACE]
    assert placements_for(REGISTRY["all_gather_base"], list(PLACEMENTS)) == list(PLACEMENTS)
    assert placements_for(REGISTRY["broadcast"], [OUT_OF_PLACE]) == [IN_PLACE]  # its only layout
    assert placements_for(REGISTRY["all_to_all"], [IN_PLACE]) == [OUT_OF_PLACE]
    assert placements_for(REGISTRY["barrier"], list(PLACEMENTS)) == [""]


def test_uneven_layouts_follow_the_plan():
    spec = parse_splits("spread:0.5")
    plan = REGISTRY["all_to_allv"].plan_size(1200, 3, 4, spec)
    # c = 1200 / (3 x 4) = 100 elements per pair, times 1 + 0.5 d with d = -1, 0, 1 by (i + j) mod 3
    assert plan.pair_counts == ((50, 100, 150), (100, 150, 50), (150, 50, 100))
    for rank in range(3):
        buffers = REGISTRY["all_to_allv"].build(_layout(plan.count_per_rank, 3, rank,
                                                        pair_counts=plan.pair_counts))
        assert buffers.input_splits == list(plan.pair_counts[rank])
        assert buffers.output_splits == [row[rank] for row in plan.pair_counts]
        assert buffers.input.numel() == sum(buffers.input_splits)
    assert plan.size_bytes == 300 * 4 and plan.count_per_rank == 150
    gathered = REGISTRY["all_gather_v"].plan_size(1200, 3, 4, spec)
    assert gathered.chunk_counts == (50, 100, 150) and gathered.size_bytes == 300 * 4
    buffers = REGISTRY["all_gather_v"].build(_layout(0, 3, 2, chunk_counts=gathered.chunk_counts))
    assert buffers.input.numel() == 150 and [t.numel() for t in buffers.output] == [50, 100, 150]
    buffers = REGISTRY["reduce_scatter_v"].build(_layout(0, 3, 0, chunk_counts=gathered.chunk_counts))
    assert [t.numel() for t in buffers.input] == [50, 100, 150] and buffers.output.numel() == 50


def test_point_to_point_peers():
    def peers(name, world_size, **extra):
        found = []
        for rank in range(world_size):
            b = REGISTRY[name].build(_layout(4, world_size, rank, **extra))
            found.append((b.send_peer, b.recv_peer, b.peer, b.leads, b.window))
        return found

    assert peers("ping", 3) == [(1, None, None, False, 1), (None, 0, None, False, 1),
                                (None, None, None, False, 1)]
    assert [p[4] for p in peers("p2p_uni", 2, window=8)] == [8, 8]
    assert peers("p2p_bidir", 2, window=4) == [(1, 1, None, False, 4), (0, 0, None, False, 4)]
    assert peers("ping_pong", 2) == [(None, None, 1, True, 1), (None, None, 0, False, 1)]
    assert [(p[0], p[1]) for p in peers("ring", 3)] == [(1, 2), (2, 0), (0, 1)]
    assert peers("ring", 1) == [(None, None, None, False, 1)]


def test_reported_time_per_message_and_per_one_way_trip():
    assert REGISTRY["ping_pong"].time_scale(_layout(4, 2, 0)) == 0.5
    assert REGISTRY["p2p_uni"].time_scale(_layout(4, 2, 0, window=16)) == 1 / 16
    assert REGISTRY["ping"].time_scale(_layout(4, 2, 0, window=16)) == 1.0
    assert REGISTRY["ping_pong"].modes == ("sync",)


def test_a_uniform_size_means_whole_elements_in_each_chunk_of_the_larger_buffer():
    spec = parse_splits("spread:0.5")  # only v-collectives read it
    # 1000 bytes of float32 over 3 ranks: a reduce-scatter's input holds 3 chunks of 83 elements (996
    # bytes); an all-reduce's one buffer 250 elements; a barrier moves nothing
    planned = REGISTRY["reduce_scatter_base"].plan_size(1000, 3, 4, spec)
    assert (planned.count_per_rank, planned.size_bytes) == (83, 996)
    planned = REGISTRY["all_reduce"].plan_size(1000, 3, 4, spec)
    assert (planned.count_per_rank, planned.size_bytes) == (250, 1000)
    planned = REGISTRY["all_gather_base"].plan_size(4096, 4, 2, spec)
    assert (planned.count_per_rank, planned.size_bytes) == (512, 4096)
    assert REGISTRY["barrier"].plan(4096, 4, 4) == (0, 0)
    planned = REGISTRY["barrier"].plan_size(4096, 4, 4, spec)
    assert (planned.count_per_rank, planned.size_bytes) == (0, 0)


def test_a_layout_s_buffers_come_from_the_implementation_s_allocator_when_it_has_one():
    asked = []

    def allocate(count, dtype, device):
        asked.append((count, dtype, device))
        return torch.full((count,), 7, dtype=dtype, device=device)

    layout = Layout(6, 3, 0, 0, torch.float64, CPU, allocate=allocate)
    chunks = layout.chunks()
    assert asked == [(6, torch.float64, CPU)] * 3
    assert [chunk.tolist() for chunk in chunks] == [[7.0] * 6] * 3
    plain = Layout(6, 2, 0, 0, torch.int16, CPU).empty(5)
    assert (plain.dtype, plain.device, plain.numel()) == (torch.int16, CPU, 5)
    # on the layout's device, not torch's default one (the meta device stands in for a GPU here)
    elsewhere = Layout(6, 2, 0, 0, torch.int16, torch.device("meta")).empty(5)
    assert (elsewhere.dtype, elsewhere.device.type, elsewhere.numel()) == (torch.int16, "meta", 5)


def test_chunks_of_given_lengths_are_consecutive_views_of_one_tensor():
    from commbench.measure.collectives.base import offsets, views

    assert offsets((3, 0, 2)) == [0, 3, 3]
    assert offsets([]) == []
    flat = torch.arange(5.0)
    parts = views(flat, (3, 0, 2))
    assert [part.tolist() for part in parts] == [[0.0, 1.0, 2.0], [], [3.0, 4.0]]
    parts[2][0] = 30.0
    assert flat[3].item() == 30.0  # a view, not a copy


def test_the_buffers_options_are_the_call_s_fields_of_the_same_names():
    from commbench.backends.base import CollectiveArgs
    from commbench.measure.collectives.base import Buffers

    buffers = Buffers(input="in", output="out", peer=3, send_peer=4, recv_peer=5, leads=True, window=6,
                      input_splits=[1, 2], output_splits=[3, 4])
    args = CollectiveArgs(**buffers.call_options())
    for name in ("input", "output", "peer", "send_peer", "recv_peer", "leads", "window", "input_splits",
                 "output_splits"):
        assert getattr(args, name) == getattr(buffers, name), name


def test_check_values_fill_this_rank_s_inputs_and_poison_its_outputs():
    from commbench.measure.values import CheckValues

    values = CheckValues(torch.float32, "sum", 2, CPU)
    filled = {}
    for rank in (0, 1):
        layout = _layout(4, 2, rank)
        buffers = REGISTRY["all_gather_base"].build(layout)
        REGISTRY["all_gather_base"].fill(layout, buffers, values)
        filled[rank] = buffers.input.tolist()
        assert buffers.input.tolist() == values.source(rank, 0, 4).to(torch.float32).tolist()
        assert not torch.isin(buffers.output, buffers.input).any()  # the output holds the poison only
    assert filled[0] != filled[1]  # each rank its own values


def test_a_collective_registers_once_under_its_name():
    from commbench.measure.collectives.base import register

    toy = replace(REGISTRY["all_reduce"], name="toy_registered")
    try:
        assert register(toy) is toy and REGISTRY["toy_registered"] is toy
        with pytest.raises(ValueError, match="'toy_registered' is already registered"):
            register(toy)
        assert REGISTRY["toy_registered"] is toy
    finally:
        REGISTRY.pop("toy_registered", None)
