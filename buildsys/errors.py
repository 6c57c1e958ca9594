"""The builder's errors: subclasses of kernelpack's one hierarchy, so both command lines report
them the same way."""

from __future__ import annotations

from kernelpack.errors import KernelpackError, UsageError


class MatrixError(UsageError):
    """arch_matrix.toml (or --targets) names something that cannot be built: exit status 2."""


class ToolchainError(KernelpackError):
    """No compiler can build what was asked, or provisioning one failed."""


class BuildError(KernelpackError):
    """A compile job failed: names the module, the target and the compiler's message."""
