"""Kernel modules: the folders of kernel_sources/, their files, their kernels and parameter lists.

Each folder of the sources root (``kernel_sources/`` unless a caller names another) is one module,
compiled from its one ``.cu`` file into one code object per target; ``include/`` holds the device
headers the modules share. Sources are held as a :class:`SourceTree`, an in-memory map from
root-relative paths to text, because the builder hashes, hipifies and inlines them without
touching the disk again, and names files in every output by these relative paths only (never by
where this checkout lives).

A module's kernels are its ``extern "C" __global__`` functions (C linkage keeps their symbol names
plain, so the loader finds them by name). Their parameter lists go into the index so that a launch
can be checked; they are read off the module's self-contained source with comments, strings and
preprocessor lines blanked out.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.index import KernelParam

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
    """One module: its name (the folder's), its main source and the headers it may include."""

    name: str
    main: str  # root-relative path of the module's one .cu file


def read_tree(
    root: Path, extra_includes: Sequence[Path] = ()
) -> tuple[SourceTree, list[KernelModule]]:
    """Read every source file under ``root`` and name its modules, sorted by name; the files of
    each extra include folder go into the tree as ``.include/<n>/`` (:func:`extra_include_dir`).

    A module folder without exactly one ``.cu`` file is a UsageError: the builder compiles one
    translation unit per module into one code object per target.
    """
    if not root.is_dir():
        raise UsageError(f"{root}: no such kernel sources folder")
    files: dict[str, str] = {}
    modules: list[KernelModule] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                relative = path.relative_to(root).as_posix()
                try:
                    files[relative] = path.read_text(encoding="utf-8")
                except UnicodeDecodeError:
                    raise UsageError(f"{path}: not UTF-8 text") from None
        if folder.name == INCLUDE_DIR:
            continue
        mains = sorted(p for p in files if p.startswith(f"{folder.name}/") and p.endswith(".cu"))
        mains = [p for p in mains if "/" not in p[len(folder.name) + 1 :]]
        if len(mains) != 1:
            found = ", ".join(mains) or "none"
            raise UsageError(
                f"{folder}: a kernel module folder needs exactly one .cu file (found {found}); "
                "put shared code in headers"
            )
        modules.append(KernelModule(folder.name, mains[0]))
    if not modules:
        raise UsageError(f"{root}: no kernel modules (folders with a .cu file)")
    for number, folder in enumerate(extra_includes):
        if not folder.is_dir():
            raise UsageError(f"{folder}: no such include folder (include-dirs)")
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                relative = f"{extra_include_dir(number)}/{path.relative_to(folder).as_posix()}"
                try:
                    files[relative] = path.read_text(encoding="utf-8")
                except UnicodeDecodeError:
                    raise UsageError(f"{path}: not UTF-8 text") from None
    searched = (INCLUDE_DIR, *(extra_include_dir(n) for n in range(len(extra_includes))))
    return SourceTree(files, searched), modules


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


# ---------------------------------------------------------------------------------------------
# Kernels and their C parameter lists

_BLANKED = re.compile(
    r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|^[ \t]*\#(?:[^\n]*\\\n)*[^\n]*""",
    re.DOTALL | re.MULTILINE,
)
_EXTERN_C = re.compile(r'\bextern\s*"C"')
_ATTRIBUTE_CALLS = re.compile(r"\b(?:__launch_bounds__|__attribute__|__declspec|alignas)\s*\(")
_TOKEN = re.compile(r"[A-Za-z_]\w*|::|\S")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# Words that end a type, so a parameter written without a name ("int") is not read as a name.
_TYPE_WORDS = frozenset(
    {
        "char",
        "short",
        "int",
        "long",
        "float",
        "double",
        "bool",
        "signed",
        "unsigned",
        "const",
        "volatile",
        "void",
        "size_t",
        "half",
        "__half",
        "__nv_bfloat16",
    }
)
# Qualifiers that promise the compiler something but do not change how an argument is passed.
_IGNORED_QUALIFIERS = frozenset({"__restrict__", "__restrict", "restrict"})


def _blank(match: re.Match[str]) -> str:
    """Comments, literals and preprocessor lines become spaces, keeping "C" of extern "C"."""
    text = match.group(0)
    if text == '"C"':
        return text
    return re.sub(r"[^\n]", " ", text)


def parse_kernels(source: str, path: str) -> dict[str, list[KernelParam]]:
    """Kernel name -> parameter list for each ``extern "C" __global__`` function defined in
    ``source``, sorted by name (declarations without a body are not kernels of this module)."""
    code = _BLANKED.sub(_blank, source)
    kernels: dict[str, list[KernelParam]] = {}
    for match in _EXTERN_C.finditer(code):
        after = match.end()
        while after < len(code) and code[after].isspace():
            after += 1
        if code.startswith("{", after):
            close = _matching(code, after, "{", "}", path)
            for start in _declaration_starts(code, after + 1, close):
                _add_kernel(kernels, code, start, path)
        else:
            _add_kernel(kernels, code, after, path)
    return dict(sorted(kernels.items()))


def _declaration_starts(code: str, start: int, stop: int) -> list[int]:
    """Where each top-level declaration inside an ``extern "C" { ... }`` block starts."""
    starts = [start]
    index = start
    while index < stop:
        char = code[index]
        if char == "{":
            index = _matching(code, index, "{", "}", "")
            starts.append(index + 1)
        elif char == "(":
            index = _matching(code, index, "(", ")", "")
        elif char == ";":
            starts.append(index + 1)
        index += 1
    return starts


def _matching(text: str, start: int, opening: str, closing: str, path: str) -> int:
    depth = 0
    for index in range(start, len(text)):
        if text[index] == opening:
            depth += 1
        elif text[index] == closing:
            depth -= 1
            if depth == 0:
                return index
    line = text.count("\n", 0, start) + 1
    raise UsageError(f"{path}:{line}: unbalanced {opening!r}")


def _add_kernel(kernels: dict[str, list[KernelParam]], code: str, start: int, path: str) -> None:
    """Parse the declaration starting at ``start``: a kernel when it holds ``__global__`` and a
    body follows its parameter list."""
    end = start
    while end < len(code) and code[end] not in "{;}":
        if code[end] == "(":
            end = _matching(code, end, "(", ")", path)
        end += 1
    if end >= len(code) or code[end] != "{":
        return
    header = _strip_attribute_arguments(code[start:end], path).rstrip()
    if "__global__" not in _TOKEN.findall(header) or not header.endswith(")"):
        return
    first = end - len(code[start:end].lstrip())
    line = code.count("\n", 0, first) + 1
    close = len(header) - 1
    depth = 0
    open_paren = close
    for index in range(close, -1, -1):
        if header[index] == ")":
            depth += 1
        elif header[index] == "(":
            depth -= 1
            if depth == 0:
                open_paren = index
                break
    name_match = re.search(r"([A-Za-z_]\w*)\s*$", header[:open_paren])
    if name_match is None:
        raise UsageError(f'{path}:{line}: cannot read the name of an extern "C" __global__ kernel')
    name = name_match.group(1)
    params = _parse_params(header[open_paren + 1 : close], path, line, name)
    if name in kernels and kernels[name] != params:
        raise UsageError(f"{path}:{line}: kernel {name} defined twice with different parameters")
    kernels[name] = params


def _strip_attribute_arguments(header: str, path: str) -> str:
    """Remove ``__launch_bounds__(256)``, ``__attribute__((...))`` and the like, which sit
    between the return type and the name and would otherwise look like parameter lists."""
    while True:
        match = _ATTRIBUTE_CALLS.search(header)
        if match is None:
            return header
        close = _matching(header, match.end() - 1, "(", ")", path)
        header = header[: match.start()] + " " + header[close + 1 :]


def _parse_params(text: str, path: str, line: int, kernel: str) -> list[KernelParam]:
    pieces = _split_top_level(text)
    if pieces in ([""], ["void"]):
        return []
    params: list[KernelParam] = []
    for position, piece in enumerate(pieces):
        declaration = piece.split("=", 1)[0]
        tokens = [t for t in _TOKEN.findall(declaration) if t not in _IGNORED_QUALIFIERS]
        if not tokens:
            raise UsageError(f"{path}:{line}: kernel {kernel}: parameter {position + 1} is empty")
        named = len(tokens) > 1 and _IDENTIFIER.fullmatch(tokens[-1]) and tokens[-2] != "::"
        if named and tokens[-1] not in _TYPE_WORDS:
            name, type_tokens = tokens[-1], tokens[:-1]
        else:
            name, type_tokens = f"arg{position}", tokens
        params.append(KernelParam(name=name, type=_format_type(type_tokens)))
    return params


def _split_top_level(text: str) -> list[str]:
    pieces: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "(<[":
            depth += 1
        elif char in ")>]":
            depth -= 1
        if char == "," and depth == 0:
            pieces.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    pieces.append("".join(current).strip())
    return pieces


def _format_type(tokens: list[str]) -> str:
    """The canonical spelling: words separated by one space, ``*``s together ("const float *",
    "float **", "float * const"), ``::`` and template brackets written tightly."""
    out = ""
    for token in tokens:
        tight = (
            not out
            or token in ("::", "<", ">", ",")
            or out.endswith(("::", "<", " "))
            or (token == "*" and out.endswith("*"))
        )
        out += token if tight else " " + token
        if token == ",":
            out += " "
    return out
