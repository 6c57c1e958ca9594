"""Wheels of a kernel project: the fat wheel, the host wheel and one device wheel per target or family.

Every project goes through the same steps (kernelpack's own repository is one project among
others; :mod:`buildsys.packaging` reads its names). The fat wheel carries every image: written
by :mod:`buildsys.packaging` for a project with no host code, or made by the project's own build
backend through ``pip wheel`` (kernelpack: scikit-build-core compiles the C launcher) with the
built device folder in ``KERNELPACK_DEVICE_DIR``. The split wheels are derived from it rather than
built a second way, so both carry the same Python code byte for byte:

- the host wheel (``<name>``) is the fat wheel without device images, with an index that lists no
  images but says which device wheel carries each target, and one extra per device wheel
  (``pip install "<name>[gfx942]"``);
- each device wheel (``<name>-device-gfx110x``) is the package ``<package>_device_gfx110x`` with
  its own images and index fragment, pinned to the host's exact version and found by the loader
  for that package only, through the entry point ``<package>.gfx110x`` of the group
  ``kernelpack.device`` (template: buildsys/device_wheel/).

Every wheel is written by :func:`buildsys.wheelfile.write_wheel`: sorted entries, timestamps from SOURCE_DATE_EPOCH
(default: the last commit's time), fixed permissions, so two builds of one commit are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kernelpack._console import print_json, print_table
from kernelpack.cli.coverage import coverage
from kernelpack.files.atomic import atomic_folder, atomic_write
from kernelpack.formats.index import Index
from kernelpack.loader.images import IMAGE_FILE_SUFFIXES
from kernelpack.targets import NvidiaTarget, parse_target, select_image
from kernelpack.targets.processors import NVIDIA_ARCHS

from .build import build
from .device_groups import DeviceGroup, device_groups
from .errors import BuildError, DistFolderError
from .index_writer import (
    INDEX_FILE,
    BuiltImage,
    place_images,
    read_built_images,
    read_index,
    render_index,
)
from .merge import merge
from .metadata import add_fields
from .packaging import (
    DEVICE_ENTRY_POINTS,
    ProjectMetadata,
    builder_wheel_files,
    plain_wheel_files,
    project_metadata,
    pure_wheel_dist_info,
    runtime_requirement,
    with_package_entry_point,
)
from .provenance import SourceState, source_state, with_provenance
from .report import failure_error, print_summary
from .settings import OPTIONS_BY_NAME, check_writable_folder, environment_epoch, resolve_settings
from .settings import add_arguments as add_settings_arguments
from .simple_index import write_simple_index
from .trees import scratch_folder
from .variants import write_variants
from .wheel_audit import audit_plain, auditwheel_repair
from .wheelfile import HOST_BUILD_TAG, host_wheel_name, read_wheel, write_wheel

DEVICE_TEMPLATE = Path(__file__).resolve().parent / "device_wheel"


def stamp_index(device_dir: Path, meta: ProjectMetadata) -> Index:
    """Record whose index it is (distribution and import name) in a build output's _index.py."""
    path = device_dir / "_index.py"
    index = read_index(path.read_text(), str(path))
    index = {**index, "distribution": meta.distribution, "package": meta.package}
    atomic_write(path, render_index(index).encode())
    return index


# ---------------------------------------------------------------------------------------------
# Writing and reading wheels


