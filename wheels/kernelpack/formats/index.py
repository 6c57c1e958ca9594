"""The embedded index: what device code a package carries, and where.

The builder writes ``kernelpack/_index.py`` (and each device wheel an index fragment of the same
schema) as one plain Python literal named ``INDEX``, so that reading it costs an import and nothing
else. These types are the schema; the builder produces it, the loader and ``kernelpack info`` read it.

Paths in an image's ``file`` are relative to the package folder that holds the index (``kernelpack/``
for the fat wheel, ``kernelpack_device_<target>/`` for a device wheel). ``offset``/``size`` locate the
image inside the *uncompressed* bundle when ``compression`` is not "none"; ``sha256`` is of the image
bytes themselves (the code object, cubin or PTX text), checked before every first load.

Kernels are what the compiled objects define (buildsys.discovery), named by the kernel-name rule
of docs/loader.md: a module's ``kernels`` maps each name to its parameter layout, and each image's
``symbols`` maps the names to the symbols that image defines them by.

Every load imports this module, so its annotations are evaluated (no ``from __future__ import
annotations``): typing compiles each string annotation of a TypedDict into a ForwardRef, about 1 ms
for these 35 (docs/loader.md, "Ready time"); each type is defined before it is named.
"""

from typing import Literal, TypedDict

SCHEMA_VERSION = 2
# Beside METADATA in every wheel the builder writes: its source commit, dirty flag and compilers per
# image (buildsys.provenance writes it, `kernelpack info --json` shows it).
PROVENANCE_FILE = "kernelpack-provenance.json"


class KernelParam(TypedDict):
    """One parameter of a kernel, as its compiled objects lay it out (docs/loader.md)."""

    type: str  # as the demangled symbol spells it ("float const*"); "" under C linkage
    offset: int  # bytes from the start of the argument buffer
    size: int  # bytes


class KernelResources(TypedDict):
    """Per kernel, read off the compiled object (0 where a vendor has no such figure)."""

    registers: int  # VGPRs on AMD, registers per thread on NVIDIA
    sgpr: int
    agpr: int
    lds: int  # static shared memory (LDS) bytes
    scratch: int  # private (AMD) / local (NVIDIA) bytes per thread
    spills: int  # SGPR + VGPR spill count on AMD; spill stores on NVIDIA
    wavefront: int  # 64 or 32 on AMD, 32 on NVIDIA
    max_workgroup: int  # largest block size the object allows


class Image(TypedDict):
    vendor: Literal["amd", "nvidia"]
    target: str  # "gfx90a:xnack-", "gfx11-generic", "sm_90", "compute_80"
    kind: Literal["code_object", "cubin", "ptx"]
    file: str
    offset: int
    size: int
    sha256: str
    compression: Literal["none", "zlib", "zstd"]
    kernels: dict[str, KernelResources]  # by kernel name
    symbols: dict[str, str]  # kernel name -> its symbol in this image (mangled for C++ kernels)


class ModuleEntry(TypedDict):
    """One module in an index (not :class:`kernelpack.Module`, a module loaded on a GPU)."""

    kernels: dict[str, list[KernelParam]]  # kernel name -> parameter layout
    source: str  # self-contained CUDA source inside the package, for run-time compilation
    source_sha256: str
    images: list[Image]


class BuildFacts(TypedDict):
    toolchains: dict[str, str]  # "hip" / "cuda" -> compiler name and version
    flags: dict[str, list[str]]
    sources: dict[str, str]  # module -> sha256 of its sources (hipified and CUDA)


class _IndexOptional(TypedDict, total=False):
    # target -> the extra of the device wheel that carries it ("gfx1100" -> "gfx110x"), in the
    # host wheel of a split build, so that a missing image can name the pip command that fixes it.
    device_wheels: dict[str, str]
    # Whose index it is, stamped by the wheels builder: the distribution ("demo-kernels") whose
    # device wheels and extras the hints name, and the import name of the package holding it.
    distribution: str
    package: str


class Index(_IndexOptional):
    schema: int
    version: str
    build: BuildFacts
    modules: dict[str, ModuleEntry]
