"""NCCL's own account of a run: its INFO log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,TUNING,COLL,REG) read
into what it chose for each collective call: algorithm, protocol, channels and transport.

Invariants: parsing never raises, whatever the text; one NcclLog reads the log of one process (one
NCCL_DEBUG_FILE), in order; every line is either recognised (counted by kind) or ignored (counted: an
NCCL INFO line of a kind not listed in docs/provenance.md, or a line NCCL did not write); what the log
does not say is left empty, never guessed.

The formats, as NCCL's src/enqueue.cc and src/init.cc write them (fixtures: tests/data/nccl):
- COLL, every version: ``AllReduce: opCount 1a sendbuff 0x.. recvbuff 0x.. count 64 datatype 7 op 0 root 0
  comm 0x.. [nranks=2] stream 0x..`` (Send and Recv too).
- TUNING, on the communicator's rank 0 only: 2.20-2.22 ``1024 Bytes -> Algo 0 proto 0 time 25.33``;
  2.23-2.24 the same after ``AllReduce: ``; 2.25 on ``AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE
  channel{Lo..Hi}={0..31}``. Before 2.20 NCCL logs no choice at INFO level.
- INIT: ``32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, ...``; ring lines
  ``Channel 00/32 :    0   1   2``; connections ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read`` (older:
  ``Channel 00 : ...``), ``[send] via NET/IB/0/GDRDMA``; ``ncclCommInitRank comm 0x.. rank 0 nranks 8 ...
  - Init START`` / ``- Init COMPLETE``; ``comm 0x.. rank 0 nRanks 2 nNodes 2 ...``; ``NCCL version 2.21.5``.
"""

import re
from collections import Counter
from dataclasses import dataclass, field

# NCCL's enums, by index (src/include/nccl_common.h, nccl.h); newer logs spell the names out.
ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
PROTOCOLS = ("LL", "LL128", "SIMPLE")
DATATYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
             "float32": 7, "float64": 8, "bfloat16": 9, "float8_e4m3fn": 10, "float8_e5m2": 11}
TYPE_BYTES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}  # by datatype code
POINT_TO_POINT = ("Send", "Recv")

_INFO = " NCCL INFO "
_COLL = re.compile(r"^(?P<func>[A-Za-z]+): opCount (?P<op>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
                   r"count (?P<count>\d+) datatype (?P<datatype>\d+) op \d+ root \d+ "
                   r"comm (?P<comm>\S+) \[nranks=(?P<nranks>\d+)\]")
_TUNING = re.compile(r"^(?:(?P<func>[A-Za-z]+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) "
                     r"proto (?P<proto>\w+)(?: time [\d.]+)?"
                     r"(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?")
_CHANNEL_COUNTS = re.compile(r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?"
                             r"(?:(?P<nvls>\d+) nvls channels, )?\d+ p2p channels")
_RING = re.compile(r"^Channel \d+/(?P<channels>\d+) :(?P<ranks>(?:\s+\d+)+)\s*$")
_CONNECTION = re.compile(r"^Channel \d+(?:/\d+)? : \d+\[[0-9a-fA-F]+\] -> \d+\[[0-9a-fA-F]+\]"
                         r"(?: \[(?:send|receive)\])? via (?P<via>\S.*?)\s*$")
_INIT = re.compile(r"comm (?P<comm>0x[0-9a-fA-F]+) rank \d+ nranks (?P<nranks>\d+) .* - Init "
                   r"(?P<phase>START|COMPLETE)")
_COMM_SHAPE = re.compile(r"^comm (?P<comm>0x[0-9a-fA-F]+) rank \d+ nRanks (?P<nranks>\d+) nNodes")
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+\S*)")
# REG and TUNING lines of the paths --impl asks for (register.cc, p2p.cc, nvls.cc from 2.19; the
# symmetric scheduler's line from 2.27; the copy engine's from 2.29)
_PATH = re.compile(r"^(?P<func>[A-Za-z]+) \[(?P<path>Symmetric|Copy Engine|Hierarchical CE)\]: "
                   r"(?P<bytes>\d+) Bytes -> (?P<what>.+?)\s*$")
