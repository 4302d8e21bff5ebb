"""Device choice, local ranks, torch's signatures and the memory budget: the rules of the CUDA path that
need no GPU, as pure functions over environment mappings, device counts and signatures."""

import datetime

import pytest
import torch
import torch.distributed as dist

from commbench.backends.torch_dist import barrier_device
from commbench.coordination.startup import init_options, process_group_store
from commbench.core.devices import (
    cpu_budget,
    cuda_budget,
    cuda_ruled_out,
    device_index,
    duplicate_devices,
    local_rank_among,
    local_rank_from,
    mem_available,
    physical_device,
    torch_build,
)
from commbench.errors import UsageError
from commbench.running.launcher import detect

MASTER = {"MASTER_ADDR": "node0", "MASTER_PORT": "29500"}


# --- 1. one GPU per process -------------------------------------------------------------------

@pytest.mark.parametrize("local_rank", range(8))
def test_one_visible_device_is_cuda_0_whatever_the_local_rank(local_rank):
    # srun --gpus-per-task=1, Kubernetes operators: each rank's CUDA_VISIBLE_DEVICES holds its one GPU
    assert device_index(local_rank, device_count=1, rank=8 + local_rank) == 0


def test_several_visible_devices_are_indexed_by_the_local_rank():
    assert [device_index(local, 8, rank=local) for local in range(8)] == list(range(8))
    with pytest.raises(UsageError, match="rank 13 has local rank 5 but sees 4 CUDA devices"):
        device_index(5, 4, rank=13)
    with pytest.raises(UsageError, match="no CUDA device is visible"):
        device_index(0, 0, rank=0)


def test_a_device_shared_by_two_ranks_of_a_host_is_named():
    assert duplicate_devices("node3", "GPU-1234", [5]) is None
    message = duplicate_devices("node3", "GPU-1234", [4, 5])
    assert message.startswith("ranks 4-5 on node3 would share CUDA device GPU-1234")


def test_the_physical_device_is_its_uuid_else_its_visible_entry_else_its_index():
    env = {"CUDA_VISIBLE_DEVICES": "3, GPU-abcd"}
    assert physical_device(env, 0) == "3"
    assert physical_device(env, 1) == "GPU-abcd"
    assert physical_device(env, 0, uuid="GPU-ffff") == "GPU-ffff"
    assert physical_device({}, 2) == "2"
    # two ranks that each see one device, different ones: no clash once named physically
    sixth, seventh = ({"CUDA_VISIBLE_DEVICES": index} for index in ("6", "7"))
    assert physical_device(sixth, 0) != physical_device(seventh, 0)


# --- 2. the local rank ---------------------------------------------------------------------------

def test_cray_mpich_under_srun_takes_slurms_local_rank():
    # PMI_RANK/PMI_SIZE name the rank, but MPI_LOCALRANKID is not set: SLURM_LOCALID is the local rank
    env = {"PMI_RANK": "11", "PMI_SIZE": "16", "SLURM_PROCID": "11", "SLURM_NTASKS": "16",
           "SLURM_LOCALID": "3", "SLURM_STEP_ID": "0", **MASTER}
    info = detect(env)
    assert (info.rank, info.world_size, info.local_rank) == (11, 16, 3)


def test_flux_task_local_id_counts_inside_a_task():
    env = {"PMI_RANK": "5", "PMI_SIZE": "8", "FLUX_TASK_RANK": "5", "FLUX_TASK_LOCAL_ID": "1", **MASTER}
    assert detect(env).local_rank == 1
    assert local_rank_from({"FLUX_TASK_LOCAL_ID": "1"}) is None  # a job shell, not a task


@pytest.mark.parametrize("env, local_rank", [
    ({"LOCAL_RANK": "2", "SLURM_LOCALID": "0", "SLURM_STEP_ID": "0"}, 2),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "4", "MPI_LOCALRANKID": "1"}, 4),
    ({"MPI_LOCALRANKID": "1", "PMI_LOCAL_RANK": "6"}, 1),
    ({"PMI_LOCAL_RANK": "6", "MV2_COMM_WORLD_LOCAL_RANK": "2"}, 6),
    ({"MV2_COMM_WORLD_LOCAL_RANK": "2", "SLURM_LOCALID": "5", "SLURM_STEP_ID": "3"}, 2),
    ({"SLURM_LOCALID": "5", "SLURM_STEP_ID": "3", "FLUX_TASK_LOCAL_ID": "7", "FLUX_TASK_RANK": "1"}, 5),
    ({"SLURM_LOCALID": "0", "SLURM_STEP_ID": "batch"}, None),  # sbatch's own script is no task
    ({}, None),
])
def test_local_rank_precedence(env, local_rank):
    assert local_rank_from(env) == local_rank


def test_no_local_rank_variable_is_none_not_zero():
    info = detect({"PMI_RANK": "3", "PMI_SIZE": "4", **MASTER})
    assert info.local_rank is None
    with pytest.raises(UsageError, match="LOCAL_RANK='x' is not an integer"):
        local_rank_from({"LOCAL_RANK": "x"})


