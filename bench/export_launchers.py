"""Build the two programs of issue 48 item 4 here, for the lent GPU machine (which has no cargo):
a std-only Rust binary (tests/export_check/rust_launch) and a C program
(tests/export_check/c/launch.c), each embedding the sm_90 image of candle's affine module from its
own kernelpack export, libcuda opened at run time.

    PYTHONPATH=.:wheels python bench/export_launchers.py [--candle CANDLE_KERNELS_SRC] [--out DIR]

CANDLE_KERNELS_SRC defaults to KERNELPACK_CANDLE_SRC, else /work/corpus/candle/candle-kernels/src
(candle 2a13b0f). It needs nvcc, the Rust toolchain (``cargo build --offline``: the crate has no
dependencies) and gcc. OUT (default ``.gpu/export``, git-ignored: carry it with ``.gpu``) is
replaced whole and atomically with ``rust-launch``, ``c-launch`` and ``manifest.json``: each
binary's sha256, the sha256 of the sources it was built from (which
tests/test_export.py::test_candle_affine_launches_from_rust_and_c compares with the checkout's
before it runs them) and the exported images' targets and sha256. tests/test_export.py builds the
same programs the same way (:func:`build_launchers`) where cargo is present.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from bench.candle_project import lay_out, read_index_file
from kernelpack.files.atomic import atomic_folder

REPO_ROOT = Path(__file__).resolve().parent.parent
CHECKS = REPO_ROOT / "tests" / "export_check"
DEFAULT_OUT = REPO_ROOT / ".gpu" / "export"
# what the binaries are built from; a change to any makes a prebuilt folder stale
SOURCES = (
    "tests/export_check/rust/build.rs",
    "tests/export_check/rust_launch/Cargo.toml",
    "tests/export_check/rust_launch/src/main.rs",
    "tests/export_check/c/launch.c",
)
BINARIES = {"rust": "rust-launch", "c": "c-launch"}


def candle_source() -> Path:
    return Path(os.environ.get("KERNELPACK_CANDLE_SRC", "/work/corpus/candle/candle-kernels/src"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_hashes() -> dict[str, str]:
    """The sha256 of each file of SOURCES in this checkout."""
    return {name: sha256(REPO_ROOT / name) for name in SOURCES}


def _run(argv: list[str | Path], what: str, **options: object) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, **options)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise SystemExit(f"error: {what} failed:\n{(done.stdout + done.stderr)[-4000:]}")


def export_affine(candle: Path, work: Path) -> dict[str, Path]:
    """candle's affine for sm_90, laid out (bench/candle_project.py) and exported in Rust and C
    into ``work`` (the build output in ``work/build``); the export folders by language."""
    project = work / "candle"
    lay_out(candle, project, ["affine"], ("sm_90",))
    env = dict(os.environ, PYTHONPATH=f"{REPO_ROOT}:{REPO_ROOT / 'wheels'}")
    env = {k: v for k, v in env.items() if not k.startswith("KERNELPACK_BUILD_")}
    folders = {}
    for lang in ("rust", "c"):
        folders[lang] = work / f"export-{lang}"
        argv: list[str | Path] = [sys.executable, "-m", "buildsys", "export", "--lang", lang]
        argv += ["--out", folders[lang], "--project", project, "--build-out", work / "build"]
        _run(argv, f"python -m buildsys export --lang {lang}", env=env, cwd=work)
    return folders


def build_launchers(exports: dict[str, Path], work: Path) -> dict[str, Path]:
    """The Rust binary (cargo, offline, release, in a copy of tests/export_check: cargo writes
    Cargo.lock beside the crate) and the C program (gcc, strict C99) from the export folders;
    the binaries by language."""
    checks = work / "checks"
    shutil.copytree(CHECKS, checks, dirs_exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELPACK_")}
    env |= {"CARGO_TARGET_DIR": str(work / "target"), "KERNELPACK_EXPORT_DIR": str(exports["rust"])}
    crate = checks / "rust_launch"
    _run(["cargo", "build", "--offline", "--quiet", "--release"], "cargo build", cwd=crate, env=env)
    name = tomllib.loads((crate / "Cargo.toml").read_text())["package"]["name"]
    c_binary = work / "c-launch"
    strict = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic"]
    export = exports["c"]
    _run(["gcc", *strict, f"-I{export}", CHECKS / "c" / "launch.c", export / "kernels.c",
          "-ldl", "-o", c_binary], "gcc")  # fmt: skip
    return {"rust": work / "target" / "release" / name, "c": c_binary}


def images(build: Path) -> list[dict[str, str]]:
    """The images the build's index lists (module, target, sha256): what the exports embed."""
    index = read_index_file(build / "_index.py")
    return [
        {"module": name, "target": image["target"], "sha256": image["sha256"]}
        for name, module in sorted(index["modules"].items())
        for image in module["images"]
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candle", type=Path, default=candle_source(), help="candle-kernels/src")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder to replace")
    args = parser.parse_args()
    if not (args.candle / "affine.cu").is_file():
        print(f"error: {args.candle}: no affine.cu (candle's candle-kernels/src)", file=sys.stderr)
        return 2
    for tool in ("cargo", "gcc", "nvcc"):
        if shutil.which(tool) is None:
            print(f"error: {tool} is not installed (needed to build the programs)", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="kernelpack-launchers-") as scratch:
        work = Path(scratch)
        exports = export_affine(args.candle, work)
        built = build_launchers(exports, work)
        binaries = {BINARIES[lang]: sha256(path) for lang, path in sorted(built.items())}
        manifest = {
            "what": "issue 48 item 4: candle's affine_f32 launched from Rust and C (sm_90)",
            "candle_affine_cu": sha256(args.candle / "affine.cu"),
            "sources": source_hashes(),
            "images": images(work / "build"),
            "binaries": binaries,
        }
        with atomic_folder(args.out) as staging:
            for lang, path in built.items():
                shutil.copy2(path, staging / BINARIES[lang])
            (staging / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{args.out}: {', '.join(binaries)}, manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
