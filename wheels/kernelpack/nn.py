"""Drop-in torch modules for LLaMA-style models on kernelpack's custom ops: the public name of
:mod:`kernelpack.ops.mlp.nn` (importing it imports torch and registers ``torch.ops.kernelpack``).
"""

from __future__ import annotations

from .ops.mlp.nn import RMSNorm, SwiGLUMLP

__all__ = ["RMSNorm", "SwiGLUMLP"]
