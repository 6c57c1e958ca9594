"""Kernel modules: the folders of kernel_sources/ and their files.

Each folder of the sources root (``kernel_sources/`` unless a caller names another) is one module,
compiled into one image per target: from its one ``.cu`` file, or, for a folder of several ``.cu``
files (several translation units, as candle's ``moe/`` and ``mmq_gguf/``), from each of them as
relocatable device code, device-linked into that one image (buildsys.jobs). ``include/`` holds
the device headers the modules share. Sources are held as a :class:`SourceTree`, an in-memory map from
root-relative paths to text, because the builder hashes, hipifies and inlines them without
touching the disk again, and names files in every output by these relative paths only (never by
where this checkout lives).

A module's kernels are not read from here: they are what its compiled objects define
(buildsys.discovery), so kernels written through macros and templates count like any other.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelpack.errors import UsageError

from .names import check_module_name, check_unit_name

INCLUDE_DIR = "include"
# Tree folder of the project's extra include folders (settings include_dirs): the n-th one's files
# are read into ".include/<n>/" of the tree, so they are hashed, hipified and written with the rest
# and every command names them by a relative path.
EXTRA_INCLUDE_DIR = ".include"
# Files of a module folder or include/ that the builder reads (and hipifies): CUDA sources and
# headers. Anything else in a module folder (a README, notes) is not part of its code.
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inc", ".inl")


@dataclass(frozen=True)
class SourceTree:
    """Source files by root-relative POSIX path ("mlp/mlp.cu", "include/common.cuh")."""

    files: Mapping[str, str]
    # Tree folders searched for quoted includes after the including file's own folder, in order.
    include_dirs: tuple[str, ...] = (INCLUDE_DIR,)

    def __getitem__(self, path: str) -> str:
        return self.files[path]

    def __contains__(self, path: object) -> bool:
        return path in self.files

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.files))


@dataclass(frozen=True)
class KernelModule:
    """One module: its name (the folder's) and its translation units (the folder's .cu files)."""

    name: str
    main: str  # root-relative path of the module's first (for most modules its one) .cu file
    # The folder's further .cu files, in name order: each is compiled on its own and the objects
    # are device-linked with main's into the module's one image per target.
    others: tuple[str, ...] = ()

    @property
    def sources(self) -> tuple[str, ...]:
        """Every translation unit of the module, main first."""
        return (self.main, *self.others)

    @property
    def linked(self) -> bool:
        """Whether the module's image is device-linked from several translation units."""
        return bool(self.others)

    def cuid(self, unit: str) -> str:
        """clang's translation-unit id (``-cuid``) for one of the module's units: the module's
        name, and for a linked module the unit's file name without suffix as well, since clang
        names each unit's internal-linkage symbols after it (``k.intern.<hash of the id>``)."""
        if not self.linked:
            return self.name
        return f"{self.name}.{unit.rsplit('/', 1)[-1].rsplit('.', 1)[0]}"


def read_tree(
    root: Path, extra_includes: Sequence[Path] = ()
) -> tuple[SourceTree, list[KernelModule]]:
    """Read every source file under ``root`` and name its modules, sorted by name; the files of
    each extra include folder go into the tree as ``.include/<n>/`` (:func:`extra_include_dir`).

    Every ``.cu`` file directly in a module folder is a translation unit of it (files in its
    subfolders are headers or included fragments); a folder without one is a UsageError. Module
    folders and units are named by buildsys.names' grammar, checked here where the names enter.
    """
    if not root.is_dir():
        hint = _layout_hint(root.parent, root.name)
        raise UsageError(f"{root}: no such kernel sources folder{hint}")
    files: dict[str, str] = {}
    modules: list[KernelModule] = []
    inside = root.resolve()
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                files[path.relative_to(root).as_posix()] = _read_source(path, inside)
        if folder.name == INCLUDE_DIR:
            continue
        check_module_name(folder.name, str(root))
        units = [p.name for p in folder.iterdir() if p.is_file() and p.suffix == ".cu"]
        for unit in units:
            check_unit_name(unit, str(folder))
        mains = sorted(f"{folder.name}/{unit}" for unit in units)
        if not mains:
            raise UsageError(
                f"{folder}: a kernel module folder needs a .cu file (found none); "
                "put headers that several modules share into include/"
            )
        modules.append(KernelModule(folder.name, mains[0], tuple(mains[1:])))
    if not modules:
        flat = sorted(p.name for p in root.glob("*.cu") if p.is_file())
        hint = ""
        if flat:
            hint = f"; {', '.join(flat[:3])} sit directly in it, and {_flat_hint(flat, root.name)}"
        raise UsageError(f"{root}: no kernel modules (folders with a .cu file){hint}")
    for number, folder in enumerate(extra_includes):
        if not folder.is_dir():
            raise UsageError(f"{folder}: no such include folder (include-dirs)")
        contained = folder.resolve()
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                relative = f"{extra_include_dir(number)}/{path.relative_to(folder).as_posix()}"
                files[relative] = _read_source(path, contained)
    searched = (INCLUDE_DIR, *(extra_include_dir(n) for n in range(len(extra_includes))))
    return SourceTree(files, searched), modules


