"""What the installed packages carry: each package's embedded index and its device wheels' fragments.

A kernelpack-built package (kernelpack itself, or any project built by ``python -m buildsys
wheels``) declares its import name in the entry point group ``kernelpack.packages``; its fat or
host wheel has ``<package>/_index.py``. Each of its device wheels (``<package>_device_<x>``) has an
index fragment of the same schema and announces itself through the ``kernelpack.device`` entry
point group under the name ``<package>.<group>``, so a package's loader reads its own device wheels
only. :class:`Catalog` merges what was read into one view: every module's kernels and source, and
every image with the package folder its ``file`` is relative to.

An installed index that cannot be read (truncated, edited, of the wrong shape) is one UsageError
naming the file and saying to reinstall, never a SyntaxError or TypeError from deep inside.

importlib.metadata is imported by the functions that read entry points or distributions (device
wheels, the registered packages, the version, provenance), not with this module: it brings email,
zipfile and csv, 13 to 27 ms of a first load (docs/loader.md, "Ready time"), which a fat install's
load, reading its own ``_index.py`` only, never needs.
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import importlib
import importlib.util
import os
import stat
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from ..devices.detect import Gpu
from ..errors import KernelpackWarning, UsageError
from ..files.regular import IMAGE_FILE_LIMIT, read_regular
from ..formats.index import PROVENANCE_FILE, SCHEMA_VERSION, Image, Index, ModuleEntry

RUNTIME_PACKAGE = "kernelpack"
PACKAGES_ENTRY_POINTS = "kernelpack.packages"
DEVICE_ENTRY_POINTS = "kernelpack.device"
INDEX_FILE = "_index.py"  # the builder writes it into the package folder
# The largest _index.py imported: kernelpack's own, two modules and 30 targets, is 200 KB.
INDEX_FILE_LIMIT = 64 << 20


class Located(NamedTuple):
    """An index image and the package folder its ``file`` is relative to."""

    image: Image
    root: Path
    origin: str  # the package whose index lists it: "kernelpack", "kernelpack_device_sm90"

    @property
    def path(self) -> Path:
        return self.root / self.image["file"]

    @property
    def label(self) -> str:
        return f"{self.image['target']} {self.image['kind']} ({self.origin}/{self.image['file']})"


class Catalog:
    """Every module's kernels, source and located images, from one or more indexes."""

    def __init__(self) -> None:
        self.version = ""
        self.distribution = ""  # the first index's project, whose extras the hints name
        self.modules: dict[str, ModuleEntry] = {}
        self.images: dict[str, list[Located]] = {}
        self.device_wheels: dict[str, str] = {}  # built target -> the extra of its device wheel
        self.origins: list[str] = []  # the packages whose indexes were read
        self.sources: dict[str, Path] = {}  # module -> its CUDA source (the hipified one beside it)

    def add(self, index: Index, root: Path, origin: str) -> None:
        check_index(index, root / INDEX_FILE, origin)
        self.version = self.version or index["version"]
        self.distribution = self.distribution or index.get("distribution", origin)
        self.device_wheels.update(index.get("device_wheels", {}))
        self.origins.append(origin)
        for name, module in sorted(index["modules"].items()):
            self.modules.setdefault(name, module)
            if module["source"] and name not in self.sources:
                self.sources[name] = root / module["source"]
            located = self.images.setdefault(name, [])
            located += [Located(image, root, origin) for image in module["images"]]


# What each part of an index must be for the loader to use it; the builder writes exactly these.
_INDEX_FIELDS: dict[str, type] = {"schema": int, "version": str, "modules": dict}
_MODULE_FIELDS: dict[str, type] = {
    "kernels": dict,
    "source": str,
    "source_sha256": str,
    "images": list,
}
_IMAGE_FIELDS: dict[str, type] = {
    "vendor": str,
    "target": str,
    "kind": str,
    "file": str,
    "offset": int,
    "size": int,
    "sha256": str,
    "compression": str,
    "kernels": dict,
    "symbols": dict,
}


