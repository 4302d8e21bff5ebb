"""Test hosts on one machine: network namespaces joined by a bridge, each with its own host name.

NetnsCluster(count) makes, under a tag unique to this process and cluster:
- a switch namespace `<tag>-sw` holding the bridge `br0`;
- per host i a namespace `<tag>-h<i>` holding `lo` and one end of a veth pair, `<tag>h<i>`, addressed
  10.213.0.<i+1>/24 (private, and only ever inside these namespaces); the other end, `<tag>s<i>`, is a
  port of the bridge. unslow(i) takes the limit off again.
Nothing is configured in the machine's own namespace. Host i's processes run as
`ip netns exec <tag>-h<i> unshare --uts sh -c 'hostname h<i> && exec "$@"'`, so each sees its own
address, interface and host name, as on separate machines. slow(i, rate) puts a tbf rate limit on both
ends of host i's veth pair (tbf shapes what leaves an interface: both ends slow both directions).

start_ranks runs a rank at a real-time priority (round-robin, REALTIME_PRIORITY), as if each test host
had its CPUs to itself: the hosts share this machine's cores with everything else on it, and at an
ordinary priority a rank woken by a message waits for another task's time slice (a millisecond or more
beside busy processes, where a ping-pong's round trip over a veth takes 0.1 ms), so the ranks would time
the CPU scheduler rather than the links. The ranks block while they wait (they never spin), and the
kernel keeps 5% of every second for ordinary tasks in any case.

teardown() stops the processes the cluster started (by pid), deletes its namespaces (which deletes the
bridge and every veth end inside them) and any veth end left in the machine's namespace by a creation
that failed half-way; it never fails and may run twice. The `netns_cluster` fixture tears down every
cluster it made, whatever the test's outcome. Tests skip, with the reason, where namespaces cannot be
made (not root, no iproute2), and start_ranks where a real-time priority is refused (a container
without a real-time budget).
"""

import functools
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from tests.dist_helpers import ROOT, launcherless_env

SUBNET = "10.213.0"
MASTER_PORT = 29500  # every cluster has its own network namespaces, so no port is shared
REALTIME_PRIORITY = 10  # chrt --rr: above every ordinary task, far below the kernel's own threads
_serial = itertools.count()


class NetnsUnavailable(Exception):
    """Namespaces cannot be made here; the message says why."""


