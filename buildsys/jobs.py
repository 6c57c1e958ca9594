"""One compile job: a module for a target, its compiler command, and what its object must hold.

A job compiles one module's one translation unit for one target: hipcc per AMD target (device code
only, one code object), nvcc per NVIDIA sm target (a cubin) and per PTX target. Its command names
only paths inside the source tree, relative to the module's folder, so neither the command (part
of the cache key) nor the object depends on where the tree was written; the object is then read
back (buildsys.discovery) and its target checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernelpack.errors import KernelpackError
from kernelpack.images import KINDS_BY_NAME

from .discovery import object_kernels
from .index_writer import BuiltImage
from .matrix import MatrixTarget
from .modules import KernelModule


@dataclass(frozen=True)
class Job:
    module: KernelModule
    target: MatrixTarget

    @property
    def kind(self) -> str:
        return self.target.kind

    @property
    def tree_name(self) -> str:
        """Which source tree the job compiles: the hipified one for AMD, CUDA for NVIDIA."""
        return KINDS_BY_NAME[self.kind].compiler

    @property
    def source(self) -> str:
        """The tree path of the file the job compiles."""
        return hip_main(self.module.main) if self.tree_name == "hip" else self.module.main

    @property
    def output(self) -> str:
        return f"{self.module.name}.{self.target.shard}{KINDS_BY_NAME[self.kind].object_suffix}"

    @property
    def label(self) -> str:
        return f"{self.module.name} {self.target.target}"


@dataclass(frozen=True)
class Outcome:
    job: Job
    status: str  # "compiled", "cached", "failed" or "not run"
    seconds: float = 0.0
    image: BuiltImage | None = None
    message: str = ""
    hint: str = ""  # for a failed AMD compile: the hipify findings at the places it names


@dataclass(frozen=True)
class BuildResult:
    outcomes: list[Outcome]
    out: Path
    # per module, kernel name -> the targets whose objects define it (buildsys.discovery)
    kernel_targets: Mapping[str, Mapping[str, Sequence[str]]] = field(default_factory=dict)
    targets: Sequence[str] = ()
    error: str = ""  # a failure found after compiling (kernels missing from some targets)

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def failed(self) -> bool:
        """Whether nothing was written: a job failed or did not run, or the kernels disagree."""
        return bool(self.count("failed") or self.count("not run") or self.error)


def hip_main(main: str) -> str:
    """The hipified file's tree path: the module's .cu becomes .hip (headers keep their names)."""
    return main[: -len(".cu")] + ".hip"


def compile_argv(
    job: Job,
    flags: Sequence[str],
    extra: Sequence[str],
    output: str,
    depfile: str,
) -> list[str]:
    """The compiler command of one job, run in the module's folder of its source tree.

    ``extra`` holds the project's and the module's defines, include folders (tree paths relative to
    the module's folder) and flags. Paths are relative, so neither the command nor the object names
    the machine's folders: compiled anywhere, the same source gives the same bytes.
    """
    source = job.source.rsplit("/", 1)[-1]
    if job.tree_name == "hip":
        # -cuid: clang otherwise derives the translation unit's id from the output path, which
        # would make the object depend on where it was built. The depfile options are clang's own,
        # each passed through hipcc by -Xclang.
        hip_target = [f"-cuid={job.module.name}", f"--offload-arch={job.target.target}"]
        clang = ["-dependency-file", depfile, "-MT", output]
        hip_depfile = [part for option in clang for part in ("-Xclang", option)]
        return ["hipcc", *flags, *hip_target, *extra, *hip_depfile, source, "-o", output]
    # cicc names internal-linkage symbols (_INTERNAL_<hash>, __nv_static_<hash>) after a hash of
    # the source's absolute path: the tree path in its place makes cold builds byte-identical.
    source_path = f"-Xcicc=--orig_src_path_name={job.source}"
    depfile_options = ["-MMD", "-MF", depfile]
    target = f"-arch={job.target.target}"
    return ["nvcc", *flags, target, *extra, source_path, *depfile_options, source, "-o", output]


def finish(job: Job, status: str, seconds: float, data: bytes) -> Outcome:
    """Read the object's kernels (buildsys.discovery) and check its target; the kernels are named
    and checked across targets once every job is done (buildsys.build)."""
    try:
        target, kernels = object_kernels(job.kind, data, job.output)
    except KernelpackError as error:
        return Outcome(
            job, "failed", seconds, message=f"the compiler's output is unreadable: {error}"
        )
    if target != job.target.target:
        return Outcome(
            job, "failed", seconds, message=f"the object is for {target}, not {job.target.target}"
        )
    resources = {kernel.symbol: kernel.resources for kernel in kernels}
    image = BuiltImage(
        job.module.name, job.target.vendor, job.target.target, job.kind, data, resources
    )
    return Outcome(job, status, seconds, image)
