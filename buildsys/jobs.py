"""One compile job: a module for a target, its compiler command, and what its object must hold.

A job compiles one module for one target: hipcc per AMD target (device code only, one code object),
nvcc per NVIDIA sm target (a cubin) and per PTX target. A module of several translation units
(:attr:`KernelModule.linked`) is compiled unit by unit as relocatable device code and device-linked
into the same one image per target (:func:`compile_commands`), so the index, the loader and the
wheels see one image per module and target whatever the folder holds. Its command names
only paths inside the source tree, relative to the module's folder, so neither the command (part
of the cache key) nor the object depends on where the tree was written; the object is then read
back (buildsys.discovery) and its target checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kernelpack.errors import KernelpackError, UsageError
from kernelpack.loader.images import KINDS_BY_NAME

from .cache import BuildCache, sha256_hex
from .discovered import cached_object_kernels
from .discovery import ObjectKernel, object_kernels
from .index_writer import BuiltImage
from .matrix import MatrixTarget
from .modules import KernelModule
from .names import check_module_name, check_unit_name


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
        """The tree path of the (first) file the job compiles."""
        return self.sources[0]

    @property
    def sources(self) -> tuple[str, ...]:
        """The tree paths of every translation unit the job compiles, in link order."""
        if self.tree_name == "hip":
            return tuple(hip_main(path) for path in self.module.sources)
        return self.module.sources

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
    kernels: tuple[ObjectKernel, ...] = ()  # as read off the object (buildsys.discovery)


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


def cicc_source_path(tree_path: str) -> str:
    """nvcc's option that names the source to cicc by its tree path (``module/unit.cu``).

    cicc names internal-linkage symbols (_INTERNAL_<hash>, __nv_static_<hash>) after a hash of the
    source's absolute path: the tree path in its place makes cold builds byte-identical. nvcc
    pastes a -Xcicc value into its shell command unquoted (and splits it at commas), so both
    parts are held to buildsys.names' grammar here too, not only where read_tree reads them: a
    KernelModule made some other way is refused rather than pasted.
    """
    module, _, unit = tree_path.partition("/")
    check_module_name(module, "the build's source tree")
    check_unit_name(unit, module)
    return f"-Xcicc=--orig_src_path_name={tree_path}"


def nvcc_random_seed(tree_path: str) -> str:
    """nvcc's ``-frandom-seed``, fixed by the unit's tree path (``module/unit.cu``).

    cicc names an anonymous namespace ``_GLOBAL__N__<module id>``, and without a seed the module
    id ends in a random number and cicc's process id (``..._6_mlp_cu_ca8f4b18_12263``): every
    nvcc run gave other symbol names, so other cubin bytes. With a seed the id is the seed's hex
    digits (``..._6_mlp_cu_1234abcd``). Each unit gets its own, as a device link sees every
    unit's symbols; a hex number, as nvcc pastes the value into its shell commands.
    """
    return f"-frandom-seed=0x{hashlib.sha256(tree_path.encode()).hexdigest()[:8]}"


def compile_argv(
    job: Job,
    flags: Sequence[str],
    extra: Sequence[str],
    output: str,
    depfile: str,
    *,
    source: str | None = None,
) -> list[str]:
    """The compiler command of one job, run in the module's folder of its source tree.

    ``extra`` holds the project's and the module's defines, include folders (tree paths relative to
    the module's folder) and flags. Paths are relative, so neither the command nor the object names
    the machine's folders: compiled anywhere, the same source gives the same bytes. ``source`` is
    the tree path compiled (default: the job's first unit).
    """
    tree_path = source if source is not None else job.source
    source = tree_path.rsplit("/", 1)[-1]
    if job.tree_name == "hip":
        # -cuid: clang otherwise derives the translation unit's id from the output path, which
        # would make the object depend on where it was built. The depfile options are clang's own,
        # each passed through hipcc by -Xclang.
        # A linked module's units each need their own id (it names their internal symbols).
        hip_target = [f"-cuid={job.module.cuid(source)}", f"--offload-arch={job.target.target}"]
        clang = ["-dependency-file", depfile, "-MT", output]
        hip_depfile = [part for option in clang for part in ("-Xclang", option)]
        return ["hipcc", *flags, *hip_target, *extra, *hip_depfile, source, "-o", output]
    source_path = [cicc_source_path(tree_path), nvcc_random_seed(tree_path)]
    depfile_options = ["-MMD", "-MF", depfile]
    target = f"-arch={job.target.target}"
    return ["nvcc", *flags, target, *extra, *source_path, *depfile_options, source, "-o", output]


def compile_commands(
    job: Job, flags: Sequence[str], extra: Sequence[str], output: str, depfile: str = ""
) -> list[tuple[list[str], str]]:
    """The commands of one job with the depfile each writes ("" for a link), run in order in
    the module's folder of its source tree; the last one writes ``output``.

    A one-file module is one :func:`compile_argv`. A linked module compiles each unit as
    relocatable device code, then links those objects into one image: nvlink for a cubin
    (``nvcc -rdc=true -cubin`` per unit), clang's LTO link for a code object (``hipcc
    -fgpu-rdc -c --cuda-device-only``: LLVM bitcode per unit; the link optimises across them). Each unit gets its own
    ``-cuid``, as clang names the unit's internal symbols after it. PTX has no linker, which
    :func:`check_linkable` says before anything runs.
    """
    if not job.module.linked:  # depfile: a one-file job's (default <output>.d)
        depfile = depfile or f"{output}.d"
        return [(compile_argv(job, flags, extra, output, depfile), depfile)]
    commands: list[tuple[list[str], str]] = []
    objects: list[str] = []
    # hipcc: --genco (one code object from one unit) gives way to device-only rdc steps.
    device_only = [f for f in flags if f != "--genco"] + ["--cuda-device-only"]
    for path in job.sources:
        # .o for clang's bitcode too: the link's driver hands .o files to lld as they are, whose
        # LTO reads bitcode by its magic; a .bc it would first run through the -O3 pipeline once
        # more (clang -cc1 -emit-llvm-bc per unit: 5 minutes for each of mmq_gguf's 11 units).
        unit = f"{output}.{path.rsplit('/', 1)[-1].rsplit('.', 1)[0]}.o"
        depfile = f"{unit}.d"
        if job.tree_name == "hip":
            unit_flags = [*device_only, "-fgpu-rdc", "-c"]
            argv = compile_argv(job, unit_flags, extra, unit, depfile, source=path)
        else:
            argv = compile_argv(job, [*flags, "-rdc=true"], extra, unit, depfile, source=path)
        commands.append((argv, depfile))
        objects.append(unit)
    if job.tree_name == "hip":
        # clang's own LTO link of the units' bitcode into a code object: hipcc's --hip-link of
        # device-only bitcode gives a code object without kernels (HIP 6.4, clang 21).
        optimise = [f for f in flags if f.startswith("-O")]
        target = ["--target=amdgcn-amd-amdhsa", f"-mcpu={job.target.target}"]
        # --no-undefined: a device function no unit defines fails here, not at load time.
        lto = ["-flto", "-nostdlib", "-Wl,--no-undefined"]
        link = ["clang", *target, *optimise, *lto, *objects, "-o", output]
    else:
        link = ["nvlink", f"-arch={job.target.target}", *objects, "-o", output]
    commands.append((link, ""))
    return commands


def check_linkable(jobs: Sequence[Job]) -> None:
    """A UsageError for a linked module asked for a PTX target: PTX cannot be device-linked
    ahead of time (no tool links PTX into PTX), and a target is never dropped silently."""
    for job in jobs:
        if job.module.linked and job.kind == "ptx":
            raise UsageError(
                f"module {job.module.name}: its {len(job.module.sources)} translation units "
                f"({', '.join(job.module.sources)}) are device-linked into one image per target, "
                f"and PTX ({job.target.target}) cannot be linked ahead of time; leave the PTX "
                "targets out of this project's matrix (arch_matrix.toml `ptx`, or --targets), "
                "or make the folder one .cu file that includes the others"
            )


def finish(
    job: Job,
    status: str,
    seconds: float,
    data: bytes,
    cache: BuildCache | None = None,
    digest: str = "",
) -> Outcome:
    """Read the object's kernels (buildsys.discovery; through ``cache``, buildsys.discovered,
    when given) and check its target; the kernels are named and checked across targets once
    every job is done (buildsys.build). ``digest``: the sha256 of ``data``, where known."""
    digest = digest or sha256_hex(data)
    try:
        if cache is None:
            target, kernels = object_kernels(job.kind, data, job.output)
        else:
            target, kernels = cached_object_kernels(cache, job.kind, data, job.output, digest)
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
        job.module.name,
        job.target.vendor,
        job.target.target,
        job.kind,
        data,
        resources,
        sha256=digest,
    )
    return Outcome(job, status, seconds, image, kernels=tuple(kernels))
