#!/usr/bin/env bash
# The prepared GPU check: what commbench's CUDA path must do right on a real device, in at most 10 minutes
# on one GPU (each step one process unless it says otherwise).
#
#   scripts/gpu_check.sh [OUTDIR]      (default: gpu_check_out; PYTHON=... picks the interpreter;
#                                       GPU_CHECK_STEPS="correctness premul" runs only those steps)
#
# Steps (docs/performance.md#the-gpu-check says what each shows and what one GPU cannot test):
#   devices-env     local ranks from launcher variables (CPU too); on CUDA, real runs with one visible
#                   device, Cray MPICH under srun, no local-rank variable, and two ranks on one device
#   memory-window   the async window capped by torch's temporaries (gloo on CPU); on CUDA, measured
#                   allocator growth of a window of list all_gathers, the cache emptied between sizes,
#                   the default budget from cudaMemGetInfo
#   correctness     every collective x float32/bfloat16/float16 x sum/avg/max, --check, both modes and
#                   placements; then float8 (refusals allowed, wrong values not)
#   premul          premul_sum with --check: wrong exactly where plain torch is (scripts/premul_probe.py)
#   graphs          CUDA graphs of every capturable collective with --check; the barrier's error row
#   latency         small all_reduces: device time with the launch hidden, host-observed, and graphed
#   torchrun        one rank under torchrun
#   fsdp            the FSDP pattern with --check --overlap
#   impl            every implementation (--impl all) on every GPU (up to 8) with --check, --profile-kernels
#                   and --nccl-debug: every row printed and kept in impl-rows.tsv (what ran, its kernels,
#                   each refusal's reason); none may fail or hold wrong values
#   parity          NCCL at one rank: --per-iteration's blocks, --buffers and --misalign with --check,
#                   --flush-cache over the L2, --memory (device memory outside torch's allocator, the
#                   start's readings), --with-compute's two slowdowns and --concurrent's communicators
#   cuda-tests      the test suite's CUDA-only tests (from a checkout), CUDA kept visible
# Writes every JSON and log to OUTDIR; exits 1 when any step failed. Without CUDA the CUDA steps print
# "skip" and the script still runs what the CPU can check.

set -u -o pipefail

OUT=${1:-gpu_check_out}
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
failed=()
started=$(date +%s)

run_step() {  # run_step NAME SECONDS FUNCTION: its output goes to OUT/NAME.log; killed at SECONDS
    local name=$1 limit=$2 function=$3
    if [ -n "${GPU_CHECK_STEPS:-}" ] && [[ " $GPU_CHECK_STEPS " != *" $name "* ]]; then
        return 0  # not among the steps asked for
    fi
    echo "== $name"
    if timeout --kill-after=10 "$limit" bash -c "$function" >"$OUT/$name.log" 2>&1; then
        echo "ok   $name"
    else
        echo "FAIL $name (exit $?; see $OUT/$name.log)"
        tail -n 5 "$OUT/$name.log" | sed 's/^/     /'
        failed+=("$name")
    fi
}

skip() {
    echo "skip $1: needs a CUDA device ($2)"
}

if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    CUDA=1
    echo "CUDA: $("$PY" -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)')"
else
    CUDA=0
    echo "no CUDA device: running the CPU-checkable steps only"
fi

commbench() { "$PY" -m commbench --output-dir "$OUT/runs" "$@"; }
free_port() { "$PY" -c "from commbench.running.spawn import free_port; print(free_port())"; }

