"""``python -m buildsys export --lang rust|c --out DIR``: build as ``build`` does, then write the
build's modules as source for a Rust crate or a C/C++ program (docs/rust.md, docs/c.md).

The build takes every build setting (``--project``, ``--targets``, ``--jobs``, ...) and writes its
output where ``build`` would (``--build-out`` moves it); ``--from DIR`` exports an existing build
output folder (a merge of CI shards, say) without building. The export is read from that folder's
index and files only (buildsys.export.tables), never from discovery again.

Into ``--out`` go only the files of the export (kernels.rs with its image files, or kernels.h and
kernels.c), each replaced atomically and only when its bytes change (so cargo and make see an
unchanged export as unchanged); nothing else there is touched. SOURCE_DATE_EPOCH, when set,
becomes their modification time.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from kernelpack._console import print_json, print_table
from kernelpack.files.atomic import atomic_write

from ..build import build
from ..cache import sha256_hex
from ..errors import ExportError
from ..report import failure_error, print_summary
from ..settings import add_arguments as add_settings_arguments
from ..settings import environment_epoch, require_writable_folder, resolve_settings
from . import c, rust
from .tables import Export, read_export

LANGUAGES = ("rust", "c")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``export`` subcommand's arguments: the build's settings, with the build's --out as
    --build-out (buildsys.cli makes the subcommand's parser with ``conflict_handler="resolve"``),
    and its handler, main_export."""
    parser.set_defaults(handler=main_export)
    add_settings_arguments(parser, "build")
    parser.add_argument(
        "--out",
        dest="export_out",
        metavar="DIR",
        help="the folder the export is written into (made if missing)",
    )
    parser.add_argument(
        "--build-out",
        dest="out",
        metavar="DIR",
        help="where the build writes its output, as build's --out (default: the project's "
        "[tool.kernelpack] out, else build/device) [KERNELPACK_BUILD_OUT]",
    )
    parser.add_argument("--lang", metavar="LANG", help="rust or c")
    parser.add_argument(
        "--from",
        dest="from_folder",
        metavar="DIR",
        help="export this build output folder (its _index.py and device/) instead of building",
    )
    parser.add_argument(
        "--prefix",
        metavar="NAME",
        help=f"C only: the prefix of every name the export declares (default: {c.DEFAULT_PREFIX})",
    )


def main_export(args: argparse.Namespace) -> int:
    lang = _language(args.lang)
    if args.export_out is None:
        raise ExportError("export: --out DIR is required: the folder the export is written into")
    out = Path(args.export_out).expanduser()
    if args.prefix is not None and lang != "c":
        raise ExportError(f"--prefix: names the C export's declarations; --lang {lang} has none")
    prefix = c.DEFAULT_PREFIX if args.prefix is None else args.prefix
    if lang == "c":
        c.check_prefix(prefix)  # before a build, not after it
    require_writable_folder(out, f"{out} (--out)", "--out")
    build_counts: dict[str, int] | None = None
    if args.from_folder is not None:
        folder = Path(args.from_folder).expanduser()
    else:
        settings = resolve_settings(args, command="build")
        result = build(settings, progress=True)
        if not args.json:
            print_summary(result, as_json=False)
            print()
        if result.failed:
            raise failure_error(result)
        folder = settings.out
        build_counts = {s: result.count(s) for s in ("compiled", "cached")}
    export = read_export(folder)
    if not export.modules:
        raise ExportError(f"{folder}: the build has no modules; nothing to export")
    files = rust.render(export) if lang == "rust" else c.render(export, prefix)
    changed = write_files(out, files)
    report = export_report(lang, out, folder, export, files, changed, build_counts)
    if args.json:
        print_json(report)
    else:
        rows = [
            (f["file"], f["size"], "written" if f["written"] else "unchanged")
            for f in report["files"]
        ]
        print_table(
            f"export --lang {lang}: {len(export.modules)} modules -> {out}",
            ("file", "bytes", ""),
            rows,
        )
    return 0


def _language(value: str | None) -> str:
    if value not in LANGUAGES:
        given = "none given" if value is None else f"{value!r}"
        raise ExportError(f"--lang: {given}; known: {', '.join(LANGUAGES)}")
    return value


def write_files(out: Path, files: dict[str, bytes]) -> set[str]:
    """Write ``files`` into ``out``; those whose bytes were there already are left as they are.
    The names of the files written."""
    changed = set()
    for name, data in sorted(files.items()):
        path = out / name
        try:
            same = path.is_file() and path.read_bytes() == data
        except OSError:
            same = False
        if not same:
            try:
                atomic_write(path, data)
            except OSError as error:
                raise ExportError(
                    f"{path} (--out): cannot write ({error.strerror or error}); name a writable "
                    "folder with --out DIR"
                ) from None
            changed.add(name)
    epoch = environment_epoch()
    if epoch is not None:
        for name in files:
            os.utime(out / name, (epoch, epoch))
    return changed


def export_report(
    lang: str,
    out: Path,
    folder: Path,
    export: Export,
    files: dict[str, bytes],
    changed: set[str],
    build_counts: dict[str, int] | None,
) -> dict[str, Any]:
    """What ``--json`` prints: the files written, the modules with their images, the build."""
    return {
        "lang": lang,
        "out": str(out),
        "from": str(folder),
        "version": export.version,
        "build": build_counts,
        "files": [
            {
                "file": name,
                "size": len(data),
                "sha256": sha256_hex(data),
                "written": name in changed,
            }
            for name, data in sorted(files.items())
        ],
        "modules": [
            {
                "name": m.name,
                "constant": m.constant,
                "kernels": len(m.kernels),
                "amd": None
                if m.amd is None
                else {"file": m.amd.file, "targets": [i.target for i in m.amd.images]},
                "nvidia": [{"file": i.file, "target": i.target, "kind": i.kind} for i in m.nvidia],
            }
            for m in export.modules
        ],
    }
