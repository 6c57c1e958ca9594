"""``python -m buildsys export --lang rust|c``: a build's modules as Rust or C source (issue 48).

The export's tables are checked by programs in the language itself: tests/export_check/rust (a
crate with no dependencies, built with ``cargo build --offline`` through the build.rs of
docs/rust.md) and tests/export_check/c/check.c (gcc) print one tab-separated line per module,
image, kernel and selection from the tables they were built with, hashing the embedded bytes
themselves, and compare them with an expectations file this test writes from independent sources:
``kernelpack inspect --json`` of the build's image files (targets, bundle entries, symbols),
hashlib over the files and the decompressed bundle entries, the build's index for the lookup names
(the exporter's input, so only its transcription is checked there), and the selection by compute
capability worked out by hand from the rules of docs/loader.md.

The fast tests export hand-made build outputs (``--from``), hostile kernel names among them; the
real builds (examples/vecops, and candle's affine, binary and unary where candle's sources are
present: KERNELPACK_CANDLE_SRC, as tests/test_candle.py) need nvcc and the AMD toolchain.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from builder_env import builder_env

from bench.export_launchers import BINARIES, build_launchers, export_affine, source_hashes
from buildsys import REPO_ROOT
from buildsys.export.tables import ExportModule, read_export, selection_table
from buildsys.index_writer import AMD_BUNDLE_ID_PREFIX, render_index
from kernelpack.formats import compress_bundle, read_image_file, write_bundle
from kernelpack.formats.index import SCHEMA_VERSION
from kernelpack.targets import NvidiaTarget, select_image

CHECKS = REPO_ROOT / "tests" / "export_check"
# prebuilt launch programs (bench/export_launchers.py), carried to the lent GPU with .gpu
LAUNCHERS = Path(os.environ.get("KERNELPACK_EXPORT_LAUNCHERS", REPO_ROOT / ".gpu" / "export"))
CANDLE_SRC = Path(os.environ.get("KERNELPACK_CANDLE_SRC", "/work/corpus/candle/candle-kernels/src"))


def _cargo_missing() -> str | None:
    """Why cargo cannot build here, or None: not installed, or a rustup with no toolchain chosen
    (a fresh HOME: rustup keeps its toolchains there)."""
    if shutil.which("cargo") is None:
        return "cargo is not installed"
    try:
        probe = subprocess.run(["cargo", "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cargo does not run: {error}"
    if probe.returncode != 0:
        first = (probe.stderr.strip().splitlines() or ["no message"])[0]
        return f"cargo does not run: {first}"
    return None


CARGO_MISSING = _cargo_missing()
needs_cargo = pytest.mark.skipif(CARGO_MISSING is not None, reason=str(CARGO_MISSING))
needs_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("g++") is None, reason="gcc/g++ not installed"
)
needs_candle = pytest.mark.skipif(
    not (CANDLE_SRC / "unary.cu").is_file(),
    reason=f"candle's candle-kernels sources are not at {CANDLE_SRC} (set KERNELPACK_CANDLE_SRC)",
)


def _export(*args: str, cwd: Path = REPO_ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "buildsys", "export", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=builder_env(**env),
    )


def _exported(*args: str) -> dict[str, Any]:
    result = _export(*args, "--json")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)  # stdout is pure JSON
    return report


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# --- The expectations -----------------------------------------------------------------------------


def _inspect(path: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "kernelpack", "inspect", str(path), "--json"],
        capture_output=True,
        text=True,
        env=builder_env(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _symbol_lines(tag: str, module: str, target: str, names: Mapping[str, str]) -> list[str]:
    return [f"{tag}\t{module}\t{target}\t{name}\t{names[name]}" for name in sorted(names)]


def _named(symbols: Sequence[str], index_symbols: Mapping[str, str], where: str) -> dict[str, str]:
    """Lookup name -> symbol for the symbols an image defines (as inspect reads them), named by the
    build's index, which must name exactly those."""
    by_symbol = {symbol: name for name, symbol in index_symbols.items()}
    assert sorted(by_symbol) == sorted(symbols), where
    return {by_symbol[symbol]: symbol for symbol in symbols}