# --- devices-env: local ranks and device choice through real environment variables -----------------
devices_env() {
    # Cray MPICH under srun: PMI_* name the rank, SLURM_LOCALID the local rank (no MPI_LOCALRANKID);
    # with no local-rank variable at all it is derived from the host names, never guessed as 0
    env -i PATH="$PATH" PYTHONPATH="${PYTHONPATH:-}" PMI_RANK=3 PMI_SIZE=4 SLURM_PROCID=3 SLURM_NTASKS=4 \
        SLURM_LOCALID=3 SLURM_STEP_ID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$PY" -c "
import os
from commbench.running.launch import detect
info = detect(os.environ)
assert (info.rank, info.local_rank) == (3, 3), info
del os.environ['SLURM_LOCALID']
assert detect(os.environ).local_rank is None
print('PMI under srun: local rank 3 from SLURM_LOCALID; without it, none (from host names)')" || return 1
    [ "$CUDA" = 1 ] || return 0
    local port
    # one visible device is cuda:0 whatever the local rank (srun --gpus-per-task=1)
    port=$(free_port)
    CUDA_VISIBLE_DEVICES=0 RANK=0 WORLD_SIZE=1 LOCAL_RANK=5 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        commbench --backend nccl --sizes 1K --iters 3 --json "$OUT/devices-one-visible.json" || return 1
    # Cray MPICH under srun, for real
    port=$(free_port)
    PMI_RANK=0 PMI_SIZE=1 SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 SLURM_STEP_ID=0 \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        commbench --backend nccl --sizes 1K --iters 3 --json "$OUT/devices-pmi-srun.json" || return 1
    # no local-rank variable at all: the rank's place on its host
    port=$(free_port)
    PMI_RANK=0 PMI_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        commbench --backend nccl --sizes 1K --iters 3 --json "$OUT/devices-derived.json" || return 1
    # two ranks on one device: exit 2 and one line naming both, before NCCL starts (two processes)
    port=$(free_port)
    local pids=() rank status=0
    for rank in 0 1; do
        CUDA_VISIBLE_DEVICES=0 RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port commbench --backend nccl --sizes 1K --iters 3 --timeout 60 \
            >"$OUT/devices-shared.$rank.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[0]}" || status=$?
    wait "${pids[1]}" || true
    cat "$OUT"/devices-shared.*.log
    [ "$status" = 2 ] && grep -q "ranks 0-1 on .* would share CUDA device" "$OUT/devices-shared.0.log"
}

# --- memory-window: torch's temporaries counted, the window capped, the cache emptied ---------------
memory_window() {
    # gloo (CPU): 1 MiB all_gather on 2 ranks holds 1.5 MiB of buffers and 1 MiB per op in flight
    commbench --backend gloo --device cpu --nproc 2 --collective all_gather --sizes 1M --mode async \
        --iters 8 --max-memory 4M --json "$OUT/memory-window-cpu.json" || return 1
    "$PY" - "$OUT/memory-window-cpu.json" <<'EOF' || return 1
import json, sys
(row,) = json.load(open(sys.argv[1]))["rows"]
assert (row["iters"], row["samples"]) == (8, 4), row
print("gloo: 8 async ops in 4 windows of 2 within --max-memory 4M")
EOF
    # the same objects' calls on one rank: on CPU (gloo) that they still fit together; on CUDA the
    # allocator's growth, the emptied cache and the budget's source (scripts/gpu_memory_check.py)
    "$PY" "$HERE/gpu_memory_check.py" --device "$([ "$CUDA" = 1 ] && echo cuda || echo cpu)"
}

# --- correctness, graphs, latency, torchrun, fsdp (CUDA only) ------------------------------------
correctness() {
    commbench --backend nccl --nproc 1 --collective all --dtype float32,bfloat16,float16 \
        --op sum,avg,max --mode both --placement both --check --sizes 1K,1M --iters 3 \
        --warmup 1 --json "$OUT/correctness.json" || return 1
    local status=0
    commbench --backend nccl --nproc 1 --collective all --dtype float8_e4m3fn,float8_e5m2 \
        --op sum,avg,max --mode both --check --sizes 1K --iters 3 --warmup 1 \
        --json "$OUT/correctness-float8.json" || status=$?
    [ "$status" -le 1 ] || return 1  # 1: some rows refused by this NCCL; 2 or a signal: broken
    "$PY" - "$OUT/correctness-float8.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert not [row for row in rows if row["wrong"]], "float8 rows with wrong values"
refused = sorted({row["error"] for row in rows if row["error"]})
print(f"float8: {len(rows)} rows, {sum(1 for row in rows if not row['error'])} ran, refusals: {refused}")
EOF
}

