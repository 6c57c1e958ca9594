"""``python -m buildsys build``: a project's kernel sources and matrix to device code and the index.

The steps, each in its own module: settings (buildsys.settings), the sources read and hipified
(buildsys.modules, buildsys.trees), one compile job per module and target (buildsys.jobs) run
through the content-addressed cache in parallel (buildsys.scheduler, buildsys.cache), the objects
read with kernelpack.formats, and the output laid out by buildsys.index_writer, written only when
every job succeeded: an output never silently lacks a target. Progress and the summary are
buildsys.report's.

A build limited by ``--targets`` or ``--vendor`` is a *shard*: its output folder also gets
``shard.json``, which ``python -m buildsys merge`` checks before recombining shards.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.formats.index import KernelParam
from kernelpack.loader.images import KINDS_OF_VENDOR

from .cache import BuildCache
from .demangling import demangle, find_demangler
from .discovery import ImageKernels, ObjectKernel, name_kernels
from .errors import BuildError, HipifyError, ToolchainError
from .findings import Finding, blocking, explaining, files_of, hip_cuda_path, parse_findings
from .hipify.compat import COMPAT_DIR
from .index_writer import BuiltImage, ModuleSources, package_files, shard_manifest, write_output
from .jobs import BuildResult, Job, Outcome, check_linkable, hip_main
from .matrix import Matrix, MatrixTarget, load_matrix
from .missing_kernels import check_missing, missing_kernels
from .modules import (
    EXTRA_INCLUDE_DIR,
    INCLUDE_DIR,
    KernelModule,
    SourceTree,
    extra_include_dir,
    inline_includes,
    read_tree,
)
from .names import check_shell_path
from .report import failure_error, print_summary
from .scheduler import JobPlan, run_jobs
from .settings import OPTIONS_BY_NAME, BuildSettings, check_writable_folder, resolve_settings
from .settings import add_arguments as add_settings_arguments
from .toolchain import Toolchain, amd_toolchain, cuda_toolchain
from .trees import SourceTrees, hipify_tree, scratch_folder, scratch_root
from .unit_symbols import unit_tags


def build(settings: BuildSettings, *, progress: bool = True) -> BuildResult:
    """Build what the settings ask. The result lists every job's outcome; outputs are written only
    when every job succeeded (main_build turns a failure into BuildError after the summary)."""
    targets = select_targets(settings)
    version = settings.version  # a PEP 440 version, checked before anything is compiled
    check_writable_folder(settings.cache_dir, "cache_dir")
    if any(t.vendor == "nvidia" for t in targets):  # nvcc compiles in the cache's scratch folders
        check_shell_path(settings.cache_dir.resolve(), OPTIONS_BY_NAME["cache_dir"].option_flag)
    check_writable_folder(settings.out.parent, "out")
    if settings.out.exists() and not settings.out.is_dir():
        raise UsageError(
            f"{settings.out} (--out): exists and is not a folder; name one with --out DIR"
        )
    include_folders = _include_folders(settings)
    tree, modules = read_tree(settings.sources, include_folders)
    _check_module_settings(settings, [m.name for m in modules])
    jobs = [Job(m, t) for m in modules for t in targets]
    check_linkable(jobs)
    cache = BuildCache(settings.cache_dir)
    hip_tree, hipify_diagnostics = hipify_tree(tree, modules, cache)
    for line in hipify_diagnostics:
        print(f"hipify: {line}", file=sys.stderr)
    sources = [module_sources(tree, hip_tree, module, settings) for module in modules]
    findings = parse_findings(hipify_diagnostics)
    if any(t.vendor == "amd" for t in targets):
        _stop_on_hipify_errors(sources, modules, findings)
    toolchains = select_toolchains(targets, provision=settings.provision)
    # The provisioned AMD toolchain sees the scratch folders through one bind of their root.
    toolchains = {
        kind: dataclasses.replace(tc, binds=(*tc.binds, scratch_root(settings.cache_dir)))
        for kind, tc in toolchains.items()
    }
    plan = JobPlan(
        flags=settings.flags,
        extra=lambda job: compile_extras(settings, include_folders, job),
        toolchains=toolchains,
        jobs=settings.jobs,
        keep_going=settings.keep_going,
        shown=functools.partial(shown_path, settings, include_folders),
    )
    with scratch_folder(settings.cache_dir) as scratch:
        trees = SourceTrees({"cuda": tree, "hip": hip_tree}, scratch)
        outcomes = run_jobs(jobs, plan, cache, trees, progress=progress)
    outcomes = [
        _with_hint(o, findings, shown_path(settings, include_folders, "")) for o in outcomes
    ]
    result = BuildResult(outcomes, settings.out)
    if result.failed:
        return result
    built = [(o.image, o.kernels) for o in outcomes if o.image is not None]
    named, kernel_params, result = _discover(
        settings, built, modules, targets, toolchains, result, cache
    )
    if result.failed:
        return result
    sources = [dataclasses.replace(s, kernels=kernel_params.get(s.name, {})) for s in sources]
    used_kinds = sorted({t.kind for t in targets})
    files, index = package_files(
        sources,
        named,
        compress=settings.compress,
        version=version,
        toolchains={tc.kind: f"{tc.name} {tc.version}" for tc in toolchains.values()},
        flags={kind: settings.flags[kind] for kind in used_kinds},
        cache=cache,
    )
    shard = shard_manifest(index, [t.target for t in targets]) if settings.is_shard else None
    try:
        write_output(settings.out, files, index, shard=shard)
    except OSError as error:
        raise UsageError(
            f"{settings.out} (--out): cannot write the output ({error.strerror or error}); "
            "name a writable folder with --out DIR"
        ) from None
    return result


def module_sources(
    tree: SourceTree, hip_tree: SourceTree, module: KernelModule, settings: BuildSettings
) -> ModuleSources:
    """A module's self-contained sources (its units with their includes pasted in), kernels to
    come. A linked module's units are not one source: no run-time compiler links them, so its
    index names no source (ModuleSources.embedded) and its sources only count for the hash.

    A one-file module's source starts with the defines its compile jobs get (``-D`` from
    ``[tool.kernelpack]``, per vendor: :func:`embedded_defines`), as ``#define`` lines: NVRTC and hipRTC compile the
    embedded text alone, and a source that needs its project's defines (vecops' VECOPS_BLOCK)
    would fail or mean something else without them."""
    cuda = [inline_includes(tree, unit) for unit in module.sources]
    hip = [inline_includes(hip_tree, hip_main(unit)) for unit in module.sources]
    cuda_defines = hip_defines = ""
    if not module.linked:
        cuda_defines = define_lines(embedded_defines(settings, module.name, "nvidia"))
        hip_defines = define_lines(embedded_defines(settings, module.name, "amd"))
    return ModuleSources(
        name=module.name,
        kernels={},
        cuda=cuda_defines + "".join(cuda),
        hip=hip_defines + "".join(hip),
        embedded=not module.linked,
        hip_units=tuple(hip),
    )


def define_lines(defines: Sequence[str]) -> str:
    """``-D`` values as the preprocessor lines they stand for: ``NAME=VALUE`` is ``#define NAME
    VALUE``, a bare ``NAME`` is ``#define NAME 1``."""
    lines = []
    for define in defines:
        name, equals, value = define.partition("=")
        lines.append(f"#define {name} {value if equals else '1'}\n")
    return "".join(lines)


