"""What the installed packages carry: the package's embedded index and the device wheels' fragments.

The fat or host wheel has ``kernelpack/_index.py``; each device wheel (``kernelpack_device_<x>``)
has an index fragment of the same schema and announces itself through the ``kernelpack.device``
entry point group. :class:`Catalog` merges what was read into one view: every module's kernels and
source, and every image with the package folder its ``file`` is relative to.

An installed index that cannot be read (truncated, edited, of the wrong shape) is one UsageError
naming the file and saying to reinstall, never a SyntaxError or TypeError from deep inside.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from .errors import KernelpackWarning, UsageError
from .index import SCHEMA_VERSION, Image, Index, ModuleEntry

if TYPE_CHECKING:
    from .detect import Gpu

PACKAGE_DIR = Path(__file__).resolve().parent
DEVICE_ENTRY_POINTS = "kernelpack.device"
INDEX_FILE = "_index.py"
INDEX_MODULE = f"{__package__}._index"  # the builder writes it into the package folder


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
        self.modules: dict[str, ModuleEntry] = {}
        self.images: dict[str, list[Located]] = {}
        self.device_wheels: dict[str, str] = {}  # built target -> the extra of its device wheel
        self.origins: list[str] = []  # the packages whose indexes were read
        self.sources: dict[str, Path] = {}  # module -> its CUDA source (the hipified one beside it)

    def add(self, index: Index, root: Path, origin: str) -> None:
        check_index(index, root / INDEX_FILE)
        self.version = self.version or index["version"]
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


def check_index(index: object, path: Path) -> None:
    """A UsageError naming ``path`` and the first key that is missing or of the wrong type.

    The index is a Python literal anyone with write access to site-packages can edit; checking its
    shape once here means a damaged one is one line, not a TypeError at the first use of a key.
    """

    def fail(where: str, problem: str) -> UsageError:
        return UsageError(
            f"{path}: {where}{problem}; the installed index is damaged or from another "
            "kernelpack: reinstall kernelpack (and its device wheels)"
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
            fields(image, _IMAGE_FIELDS, f"module {name!r} image {number}: ")


def package_index() -> Index | None:
    """The fat or host wheel's embedded index; None where kernelpack was installed without one.

    A file that is there but cannot be imported (truncated, edited) is a UsageError naming it.
    """
    try:
        module = importlib.import_module(INDEX_MODULE)
    except ModuleNotFoundError as error:
        if error.name != INDEX_MODULE:
            raise
        return None
    except (SyntaxError, ValueError) as error:  # a truncated file, null bytes
        filename = getattr(error, "filename", None)
        raise _damaged(Path(filename) if filename else PACKAGE_DIR / INDEX_FILE, error) from None
    index = getattr(module, "INDEX", None)
    if index is None:
        path = Path(module.__file__ or PACKAGE_DIR / INDEX_FILE)
        raise _damaged(path, NameError("it defines no INDEX"))
    found: Index = index
    return found


def _damaged(path: Path, error: Exception) -> UsageError:
    return UsageError(
        f"{path}: cannot be read ({type(error).__name__}: {error}); the installed index is "
        "damaged: reinstall kernelpack"
    )


def device_fragments() -> list[tuple[Index, Path, str]]:
    """The index fragments of the installed device wheels (entry point group kernelpack.device).

    Each entry point names a package holding ``_index.py``; a package that cannot be imported, or
    whose fragment is damaged, is skipped with a warning, so one broken device wheel does not stop
    the others.
    """
    from importlib.metadata import entry_points

    found: list[tuple[Index, Path, str]] = []
    for entry in sorted(entry_points(group=DEVICE_ENTRY_POINTS), key=lambda e: e.name):
        try:
            package = importlib.import_module(entry.value.split(":")[0].strip())
            root = Path(package.__file__ or "").resolve().parent
            fragment: Index = importlib.import_module(package.__name__ + "._index").INDEX
            check_index(fragment, root / INDEX_FILE)
        except Exception as error:  # a broken third-party install must not stop the loader
            warnings.warn(
                f"device wheel {entry.value} (entry point {entry.name}) cannot be read: {error}; "
                "reinstall it",
                KernelpackWarning,
                stacklevel=3,
            )
            continue
        found.append((fragment, root, package.__name__))
    return found


class Choice(NamedTuple):
    """Which image of a module a GPU gets and why; ``located`` is None when none fits."""

    module: str
    gpu: Gpu
    located: Located | None
    reasons: list[str]
