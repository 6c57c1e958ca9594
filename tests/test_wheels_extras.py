"""Extras named after the GPU: ``pip install "vecops-kernels[gfx1101]"`` or ``[sm_90]`` / ``[sm90]``
pulls in the device wheel whose image the loader would load on that GPU. The expected extras are
worked out here from the device wheels themselves: each wheel's index fragment, read from the
built wheel, with the loader's selection rule (kernelpack.targets.select_image) run over all of
them for every processor of the table and every NVIDIA architecture, not from the builder's
grouping or the coverage table."""

from __future__ import annotations

import email.parser
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builder_env import builder_env

from buildsys import REPO_ROOT
from buildsys.index_writer import read_index
from buildsys.wheelfile import read_wheel
from kernelpack.targets import NvidiaTarget, agent_target, select_image
from kernelpack.targets.processors import AMD_PROCESSORS, NVIDIA_ARCHS

EXAMPLE = REPO_ROOT / "examples" / "vecops"
VERSION = "0.2.0"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vecops' wheels for its whole matrix (gfx90a, gfx942, gfx1100, sm_80, sm_90)."""
    out = tmp_path_factory.mktemp("extras") / "dist"
    argv = [sys.executable, "-m", "buildsys", "wheels", "--project", str(EXAMPLE)]
    result = subprocess.run(
        [*argv, "--out", str(out), "--provision"],
        cwd=out.parent,
        capture_output=True,
        text=True,
        env=builder_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def _extras(dist: Path) -> dict[str, set[str]]:
    """Extra -> the distributions it requires, from the host wheel's METADATA."""
    host = read_wheel(dist / f"vecops_kernels-{VERSION}-0host-py3-none-any.whl")
    text = host[f"vecops_kernels-{VERSION}.dist-info/METADATA"].decode()
    metadata = email.parser.Parser().parsestr(text)
    extras: dict[str, set[str]] = {name: set() for name in metadata.get_all("Provides-Extra", [])}
    for requirement in metadata.get_all("Requires-Dist", []):
        found = re.fullmatch(r'(\S+)==\S+; extra == "([^"]+)"', requirement)
        if found:
            extras[found[2]].add(found[1])
    return extras


def _device_images(dist: Path) -> list[dict[str, object]]:
    """Every image of every device wheel, tagged with the wheel's distribution name."""
    images = []
    for wheel in sorted(dist.glob("vecops_kernels_device_*.whl")):
        files = read_wheel(wheel)
        distribution = wheel.name.split("-")[0].replace("_", "-")
        (index_name,) = [n for n in files if n.endswith("/_index.py")]
        fragment = read_index(files[index_name].decode())
        for module in fragment["modules"].values():
            for image in module["images"]:
                images.append({**image, "distribution": distribution})
    return images


@pytest.mark.toolchain
@pytest.mark.nvcc
def test_every_gpu_of_the_table_is_an_extra_for_the_device_wheel_that_serves_it(
    dist: Path,
) -> None:
    extras, images = _extras(dist), _device_images(dist)
    expected: dict[str, str] = {}
    for processor in AMD_PROCESSORS:
        if processor.is_generic:
            continue
        gpu = agent_target(processor.name, sramecc=processor.sramecc, xnack=False)
        best, _ = select_image(images, gpu)
        if best is not None:
            expected[processor.name] = str(best["distribution"])
    for arch in NVIDIA_ARCHS:
        if arch.arch_specific:
            continue
        best, _ = select_image(images, NvidiaTarget.parse(arch.name))
        if best is not None:
            expected[arch.name] = expected[arch.name.replace("_", "")] = str(best["distribution"])
    # the table at this matrix: a few by hand, so the rule above is checked too
    assert expected["gfx1100"] == "vecops-kernels-device-gfx1100"
    assert expected["sm_90"] == expected["sm90"] == "vecops-kernels-device-sm90"
    assert expected["sm_86"] == "vecops-kernels-device-sm80"
    assert "gfx1101" not in expected and "sm_75" not in expected  # nothing built fits them
    for name, distribution in expected.items():
        assert extras.get(name) == {distribution}, name
    gpu_named = {e for e in extras if re.fullmatch(r"gfx\d+[0-9a-f]*|sm_?\d+", e)}
    assert gpu_named == set(expected) | {"gfx90a", "gfx942", "gfx1100", "sm80", "sm90"}
