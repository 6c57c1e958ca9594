"""The ``device`` argument on machines with one vendor's GPUs and with both.

GPUs come from recorded KFD topologies (tests/fixtures/sysfs) and a fake NVIDIA list that applies
CUDA_VISIBLE_DEVICES as the driver does; each expectation names the GPU by its PCI address, read
off the fixture, so a wrong pick cannot pass by having the same target.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from kernelpack.devices.argument import device_name, resolve_device
from kernelpack.devices.detect import Gpu, NvidiaDevice, cuda_selection, detect_gpus
from kernelpack.errors import NoImageError, UsageError

SYSFS = Path(__file__).parent / "fixtures" / "sysfs"
LAPTOP = SYSFS / "laptop-gfx1100-gfx1151"  # gfx1100 at 0000:03:00.0, gfx1151 APU at 0000:c4:00.0
TWO_MI210 = SYSFS / "two-mi210"
A40 = NvidiaDevice(
    "NVIDIA A40", 8, 6, "0000:17:00.0", "GPU-11111111-0000-0000-0000-0000000", "nvml"
)
L40 = NvidiaDevice(
    "NVIDIA L40", 8, 9, "0000:65:00.0", "GPU-22222222-0000-0000-0000-0000000", "nvml"
)


def nvidia(devices: list[NvidiaDevice]) -> object:
    def probe(environ: Mapping[str, str]) -> list[NvidiaDevice]:
        value = environ.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return devices
        return [devices[i] for i in cuda_selection([d.uuid for d in devices], value)]

    return probe


def mixed(**environ: str) -> list[Gpu]:
    return detect_gpus(sysfs_root=LAPTOP, environ=environ, nvidia_probe=nvidia([A40, L40]))  # type: ignore[arg-type]


def amd_location(root: Path, node: int) -> str:
    """The PCI address of a KFD node, computed from its properties file by hand."""
    props = dict(
        line.split()
        for line in (root / f"class/kfd/kfd/topology/nodes/{node}/properties")
        .read_text()
        .splitlines()
        if line.strip()
    )
    location, domain = int(props["location_id"]), int(props.get("domain", "0"))
    bus, devfn = location >> 8, location & 0xFF
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"


def test_vendor_qualified_names_pick_that_vendors_gpu_on_a_mixed_machine() -> None:
    gpus = mixed()
    assert resolve_device("cuda:0", gpus).location == A40.location
    assert resolve_device("cuda:1", gpus).location == L40.location
    assert resolve_device("hip:0", gpus).location == amd_location(LAPTOP, 1)  # node 0: the CPU
    assert resolve_device("hip:1", gpus).location == amd_location(LAPTOP, 2)
    assert [device_name(g) for g in gpus] == ["hip:0", "hip:1", "cuda:0", "cuda:1"]
    assert resolve_device(None, gpus) is gpus[0]


def test_a_bare_number_on_a_mixed_machine_asks_which_vendor() -> None:
    with pytest.raises(UsageError) as raised:
        resolve_device(1, mixed())
    message = str(raised.value)
    assert "pass device='cuda:1' or 'hip:1'" in message
    assert "hip:0 (gfx1100), hip:1 (gfx1151), cuda:0 (sm_86), cuda:1 (sm_89)" in message
    assert raised.value.exit_code == 2 and isinstance(raised.value, ValueError)


def test_numbers_follow_the_visible_devices_variables() -> None:
    """cuda:0 is the runtime's device 0 after CUDA_VISIBLE_DEVICES: here the L40."""
    gpus = mixed(CUDA_VISIBLE_DEVICES="1")
    # HIP reads CUDA_VISIBLE_DEVICES too when HIP_VISIBLE_DEVICES is unset: one GPU each remains.
    assert [device_name(g) for g in gpus] == ["hip:0", "cuda:0"]
    assert resolve_device("cuda:0", gpus).location == L40.location
    assert resolve_device("hip:0", gpus).location == amd_location(LAPTOP, 2)
    with pytest.raises(UsageError, match=r"1 cuda device\(s\) visible, cuda:0 to cuda:0"):
        resolve_device("cuda:1", gpus)


def test_a_plain_number_is_the_vendors_number_on_a_one_vendor_machine() -> None:
    both = detect_gpus(sysfs_root=TWO_MI210, environ={})
    assert resolve_device(1, both).location == amd_location(TWO_MI210, 2)
    assert resolve_device(1, both) is resolve_device("hip:1", both)
    second = detect_gpus(sysfs_root=TWO_MI210, environ={"HIP_VISIBLE_DEVICES": "1"})
    assert resolve_device(0, second).location == amd_location(TWO_MI210, 2)
    nvidia_only = detect_gpus(
        sysfs_root=TWO_MI210,
        environ={"ROCR_VISIBLE_DEVICES": ""},
        nvidia_probe=nvidia([A40, L40]),  # type: ignore[arg-type]
    )
    assert resolve_device(1, nvidia_only).location == L40.location


@pytest.mark.parametrize(
    "device",
    ["cuda", "cuda:", "cuda:01", "CUDA:0", " cuda:0", "rocm:0", "gpu:0", "cuda:-1", "0"],
)
def test_malformed_strings_say_what_is_accepted(device: str) -> None:
    with pytest.raises(UsageError, match=r"expected 'cuda:N' or 'hip:N'"):
        resolve_device(device, mixed())


@pytest.mark.parametrize("device", [True, 1.0, [0], b"cuda:0"])
def test_other_types_are_refused(device: object) -> None:
    with pytest.raises(UsageError, match=r"expected None, 'cuda:N', 'hip:N' or an int"):
        resolve_device(device, mixed())


def test_a_vendor_with_no_gpu_here_and_no_gpu_at_all() -> None:
    amd_only = detect_gpus(sysfs_root=TWO_MI210, environ={})
    with pytest.raises(
        UsageError, match=r"no NVIDIA GPU is visible here \(after CUDA_VISIBLE_DEVICES\)"
    ):
        resolve_device("cuda:0", amd_only)
    with pytest.raises(NoImageError, match="no GPU found"):
        resolve_device(None, [])