def check_index(index: object, path: Path, owner: str = RUNTIME_PACKAGE) -> None:
    """A UsageError naming ``path`` and the first key that is missing or of the wrong type.

    The index is a Python literal anyone with write access to site-packages can edit; checking its
    shape once here means a damaged one is one line, not a TypeError at the first use of a key.
    """

    def fail(where: str, problem: str) -> UsageError:
        return UsageError(
            f"{path}: {where}{problem}; the installed index is damaged or from another "
            f"kernelpack: reinstall {owner} (and its device wheels)"
        )

    def fields(value: object, wanted: Mapping[str, type], where: str) -> Mapping[str, object]:
        if not isinstance(value, dict):
            raise fail(where, f"expected a dict, found {type(value).__name__}")
        for key, kind in wanted.items():
            if key not in value:
                raise fail(where, f"no key {key!r}")
            if not isinstance(value[key], kind) or isinstance(value[key], bool):
                raise fail(where, f"{key!r} is a {type(value[key]).__name__}, not {kind.__name__}")
        return value

    top = fields(index, _INDEX_FIELDS, "")
    if top["schema"] != SCHEMA_VERSION:
        raise UsageError(
            f"{path}: index schema {top['schema']}, this kernelpack reads {SCHEMA_VERSION}; "
            "install matching versions of kernelpack and its device wheels"
        )
    modules = top["modules"]
    assert isinstance(modules, dict)
    for name, module in modules.items():
        entry = fields(module, _MODULE_FIELDS, f"module {name!r}: ")
        images = entry["images"]
        assert isinstance(images, list)
        for number, image in enumerate(images):
            where = f"module {name!r} image {number}: "
            placed = fields(image, _IMAGE_FIELDS, where)
            offset, size = placed["offset"], placed["size"]
            assert isinstance(offset, int) and isinstance(size, int)
            # Checked before anything is read or allocated: no image a wheel ships is larger
            # than the largest file the loader reads (an index claiming 2**50 bytes asked
            # read() for a petabyte).
            if offset < 0 or size < 0 or offset + size > IMAGE_FILE_LIMIT:
                raise fail(
                    where,
                    f"bytes {offset} to {offset + size} lie outside any image file (at most "
                    f"{IMAGE_FILE_LIMIT} bytes)",
                )


def kernelpack_packages() -> list[str]:
    """Every installed kernelpack-built package's import name: kernelpack first, then the entry
    point group kernelpack.packages in name order."""
    return list(package_registrations())


def package_registrations() -> dict[str, str]:
    """:func:`kernelpack_packages`, each with the distribution whose entry point names it
    ("kernelpack" for kernelpack itself), so that a stale registration can say whose it is."""
    from importlib.metadata import entry_points  # deferred: a fat install's load needs none

    named: dict[str, str] = {}
    for entry in entry_points(group=PACKAGES_ENTRY_POINTS):
        dist = getattr(entry, "dist", None)
        named.setdefault(entry.value.split(":")[0].strip(), dist.name if dist else "?")
    return {RUNTIME_PACKAGE: RUNTIME_PACKAGE, **dict(sorted(named.items()))}


def package_folder(package: str) -> Path:
    """Where ``package`` is installed, found without importing it; a UsageError if it is not."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            f"package {package!r}: not installed (no importable package of that name); install "
            "its wheel, or name the package kernelpack.load(..., package=) should read"
        )
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def runtime_version() -> str:
    """kernelpack's own version (``kernelpack.__version__``, ``kernelpack --version``): the
    installed distribution's where this very package is the one it installed; else the embedded
    index's, which the builder stamps (a checkout after a build); else ``0+unknown`` (a checkout
    never built: nothing has recorded a version, and another installed kernelpack's would be
    wrong)."""
    from importlib.metadata import (  # deferred: a fat install's load needs none
        PackageNotFoundError,
        distribution,
    )

    here = Path(__file__).resolve().parents[1] / "__init__.py"
    try:
        installed = distribution(RUNTIME_PACKAGE)
        if Path(str(installed.locate_file(f"{RUNTIME_PACKAGE}/__init__.py"))).resolve() == here:
            return installed.version
    except PackageNotFoundError:
        pass
    index = package_index()
    return index["version"] if index is not None else "0+unknown"


def package_index(package: str = RUNTIME_PACKAGE) -> Index | None:
    """The fat or host wheel's embedded index; None where the package was installed without one.

    A file that is there but cannot be imported (truncated, edited) is a UsageError naming it.
    """
    name = f"{package}._index"
    folder = package_folder(package)
    path = folder / INDEX_FILE
    try:
        spec = importlib.util.find_spec(name)
        if spec is None:
            # the import system passes over what is not a regular file (a FIFO, a device)
            _check_index_file(path, package)
            return None
        if spec.has_location and spec.origin:
            path = Path(spec.origin)
            _check_index_file(path, package)
        module = importlib.import_module(name)
    except UsageError:
        raise
    except ModuleNotFoundError as error:
        if error.name != name:  # the package's own import needs a module that is not there
            raise _damaged(path, error, package) from None
        return None
    except Exception as error:  # SyntaxError, NameError (JSON's true), TypeError, ...
        filename = getattr(error, "filename", None)
        where = Path(filename) if isinstance(error, SyntaxError) and filename else path
        raise _damaged(where, error, package) from None
    path = Path(module.__file__ or path)
    index = getattr(module, "INDEX", None)
    if index is None:
        raise _damaged(path, NameError("it defines no INDEX"), package)
    found: Index = index
    return found


def _check_index_file(path: Path, package: str) -> None:
    """A UsageError unless ``path`` is a regular file of at most INDEX_FILE_LIMIT bytes: the
    import system passes over a FIFO or a device (the index would seem absent) and reads a file
    of any size whole."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return  # absent (or only its bytecode is installed): no index, or the import says why
    except OSError as error:
        raise _damaged(path, error, package) from None
    if not stat.S_ISREG(info.st_mode):
        raise _damaged(path, OSError("not a regular file"), package)
    if info.st_size > INDEX_FILE_LIMIT:
        raise _damaged(
            path, OSError(f"{info.st_size} bytes, over the {INDEX_FILE_LIMIT}-byte limit"), package
        )