def expectations(
    device: Path, index: Mapping[str, Any], selections: Mapping[int, str | None]
) -> list[str]:
    """The lines the check programs must print for the build output whose device/ folder is
    ``device`` and whose index is ``index``: images as inspect reads them from device/, sha256 by
    hashlib, the NVIDIA pick for each capability in ``selections`` (the same for every module)."""
    modules = sorted(index["modules"])
    lines = [f"modules\t{len(modules)}"]
    for position, module in enumerate(modules):
        entry = index["modules"][module]
        symbols_of = {image["target"]: image["symbols"] for image in entry["images"]}
        lines.append(f"module\t{module}\t{position}\t{position}")
        lines += [f"kernel\t{module}\t{name}" for name in sorted(entry["kernels"])]
        bundle_path = device / f"{module}.hsaco"
        if bundle_path.is_file():
            data = bundle_path.read_bytes()
            report = _inspect(bundle_path)
            method = report["compression"][0]["method"] if report["compression"] else "none"
            sha = _sha(data)
            lines.append(
                f"amd\t{module}\t{bundle_path.name}\t{method}\t{len(data)}\t{sha}\t{sha}\t0"
            )
            bundle = read_image_file(data, str(bundle_path))
            agreed: dict[str, set[str]] = {}
            for row, found in zip(report["entries"], bundle.entries, strict=True):  # type: ignore[union-attr]
                if row["image"] is None:
                    continue  # the host entry
                target = row["target"]
                code = bytes(found.view)
                lines.append(
                    f"amd-image\t{module}\t{target}\t{row['offset']}\t{row['size']}\t{_sha(code)}"
                )
                symbols = [k["name"] for k in row["image"]["kernels"]]
                named = _named(symbols, symbols_of[target], f"{module} {target}")
                lines += _symbol_lines("amd-symbol", module, target, named)
                for name, symbol in named.items():
                    agreed.setdefault(name, set()).add(symbol)
            same = {name: found.pop() for name, found in agreed.items() if len(found) == 1}
            lines += _symbol_lines("amd-bundle-symbol", module, "*", same)
        for path in sorted(device.glob(f"{module}.*")):
            if path.suffix not in (".cubin", ".ptx"):
                continue
            target = path.name.removeprefix(f"{module}.").removesuffix(path.suffix)
            data = path.read_bytes()
            report = _inspect(path)
            kind = report["format"]
            assert kind == path.suffix[1:], path
            sha = _sha(data)
            lines.append(
                f"nvidia\t{module}\t{target}\t{kind}\t{path.name}\t{len(data)}\t{sha}\t{sha}"
            )
            if kind == "cubin":
                assert report["target"] == target
                symbols = [k["name"] for k in report["kernels"]]
                lines.append(f"aligned\t{module}\t{target}\t0")
            else:
                assert report["target"] == target.replace("compute_", "sm_")
                symbols = list(report["entries"])
                lines.append(f"ptx-nul\t{module}\t{target}\t0")
            named = _named(symbols, symbols_of[target], f"{module} {target}")
            lines += _symbol_lines("nvidia-symbol", module, target, named)
        for capability, chosen in sorted(selections.items()):
            lines.append(f"select\t{module}\t{capability}\t{chosen or '-'}")
    return lines


