"""``python -m buildsys hipify SRC... -o DIR [--json]``: the file-level front of hipify_source.

Sources are files or folders (a folder contributes its .cu and .cuh files, recursively). Outputs
keep the sources' layout below their common folder, so relative #includes between translated
files still resolve; ``.cu`` becomes ``.hip``, headers keep their names. A file is rewritten only
when its content changes, so incremental builds see unchanged sources as unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kernelpack._console import print_json, print_table
from kernelpack.errors import UsageError
from kernelpack.files.atomic import atomic_write

from ..settings import require_writable_folder
from .compat import compat_headers
from .diagnostics import Severity
from .lexer import Kind
from .structure import SourceView
from .translate import HipifyOptions, HipifyResult, hipify_source, source_sha256
from .tree_facts import scan_tree

FOLDER_SUFFIXES = (".cu", ".cuh")


@dataclass(frozen=True)
class FileResult:
    source: str  # as named in diagnostics and the header line
    output: Path
    sha256: str  # of the source, as in the header line
    result: HipifyResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hipify`` subcommand's arguments (buildsys.cli names the subcommand), and its
    handler, main_hipify."""
    parser.set_defaults(handler=main_hipify)
    parser.add_argument(
        "sources", nargs="+", type=Path, metavar="SRC", help="CUDA files or folders"
    )
    parser.add_argument(
        "-o", "--out", type=Path, required=True, metavar="DIR", help="output folder"
    )
    parser.add_argument(
        "--launch-macro",
        action="store_true",
        help="rewrite <<<...>>> launches as hipLaunchKernelGGL (HIP compiles <<<...>>> as is)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print statistics and diagnostics as JSON"
    )


def main_hipify(args: argparse.Namespace) -> int:
    """Translate, write, report. 0: translated (warnings allowed); 1: an error diagnostic."""
    files = collect_sources(args.sources)
    options = HipifyOptions(launch_macro=args.launch_macro)
    require_writable_folder(args.out, f"{args.out} (-o)", "-o")
    texts = read_sources(files)
    included, outside = follow_includes(texts, input_roots(args.sources))
    for line in outside:
        print(line, file=sys.stderr)
    results = hipify_files(texts, args.out, options=options, keep_names=included)
    for item in results:
        for diagnostic in item.result.diagnostics:
            print(diagnostic.format(), file=sys.stderr)
    headers = compat_headers("")
    users = {name: [i for i in results if includes(i.result.text, name)] for name in headers}
    if any(users.values()):
        for name, text in headers.items():
            write_if_changed(args.out / name, text)
        for name, included_by in users.items():
            if included_by:
                print(
                    f"hipify: {len(included_by)} of {len(results)} outputs include <{name}>, "
                    f"written to {args.out / name}: compile them with -I {args.out}",
                    file=sys.stderr,
                )
    if args.json:
        print_json(report_json(results))
    else:
        print_report(results)
    return 1 if any(item.result.has_errors for item in results) else 0


def includes(text: str, header: str) -> bool:
    """Whether a translated text includes ``header``, one of the compat folder's (the translator
    writes ``#include <kernelpack_hip_compat.h>`` and ``<kernelpack_hip_libraries.h>``; a source
    may already spell it with quotes)."""
    return f"<{header}>" in text or f'"{header}"' in text


def collect_sources(sources: list[Path]) -> list[Path]:
    """The files to translate, in a stable order; a missing path is a usage error."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            found = sorted(
                p for p in source.rglob("*") if p.suffix in FOLDER_SUFFIXES and p.is_file()
            )
            if not found:
                raise UsageError(
                    f"hipify: folder {source} holds no {' or '.join(FOLDER_SUFFIXES)} files"
                )
            files.extend(found)
        elif source.is_file():
            files.append(source)
        else:
            raise UsageError(
                f"hipify: SRC {source} does not exist; pass CUDA files or folders holding them"
            )
    return list(dict.fromkeys(p.resolve() for p in files))


def input_roots(sources: list[Path]) -> tuple[Path, ...]:
    """The folders the input tree is made of: each folder named, the folder of each file named
    (resolved, so a link cannot lead an include out of them)."""
    return tuple(dict.fromkeys(s.resolve() if s.is_dir() else s.resolve().parent for s in sources))


def read_sources(files: list[Path]) -> dict[Path, str]:
    texts: dict[Path, str] = {}
    for path in files:
        try:
            texts[path] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            raise UsageError(
                f"hipify: {path} is not UTF-8 text (byte {error.start}); convert it first"
            ) from None
    return texts


def follow_includes(
    texts: dict[Path, str], roots: tuple[Path, ...]
) -> tuple[frozenset[Path], list[str]]:
    """Add to ``texts`` (in place) every file a source includes with quotes (``#include
    "media.c"``, relative to the including file, as compilers look first), whatever its suffix,
    and what those include, while it lies inside the input tree (``roots``, after resolving links
    and ``..``). Returns the files added, which keep their names (they are included by them), and
    one line for each include of an existing file outside the tree, which is not followed: the
    sources are untrusted (docs/security.md), and its output could not mirror it under -o."""
    added: set[Path] = set()
    outside: dict[Path, str] = {}
    pending = list(texts)
    while pending:
        path = pending.pop()
        for name in quoted_includes(texts[path]):
            candidate = path.parent / name
            if not candidate.is_file():
                continue  # found through -I, or a toolkit header spelt with quotes
            resolved = candidate.resolve()
            if resolved in texts:
                continue
            if not any(resolved.is_relative_to(root) for root in roots):
                outside.setdefault(
                    resolved,
                    f'hipify: {display_name(path)} includes "{name}" ({resolved}), outside the '
                    "sources' folders: not translated; name it or a folder holding it as SRC",
                )
                continue
            texts.update(read_sources([resolved]))
            added.add(resolved)
            pending.append(resolved)
    return frozenset(added), [outside[p] for p in sorted(outside)]


def quoted_includes(text: str) -> list[str]:
    """The names of a text's ``#include "..."`` directives, in order (tokens: none from comments)."""
    view = SourceView(text)
    names: list[str] = []
    for _, sig in view.directives_named("include"):
        if len(sig) >= 3 and view.tokens[sig[2]].kind is Kind.STRING:
            token = view.tokens[sig[2]].text
            if token.startswith('"') and token.endswith('"') and len(token) > 2:
                names.append(token[1:-1])
    return names


