"""--impl: every implementation's probe and reasons (pure, on Capabilities values and on this process's
real probe), --impl's parsing, the rows an implementation that cannot run leaves, the side-by-side table,
what kernel names and NCCL's lines say about the path, and old files loading as c10d."""

import json
from dataclasses import asdict, replace

import pytest

from commbench.config.sweep import resolve, run_config
from commbench.core.paths import FEATURES, Capabilities
from commbench.errors import UsageError
from commbench.measure.impls import REFERENCE_IMPL, REGISTRY, Evidence, Setting, SizeFacts, resolve_impls
from commbench.measure.impls.base import register
from commbench.measure.impls.evidence import judge_kernels
from commbench.provenance.nccl_log import NcclLog
from commbench.results.model import KEY_FIELDS, Row
from commbench.results.saved import load_run
from commbench.results.side_by_side import compare_sizes, output_differences
from commbench.writers.side_by_side import side_by_side_table

GLOO = Capabilities.none("gloo", "cpu", "this run's device is cpu, not CUDA")
# A CUDA process with every feature and kernel: what the rules refuse there is the rules' own doing.
KERNELS = frozenset(f"symm_mem::{op}" for op in (
    "one_shot_all_reduce_out", "two_shot_all_reduce_", "two_shot_all_reduce_out", "multimem_all_reduce_",
    "multimem_one_shot_all_reduce_out", "multimem_all_gather_out", "reduce_scatter_out", "all_to_all_vdev"))
H200 = Capabilities("nccl", "cuda", "2.13.0", (2, 28, 9), {}, KERNELS)


def setting(collective="all_reduce", dtype="float32", op="sum", placement="out-of-place", ranks=8,
            capabilities=H200, whole_world=True, hosts=1) -> Setting:
    return Setting(collective, dtype, op, placement, ranks, whole_world, capabilities, hosts)


def test_on_gloo_every_implementation_but_c10d_refuses_with_its_reason():
    reasons = {name: impl.refusal(setting(capabilities=GLOO)) for name, impl in REGISTRY.items()
               if impl.runs("all_reduce")}
    assert reasons.pop("c10d") is None
    assert reasons["nccl-ubr"] == "needs --backend nccl (this run: gloo)"
    assert reasons["symm-one-shot"] == "needs a CUDA device (this run: cpu)"
    assert reasons["torchcomms"] == "this run's device is cpu, not CUDA"  # GLOO lacks every feature
    assert all(reasons.values()) and len(reasons) >= 7


def test_with_every_feature_the_rules_still_refuse_what_torch_and_nccl_cannot_run():
    one_shot, two_shot = REGISTRY["symm-one-shot"], REGISTRY["symm-two-shot"]
    assert one_shot.refusal(setting()) is None
    assert one_shot.refusal(setting(placement="in-place")) == \
        "all_reduce takes placement out-of-place only (asked: in-place)"
    assert one_shot.refusal(setting(dtype="float64")) == \
        "all_reduce takes dtype float32 or bfloat16 only (asked: float64)"
    assert one_shot.refusal(setting(op="max")) == "all_reduce takes op sum only (asked: max)"
    assert two_shot.refusal(setting(ranks=3)) == \
        "all_reduce out-of-place runs at 2, 4 or 8 ranks only (here 3)"
    assert two_shot.refusal(setting(ranks=3, placement="in-place")) is None
    assert REGISTRY["cta-zero"].refusal(setting("all_gather_base", capabilities=replace(
        H200, nccl_version=(2, 27, 7)))) == "needs NCCL 2.28 or later (this run: 2.27.7)"
    assert REGISTRY["torchcomms"].refusal(setting(whole_world=False)) == \
        "runs over the whole world only, not in sub-communicators"
    assert REGISTRY["nvshmem-a2av"].refusal(setting()) == "runs all_to_all_single, all_to_allv only"
    no_kernel = replace(H200, kernels=frozenset(), torch_version="2.13.0+cpu")
    assert one_shot.refusal(setting(capabilities=no_kernel)) == \
        "torch 2.13.0+cpu has no CUDA kernel for symm_mem::one_shot_all_reduce_out"