def _write_expectations(path: Path, lines: Sequence[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


# --- The check programs ---------------------------------------------------------------------------


def _cargo_build(work: Path, crate: str, *, prebuilt: Path | None = None, **env: str) -> Path:
    """Build one crate of tests/export_check (a copy in ``work``: cargo writes Cargo.lock beside
    it) offline, with the export from ``prebuilt`` or from its build.rs running the exporter; the
    binary's path."""
    checks = work / "checks"
    if not checks.is_dir():
        shutil.copytree(CHECKS, checks)
    variables = builder_env(CARGO_TARGET_DIR=str(work / "target"), **env)
    variables.pop("KERNELPACK_EXPORT_DIR", None)
    if prebuilt is not None:
        variables["KERNELPACK_EXPORT_DIR"] = str(prebuilt)
    built = subprocess.run(
        ["cargo", "build", "--offline", "--quiet"],
        cwd=checks / crate,
        capture_output=True,
        text=True,
        env=variables,
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-6000:]
    name = tomllib.loads((checks / crate / "Cargo.toml").read_text())["package"]["name"]
    return work / "target" / "debug" / name


def _cargo_check(
    work: Path, expected: Path, *, prebuilt: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """The check crate built (:func:`_cargo_build`) and run on ``expected``."""
    binary = _cargo_build(work, "rust", prebuilt=prebuilt, **env)
    return subprocess.run([binary, expected], capture_output=True, text=True)


def _gcc_check(work: Path, export: Path, expected: Path) -> subprocess.CompletedProcess[str]:
    """Compile kernels.c as strict C, check.c against it with gcc, from_cpp.cpp with g++ (the
    header from C++), and run the check."""
    work.mkdir(parents=True, exist_ok=True)
    strict = ["-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{export}"]
    for command in (
        ["gcc", "-std=c99", *strict, "-c", str(export / "kernels.c"), "-o", str(work / "kernels.o")],
        ["gcc", "-std=c99", *strict, str(CHECKS / "c" / "check.c"), str(work / "kernels.o"),
         "-o", str(work / "check")],
        ["g++", "-std=c++11", *strict, str(CHECKS / "c" / "from_cpp.cpp"), str(work / "kernels.o"),
         "-o", str(work / "from_cpp")],
    ):  # fmt: skip
        compiled = subprocess.run(command, capture_output=True, text=True)
        assert compiled.returncode == 0, compiled.stderr[-4000:]
    from_cpp = subprocess.run([work / "from_cpp"], capture_output=True, text=True)
    assert from_cpp.returncode == 0, from_cpp.stderr
    return subprocess.run([work / "check", expected], capture_output=True, text=True)


def _agrees(result: subprocess.CompletedProcess[str], lines: Sequence[str]) -> None:
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert result.stdout.strip() == f"ok: {len(lines)} lines agree"


# --- A hand-made build output -------------------------------------------------------------------

# Kernel names are C++ names of any spelling: quotes, backslashes, trigraphs, non-ASCII text
# and control characters must all survive into both languages' string literals.
HOSTILE_NAMES = {
    'op<"a\\b">': '_Z2opIXadL_Z1aEEEvv"\\',
    "k??=trigraph?": "k??=trigraph?",
    "übung<ß, 2>": "_Z5\u00fcbung",
    "ctl\x01\x7f": "ctl\x01\x7f",
    "*/ comment": "*/",
}


def make_build_output(folder: Path, names: Mapping[str, str] = HOSTILE_NAMES) -> dict[str, Any]:
    """A build output of one module, ``m``, with a gfx942 code object in a compressed bundle, an
    sm_90 cubin and a compute_80 PTX (made-up bytes: the exporter checks sha256, not contents)."""
    device = folder / "device"
    device.mkdir(parents=True)
    code = b"\x7fELF fake code object" * 11
    bundle = write_bundle([(AMD_BUNDLE_ID_PREFIX + "gfx942", code)])
    entry = next(e for e in read_image_file(bundle, "m.hsaco").entries if e.target)  # type: ignore[union-attr]
    (device / "m.hsaco").write_bytes(compress_bundle(bundle))
    cubin, ptx = b"\x7fELF fake cubin\0" * 7, b".version 8.0\n.target sm_80\n"
    (device / "m.sm_90.cubin").write_bytes(cubin)
    (device / "m.compute_80.ptx").write_bytes(ptx)

    def image(vendor: str, target: str, kind: str, file: str, data: bytes, **place: Any) -> Any:
        return {
            "vendor": vendor,
            "target": target,
            "kind": kind,
            "file": file,
            "offset": place.get("offset", 0),
            "size": len(data),
            "sha256": _sha(data),
            "compression": place.get("compression", "none"),
            "kernels": {},
            "symbols": dict(sorted(names.items())),
        }

    index = {
        "schema": SCHEMA_VERSION,
        "version": "1.2.3",
        "build": {"toolchains": {}, "flags": {}, "sources": {"m": "0" * 64}},
        "modules": {
            "m": {
                "kernels": {name: [] for name in sorted(names)},
                "source": "",
                "source_sha256": "",
                "images": [
                    image("amd", "gfx942", "code_object", "device/m.hsaco", code,
                          offset=entry.offset, compression="zstd"),
                    image("nvidia", "sm_90", "cubin", "device/m.sm_90.cubin", cubin),
                    image("nvidia", "compute_80", "ptx", "device/m.compute_80.ptx", ptx),
                ],
            }
        },
    }  # fmt: skip
    (folder / "_index.py").write_text(render_index(index), encoding="utf-8")  # type: ignore[arg-type]
    return index


def fake_expectations(folder: Path, index: Mapping[str, Any]) -> list[str]:
    """What the check programs must print for make_build_output's folder (no inspect: the bytes
    are made up), with the selection for sm_90 + compute_80."""
    code = b"\x7fELF fake code object" * 11
    bundle = (folder / "device" / "m.hsaco").read_bytes()
    (amd, cubin, ptx) = index["modules"]["m"]["images"]
    names = HOSTILE_NAMES
    lines = ["modules\t1", "module\tm\t0\t0", *(f"kernel\tm\t{n}" for n in names)]
    lines.append(f"amd\tm\tm.hsaco\tzstd\t{len(bundle)}\t{_sha(bundle)}\t{_sha(bundle)}\t0")
    lines.append(f"amd-image\tm\tgfx942\t{amd['offset']}\t{len(code)}\t{_sha(code)}")
    lines += _symbol_lines("amd-symbol", "m", "gfx942", names)
    lines += _symbol_lines("amd-bundle-symbol", "m", "*", names)
    for image, tag in ((cubin, "aligned"), (ptx, "ptx-nul")):
        data = (folder / image["file"]).read_bytes()
        file = image["file"].removeprefix("device/")
        lines.append(
            f"nvidia\tm\t{image['target']}\t{image['kind']}\t{file}\t{len(data)}\t{_sha(data)}\t"
            f"{_sha(data)}"
        )
        lines.append(f"{tag}\tm\t{image['target']}\t0")
        lines += _symbol_lines("nvidia-symbol", "m", image["target"], names)
    lines += [f"select\tm\t{cc}\t{t}" for cc, t in SM90_COMPUTE80.items()]
    return lines


# The loader's rules (docs/loader.md) for an sm_90 cubin and compute_80 PTX, by hand: a cubin runs
# on its major version from its minor up, PTX on its capability and every newer one, cubins first.
SM90_COMPUTE80 = {0: "-", 75: "-", 80: "compute_80", 86: "compute_80", 89: "compute_80",
                  90: "sm_90", 99: "sm_90", 100: "compute_80", 120: "compute_80",
                  990: "compute_80"}  # fmt: skip
SM90_ONLY = {75: "-", 89: "-", 90: "sm_90", 99: "sm_90", 100: "-", 120: "-"}
SM90_COMPUTE90 = {80: "-", 89: "-", 90: "sm_90", 99: "sm_90", 100: "compute_90", 120: "compute_90"}


# --- Fast tests -----------------------------------------------------------------------------------


def _nvidia_images(targets: Sequence[str]) -> list[dict[str, str]]:
    return [
        {"vendor": "nvidia", "target": t, "kind": "ptx" if t.startswith("compute") else "cubin"}
        for t in targets
    ]


TARGET_SETS = [
    ("sm_90", "compute_80"),
    ("sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_120", "compute_90"),
    ("sm_90a",),
    ("compute_75", "compute_90a", "sm_75"),
    ("sm_120",),
    (),
]


@pytest.mark.parametrize("targets", TARGET_SETS, ids=lambda t: ",".join(t) or "none")
def test_the_selection_table_picks_what_the_loader_picks(targets: tuple[str, ...]) -> None:
    """At every capability up to 99.9, the table's pick is select_image's, and rows only where the
    pick changes."""
    images = _nvidia_images(targets)
    table = selection_table(images)
    module = ExportModule("m", "M", (), None, tuple(images), table)  # type: ignore[arg-type]
    assert table[0][0] == 0
    assert all(a[1] != b[1] for a, b in itertools.pairwise(table))
    for capability in range(1000):
        expected, _ = select_image(images, NvidiaTarget(capability // 10, capability % 10))
        assert module.select(capability) is expected, capability


def test_the_selection_table_follows_the_rules_by_hand() -> None:
    images = _nvidia_images(["sm_90", "compute_80"])
    module = ExportModule("m", "M", (), None, tuple(images), selection_table(images))  # type: ignore[arg-type]
    for capability, target in SM90_COMPUTE80.items():
        chosen = module.select(capability)
        assert (chosen["target"] if chosen else "-") == target, capability  # type: ignore[index]


def test_export_of_a_build_output_is_byte_reproducible(tmp_path: Path) -> None:
    make_build_output(tmp_path / "build")
    for lang in ("rust", "c"):
        first, second = tmp_path / f"{lang}1", tmp_path / f"{lang}2"
        for out in (first, second):
            _exported("--lang", lang, "--out", str(out), "--from", str(tmp_path / "build"))
        assert _folder_bytes(first) == _folder_bytes(second)
    assert sorted(p.name for p in (tmp_path / "rust1").iterdir()) == [
        "kernels.rs",
        "m.compute_80.ptx",
        "m.hsaco",
        "m.sm_90.cubin",
    ]
    assert sorted(p.name for p in (tmp_path / "c1").iterdir()) == ["kernels.c", "kernels.h"]
    # the image files are the build's, byte for byte
    for name in ("m.hsaco", "m.sm_90.cubin", "m.compute_80.ptx"):
        assert (tmp_path / "rust1" / name).read_bytes() == (
            tmp_path / "build/device" / name
        ).read_bytes()


def test_json_says_what_was_written(tmp_path: Path) -> None:
    make_build_output(tmp_path / "build")
    out = tmp_path / "out"
    report = _exported("--lang", "c", "--out", str(out), "--from", str(tmp_path / "build"))
    assert report["lang"] == "c" and report["out"] == str(out) and report["build"] is None
    files = {f["file"]: f for f in report["files"]}
    assert sorted(files) == ["kernels.c", "kernels.h"]
    for name, row in files.items():
        data = (out / name).read_bytes()
        assert (row["size"], row["sha256"], row["written"]) == (len(data), _sha(data), True)
    (module,) = report["modules"]
    assert module["name"] == "m" and module["constant"] == "M"
    assert module["amd"] == {"file": "m.hsaco", "targets": ["gfx942"]}
    assert [i["target"] for i in module["nvidia"]] == ["sm_90", "compute_80"]
    again = _exported("--lang", "c", "--out", str(out), "--from", str(tmp_path / "build"))
    assert not any(f["written"] for f in again["files"])  # unchanged files are left alone


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lang", "go", "--out", "OUT"], "--lang: 'go'; known: rust, c"),
        (["--out", "OUT"], "--lang: none given; known: rust, c"),
        (["--lang", "rust"], "--out DIR is required"),
        (["--lang", "rust", "--out", "FILE"], "exists and is not a folder"),
        (["--lang", "rust", "--out", "OUT", "--prefix", "kp"], "--prefix: names the C export"),
        (["--lang", "c", "--out", "OUT", "--prefix", "9kp"], "--prefix '9kp': the C export's"),
        (["--lang", "c", "--out", "OUT", "--from", "EMPTY"], "cannot read the build's index"),
    ],
    ids=["unknown-lang", "no-lang", "no-out", "out-is-a-file", "prefix-rust", "bad-prefix", "not-a-build"],
)  # fmt: skip
def test_bad_usage_is_one_line_and_exit_status_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "EMPTY").mkdir()
    args = [str(tmp_path / a) if a in ("OUT", "FILE", "EMPTY") else a for a in args]
    result = _export(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and message in line, line


def test_modules_that_would_share_a_constant_are_refused(tmp_path: Path) -> None:
    index = make_build_output(tmp_path / "build", {"k": "k"})
    modules = index["modules"]
    modules["M"] = modules["m"]
    (tmp_path / "build" / "_index.py").write_text(render_index(index), encoding="utf-8")
    result = _export(
        "--lang", "rust", "--out", str(tmp_path / "out"), "--from", str(tmp_path / "build")
    )
    assert result.returncode == 2
    assert "modules 'M' and 'm': both would be exported as M" in result.stderr


def test_an_image_the_index_does_not_describe_is_refused(tmp_path: Path) -> None:
    make_build_output(tmp_path / "build")
    cubin = tmp_path / "build/device/m.sm_90.cubin"
    changed = bytearray(cubin.read_bytes())
    changed[-1] ^= 1
    cubin.write_bytes(changed)
    result = _export(
        "--lang", "c", "--out", str(tmp_path / "out"), "--from", str(tmp_path / "build")
    )
    assert (
        result.returncode == 1
        and "has sha256" in result.stderr
        and "the index says" in result.stderr
    )
    cubin.write_bytes(changed[:-1])
    result = _export(
        "--lang", "c", "--out", str(tmp_path / "out"), "--from", str(tmp_path / "build")
    )
    assert result.returncode == 2 and "expected exactly the 112 bytes" in result.stderr
    assert not (tmp_path / "out" / "kernels.c").exists()


def test_an_index_naming_a_file_outside_device_is_refused(tmp_path: Path) -> None:
    index = make_build_output(tmp_path / "build")
    index["modules"]["m"]["images"][1]["file"] = "device/../../secret"
    (tmp_path / "build" / "_index.py").write_text(render_index(index), encoding="utf-8")
    result = _export(
        "--lang", "rust", "--out", str(tmp_path / "out"), "--from", str(tmp_path / "build")
    )
    assert result.returncode == 2 and "an image file device/<name>" in result.stderr


def test_read_export_reads_the_build_output(tmp_path: Path) -> None:
    make_build_output(tmp_path / "build")
    export = read_export(tmp_path / "build")
    (module,) = export.modules
    assert export.version == "1.2.3" and module.constant == "M"
    assert module.kernels == tuple(sorted(HOSTILE_NAMES))
    assert module.amd is not None and [i.target for i in module.amd.images] == ["gfx942"]
    assert [(i.target, i.kind) for i in module.nvidia] == [
        ("sm_90", "cubin"),
        ("compute_80", "ptx"),
    ]


@needs_cargo
def test_rust_holds_hostile_kernel_names_and_the_tables(tmp_path: Path) -> None:
    index = make_build_output(tmp_path / "build")
    _exported("--lang", "rust", "--out", str(tmp_path / "rs"), "--from", str(tmp_path / "build"))
    lines = fake_expectations(tmp_path / "build", index)
    expected = _write_expectations(tmp_path / "expected.txt", lines)
    _agrees(_cargo_check(tmp_path / "cargo", expected, prebuilt=tmp_path / "rs"), lines)


@needs_gcc
def test_c_holds_hostile_kernel_names_and_the_tables(tmp_path: Path) -> None:
    index = make_build_output(tmp_path / "build")
    _exported("--lang", "c", "--out", str(tmp_path / "c"), "--from", str(tmp_path / "build"))
    lines = fake_expectations(tmp_path / "build", index)
    expected = _write_expectations(tmp_path / "expected.txt", lines)
    _agrees(_gcc_check(tmp_path / "gcc", tmp_path / "c", expected), lines)


# --- Real builds ----------------------------------------------------------------------------------


def _read_index(folder: Path) -> dict[str, Any]:
    from buildsys.index_writer import read_index

    return dict(read_index((folder / "_index.py").read_text(encoding="utf-8")))


@needs_cargo
@needs_gcc
@pytest.mark.toolchain
@pytest.mark.nvcc
def test_vecops_exports_agree_with_inspect_in_rust_and_c(tmp_path: Path) -> None:
    """examples/vecops for gfx942 and sm_90: exported twice (byte-identical), the Rust check built
    by cargo through its build.rs running the exporter itself, the C check by gcc."""
    project = REPO_ROOT / "examples" / "vecops"
    build = tmp_path / "build"
    settings = ("--project", str(project), "--targets", "sm_90,gfx942", "--build-out", str(build))
    first = _exported("--lang", "rust", "--out", str(tmp_path / "rs1"), *settings)
    _exported("--lang", "rust", "--out", str(tmp_path / "rs2"), *settings)
    assert first["build"]["compiled"] + first["build"]["cached"] == 6
    assert _folder_bytes(tmp_path / "rs1") == _folder_bytes(tmp_path / "rs2")
    index = _read_index(build)
    assert sorted(index["modules"]) == ["axpy", "dot", "elementwise"]
    lines = expectations(build / "device", index, SM90_ONLY)
    expected = _write_expectations(tmp_path / "expected.txt", lines)
    targets = {"KERNELPACK_BUILD_TARGETS": "sm_90,gfx942"}
    rust = _cargo_check(
        tmp_path / "cargo",
        expected,
        KERNELPACK_PROJECT=str(project),
        KERNELPACK_PYTHON=sys.executable,
        KERNELPACK_BUILD_OUT=str(tmp_path / "build-by-cargo"),
        **targets,
    )
    _agrees(rust, lines)
    _exported("--lang", "c", "--out", str(tmp_path / "c1"), *settings)
    _exported("--lang", "c", "--out", str(tmp_path / "c2"), *settings)
    assert _folder_bytes(tmp_path / "c1") == _folder_bytes(tmp_path / "c2")
    _agrees(_gcc_check(tmp_path / "gcc", tmp_path / "c1", expected), lines)


@needs_cargo
@needs_gcc
@pytest.mark.toolchain
@pytest.mark.nvcc
def test_kernelpacks_own_modules_export_in_rust_and_c(tmp_path: Path) -> None:
    """kernelpack's own mlp and walk for gfx942 and sm_90 (build output in tmp_path, not the
    package folder): both exports agree with inspect in their languages."""
    build = tmp_path / "build"
    settings = ("--project", str(REPO_ROOT), "--targets", "sm_90,gfx942", "--build-out", str(build))
    _exported("--lang", "rust", "--out", str(tmp_path / "rs"), *settings)
    _exported("--lang", "c", "--out", str(tmp_path / "c"), *settings)
    index = _read_index(build)
    assert sorted(index["modules"]) == ["mlp", "walk"]
    lines = expectations(build / "device", index, SM90_ONLY)
    expected = _write_expectations(tmp_path / "expected.txt", lines)
    _agrees(_cargo_check(tmp_path / "cargo", expected, prebuilt=tmp_path / "rs"), lines)
    _agrees(_gcc_check(tmp_path / "gcc", tmp_path / "c", expected), lines)


@needs_candle
@needs_cargo
@needs_gcc
@pytest.mark.toolchain
@pytest.mark.nvcc
def test_candle_subset_exports_agree_with_inspect_in_rust_and_c(tmp_path: Path) -> None:
    """candle's affine, binary and unary (laid out as tests/test_candle.py does) for gfx942, sm_90
    and compute_90 PTX (candle's fp8 kernels need 8.9): the prebuilt export folder into the
    crate, the C export into gcc."""
    from bench.candle_project import lay_out

    project = tmp_path / "candle"
    modules = lay_out(
        CANDLE_SRC, project, ["affine", "binary", "unary"], ("gfx942", "sm_90", "compute_90")
    )
    assert modules == ["affine", "binary", "unary"]
    build = tmp_path / "build"
    settings = ("--project", str(project), "--build-out", str(build))
    _exported("--lang", "rust", "--out", str(tmp_path / "rs"), *settings)
    _exported("--lang", "c", "--out", str(tmp_path / "c"), *settings)
    index = _read_index(build)
    lines = expectations(build / "device", index, SM90_COMPUTE90)
    assert sum(line.startswith("kernel\taffine\taffine_f32") for line in lines) == 1
    expected = _write_expectations(tmp_path / "expected.txt", lines)
    _agrees(_cargo_check(tmp_path / "cargo", expected, prebuilt=tmp_path / "rs"), lines)
    _agrees(_gcc_check(tmp_path / "gcc", tmp_path / "c", expected), lines)
    # the GPU programs (test_candle_affine_launches_from_rust_and_c) build here too, as
    # bench/export_launchers.py builds them for the lent GPU, and start cleanly without it
    built = build_launchers({"rust": tmp_path / "rs", "c": tmp_path / "c"}, tmp_path / "launch")
    for program in built.values():
        _check_launcher_without_gpu(program, tmp_path)


def _check_launcher_without_gpu(program: Path, work: Path) -> None:
    """A launch program: libcuda opened at run time (not a NEEDED library), bad arguments refused
    in one line with exit status 2, and, where this machine has no driver, one line saying so
    with exit status 1."""
    needed = subprocess.run(["readelf", "-dW", program], capture_output=True, text=True, check=True)
    assert "libcuda" not in needed.stdout, needed.stdout
    usage = subprocess.run([program], capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stdout == "", usage
    assert len(usage.stderr.splitlines()) == 1 and "usage:" in usage.stderr, usage.stderr
    (work / "one.f32").write_bytes(b"\0\0\x80\x3f")
    ran = subprocess.run([program, work / "one.f32", work / "out.f32", "2", "1"],
                         capture_output=True, text=True)  # fmt: skip
    if _has_libcuda():
        return
    assert ran.returncode == 1, ran
    assert ran.stderr.splitlines() == [
        f"{_program_name(program)}: libcuda.so.1 cannot be opened: no NVIDIA driver on this machine"
    ]


def _program_name(program: Path) -> str:
    return "launch" if program.name == "c-launch" else "kernelpack-export-launch"


def _has_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _launchers(work: Path) -> dict[str, Path]:
    """The two launch programs by language: prebuilt in LAUNCHERS (bench/export_launchers.py,
    which the lent GPU machine, without cargo, is given) once its manifest shows them built from
    this checkout's sources, else built here from candle's affine (cargo, gcc, nvcc and candle's
    sources needed), else skipped, naming the folder."""
    manifest = LAUNCHERS / "manifest.json"
    if manifest.is_file():
        recorded = json.loads(manifest.read_text())
        stale = sorted(n for n, h in source_hashes().items() if recorded["sources"].get(n) != h)
        assert not stale, (
            f"{LAUNCHERS}: built from other versions of {', '.join(stale)}; rebuild them "
            "(PYTHONPATH=.:wheels python bench/export_launchers.py)"
        )
        programs = {lang: LAUNCHERS / name for lang, name in BINARIES.items()}
        for lang, path in programs.items():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert digest == recorded["binaries"][BINARIES[lang]], f"{path}: not the one built"
        return programs
    missing = [tool for tool in ("cargo", "gcc", "nvcc") if shutil.which(tool) is None]
    if not (CANDLE_SRC / "affine.cu").is_file():
        missing.append(f"candle's sources ({CANDLE_SRC})")
    if missing:
        pytest.skip(
            f"no prebuilt launch programs in {LAUNCHERS} (no manifest.json: make them with "
            f"PYTHONPATH=.:wheels python bench/export_launchers.py), and {', '.join(missing)} "
            "missing to build them here"
        )
    return build_launchers(export_affine(CANDLE_SRC, work), work)


@pytest.mark.gpu
@pytest.mark.parametrize("lang", ["rust", "c"])
def test_candle_affine_launches_from_rust_and_c(tmp_path: Path, lang: str) -> None:
    """Issue 48 item 4: candle's affine for sm_90, exported; a std-only Rust binary and a C
    program (libcuda through dlopen) each select the image from their own table, launch
    affine_f32 on device memory poisoned with NaN, and write what the kernel wrote, which numpy
    checks here against float64 (two float32 roundings at most)."""
    import numpy as np

    program = _launchers(tmp_path)[lang]
    rng = np.random.default_rng(48)
    x = rng.standard_normal(100_003).astype(np.float32) * 100
    (tmp_path / "x.f32").write_bytes(x.tobytes())
    mul, add = 1.75, -0.5
    wide = x.astype(np.float64) * mul
    expected, bound = wide + add, 2.0**-23 * (np.abs(wide) + abs(add))
    out = tmp_path / f"{lang}.f32"
    ran = subprocess.run(
        [program, tmp_path / "x.f32", out, str(mul), str(add)], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == "sm_90 cubin for 9.0\n", ran.stdout
    got = np.fromfile(out, dtype="<f4")
    assert got.shape == x.shape and not np.isnan(got).any(), "elements left unwritten"
    error = np.abs(got - expected)
    assert (error <= bound).all(), f"{int((error > bound).sum())} of {x.size} beyond two roundings"