_REFUSED = re.compile(r"failed to (?:NVLS |IPC |NET )?register|Skipping (?:graph )?registration")
_REGISTERED = re.compile(r"^register comm \S+ buffer|successfully registered NVLS|IPC register buffer|"
                         r"NET register userbuff")


@dataclass
class Call:
    """One collective call as its COLL line gave it, with the choice the tuning line after it made."""

    func: str
    count: int
    datatype: int
    nranks: int
    comm: str
    algorithm: str = ""
    protocol: str = ""
    channels: int | None = None


@dataclass(frozen=True)
class Tuning:
    """One tuning line: the choice NCCL made for a call of ``nbytes`` (``func`` None before 2.23)."""

    func: str | None
    nbytes: int
    algorithm: str
    protocol: str
    channels: int | None  # 2.25 on: channel{Lo..Hi} gives how many the call used

    def fits(self, call: Call) -> bool:
        """Whether this line can be ``call``'s: same function, and bytes that are the call's per-rank or
        total bytes (which one depends on the NCCL version and function)."""
        if self.func not in (None, call.func):
            return False
        size = TYPE_BYTES.get(call.datatype)
        return size is None or self.nbytes in (call.count * size, call.count * size * call.nranks)


def parse_tuning(message: str) -> Tuning | None:
    """A TUNING line's message (after 'NCCL INFO '), or None when it is not one."""
    found = _TUNING.match(message)
    if found is None:
        return None
    channels = None if found["lo"] is None else int(found["hi"]) - int(found["lo"]) + 1
    return Tuning(found["func"], int(found["bytes"]), _name(found["algo"], ALGORITHMS),
                  _name(found["proto"], PROTOCOLS), channels)


@dataclass
class CallGroup:
    """The calls of one (function, count, datatype, communicator size): how many, the choices their
    tuning lines gave, and the communicators they ran on (in the order first seen). Calls are counted,
    not kept, so a long run's log costs memory per distinct call, not per call."""

    calls: int = 0
    choices: Counter[tuple[str, str, int | None]] = field(default_factory=Counter)
    comms: dict[str, None] = field(default_factory=dict)


@dataclass
class Comm:
    """What the INIT lines said about one communicator."""

    nranks: int | None = None
    coll_channels: int | None = None
    collnet_channels: int | None = None
    nvls_channels: int | None = None
    ring_channels: int | None = None
    transports: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Choice:
    """What NCCL chose for one row: '' or None where the log does not say."""

    algorithm: str
    protocol: str
    channels: int | None
    transport: str


def transport_name(via: str) -> str:
    """'P2P/IPC/read' -> 'P2P/IPC', 'NET/IB/0/GDRDMA' -> 'NET/IB', 'SHM/direct/direct' -> 'SHM'."""
    parts = via.split("/")
    if parts[0] in ("P2P", "NET") and len(parts) > 1:
        return f"{parts[0]}/{parts[1].removesuffix(' pointer')}"
    return parts[0]


def _name(value: str, names: tuple[str, ...]) -> str:
    if value.isdigit():
        index = int(value)
        return names[index] if index < len(names) else value
    return value.upper()


