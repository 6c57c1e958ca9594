"""SwiGLU and RMSNorm, the MLP kernels of LLaMA-style transformer blocks: the public functions.

They live in the MLP product (:mod:`kernelpack.ops.mlp.api`, which says how they take any
framework's arrays, check them and take the torch hot path); this module is their public name.
"""

from __future__ import annotations

from .ops.mlp.api import check_eps, fused_add_rms_norm, rms_norm, silu_and_mul, swiglu

__all__ = ["check_eps", "fused_add_rms_norm", "rms_norm", "silu_and_mul", "swiglu"]
