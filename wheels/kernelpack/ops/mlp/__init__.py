"""The MLP product: SwiGLU and RMSNorm for LLaMA-style blocks, one table entry per op.

:mod:`.table` has the ops; :mod:`.checks`, :mod:`.geometry` (with :mod:`.tuning`'s data) and
:mod:`.launch` check, plan and launch them, :mod:`.options` the option kernels
(docs/mlp-options.md); :mod:`.api` is the public functions (``kernelpack.mlp``), :mod:`.hot` the
torch hot path through the C launcher, :mod:`.torch_impl` and :mod:`.torch_ops` the torch custom
ops, :mod:`.nn` the torch modules (``kernelpack.nn``).
"""