premul() {
    # premul_sum is right or wrong in torch and NCCL themselves (torch 2.11 hands NCCL a 4-byte float
    # factor for bfloat16, pytorch/pytorch#190745): commbench's --check must find wrong exactly the
    # collectives and dtypes that plain torch gets wrong (scripts/premul_probe.py), and no others
    "$PY" "$HERE/premul_probe.py" --nproc 1 --json "$OUT/premul-probe.json" || return 1
    local status=0
    commbench --backend nccl --nproc 1 \
        --collective all_reduce,reduce,reduce_scatter,reduce_scatter_base,reduce_scatter_v \
        --dtype float32,bfloat16,float16 --op premul_sum --mode both --placement both --check \
        --sizes 1K,1M --iters 3 --warmup 1 --json "$OUT/premul.json" || status=$?
    [ "$status" -le 1 ] || return 1
    "$PY" - "$OUT/premul.json" "$OUT/premul-probe.json" "$status" <<'EOF'
import json, os, sys
from runpy import run_path
rows = json.load(open(sys.argv[1]))["rows"]
probe = json.load(open(sys.argv[2]))
plain = run_path(os.path.join(os.environ["HERE"], "premul_probe.py"))["COMMBENCH_CALLS"]
disagree, stack = [], set()
for row in rows:
    key = f"{plain[row['collective']]} {row['dtype']}"
    torch_wrong, ours_wrong = probe[key]["wrong"] > 0, bool(row["wrong"])
    assert not row["error"], row["error"]
    if torch_wrong != ours_wrong:
        disagree.append(f"{row['collective']} {row['dtype']} {row['placement']} {row['mode']}: "
                        f"commbench {'wrong' if ours_wrong else 'right'}, "
                        f"plain torch {'wrong' if torch_wrong else 'right'}")
    elif torch_wrong:
        stack.add(key)
assert not disagree, "\n".join(disagree)
assert (int(sys.argv[3]) == 1) == bool(stack), "exit status and wrong rows disagree"
print(f"premul_sum: {len(rows)} rows agree with plain torch; wrong in torch/NCCL itself: "
      f"{', '.join(sorted(stack)) or 'none'}")
EOF
}

graphs() {
    local status=0
    commbench --backend nccl --nproc 1 --collective all --cuda-graph 3 --iters 4 --check \
        --sizes 1K,64K --json "$OUT/graphs.json" || status=$?
    [ "$status" = 1 ] || return 1  # the barrier's error row makes the run exit 1
    "$PY" - "$OUT/graphs.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
errors = {row["collective"]: row["error"] for row in rows if row["error"]}
assert list(errors) == ["barrier"] and "CUDA graph" in errors["barrier"], errors
assert not [row for row in rows if row["wrong"]], "graphed rows with wrong values"
print(f"{len(rows)} graphed rows checked; barrier: {errors['barrier']}")
EOF
}

latency() {
    commbench --backend nccl --nproc 1 --collective all_reduce --sizes 8:64K:x8 --iters 200 --warmup 20 \
        --json "$OUT/latency.json" || return 1
    commbench --backend nccl --nproc 1 --collective all_reduce --sizes 8:64K:x8 --iters 20 --cuda-graph 20 \
        --json "$OUT/latency-graph.json" || return 1
    "$PY" - "$OUT/latency.json" "$OUT/latency-graph.json" <<'EOF'
import json, sys
eager, graphed = ({row["size_bytes"]: row for row in json.load(open(path))["rows"]} for path in sys.argv[1:])
print(f"{'size':>8} {'device, launch hidden':>22} {'host-observed':>14} {'graph replay':>13}  (p50 us)")
for size, row in eager.items():
    device, host, graph = row["time_us_p50"], row["host_time_us_p50"], graphed[size]["time_us_p50"]
    print(f"{size:>8} {device:>22.2f} {host:>14.2f} {graph:>13.2f}")
    assert device <= host, "device time with the launch hidden above what the host saw"
EOF
}

torchrun_one() {
    "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 -m commbench --backend nccl \
        --sizes 1K:1M --iters 5 --output-dir "$OUT/runs" --json "$OUT/torchrun.json"
}