def _read_source(path: Path, inside: Path) -> str:
    """The text of a source file found under ``inside``, refused when it resolves outside it.

    A project's tree is untrusted: a link ``kernel_sources/m/x.cuh -> ~/.ssh/id_rsa`` (or a linked
    module folder) would otherwise be read, hashed and embedded in the wheel's sources. Links that
    stay inside the folder are followed as the compiler would follow them.
    """
    resolved = path.resolve()
    if not resolved.is_relative_to(inside):
        raise UsageError(
            f"{path}: links to {resolved}, outside {inside}; copy the file into the project"
        )
    try:
        return resolved.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None


def _flat_hint(units: Sequence[str], sources: str) -> str:
    """How to lay out ``units``, .cu files that sit directly in a folder: a module is a folder of
    its own under ``sources`` (the sources folder as the project names it)."""
    laid_out = [f"{sources}/{unit.removesuffix('.cu')}/{unit}" for unit in units[:2]]
    more = ", ..." if len(units) > 2 else ""
    return (
        f"a kernel module is a folder of its own: lay them out as {', '.join(laid_out)}{more} "
        "(several .cu files in one folder are device-linked into one module; docs/your-kernels.md, "
        "2. Lay out the sources)"
    )


def _layout_hint(project: Path, sources: str) -> str:
    """'; ...' naming a folder of the project that holds .cu files directly (a flat ``src/``),
    with how to lay them out, or '' when none does."""
    if not project.is_dir():
        return ""
    for folder in sorted(p for p in project.iterdir() if p.is_dir() and not p.name.startswith(".")):
        units = sorted(p.name for p in folder.glob("*.cu") if p.is_file())
        if units:
            shown = ", ".join(units[:3]) + (", ..." if len(units) > 3 else "")
            return (
                f"; {folder.name}/ holds {shown} directly, and {_flat_hint(units, sources)}; "
                "[tool.kernelpack] sources names another folder"
            )
    return ""


def extra_include_dir(number: int) -> str:
    """The tree folder of the ``number``-th extra include folder."""
    return f"{EXTRA_INCLUDE_DIR}/{number}"


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"[^\n]*$', re.MULTILINE)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$", re.MULTILINE)


def resolve_include(tree: SourceTree, including: str, name: str) -> str | None:
    """The tree path a quoted ``#include`` names, searched as the compiler does with ``-I include``
    (and ``-I`` for each extra include folder): beside the including file first, then in the
    tree's include folders. None for a file outside the tree (a toolkit header written with
    quotes), which stays an #include."""
    for folder in (posixpath.dirname(including), *tree.include_dirs):
        candidate = posixpath.normpath(posixpath.join(folder, name))
        if candidate in tree:
            return candidate
    return None


def inline_includes(tree: SourceTree, main: str) -> str:
    """The main file with every quoted include from the tree pasted in: one self-contained source
    for run-time compilation (NVRTC, hipRTC), which has no include folder to search.

    ``#line`` directives keep compiler messages pointing at the original files by their tree
    paths. A header with ``#pragma once`` is pasted once; others are pasted at each include, as
    the preprocessor would read them (their include guards still apply).
    """
    once: set[str] = set()

    def expand(path: str, stack: tuple[str, ...]) -> list[str]:
        text = tree[path]
        if _PRAGMA_ONCE.search(text):
            once.add(path)
            text = _PRAGMA_ONCE.sub("", text)
        pieces: list[str] = []
        last = 0
        for match in _QUOTED_INCLUDE.finditer(text):
            target = resolve_include(tree, path, match.group(1))
            if target is None:
                continue
            if target in stack:
                raise UsageError(f'{path}: #include "{match.group(1)}" includes itself')
            pieces.append(text[last : match.start()])
            line = text.count("\n", 0, match.end()) + 2
            if target not in once:
                pieces.append(f'#line 1 "{target}"\n')
                pieces.extend(expand(target, (*stack, target)))
                if not pieces[-1].endswith("\n"):
                    pieces.append("\n")
            pieces.append(f'#line {line} "{path}"')
            last = match.end()
        pieces.append(text[last:])
        return pieces

    return f'#line 1 "{main}"\n' + "".join(expand(main, (main,)))
