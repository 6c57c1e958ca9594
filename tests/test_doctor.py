"""``kernelpack doctor`` on recorded topologies: the advice each machine should get.

The installed packages are index literals like the builder's (the doctor reads only their image
lists and device-wheel maps); the GPUs come from the sysfs fixtures through kernelpack.devices.detect, with
the environment of each case; the expected advice is written out by hand per case.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from buildsys.errors import MatrixError
from buildsys.matrix import Matrix
from kernelpack.cli.doctor import VISIBLE_DEVICES, diagnose
from kernelpack.devices.detect import Gpu, detect_gpus
from kernelpack.formats.index import Index
from kernelpack.loader.hints import fixes, unservable
from kernelpack.loader.load import Loader
from kernelpack.targets import (
    GpuTarget,
    NvidiaTarget,
    agent_target,
    buildable_targets,
    known_code_targets,
    parse_target,
    select_image,
    supported_targets,
)
from kernelpack.targets.processors import AMD_BY_NAME, AMD_PROCESSORS, NVIDIA_ARCHS

SYSFS = Path(__file__).parent / "fixtures" / "sysfs"
DEFAULT_AMD = [
    *("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200"),
    *("gfx1201", "gfx9-generic", "gfx9-4-generic", "gfx10-1-generic", "gfx10-3-generic"),
    *("gfx11-generic", "gfx12-generic", "sm_80", "sm_90", "sm_120", "compute_80"),
]
# The extras the default matrix's host wheel names (by hand, as in tests/test_wheels.py).
DEVICE_WHEELS = {
    "gfx908": "gfx90x",
    "gfx90a": "gfx90x",
    "gfx942": "gfx942",
    "gfx950": "gfx950",
    "gfx1030": "gfx1030",
    "gfx1100": "gfx110x",
    "gfx1101": "gfx110x",
    "gfx1200": "gfx120x",
    "gfx1201": "gfx120x",
    "gfx9-generic": "gfx9-generic",
    "gfx9-4-generic": "gfx9-4-generic",
    "gfx10-1-generic": "gfx10-1-generic",
    "gfx10-3-generic": "gfx10-3-generic",
    "gfx11-generic": "gfx11-generic",
    "gfx12-generic": "gfx12-generic",
}
ROCM_64 = {"hip": "6.4.43484 (/opt/rocm/lib/libamdhip64.so.6)", "cuda": "not found"}
ROCM_61 = {"hip": "6.1.40091 (/opt/rocm/lib/libamdhip64.so.6)", "cuda": "not found"}


def index(targets: list[str], *, host_only: bool = False) -> Index:
    images = [
        {
            "vendor": parse_target(t).vendor,
            "target": t,
            "kind": parse_target(t).image_kind,
            "file": "device/m.hsaco",
            "offset": 0,
            "size": 1,
            "sha256": "0" * 64,
            "compression": "none",
            "kernels": {},
            "symbols": {},
        }
        for t in targets
    ]
    module = {
        "kernels": {},
        "source": "",
        "source_sha256": "",
        "images": [] if host_only else images,
    }
    made: dict[str, Any] = {
        "schema": 2,
        "version": "1.0",
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "modules": {"mlp": module, "walk": module},
    }
    if host_only:
        made["device_wheels"] = {t: DEVICE_WHEELS[t] for t in targets if t in DEVICE_WHEELS}
    return cast(Index, made)


def doctor(
    fixture: str,
    installed: Index,
    environ: dict[str, str] | None = None,
    runtimes: dict[str, str] = ROCM_64,
) -> dict[str, Any]:
    env = environ or {}
    root = SYSFS / fixture
    visible = detect_gpus(sysfs_root=root, environ=env)
    machine = detect_gpus(
        sysfs_root=root, environ={k: v for k, v in env.items() if k not in VISIBLE_DEVICES}
    )
    loader = Loader(index=installed, root=root, fragments=list, gpus=visible)
    return diagnose(loader, hidden_from=machine, runtimes=runtimes, environ=env)


def codes(report: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    return [(f["code"], f["severity"], f["device"]) for f in report["findings"]]


def images(report: dict[str, Any]) -> list[str]:
    return sorted(
        {
            i["target"]
            for g in report["gpus"]
            for modules in g["images"].values()
            for i in modules.values()
            if i
        }
    )


# --- MI300X -------------------------------------------------------------------------------------


def test_mi300x_with_the_fat_wheel_is_healthy() -> None:
    report = doctor("mi300x-8gpu", index(DEFAULT_AMD))
    assert len(report["gpus"]) == 8
    assert images(report) == ["gfx942"]
    assert all(g["install"] == {} for g in report["gpus"])
    assert codes(report) == []
    assert report["requirements"] == [
        {
            "vendor": "amd",
            "library": "hip",
            "needs": "a HIP runtime (ROCm)",
            "found": ROCM_64["hip"],
            "ok": True,
        }
    ]


def test_mi300x_with_the_host_wheel_alone_gets_the_pip_command() -> None:
    report = doctor("mi300x-8gpu", index(DEFAULT_AMD, host_only=True))
    assert {g["install"]["kernelpack"] for g in report["gpus"]} == {
        'pip install "kernelpack[gfx942]"'
    }
    assert codes(report) == [("no-image", "error", d) for d in range(8)]
    assert 'pip install "kernelpack[gfx942]"' in report["findings"][0]["advice"]


def test_mi300x_with_xnack_on_and_only_xnack_off_images() -> None:
    report = doctor("mi300x-8gpu", index(["gfx942:xnack-"]), {"HSA_XNACK": "1"})
    assert ("xnack", "error", 0) in codes(report)
    xnack = next(f for f in report["findings"] if f["code"] == "xnack")
    assert "xnack+ (HSA_XNACK=1)" in xnack["message"] and xnack["advice"].startswith(
        "unset HSA_XNACK"
    )


def test_mi300x_without_a_runtime_is_told_to_install_rocm() -> None:
    report = doctor("mi300x-8gpu", index(DEFAULT_AMD), runtimes={"hip": "not found"})
    assert codes(report) == [("runtime", "error", None)]
    assert "install ROCm 6.2 or later" in report["findings"][0]["advice"]


# --- APU + discrete ----------------------------------------------------------------------------


def test_apu_and_discrete_each_get_a_native_image_and_generic_needs_rocm_6_2() -> None:
    report = doctor("laptop-gfx1100-gfx1151", index(DEFAULT_AMD))
    assert [g["images"]["kernelpack"]["mlp"]["target"] for g in report["gpus"]] == [
        "gfx1100",
        "gfx11-generic",
    ]
    assert codes(report) == []
    (requirement,) = report["requirements"]
    assert "ROCm 6.2" in requirement["needs"] and requirement["ok"] is True

    old = doctor("laptop-gfx1100-gfx1151", index(DEFAULT_AMD), runtimes=ROCM_61)
    assert codes(old) == [("runtime", "error", None)]
    assert "HIP 6.1.40091 cannot load code object v6" in old["findings"][0]["message"]
    assert "devices 1" in old["findings"][0]["message"]

    none = doctor("laptop-gfx1100-gfx1151", index(DEFAULT_AMD), runtimes={"hip": "not found"})
    assert codes(none) == [("runtime", "error", None)]
    assert none["findings"][0]["message"] == "no hip runtime library found for the amd GPUs"


def test_a_gpu_hidden_by_hip_visible_devices_is_named() -> None:
    report = doctor("laptop-gfx1100-gfx1151", index(DEFAULT_AMD), {"HIP_VISIBLE_DEVICES": "0"})
    assert len(report["gpus"]) == 1
    assert codes(report) == [("hidden", "warning", None)]
    hidden = report["findings"][0]["message"]
    assert "gfx1151" in hidden and "HIP_VISIBLE_DEVICES=0" in hidden


# --- gfx1031 with and without an override ----------------------------------------------------------


def test_rx6700_without_override_loads_the_generic_image() -> None:
    report = doctor("rx6700-gfx1031", index(DEFAULT_AMD))
    assert images(report) == ["gfx10-3-generic"]
    assert codes(report) == [("rdna-host-memory", "info", 0)]


def test_rx6700_with_an_override_is_told_to_drop_it() -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    report = doctor("rx6700-gfx1031", index(DEFAULT_AMD), env)
    assert images(report) == ["gfx1030"]
    assert codes(report) == [("override", "warning", 0), ("rdna-host-memory", "info", 0)]
    override = report["findings"][0]
    assert (
        "HSA_OVERRIDE_GFX_VERSION=10.3.0 makes this gfx1031 GPU run gfx1030 code"
        in (override["message"])
    )
    assert "gfx10-3-generic" in override["message"]
    assert override["advice"] == (
        "unset HSA_OVERRIDE_GFX_VERSION: gfx1031 then loads its own image"
    )


def test_rx6700_with_an_override_and_the_host_wheel_gets_the_extra_to_install() -> None:
    env = {"HSA_OVERRIDE_GFX_VERSION": "10.3.0", "HIP_HOST_COHERENT": "1"}
    installed = index([*DEFAULT_AMD[:5], "gfx10-3-generic"], host_only=True)
    report = doctor("rx6700-gfx1031", installed, env)
    assert ("override", "warning", 0) in codes(report)
    assert ("rdna-host-memory", "warning", 0) in codes(report)
    override = next(f for f in report["findings"] if f["code"] == "override")
    assert override["advice"] == (
        'pip install "kernelpack[gfx1031]", then unset HSA_OVERRIDE_GFX_VERSION'
    )
    rdna = next(f for f in report["findings"] if f["code"] == "rdna-host-memory")
    assert rdna["advice"].startswith("unset HIP_HOST_COHERENT")


def test_rx6700_with_an_override_and_nothing_for_it_keeps_the_override() -> None:
    report = doctor(
        "rx6700-gfx1031", index(["gfx1030", "gfx942"]), {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    )
    assert ("override", "info", 0) in codes(report)
    override = next(f for f in report["findings"] if f["code"] == "override")
    assert "python -m buildsys build --targets gfx1031" in override["advice"]


def test_xnack_on_an_rdna_gpu_has_no_effect() -> None:
    report = doctor("rx7600-gfx1102", index(DEFAULT_AMD), {"HSA_XNACK": "1"})
    assert codes(report) == [("xnack", "info", 0)]


# --- the command --------------------------------------------------------------------------------


def test_doctor_json_is_pure_json_on_stdout(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelpack",
            "doctor",
            "--json",
            "--sysfs-root",
            str(SYSFS / "rx6600-gfx1032"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parent.parent / "wheels")},
    )
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert [g["hardware"] for g in report["gpus"]] == ["gfx1032"]
    assert report["runtimes_apply"] is False
    assert ("rdna-host-memory", "info", 0) in codes(report)


def test_doctor_refuses_a_folder_that_is_no_sysfs(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kernelpack", "doctor", "--sysfs-root", str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parent.parent / "wheels")},
    )
    assert result.returncode == 2
    assert "no KFD topology here" in result.stderr and "Traceback" not in result.stderr


def test_no_override_advice_across_generations() -> None:
    """An RX 6700 with only MI300 code installed is not told to pretend to be an MI300."""
    from kernelpack.loader.hints import override_hint

    (gpu,) = detect_gpus(sysfs_root=SYSFS / "rx6700-gfx1031", environ={})
    advice = override_hint(gpu, ["gfx942", "sm_90"])
    assert "HSA_OVERRIDE_GFX_VERSION=9" not in advice and "gfx942" not in advice
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in override_hint(gpu, ["gfx942", "gfx1030"])


# --- advice that works (issue 44 item 10): every target named is one the builder accepts --------

BUILD_COMMAND = re.compile(r"python -m buildsys build (?:--project <[^>]*> )?--targets (\S+)")
# GPUs the table has, and ones it has not: older (gfx803, Fiji; sm_70, Volta), newer than it.
OUTSIDE_THE_TABLE = ("gfx803", "gfx1310", "sm_70", "sm_91", "sm_130")
UNSERVABLE = ("gfx803", "gfx1310", "sm_70")


def _gpu(name: str) -> Gpu:
    """A GPU of ``name`` as detection makes it (features as ROCm's defaults set them)."""
    if name.startswith("sm_"):
        target: GpuTarget = NvidiaTarget.parse(name)
        return Gpu(0, "nvidia", target, "", "", "", None, "nvml", name)
    info = AMD_BY_NAME.get(name)
    target = agent_target(name, sramecc=bool(info and info.sramecc), xnack=False)
    return Gpu(0, "amd", target, "", "", "", 1, "kfd", name)


def _builder_accepts(target: str) -> bool:
    """What ``python -m buildsys build --targets TARGET`` does with the name: its own parser."""
    try:
        Matrix(Path("arch_matrix.toml"), ()).select([target])
    except MatrixError:
        return False
    return True


@pytest.mark.parametrize("name", known_code_targets(), ids=str)
def test_buildable_targets_are_what_the_builder_accepts(name: str) -> None:
    assert (name in buildable_targets()) == _builder_accepts(name)


GPU_NAMES = [
    *[p.name for p in AMD_PROCESSORS if not p.is_generic],
    *[a.name for a in NVIDIA_ARCHS if not a.arch_specific],
    *OUTSIDE_THE_TABLE,
]


def _doctor_advice(gpu: Gpu, installed: list[str]) -> list[str]:
    loader = Loader(index=index(installed), root=SYSFS, fragments=list, gpus=[gpu])
    report = diagnose(loader, hidden_from=[], runtimes=ROCM_64, environ={})
    return [f["advice"] for f in report["findings"]]


@pytest.mark.parametrize("name", GPU_NAMES, ids=str)
def test_every_build_command_advised_names_a_target_the_builder_accepts(name: str) -> None:
    """The advice of info and the NoImageError (hints.fixes), and of doctor (the no-image
    finding, and the override finding for this hardware made to run gfx1030 code), for a GPU of
    every kind with nothing installed that fits it, checked by the builder's own parser."""
    gpu = _gpu(name)
    catalog = Loader(index=index([]), root=SYSFS, fragments=list, gpus=[gpu]).catalog()
    advice = fixes(gpu, catalog, ["gfx942", "sm_80"])
    advice += _doctor_advice(gpu, ["compute_121" if gpu.vendor == "amd" else "gfx942"])
    if gpu.vendor == "amd":
        gfx1030 = agent_target("gfx1030", sramecc=False, xnack=False)
        overridden = gpu._replace(target=gfx1030, override="HSA_OVERRIDE_GFX_VERSION=10.3.0")
        advice += _doctor_advice(overridden, ["gfx1030"])
    text = "\n".join(advice)
    named = BUILD_COMMAND.findall(text)
    assert all(_builder_accepts(target) for target in named), named
    if name in UNSERVABLE:
        assert named == [] and fixes(gpu, catalog, ["gfx942"]) == [unservable(gpu)]
        assert f"no kernelpack image can serve {gpu.target}" in text
        assert "pip install" not in text  # no wheel can exist for it
        # ... and it is so: no target the builder accepts makes code this GPU runs
        images = [
            {"vendor": parse_target(t).vendor, "target": t, "kind": parse_target(t).image_kind}
            for t in buildable_targets()
        ]
        assert select_image(images, gpu.target)[0] is None
    else:
        assert named and named[0] in supported_targets(gpu.target)
