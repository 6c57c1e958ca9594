"""``python -m buildsys merge SHARD... --out DIR``: per-target CI shards into one package output.

Each CI job builds one target (``python -m buildsys build --targets gfx942 --out shards/gfx942``);
the merge job recombines their images into the fat bundles and one index, exactly as one build of
all targets would have laid them out (buildsys.index_writer does both).

Shards are checked before anything is written: every matrix target must come from exactly one
shard, and all shards must come from the same sources, toolchains, flags and version. Each image
is checked against its shard's index (sha256) on the way through.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpack._console import print_json, print_table
from kernelpack.errors import UsageError
from kernelpack.formats.index import Index, KernelParam

from .cache import sha256_hex
from .index_writer import (
    INDEX_FILE,
    SHARD_FILE,
    BuiltImage,
    ModuleSources,
    package_files,
    read_built_images,
    read_index,
    write_output,
)
from .matrix import load_matrix
from .missing_kernels import absent_targets, check_missing
from .settings import add_arguments as add_settings_arguments
from .settings import check_writable_folder, resolve_settings

# What restores a shard whose image does not match its index.
REBUILD_SHARD = "rebuild the shard (python -m buildsys build --targets T --out DIR)"


@dataclass(frozen=True)
class Shard:
    path: Path
    manifest: dict[str, Any]
    index: Index

    @property
    def targets(self) -> list[str]:
        targets: list[str] = self.manifest["targets"]
        return targets


def read_shard(path: Path) -> Shard:
    """A shard folder's manifest and index; a folder that is not a shard is a UsageError."""
    manifest_path = path / SHARD_FILE
    if not manifest_path.is_file():
        raise UsageError(
            f"{path}: not a build shard (no {SHARD_FILE}); make one with "
            "`python -m buildsys build --targets T --out DIR`"
        )
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UsageError(f"{manifest_path}: not valid JSON") from None
    keys = ("targets", "version", "sources", "toolchains", "flags")
    if not isinstance(manifest, dict) or any(key not in manifest for key in keys):
        raise UsageError(f"{manifest_path}: expected the keys {', '.join(keys)}")
    index_path = path / INDEX_FILE
    try:
        index = read_index(index_path.read_text(encoding="utf-8"), str(index_path))
    except OSError:
        raise UsageError(f"{index_path}: missing; the shard is incomplete") from None
    return Shard(path, manifest, index)


def check_shards(shards: Sequence[Shard], expected: Sequence[str]) -> None:
    """Refuse duplicated, inconsistent or missing shards, naming them."""
    seen_paths: dict[Path, Path] = {}
    for shard in shards:
        resolved = shard.path.resolve()
        if resolved in seen_paths:
            raise UsageError(
                f"duplicated shard: {seen_paths[resolved]} and {shard.path} are one folder"
            )
        seen_paths[resolved] = shard.path
    owner: dict[str, Path] = {}
    for shard in shards:
        for target in shard.targets:
            if target in owner:
                raise UsageError(
                    f"duplicated target {target}: in shards {owner[target]} and {shard.path}; "
                    "give each target's shard once"
                )
            owner[target] = shard.path
    first = shards[0]
    for shard in shards[1:]:
        _check_consistent(first, shard)
    missing = [t for t in expected if t not in owner]
    if missing:
        raise UsageError(
            f"missing shards for {', '.join(missing)} (the matrix asks for them); build each with "
            "`python -m buildsys build --targets T --out DIR`"
        )


def _check_consistent(first: Shard, other: Shard) -> None:
    pair = f"{first.path} and {other.path}"
    a, b = first.manifest, other.manifest
    if a["version"] != b["version"]:
        raise UsageError(f"inconsistent shards {pair}: versions {a['version']} and {b['version']}")
    if a["sources"] != b["sources"]:
        modules = sorted(
            m
            for m in set(a["sources"]) | set(b["sources"])
            if a["sources"].get(m) != b["sources"].get(m)
        )
        raise UsageError(
            f"inconsistent shards {pair}: built from other sources (modules {', '.join(modules)}); "
            "rebuild every shard from one commit"
        )
    for facts, what in (("toolchains", "toolchain"), ("flags", "flags")):
        for kind in sorted(set(a[facts]) & set(b[facts])):
            if a[facts][kind] != b[facts][kind]:
                raise UsageError(
                    f"inconsistent shards {pair}: {kind} {what} {a[facts][kind]!r} and "
                    f"{b[facts][kind]!r}; build every shard with one toolchain"
                )


