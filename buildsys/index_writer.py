"""The build's outputs: device files and the embedded index, byte for byte the same for the same inputs.

Both ``build`` and ``merge`` end here: they hand over the compiled images and the module facts,
and :func:`package_files` lays them out as the package carries them::

    _index.py                   INDEX = {...}  (schema: kernelpack/formats/index.py)
    device/<module>.hsaco       one bundle of every AMD target, CCOB zstd unless uncompressed
    device/<module>.<sm>.cubin  one per NVIDIA sm target
    device/<module>.<cc>.ptx    one per PTX (compute_XY) target
    device/<module>.cu          the module's self-contained CUDA source (run-time compilation;
                                none for a module device-linked from several units)
    device/<module>.hip         the same, hipified

Determinism: modules, images (by vendor, kind, target) and bundle entries are sorted; the index is
rendered with sorted keys; nothing names this machine's paths or the time. SOURCE_DATE_EPOCH,
when set, becomes every written file's modification time.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from kernelpack.errors import FormatError
from kernelpack.files.atomic import atomic_folder, atomic_write
from kernelpack.formats import BundleEntry, compress_bundle, read_bundle, write_bundle
from kernelpack.formats.bundles import DEFAULT_CCOB_VERSION, ZSTD_LEVEL, zstd_identity
from kernelpack.formats.index import (
    SCHEMA_VERSION,
    BuildFacts,
    Image,
    Index,
    KernelParam,
    KernelResources,
)
from kernelpack.loader.images import IMAGE_FILE_SUFFIXES, IMAGE_KINDS, KINDS_BY_NAME, read_image

from .cache import BuildCache, key_of, sha256_hex
from .settings import environment_epoch

INDEX_FILE = "_index.py"
DEVICE_DIR = "device"
SHARD_FILE = "shard.json"  # beside the index of a build limited by --targets: what merge checks
AMD_BUNDLE_ID_PREFIX = "hipv4-amdgcn-amd-amdhsa--"
# Files of device/ that a build owns: a rebuild removes those it did not write this time, so a
# target dropped from the matrix leaves no image behind.
DEVICE_SUFFIXES = (*IMAGE_FILE_SUFFIXES, ".cu", ".hip")


@dataclass(frozen=True)
class ModuleSources:
    """What a module contributes besides images: its kernels (name -> parameter layout, as
    buildsys.discovery found them in the objects) and self-contained sources."""

    name: str
    kernels: Mapping[str, list[KernelParam]]
    cuda: str
    hip: str
    # Whether the package carries the sources for run-time compilation: not for a module
    # device-linked from several units (buildsys.jobs), whose texts here are its units joined.
    embedded: bool = True
    # The hipified text of each unit (for hipify's findings); empty where only the whole is known.
    hip_units: tuple[str, ...] = ()
    # The hash a shard's index recorded, for a module whose sources the shard does not carry.
    recorded_sha256: str = ""

    @property
    def sources_sha256(self) -> str:
        """The module's sources as one hash (CUDA and hipified): what shards must agree on."""
        if self.recorded_sha256:
            return self.recorded_sha256
        return sha256_hex(
            f"{sha256_hex(self.cuda.encode())}\n{sha256_hex(self.hip.encode())}".encode()
        )


@dataclass(frozen=True)
class BuiltImage:
    """One compiled object of one module for one target, with what was read off it."""

    module: str
    vendor: str  # "amd" or "nvidia"
    target: str
    kind: str  # "code_object", "cubin" or "ptx"
    data: bytes
    kernels: Mapping[str, KernelResources]  # by kernel name (by symbol before discovery named them)
    symbols: Mapping[str, str] = field(default_factory=dict)  # kernel name -> symbol
    sha256: str = ""  # of data, where the caller already has it (the build cache checked it)

    @property
    def digest(self) -> str:
        return self.sha256 or sha256_hex(self.data)

    @property
    def order(self) -> tuple[int, str]:
        return KINDS_BY_NAME[self.kind].order, self.target