def _discover(
    settings: BuildSettings,
    built: Sequence[tuple[BuiltImage, Sequence[ObjectKernel]]],
    modules: Sequence[KernelModule],
    targets: Sequence[MatrixTarget],
    toolchains: Mapping[str, Toolchain],
    result: BuildResult,
    cache: BuildCache,
) -> tuple[list[BuiltImage], dict[str, dict[str, list[KernelParam]]], BuildResult]:
    """The images, each with the kernels read off it (jobs.finish), with their kernels named
    (buildsys.discovery), each module's kernel layouts, and the result with the kernel-by-target
    table; its ``error`` says which kernels some targets lack, unless the project allows it
    (allow-missing-kernels)."""
    tags = {module.name: unit_tags(module) for module in modules}
    found = [
        ImageKernels(i.module, i.vendor, i.target, list(kernels), units=tags[i.module])
        for i, kernels in built
    ]
    symbols = {k.symbol for image in found for k in image.kernels}
    demangled = demangle(symbols, find_demangler(toolchains.values()), cache)
    order = [t.target for t in targets]
    named_modules = name_kernels(found, demangled, order)
    named = [
        dataclasses.replace(
            image,
            kernels=named_modules[image.module].resources[image.target],
            symbols=named_modules[image.module].symbols[image.target],
        )
        for image, _ in built
    ]
    table = {name: dict(sorted(m.targets.items())) for name, m in sorted(named_modules.items())}
    error = ""
    try:
        check_missing(
            missing_kernels(named_modules, order),
            settings.allow_missing_kernels,
            f"{settings.project / 'pyproject.toml'} [tool.kernelpack]",
        )
    except BuildError as problem:
        error = str(problem)
    result = dataclasses.replace(result, kernel_targets=table, targets=order, error=error)
    return named, {name: m.params for name, m in named_modules.items()}, result


