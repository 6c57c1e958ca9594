"""``python -m kernelpack inspect``: tables, JSON, errors, and agreement with LLVM's tools."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kernelpack.cli.main import main

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

OBJECTS = Path(__file__).parent / "fixtures" / "objects"
KERNELS = ("axpy", "tile_sum", "walk", "spill", "mfma")
MULTI_TARGETS = ("gfx90a", "gfx942", "gfx1100", "gfx11-generic", "gfx908:sramecc+:xnack-")
BUNDLES = ("multi.hipfb", "compressed.hipfb", "compressed_v3.hipfb")


def inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def inspect_json(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    status, out, err = inspect(capsys, str(path), "--json")
    assert (status, err) == (0, "")
    report: dict[str, Any] = json.loads(out)
    return report


@pytest.mark.parametrize(
    ("name", "targets"),
    [
        ("multi.hipfb", MULTI_TARGETS),
        ("compressed.hipfb", ("gfx90a", "gfx1100")),
        ("gfx90a.co", ("gfx90a",)),
        ("gfx1100.co", ("gfx1100",)),
        ("sm_90a.cubin", ("sm_90a",)),
        ("compute_80.ptx", ("sm_80",)),
    ],
)
def test_table_names_targets_and_kernels(
    capsys: pytest.CaptureFixture[str], name: str, targets: tuple[str, ...]
) -> None:
    status, out, err = inspect(capsys, str(OBJECTS / name))
    assert (status, err) == (0, "")
    for target in targets:
        assert re.search(rf"[ -]{re.escape(target)}(?=[\s,])", out), target
    for kernel in KERNELS:
        assert re.search(rf"^{kernel}\b", out, re.M), kernel


def test_table_columns_for_code_objects(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = inspect(capsys, str(OBJECTS / "gfx90a.co"))
    header = next(line for line in out.splitlines() if line.startswith("kernel"))
    assert header.split()[:8] == [
        "kernel",
        "VGPR",
        "SGPR",
        "AGPR",
        "LDS",
        "scratch",
        "spills",
        "wavefront",
    ]
    assert header.endswith("max workgroup")
    tile = next(line for line in out.splitlines() if line.startswith("tile_sum")).split()
    assert (tile[4], tile[7], tile[8]) == ("1024", "64", "256")  # LDS, wavefront, max workgroup


def test_bundle_table_lists_entries_with_offsets(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = inspect(capsys, str(OBJECTS / "compressed.hipfb"))
    assert status == 0
    assert "CCOB v2 zstd" in out.splitlines()[0]
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line.startswith(("host-", "hipv4-")) and len(line.split()) == 3
    }
    assert rows["host-x86_64-unknown-linux-gnu-"] == ["4096", "0"]
    assert int(rows["hipv4-amdgcn-amd-amdhsa--gfx90a"][0]) % 4096 == 0


def test_json_of_a_bundle(capsys: pytest.CaptureFixture[str]) -> None:
    report = inspect_json(capsys, OBJECTS / "multi.hipfb")
    assert report["format"] == "bundle" and report["compression"] == []
    host, *devices = report["entries"]
    assert host["image"] is None
    assert sorted(e["target"] for e in devices) == sorted(MULTI_TARGETS)
    for entry in devices:
        image = entry["image"]
        assert image["target"] == entry["target"]
        assert [k["name"] for k in image["kernels"]] == list(KERNELS)
        assert {k["wavefront"] for k in image["kernels"]} == {
            32 if "gfx11" in entry["target"] else 64
        }


def test_json_of_cubin_and_ptx(capsys: pytest.CaptureFixture[str]) -> None:
    cubin = inspect_json(capsys, OBJECTS / "sm_90a.cubin")
    assert (cubin["format"], cubin["target"], cubin["arch_specific"]) == ("cubin", "sm_90a", True)
    assert sorted(k["name"] for k in cubin["kernels"]) == sorted(KERNELS)
    ptx = inspect_json(capsys, OBJECTS / "compute_80.ptx")
    assert (ptx["format"], ptx["target"], ptx["entries"]) == ("ptx", "sm_80", list(KERNELS))


def test_damaged_file_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    damaged = tmp_path / "cut.co"
    damaged.write_bytes((OBJECTS / "gfx90a.co").read_bytes()[:3000])
    status, out, err = inspect(capsys, str(damaged))
    assert status == 2 and out == ""
    assert re.fullmatch(rf"error: {re.escape(str(damaged))}: at offset \d+: expected .+\n", err)


def test_missing_file_is_status_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = inspect(capsys, str(tmp_path / "absent.co"), "--json")
    assert status == 2
    assert "absent.co" in err and "Traceback" not in err


def test_module_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kernelpack", "inspect", str(OBJECTS / "gfx1100.co"), "--json"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(Path(__file__).parents[1] / "wheels")},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["target"] == "gfx1100"


# ---------------------------------------------------------------------------------------------
# Agreement with clang-offload-bundler and llvm-readelf

# llvm-readelf's YAML key -> inspect's JSON key, for the per-kernel figures
READELF_KEYS = {
    ".name": "name",
    ".vgpr_count": "vgpr",
    ".sgpr_count": "sgpr",
    ".agpr_count": "agpr",
    ".group_segment_fixed_size": "lds",
    ".private_segment_fixed_size": "scratch",
    ".sgpr_spill_count": "sgpr_spills",
    ".vgpr_spill_count": "vgpr_spills",
    ".wavefront_size": "wavefront",
    ".max_flat_workgroup_size": "max_workgroup",
}
OPTIONAL_KEYS = ("agpr", "sgpr_spills", "vgpr_spills")  # absent in the note means 0


def readelf_notes(toolchain: Toolchain, path: Path) -> tuple[str, list[dict[str, Any]]]:
    """(amdhsa.target, kernels) from the YAML llvm-readelf prints for the metadata note."""
    text = toolchain.run(["llvm-readelf", "--notes", str(path)]).stdout
    target = re.search(r"^amdhsa\.target:\s+'?amdgcn-amd-amdhsa--([^'\s]+)'?$", text, re.M)
    assert target is not None
    kernels: list[dict[str, Any]] = []
    section = text.split("amdhsa.kernels:", 1)[1]
    for line in section.splitlines()[1:]:
        if line and not line.startswith(" "):
            break
        match = re.match(r"^  (- |  )(\.\w+):\s*(\S*)$", line)
        if match is None:
            continue
        if match.group(1) == "- ":
            kernels.append({key: 0 for key in OPTIONAL_KEYS})
        key = READELF_KEYS.get(match.group(2))
        if key is not None:
            value = match.group(3)
            kernels[-1][key] = int(value) if value.isdigit() else value
    return target.group(1), kernels


def ours(image: dict[str, Any]) -> list[dict[str, Any]]:
    return [{key: kernel[key] for key in READELF_KEYS.values()} for kernel in image["kernels"]]


@pytest.mark.toolchain
@pytest.mark.parametrize("name", BUNDLES)
def test_entries_agree_with_clang_offload_bundler(
    amd_toolchain: Toolchain, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    listed = amd_toolchain.run(
        ["clang-offload-bundler", "--list", "--type=o", f"--input={OBJECTS / name}"]
    ).stdout.split()
    report = inspect_json(capsys, OBJECTS / name)
    assert sorted(entry["id"] for entry in report["entries"]) == sorted(listed)


@pytest.mark.toolchain
@pytest.mark.parametrize("name", ["gfx90a.co", "gfx1100.co"])
def test_code_object_agrees_with_llvm_readelf(
    amd_toolchain: Toolchain, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    target, kernels = readelf_notes(amd_toolchain, OBJECTS / name)
    report = inspect_json(capsys, OBJECTS / name)
    assert report["target"] == target
    assert ours(report) == kernels


@pytest.mark.toolchain
def test_bundle_entries_agree_with_llvm_readelf(
    amd_toolchain: Toolchain, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Unbundled by clang-offload-bundler, read by llvm-readelf: the same as inspect says."""
    report = inspect_json(capsys, OBJECTS / "multi.hipfb")
    devices = [entry for entry in report["entries"] if entry["image"] is not None]
    outputs = [tmp_path / f"{i}.co" for i in range(len(devices))]
    amd_toolchain.run(
        [
            "clang-offload-bundler",
            "--unbundle",
            "--type=o",
            f"--input={OBJECTS / 'multi.hipfb'}",
            f"--targets={','.join(entry['id'] for entry in devices)}",
            *(f"--output={out}" for out in outputs),
        ]
    )
    for entry, out in zip(devices, outputs, strict=True):
        target, kernels = readelf_notes(amd_toolchain, out)
        assert entry["image"]["target"] == target == entry["target"]
        assert ours(entry["image"]) == kernels
        assert out.stat().st_size == entry["size"]