def package_files(
    modules: Sequence[ModuleSources],
    images: Iterable[BuiltImage],
    *,
    compress: bool,
    version: str,
    toolchains: Mapping[str, str],
    flags: Mapping[str, Sequence[str]],
    cache: BuildCache | None = None,
) -> tuple[dict[str, bytes], Index]:
    """The device files (by path relative to the output folder) and the index describing them;
    ``cache`` keeps compressed bundles (:func:`compressed_bundle`)."""
    by_module: dict[str, list[BuiltImage]] = {m.name: [] for m in modules}
    for image in images:
        by_module[image.module].append(image)
    files: dict[str, bytes] = {}
    index: Index = {
        "schema": SCHEMA_VERSION,
        "version": version,
        "build": BuildFacts(
            toolchains=dict(sorted(toolchains.items())),
            flags={kind: list(values) for kind, values in sorted(flags.items())},
            sources={m.name: m.sources_sha256 for m in sorted(modules, key=lambda m: m.name)},
        ),
        "modules": {},
    }
    for module in sorted(modules, key=lambda m: m.name):
        source_file, source_sha256 = "", ""  # no source: run-time compilation has none to use
        if module.embedded:
            source_file = f"{DEVICE_DIR}/{module.name}.cu"
            files[source_file] = module.cuda.encode()
            files[f"{DEVICE_DIR}/{module.name}.hip"] = module.hip.encode()
            source_sha256 = sha256_hex(files[source_file])
        built = sorted(by_module[module.name], key=lambda i: i.order)
        index["modules"][module.name] = {
            "kernels": {name: list(params) for name, params in sorted(module.kernels.items())},
            "source": source_file,
            "source_sha256": source_sha256,
            "images": place_images(module.name, built, files, compress=compress, cache=cache),
        }
    return files, index


def place_images(
    module: str,
    images: list[BuiltImage],
    files: dict[str, bytes],
    *,
    compress: bool,
    cache: BuildCache | None = None,
) -> list[Image]:
    """Put a module's images into files: AMD ones into one bundle, the others one file each.

    The fat build, merge and each device wheel lay out their images through this one function.
    """
    placed: list[Image] = []
    bundled = [k for k in IMAGE_KINDS if k.bundled]
    (bundle_kind,) = bundled  # one bundle per module, of the one bundled kind (AMD code objects)
    amd = [i for i in images if i.kind == bundle_kind.name]
    if amd:
        name = f"{DEVICE_DIR}/{module}{bundle_kind.file_suffix}"
        raw = write_bundle([(AMD_BUNDLE_ID_PREFIX + i.target, i.data) for i in amd])
        files[name] = compressed_bundle(raw, cache) if compress else raw
        entries = {entry.target: entry for entry in read_bundle(raw, name)}
        for image in amd:
            entry = entries[image.target]
            placed.append(
                _image(image, name, entry.offset, entry.size, "zstd" if compress else "none")
            )
    for image in images:
        if image.kind != bundle_kind.name:
            name = f"{DEVICE_DIR}/{module}.{image.target}{KINDS_BY_NAME[image.kind].file_suffix}"
            files[name] = image.data
            placed.append(_image(image, name, 0, len(image.data), "none"))
    return placed


def compressed_bundle(raw: bytes, cache: BuildCache | None) -> bytes:
    """:func:`kernelpack.formats.compress_bundle` of ``raw``, kept in ``cache`` (namespace
    ``bundles``) by the bundle's sha256, the CCOB version, the zstd level and the zstd library's
    versions: compressing took a no-op build of the default matrix a tenth of its time."""
    if cache is None:
        return compress_bundle(raw)
    key = key_of(
        {
            "bundle": sha256_hex(raw),
            "ccob": DEFAULT_CCOB_VERSION,
            "level": ZSTD_LEVEL,
            "zstd": zstd_identity(),
        }
    )
    found = cache.get_blob("bundles", key)
    if found is None:
        found = compress_bundle(raw)
        cache.put_blob("bundles", key, found)
    return found