def _damaged(path: Path, error: Exception, package: str) -> UsageError:
    detail = str(error).splitlines()[0][:200] if str(error) else ""
    return UsageError(
        f"{path}: cannot be read ({type(error).__name__}: {detail}); it is not the index "
        f"literal the builder writes: reinstall {package} (in a source tree, rebuild it: "
        "python -m buildsys build)"
    )


def device_fragments(package: str = RUNTIME_PACKAGE) -> list[tuple[Index, Path, str]]:
    """The index fragments of ``package``'s installed device wheels: the entry points named
    ``<package>.<group>`` in the group kernelpack.device, whose fragment is stamped with the same
    package (another package's device wheels are never read).

    Each entry point names a package holding ``_index.py``; a package that cannot be imported, or
    whose fragment is damaged, is skipped with a warning, so one broken device wheel does not stop
    the others.
    """
    from importlib.metadata import entry_points  # deferred: a fat install's load needs none

    found: list[tuple[Index, Path, str]] = []
    mine = [e for e in entry_points(group=DEVICE_ENTRY_POINTS) if e.name.startswith(f"{package}.")]
    for entry in sorted(mine, key=lambda e: e.name):
        try:
            device_package = importlib.import_module(entry.value.split(":")[0].strip())
            root = Path(device_package.__file__ or "").resolve().parent
            fragment: Index = importlib.import_module(device_package.__name__ + "._index").INDEX
            check_index(fragment, root / INDEX_FILE, device_package.__name__)
            if fragment.get("package", package) != package:
                raise UsageError(f"its index belongs to package {fragment.get('package')!r}")
        except Exception as error:  # a broken third-party install must not stop the loader
            warnings.warn(
                f"device wheel {entry.value} (entry point {entry.name}) cannot be read: {error}; "
                "reinstall it",
                KernelpackWarning,
                stacklevel=3,
            )
            continue
        found.append((fragment, root, device_package.__name__))
    return found


PROVENANCE_LIMIT = 4 << 20  # a provenance file lists one row per image: far below this


def package_provenance(package: str, own: str) -> dict[str, object]:
    """What each installed wheel of ``package`` says about its making (buildsys.provenance): its
    own distribution ``own`` and its device wheels', by distribution name. None for a distribution
    that carries no provenance file (not installed from a wheel kernelpack's builder wrote, an
    editable install) or is not installed; ``{"error": ...}`` where the file cannot be read."""
    from importlib.metadata import entry_points  # deferred: a fat install's load needs none

    names = {own} | {
        entry.dist.name
        for entry in entry_points(group=DEVICE_ENTRY_POINTS)
        if entry.name.startswith(f"{package}.") and entry.dist is not None
    }
    return {name: _provenance(name) for name in sorted(names)}


def _provenance(name: str) -> object:
    from importlib.metadata import (  # deferred: a fat install's load needs none
        PackageNotFoundError,
        distribution,
    )

    try:
        files = distribution(name).files or []
    except (PackageNotFoundError, ValueError):
        return None
    found = [f for f in files if f.name == PROVENANCE_FILE and f.parent.name.endswith(".dist-info")]
    if not found:
        return None
    path = Path(str(found[0].locate()))
    import json  # deferred: provenance alone reads JSON here; a load imports json for nothing else

    try:
        document = json.loads(read_regular(path, limit=PROVENANCE_LIMIT, what="a provenance file"))
    except (OSError, UsageError, ValueError) as error:
        return {"error": f"{path}: {error}"}
    return document if isinstance(document, dict) else {"error": f"{path}: not a JSON object"}


class Unreadable(NamedTuple):
    """An installed package whose index cannot be read: what ``info`` and ``doctor`` report in
    its place (:func:`kernelpack.loader.load.installed_loaders`)."""

    package: str
    distribution: str  # whose kernelpack.packages entry point names it ("?" where none says)
    problem: str  # one line: the file or registration at fault, why, and what to do

    @property
    def remedy(self) -> str:
        """The pip commands that restore it: reinstall, or uninstall what is gone."""
        name = self.package if self.distribution == "?" else self.distribution
        return f"pip install --force-reinstall {name}, or pip uninstall {name} if it is gone"


class Choice(NamedTuple):
    """Which image of a module a GPU gets and why; ``located`` is None when none fits."""

    module: str
    gpu: Gpu
    located: Located | None
    reasons: list[str]
