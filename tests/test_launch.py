"""Rank, world and local-rank detection from each launcher's variables."""

import pytest

from commbench.errors import UsageError
from commbench.running.launcher import detect

MASTER = {"MASTER_ADDR": "node0", "MASTER_PORT": "29500"}


def test_no_launcher_means_spawn():
    assert detect({"PATH": "/usr/bin"}) is None


def test_torchrun():
    info = detect({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "x", **MASTER})
    assert (info.rank, info.world_size, info.local_rank, info.launcher) == (3, 8, 1, "torchrun")
    assert (info.master_addr, info.master_port) == ("node0", 29500)


def test_open_mpi():
    info = detect({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16",
                   "OMPI_COMM_WORLD_LOCAL_RANK": "5", **MASTER})
    assert (info.rank, info.world_size, info.local_rank, info.launcher) == (5, 16, 5, "mpirun")


def test_pmi():
    info = detect({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", **MASTER})
    assert (info.rank, info.world_size, info.local_rank) == (2, 4, 0)


def test_srun_task():
    info = detect({"SLURM_PROCID": "7", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3", "SLURM_STEP_ID": "0",
                   **MASTER})
    assert (info.rank, info.world_size, info.local_rank, info.launcher) == (7, 8, 3, "srun")


def test_slurm_batch_script_is_not_a_rank():
    # Inside sbatch, without srun, the SLURM_* variables describe the job, not this process.
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0"}) is None
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_STEP_ID": "4294967294"}) is None


def test_torchrun_wins_over_slurm_variables():
    info = detect({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "SLURM_PROCID": "0",
                   "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0", **MASTER})
    assert (info.rank, info.world_size) == (1, 2)


def test_missing_master_address_says_what_to_set():
    with pytest.raises(UsageError, match="MASTER_ADDR and MASTER_PORT are not: export MASTER_ADDR="):
        detect({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
    with pytest.raises(UsageError, match="MASTER_PORT is not"):
        detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "1", "MASTER_ADDR": "n0"})


def test_mpi_backend_needs_no_master_address():
    info = detect({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, backend="mpi")
    assert info.world_size == 2


def test_inconsistent_variables_are_rejected():
    with pytest.raises(UsageError, match="does not fit"):
        detect({"RANK": "4", "WORLD_SIZE": "2", **MASTER})
    with pytest.raises(UsageError, match="not an integer"):
        detect({"RANK": "zero", "WORLD_SIZE": "2", **MASTER})