def test_sizes_torch_would_refuse_are_refused_per_size():
    two_shot = REGISTRY["symm-two-shot"]
    assert two_shot.size_refusal(SizeFacts("all_reduce", 1, 2, 2)) == \
        "torch's symmetric kernels need buffers of a multiple of 4 bytes (here 2 per rank)"
    assert two_shot.size_refusal(SizeFacts("all_reduce", 2, 2, 2)) is None
    # reduce_scatter_out: 4 float32 per rank at 2 ranks is 32 bytes, alignment 16: 8 elements, a multiple of 8
    assert two_shot.size_refusal(SizeFacts("reduce_scatter_base", 4, 4, 2)) is None
    assert two_shot.size_refusal(SizeFacts("reduce_scatter_base", 1, 4, 2)) == \
        "torch's reduce_scatter_out needs the elements a multiple of 4 (here 2)"


def test_torchs_cuda_symmetric_memory_is_refused_for_groups_that_span_hosts():
    for name in ("symm-one-shot", "symm-two-shot", "symm-multimem"):
        assert REGISTRY[name].refusal(setting(hosts=2)).startswith(
            "runs within one host only (a group here spans 2): torch's CUDA symmetric memory"), name
        assert REGISTRY[name].refusal(setting(hosts=1)) is None, name
    assert REGISTRY["nccl-symm"].refusal(setting(hosts=2)) is None  # NCCL falls back across hosts


def test_nccl_symmetric_windows_flag_what_nccl_runs_on_its_regular_kernels():
    symm = REGISTRY["nccl-symm"]
    assert symm.expected_fallback(setting()) is None
    assert "float64" in symm.expected_fallback(setting(dtype="float64"))
    assert "sum only (min)" in symm.expected_fallback(setting(op="min"))
    assert symm.expected_fallback(setting("all_gather_base", dtype="float64", op="")) is None


def _listed_cuda_kernels(ops) -> set[str]:
    """The symm_mem ops whose dispatch table, as torch prints it, has a CUDA kernel of their own."""
    import torch

    found = set()
    for op in ops:
        try:
            table = torch._C._dispatch_dump_table(f"symm_mem::{op}")
        except RuntimeError:  # no such op in this torch
            continue
        lines = table.splitlines()
        if any(line.startswith("CUDA: registered") and line.endswith("[kernel]") for line in lines):
            found.add(f"symm_mem::{op}")
    return found


def test_this_process_probe_names_what_a_cpu_run_lacks():
    """On a CPU device every device feature is missing, whatever the build; the symmetric-memory kernels
    are the build's: none in a CPU build, what the dispatcher lists for CUDA in a CUDA build (which has
    them without a GPU)."""
    import torch

    from commbench.backends.capabilities import SYMMETRIC_OPS, probe_capabilities

    found = probe_capabilities("gloo", torch.device("cpu"))
    assert set(found.missing) >= set(FEATURES) - {"torchcomms"}
    assert all("not CUDA" in found.missing[feature] for feature in set(FEATURES) - {"torchcomms"})
    assert found.kernels == _listed_cuda_kernels(SYMMETRIC_OPS)
    if torch.version.cuda is None:  # the CPU build
        assert not found.kernels
    lacking = sorted({f"symm_mem::{op}" for op in SYMMETRIC_OPS} - found.kernels)
    for op in lacking:
        assert found.kernel_missing(op) == f"torch {torch.__version__} has no CUDA kernel for {op}"
    assert all(found.kernel_missing(op) is None for op in found.kernels)