# ---------------------------------------------------------------------------------------------
# Names from a file are data on the terminal; a closed pipe ends the command quietly

TERMINAL_CONTROL = ("\x1b", "\x07", "\r", "\u202e")


@pytest.mark.parametrize("name", ["names.cubin", "names.co"])
@pytest.mark.parametrize("rich", [False, True], ids=["plain", "rich"])
def test_hostile_names_are_shown_as_text(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    name: str,
    rich: bool,
) -> None:
    from hostile_files import HOSTILE_FILES, HOSTILE_NAMES

    from kernelpack import _console

    path = tmp_path / name
    path.write_bytes(HOSTILE_FILES[name].make())
    monkeypatch.setattr(_console, "use_rich", lambda: rich)
    monkeypatch.setenv("COLUMNS", "400")  # rich's width off a terminal: no name is wrapped
    monkeypatch.setenv("NO_COLOR", "1")
    status, out, err = inspect(capsys, str(path))
    assert (status, err) == (0, "")
    assert not any(control in out for control in TERMINAL_CONTROL)
    for hostile in HOSTILE_NAMES:  # each name shown as written, control characters escaped
        shown = "".join(repr(c)[1:-1] if not c.isprintable() else c for c in hostile)
        assert shown in out, shown


@pytest.mark.parametrize("name", ["names.cubin", "names.co"])
def test_hostile_names_stay_exact_in_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    from hostile_files import HOSTILE_FILES, HOSTILE_NAMES

    path = tmp_path / name
    path.write_bytes(HOSTILE_FILES[name].make())
    report = inspect_json(capsys, path)
    assert tuple(k["name"] for k in report["kernels"]) == HOSTILE_NAMES


