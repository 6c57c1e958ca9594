"""GPU detection (kernelpack.devices.detect) against recorded KFD topologies, and ``kernelpack detect``.

The fixtures under tests/fixtures/sysfs are shaped like real /sys trees (key order and values as the
kernel prints them for these GPUs); the expected targets are what ROCm reports for those machines
(rocminfo: an MI300X is gfx942:sramecc+:xnack-), not what the code computes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from kernelpack.cli import main as cli
from kernelpack.devices import detect
from kernelpack.devices.argument import resolve_device
from kernelpack.devices.detect import (
    Gpu,
    NvidiaDevice,
    cuda_selection,
    detect_gpus,
    hip_selection,
    rocr_selection,
)
from kernelpack.errors import UsageError
from kernelpack.targets import TargetId, select_image

FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"
MI300X = FIXTURES / "mi300x-8gpu"
LAPTOP = FIXTURES / "laptop-gfx1100-gfx1151"
RX6700 = FIXTURES / "rx6700-gfx1031"
TWO_MI210 = FIXTURES / "two-mi210"
MI300X_BUSES = ["05", "26", "46", "65", "85", "a6", "c6", "e5"]
VARIABLES = (
    "KERNELPACK_TARGET",
    "HSA_XNACK",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
)


def gpus(root: Path, **environ: str) -> list[Gpu]:
    return detect_gpus(sysfs_root=root, environ=environ)


def fixture_uuid(root: Path, node: int) -> str:
    """A node's ROCR UUID, read off the fixture file by other means than the code under test."""
    text = (root / f"class/kfd/kfd/topology/nodes/{node}/properties").read_text()
    unique_id = next(
        int(line.split()[1]) for line in text.splitlines() if line.startswith("unique_id")
    )
    return f"GPU-{unique_id:016x}"


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep this machine's settings out of tests that read os.environ."""
    for name in list(os.environ):
        if name.startswith(VARIABLES):
            monkeypatch.delenv(name)


# --- AMD topologies -------------------------------------------------------------------------------


def test_an_mi300x_node_lists_eight_gpus_and_no_cpu() -> None:
    found = gpus(MI300X)
    assert [g.index for g in found] == list(range(8))
    assert [g.node for g in found] == list(range(1, 9))  # node 0 is the CPU
    assert {str(g.target) for g in found} == {"gfx942:sramecc+:xnack-"}
    assert [g.location for g in found] == [f"0000:{bus}:00.0" for bus in MI300X_BUSES]
    assert [g.uuid for g in found] == [fixture_uuid(MI300X, node) for node in range(1, 9)]
    assert {g.name for g in found} == {"AMD Instinct MI300X"}
    assert {(g.vendor, g.source, g.hardware, g.override) for g in found} == {
        ("amd", "kfd", "gfx942", "")
    }


def test_hsa_xnack_turns_xnack_on_where_the_processor_has_it() -> None:
    assert {str(g.target) for g in gpus(MI300X, HSA_XNACK="1")} == {"gfx942:sramecc+:xnack+"}
    assert {str(g.target) for g in gpus(MI300X, HSA_XNACK="0")} == {"gfx942:sramecc+:xnack-"}
    assert [str(g.target) for g in gpus(LAPTOP, HSA_XNACK="1")] == ["gfx1100", "gfx1151"]
    with pytest.raises(UsageError, match="HSA_XNACK='yes'"):
        gpus(MI300X, HSA_XNACK="yes")


