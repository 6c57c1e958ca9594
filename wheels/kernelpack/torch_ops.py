"""``import kernelpack.torch_ops`` registers kernelpack's MLP kernels as torch custom ops,
``torch.ops.kernelpack.<op>``: the public name of :mod:`kernelpack.ops.mlp.torch_ops`.
"""

from __future__ import annotations

from .ops.mlp.torch_ops import SCHEMAS, register

__all__ = ["SCHEMAS", "register"]