def test_hostile_name_in_an_error_line_is_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from hostile_files import code_object

    data = bytearray(code_object(["clear\x1b[2J"]))
    at = data.rindex(b"clear\x1b[2J.kd")  # the symbol's name; the metadata's comes first
    data[at : at + 5] = b"other"
    path = tmp_path / "missing-descriptor.co"
    path.write_bytes(data)
    status, out, err = inspect(capsys, str(path))
    assert (status, out) == (2, "")
    assert "\x1b" not in err and "clear\\x1b[2J" in err


def test_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`inspect --json | head -1`: a reader that stops early is no error and prints nothing."""
    from hostile_files import HOSTILE_FILES

    path = tmp_path / "kernels.co"  # 1 MB of JSON: more than a pipe holds
    path.write_bytes(HOSTILE_FILES["kernels.co"].make())
    result = subprocess.run(
        f"{sys.executable} -m kernelpack inspect {path} --json | head -c 1",
        shell=True,
        executable="/bin/bash",
        env={"PYTHONPATH": str(Path(__file__).parents[1] / "wheels"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.stdout, result.stderr) == ("{", "")


def test_closed_pipe_status_is_sigpipes(tmp_path: Path) -> None:
    from hostile_files import HOSTILE_FILES

    path = tmp_path / "kernels.co"
    path.write_bytes(HOSTILE_FILES["kernels.co"].make())
    result = subprocess.run(
        f"set -o pipefail; {sys.executable} -m kernelpack inspect {path} --json | head -c 1 >/dev/null",
        shell=True,
        executable="/bin/bash",
        env={"PYTHONPATH": str(Path(__file__).parents[1] / "wheels"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stderr) == (141, "")


def test_bundle_kernel_by_target_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Every fixture kernel in each of multi.hipfb's targets (the fixtures were built from one
    source for all of them), as JSON and as a table; a kernel one entry lacks is marked."""
    from kernelpack.cli.inspection import kernel_targets, print_report

    report = inspect_json(capsys, OBJECTS / "multi.hipfb")
    table = report["kernel_targets"]
    assert sorted(table) == sorted(KERNELS)
    for kernel in KERNELS:
        assert sorted(table[kernel]) == sorted(MULTI_TARGETS), kernel
    status, out, _ = inspect(capsys, str(OBJECTS / "multi.hipfb"))
    assert status == 0
    assert re.search(rf"^axpy\s+all {len(MULTI_TARGETS)}\s*$", out, re.M)
    entry = next(e for e in report["entries"] if e["image"] and e["image"]["target"] == "gfx942")
    entry["image"]["kernels"] = [k for k in entry["image"]["kernels"] if k["name"] != "mfma"]
    report["kernel_targets"] = kernel_targets(report["entries"])
    assert "gfx942" not in report["kernel_targets"]["mfma"]
    print_report("multi.hipfb", report)
    assert re.search(r"^mfma\s+MISSING on gfx942\s*$", capsys.readouterr().out, re.M)
