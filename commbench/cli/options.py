"""What the command line says of torchrun's options. Every option commbench offers is declared once, on
a configuration field (config/options.py), with a full long name that is not a prefix of one of
torchrun's options, so options written after `torchrun ... -m commbench` reach commbench (the one
exception is --nproc, which only means something without a launcher; under torchrun use torchrun's
--nproc-per-node).
"""

# torchrun's options a user may type after `-m commbench` by mistake: they must come before it.
TORCHRUN_OPTIONS = {"--nproc-per-node", "--nproc_per_node", "--nnodes", "--node-rank", "--node_rank",
                    "--standalone", "--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint",
                    "--rdzv-id", "--rdzv_id", "--master-addr", "--master_addr", "--master-port",
                    "--master_port", "--max-restarts", "--max_restarts"}


def launcher_option_text(option: str) -> str:
    """Why ``option`` (one of torchrun's) is not commbench's, whoever launched it: a hint to give it
    before -m commbench is right under torchrun, where a hint of --nproc would not be (torchrun takes
    --nproc as an ambiguous prefix of its own options)."""
    spawning = " (without a launcher, commbench spawns --nproc local ranks)" if "nproc" in option else ""
    return (f"{option} is torchrun's option, not commbench's: give it before -m commbench, as in "
            f"`torchrun {option} ... -m commbench ...`{spawning}")
