"""The pip command doctor, info, targets and the NoImageError give names the GPU's own extra.

Issue 50 item 3: the wheels carry an extra named after every GPU they serve (``[gfx1100]``,
``[sm_90]``), so the advice a GPU gets is ``pip install "kernelpack[<its processor>]"``, never a
group name a user cannot guess. The extras expected are the wheel builder's own
(buildsys.wheels.gpu_extras over the device wheels of the default matrix, the Provides-Extra lines
the host wheel is given), and the wheel each pulls in must hold the image the loader picks for
that GPU (kernelpack.targets.select_image over the device wheels' targets).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from test_loader import SYSFS, make_package

from buildsys.device_groups import device_groups
from buildsys.matrix import load_matrix
from buildsys.wheels import gpu_extras
from kernelpack.cli import main as cli
from kernelpack.devices.detect import Gpu
from kernelpack.formats.index import Index
from kernelpack.loader import catalog
from kernelpack.loader.catalog import Catalog
from kernelpack.loader.hints import install_hint
from kernelpack.targets import NvidiaTarget, agent_target, parse_target, select_image
from kernelpack.targets.processors import AMD_PROCESSORS, NVIDIA_ARCHS

BUILT = [t.target for t in load_matrix().targets]
INDEX = cast(
    Index,
    {
        "distribution": "kernelpack",
        "package": "kernelpack",
        "modules": {"mlp": {"images": [{"target": target} for target in BUILT]}},
    },
)
GROUPS = device_groups(INDEX)
# every extra the host wheel provides -> its device wheel: one per wheel, named after it, and one
# per GPU it serves (a GPU whose name is a wheel's has that wheel's)
EXTRAS = {group.name: group.name for group in GROUPS} | {
    name: group.name for name, group in gpu_extras(GROUPS).items()
}
WHEEL_OF = {target: group.name for group in GROUPS for target in group.targets}


def _catalog() -> Catalog:
    made = Catalog()
    made.distribution = "kernelpack"
    made.device_wheels = dict(WHEEL_OF)
    return made


def _gpus() -> list[Gpu]:
    gpus = [
        Gpu(
            0, "amd", agent_target(p.name, sramecc=p.sramecc, xnack=False), "", "", "", 1, "kfd", ""
        )
        for p in AMD_PROCESSORS
        if not p.is_generic
    ]
    gpus += [
        Gpu(0, "nvidia", NvidiaTarget.parse(a.name), "", "", "", None, "nvml", "")
        for a in NVIDIA_ARCHS
        if not a.arch_specific
    ]
    return gpus


def _own_name(gpu: Gpu) -> str:
    return str(gpu.target) if gpu.vendor == "nvidia" else gpu.target.processor  # type: ignore[union-attr]


@pytest.mark.parametrize("gpu", _gpus(), ids=_own_name)
def test_the_pip_command_names_the_gpus_own_extra_and_the_wheel_it_needs(gpu: Gpu) -> None:
    candidates: list[dict[str, Any]] = [
        {"vendor": t.vendor, "target": t.text, "kind": t.image_kind}
        for t in map(parse_target, WHEEL_OF)
        if t.vendor == gpu.vendor
    ]
    best, _ = select_image(candidates, gpu.target)
    hint = install_hint(gpu, _catalog())
    if best is None:
        assert "if a device wheel" in hint or "pip install" not in hint
        return
    own = _own_name(gpu)
    assert own in EXTRAS  # the builder gives this GPU an extra of its own name
    assert hint == f'pip install "kernelpack[{own}]"'
    assert EXTRAS[own] == WHEEL_OF[str(best["target"])]


def test_the_table_gives_the_common_gpus_their_own_names() -> None:
    """By hand, so the loop above cannot pass by skipping everything."""
    by_name = {_own_name(gpu): install_hint(gpu, _catalog()) for gpu in _gpus()}
    assert by_name["gfx1100"] == 'pip install "kernelpack[gfx1100]"'  # the wheel is gfx110x
    assert by_name["gfx1102"] == 'pip install "kernelpack[gfx1102]"'  # gfx11-generic's
    assert by_name["sm_90"] == 'pip install "kernelpack[sm_90]"'
    assert by_name["sm_86"] == 'pip install "kernelpack[sm_86]"'  # sm_80's cubin


@pytest.fixture
def host_with_gfx90a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kernelpack's own index replaced by a host index: gfx90a's images installed, the default
    matrix's device wheels named, none of them installed."""
    root = tmp_path / "pkg"
    index = make_package(root, amd=("gfx90a",))
    index["distribution"] = "kernelpack"
    index["device_wheels"] = dict(WHEEL_OF)
    monkeypatch.setattr(catalog, "package_index", lambda package: index)
    monkeypatch.setattr(catalog, "package_folder", lambda package: root)
    monkeypatch.setattr(catalog, "device_fragments", lambda package: [])
    for variable in ("KERNELPACK_TARGET", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(variable, raising=False)


def test_targets_marks_what_is_not_installed_and_gives_this_gpus_pip_command(
    host_with_gfx90a: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["targets", "--sysfs-root", str(SYSFS / "rx7600-gfx1102")]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("gfx")}
    assert "gfx11-generic (not installed)" in rows["gfx1102"]
    assert "gfx90a (not installed)" not in rows["gfx90a"] and " gfx90a " in rows["gfx90a"]
    assert out.rstrip().endswith(
        'this machine\'s hip:0 (gfx1102): pip install "kernelpack[gfx1102]"'
    )


def test_targets_json_names_each_gpus_advice(
    host_with_gfx90a: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["targets", "--json", "--sysfs-root", str(SYSFS / "two-mi210")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["installed"] == ["gfx90a"]
    assert [g["advice"] for g in report["gpus"]] == ["loads the installed gfx90a image"] * 2


def test_doctor_gives_each_gpu_the_pip_command_with_its_own_name(
    host_with_gfx90a: None, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["doctor", "--json", "--sysfs-root", str(SYSFS / "laptop-gfx1100-gfx1151")])
    report = json.loads(capsys.readouterr().out)
    assert [g["install"]["kernelpack"] for g in report["gpus"]] == [
        'pip install "kernelpack[gfx1100]"',
        'pip install "kernelpack[gfx1151]"',
    ]