def _stop_on_hipify_errors(
    sources: Sequence[ModuleSources], modules: Sequence[KernelModule], findings: Sequence[Finding]
) -> None:
    """A HipifyError naming every error finding in the files the modules compile, if any: those
    files would not compile for AMD, or would not mean the same, so no compiler is started."""
    stop: list[Finding] = []
    stopped: list[str] = []  # the modules those errors are in
    for source, module in zip(sources, modules, strict=True):
        for unit, hip in zip(module.sources, source.hip_units, strict=True):
            for finding in blocking(findings, files_of(hip, hip_main(unit))):
                if module.name not in stopped:
                    stopped.append(module.name)
                if finding not in stop:
                    stop.append(finding)
    if stop:
        shown = "; ".join(f.text for f in stop[:8])
        more = f"; and {len(stop) - 8} more" if len(stop) > 8 else ""
        raise HipifyError(
            f"hipify reported {len(stop)} error(s) in sources the AMD targets compile (modules "
            f"{', '.join(stopped)}), nothing compiled: {shown}{more}. Change those lines (the message says what to use "
            "instead; docs/hipify.md), build for NVIDIA only with --vendor nvidia, or mark a "
            "reviewed line with // hipify: allow(<code>)"
        )


def shown_path(settings: BuildSettings, include_folders: Sequence[Path], tree_path: str) -> str:
    """A source tree's path as the user knows the file, for compiler messages
    (buildsys.messages): relative to the project where it is inside it, else absolute; a
    hipified unit as its CUDA source (hipify keeps each line where it was), an extra include
    folder's file in that folder, the builder's HIP compatibility headers where they are
    installed. ``""``: the sources folder itself."""
    path = hip_cuda_path(tree_path)
    head, _, rest = path.partition("/")
    if head == EXTRA_INCLUDE_DIR:
        number, _, inside = rest.partition("/")
        where = include_folders[int(number)] / inside
    elif head == INCLUDE_DIR and (COMPAT_DIR / rest).is_file():
        return str(COMPAT_DIR / rest)
    else:
        where = settings.sources / path if path else settings.sources
    project = settings.project.resolve()
    resolved = where.resolve()
    return str(resolved.relative_to(project)) if resolved.is_relative_to(project) else str(where)


def _with_hint(outcome: Outcome, findings: Sequence[Finding], sources: str) -> Outcome:
    """A failed AMD compile, pointed at the hipify findings where the compiler complained (its
    message names the files as :func:`shown_path` does, the sources folder ``sources``)."""
    if outcome.status != "failed" or outcome.job.tree_name != "hip":
        return outcome
    explained = explaining(outcome.message, outcome.job.module.name, findings, sources)
    if not explained:
        return outcome
    return dataclasses.replace(
        outcome, hint="hipify reported there: " + "; ".join(f.text for f in explained)
    )


def _include_folders(settings: BuildSettings) -> list[Path]:
    """Every extra include folder, the project's first, then each module's, once each."""
    folders: list[Path] = []
    for folder in [
        *settings.include_dirs,
        *(f for m in settings.modules.values() for f in m.include_dirs),
    ]:
        if folder not in folders:
            folders.append(folder)
    return folders


def job_defines(settings: BuildSettings, module: str, vendor: str) -> list[str]:
    """The ``-D`` values a module's compile jobs for ``vendor`` get: the project's, AMD's own
    (USE_ROCM) for AMD targets, then the module's."""
    defines = [*settings.defines]
    if vendor == "amd":
        defines += settings.amd_defines
    found = settings.modules.get(module)
    return defines + list(found.defines if found is not None else ())