fsdp() {
    "$PY" -m commbench pattern fsdp --output-dir "$OUT/runs" --model tiny --check --overlap --nproc 1 \
        --backend nccl --json "$OUT/fsdp.json"
}

impl_step() {
    # every implementation on every visible GPU (up to 8): what runs, what it ran (kernel names, NCCL's
    # log), each refusal's reason; the symm-* and nvshmem-a2av sets run in rank processes of their own.
    # Every row is printed and kept (impl-rows.tsv); no row may hold wrong values or fail
    local status=0 nproc
    nproc=$("$PY" -c "import torch; print(max(1, min(8, torch.cuda.device_count())))")
    commbench --backend nccl --nproc "$nproc" \
        --collective all_reduce,all_gather_base,reduce_scatter_base,all_to_all_single,all_to_allv \
        --dtype float32,bfloat16 --placement both --sizes 4K,1M --impl all --check --profile-kernels \
        --nccl-debug --iters 5 --warmup 1 --json "$OUT/impl.json" || status=$?
    "$PY" - "$OUT/impl.json" "$status" "$OUT/impl-rows.tsv" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
fields = ["impl", "collective", "dtype", "placement", "size_bytes", "mode", "impl_status", "time_us_p50",
          "impl_init_ms", "impl_register_ms", "error", "impl_note", "kernels"]
with open(sys.argv[3], "w") as table:
    table.write("\t".join(fields) + "\n")
    for row in rows:
        table.write("\t".join("" if row.get(field) is None else str(row[field]) for field in fields) + "\n")
for row in rows:
    p50 = "-" if row["time_us_p50"] is None else f"{row['time_us_p50']:.1f} us"
    said = row["error"] or row["impl_note"] or ""
    print(f"{row['impl']:<15} {row['collective']:<20} {row['dtype']:<9} {row['placement']:<13} "
          f"{row['size_bytes']:>8} {row['mode']:<5} {row['impl_status'] or '-':<11} {p50:>10}  {said[:110]}")
    if row["kernels"]:
        print(f"{'':<15} kernels: {row['kernels'][:140]}")
failed = [row for row in rows if row["error"] and row["impl_status"] != "unavailable"]
wrong = [row for row in rows if row["wrong"]]
print(f"{len(rows)} rows: {sum(row['time_us_p50'] is not None for row in rows)} measured, "
      f"{sum(row['impl_status'] == 'unavailable' for row in rows)} unavailable, {len(failed)} failed, "
      f"{len(wrong)} wrong")
assert not wrong, f"{len(wrong)} rows with wrong values, first: {wrong[0]['impl']} {wrong[0]['collective']}"
assert not failed, f"{len(failed)} rows failed, first: {failed[0]['impl']} {failed[0]['error']}"
assert int(sys.argv[2]) == 0, f"exit status {sys.argv[2]}"
EOF
}

