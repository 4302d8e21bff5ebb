"""The compute kernel measured beside communication: a square matmul, allocated once, launched by a call.

Used by --with-compute (the sweep: running/contention.py) and by the patterns' overlap and pipeline
stages (patterns/overlap.py, patterns/pp.py). Which dtype a matmul runs in is core/dtypes.matmul_dtype
(planning counts its memory without torch).
"""

import torch

from commbench.core.dtypes import matmul_dtype


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Matmuls run in the model's dtype when it is a floating type matmul supports, else in float32."""
    return getattr(torch, matmul_dtype(str(dtype).removeprefix("torch.")))


class MatmulKernel:
    """C = A @ B on square ``size x size`` matrices, allocated once; a call only launches the matmul."""

    def __init__(self, size: int, dtype: torch.dtype, device: torch.device) -> None:
        self.size = size
        dtype = compute_dtype(dtype)
        # 1/size keeps every product and sum at 1/size: finite in every dtype, never denormal
        self.a = torch.full((size, size), 1.0 / size, dtype=dtype, device=device)
        self.b = torch.ones((size, size), dtype=dtype, device=device)
        self.c = torch.empty((size, size), dtype=dtype, device=device)

    def __call__(self) -> None:
        torch.matmul(self.a, self.b, out=self.c)

    @property
    def nbytes(self) -> int:
        return self.a.nbytes + self.b.nbytes + self.c.nbytes