def output_path(source: Path, root: Path, out_dir: Path, *, keep_name: bool = False) -> Path:
    relative = source.relative_to(root)
    renamed = relative.suffix == ".cu" and not keep_name
    return out_dir / (relative.with_suffix(".hip") if renamed else relative)


def hipify_files(
    texts: dict[Path, str],
    out_dir: Path,
    *,
    options: HipifyOptions,
    keep_names: frozenset[Path] = frozenset(),
) -> list[FileResult]:
    """Translate each file and write its output below out_dir (layout kept below the common
    root); a file in ``keep_names`` (reached through an include) keeps its name."""
    files = list(texts)
    root = Path(os.path.commonpath([p.parent for p in files])) if files else Path.cwd()
    results: list[FileResult] = []
    # Feature macros and reduction helpers are defined in one file and used in others.
    tree = scan_tree({display_name(p): t for p, t in texts.items()})
    options = dataclasses.replace(options, tree=tree)
    for path, text in texts.items():
        name = display_name(path)
        result = hipify_source(text, name, options=options)
        target = output_path(path, root, out_dir, keep_name=path in keep_names)
        write_if_changed(target, result.text)
        results.append(FileResult(name, target, source_sha256(text), result))
    return results


def display_name(path: Path) -> str:
    """The path relative to the working folder when below it (stable across checkouts), else absolute."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def write_if_changed(target: Path, text: str) -> None:
    """Atomic write (temp file in the same folder, then rename), skipped when nothing changed."""
    data = text.encode("utf-8")
    if target.is_file() and target.read_bytes() == data:
        return
    try:
        atomic_write(target, data)
    except OSError as error:
        raise UsageError(
            f"hipify: cannot write {target} ({error.strerror}); name a writable folder with -o DIR"
        ) from None


def report_json(results: list[FileResult]) -> dict[str, object]:
    files = []
    for item in results:
        stats = item.result.stats
        files.append(
            {
                "source": item.source,
                "output": str(item.output),
                "sha256": item.sha256,
                **stats.as_json(),
                "diagnostics": [d.as_json() for d in item.result.diagnostics],
            }
        )
    return {"files": files, "totals": _totals(results)}


def _totals(results: list[FileResult]) -> dict[str, object]:
    by_kind: dict[str, int] = {}
    for item in results:
        for kind, count in item.result.stats.by_kind().items():
            by_kind[kind] = by_kind.get(kind, 0) + count
    return {
        "files": len(results),
        "lines": sum(item.result.stats.lines for item in results),
        "converted": sum(item.result.stats.converted for item in results),
        "by_kind": dict(sorted(by_kind.items())),
        **{
            severity.value + "s": sum(item.result.count(severity) for item in results)
            for severity in Severity
        },
    }


def print_report(results: list[FileResult]) -> None:
    merged: dict[tuple[str, str, str], int] = {}
    for item in results:
        for c in item.result.stats.conversions:
            merged[(c.kind, c.cuda, c.hip)] = merged.get((c.kind, c.cuda, c.hip), 0) + c.count
    totals = _totals(results)
    print_table(
        f"hipify: references converted ({totals['converted']})",
        ("kind", "CUDA", "HIP", "count"),
        [(kind, cuda, hip, n) for (kind, cuda, hip), n in sorted(merged.items())],
    )
    print_table(
        f"hipify: {totals['files']} files, {totals['lines']} lines",
        ("source", "output", "lines", "converted", "errors", "warnings", "notes"),
        [
            (
                item.source,
                str(item.output),
                item.result.stats.lines,
                item.result.stats.converted,
                item.result.count(Severity.ERROR),
                item.result.count(Severity.WARNING),
                item.result.count(Severity.NOTE),
            )
            for item in results
        ],
    )