parity_step() {
    # what nccl-tests' -I/-M/-u/-S and rccl-tests' -R/-F measure, and contention, on NCCL at one rank
    local status=0
    commbench --backend nccl --nproc 1 --collective all_reduce,all_gather_base --sizes 64K,16M --iters 20 \
        --warmup 2 --per-iteration --buffers 4 --misalign 16 --flush-cache --memory --check \
        --json "$OUT/parity.json" --csv "$OUT/parity.csv" || status=$?
    commbench --backend nccl --nproc 1 --collective all_reduce --sizes 64M --iters 10 --warmup 2 \
        --with-compute 4096 --concurrent 2 --memory --check --json "$OUT/parity-compute.json" \
        --csv "$OUT/parity-compute.csv" || status=$?
    commbench iterations "$OUT/parity.json" || status=$?
    "$PY" - "$OUT/parity.json" "$OUT/parity-compute.json" "$status" <<'EOF'
import sys
import torch
from commbench.results.iterations import Iterations
from commbench.results.saved import load_run
cold, beside = load_run(sys.argv[1]), load_run(sys.argv[2])
l2 = torch.cuda.get_device_properties(0).L2_cache_size
for row in cold.rows:
    found = Iterations.of(row)
    print(f"{row.collective} {row.size_bytes} B: p50 {row.time_us_p50} us, CV {row.time_us_cv:.3f}, first op "
          f"{row.first_op_us} us; buffers {row.mem_user_bytes} B, beside {row.mem_internal_bytes} B "
          f"(library {row.mem_library_bytes} B); flushed {row.flush_bytes} B; {row.measured_from} .. {row.measured_to}")
    assert found is not None and found.times.shape == (1, row.samples), "per-iteration block"
    assert (row.buffer_sets, row.misalign, row.flush_bytes) == (4, 16, l2), "cold buffers"
    assert row.wrong == 0, f"{row.wrong} wrong elements with --buffers 4 --misalign 16"
    assert row.mem_user_bytes >= 4 * row.size_bytes + l2 and row.mem_library_bytes is not None, "memory"
start = cold.meta["memory"]["start"][0]
print(f"start: device used {start['device_used_before_bytes']} -> {start['device_used_after_bytes']} B, "
      f"RSS {start['host_rss_before_bytes']} -> {start['host_rss_after_bytes']} B")
assert start["device_used_after_bytes"] > start["device_used_before_bytes"], "NCCL's communicator took nothing"
for row in beside.rows:
    print(f"communicator {row.communicator}: {row.time_us_p50} us beside, {row.alone_us_p50} us alone "
          f"({row.slowdown}x); matmul {row.compute_us} us beside, {row.compute_alone_us} us alone "
          f"({row.compute_slowdown}x); library {row.mem_library_bytes} B")
    assert row.slowdown and row.compute_slowdown and row.compute_alone_us > 0 and row.wrong == 0
assert [row.communicator for row in beside.rows] == [0, 1], "two communicators"
assert int(sys.argv[3]) == 0, f"exit status {sys.argv[3]}"
EOF
}

cuda_tests() {
    # the suite's CUDA-only tests (the suite hides CUDA unless COMMBENCH_TEST_CUDA=1: tests/conftest.py)
    [ -d "$HERE/../tests" ] || { echo "no tests/ beside scripts/: not a checkout"; return 0; }
    (cd "$HERE/.." && COMMBENCH_TEST_CUDA=1 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" \
        tests/test_correctness.py::test_nccl_premul_sum_and_uneven_lists \
        tests/test_list.py::test_list_probes_nccl_on_cuda \
        tests/test_parity_rules.py::test_a_size_account_on_cuda_splits_torch_and_memory_outside_its_allocator)
}

export OUT PY CUDA HERE
export -f commbench free_port devices_env memory_window correctness premul graphs latency torchrun_one fsdp \
    impl_step parity_step cuda_tests
run_step devices-env 120 devices_env
run_step memory-window 120 memory_window
if [ "$CUDA" = 1 ]; then
    run_step correctness 200 correctness
    run_step premul 120 premul
    run_step graphs 60 graphs
    run_step latency 60 latency
    run_step torchrun 45 torchrun_one
    run_step fsdp 60 fsdp
    run_step impl 300 impl_step
    run_step parity 120 parity_step
    run_step cuda-tests 150 cuda_tests
else
    skip correctness "every collective x dtype x op with --check on NCCL"
    skip premul "premul_sum's wrong rows against plain torch's (scripts/premul_probe.py)"
    skip graphs "CUDA graphs of the capturable collectives, the barrier's error row"
    skip latency "device time with the launch hidden against host-observed and graphed"
    skip torchrun "one NCCL rank under torchrun"
    skip fsdp "the FSDP pattern on NCCL with --check --overlap"
    skip impl "every implementation on every GPU: every row, its kernels, each refusal's reason"
    skip parity "--per-iteration, --buffers, --flush-cache, --memory and --with-compute on NCCL at one rank"
    skip cuda-tests "the suite's CUDA-only tests, with COMMBENCH_TEST_CUDA=1"
    skip "devices-env (CUDA part)" "one visible device, PMI under srun, derived local rank, shared device"
    skip "memory-window (CUDA part)" "allocator growth of an async window, empty_cache, cudaMemGetInfo"
fi

echo "took $(( $(date +%s) - started )) s; outputs in $OUT"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all steps passed"