def test_a_probe_that_raises_makes_its_feature_missing_instead_of_ending_the_sweep():
    import torch

    from commbench.backends.capabilities import Site, run_probe

    def nvshmem_without_its_library(site):
        raise RuntimeError("libnvshmem_host.so.3: cannot open shared object file\nframes ...")

    assert run_probe(nvshmem_without_its_library, Site(torch.device("cpu"))) == \
        "probing it raised RuntimeError: libnvshmem_host.so.3: cannot open shared object file"


def test_every_implementation_asks_for_kinds_the_backend_has():
    from commbench.backends.paths import COMMUNICATOR_KINDS, MEMORY_KINDS, start_path

    paths = {name: impl.path for name, impl in REGISTRY.items()}
    assert [name for name, path in paths.items() if path is None] == [REFERENCE_IMPL] == ["c10d"]
    assert all(path.memory in MEMORY_KINDS and path.communicator in COMMUNICATOR_KINDS
               for path in paths.values() if path is not None)
    with pytest.raises(ValueError, match="no memory kind 'pinned' \\(it has plain, nccl-registered"):
        start_path(replace(paths["nccl-ubr"], memory="pinned"), None, [[0]], None, None, None, None)


def test_the_registry_holds_one_reference():
    with pytest.raises(ValueError, match="'c10d-again' cannot be a second reference"):
        register(replace(REGISTRY[REFERENCE_IMPL], name="c10d-again"))
    assert "c10d-again" not in REGISTRY


@pytest.mark.parametrize("text, expected", [
    (["all"], list(REGISTRY)), (["symm-one-shot", "c10d", "c10d"], ["c10d", "symm-one-shot"])])
def test_impl_lists_resolve_in_registry_order(text, expected):
    assert resolve_impls(text) == expected


def test_unknown_and_inapplicable_implementations_are_usage_errors():
    with pytest.raises(UsageError, match=r"'symm-oneshot' \(did you mean symm-one-shot\?\)"):
        resolve_impls(["symm-oneshot"])
    with pytest.raises(UsageError, match="--impl nvshmem-a2av runs all_to_all_single, all_to_allv: none"):
        resolve(run_config(collectives=["all_reduce"], impls=["nvshmem-a2av"], sizes=[1024]))
    everything = resolve(run_config(collectives=["all_reduce"], impls=["all"], sizes=[1024]))
    assert everything.impls == list(REGISTRY)


def row(impl="c10d", size=1024, p50=10.0, **fields) -> Row:
    return Row(collective="all_reduce", backend="nccl", device="cuda", world_size=8, dtype="float32",
               mode="sync", op="sum", size_bytes=size, requested_bytes=size, count_per_rank=size // 4,
               iters=5, warmup=1, time_us_p50=p50, time_us_p95=p50, time_us_min=p50, time_us_max=p50,
               time_us_mean=p50, algbw_gbps=1.0, busbw_gbps=1.0, busbw_factor=1.75, impl=impl, **fields)


def test_the_side_by_side_table_names_the_fastest_and_the_reasons():
    rows = [row(), row(size=4096, p50=20.0), row("symm-one-shot", p50=5.0, impl_status="verified"),
            row("symm-one-shot", size=4096, p50=40.0, impl_status="verified"),
            row("nccl-ubr", p50=None, error="needs --backend nccl (this run: gloo)",
                impl_status="unavailable"),
            row("nccl-ubr", size=4096, p50=None, error="needs --backend nccl (this run: gloo)",
                impl_status="unavailable")]
    table = side_by_side_table(rows)
    assert table.columns == ["size", "c10d µs", "symm-one-shot µs", "fastest", "symm-one-shot vs c10d"]
    assert table.rows == [["1 KiB", "10.0", "5.0", "symm-one-shot", "2.00x"],
                          ["4 KiB", "20.0", "40.0", "c10d", "0.50x"]]
    assert "nccl-ubr unavailable: needs --backend nccl (this run: gloo)" in table.footer
    assert [point.fastest for point in compare_sizes(rows)] == ["symm-one-shot", "c10d"]