def merge(
    shard_paths: Sequence[Path],
    out: Path,
    *,
    matrix: Path | None = None,
    compress: bool = True,
    allow_missing_kernels: Mapping[str, Sequence[str]] | None = None,
) -> list[Shard]:
    """Check the shards against each other and the matrix, then write the merged output.

    Each shard checked its own targets' kernels; across shards, a kernel that some targets lack
    is a BuildError unless ``allow_missing_kernels`` lists it (as in a build)."""
    shards = [read_shard(path) for path in shard_paths]
    if not shards:
        raise UsageError("merge: name at least one shard folder")
    check_shards(shards, [t.target for t in load_matrix(matrix).targets])
    first = shards[0]
    kernels = _merged_kernels(shards)
    modules: list[ModuleSources] = []
    for name, module in sorted(first.index["modules"].items()):
        if not module["source"]:  # a linked module: shards agree on its recorded hash
            recorded = first.index["build"]["sources"][name]
            modules.append(
                ModuleSources(name, kernels[name], "", "", embedded=False, recorded_sha256=recorded)
            )
            continue
        cuda = _read_checked(first.path, module["source"], module["source_sha256"])
        hip_file = module["source"].removesuffix(".cu") + ".hip"
        modules.append(
            ModuleSources(
                name=name,
                kernels=kernels[name],
                cuda=cuda.decode("utf-8"),
                hip=(first.path / hip_file).read_text(encoding="utf-8"),
            )
        )
    images: list[BuiltImage] = []
    toolchains: dict[str, str] = {}
    flags: dict[str, list[str]] = {}
    for shard in shards:
        toolchains.update(shard.manifest["toolchains"])
        flags.update(shard.manifest["flags"])
        images += read_built_images(shard.path, shard.index, remedy=REBUILD_SHARD)
    _check_kernels_across(images, allow_missing_kernels or {})
    files, index = package_files(
        modules,
        images,
        compress=compress,
        version=first.manifest["version"],
        toolchains=toolchains,
        flags=flags,
    )
    if index["build"]["sources"] != first.manifest["sources"]:
        raise UsageError(f"{first.path}: its device sources do not match its {SHARD_FILE}")
    write_output(out, files, index, shard=None)
    return shards


def _check_kernels_across(
    images: Sequence[BuiltImage], allowed: Mapping[str, Sequence[str]]
) -> None:
    """A BuildError naming the kernels that some targets of the merged images lack."""
    targets: dict[str, list[str]] = {}
    present: dict[str, dict[str, set[str]]] = {}
    for image in images:
        targets.setdefault(image.module, []).append(image.target)
        for kernel in image.symbols:
            present.setdefault(image.module, {}).setdefault(kernel, set()).add(image.target)
    missing = {
        module: {
            kernel: absent
            for kernel, have in sorted(kernels.items())
            if (absent := absent_targets(kernel, have, targets[module]))
        }
        for module, kernels in sorted(present.items())
    }
    check_missing(missing, allowed, "the project's [tool.kernelpack]")


def _merged_kernels(shards: Sequence[Shard]) -> dict[str, dict[str, list[KernelParam]]]:
    """Per module, the kernels of every shard (a kernel allowed to miss some targets may be in one
    shard only); one name with two layouts is a UsageError."""
    merged: dict[str, dict[str, list[KernelParam]]] = {}
    for shard in shards:
        for name, module in shard.index["modules"].items():
            kernels = merged.setdefault(name, {})
            for kernel, params in module["kernels"].items():
                if kernels.setdefault(kernel, params) != params:
                    raise UsageError(
                        f"inconsistent shards: kernel {kernel} of module {name} has another "
                        f"parameter layout in {shard.path}; rebuild every shard from one commit"
                    )
    return {name: dict(sorted(kernels.items())) for name, kernels in merged.items()}


def _read_checked(folder: Path, relative: str, digest: str) -> bytes:
    path = folder / relative
    try:
        data = path.read_bytes()
    except OSError:
        raise UsageError(f"{path}: missing; the shard is incomplete") from None
    if sha256_hex(data) != digest:
        raise UsageError(f"{path}: does not match the sha256 in its shard's index")
    return data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The shard folders, then the settings merge shares with build (buildsys.settings); the
    handler, main_merge."""
    parser.add_argument("shards", nargs="+", type=Path, metavar="SHARD", help="shard folders")
    add_settings_arguments(parser, "merge")
    parser.set_defaults(handler=main_merge)


def main_merge(args: argparse.Namespace) -> int:
    settings = resolve_settings(args, command="merge")
    check_writable_folder(settings.out.parent, "out")
    shards = merge(
        args.shards,
        settings.out,
        matrix=settings.matrix,
        compress=settings.compress,
        allow_missing_kernels=settings.allow_missing_kernels,
    )
    report = [{"shard": str(s.path), "targets": s.targets} for s in shards]
    if args.json:
        print_json({"out": str(settings.out), "shards": report})
    else:
        print_table(
            f"merged {len(shards)} shards -> {settings.out}",
            ("shard", "targets"),
            [(r["shard"], ", ".join(r["targets"])) for r in report],
        )
    return 0
