"""What an export holds, language by language the same: read off a build output folder.

:func:`read_export` reads the index a build wrote (``_index.py``, kernelpack/formats/index.py's schema) and
the image files it names, each checked against the index's sha256 on the way
(kernelpack.loader.images.read_image), and gives one :class:`ExportModule` per module: its kernel names
(the loader's lookup names, docs/loader.md), its AMD bundle as the build wrote it (the CCOB file
``hipModuleLoadData`` takes, with each target's place and sha256 inside it), its NVIDIA cubins and
PTX, each image's symbols, and the NVIDIA selection table.

The selection table is the loader's own rule, evaluated rather than restated: for every compute
capability from 0.0 up to one major version past the newest image, kernelpack.targets.select_image
picks the image as it would at run time, and the table keeps where the pick changes. Past that
point only PTX can fit, and the pick no longer changes (checked here, not assumed), so the last row
holds for every newer GPU. The renderers (rust.py, c.py) turn these values into text and decide
nothing themselves.

The index and its files are untrusted (docs/security.md): a file an image names must be
``device/<name>`` with a plain name, sha256 values are 64 hex digits, and targets parse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelpack.errors import FormatError, UsageError
from kernelpack.files.digest import sha256_hex
from kernelpack.files.regular import read_regular
from kernelpack.formats import BundleEntry
from kernelpack.formats.index import Image, Index
from kernelpack.loader.images import read_image, verify_image
from kernelpack.targets import NvidiaTarget, parse_target, select_image

from ..index_writer import DEVICE_DIR, INDEX_FILE, read_index

# What restores a build output folder whose files do not match its index.
REBUILD = "rebuild it (python -m buildsys build, or export without --from)"
# An image file of a build output: device/<module>[.<target>].<suffix>, nothing that leaves it.
_DEVICE_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_IMAGE = 1 << 31  # one image file: far above any GPU code object, and below C's size limits
# The upper-case names the generated code gives itself beside the module constants: Rust's ALL,
# and C's after the prefix (c.py).
RESERVED_CONSTANTS = frozenset(
    {"ALL", "MODULE_COUNT", "KIND_CUBIN", "KIND_PTX", "KERNELS_H", "ALIGNED"}
)


@dataclass(frozen=True)
class Kernel:
    name: str  # the loader's lookup name ("axpy<float>", "clear@dot.cu")
    symbol: str  # the symbol an image defines it by (mangled for C++ kernels)


@dataclass(frozen=True)
class AmdImage:
    """One target's code object inside a module's AMD bundle."""

    target: str
    offset: int  # where it sits in the decompressed bundle
    size: int
    sha256: str  # of the code object
    kernels: tuple[Kernel, ...]


@dataclass(frozen=True)
class AmdBundle:
    """A module's AMD bundle file, byte for byte as the build wrote it."""

    file: str  # its name in the export folder
    data: bytes
    compression: str  # "zstd" (CCOB) or "none"
    images: tuple[AmdImage, ...]

    @property
    def sha256(self) -> str:
        return sha256_hex(self.data)

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        """The kernels by the symbol every code object of the bundle agrees on: what to look up
        after ``hipModuleLoadData``, where the HIP runtime chose the code object. A kernel whose
        symbol differs between targets is left out here (its images still list it)."""
        symbols: dict[str, set[str]] = {}
        for image in self.images:
            for kernel in image.kernels:
                symbols.setdefault(kernel.name, set()).add(kernel.symbol)
        return tuple(
            Kernel(name, next(iter(found)))
            for name, found in sorted(symbols.items())
            if len(found) == 1
        )


@dataclass(frozen=True)
class NvidiaImage:
    target: str  # sm_90, sm_90a, compute_80
    kind: str  # "cubin" or "ptx"
    file: str  # its name in the export folder
    data: bytes
    sha256: str
    kernels: tuple[Kernel, ...]