def test_out_of_place_the_side_by_side_table_says_which_times_hold_a_copy():
    rows = [row(placement="out-of-place"), row("symm-one-shot", placement="out-of-place", impl_status="ran"),
            row("nccl-symm", placement="out-of-place", impl_status="ran")]
    footer = side_by_side_table(rows).footer
    assert ("out of place: c10d, nccl-symm time a copy of the input into the output and then all_reduce in "
            "place (it works in place); symm-one-shot write the output directly: the difference includes "
            "that copy") in footer
    in_place = [replace(line, placement="in-place") for line in rows]
    assert not any(line.startswith("out of place") for line in side_by_side_table(in_place).footer)
    same_work = [row(placement="out-of-place"), row("nccl-symm", placement="out-of-place")]
    assert not any(line.startswith("out of place") for line in side_by_side_table(same_work).footer)


def test_check_reports_where_implementations_outputs_differ():
    same = [row(output_digest="aa"), row("nccl-symm", output_digest="aa")]
    assert output_differences(same) == []
    lines = output_differences([*same, row("symm-one-shot", output_digest="bb")])
    assert lines == ["--check: all_reduce float32 at 1 KiB sync: outputs differ bitwise between "
                     "c10d+nccl-symm vs symm-one-shot (each within --check's tolerance: they accumulate in "
                     "another order)"]


def test_kernel_names_prove_a_path_or_betray_a_fallback():
    # names as NCCL's generate.py builds them, quoted in PyTorch's symmetric-memory docs
    symm = REGISTRY["nccl-symm"].evidence
    symmetric_kernel = "ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16(ncclSymkDevWorkArgs4K)"
    assert judge_kernels(symm, [symmetric_kernel], 8) == \
        ("verified", "ran ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16")
    assert judge_kernels(symm, ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"],
                         8)[0] == "fallback"
    zero = REGISTRY["cta-zero"].evidence
    assert judge_kernels(zero, ["Memcpy DtoD (Device -> Device)"], 1)[0] == "ran"  # one rank copies anyway
    assert judge_kernels(Evidence(), [], 8) == ("", "")
    # at one rank NCCL launches no kernel for an all-reduce at all, symmetric windows or not
    assert judge_kernels(symm, ["Memcpy DtoD (Device -> Device)"], 1)[0] == "ran"
    assert judge_kernels(symm, ["Memcpy DtoD (Device -> Device)"], 2)[0] == "fallback"


def test_nccl_logs_symmetric_choice_and_registration_refusals():
    log = NcclLog()
    # the line NCCL 2.27+ writes, as PyTorch's symmetric-memory docs quote it
    log.feed("host:1:1 [0] NCCL INFO AllReduce [Symmetric]: 2097152 Bytes -> Kernel "
             "AllReduce_RSxLDMC_AGxSTMC nchannels 16 nthreads 512 nWorks 1")
    log.feed("host:1:1 [0] NCCL INFO register comm 0x55d0 buffer 0x7f00 size 2097152")
    log.feed("host:1:1 [0] NCCL INFO rank 0 failed to NVLS register sendbuff 0x7f00 sendbuffSize 2097152 "
             "recvbuff 0x7f00 recvbuffSize 2097152")
    assert log.path_for("AllReduce", (2097152,)) == ["symmetric: AllReduce_RSxLDMC_AGxSTMC"]
    assert log.path_for("AllGather", (2097152,)) == []
    assert log.registered == 1 and log.refused[0].startswith("rank 0 failed to NVLS register")


def test_files_from_before_impl_load_as_c10d_and_match_new_rows(tmp_path):
    assert "impl" in KEY_FIELDS
    old = {name: value for name, value in asdict(row()).items()
           if not name.startswith(("impl", "kernels", "output_digest"))}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": {}, "rows": [old]}))
    (loaded,) = load_run(path).rows
    assert loaded.impl == "c10d" and loaded.key() == row().key()
    assert Row(**{**old, "impl": ""}).impl == "c10d"  # a CSV's empty cell