def test_sramecc_follows_the_nodes_capability_bit(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(TWO_MI210, root)
    properties = root / "class/kfd/kfd/topology/nodes/2/properties"
    text = properties.read_text()
    capability = next(int(line.split()[1]) for line in text.splitlines() if "capability" in line)
    properties.write_text(
        text.replace(f"capability {capability}", f"capability {capability & ~(1 << 26)}")
    )
    assert [str(g.target) for g in gpus(root)] == [
        "gfx90a:sramecc+:xnack-",
        "gfx90a:sramecc-:xnack-",
    ]


def test_a_laptop_lists_its_discrete_gpu_and_its_apu_each_with_its_target() -> None:
    found = gpus(LAPTOP)
    assert [(g.index, g.node, str(g.target)) for g in found] == [
        (0, 1, "gfx1100"),
        (1, 2, "gfx1151"),
    ]
    assert [g.location for g in found] == ["0000:03:00.0", "0000:c5:00.0"]
    assert found[1].uuid == ""  # the APU reports unique_id 0
    assert all(g.name for g in found)


def test_gfx1031_runs_as_gfx1030_under_the_override() -> None:
    [plain] = gpus(RX6700)
    assert (str(plain.target), plain.hardware, plain.override) == ("gfx1031", "gfx1031", "")
    [forced] = gpus(RX6700, HSA_OVERRIDE_GFX_VERSION="10.3.0")
    assert (str(forced.target), forced.hardware) == ("gfx1030", "gfx1031")
    assert forced.override == "HSA_OVERRIDE_GFX_VERSION=10.3.0"
    assert forced.name == plain.name  # still the card it is
    module = [
        {"vendor": "amd", "target": "gfx1030", "kind": "code_object"},
        {"vendor": "amd", "target": "gfx1100", "kind": "code_object"},
    ]
    assert select_image(module, plain.target)[0] is None
    assert select_image(module, forced.target)[0] is module[0]


def test_the_per_node_override_counts_kfd_nodes_cpu_included() -> None:
    found = gpus(LAPTOP, HSA_OVERRIDE_GFX_VERSION_2="11.0.0")
    assert [str(g.target) for g in found] == ["gfx1100", "gfx1100"]
    assert [g.override for g in found] == ["", "HSA_OVERRIDE_GFX_VERSION_2=11.0.0"]
    both = gpus(LAPTOP, HSA_OVERRIDE_GFX_VERSION="11.0.0", HSA_OVERRIDE_GFX_VERSION_1="11.0.1")
    assert [str(g.target) for g in both] == ["gfx1101", "gfx1100"]
    assert [str(g.target) for g in gpus(LAPTOP, HSA_OVERRIDE_GFX_VERSION_0="9.0.6")] == [
        "gfx1100",
        "gfx1151",
    ]


@pytest.mark.parametrize("value", ["10.3", "10.3.0.1", "gfx1030", "10.3.x", "", "64.0.0", "9.16.0"])
def test_a_malformed_override_is_one_clear_error(value: str) -> None:
    with pytest.raises(UsageError) as error:
        gpus(RX6700, HSA_OVERRIDE_GFX_VERSION_1=value)
    assert f"HSA_OVERRIDE_GFX_VERSION_1={value!r}" in str(error.value)
    assert "\n" not in str(error.value)


# --- visible devices --------------------------------------------------------------------------------


def test_hip_visible_devices_keeps_the_second_gpu_as_device_0() -> None:
    [gpu] = gpus(TWO_MI210, HIP_VISIBLE_DEVICES="1")
    assert (gpu.index, gpu.node, gpu.location) == (0, 2, "0000:e3:00.0")


def test_hip_reads_cuda_visible_devices_when_its_own_is_empty() -> None:
    assert [g.node for g in gpus(TWO_MI210, CUDA_VISIBLE_DEVICES="1")] == [2]
    assert [g.node for g in gpus(TWO_MI210, HIP_VISIBLE_DEVICES="", CUDA_VISIBLE_DEVICES="1")] == [
        2
    ]
    assert [g.node for g in gpus(TWO_MI210, HIP_VISIBLE_DEVICES="0", CUDA_VISIBLE_DEVICES="1")] == [
        1
    ]


@pytest.mark.parametrize(
    ("value", "nodes"),
    [
        ("3,1", [4, 2]),
        (" 2 , 0 ", [3, 1]),  # entries are trimmed
        ("0x2", [3]),  # read as C's strtol reads it
        ("07", [8]),  # octal 7
        ("010", []),  # octal: 8, past the last GPU (index 7), so the list ends
        ("1,1,2", [2]),  # a repeat ends the list
        ("1,9,2", [2]),  # so does an index past the last GPU
        ("-1", []),
        ("", []),  # set but empty: none
        ("0,1,2,3,4,5,6,7,0", list(range(1, 9))),
    ],
)
def test_rocr_visible_devices_by_index(value: str, nodes: list[int]) -> None:
    found = gpus(MI300X, ROCR_VISIBLE_DEVICES=value)
    assert [g.node for g in found] == nodes
    assert [g.index for g in found] == list(range(len(nodes)))


def test_rocr_visible_devices_by_uuid() -> None:
    uuid = fixture_uuid(MI300X, 6)
    assert [g.node for g in gpus(MI300X, ROCR_VISIBLE_DEVICES=f"{uuid},0")] == [6, 1]
    assert [g.node for g in gpus(MI300X, ROCR_VISIBLE_DEVICES=uuid[:9].lower())] == [6]
    assert gpus(MI300X, ROCR_VISIBLE_DEVICES="GPU-") == []  # too short to name one
    assert gpus(MI300X, ROCR_VISIBLE_DEVICES="GPU-0000000000000000") == []


def test_hip_visible_devices_apply_after_rocrs_and_renumber() -> None:
    found = gpus(MI300X, ROCR_VISIBLE_DEVICES="7,5,3", HIP_VISIBLE_DEVICES="2,0")
    assert [(g.index, g.node) for g in found] == [(0, 4), (1, 8)]


@pytest.mark.parametrize(
    ("value", "chosen"),
    [
        ("1,0", [1, 0]),
        ("1,1,0", [1, 0]),  # HIP skips repeats
        ("01,0", []),  # but wants plain decimal indices
        ("1, 0", [1]),
        ("2", []),
        ("GPU-aaaa", [0]),  # a UUID entry names the first GPU whose UUID contains it
        ("GPU-AAAA", []),  # compared as written
        ("bbbb", []),
    ],
)
def test_hip_selection(value: str, chosen: list[int]) -> None:
    assert hip_selection(["GPU-aaaa0000aaaa0000", "GPU-bbbb0000bbbb0000"], value) == chosen


def test_rocr_selection_reads_no_more_entries_than_gpus() -> None:
    assert rocr_selection(["GPU-0000000000000001", ""], "1,0,5") == [1, 0]
    assert rocr_selection(["", ""], "GPU-XX") == []


@pytest.mark.parametrize(
    ("value", "chosen"),
    [
        ("1,0", [1, 0]),
        ("", []),
        ("-1", []),
        ("0,0", [0]),
        ("GPU-8932f937", [1]),  # a unique prefix
        ("GPU-89,0", []),  # an ambiguous one ends the list
        ("0,MIG-2f1e3c4d-aaaa-bbbb-cccc-123456789abc", [0]),
        ("NoDevFiles", []),
    ],
)
def test_cuda_selection(value: str, chosen: list[int]) -> None:
    uuids = [
        "GPU-89aa0000-0000-0000-0000-000000000000",
        "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    ]
    assert cuda_selection(uuids, value) == chosen


# --- KERNELPACK_TARGET and mixed machines -------------------------------------------------------------


def test_kernelpack_target_replaces_every_amd_gpus_target_and_says_so() -> None:
    found = gpus(MI300X, KERNELPACK_TARGET="gfx942:sramecc+:xnack+")
    assert {str(g.target) for g in found} == {"gfx942:sramecc+:xnack+"}
    assert {g.override for g in found} == {"KERNELPACK_TARGET=gfx942:sramecc+:xnack+"}
    assert {g.hardware for g in found} == {"gfx942"}
    assert len(found) == 8


def test_kernelpack_target_stands_for_a_gpu_no_probe_found() -> None:
    found = gpus(LAPTOP, KERNELPACK_TARGET="sm_90")
    assert [(g.vendor, g.index, str(g.target)) for g in found] == [
        ("amd", 0, "gfx1100"),
        ("amd", 1, "gfx1151"),
        ("nvidia", 0, "sm_90"),
    ]
    assert found[2].source == "KERNELPACK_TARGET"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("gfx1101x", "unknown AMD target"),
        ("compute_90", "code target"),
        ("sm_90a", "code target"),
        ("gfx90a:xnack", "bad feature"),
        ("sm90", "not an NVIDIA target"),
    ],
)
def test_a_malformed_kernelpack_target_is_one_clear_error(value: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as error:
        gpus(LAPTOP, KERNELPACK_TARGET=value)
    assert f"KERNELPACK_TARGET={value!r}" in str(error.value)


def fake_nvidia(devices: list[NvidiaDevice]) -> detect.NvidiaProbe:
    def probe(environ: Mapping[str, str]) -> list[NvidiaDevice]:
        value = environ.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return devices
        return [devices[i] for i in cuda_selection([d.uuid for d in devices], value)]

    return probe


A40 = NvidiaDevice(
    "NVIDIA A40", 8, 6, "0000:17:00.0", "GPU-11111111-0000-0000-0000-000000000000", "nvml"
)
L40 = NvidiaDevice(
    "NVIDIA L40", 8, 9, "0000:65:00.0", "GPU-22222222-0000-0000-0000-000000000000", "nvml"
)


def test_a_machine_with_amd_and_nvidia_gpus_lists_both_each_numbered_by_its_runtime() -> None:
    found = detect_gpus(sysfs_root=LAPTOP, environ={}, nvidia_probe=fake_nvidia([A40, L40]))
    assert [(g.vendor, g.index, str(g.target)) for g in found] == [
        ("amd", 0, "gfx1100"),
        ("amd", 1, "gfx1151"),
        ("nvidia", 0, "sm_86"),
        ("nvidia", 1, "sm_89"),
    ]
    assert [g.name for g in found[2:]] == ["NVIDIA A40", "NVIDIA L40"]
    forced = detect_gpus(
        sysfs_root=LAPTOP,
        environ={"KERNELPACK_TARGET": "sm_80"},
        nvidia_probe=fake_nvidia([A40, L40]),
    )
    assert [str(g.target) for g in forced] == ["gfx1100", "gfx1151", "sm_80", "sm_80"]


def test_cuda_visible_devices_hides_amd_gpus_from_hip_too() -> None:
    found = detect_gpus(
        sysfs_root=TWO_MI210,
        environ={"CUDA_VISIBLE_DEVICES": "1"},
        nvidia_probe=fake_nvidia([A40, L40]),
    )
    assert [(g.vendor, g.index, g.location) for g in found] == [
        ("amd", 0, "0000:e3:00.0"),
        ("nvidia", 0, "0000:65:00.0"),
    ]


def test_a_recorded_topology_does_not_probe_this_machines_nvidia_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def probe(environ: Mapping[str, str]) -> list[NvidiaDevice]:
        raise AssertionError("probed NVIDIA for a recorded topology")

    monkeypatch.setattr(detect, "probe_nvidia", probe)
    assert len(gpus(TWO_MI210)) == 2


# --- malformed or missing topologies -----------------------------------------------------------------


def copy_of(source: Path, tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    shutil.copytree(source, root)
    return root


def test_a_malformed_properties_line_names_the_file_and_line(tmp_path: Path) -> None:
    root = copy_of(TWO_MI210, tmp_path)
    properties = root / "class/kfd/kfd/topology/nodes/1/properties"
    properties.write_text(properties.read_text().replace("simd_count 416", "simd_count -416"))
    with pytest.raises(UsageError, match=r"nodes/1/properties: line 2: .*'simd_count -416'"):
        gpus(root)


def test_a_version_with_no_processor_name_is_refused(tmp_path: Path) -> None:
    root = copy_of(RX6700, tmp_path)
    properties = root / "class/kfd/kfd/topology/nodes/1/properties"
    properties.write_text(properties.read_text().replace("100301", "101601"))
    with pytest.raises(UsageError, match="gfx_target_version 101601"):
        gpus(root)


def test_a_gpu_newer_than_the_table_is_listed_with_its_name(tmp_path: Path) -> None:
    root = copy_of(RX6700, tmp_path)
    properties = root / "class/kfd/kfd/topology/nodes/1/properties"
    properties.write_text(properties.read_text().replace("100301", "130100"))
    [gpu] = gpus(root)
    assert gpu.target == TargetId("gfx1310") and gpu.name == ""


def test_stray_node_folders_and_missing_topologies_are_refused(tmp_path: Path) -> None:
    root = copy_of(RX6700, tmp_path)
    (root / "class/kfd/kfd/topology/nodes/lost+found").mkdir()
    with pytest.raises(UsageError, match="lost\\+found"):
        gpus(root)
    with pytest.raises(UsageError, match="no KFD topology"):
        gpus(tmp_path / "empty")


# --- the command line ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("clean_environ")
def test_detect_json_is_the_detected_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["detect", "--json", "--sysfs-root", str(MI300X)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["gpus"] == [gpu.to_json() for gpu in gpus(MI300X)]
    assert any("NVIDIA" in note for note in printed["notes"])


@pytest.mark.usefixtures("clean_environ")
def test_detect_table_names_each_gpu_and_the_override(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
    assert cli.main(["detect", "--sysfs-root", str(RX6700)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("device"))
    assert lines[header].split() == ["device", "vendor", "target", "name", "location", "source"]
    row = lines[header + 1]
    assert row.startswith("hip:0 ") and "gfx1030" in row and "0000:0a:00.0" in row
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0 (hardware gfx1031)" in row


def test_python_m_kernelpack_detect_exits_2_with_one_line_on_bad_input() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(VARIABLES)}
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(cli.__file__).parents[2]), environ.get("PYTHONPATH", "")]
    )
    command = [sys.executable, "-m", "kernelpack", "detect", "--sysfs-root", str(LAPTOP)]
    good = subprocess.run(command, env=environ, capture_output=True, text=True, check=False)
    assert good.returncode == 0, good.stderr
    assert "gfx1151" in good.stdout
    bad = subprocess.run(
        command, env={**environ, "HSA_XNACK": "on"}, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [bad.stderr.strip()] and "HSA_XNACK='on'" in bad.stderr


# --- the live NVIDIA probe (on a machine with an NVIDIA GPU) ------------------------------------------


@pytest.mark.gpu
def test_nvml_and_the_cuda_driver_agree_on_this_machines_gpus() -> None:
    through_nvml = detect._nvml_devices()
    through_cuda = detect.cuda_driver_devices()
    assert through_nvml is not None and through_cuda is not None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        through_nvml = [
            through_nvml[i] for i in cuda_selection([d.uuid for d in through_nvml], visible)
        ]
    assert [(d.major, d.minor, d.location, d.uuid) for d in through_nvml] == [
        (d.major, d.minor, d.location, d.uuid) for d in through_cuda
    ]
    found = detect_gpus(nvidia_probe=None)
    nvidia = [g for g in found if g.vendor == "nvidia"]
    assert [str(g.target) for g in nvidia] == [f"sm_{d.major}{d.minor}" for d in through_cuda]


def test_an_amd_stand_in_on_an_nvidia_machine_comes_first_as_amd_gpus_do(tmp_path: Path) -> None:
    """KERNELPACK_TARGET=gfx1100 where only NVIDIA GPUs are found: the AMD GPU it stands for is
    hip:0 and listed first, so ``device=None`` means it (tests/hip_shim.py's view relies on it)."""
    (tmp_path / "class" / "kfd" / "kfd" / "topology" / "nodes").mkdir(parents=True)  # no GPU
    found = detect_gpus(
        sysfs_root=tmp_path,
        environ={"KERNELPACK_TARGET": "gfx1100"},
        nvidia_probe=fake_nvidia([A40, L40]),
    )
    assert [(g.vendor, g.index, str(g.target), g.source) for g in found] == [
        ("amd", 0, "gfx1100", "KERNELPACK_TARGET"),
        ("nvidia", 0, "sm_86", "nvml"),
        ("nvidia", 1, "sm_89", "nvml"),
    ]
    assert resolve_device(None, found) is found[0]