def source_date_epoch(project: Path) -> int:
    """SOURCE_DATE_EPOCH, else the project's last commit's time: what makes two builds of a commit
    equal (a project outside git gets a fixed date)."""
    epoch = environment_epoch()
    if epoch is not None:
        return epoch
    try:
        result = subprocess.run(
            ["git", "log", "-1", "--format=%ct", "--", "."],
            cwd=project,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:  # no git installed (a tree from a tarball): the fixed fallback
        return 315532800
    return (
        int(result.stdout.strip())
        if result.returncode == 0 and result.stdout.strip()
        else 315532800
    )


# ---------------------------------------------------------------------------------------------
# The three kinds of wheel


def build_fat_wheel(
    meta: ProjectMetadata, device_dir: Path, out_dir: Path, *, epoch: int, source: SourceState
) -> tuple[Path, str]:
    """The project's fat wheel with the device code built in device_dir, checked (and, for a
    platform wheel, repaired) by auditwheel, then rewritten by write_wheel for reproducibility;
    it declares the package in the entry point group kernelpack.packages and carries its
    provenance (``source``: the tree's state when the build began).

    Returns the wheel and auditwheel's verdict.
    """
    with tempfile.TemporaryDirectory(prefix="kernelpack-wheel-") as tmp:
        if meta.compiles_host_code:
            built = _pip_wheel(meta, device_dir, Path(tmp), epoch=epoch)
            checked, verdict = auditwheel_repair(built, Path(tmp) / "repaired")
        else:
            name, files = plain_wheel_files(meta, device_dir, runtime_requirement(meta))
            checked = write_wheel(Path(tmp) / name, files, epoch=epoch)
            verdict = audit_plain(checked)
        files = read_wheel(checked)
        entry_points = f"{meta.dist_info}/entry_points.txt"
        files[entry_points] = with_package_entry_point(
            files.get(entry_points, b"").decode(), meta.package
        ).encode()
        files = with_provenance(files, source, None)
        return write_wheel(out_dir / checked.name, files, epoch=epoch), verdict


def _pip_wheel(meta: ProjectMetadata, device_dir: Path, out_dir: Path, *, epoch: int) -> Path:
    """``pip wheel`` through the project's own backend, which places the built device folder
    (``KERNELPACK_DEVICE_DIR``) into its package."""
    argv = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        str(meta.root),
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out_dir),
    ]
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch), KERNELPACK_DEVICE_DIR=str(device_dir))
    result = subprocess.run(argv, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise BuildError(f"pip wheel failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    (built,) = out_dir.glob("*.whl")
    return built


def split_wheels(
    meta: ProjectMetadata, fat: Path, device_dir: Path, out_dir: Path, *, epoch: int
) -> list[Path]:
    """The host wheel and the device wheels, derived from the fat wheel and the build it carries."""
    files = read_wheel(fat)
    index_name = f"{meta.package}/_index.py"
    index = read_index(files[index_name].decode())
    groups = device_groups(index)
    version = index["version"]

    host_index: Index = {
        **index,
        "modules": {name: {**module, "images": []} for name, module in index["modules"].items()},
        "device_wheels": {target: group.name for group in groups for target in group.targets},
    }
    host_files = {
        name: data
        for name, data in files.items()
        if not (name.startswith(f"{meta.package}/device/") and name.endswith(IMAGE_FILE_SUFFIXES))
    }
    host_files[index_name] = render_index(host_index).encode()
    dist_info = next(n.split("/")[0] for n in files if n.endswith(".dist-info/METADATA"))
    host_files[f"{dist_info}/METADATA"] = _add_extras(
        files[f"{dist_info}/METADATA"].decode(), groups, version
    ).encode()
    host_files[f"{dist_info}/WHEEL"] = add_fields(
        files[f"{dist_info}/WHEEL"].decode(), [("Build", HOST_BUILD_TAG)]
    ).encode()
    paths = [write_wheel(out_dir / host_wheel_name(fat.name), host_files, epoch=epoch)]
    images = read_built_images(device_dir, index, remedy="rebuild it")
    for group in groups:
        paths.append(_device_wheel(group, index, images, out_dir, epoch=epoch))
    return paths


def gpu_extras(groups: list[DeviceGroup]) -> dict[str, DeviceGroup]:
    """The extras named after a GPU, each with the device wheel whose image the loader picks there:
    every AMD processor of the coverage table (kernelpack.cli.coverage: a GPU of it in ROCm's default
    modes) that loads a built image, and every NVIDIA GPU architecture of the table, spelt both
    ``sm_90`` and ``sm90``. A GPU that no built image fits gets no extra (run-time compilation or
    the loader's error is what it has)."""
    owner = {target: group for group in groups for target in group.targets}
    extras: dict[str, DeviceGroup] = {}
    for row in coverage(owner):
        if row.image is not None and row.image in owner:
            extras[row.processor] = owner[row.image]
    nvidia = [
        {"vendor": "nvidia", "target": target, "kind": parse_target(target).image_kind}
        for target in owner
        if parse_target(target).vendor == "nvidia"
    ]
    for arch in NVIDIA_ARCHS:
        if arch.arch_specific:  # a code target (sm_90a), not a GPU: the GPU is sm_90
            continue
        best, _ = select_image(nvidia, NvidiaTarget.parse(arch.name))
        if best is not None:
            for spelling in (arch.name, arch.name.replace("_", "")):
                extras[spelling] = owner[str(best["target"])]
    names = {group.name for group in groups}
    return {name: group for name, group in sorted(extras.items()) if name not in names}


def _add_extras(metadata: str, groups: list[DeviceGroup], version: str) -> str:
    """Provides-Extra per device wheel and per GPU it serves (:func:`gpu_extras`), pinned to the
    host's exact version, plus "all". ``sm_90`` is written with its underscore: pip 23.0 (Debian
    12) compares an extra's marker as pkg_resources spells the extra, later pips normalise both."""
    fields = []
    for name, group in [(g.name, g) for g in groups] + list(gpu_extras(groups).items()):
        fields.append(("Provides-Extra", name))
        fields.append(("Requires-Dist", f'{group.distribution}=={version}; extra == "{name}"'))
    fields.append(("Provides-Extra", "all"))
    fields += [("Requires-Dist", f'{g.distribution}=={version}; extra == "all"') for g in groups]
    return add_fields(metadata, fields)


def _device_wheel(
    group: DeviceGroup, index: Index, images: list[BuiltImage], out_dir: Path, *, epoch: int
) -> Path:
    """One device wheel: its images, its index fragment, metadata and the loader's entry point."""
    version = index["version"]
    package: dict[str, bytes] = {}
    fragment: Index = {**index, "modules": {}}
    for name, module in sorted(index["modules"].items()):
        mine = [i for i in images if i.module == name and i.target in group.targets]
        if mine:
            placed = place_images(name, mine, package, compress=True)
            fragment["modules"][name] = {
                **module,
                "source": "",
                "source_sha256": "",
                "images": placed,
            }
    files = {f"{group.package}/{path}": data for path, data in package.items()}
    files[f"{group.package}/_index.py"] = render_index(fragment).encode()
    fields = {
        "owner": group.owner,
        "owner_package": group.owner_package,
        "group": group.name,
        "targets": ", ".join(group.targets),
        "requirement": f"{group.owner}=={version}",
        "name": group.distribution,
        "version": version,
        "extra": group.name,
    }
    template = {p.name: p.read_text() for p in DEVICE_TEMPLATE.glob("*.in")}
    files[f"{group.package}/__init__.py"] = template["__init__.py.in"].format(**fields).encode()
    files |= pure_wheel_dist_info(
        group.distribution,
        version,
        f"{group.owner} device code for {', '.join(group.targets)}",
        file_name=group.package,
        entry_points={DEVICE_ENTRY_POINTS: {group.entry_point: group.package}},
        requires=[f"{group.owner}=={version}"],
        description=template["DESCRIPTION.md.in"].format(**fields),
    )
    return write_wheel(out_dir / f"{group.package}-{version}-py3-none-any.whl", files, epoch=epoch)


# ---------------------------------------------------------------------------------------------
# Sizes


def sizes(wheels: list[Path]) -> list[tuple[str, int, int]]:
    """(wheel, compressed bytes, uncompressed bytes) per wheel."""
    rows = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            rows.append(
                (wheel.name, wheel.stat().st_size, sum(i.file_size for i in archive.infolist()))
            )
    return rows


# ---------------------------------------------------------------------------------------------
# The command: python -m buildsys wheels (nox -s wheels)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build's settings (buildsys.settings: KERNELPACK_BUILD_* apply as for ``pip wheel``),
    --out for the wheels, and --merge; the handler, main_wheels."""
    parser.set_defaults(handler=main_wheels)
    add_settings_arguments(parser, "wheels")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="SHARD",
        help="make the wheels from CI shards (build --targets X --out SHARD) instead of building",
    )


# ---------------------------------------------------------------------------------------------
# dist/: what a run wrote, replaced whole

# Written into dist/ with the files of each run: whose run it was and which entries it wrote, so
# the next run removes those and nothing else (foreign files are carried into the new folder).
DIST_MANIFEST = ".kernelpack-dist.json"


def previous_run(dist: Path) -> tuple[str, frozenset[str]] | None:
    """(project, entries written) of the run whose manifest ``dist`` holds; None where there is
    none, or it does not read as one."""
    try:
        manifest = json.loads((dist / DIST_MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    project, files = manifest.get("project"), manifest.get("files")
    if not isinstance(project, str) or not isinstance(files, list):
        return None
    return project, frozenset(f for f in files if isinstance(f, str))


def check_dist_folder(dist: Path, meta: ProjectMetadata) -> None:
    """Before any work: ``dist`` is empty, or holds this project's previous run (its manifest).
    A non-empty folder kernelpack-build did not write, or wrote for another project, is one
    DistFolderError line (exit 2): its wheels are not ours to replace."""
    entries = sorted(p.name for p in dist.iterdir()) if dist.is_dir() else []
    if not entries:
        return
    option = OPTIONS_BY_NAME["dist"]
    where = f"{dist} ({option.option_flag} / {option.environment})"
    previous = previous_run(dist)
    if previous is None:
        shown = ", ".join(entries[:5]) + (
            f", ... ({len(entries)} entries)" if len(entries) > 5 else ""
        )
        raise DistFolderError(
            f"{where}: not empty and not written by `kernelpack-build wheels` (no {DIST_MANIFEST}): "
            f"{shown}; empty it or name another folder with {option.option_flag} DIR"
        )
    if previous[0] != meta.distribution:
        raise DistFolderError(
            f"{where}: holds the wheels of {previous[0]!r} (its {DIST_MANIFEST}), not of "
            f"{meta.distribution!r}; name another folder with {option.option_flag} DIR"
        )


def _carry_foreign(old: Path, new: Path) -> None:
    """Hard-link into ``new`` every entry of ``old`` that the previous run did not write (a file
    the user put there), unless this run wrote one of that name."""
    previous = previous_run(old)
    written = {DIST_MANIFEST, *(previous[1] if previous else ())}
    for entry in sorted(old.iterdir()) if old.is_dir() else []:
        target = new / entry.name
        if entry.name in written or target.exists() or target.is_symlink():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, target)


def _link_or_copy(source: str | Path, target: str | Path) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)


def main_wheels(args: argparse.Namespace) -> int:
    settings = resolve_settings(args, command="wheels")
    meta = project_metadata(settings)
    check_writable_folder(settings.dist, "dist")
    check_dist_folder(settings.dist, meta)
    check_writable_folder(settings.cache_dir, "cache_dir")
    epoch = source_date_epoch(settings.project)
    with scratch_folder(settings.cache_dir) as scratch:
        device_dir = scratch / "device"
        if args.merge:
            merge(
                args.merge,
                device_dir,
                matrix=settings.matrix,
                compress=settings.compress,
                allow_missing_kernels=settings.allow_missing_kernels,
            )
        else:
            result = build(replace(settings, out=device_dir), progress=not args.json)
            if result.failed:
                print_summary(result, as_json=args.json)
                raise failure_error(result)
        return make_wheels(meta, device_dir, settings.dist, epoch=epoch, as_json=args.json)


def _add_provenance(wheel: Path, source: SourceState, build: Index, *, epoch: int) -> None:
    """Give a wheel of dist/ its provenance file, rewriting it only where that changes it (the
    null variant has the fat wheel's already)."""
    if wheel.suffix != ".whl":
        return
    files = read_wheel(wheel)
    added = with_provenance(files, source, build)
    if added != files:
        write_wheel(wheel, added, epoch=epoch)


def _stages(*, enabled: bool) -> Callable[[str], None]:
    """Where ``wheels`` is, one plain line per step on stderr (none with --json): after the
    build's own progress, packing a large module's images (a 30 MB cubin: minutes) is not silent."""
    started = time.monotonic()

    def say(text: str) -> None:
        if enabled:
            print(
                f"wheels: {text} [{time.monotonic() - started:.0f} s]", file=sys.stderr, flush=True
            )

    return say


def make_wheels(
    meta: ProjectMetadata, device_dir: Path, dist: Path, *, epoch: int, as_json: bool
) -> int:
    """Every file of dist/ from a built output folder: the host and device wheels, the fat wheel as
    the null variant, the variant wheels, the variants JSON, the provider and dist/simple
    (buildsys.variants says why each has the name it has).

    dist/ is replaced whole (kernelpack.files.atomic.atomic_folder, as the build's output folder is):
    everything is written into a folder beside it, with the manifest of what was written, and
    swapped in at the end, so an interrupt leaves the previous dist/ as it was. What the previous
    run wrote (its manifest) goes; any other entry is carried over (check_dist_folder first)."""
    say = _stages(enabled=not as_json)
    source = source_state(meta.root)  # before anything is written
    stamp_index(device_dir, meta)
    images = sum(p.stat().st_size for p in device_dir.rglob("*") if p.is_file())
    with (
        atomic_folder(dist) as out,
        tempfile.TemporaryDirectory(prefix="kernelpack-fat-") as fat_dir,
    ):
        say(f"the fat wheel ({images / 1e6:.1f} MB of device files; pip wheel, then auditwheel)")
        built, verdict = build_fat_wheel(
            meta, device_dir, Path(fat_dir), epoch=epoch, source=source
        )
        say("the host wheel and the device wheels, split from the fat wheel")
        split = split_wheels(meta, built, device_dir, out, epoch=epoch)
        say("the variant wheels and the variants JSON")
        variants = write_variants(meta, built, split[0], out, epoch=epoch)
        extras = []  # the runtime ships its builder beside it (its provider: buildsys.variants)
        if meta.is_runtime:
            name, files = builder_wheel_files(meta.version)
            extras.append(write_wheel(out / name, files, epoch=epoch))
        full_index = read_index((device_dir / INDEX_FILE).read_text())
        for wheel in [*split, *variants, *extras]:
            _add_provenance(wheel, source, full_index, epoch=epoch)
        write_simple_index(out, [*split, *variants, *extras])
        written = sorted(p.name for p in out.iterdir())
        manifest = {"project": meta.distribution, "version": meta.version, "files": written}
        atomic_write(out / DIST_MANIFEST, json.dumps(manifest, indent=1) + "\n")
        _carry_foreign(dist, out)
    split, variants, extras = (
        [dist / p.name for p in paths] for paths in (split, variants, extras)
    )
    say(f"done: {dist}")
    fat = variants[0]  # the null variant: the fat wheel under a name of its own
    wheels = [fat, *split, *(v for v in variants[1:] if v.suffix == ".whl"), *extras]
    kinds = ["fat", "host"] + ["device"] * (len(split) - 1)
    tail = ["provider", "builder"] if meta.is_runtime else []
    kinds += ["variant"] * (len(wheels) - len(kinds) - len(tail)) + tail
    verdicts = {fat.name: verdict}
    rows = sizes(wheels)
    if as_json:
        print_json(
            {
                "wheels": [
                    {"kind": kind, "file": str(path), "compressed": packed, "uncompressed": raw}
                    for kind, path, (_, packed, raw) in zip(kinds, wheels, rows, strict=True)
                ],
                "auditwheel": verdicts,
            }
        )
        return 0
    print_table(
        f"wheels in {dist}",
        ("wheel", "compressed", "uncompressed"),
        [(name, f"{packed:,}", f"{raw:,}") for name, packed, raw in rows],
    )
    for name, verdict in verdicts.items():
        print(f"auditwheel {name}: {verdict}")
    return 0
