"""Two torchrun agents on loopback acting as two nodes of two ranks each.

Each agent is told a different host name (COMMBENCH_HOSTNAME), so the host presets and the per-rank
hostnames see two nodes, as on a cluster. Network namespaces would give each node its own address too,
but need privileges (CAP_NET_ADMIN, or unprivileged user namespaces) that CI runners do not grant.
"""

import json
import subprocess
import sys

import pytest

from commbench.running.spawn import free_port
from tests.dist_helpers import ROOT, launcherless_env

pytestmark = pytest.mark.processes


def _two_agents(rendezvous: list[str], args: list[str], tmp_path) -> list[dict]:
    """Run both agents to the end; the payload of the one JSON file written (by global rank 0)."""
    procs = []
    for node in (0, 1):
        env = launcherless_env({"COMMBENCH_HOSTNAME": f"node-{node}"})
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
                   *(part.format(node=node) for part in rendezvous), "-m", "commbench", *args,
                   "--output-dir", str(tmp_path / f"out-{node}")]
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env, cwd=ROOT, stdin=subprocess.DEVNULL))
    outputs = [proc.communicate(timeout=180) for proc in procs]
    for proc, (_, stderr) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, stderr
    files = sorted(tmp_path.glob("out-*/*/results.json"))
    assert len(files) == 1  # only global rank 0 writes
    return json.loads(files[0].read_text())


RENDEZVOUS = {
    # c10d: the agents pick node ranks among themselves, and one of them hosts the store
    "c10d": ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:{port}", "--rdzv-id", "cb-two-nodes"],
    # static: node ranks given, node 0 hosts the store at the master address
    "static": ["--node-rank", "{node}", "--master-addr", "127.0.0.1", "--master-port", "{port}"],
}


@pytest.mark.parametrize("rendezvous, groups", [
    ("c10d", ["--groups", "inter-node"]),
    ("static", ["--group-size", "2", "--group-layout", "strided"]),
], ids=["c10d-inter-node", "static-strided"])
def test_two_nodes_on_loopback(tmp_path, rendezvous, groups):
    port = str(free_port())
    flags = [part.replace("{port}", port) for part in RENDEZVOUS[rendezvous]]
    payload = _two_agents(flags, ["--collective", "all_reduce,all_gather_base", "--sizes", "4K,64K",
                                  "--iters", "3", "--warmup", "1", "--timeout", "60", *groups], tmp_path)
    meta = payload["meta"]
    assert meta["status"] == "complete" and meta["launcher"] == "torchrun" and meta["world_size"] == 4
    hostnames = meta["hostnames"]
    assert sorted(hostnames) == ["node-0", "node-0", "node-1", "node-1"]
    assert hostnames[0] == hostnames[1] and hostnames[2] == hostnames[3]  # torchrun numbers ranks by node
    members = meta["groups"]["members"]
    assert meta["groups"]["count"] == 2 and meta["groups"]["size"] == 2
    for ranks in members:  # strided over 2 ranks per node is one rank per node too
        assert sorted(hostnames[r] for r in ranks) == ["node-0", "node-1"]
    assert {row["collective"] for row in payload["rows"]} == {"all_reduce", "all_gather_base"}
    for row in payload["rows"]:
        assert row["group_size"] == 2 and row["group_count"] == 2
        assert len(row["rank_skew_us"]) == 4
