"""The ``device`` argument of :func:`kernelpack.load`: which GPU, never guessed across vendors.

A machine can have AMD and NVIDIA GPUs at once, each vendor's runtime numbering its own from 0, so
a bare number does not say which GPU is meant. What is accepted:

- ``None``: the first GPU detection lists (its AMD GPUs come first: ``hip:0`` where there is one,
  else ``cuda:0``);
- ``"cuda:N"`` / ``"hip:N"``: device N of that vendor's runtime, numbered as it numbers them after
  ``CUDA_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` (what
  ``torch.device("cuda:N")`` and ``cupy.cuda.Device(N)`` mean on that vendor's build);
- a plain ``int`` N: only where every GPU is of one vendor, where it can mean one thing.

A torch or CuPy device object becomes such a string through :mod:`kernelpack.devices.arrays`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import NoImageError, UsageError

if TYPE_CHECKING:
    from .detect import Gpu

# The runtime's name in a device string, by vendor (as torch and CuPy spell CUDA's; HIP for AMD).
RUNTIME_OF_VENDOR = {"nvidia": "cuda", "amd": "hip"}
VENDOR_OF_RUNTIME = {runtime: vendor for vendor, runtime in RUNTIME_OF_VENDOR.items()}
_VISIBLE = {
    "nvidia": "CUDA_VISIBLE_DEVICES",
    "amd": "ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES",
}
_VENDOR_NAME = {"nvidia": "NVIDIA", "amd": "AMD"}
# "cuda:N" or "hip:N" (N without leading zeros)
# compiled on first use (re keeps it): a load given a device number, the default, parses no string
_DEVICE_STRING = r"(cuda|hip):(0|[1-9][0-9]*)"


class DeviceString(str):
    """A vendor-qualified GPU, "cuda:0" or "hip:1", that knows its parts: made from a runtime's name
    and ordinal (:meth:`of`) or parsed once (:func:`parse_device`), so that code passing a device
    it already knows never formats it and parses it back. It is the str it spells, as a key too."""

    runtime: str  # "cuda" or "hip"
    ordinal: int  # the vendor runtime's number for the GPU

    @classmethod
    def of(cls, runtime: str, index: int) -> DeviceString:
        made = cls(f"{runtime}:{index}")
        made.runtime, made.ordinal = runtime, index
        return made


def parse_device(device: str) -> DeviceString | None:
    """``device`` as a :class:`DeviceString`, None where it is not "cuda:N" or "hip:N"."""
    if isinstance(device, DeviceString):
        return device
    match = re.fullmatch(_DEVICE_STRING, device)
    return None if match is None else DeviceString.of(match[1], int(match[2]))


Device = int | str | None


def device_name(gpu: Gpu) -> DeviceString:
    """The string that names ``gpu`` as a ``device`` argument: "cuda:0", "hip:1"."""
    return DeviceString.of(RUNTIME_OF_VENDOR[gpu.vendor], gpu.index)


def _listing(gpus: Sequence[Gpu]) -> str:
    return ", ".join(f"{device_name(gpu)} ({gpu.target})" for gpu in gpus)


def resolve_device(device: object, gpus: Sequence[Gpu]) -> Gpu:
    """The GPU ``device`` names among ``gpus`` (detection's list), or the error that says why not.

    No GPU at all is a NoImageError (nothing can load anywhere); an argument that names no GPU
    here is a UsageError listing the ones there are.
    """
    if not gpus:
        raise NoImageError(
            "no GPU found: no AMD GPU in the KFD topology and no NVIDIA GPU through NVML or "
            "libcuda; set KERNELPACK_TARGET to name one, or check the driver"
        )
    if device is None:
        return gpus[0]
    if isinstance(device, str):
        parsed = parse_device(device)
        if parsed is None:
            raise UsageError(
                f"device={device!r}: expected 'cuda:N' or 'hip:N' (N the vendor runtime's device "
                f"number); GPUs here: {_listing(gpus)}"
            )
        return _of_vendor(device, VENDOR_OF_RUNTIME[parsed.runtime], parsed.ordinal, gpus)
    if type(device) is not int:
        raise UsageError(
            f"device={device!r}: expected None, 'cuda:N', 'hip:N' or an int, not a "
            f"{type(device).__name__}; kernelpack.devices.arrays turns a torch or CuPy device into "
            f"'cuda:N' / 'hip:N'. GPUs here: {_listing(gpus)}"
        )
    vendors = sorted({gpu.vendor for gpu in gpus})
    if len(vendors) > 1:
        raise UsageError(
            f"device={device}: this machine has AMD and NVIDIA GPUs, each numbered from 0, so a "
            f"number alone does not say which; pass device='cuda:{device}' or 'hip:{device}'. "
            f"GPUs here: {_listing(gpus)}"
        )
    return _of_vendor(str(device), vendors[0], device, gpus)


def _of_vendor(device: str, vendor: str, number: int, gpus: Sequence[Gpu]) -> Gpu:
    mine = [gpu for gpu in gpus if gpu.vendor == vendor]
    found = next((gpu for gpu in mine if gpu.index == number), None)
    if found is not None:
        return found
    runtime = RUNTIME_OF_VENDOR[vendor]
    if not mine:
        raise UsageError(
            f"device={device!r}: no {_VENDOR_NAME[vendor]} GPU is visible here (after {_VISIBLE[vendor]}); GPUs here: {_listing(gpus)}"
        )
    raise UsageError(
        f"device={device!r}: {len(mine)} {runtime} device(s) visible, {runtime}:0 to "
        f"{runtime}:{len(mine) - 1} (after {_VISIBLE[vendor]}); GPUs here: {_listing(gpus)}"
    )
