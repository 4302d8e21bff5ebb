"""Data types by the names users type, with the usual short aliases.

Names and element sizes need no torch (the command line checks them before torch is imported); every
dtype here exists in the torch versions commbench supports (2.1 and later).
"""

from typing import TYPE_CHECKING

from commbench.errors import UsageError, did_you_mean

if TYPE_CHECKING:
    import torch

# Canonical name -> bytes per element.
ELEMENT_SIZES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "int64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
_ALIASES = {
    "fp32": "float32", "float": "float32",
    "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp64": "float64", "double": "float64",
    "int": "int32", "long": "int64",
    "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
}


def canonical_dtype(name: str) -> str:
    """The canonical name for a dtype the user typed; UsageError when unknown."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in ELEMENT_SIZES:
        raise UsageError(f"unknown dtype {name!r}{did_you_mean(key, list(ELEMENT_SIZES))}; "
                         f"choose from {', '.join(ELEMENT_SIZES)}")
    return key


def torch_dtype(name: str) -> "torch.dtype":
    import torch

    return getattr(torch, canonical_dtype(name))


def element_size(name: str) -> int:
    return ELEMENT_SIZES[canonical_dtype(name)]


def known_dtypes() -> list[str]:
    return list(ELEMENT_SIZES)


# The floating dtypes torch's matmul takes on CPU and CUDA; a matmul beside a collective of any other
# dtype (integers, float8) runs in float32.
MATMUL_DTYPES = ("float32", "float64", "float16", "bfloat16")


def matmul_dtype(name: str) -> str:
    """The dtype (by name) a matmul beside a collective of dtype ``name`` runs in."""
    return name if name in MATMUL_DTYPES else "float32"
