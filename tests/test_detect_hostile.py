"""Hostile sysfs trees and environment values (issue 44 item 10), met the way a user meets them:
``python -m kernelpack detect|info|doctor --sysfs-root DIR`` in a child process under a 2 GiB
address-space cap (tests/capped.py), each finishing within 5 s with exit status 2 and one line, or
with the right answer.

The trees are the recorded RX 6600 machine (tests/fixtures/sysfs/rx6600-gfx1032: a CPU node 0 and
the GPU at node 1, render minor 128) with one thing changed: a property of 5,000 digits, a node
folder named "²" (a digit to str.isdigit, not to int), the properties file or the DRM
product_name linked to /dev/zero or replaced by a FIFO. The variables hold numbers of 5,000 digits,
past Python's 4,300-digit limit on int(). A gfx803 GPU (Fiji, older than the target table) gets
the right answer: info and doctor say that no kernelpack image can serve it, naming no command.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from capped import WHEELS, assert_one_line_refusal, run_capped

from buildsys.index_writer import render_index
from kernelpack.devices.detect import KFD_NODES, cuda_selection, hip_selection, rocr_selection
from kernelpack.errors import UsageError
from kernelpack.formats.index import SCHEMA_VERSION, Image, Index
from kernelpack.targets import parse_target

RX6600 = Path(__file__).parent / "fixtures" / "sysfs" / "rx6600-gfx1032"
GPU_NODE = KFD_NODES / "1"
PRODUCT_NAME = Path("class/drm/renderD128/device/product_name")
HUGE = "9" * 5000  # past sys.get_int_max_str_digits() (4300)
COMMANDS = ("detect", "info", "doctor")
VARIABLES = (
    "KERNELPACK_TARGET",
    "HSA_XNACK",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
)


def _huge_property(root: Path) -> Path:
    properties = root / GPU_NODE / "properties"
    text = properties.read_text().replace("\nunique_id 0\n", f"\nunique_id {HUGE}\n")
    assert HUGE in text
    properties.write_text(text)
    return properties


def _superscript_node(root: Path) -> Path:
    return (root / GPU_NODE).rename(root / KFD_NODES / "²")


def _properties_at_dev_zero(root: Path) -> Path:
    properties = root / GPU_NODE / "properties"
    properties.unlink()
    properties.symlink_to("/dev/zero")
    return properties


def _properties_fifo(root: Path) -> Path:
    properties = root / GPU_NODE / "properties"
    properties.unlink()
    os.mkfifo(properties)
    return properties


def _product_name_at_dev_zero(root: Path) -> Path:
    product = root / PRODUCT_NAME
    product.parent.mkdir(parents=True)
    product.symlink_to("/dev/zero")
    return product


def _product_name_fifo(root: Path) -> Path:
    product = root / PRODUCT_NAME
    product.parent.mkdir(parents=True)
    os.mkfifo(product)
    return product


# Each changes a copy of the tree and returns the path the refusal must name.
DAMAGES: dict[str, Callable[[Path], Path]] = {
    "property-of-5000-digits": _huge_property,
    "node-folder-superscript-two": _superscript_node,
    "properties-at-dev-zero": _properties_at_dev_zero,
    "properties-fifo": _properties_fifo,
    "product-name-at-dev-zero": _product_name_at_dev_zero,
    "product-name-fifo": _product_name_fifo,
}


def _environ(**values: str) -> dict[str, str]:
    """The test process's environment without this machine's GPU variables, plus ``values``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(VARIABLES)}
    return {**environ, **values}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", DAMAGES, ids=str)
def test_a_hostile_sysfs_tree_is_one_line_within_5_s(
    tmp_path: Path, command: str, damage: str
) -> None:
    root = tmp_path / "sys"
    shutil.copytree(RX6600, root)
    named = DAMAGES[damage](root)
    environ = _environ(KERNELPACK_CACHE_DIR=str(tmp_path / "cache"))
    result = run_capped([command, "--sysfs-root", str(root)], env=environ)
    assert_one_line_refusal(result)
    assert str(named) in result.stderr


@pytest.mark.parametrize(
    "variable",
    ["HSA_OVERRIDE_GFX_VERSION", "HSA_OVERRIDE_GFX_VERSION_1"],
)
@pytest.mark.parametrize(
    "value", [f"{HUGE}.3.2", f"10.{HUGE}.2", f"10.3.{HUGE}"], ids=["major", "minor", "stepping"]
)
def test_an_override_of_5000_digits_is_one_line(tmp_path: Path, variable: str, value: str) -> None:
    environ = _environ(**{variable: value})
    result = run_capped(["detect", "--sysfs-root", str(RX6600)], env=environ)
    assert_one_line_refusal(result)
    assert f"{variable}=" in result.stderr and "characters)" in result.stderr
    assert len(result.stderr) < 300  # the value is shortened, not echoed whole


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("KERNELPACK_TARGET", f"sm_{HUGE}"),
        ("KERNELPACK_TARGET", f"compute_{HUGE}"),
        ("KERNELPACK_TARGET", f"gfx{HUGE}"),
        ("HSA_XNACK", HUGE),
    ],
    ids=["sm", "compute", "gfx", "xnack"],
)
def test_a_target_or_mode_of_5000_digits_is_one_short_line(variable: str, value: str) -> None:
    """sm_<5,000 digits> met int()'s limit (a traceback); every such value is echoed shortened."""
    result = run_capped(["detect", "--sysfs-root", str(RX6600)], env=_environ(**{variable: value}))
    assert_one_line_refusal(result)
    assert f"{variable}=" in result.stderr and len(result.stderr) < 300