def test_the_derived_local_rank_is_the_rank_order_on_the_host():
    # ranks 2, 5 and 7 reported the same host: 5 is its second rank, whatever order they arrived in
    assert local_rank_among([7, 2, 5], 5) == 1
    assert local_rank_among([2, 5, 7], 2) == 0


# --- 3. device_id only where init_process_group takes it --------------------------------------------

def _init_before_2_3(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                     group_name="", pg_options=None):
    """init_process_group's signature in torch 2.1 and 2.2."""


def _init_since_2_3(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                    group_name="", pg_options=None, device_id=None):
    """init_process_group's signature since torch 2.3."""


def test_device_id_is_passed_only_where_the_signature_accepts_it():
    gpu = torch.device("cuda", 3)
    old = init_options(_init_before_2_3, "nccl", gpu, 10.0)
    new = init_options(_init_since_2_3, "nccl", gpu, 10.0)
    assert "device_id" not in old and new["device_id"] == gpu
    assert "device_id" not in init_options(_init_since_2_3, "gloo", torch.device("cpu"), 10.0)
    # NCCL's own timeout is a backstop beyond --timeout; gloo's is --timeout
    assert new["timeout"] > datetime.timedelta(seconds=10)
    assert init_options(_init_since_2_3, "gloo", torch.device("cpu"), 10.0)["timeout"] == \
        datetime.timedelta(seconds=10)


# --- 4. store keys per restart attempt -------------------------------------------------------------

def test_the_process_groups_keys_are_per_attempt():
    store = dist.HashStore()
    process_group_store(store, "0").set("0/unique_id", "dead attempt's NCCL id")
    restarted = process_group_store(store, "1")
    assert not restarted.check(["0/unique_id"])  # attempt 1 never sees attempt 0's id
    assert process_group_store(store, "0").check(["0/unique_id"])


# --- 5. barriers name their device ------------------------------------------------------------------

def test_a_cuda_barrier_names_its_device():
    assert barrier_device(torch.device("cuda", 5)) == {"device_ids": [5]}
    assert barrier_device(torch.device("cpu")) == {}


# --- memory budget ------------------------------------------------------------------------------

def test_available_memory_from_meminfo_and_the_budgets_made_of_it():
    meminfo = "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n"
    assert mem_available(meminfo) == 20000000 * 1024
    assert mem_available("MemTotal: 1 kB\n") is None
    shared = cpu_budget(mem_available(meminfo), ranks_on_host=2)
    assert shared.limit == int(20000000 * 1024 * 0.9) // 2
    assert "MemAvailable" in shared.describe() and "shared by 2 ranks" in shared.describe()
    assert cpu_budget(None, 2) is None
    gpu = cuda_budget(80 * 1024**3)
    assert gpu.limit == int(80 * 1024**3 * 0.9) and "cudaMemGetInfo" in gpu.describe()


CPU_BUILD = {"cuda": None, "hip": None}
CUDA_BUILD = {"cuda": "13.0", "hip": None}
ROCM_BUILD = {"cuda": None, "hip": "6.4"}
HIDES = "hides every GPU"


def _exists(*paths: str):
    return lambda path: path in paths


@pytest.mark.parametrize("environ, build, present, ruled_out", [
    ({}, CPU_BUILD, (), "torch is a CPU-only build"),
    ({}, CPU_BUILD, ("/dev/nvidiactl",), "torch is a CPU-only build"),
    ({}, CUDA_BUILD, (), "no NVIDIA driver on this machine"),
    ({"CUDA_VISIBLE_DEVICES": ""}, CUDA_BUILD, ("/dev/nvidiactl",), f"CUDA_VISIBLE_DEVICES='' {HIDES}"),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, CUDA_BUILD, ("/dev/nvidia0",), f"CUDA_VISIBLE_DEVICES='-1' {HIDES}"),
    ({"CUDA_VISIBLE_DEVICES": "-1,0"}, CUDA_BUILD, ("/dev/nvidia0",), f"CUDA_VISIBLE_DEVICES='-1,0' {HIDES}"),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, CUDA_BUILD, ("/dev/nvidia0",), None),
    ({}, CUDA_BUILD, ("/proc/driver/nvidia/version",), None),
    ({}, CUDA_BUILD, ("/dev/dxg",), None),  # WSL: torch is asked
    ({}, ROCM_BUILD, (), None),  # ROCm's devices are torch's to count
    ({}, None, (), None),  # a torch whose version.py cannot be read: torch is asked
])
def test_cuda_is_ruled_out_without_torch_only_when_torch_would_say_no(environ, build, present, ruled_out):
    assert cuda_ruled_out(environ, build, _exists(*present)) == ruled_out


def test_the_installed_torchs_build_is_read_from_its_version_file_as_torch_says():
    assert torch_build() == {"cuda": torch.version.cuda, "hip": torch.version.hip}
