"""The grammar of every name a kernel project hands the compilers: checked where it enters.

A kernel project is untrusted (docs/security.md), and its module folders, translation units,
defines and flags end up on compiler command lines. Argument vectors alone do not keep them
there, because both compilers build shell commands of their own (measured with CUDA 13.0 and
HIP 6.4):

- nvcc runs every stage through ``/bin/sh``. It pastes file names, the source's absolute path
  and ``-D`` values inside double quotes, where ``$( )``, backticks and ``\\`` keep their meaning
  (and in ``--include_file_name`` it leaves a ``"`` unescaped); the values of its pass-through
  options (``-Xcicc``, ``-Xptxas``, ``-Xcompiler``, ...) it pastes unquoted, split at commas.
- hipcc escapes each argument with backslashes before its ``system()``, except ``-o``'s value,
  which it puts in double quotes.

So no quoting kernelpack could add survives both, and each kind of name is held to a grammar in
which it means nothing to a shell:

- a module name (it also names the module in the index, in ``load()`` and in the wheels' files)
  is an ASCII identifier: ``[A-Za-z_][A-Za-z0-9_]*``;
- a translation unit (a ``.cu`` file directly in a module folder; its name reaches nvcc's shell
  commands, cicc's ``--orig_src_path_name``, the object names and clang's ``-cuid``) is ASCII
  letters, digits, ``_``, ``-`` and ``.``. A unit named with a space or a quote could be built by
  compiling a copy under another name, but that copy would change the ``__FILE__`` and the
  diagnostics the author sees, and Make-style dependency files cannot spell such names either:
  refusing it with the rename to make is the one behaviour that is the same on every compiler.
  Headers are never on a command line (the preprocessor opens them), so their names are free;
- a define is a C identifier, optionally ``=VALUE``, where the value is printable and holds no
  ``$``, backtick or ``\\``: the characters a shell still reads inside nvcc's double quotes.
  Semicolons, spaces, parentheses and quotes stay allowed (``-DNAME="text"``), since both
  compilers quote those themselves, which tests/test_build_names.py builds to check;
- a flag is one shell word without a ``/`` (no whitespace, quotes or shell operators), since
  nvcc pastes the values of its pass-through options unquoted; without a ``/`` a file an option
  names can only be one of the module's own folder in the build (paths belong in
  ``include-dirs``). And it is none of the options that make a compiler run a program, hand
  options past these checks or write the builder's own files (:data:`REFUSED_OPTIONS`): such a
  flag would run the project's code whatever its spelling.

The paths kernelpack itself puts there (``-I ../include``, the outputs) are made from these names
and fixed words, so they are safe by construction; the one outside path nvcc sees, the scratch
folder it runs in, is checked by :func:`check_shell_path`.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import UnsafeNameError

MAX_NAME = 100  # a module's or unit's name: object names add a target and a suffix to it
MODULE_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME - 1}}}")
UNIT_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{MAX_NAME - 4}}}\.cu")
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Characters a POSIX shell still interprets inside double quotes (control characters, the newline
# among them, are refused wherever a name may hold anything else).
SHELL_IN_QUOTES = frozenset("$`\\")
# One word with no meaning to a shell, and without a "/": what an unquoted pass-through option
# may hold, and a path it names can only be a file of the module's own folder in the build.
SHELL_WORD = re.compile(r"[A-Za-z0-9_+=,.:%-]+")

_RUNS = "runs a program it names"
_PASSES = "hands options of its own to another program (plugins, wrappers, -load)"
_READS = "reads further options from a file, past these checks"
_OWN = "names a file the builder writes itself"
# Options a flag may not be: they make nvcc or clang run a program, hand options past these
# checks, or write the builder's own files. Each is refused as the flag itself, as ``flag=...``,
# and (the ones clang spells glued to their value: ``-B<dir>``) as any flag starting with it.
REFUSED_OPTIONS: dict[str, str] = {
    "-ccbin": _RUNS, "--compiler-bindir": _RUNS, "-run": _RUNS, "--run": _RUNS,
    "--run-args": _RUNS, "--ld-path": _RUNS, "-fuse-ld": _RUNS,
    "-Xcompiler": _PASSES, "--compiler-options": _PASSES, "-Xlinker": _PASSES,
    "--linker-options": _PASSES, "-Xnvlink": _PASSES, "--nvlink-options": _PASSES,
    "-Xarchive": _PASSES, "--archive-options": _PASSES, "-Xclang": _PASSES,
    "-Xoffload-linker": _PASSES,
    "-optf": _READS, "--options-file": _READS, "--config": _READS,
    "--output-file": _OWN, "-MF": _OWN, "--dependency-output": _OWN,
}  # fmt: skip  # a table: options grouped by the reason they are refused
REFUSED_PREFIXES: dict[str, str] = {
    "@": _READS, "-B": _RUNS, "-fplugin": _PASSES, "-fpass-plugin": _PASSES, "-Wl,": _PASSES,
    "-o": _OWN,
}  # fmt: skip


def _suggest(name: str, pattern: re.Pattern[str], *, suffix: str = "") -> str:
    """A name of the grammar near ``name``: each character outside it as ``_``."""
    stem = name.removesuffix(suffix)
    allowed = "A-Za-z0-9_" if not suffix else "A-Za-z0-9_.-"
    fixed = re.sub(f"[^{allowed}]", "_", stem)[: MAX_NAME - len(suffix)] or "module"
    fixed = fixed if pattern.fullmatch(fixed + suffix) else f"_{fixed}"[: MAX_NAME - len(suffix)]
    return fixed + suffix


def check_module_name(name: str, where: str) -> None:
    """A module folder's name, as :data:`MODULE_NAME` has it; ``where`` names the sources folder."""
    if not MODULE_NAME.fullmatch(name):
        raise UnsafeNameError(
            f"{where}: module folder {name!r}: a module's name is an ASCII identifier (letters, "
            f"digits and _, at most {MAX_NAME} characters) as it names the module in the index, "
            f"in load() and in the wheels and reaches the compilers' command lines; rename the "
            f"folder, e.g. to {_suggest(name, MODULE_NAME)!r}"
        )