@dataclass(frozen=True)
class ExportModule:
    name: str
    constant: str  # its name in the generated code: the module's name in capitals
    kernels: tuple[str, ...]  # lookup names, sorted
    amd: AmdBundle | None
    nvidia: tuple[NvidiaImage, ...]  # in the index's order
    # (first compute capability as 10 * major + minor, index into nvidia or None), ascending
    selection: tuple[tuple[int, int | None], ...]

    def select(self, compute_capability: int) -> NvidiaImage | None:
        """The table read as the generated ``select`` reads it (for tests and the docs)."""
        chosen: int | None = None
        for first, image in self.selection:
            if first > compute_capability:
                break
            chosen = image
        return None if chosen is None else self.nvidia[chosen]


@dataclass(frozen=True)
class Export:
    version: str  # the package version the index records
    modules: tuple[ExportModule, ...]  # sorted by name; a module's index is its place here

    def files(self) -> dict[str, bytes]:
        """The image files beside the source (Rust's include_bytes!), by name."""
        files: dict[str, bytes] = {}
        for module in self.modules:
            if module.amd is not None:
                files[module.amd.file] = module.amd.data
            for image in module.nvidia:
                files[image.file] = image.data
        return files


def read_export(folder: Path) -> Export:
    """The export of the build output ``folder`` (its _index.py and device/ files)."""
    index_path = folder / INDEX_FILE
    try:
        text = read_regular(index_path, limit=MAX_IMAGE, what="index").decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise UsageError(
            f"{index_path}: cannot read the build's index ({reason}); name a build output "
            "folder with --from DIR, or leave --from out to build"
        ) from None
    index = read_index(text, str(index_path))
    return Export(index["version"], export_modules(folder, index))


def export_modules(folder: Path, index: Index) -> tuple[ExportModule, ...]:
    modules = []
    names = sorted(index["modules"])
    check_constants(names)
    for name in names:
        entry = index["modules"][name]
        images = entry["images"]
        for image in images:
            _check_image(folder, name, image)
        amd = [i for i in images if i["vendor"] == "amd"]
        nvidia = [i for i in images if i["vendor"] == "nvidia"]
        for kernel in entry["kernels"]:
            check_text(kernel, f"a kernel name of module {name}")
        modules.append(
            ExportModule(
                name=name,
                constant=constant_name(name),
                kernels=tuple(sorted(entry["kernels"])),
                amd=_amd_bundle(folder, amd) if amd else None,
                nvidia=tuple(_nvidia_image(folder, image) for image in nvidia),
                selection=selection_table(nvidia),
            )
        )
    return tuple(modules)


def constant_name(module: str) -> str:
    return module.upper()


def check_constants(modules: Sequence[str]) -> None:
    """UsageError when two modules would get one constant, or one the name the code keeps."""
    seen: dict[str, str] = {}
    for module in modules:
        constant = constant_name(module)
        if constant in RESERVED_CONSTANTS or constant.strip("_") == "":
            raise UsageError(
                f"module {module!r}: its exported constant {constant} is a name the generated "
                f"code keeps for itself ({', '.join(sorted(RESERVED_CONSTANTS))}) or is not a "
                "name; rename the module's folder"
            )
        if constant in seen:
            raise UsageError(
                f"modules {seen[constant]!r} and {module!r}: both would be exported as "
                f"{constant} (module names in capitals); rename one module's folder"
            )
        seen[constant] = module


def _check_image(folder: Path, module: str, image: Image) -> None:
    where = f"{folder / INDEX_FILE}: module {module}"
    file = image["file"]
    prefix, _, name = file.partition("/")
    if prefix != DEVICE_DIR or not _DEVICE_FILE.fullmatch(name) or ".." in name:
        raise FormatError(str(folder / INDEX_FILE), 0, f"an image file device/<name> ({where})")
    if not _SHA256.fullmatch(image["sha256"]):
        raise FormatError(str(folder / INDEX_FILE), 0, f"a sha256 of 64 hex digits ({where})")
    parsed = parse_target(image["target"])
    if parsed.vendor != image["vendor"] or parsed.image_kind != image["kind"]:
        raise FormatError(
            str(folder / INDEX_FILE),
            0,
            f"an image whose vendor and kind fit its target {image['target']} ({where})",
        )


