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
from typing import Any

from kernelpack._console import print_json, print_table
from kernelpack.errors import UsageError
from kernelpack.files.atomic import atomic_write

from ..settings import require_writable_folder
from .compat import compat_headers
from .diagnostics import Severity
from .tables import COMPAT_HEADER
from .translate import HipifyOptions, HipifyResult, hipify_source, source_sha256
from .tree_facts import scan_tree

FOLDER_SUFFIXES = (".cu", ".cuh")


@dataclass(frozen=True)
class FileResult:
    source: str  # as named in diagnostics and the header line
    output: Path
    sha256: str  # of the source, as in the header line
    result: HipifyResult


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``hipify`` subcommand to a command line's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "hipify",
        help="translate CUDA sources to HIP and report where they assume 32-lane warps",
        description="Translate CUDA sources to HIP. Diagnostics: file:line:col: severity[code]: "
        "message; silence a reviewed line with // hipify: allow(<code>) or allow(wave32).",
    )
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
    parser.set_defaults(handler=main_hipify)
    return parser


def main_hipify(args: argparse.Namespace) -> int:
    """Translate, write, report. 0: translated (warnings allowed); 1: an error diagnostic."""
    files = collect_sources(args.sources)
    options = HipifyOptions(launch_macro=args.launch_macro)
    require_writable_folder(args.out, f"{args.out} (-o)", "-o")
    results = hipify_files(files, args.out, options=options)
    for item in results:
        for diagnostic in item.result.diagnostics:
            print(diagnostic.format(), file=sys.stderr)
    users = [item for item in results if uses_compat_header(item.result.text)]
    if users:
        for name, text in compat_headers("").items():
            write_if_changed(args.out / name, text)
        print(
            f"hipify: {len(users)} of {len(results)} outputs include <{COMPAT_HEADER}>, written "
            f"to {args.out / COMPAT_HEADER}: compile them with -I {args.out}",
            file=sys.stderr,
        )
    if args.json:
        print_json(report_json(results))
    else:
        print_report(results)
    return 1 if any(item.result.has_errors for item in results) else 0


def uses_compat_header(text: str) -> bool:
    """Whether a translated text includes the compatibility header (the translator writes
    ``#include <kernelpack_hip_compat.h>``; a source may already spell it with quotes)."""
    return f"<{COMPAT_HEADER}>" in text or f'"{COMPAT_HEADER}"' in text


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


def output_path(source: Path, root: Path, out_dir: Path) -> Path:
    relative = source.relative_to(root)
    return out_dir / (relative.with_suffix(".hip") if relative.suffix == ".cu" else relative)


def hipify_files(files: list[Path], out_dir: Path, *, options: HipifyOptions) -> list[FileResult]:
    """Translate each file and write its output below out_dir (layout kept below the common root)."""
    root = Path(os.path.commonpath([p.parent for p in files])) if files else Path.cwd()
    results: list[FileResult] = []
    texts: dict[Path, str] = {}
    for path in files:
        try:
            texts[path] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            raise UsageError(
                f"hipify: {path} is not UTF-8 text (byte {error.start}); convert it first"
            ) from None
    # Feature macros and reduction helpers are defined in one file and used in others.
    tree = scan_tree({display_name(p): t for p, t in texts.items()})
    options = dataclasses.replace(options, tree=tree)
    for path, text in texts.items():
        name = display_name(path)
        result = hipify_source(text, name, options=options)
        target = output_path(path, root, out_dir)
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
