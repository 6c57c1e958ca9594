"""What the installed vendor runtimes can load, asked once per process.

Generic AMD images are code object v6, which the HIP runtime loads from ROCm 6.2 on; the loader
passes :func:`amd_code_object_v6` to :func:`kernelpack.targets.select_image` so that an older
runtime gets a specific image or run-time compilation instead of a generic image it would refuse.
``kernelpack doctor`` reports the same facts.
"""

from __future__ import annotations

import functools

from .targets import runs_code_object_v6


@functools.cache
def runtime_versions() -> dict[str, str]:
    """Each vendor library's version text ("6.4.43484 (/opt/rocm/lib/libamdhip64.so.6)", or
    "not found"), read once: kernelpack.libraries.library_versions opens the libraries."""
    from .libraries import library_versions

    return library_versions()


def hip_version() -> str | None:
    """The HIP runtime's version ("6.4.43484"), None when no HIP runtime is found."""
    text = runtime_versions().get("hip", "not found")
    if text == "not found" or text.startswith("error"):
        return None
    return text.split()[0]


def amd_code_object_v6() -> bool | None:
    """Whether the HIP runtime here loads code object v6 (generic images); None when no HIP
    runtime is found or its version does not parse (nothing is then known to rule them out)."""
    version = hip_version()
    return None if version is None else runs_code_object_v6(version)
