"""The NCCL_* variables of rank 0 (results.json's meta.env) that change what NCCL can choose or reach:
algorithms and protocols, NVLink SHARP and CollNet, the P2P, SHM and InfiniBand transports, which NICs,
GPUDirect RDMA, channel limits and buffer size. Names and value forms are NCCL's
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).

Invariants: reading never raises, whatever the text; a name NCCL would not know restricts nothing here
(NCCL ignores it too); ``set`` gives each variable as read, for the evidence a reason shows.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

ALGORITHMS = ("RING", "TREE", "NVLS", "NVLS_TREE", "COLLNET_DIRECT", "COLLNET_CHAIN", "PAT")
PROTOCOLS = ("LL", "LL128", "SIMPLE")
_ALGORITHM_NAMES = {"ring": ("RING",), "tree": ("TREE",), "nvls": ("NVLS",), "nvlstree": ("NVLS_TREE",),
                    "collnet": ("COLLNET_DIRECT", "COLLNET_CHAIN"), "collnetdirect": ("COLLNET_DIRECT",),
                    "collnetchain": ("COLLNET_CHAIN",), "pat": ("PAT",)}
_PROTOCOL_NAMES = {"ll": ("LL",), "ll128": ("LL128",), "simple": ("SIMPLE",)}
GDR_OFF = ("LOC", "0")  # NCCL_NET_GDR_LEVEL values that never use GPUDirect RDMA
DEFAULT_BUFFSIZE = 4 * 1024 * 1024  # NCCL_BUFFSIZE's default (the env page above)
RELEVANT = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_P2P_DISABLE",
            "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL",
            "NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_BUFFSIZE",
            "NCCL_NET")


def _names(text: str, known: dict[str, tuple[str, ...]], every: tuple[str, ...]) -> frozenset[str] | None:
    """'Ring,Tree' -> {RING, TREE}; '^NVLS' -> every name but NVLS; None when no name is known."""
    text = text.strip()
    excluded = text.startswith("^")
    found = {name for part in text.lstrip("^").split(",")
             for name in known.get(part.strip().lower().replace("_", ""), ())}
    if not found:
        return None
    return frozenset(every) - found if excluded else frozenset(found)


def _per_function(text: str, function: str, known: dict[str, tuple[str, ...]],
                  every: tuple[str, ...]) -> frozenset[str] | None:
    """NCCL_ALGO or NCCL_PROTO for one NCCL function ('AllReduce'): a plain list applies to every
    function; the per-function form 'allreduce:tree,ring;allgather:ring' to the function it names."""
    if ":" not in text:
        return _names(text, known, every)
    for entry in text.split(";"):
        name, _, values = entry.partition(":")
        if name.strip().lower() == function.lower():
            return _names(values, known, every)
    return None


def _flag(value: str | None) -> bool:
    return (value or "").strip() not in ("", "0")


def _integer(value: str | None) -> int | None:
    try:
        return int((value or "").strip(), 0)
    except ValueError:
        return None


@dataclass(frozen=True)
class HcaFilter:
    """NCCL_IB_HCA: prefixes of device names (exact with '='), a port after ':', all excluded with '^'."""

    text: str
    entries: tuple[tuple[str, int | None], ...] = field(init=False)
    exact: bool = field(init=False)
    excluded: bool = field(init=False)

    def __post_init__(self) -> None:
        text = self.text.strip()
        excluded = text.startswith("^")
        text = text.lstrip("^")
        exact = text.startswith("=")
        entries = []
        for part in filter(None, (piece.strip() for piece in text.lstrip("=").split(","))):
            name, _, port = part.partition(":")
            entries.append((name, _integer(port) if port else None))
        object.__setattr__(self, "entries", tuple(entries))
        object.__setattr__(self, "exact", exact)
        object.__setattr__(self, "excluded", excluded)

    def allows(self, device: str, port: int | None) -> bool:
        named = any((device == name if self.exact else device.startswith(name))
                    and (wanted is None or port is None or wanted == port) for name, wanted in self.entries)
        return named != self.excluded if self.entries else True


@dataclass(frozen=True)
class NcclEnv:
    """What rank 0's NCCL variables allow; an empty mapping allows everything the hardware offers."""

    variables: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, env: Mapping[str, object] | None) -> "NcclEnv":
        return cls({name: str(value) for name, value in (env or {}).items() if name.startswith("NCCL_")})

    def set(self) -> dict[str, str]:
        """The variables that matter here and were set, as they were set."""
        return {name: self.variables[name] for name in RELEVANT if name in self.variables}

    def algorithms(self, function: str) -> frozenset[str] | None:
        """The algorithms NCCL_ALGO leaves to ``function`` (None: not restricted)."""
        return _per_function(self.variables.get("NCCL_ALGO", ""), function, _ALGORITHM_NAMES, ALGORITHMS)

    def protocols(self, function: str) -> frozenset[str] | None:
        return _per_function(self.variables.get("NCCL_PROTO", ""), function, _PROTOCOL_NAMES, PROTOCOLS)

    @property
    def nvls_disabled(self) -> bool:
        return (self.variables.get("NCCL_NVLS_ENABLE") or "").strip() == "0"

    @property
    def collnet_enabled(self) -> bool:
        return _flag(self.variables.get("NCCL_COLLNET_ENABLE"))

    @property
    def p2p_disabled(self) -> bool:
        level = (self.variables.get("NCCL_P2P_LEVEL") or "").strip().upper()
        return _flag(self.variables.get("NCCL_P2P_DISABLE")) or level in ("LOC", "0")

    @property
    def shm_disabled(self) -> bool:
        return _flag(self.variables.get("NCCL_SHM_DISABLE"))

    @property
    def ib_disabled(self) -> bool:
        net = (self.variables.get("NCCL_NET") or "").strip().lower()
        return _flag(self.variables.get("NCCL_IB_DISABLE")) or net == "socket"

    @property
    def hca(self) -> HcaFilter | None:
        text = self.variables.get("NCCL_IB_HCA")
        return HcaFilter(text) if text and text.strip() else None

    @property
    def gdr_disabled(self) -> bool:
        return (self.variables.get("NCCL_NET_GDR_LEVEL") or "").strip().upper() in GDR_OFF

    @property
    def max_channels(self) -> tuple[str, int] | None:
        """The smallest channel or CTA limit set, with its variable."""
        limits = [(name, value) for name in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS")
                  if (value := _integer(self.variables.get(name))) is not None and value > 0]
        return min(limits, key=lambda item: item[1]) if limits else None

    @property
    def buffsize(self) -> int | None:
        value = _integer(self.variables.get("NCCL_BUFFSIZE"))
        return value if value is not None and value > 0 else None