def check_unit_name(name: str, where: str) -> None:
    """A translation unit's file name, as :data:`UNIT_NAME` has it; ``where``: its module folder."""
    if not UNIT_NAME.fullmatch(name):
        raise UnsafeNameError(
            f"{where}: translation unit {name!r}: a .cu file of a module folder is named with "
            f"ASCII letters, digits, _, - and . (at most {MAX_NAME} characters), as its name "
            "reaches the compilers' command lines, which nvcc runs through a shell; rename it, "
            f"e.g. to {_suggest(name, UNIT_NAME, suffix='.cu')!r}"
        )


def check_define(define: str, where: str) -> None:
    """``NAME`` or ``NAME=VALUE``: a C identifier, a value no shell reads inside double quotes."""
    name, _, value = define.partition("=")
    if not C_IDENTIFIER.fullmatch(name):
        raise UnsafeNameError(
            f"{where}: {define!r}: expected NAME or NAME=VALUE, NAME an ASCII C identifier "
            "(letters, digits and _); a function-like macro belongs in a header"
        )
    if not value.isprintable() or SHELL_IN_QUOTES & set(value):
        raise UnsafeNameError(
            f"{where}: {define!r}: a define's value may not hold $, `, \\ or control characters "
            "(nvcc's shell reads them inside its quotes); define such a value in a header"
        )


def check_flag(flag: str, where: str) -> None:
    """One compile flag of a module: a ``-D``/``-U`` like a define, any other one shell word that
    is none of :data:`REFUSED_OPTIONS` (see the module's docstring for why)."""
    if flag.startswith("-D") and len(flag) > 2:
        check_define(flag[2:], where)
        return
    if flag.startswith("-U") and len(flag) > 2:
        if not C_IDENTIFIER.fullmatch(flag[2:]):
            raise UnsafeNameError(f"{where}: {flag!r}: expected -UNAME, NAME a C identifier")
        return
    option = flag.partition("=")[0]
    reason = REFUSED_OPTIONS.get(option) or next(
        (why for prefix, why in REFUSED_PREFIXES.items() if flag.startswith(prefix)), None
    )
    if reason is not None:
        raise UnsafeNameError(
            f"{where}: {flag!r}: {reason}, which a project may not make the builder do; remove "
            "it (kernelpack runs the compilers it found, on the build's own files)"
        )
    if not SHELL_WORD.fullmatch(flag):
        raise UnsafeNameError(
            f"{where}: {flag!r}: a flag is one word of ASCII letters, digits and _+=,.:%- (nvcc "
            "pastes option values into its shell commands unquoted, and a path belongs in "
            'include-dirs); split an option from its value, e.g. ["-Xptxas", "-v"]'
        )


def check_shell_path(path: Path, where: str) -> None:
    """A folder nvcc runs in: its absolute path lands inside nvcc's double-quoted shell words, so
    it may not hold what a shell reads there (:data:`SHELL_IN_QUOTES`, ``"``, control
    characters); ``where`` names the option that moves it."""
    text = str(path)
    if not text.isprintable() or (SHELL_IN_QUOTES | {'"'}) & set(text):
        raise UnsafeNameError(
            f"{where}: {text!r}: nvcc runs its stages through a shell that would expand $, `, \\ "
            f'and " in this path; name a folder without them with {where}'
        )