@pytest.mark.parametrize(
    "name", [f"sm_{HUGE}", f"compute_{HUGE}a", f"gfx{HUGE}"], ids=["sm", "compute", "gfx"]
)
def test_the_target_parser_refuses_a_name_of_5000_digits(name: str) -> None:
    with pytest.raises(UsageError, match=r"not an NVIDIA target|unknown AMD target"):
        parse_target(name)


@pytest.mark.parametrize(
    "variable", ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]
)
def test_a_visible_devices_index_of_5000_digits_names_no_gpu(variable: str) -> None:
    """As the runtimes read it (strtol saturates): no such device, which ends the list."""
    environ = _environ(**{variable: HUGE})
    result = run_capped(["detect", "--json", "--sysfs-root", str(RX6600)], env=environ)
    assert result.returncode == 0, result.stderr
    assert '"gpus": []' in result.stdout
    kept = run_capped(
        ["detect", "--json", "--sysfs-root", str(RX6600)], env=_environ(**{variable: f"0,{HUGE}"})
    )
    assert kept.returncode == 0, kept.stderr
    assert '"target": "gfx1032"' in kept.stdout


SELECTIONS = {"rocr": rocr_selection, "hip": hip_selection, "cuda": cuda_selection}
LEADING_ZEROS = "0" * 5000 + "1"


@pytest.mark.parametrize(
    ("runtime", "value", "chosen"),
    [
        *[(runtime, HUGE, []) for runtime in SELECTIONS],
        *[(runtime, f"1,{HUGE},0", [1]) for runtime in SELECTIONS],
        *[(runtime, f"-{HUGE}", []) for runtime in ("rocr", "cuda")],
        ("rocr", LEADING_ZEROS, [1]),  # strtol: octal 0...01
        ("cuda", LEADING_ZEROS, [1]),
        ("hip", LEADING_ZEROS, []),  # HIP takes no leading zero: the entry ends its list
    ],
    ids=[
        *[f"{runtime}-huge" for runtime in SELECTIONS],
        *[f"{runtime}-huge-ends-the-list" for runtime in SELECTIONS],
        "rocr-negative",
        "cuda-negative",
        *[f"{runtime}-leading-zeros" for runtime in ("rocr", "cuda", "hip")],
    ],
)
def test_selections_read_numbers_of_any_length(runtime: str, value: str, chosen: list[int]) -> None:
    uuids = ["GPU-0000000000000001", "GPU-0000000000000002"]
    assert SELECTIONS[runtime](uuids, value) == chosen


def _site_with_gfx1030_images(tmp_path: Path) -> Path:
    """A kernelpack-built package, hostpkg, with one module whose only image is for gfx1030."""
    site = tmp_path / "site"
    package = site / "hostpkg"
    (package / "device").mkdir(parents=True)
    data = b"hostpkg gfx1030 image"
    (package / "device" / "ops.co").write_bytes(data)
    (package / "__init__.py").write_text("")
    image: Image = {
        "vendor": "amd",
        "target": "gfx1030",
        "kind": "code_object",
        "file": "device/ops.co",
        "offset": 0,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "compression": "none",
        "kernels": {},
        "symbols": {},
    }
    index: Index = {
        "schema": SCHEMA_VERSION,
        "version": "1.0",
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "distribution": "hostpkg",
        "package": "hostpkg",
        "modules": {"ops": {"kernels": {}, "source": "", "source_sha256": "", "images": [image]}},
    }
    (package / "_index.py").write_text(render_index(index))
    info = site / "hostpkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostpkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[kernelpack.packages]\nhostpkg = hostpkg\n")
    return site


def test_info_and_doctor_on_a_gfx803_say_no_image_can_serve_it(tmp_path: Path) -> None:
    """info raised KeyError (AMD_BY_NAME['gfx803']); doctor advised build --targets gfx803,
    which the builder refuses."""
    root = tmp_path / "sys"
    shutil.copytree(RX6600, root)
    properties = root / GPU_NODE / "properties"
    properties.write_text(
        properties.read_text().replace("gfx_target_version 100302", "gfx_target_version 80003")
    )
    site = _site_with_gfx1030_images(tmp_path)
    environ = _environ(
        KERNELPACK_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=os.pathsep.join([str(WHEELS), str(site)]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    says = "no kernelpack image can serve gfx803: the builder makes code only for"
    info = run_capped(["info", "--json", "--sysfs-root", str(root)], env=environ)
    assert info.returncode == 0, info.stderr
    [row] = json.loads(info.stdout)["packages"]["hostpkg"]["modules"]["ops"]["images"]
    assert row["target"] == "gfx803" and row["image"] is None
    assert len(row["advice"]) == 1 and row["advice"][0].startswith(says)
    table = run_capped(["info", "--sysfs-root", str(root)], env=environ)
    assert table.returncode == 0, table.stderr
    assert says in table.stdout and "--targets gfx803" not in table.stdout
    doctor = run_capped(["doctor", "--json", "--sysfs-root", str(root)], env=environ)
    assert doctor.returncode == 1, doctor.stderr  # an error finding: no image fits
    report = json.loads(doctor.stdout)
    [finding] = [f for f in report["findings"] if f["code"] == "no-image"]
    assert finding["advice"].startswith(says) and "gfx803" not in json.dumps(
        report["gpus"][0]["install"]
    )
