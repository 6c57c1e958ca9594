"""Kernels missing from some targets: which are, which the project allows, the error for the rest.

A kernel that some targets' objects lack (a preprocessor guard, a failed instantiation) fails the
build or merge unless the project's ``allow-missing-kernels`` allows it there; the error names the
kernels and gives the ``[tool.kernelpack]`` block that would allow exactly them.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Collection, Mapping, Sequence

from kernelpack.targets import written_kind

from .discovery import ModuleKernels
from .errors import BuildError

# The namespaces of the vendor libraries whose host calls bring kernels of their own: a thrust
# algorithm is CUB's kernels on NVIDIA and rocPRIM's on AMD (candle's moe/). Such a kernel is the
# library's way of doing the call on one vendor, not a kernel of the project: it is listed like any
# other, and must be on every target of the vendors whose objects have it, not of the others.
VENDOR_LIBRARY_NAMESPACES = ("cub::", "thrust::", "rocprim::", "hipcub::")


def _vendor(target: str) -> str:
    return "amd" if written_kind(target) == "amd" else "nvidia"


def absent_targets(kernel: str, present: Collection[str], targets: Sequence[str]) -> list[str]:
    """The targets that should have ``kernel`` and lack it: all of them, or for a vendor
    library's kernel (VENDOR_LIBRARY_NAMESPACES) the targets of the vendors that have it."""
    if kernel.startswith(VENDOR_LIBRARY_NAMESPACES):
        vendors = {_vendor(t) for t in present}
        targets = [t for t in targets if _vendor(t) in vendors]
    return [t for t in targets if t not in present]


def missing_kernels(
    modules: Mapping[str, ModuleKernels], targets: Sequence[str]
) -> dict[str, dict[str, list[str]]]:
    """Per module and kernel, the targets whose object lacks it (only kernels that some lack;
    :func:`absent_targets`)."""
    missing: dict[str, dict[str, list[str]]] = {}
    for name, module in sorted(modules.items()):
        for kernel, present in sorted(module.targets.items()):
            absent = absent_targets(kernel, present, targets)
            if absent:
                missing.setdefault(name, {})[kernel] = absent
    return missing


def allowed_on(module: str, kernel: str, target: str, allowed: Mapping[str, Sequence[str]]) -> bool:
    """Whether ``allow-missing-kernels`` lets ``kernel`` of ``module`` be missing on ``target``.

    A key is ``MODULE`` (any target) or ``MODULE@T1,T2`` (those targets only); the module, each
    target and each kernel entry may be a shell-style pattern (fnmatch: ``*_f8_e4m3``,
    ``*@sm_80,compute_80``), matched case-sensitively."""
    for key, kernels in allowed.items():
        module_pattern, at, targets = key.partition("@")
        if not fnmatch.fnmatchcase(module, module_pattern):
            continue
        if at and not any(fnmatch.fnmatchcase(target, t.strip()) for t in targets.split(",")):
            continue
        if any(fnmatch.fnmatchcase(kernel, pattern) for pattern in kernels):
            return True
    return False


def allowance_block(refused: Mapping[str, Mapping[str, Sequence[str]]]) -> str:
    """The ``[tool.kernelpack]`` table that allows exactly ``refused`` (module -> kernel -> the
    targets lacking it), ready to paste into pyproject.toml: one key per module and set of
    targets, ``"module@t1,t2" = [kernels]``."""
    keys: dict[str, list[str]] = {}
    for module, kernels in sorted(refused.items()):
        for kernel, targets in sorted(kernels.items()):
            keys.setdefault(f"{module}@{','.join(targets)}", []).append(kernel)
    lines = ["[tool.kernelpack.allow-missing-kernels]"]
    for key, names in keys.items():
        quoted = [json.dumps(kernel) for kernel in names]
        if sum(len(q) + 2 for q in quoted) + len(key) < 90:
            lines.append(f"{json.dumps(key)} = [{', '.join(quoted)}]")
        else:
            lines += [f"{json.dumps(key)} = [", *(f"  {q}," for q in quoted), "]"]
    return "\n".join(lines)


def check_missing(
    missing: Mapping[str, Mapping[str, Sequence[str]]],
    allowed: Mapping[str, Sequence[str]],
    where: str,
) -> None:
    """A BuildError naming the kernels missing from some targets that the project's
    ``allow-missing-kernels`` does not allow there (:func:`allowed_on`): one line, then the
    ``[tool.kernelpack]`` block that would allow them, ready to paste."""
    refused: dict[str, dict[str, list[str]]] = {}
    for module, kernels in missing.items():
        for kernel, targets in kernels.items():
            lacking = [t for t in targets if not allowed_on(module, kernel, t, allowed)]
            if lacking:
                refused.setdefault(module, {})[kernel] = lacking
    shown_all = [
        f"{module} {kernel} (not on {', '.join(targets)})"
        for module, kernels in refused.items()
        for kernel, targets in kernels.items()
    ]
    if shown_all:
        shown = "; ".join(shown_all[:6]) + (
            f"; and {len(shown_all) - 6} more" if len(shown_all) > 6 else ""
        )
        raise BuildError(
            f"{len(shown_all)} kernel(s) are missing from some targets (a preprocessor guard, a "
            f"failed instantiation?): {shown}. Make them build everywhere, or allow the difference "
            f'in {where} (patterns such as "*_f8_e4m3" and keys "module@target,..." '
            "allow whole families; merge it with an allow-missing-kernels you have); this allows "
            f"exactly these:\n{allowance_block(refused)}"
        )
