"""Data types by the names users type, with the usual short aliases."""

import torch

from commbench.errors import UsageError, did_you_mean

_CANONICAL = {
    "float32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float64": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
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
    """The canonical name for a dtype the user typed; UsageError when unknown or absent from this torch."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _CANONICAL:
        raise UsageError(f"unknown dtype {name!r}{did_you_mean(key, list(_CANONICAL))}; "
                         f"choose from {', '.join(_CANONICAL)}")
    if not hasattr(torch, key):
        raise UsageError(f"dtype {key} is not available in torch {torch.__version__}")
    return key


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, canonical_dtype(name))


def element_size(name: str) -> int:
    return torch.empty((), dtype=torch_dtype(name)).element_size()


def known_dtypes() -> list[str]:
    return [name for name in _CANONICAL if hasattr(torch, name)]