def _kernels(image: Image) -> tuple[Kernel, ...]:
    for text in (*image["symbols"], *image["symbols"].values()):
        check_text(text, f"a kernel name or symbol of the {image['target']} image")
    return tuple(Kernel(name, symbol) for name, symbol in sorted(image["symbols"].items()))


def check_text(text: str, what: str) -> None:
    """A kernel name or symbol both languages can hold as a string literal: any text but NUL
    (a C string ends there) and lone surrogates (not Unicode scalar values, which Rust's are)."""
    if "\0" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise FormatError(INDEX_FILE, 0, f"{what} without NUL or lone surrogates: {text!r}")


def _amd_bundle(folder: Path, images: Sequence[Image]) -> AmdBundle:
    files = {image["file"] for image in images}
    compressions = {image["compression"] for image in images}
    if len(files) != 1 or len(compressions) != 1:
        raise FormatError(str(folder / INDEX_FILE), 0, "a module's AMD images in one bundle file")
    (file,) = files
    bundles: dict[Path, list[BundleEntry]] = {}
    for image in images:  # each code object checked against the index
        read_image(folder, image, remedy=REBUILD, bundles=bundles)
    data = _read_file(folder / file)
    return AmdBundle(
        file=file.removeprefix(f"{DEVICE_DIR}/"),
        data=data,
        compression=compressions.pop(),
        images=tuple(
            AmdImage(i["target"], i["offset"], i["size"], i["sha256"], _kernels(i)) for i in images
        ),
    )


def _nvidia_image(folder: Path, image: Image) -> NvidiaImage:
    if image["compression"] != "none" or image["offset"] != 0:
        raise FormatError(
            str(folder / INDEX_FILE), 0, f"{image['target']}: an uncompressed file of its own"
        )
    path = folder / image["file"]
    data = _read_file(path)
    if len(data) != image["size"]:
        raise FormatError(str(path), len(data), f"exactly the {image['size']} bytes of the image")
    verify_image(path, image, data, remedy=REBUILD)
    return NvidiaImage(
        target=image["target"],
        kind=image["kind"],
        file=image["file"].removeprefix(f"{DEVICE_DIR}/"),
        data=data,
        sha256=image["sha256"],
        kernels=_kernels(image),
    )


def _read_file(path: Path) -> bytes:
    try:
        return read_regular(path, limit=MAX_IMAGE, what="image")
    except OSError as error:
        raise UsageError(f"{path}: cannot read ({error.strerror or error}); {REBUILD}") from None


def selection_table(images: Sequence[Mapping[str, object]]) -> tuple[tuple[int, int | None], ...]:
    """Where kernelpack.targets.select_image's pick among ``images`` (a module's NVIDIA images)
    changes, over compute capabilities written 10 * major + minor: rows (first capability, index
    of the image or None), ascending from 0."""
    majors = [NvidiaTarget.parse(str(image["target"])).major for image in images]
    past = max(majors, default=0) + 1  # from here on only PTX fits: the pick stays

    def pick(capability: int) -> int | None:
        gpu = NvidiaTarget(capability // 10, capability % 10)
        chosen, _ = select_image(list(images), gpu)
        return None if chosen is None else next(i for i, x in enumerate(images) if x is chosen)

    rows: list[tuple[int, int | None]] = []
    for capability in range(past * 10 + 1):
        chosen = pick(capability)
        if not rows or rows[-1][1] != chosen:
            rows.append((capability, chosen))
    for later in (past * 10 + 9, (past + 7) * 10 + 3):
        if pick(later) != rows[-1][1]:  # the rule changed so that the table's end no longer holds
            raise AssertionError(f"the NVIDIA selection changes past {past}.0; extend the table")
    return tuple(rows)