class NcclLog:
    """One process's NCCL log, fed line by line (``feed``) or as text; ``choice`` answers per row."""

    def __init__(self) -> None:
        self.version = ""
        self.counts: Counter[str] = Counter()  # recognised lines by kind, plus 'ignored' and 'not_nccl'
        self.comms: dict[str, Comm] = {}
        self._groups: dict[tuple[str, int, int, int], CallGroup] = {}
        self._recent: list[Call] = []  # the calls a later tuning line may still belong to, oldest first
        self._current: str | None = None  # the communicator that facts without a name belong to
        self._current_running = False  # the current one was named by a call, not by its init
        self.unattributed = Comm()  # facts seen before the init line that names their communicator
        self.paths: Counter[tuple[str, int, str]] = Counter()  # (function, bytes, path) of [Symmetric] ...
        self.registered = 0  # buffers NCCL said it registered
        self.refused: list[str] = []  # the first registrations NCCL refused, as it said it

    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            self.feed(line)

    def feed(self, line: str) -> None:
        version = _VERSION.search(line)
        if version:
            self.version = version["version"]
            self.counts["version"] += 1
            return
        # After host:pid:tid [dev] and whatever a launcher puts in front, or alone at the line's start.
        _, marker, message = f" {line}".partition(_INFO)
        if not marker:
            self.counts["not_nccl"] += 1
            return
        kind = self._read(message.strip())
        self.counts[kind or "ignored"] += 1

    def _read(self, message: str) -> str | None:
        readers = (("coll", _COLL, self._call), ("tuning", _TUNING, self._tuning),
                   ("channels", _CHANNEL_COUNTS, self._channel_counts), ("ring", _RING, self._ring),
                   ("connection", _CONNECTION, self._connection), ("comm", _COMM_SHAPE, self._comm_shape))
        for kind, pattern, handle in readers:
            found = pattern.match(message)
            if found:
                handle(found)
                return kind
        init = _INIT.search(message)
        if init:
            self._init(init)
            return "comm"
        return self._path_or_registration(message)

    def _path_or_registration(self, message: str) -> str | None:
        path = _PATH.match(message)
        if path:
            kind = "symmetric" if path["path"] == "Symmetric" else "copy-engine"
            what = path["what"].split(" nchannels")[0].removeprefix("Kernel ")
            self.paths[(path["func"], int(path["bytes"]), f"{kind}: {what}")] += 1
            return "path"
        if _REFUSED.search(message):
            if len(self.refused) < 3:
                self.refused.append(message)
            return "registration_refused"
        if _REGISTERED.search(message):
            self.registered += 1
            return "registration"
        return None

    def path_for(self, func: str, nbytes: tuple[int, ...]) -> list[str]:
        """The special paths ([Symmetric] kernels, copy engines) NCCL logged for ``func`` at any of
        ``nbytes``, most frequent first."""
        found = Counter({path: count for (name, size, path), count in self.paths.items()
                         if name == func and size in nbytes})
        return [path for path, _ in found.most_common()]

    # --- collective calls and their tuning --------------------------------------------------------
    def _call(self, found: re.Match) -> None:
        call = Call(found["func"], int(found["count"]), int(found["datatype"]), int(found["nranks"]),
                    found["comm"])
        group = self._group(call)
        group.calls += 1
        group.comms[call.comm] = None
        self.comms.setdefault(call.comm, Comm(nranks=call.nranks))
        self._current, self._current_running = call.comm, True
        if call.func not in POINT_TO_POINT:
            self._recent = [*self._recent[-63:], call]

    def _tuning(self, found: re.Match) -> None:
        """A tuning line belongs to the latest call before it that it fits and that has no choice yet."""
        tuning = parse_tuning(found.group(0))
        for call in reversed(self._recent):
            if tuning is not None and tuning.fits(call):
                call.algorithm, call.protocol = tuning.algorithm, tuning.protocol
                call.channels = tuning.channels
                self._group(call).choices[(call.algorithm, call.protocol, call.channels)] += 1
                self._recent.remove(call)
                return
        self.counts["tuning_unattributed"] += 1

    # --- what init says about communicators -------------------------------------------------------
    def _facts(self, init_only: bool) -> Comm:
        """Where a fact without a communicator's name goes: the current communicator, or the unattributed one
        until an init line names it. Counts and rings appear only during an init: after a call they
        mean a new communicator's init began (versions before 2.19 print no Init START)."""
        if self._current is not None and init_only and self._current_running:
            self._current = None
        if self._current is None:
            return self.unattributed
        return self.comms.setdefault(self._current, Comm())

    def _channel_counts(self, found: re.Match) -> None:
        comm = self._facts(init_only=True)
        comm.coll_channels = int(found["coll"])
        comm.collnet_channels = None if found["collnet"] is None else int(found["collnet"])
        comm.nvls_channels = None if found["nvls"] is None else int(found["nvls"])

    def _ring(self, found: re.Match) -> None:
        self._facts(init_only=True).ring_channels = int(found["channels"])

    def _connection(self, found: re.Match) -> None:
        self._facts(init_only=False).transports.add(transport_name(found["via"]))

    def _comm_shape(self, found: re.Match) -> None:
        self._name_current(found["comm"], int(found["nranks"]))

    def _init(self, found: re.Match) -> None:
        if found["phase"] == "START":
            self._name_current(found["comm"], int(found["nranks"]))
            return
        comm = self.comms.setdefault(found["comm"], Comm())
        comm.nranks = int(found["nranks"])
        if self._current is None:  # no START named it: what came before was its init
            _merge(comm, self.unattributed)
            self.unattributed = Comm()
        self._current = None

    def _name_current(self, name: str, nranks: int) -> None:
        comm = self.comms.setdefault(name, Comm())
        comm.nranks = nranks
        _merge(comm, self.unattributed)
        self.unattributed = Comm()
        self._current, self._current_running = name, False

    # --- answers ----------------------------------------------------------------------------------
    def choice(self, func: str, count: int, datatype: int | None, nranks: int) -> Choice | None:
        """What NCCL chose for calls of ``func`` with this count, datatype (None: any) and communicator
        size: the most frequent choice among them, the transports of their communicators."""
        groups = [group for (name, number, kind, size), group in self._groups.items()
                  if name == func and number == count and size == nranks and datatype in (None, kind)]
        if not groups:
            return None
        chosen = sum((group.choices for group in groups), Counter()).most_common(1)
        algorithm, protocol, channels = chosen[0][0] if chosen else ("", "", None)
        comms = [self.comms.get(comm, Comm()) for group in groups for comm in group.comms]
        if algorithm and channels is None:
            channels = _comm_channels(comms[0], algorithm)
        transports = sorted({name for comm in comms for name in comm.transports})
        return Choice(algorithm, protocol, channels, _transport(algorithm, transports))

    def point_to_point(self, nranks: int) -> Choice | None:
        """Send/Recv calls (all-to-all, gather, scatter, p2p patterns): no algorithm, only transports."""
        comms = {comm for (name, _, _, size), group in self._groups.items()
                 if name in POINT_TO_POINT and size == nranks for comm in group.comms}
        if not comms:
            return None
        transports = sorted({name for comm in comms for name in self.comms.get(comm, Comm()).transports})
        return Choice("", "", None, "+".join(transports))

    def _group(self, call: Call) -> CallGroup:
        return self._groups.setdefault((call.func, call.count, call.datatype, call.nranks), CallGroup())

    def summary(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def _merge(comm: Comm, pending: Comm) -> None:
    """What the pending facts say, over what ``comm`` already had."""
    comm.coll_channels = _either(pending.coll_channels, comm.coll_channels)
    comm.collnet_channels = _either(pending.collnet_channels, comm.collnet_channels)
    comm.nvls_channels = _either(pending.nvls_channels, comm.nvls_channels)
    comm.ring_channels = _either(pending.ring_channels, comm.ring_channels)
    comm.transports |= pending.transports


def _either(first: int | None, second: int | None) -> int | None:
    return second if first is None else first


def _comm_channels(comm: Comm, algorithm: str) -> int | None:
    """A version that logs no channel range per call: the communicator's channels for the algorithm
    (an upper bound: NCCL may use fewer for small sizes)."""
    if algorithm.startswith("NVLS"):
        return comm.nvls_channels
    if algorithm.startswith("COLLNET"):
        return comm.collnet_channels
    return comm.coll_channels or comm.ring_channels


def _transport(algorithm: str, transports: list[str]) -> str:
    if algorithm == "NVLS":
        return "NVLS"  # NVLink SHARP: the switch reduces; the connections are not the data path
    prefix = ["NVLS"] if algorithm == "NVLS_TREE" else ["CollNet"] if algorithm.startswith("COLLNET") else []
    return "+".join(prefix + transports)