def unavailable_reason() -> str | None:
    """Why this machine cannot host a NetnsCluster, or None when it can (as far as can be seen)."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    missing = [tool for tool in ("ip", "tc", "unshare", "chrt") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (iproute2, util-linux)"
    return None


@functools.cache
def realtime_refused() -> str | None:
    """Why this machine refuses the ranks a real-time priority, or None when it grants one."""
    result = subprocess.run(["chrt", "--rr", str(REALTIME_PRIORITY), "true"], capture_output=True, text=True,
                            timeout=30)
    if result.returncode != 0:
        return (f"a real-time priority is refused here ({result.stderr.strip() or result.returncode}): "
                "at an ordinary priority the test hosts' ranks would time other tasks' time slices")
    return None


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(command)}` failed: {result.stderr.strip()}")


def _quiet(*command: str) -> None:
    subprocess.run(command, capture_output=True, timeout=30)


@dataclass(frozen=True)
class NetnsHost:
    index: int
    hostname: str
    namespace: str
    interface: str  # this host's end of its veth pair
    switch_port: str  # the bridge's end
    address: str


class NetnsCluster:
    def __init__(self, count: int) -> None:
        self.tag = f"cb{os.getpid() % 100000:05d}{next(_serial) % 100:02d}"
        self.switch = f"{self.tag}-sw"
        self.hosts = [NetnsHost(i, f"h{i}", f"{self.tag}-h{i}", f"{self.tag}h{i}", f"{self.tag}s{i}",
                                f"{SUBNET}.{i + 1}") for i in range(count)]
        self.processes: list[subprocess.Popen] = []
        self._namespaces: list[str] = []

    def create(self) -> "NetnsCluster":
        """Make the switch and the hosts; NetnsUnavailable (after cleaning up) when the system refuses."""
        try:
            self._add_namespace(self.switch)
            _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", self.switch, "link", "set", "br0", "up")
            for host in self.hosts:
                self._add_host(host)
        except BaseException:
            self.teardown()
            raise
        return self

    def _add_namespace(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self._namespaces.append(name)

    def _add_host(self, host: NetnsHost) -> None:
        self._add_namespace(host.namespace)
        _run("ip", "link", "add", host.interface, "type", "veth", "peer", "name", host.switch_port)
        _run("ip", "link", "set", host.interface, "netns", host.namespace)
        _run("ip", "link", "set", host.switch_port, "netns", self.switch)
        _run("ip", "-n", self.switch, "link", "set", host.switch_port, "master", "br0", "up")
        _run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.interface)
        _run("ip", "-n", host.namespace, "link", "set", host.interface, "up")
        _run("ip", "-n", host.namespace, "link", "set", "lo", "up")

    def slow(self, index: int, rate: str) -> None:
        """Limit host ``index``'s link to ``rate`` (tc syntax: 200mbit) in both directions."""
        host = self.hosts[index]
        shape = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "100ms"]
        _run("ip", "netns", "exec", host.namespace, "tc", "qdisc", "add", "dev", host.interface, *shape)
        _run("ip", "netns", "exec", self.switch, "tc", "qdisc", "add", "dev", host.switch_port, *shape)

    def unslow(self, index: int) -> None:
        """Take host ``index``'s rate limit off again."""
        host = self.hosts[index]
        _run("ip", "netns", "exec", host.namespace, "tc", "qdisc", "del", "dev", host.interface, "root")
        _run("ip", "netns", "exec", self.switch, "tc", "qdisc", "del", "dev", host.switch_port, "root")

    def command(self, index: int, argv: list[str]) -> list[str]:
        """``argv`` as run on host ``index``: in its namespace, under its own host name."""
        host = self.hosts[index]
        return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "sh", "-c",
                f'hostname {host.hostname} && exec "$@"', "sh", *argv]

    def start(self, index: int, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        proc = subprocess.Popen(self.command(index, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
        self.processes.append(proc)
        return proc

    def teardown(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        for namespace in reversed(self._namespaces):
            _quiet("ip", "netns", "del", namespace)
        self._namespaces.clear()
        for host in self.hosts:  # left in this namespace only when creation stopped half-way
            _quiet("ip", "link", "del", host.interface)


def start_ranks(cluster: NetnsCluster, ranks_per_host: int, args: list[str]) -> list[subprocess.Popen]:
    """`python -m commbench ARGS` as ranks 0..n-1, ``ranks_per_host`` on each host in host order,
    through the environment launcher (RANK, WORLD_SIZE, MASTER_ADDR at host 0, ...), each at a real-time
    priority (the module docstring says why; the test skips where it is refused); gloo talks over each
    host's own interface."""
    refused = realtime_refused()
    if refused is not None:
        pytest.skip(refused)
    world_size = ranks_per_host * len(cluster.hosts)
    procs = []
    for rank in range(world_size):
        host = cluster.hosts[rank // ranks_per_host]
        env = launcherless_env({
            "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank % ranks_per_host),
            "LOCAL_WORLD_SIZE": str(ranks_per_host), "MASTER_ADDR": cluster.hosts[0].address,
            "MASTER_PORT": str(MASTER_PORT), "GLOO_SOCKET_IFNAME": host.interface, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT)})
        command = ["chrt", "--rr", str(REALTIME_PRIORITY), sys.executable, "-m", "commbench", *args]
        procs.append(cluster.start(host.index, command, env))
    return procs


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of every process, in order."""
    outputs = [proc.communicate(timeout=timeout) for proc in procs]
    return [(proc.returncode, *output) for proc, output in zip(procs, outputs, strict=True)]


@pytest.fixture
def netns_cluster() -> Iterator[Callable[[int], NetnsCluster]]:
    """make(count) -> a created NetnsCluster, torn down after the test; skips where none can be made."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    made: list[NetnsCluster] = []

    def make(count: int) -> NetnsCluster:
        cluster = NetnsCluster(count)
        made.append(cluster)
        try:
            return cluster.create()
        except NetnsUnavailable as exc:
            pytest.skip(str(exc))

    try:
        yield make
    finally:
        for cluster in made:
            cluster.teardown()