def _image(image: BuiltImage, file: str, offset: int, size: int, compression: str) -> Image:
    return {
        "vendor": image.vendor,  # type: ignore[typeddict-item]
        "target": image.target,
        "kind": image.kind,  # type: ignore[typeddict-item]
        "file": file,
        "offset": offset,
        "size": size,
        "sha256": image.digest,
        "compression": compression,  # type: ignore[typeddict-item]
        "kernels": {name: dict(r) for name, r in sorted(image.kernels.items())},  # type: ignore[misc]
        "symbols": dict(sorted(image.symbols.items())),
    }


# ---------------------------------------------------------------------------------------------
# The index as a Python module

_HEADER = '''"""kernelpack's embedded index: generated by `python -m buildsys build`; do not edit."""

from kernelpack.formats.index import Index

INDEX: Index = '''


def render_index(index: Index) -> str:
    """The index module's text. JSON with sorted keys reads as the same Python literal (the index
    holds only strings, integers, lists and dicts) and renders alike on every Python version.

    One line per module (compact within it): indenting every value made candle's index (14
    modules, about 1000 kernels, per-image resources and symbols) 38% larger for nothing a reader
    or a diff needs beyond the module it is in."""
    _check_literal(index, "INDEX")

    def compact(value: object) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))

    fields = []
    for key, value in sorted(index.items()):
        if key == "modules":
            modules = cast(dict[str, object], value)
            lines = [f"{compact(name)}:{compact(modules[name])}" for name in sorted(modules)]
            text = "{\n" + ",\n".join(lines) + "\n}"
        else:
            text = compact(value)
        fields.append(f"{compact(key)}:{text}")
    return _HEADER + "{" + ",\n".join(fields) + "}\n"


def _check_literal(value: object, where: str) -> None:
    """JSON's true, false and null are not Python: the index must not hold them. The walk names
    no path until it finds a value that fails (an index holds tens of thousands of values)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(cast("dict[object, object]", item).values())
        elif kind is list:
            stack.extend(cast("list[object]", item))
        elif kind is not str and kind is not int:
            _name_bad_literal(value, where)


def _name_bad_literal(value: object, where: str) -> None:
    """The TypeError that names where the first value the index cannot hold is."""
    if isinstance(value, dict):
        for key, item in value.items():
            _name_bad_literal(item, f"{where}[{key!r}]")
    elif isinstance(value, list):
        for position, item in enumerate(value):
            _name_bad_literal(item, f"{where}[{position}]")
    elif isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"{where}: {value!r} cannot be written into the index")


def read_index(text: str, path: str = INDEX_FILE) -> Index:
    """The INDEX literal of an index module, read without running it."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as error:
        raise FormatError(path, error.offset or 0, "a Python module") from None
    for node in tree.body:
        target: ast.expr
        value: ast.expr | None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id == "INDEX") or value is None:
            continue
        try:
            index = ast.literal_eval(value)
        except ValueError:
            break
        if isinstance(index, dict) and index.get("schema") == SCHEMA_VERSION:
            return cast(Index, index)
        raise FormatError(path, 0, f"an index of schema {SCHEMA_VERSION}")
    raise FormatError(path, 0, "an assignment INDEX = {...} of a literal")


# ---------------------------------------------------------------------------------------------
# Writing an output folder


def read_built_images(folder: Path, index: Index, *, remedy: str) -> list[BuiltImage]:
    """Every image of a build output folder (a shard to merge, the build wheels repack) read back
    through its index, each checked against its sha256 (kernelpack.loader.images.read_image, which names
    ``remedy`` when one is damaged)."""
    images = []
    for name, module in sorted(index["modules"].items()):
        bundles: dict[Path, list[BundleEntry]] = {}
        for image in module["images"]:
            data = read_image(folder, image, remedy=remedy, bundles=bundles)
            kind, kernels, symbols = image["kind"], image["kernels"], image["symbols"]
            images.append(
                BuiltImage(name, image["vendor"], image["target"], kind, data, kernels, symbols)
            )
    return images