def embedded_defines(settings: BuildSettings, module: str, vendor: str) -> list[str]:
    """The defines a run-time compile of the module's embedded source needs: the jobs' defines
    and the ``-DNAME[=VALUE]`` among the module's flags (its other flags have no run-time
    equivalent: docs/your-kernels.md)."""
    found = settings.modules.get(module)
    flags = found.flags if found is not None else ()
    return job_defines(settings, module, vendor) + [
        flag[2:] for flag in flags if flag.startswith("-D") and len(flag) > 2
    ]


def compile_extras(settings: BuildSettings, include_folders: Sequence[Path], job: Job) -> list[str]:
    """A job's defines, include folders (tree paths relative to the module's folder) and its
    module's own flags, from the settings."""
    module = settings.modules.get(job.module.name)
    defines = job_defines(settings, job.module.name, job.target.vendor)
    folders = [INCLUDE_DIR] + [
        extra_include_dir(include_folders.index(f)) for f in settings.include_dirs
    ]
    if module is not None:
        folders += [extra_include_dir(include_folders.index(f)) for f in module.include_dirs]
    extras = [f"-D{define}" for define in defines]
    for folder in folders:
        extras += ["-I", f"../{folder}"]
    return extras + list(module.flags if module is not None else ())


def _check_module_settings(settings: BuildSettings, modules: Sequence[str]) -> None:
    unknown = sorted(set(settings.modules) - set(modules))
    if unknown:
        raise UsageError(
            f"{settings.project / 'pyproject.toml'}: tool.kernelpack.modules.{unknown[0]}: no such "
            f"module in {settings.sources}; modules: {', '.join(modules)}"
        )


def select_targets(settings: BuildSettings) -> list[MatrixTarget]:
    matrix: Matrix = load_matrix(settings.matrix)
    if settings.targets:
        matrix = matrix.select(settings.targets)
    targets = [t for t in matrix.targets if settings.vendor in (None, t.vendor)]
    if not targets:
        raise UsageError(
            f"--vendor {settings.vendor}: the selected targets have none of that vendor"
        )
    return targets


def select_toolchains(targets: Sequence[MatrixTarget], *, provision: bool) -> dict[str, Toolchain]:
    """The toolchain of each image kind the targets need; an unbuildable target is an error.

    An NVIDIA-only build never looks for the AMD toolchain, and an AMD-only build not for nvcc.
    """
    chosen: dict[str, Toolchain] = {}
    amd = [t.target for t in targets if t.vendor == "amd"]
    nvidia = [t.target for t in targets if t.vendor == "nvidia"]
    if amd:
        hip = amd_toolchain(targets=amd, provision=provision)
        _check_buildable(hip, amd)
        chosen.update(dict.fromkeys(KINDS_OF_VENDOR["amd"], hip))
    if nvidia:
        cuda = cuda_toolchain()
        if cuda is None:
            raise ToolchainError(
                f"no nvcc found (CUDA_HOME, /usr/local/cuda, PATH) to build {', '.join(nvidia)}; "
                "install the CUDA toolkit or build with --vendor amd"
            )
        _check_buildable(cuda, nvidia)
        chosen.update(dict.fromkeys(KINDS_OF_VENDOR["nvidia"], cuda))
    return chosen


def _check_buildable(toolchain: Toolchain, targets: Sequence[str]) -> None:
    missing = [t for t, ok in toolchain.buildable(targets).items() if not ok]
    if missing:
        raise ToolchainError(
            f"{toolchain.name} {toolchain.version} cannot build {', '.join(missing)}; "
            "leave them out with --targets, or use a newer toolchain (`python -m buildsys toolchain`)"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``build`` subcommand's arguments (buildsys.settings), and its handler, main_build."""
    add_settings_arguments(parser, "build")
    parser.set_defaults(handler=main_build)


def main_build(args: argparse.Namespace) -> int:
    settings = resolve_settings(args, command="build")
    result = build(settings, progress=True)
    print_summary(result, as_json=bool(getattr(args, "json", False)))
    if result.failed:
        raise failure_error(result)
    return 0
