"""Lay out candle's candle-kernels sources as a kernelpack project, one module per folder, with no
source edits (issue 14's end-to-end check; tests/test_candle.py and docs/your-kernels.md use it).

    python bench/candle_project.py CANDLE_KERNELS_SRC OUT [--modules affine,unary,moe] [--targets ...]

CANDLE_KERNELS_SRC is candle's ``candle-kernels/src`` (candle 2a13b0f in docs/hipify-corpus.toml;
never committed here). Each top-level ``<module>.cu`` is copied byte for byte to
``OUT/kernel_sources/<module>/<module>.cu`` and each shared header to ``OUT/kernel_sources/include/``;
each folder (``moe/``: 3 translation units, ``mmq_gguf/``: 11) is copied as it is into
``OUT/kernel_sources/<folder>/``, a module the builder device-links from its units.
``OUT/pyproject.toml`` names the project ``candle-kernels`` (import name ``candle_kernels``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HEADER_SUFFIXES = (".cuh", ".h")
DEFAULT_TARGETS = ("gfx942", "sm_90")


def pyproject_text() -> str:
    return (
        "[build-system]\n"
        'requires = ["kernelpack-buildsys"]\n'
        'build-backend = "buildsys.backend"\n\n'
        "[project]\n"
        'name = "candle-kernels"\n'
        'version = "0.9.1"\n'
        'description = "candle\'s CUDA kernels, packed by kernelpack for AMD and NVIDIA GPUs"\n'
        'requires-python = ">=3.11"\n\n'
        "[tool.kernelpack]\n"
        'sources = "kernel_sources"\n'
        'matrix = "arch_matrix.toml"\n'
    )


def matrix_text(targets: tuple[str, ...]) -> str:
    """arch_matrix.toml with the AMD and the NVIDIA targets of ``targets``."""
    amd = [t for t in targets if t.startswith("gfx")]
    nvidia = [t for t in targets if t.startswith("sm_")]
    text = ""
    for vendor, chosen in (("amd", amd), ("nvidia", nvidia)):
        if chosen:
            text += (
                f"[{vendor}]\ntargets = [{', '.join(f'{chr(34)}{t}{chr(34)}' for t in chosen)}]\n"
            )
    return text


def lay_out(
    source: Path,
    out: Path,
    modules: list[str] | None = None,
    targets: tuple[str, ...] = DEFAULT_TARGETS,
) -> list[str]:
    """Write the project into ``out``; returns the modules laid out (sorted)."""
    folders = sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.cu")))
    found = sorted([p.stem for p in source.glob("*.cu")] + folders)
    chosen = found if modules is None else [m for m in found if m in modules]
    missing = sorted(set(modules or []) - set(found))
    if missing:
        raise SystemExit(f"{source}: no module {', '.join(missing)} (a .cu file or a folder)")
    include = out / "kernel_sources" / "include"
    include.mkdir(parents=True, exist_ok=True)
    for header in sorted(source.iterdir()):
        if header.suffix in HEADER_SUFFIXES:
            shutil.copyfile(header, include / header.name)
    for module in chosen:
        folder = out / "kernel_sources" / module
        if module in folders:
            shutil.copytree(source / module, folder, dirs_exist_ok=True)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / f"{module}.cu", folder / f"{module}.cu")
    (out / "pyproject.toml").write_text(pyproject_text())
    (out / "arch_matrix.toml").write_text(matrix_text(targets))
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="candle's candle-kernels/src folder")
    parser.add_argument("out", type=Path, help="the project folder to write")
    parser.add_argument(
        "--modules", help="comma-separated modules (default: every top-level .cu and folder)"
    )
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    args = parser.parse_args()
    if not args.source.is_dir():
        print(f"error: {args.source}: not a folder (candle-kernels/src)", file=sys.stderr)
        return 2
    modules = args.modules.split(",") if args.modules else None
    laid = lay_out(args.source, args.out, modules, tuple(args.targets.split(",")))
    print(f"{args.out}: modules {', '.join(laid)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