def shard_manifest(index: Index, targets: Sequence[str]) -> dict[str, object]:
    """What merge compares between shards: their targets and everything that must agree."""
    return {
        "targets": sorted(targets),
        "version": index["version"],
        "sources": index["build"]["sources"],
        "toolchains": index["build"]["toolchains"],
        "flags": index["build"]["flags"],
    }


def write_output(
    out: Path, files: Mapping[str, bytes], index: Index, *, shard: Mapping[str, object] | None
) -> None:
    """Write the device files, the index and (for a shard) its manifest into ``out``, so that a
    reader sees the whole old output or the whole new one, never an index that disagrees with its
    images or a stale shard.json.

    The new output is made complete in a staging folder beside its place and swapped in
    (kernelpack.files.atomic.atomic_folder); files whose bytes did not change are hard-linked across, so
    an unchanged file keeps its timestamp, and an unchanged output is not touched at all. Device
    files of earlier builds that this one did not make are gone with the old folder; files the
    builder does not own in device/ are carried over.

    ``out`` may also be a package folder with other files (kernelpack's own wheels/kernelpack):
    then device/ is swapped in one step and the index replaced right after it, so a reader can
    only meet the mismatch in the instant between those two renames (and the loader's sha256 check
    refuses it then).
    """
    everything = dict(files)
    everything[INDEX_FILE] = render_index(index).encode()
    if shard is not None:
        everything[SHARD_FILE] = (json.dumps(shard, indent=1, sort_keys=True) + "\n").encode()
    epoch = environment_epoch()
    if not _same_output(out, everything):
        if _owned(out):
            with atomic_folder(out) as staging:
                _fill(staging, out, everything)
        else:
            device = {k: v for k, v in everything.items() if k.startswith(f"{DEVICE_DIR}/")}
            with atomic_folder(out / DEVICE_DIR) as staging:
                _fill(staging, out, device, prefix=f"{DEVICE_DIR}/")
            for name in (INDEX_FILE, SHARD_FILE):
                if name in everything:
                    atomic_write(out / name, everything[name])
                else:
                    (out / name).unlink(missing_ok=True)
    if epoch is not None:
        for relative in everything:
            os.utime(out / relative, (epoch, epoch))


_OWNED = {INDEX_FILE, DEVICE_DIR, SHARD_FILE}


def _owned(out: Path) -> bool:
    """Whether ``out`` holds nothing but a build's output (or does not exist yet)."""
    try:
        return {p.name for p in out.iterdir()} <= _OWNED
    except FileNotFoundError:
        return True


def _device_files(out: Path) -> set[str]:
    device = out / DEVICE_DIR
    if not device.is_dir():
        return set()
    return {f"{DEVICE_DIR}/{p.name}" for p in device.iterdir() if p.suffix in DEVICE_SUFFIXES}


def _same_output(out: Path, everything: Mapping[str, bytes]) -> bool:
    """Whether ``out`` already holds exactly these files (builder-owned ones) with these bytes."""
    present = _device_files(out) | {n for n in (INDEX_FILE, SHARD_FILE) if (out / n).is_file()}
    if present != set(everything):
        return False
    for relative, data in everything.items():
        try:
            if (out / relative).read_bytes() != data:
                return False
        except OSError:
            return False
    return True


def _fill(staging: Path, out: Path, files: Mapping[str, bytes], *, prefix: str = "") -> None:
    """Write ``files`` (paths relative to ``out``, under ``prefix``) into ``staging``, linking
    unchanged ones from ``out``; carry over the files of out's device/ the builder does not own."""
    for relative, data in sorted(files.items()):
        target = staging / relative.removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        old = out / relative
        try:
            if old.read_bytes() == data:
                os.link(old, target)
                continue
        except OSError:
            pass
        atomic_write(target, data)
    device = out / DEVICE_DIR
    if device.is_dir():
        for path in device.iterdir():
            if path.is_file() and path.suffix not in DEVICE_SUFFIXES:
                destination = staging / f"{DEVICE_DIR}/{path.name}".removeprefix(prefix)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, destination)
