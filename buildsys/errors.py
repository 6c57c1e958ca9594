"""The builder's errors: subclasses of kernelpack's one hierarchy (kernelpack.errors), so both
command lines report them the same way and callers can catch the contract classes."""

from __future__ import annotations

from kernelpack.errors import CompileError, UsageError


class MatrixError(UsageError):
    """arch_matrix.toml (or --targets) names something that cannot be built: exit status 2."""


class ProjectError(UsageError):
    """A kernel project's pyproject.toml or tree says something the builder does not take: a
    version, name, requirement or field its standard does not allow, a path that leaves the
    project, one of kernelpack's own names (exit status 2)."""


class ToolchainError(CompileError):
    """No compiler can build what was asked, or provisioning one failed: exit status 1."""


class BuildError(CompileError):
    """Compile jobs failed: names each module, target and the compiler's message (exit 1)."""


class HipifyError(BuildError):
    """hipify reported errors in sources an AMD target compiles: nothing was compiled (exit 1)."""


class UnsafeNameError(UsageError):
    """A project's module, file, define or flag that could not reach a compiler as written (see
    buildsys.names for the grammar and why): exit status 2, naming it and the rename to make."""


class ExportError(UsageError):
    """``export`` was asked for something it cannot write (a language it does not know, an --out
    that is a file, a build with no modules): exit status 2, naming the argument."""


class DistFolderError(UsageError):
    """``wheels --out`` names a non-empty folder that this project's previous ``wheels`` run did
    not write (no manifest of it): its files are not ours to replace (exit status 2)."""
