"""Which GPUs this machine has and the target each runs, without loading any AMD runtime.

The list and its numbering are the ones the vendors' runtimes will use, so that ``Gpu.index`` is the
device a kernel launches on and ``Gpu.target`` the code it can run. Resolved here, in this order:

1. AMD GPUs from the KFD topology (``/sys/class/kfd/kfd/topology/nodes/<N>/properties``), read as
   libhsakmt reads it: nodes numbered in sysfs order, skipping (on the live system) GPU nodes whose
   render device is absent, as in a container given some of the GPUs; CPU nodes (``simd_count`` or
   ``gfx_target_version`` 0) keep their number but are not GPUs.
2. ``HSA_OVERRIDE_GFX_VERSION_<node>`` (that node number), else ``HSA_OVERRIDE_GFX_VERSION``,
   replaces a GPU's version (libhsakmt); the hardware's own target stays in ``Gpu.hardware``.
3. Features, as ROCR sets them where the processor has them: sramecc from the node's capability bit
   HSA_CAP_SRAM_EDCSUPPORTED, xnack on with ``HSA_XNACK=1`` and off otherwise.
4. ``ROCR_VISIBLE_DEVICES`` selects and orders GPUs by their position among the GPU nodes or by
   UUID (ROCR); then ``HIP_VISIBLE_DEVICES``, or ``CUDA_VISIBLE_DEVICES`` when that is empty, selects
   among what ROCR left, numbered again (HIP). An entry that names no GPU ends either list, as in
   the runtimes.
5. NVIDIA GPUs from NVML or the CUDA driver, in CUDA's numbering, with ``CUDA_VISIBLE_DEVICES``.
6. ``KERNELPACK_TARGET`` replaces the target of every GPU of its vendor (``Gpu.override`` says so);
   where no GPU of that vendor was found it stands for one, device 0, listed first when AMD (as
   AMD GPUs are: ``device=None`` then means it).

Everything that touches sysfs, the environment or a vendor library is one small function below; the
rest is pure and tested against recorded topologies (tests/fixtures/sysfs).

Every load imports this module, so its annotations are evaluated (no ``from __future__ import
annotations``): typing compiles each string annotation of a NamedTuple's fields into a ForwardRef
(docs/loader.md, "Ready time"); each type is defined before it is named.
"""

import ctypes
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from ..errors import RuntimeLibraryError, UsageError
from ..files.regular import SYSFS_FILE_LIMIT, read_regular_text
from ..targets import (
    GpuTarget,
    NvidiaTarget,
    TargetId,
    agent_target,
    parse_target,
    processor_name,
    split_gfx_target_version,
)
from ..targets.processors import AMD_BY_NAME
from .cuda_driver import CudaDriver

# kfd_topology.h / hsakmttypes.h: the node can correct SRAM errors, which ROCR reports as sramecc+.
# (0x00080000, the bit's first home, is reserved and always 0.)
HSA_CAP_SRAM_EDCSUPPORTED = 0x04000000

Vendor = Literal["amd", "nvidia"]
MAX_TARGET_NAME = 64  # the longest target id, "gfx908:sramecc+:xnack-", has 22 characters
KFD_NODES = Path("class/kfd/kfd/topology/nodes")


class Gpu(NamedTuple):
    """One GPU as the runtime will number it.

    ``index``: the device ordinal of its vendor's runtime (HIP or CUDA), after the visible-devices
    variables. ``target``: what code it runs (AMD: a TargetId with sramecc/xnack resolved; NVIDIA:
    ``sm_XY``). ``hardware``: the target the hardware reports, before any override. ``source``: how
    it was found ("kfd", "nvml", "cuda", or "KERNELPACK_TARGET" for a GPU the variable stands for).
    ``override``: the variable and value that changed the target, "" when none did.

    A NamedTuple, not a dataclass: a load makes these, and a dataclass costs the import of
    dataclasses and inspect (docs/loader.md, "Ready time"). Its ``index`` hides tuple's method of
    that name, which nothing calls on a GPU.
    """

    index: int  # type: ignore[assignment]  # the field, not tuple.index (see above)
    vendor: Vendor
    target: GpuTarget
    name: str
    location: str  # PCI domain:bus:device.function, "" when unknown
    uuid: str  # as the runtime spells it (ROCR: GPU-<16 hex>, CUDA: GPU-<8-4-4-4-12>), "" if none
    node: int | None  # KFD topology node (AMD)
    source: str
    hardware: str
    override: str = ""

    def to_json(self) -> dict[str, object]:
        from .._jsonfields import json_record  # deferred: `--json` reports alone write a Gpu

        return json_record(self)


class KfdNode(NamedTuple):
    """One KFD topology node: its number as libhsakmt gives it, and its properties."""

    node: int
    path: str  # the properties file, for messages
    properties: Mapping[str, int]
    product_name: str  # from the DRM device, "" when the driver does not say


class NvidiaDevice(NamedTuple):
    """One NVIDIA GPU as a probe lists it, before kernelpack numbers it."""

    name: str
    major: int
    minor: int
    location: str
    uuid: str
    source: str  # "nvml" or "cuda"


NvidiaProbe = Callable[[Mapping[str, str]], list[NvidiaDevice]]


def detect_gpus(
    *,
    sysfs_root: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    nvidia_probe: NvidiaProbe | None = None,
) -> list[Gpu]:
    """The machine's GPUs, AMD first, each with its own target (see the module docstring).

    ``sysfs_root`` reads a recorded topology (DIR/class/kfd/kfd/topology/...) in place of /sys; it
    then describes that machine only, so NVIDIA GPUs, which come from this machine's driver, are
    not probed unless ``nvidia_probe`` is given. ``environ`` replaces os.environ for every variable
    read here (the CUDA driver, when asked, still reads the process's own CUDA_VISIBLE_DEVICES).
    ``nvidia_probe`` replaces the live NVML/CUDA probe (:func:`probe_nvidia`); tests pass a fake.
    """
    env = os.environ if environ is None else environ
    live = sysfs_root is None
    root = Path("/sys") if sysfs_root is None else Path(sysfs_root)
    gpus = amd_gpus(read_kfd_nodes(root, live=live), env)
    probe = nvidia_probe if nvidia_probe is not None else (probe_nvidia if live else None)
    if probe is not None:
        gpus += nvidia_gpus(probe(env))
    forced = env.get("KERNELPACK_TARGET", "").strip()
    if forced:
        gpus = force_target(gpus, forced)
    return gpus


# --- AMD: the KFD topology -------------------------------------------------------------------------


def amd_gpus(nodes: Sequence[KfdNode], environ: Mapping[str, str]) -> list[Gpu]:
    """The AMD GPUs among ``nodes``, with overrides, features and visible-devices lists applied."""
    xnack = _xnack_mode(environ)
    gpus = [_amd_gpu(node, environ, xnack) for node in nodes if _is_gpu(node)]
    if "ROCR_VISIBLE_DEVICES" in environ:
        chosen = rocr_selection([gpu.uuid for gpu in gpus], environ["ROCR_VISIBLE_DEVICES"])
        gpus = [gpus[i] for i in chosen]
    hip_list = environ.get("HIP_VISIBLE_DEVICES", "") or environ.get("CUDA_VISIBLE_DEVICES", "")
    if hip_list:
        gpus = [gpus[i] for i in hip_selection([gpu.uuid for gpu in gpus], hip_list)]
    return [gpu._replace(index=i) for i, gpu in enumerate(gpus)]


def _is_gpu(node: KfdNode) -> bool:
    return (
        node.properties.get("simd_count", 0) > 0
        and node.properties.get("gfx_target_version", 0) > 0
    )


def _amd_gpu(node: KfdNode, environ: Mapping[str, str], xnack: bool) -> Gpu:
    props = node.properties
    version = props["gfx_target_version"]
    try:
        hardware = processor_name(*split_gfx_target_version(version))
    except ValueError:
        raise UsageError(
            f"{node.path}: gfx_target_version {version} is not MMmmss with minor and stepping "
            "below 16"
        ) from None
    processor, override = hardware, ""
    for variable in (f"HSA_OVERRIDE_GFX_VERSION_{node.node}", "HSA_OVERRIDE_GFX_VERSION"):
        if variable in environ:
            processor = _override_processor(variable, environ[variable])
            override = f"{variable}={environ[variable]}"
            break
    sramecc = bool(props.get("capability", 0) & HSA_CAP_SRAM_EDCSUPPORTED)
    target = agent_target(processor, sramecc=sramecc, xnack=xnack)
    unique_id = props.get("unique_id", 0)
    location = props.get("location_id", 0)
    known = AMD_BY_NAME.get(hardware)
    return Gpu(
        index=-1,
        vendor="amd",
        target=target,
        name=node.product_name or (known.description if known is not None else ""),
        location=_pci_address(props.get("domain", 0), location >> 8, location & 0xFF),
        uuid=f"GPU-{unique_id:016x}" if unique_id else "",
        node=node.node,
        source="kfd",
        hardware=hardware,
        override=override,
    )


def _pci_address(domain: int, bus: int, devfn: int) -> str:
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"


# compiled on first use (re keeps it), as _C_INTEGER: AMD detection alone reads either
_OVERRIDE = r"([0-9]+)\.([0-9]+)\.([0-9]+)"
# C's LONG_MAX on the 64-bit systems ROCm runs on: where strtol saturates a longer number.
_LONG_MAX = (1 << 63) - 1


def _decimal(digits: str) -> int:
    """The value of a string of ASCII decimal digits, however long: past 19 significant digits
    it is _LONG_MAX, as C's strtol saturates, so a variable of 5,000 digits never meets Python's
    4,300-digit limit on int() (a ValueError) and still names no GPU or processor."""
    significant = digits.lstrip("0")
    return _LONG_MAX if len(significant) > 19 else int(significant or "0")


def _override_processor(variable: str, value: str) -> str:
    """The processor HSA_OVERRIDE_GFX_VERSION names; libhsakmt refuses the same values."""
    match = re.fullmatch(_OVERRIDE, value)
    if match is not None:
        major, minor, step = (_decimal(group) for group in match.groups())
        if major <= 63:
            try:
                return processor_name(major, minor, step)
            except ValueError:
                pass
    raise UsageError(
        f"{variable}={_echo(value)}: expected major.minor.stepping in decimal, e.g. 10.3.0 for "
        "gfx1030"
    )


def _xnack_mode(environ: Mapping[str, str]) -> bool:
    value = environ.get("HSA_XNACK", "")
    if value not in ("", "0", "1"):
        raise UsageError(
            f"HSA_XNACK={_echo(value)}: ROCm reads 1 (xnack on) or 0 (off); unset it or use one"
        )
    return value == "1"


def rocr_selection(uuids: Sequence[str], value: str) -> list[int]:
    """Positions among the GPU nodes that ROCR_VISIBLE_DEVICES makes visible, in its order.

    ROCR's RvdFilter: entries split at commas, trimmed and upper-cased; one starting with G is a
    UUID, matched as a prefix (5 to 20 characters) of exactly one GPU's GPU-<16 hex digits>; any
    other is an integer as C's strtol reads it (0x.. hex, 0.. octal). At most as many entries as
    GPUs are read; the first that names no GPU, or one already chosen, ends the list. Set but empty
    selects none. ``uuids`` are the GPUs' UUIDs, "" for a GPU without one.
    """
    keys = [uuid.upper() if uuid else "INVALID-UUID" for uuid in uuids]
    chosen: list[int] = []
    for entry in value.split(",")[: len(uuids)]:
        token = entry.strip().upper()
        index: int | None
        if token.startswith("G"):
            hits = [i for i, key in enumerate(keys) if key.startswith(token)]
            index = hits[0] if 5 <= len(token) <= 20 and len(hits) == 1 else None
        else:
            index = _strtol(token)
        if index is None or not 0 <= index < len(uuids) or index in chosen:
            break
        chosen.append(index)
    return chosen


_C_INTEGER = r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)"


def _strtol(token: str) -> int | None:
    """C ``strtol(token, &end, 0)`` when it reads the whole token, else None."""
    match = re.fullmatch(_C_INTEGER, token)
    if match is None:
        return None
    digits = match[2]
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10
    # Power-of-two bases have no digit limit in int(); a decimal one saturates (_decimal).
    number = _decimal(digits) if base == 10 else int(digits, base)
    return -number if match[1] == "-" else number


def hip_selection(uuids: Sequence[str], value: str) -> list[int]:
    """Positions among ROCR's GPUs that HIP_VISIBLE_DEVICES makes visible, in its order.

    HIP's reading (clr rocdevice.cpp): entries split at commas; one containing "GPU-" stands for the
    first GPU whose UUID contains it; every entry must then be a plain decimal index (no sign,
    space or leading zero) below the number of GPUs, and the first that is not ends the list; an
    index already chosen is skipped. HIP spells a GPU without UUID "GPU-XX".
    """
    chosen: list[int] = []
    for entry in value.split(","):
        token = entry
        if "GPU-" in token:
            token = next(
                (str(i) for i, uuid in enumerate(uuids) if token in (uuid or "GPU-XX")), token
            )
        index = _decimal(token) if re.fullmatch(r"0|[1-9][0-9]*", token) else len(uuids)
        if index >= len(uuids):
            break
        if index not in chosen:
            chosen.append(index)
    return chosen


def _node_numbers(nodes_dir: Path) -> list[int]:
    numbers = []
    for entry in nodes_dir.iterdir():
        # ASCII digits only: "²" passes str.isdigit and fails int()
        if not (entry.name.isascii() and entry.name.isdigit()):
            raise UsageError(f"{entry}: a KFD topology node folder is a number; this one is not")
        numbers.append(int(entry.name))
    return sorted(numbers)


def read_kfd_nodes(sysfs_root: Path, *, live: bool) -> list[KfdNode]:
    """The KFD topology nodes under ``sysfs_root``, numbered as libhsakmt numbers them.

    On the live system a GPU node whose /dev/dri/renderD<minor> is absent is left out and later
    nodes move up, as libhsakmt does (HSA_OVERRIDE_GFX_VERSION_<node> uses that number). A missing
    topology is no AMD GPU on the live system, and a mistake in a recorded one.
    """
    nodes_dir = sysfs_root / KFD_NODES
    if not nodes_dir.is_dir():
        if live:
            return []
        raise UsageError(f"{nodes_dir}: no KFD topology here; give a folder laid out like /sys")
    nodes: list[KfdNode] = []
    for number in _node_numbers(nodes_dir):
        path = nodes_dir / str(number) / "properties"
        text = _read_text(path)
        if text is None:
            raise UsageError(f"{path}: missing or unreadable KFD node properties")
        properties = parse_properties(text, str(path))
        minor = properties.get("drm_render_minor", 0)
        product = ""
        if properties.get("simd_count", 0) > 0:
            if live and not Path(f"/dev/dri/renderD{minor}").exists():
                continue
            drm = sysfs_root / f"class/drm/renderD{minor}/device/product_name"
            product = (_read_text(drm) or "").strip()
        nodes.append(KfdNode(len(nodes), str(path), properties, product))
    return nodes


def parse_properties(text: str, path: str) -> dict[str, int]:
    """A KFD properties file: one ``name value`` line each, values unsigned decimal integers of
    at most 64 bits (the kernel prints u32 and u64 fields)."""
    properties: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not fields[1].isascii() or not fields[1].isdigit():
            raise UsageError(f"{path}: line {number}: expected 'name value', got {_echo(line)}")
        if len(fields[1]) > 20 or int(fields[1]) >= 1 << 64:
            raise UsageError(
                f"{path}: line {number}: {_echo(fields[0])} is a {len(fields[1])}-digit number, "
                "past the 64 bits of a KFD property; give the properties file the kernel wrote"
            )
        properties[fields[0]] = int(fields[1])
    return properties


def _echo(text: str) -> str:
    """A line of a file or a variable's value as an error shows it: repr, at most 60 characters
    of it."""
    return repr(text) if len(text) <= 60 else f"{text[:57]!r}... ({len(text)} characters)"


def _read_text(path: Path) -> str | None:
    """A sysfs attribute's text, None where it is absent; a FIFO, a device (a link to /dev/zero)
    or a file over SYSFS_FILE_LIMIT is one UsageError, never a hang or a MemoryError."""
    try:
        return read_regular_text(path, limit=SYSFS_FILE_LIMIT, what="a sysfs attribute file")
    except (FileNotFoundError, NotADirectoryError):
        return None


# --- NVIDIA ---------------------------------------------------------------------------------------


def nvidia_gpus(devices: Sequence[NvidiaDevice]) -> list[Gpu]:
    """Number the probe's devices (already in CUDA's order, visible ones only)."""
    gpus = []
    for index, device in enumerate(devices):
        target = NvidiaTarget(device.major, device.minor)
        gpus.append(
            Gpu(
                index=index,
                vendor="nvidia",
                target=target,
                name=device.name,
                location=device.location,
                uuid=device.uuid,
                node=None,
                source=device.source,
                hardware=str(target),
            )
        )
    return gpus


def cuda_selection(uuids: Sequence[str], value: str) -> list[int]:
    """Positions among the GPUs (in CUDA's order) that CUDA_VISIBLE_DEVICES makes visible.

    As the CUDA driver reads it: entries split at commas, each a decimal index or a GPU UUID
    (GPU-..., a unique prefix suffices); the first entry that names no GPU, repeats one, or names a
    MIG instance (which the GPU list here does not show) ends the list. Empty selects none.
    """
    chosen: list[int] = []
    for entry in value.split(","):
        token = entry.strip()
        index: int | None = None
        if re.fullmatch(r"[+-]?[0-9]+", token):
            index = -_decimal(token[1:]) if token[0] == "-" else _decimal(token.lstrip("+"))
        elif token.upper().startswith("GPU-"):
            hits = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(token.lower())]
            index = hits[0] if len(hits) == 1 else None
        if index is None or not 0 <= index < len(uuids) or index in chosen:
            break
        chosen.append(index)
    return chosen


def probe_nvidia(environ: Mapping[str, str]) -> list[NvidiaDevice]:
    """NVIDIA GPUs in CUDA's numbering with CUDA_VISIBLE_DEVICES applied; [] without a driver.

    NVML first: it answers without initialising CUDA (so a process that forks later can still use
    CUDA in its children) and lists GPUs in PCI order, to which CUDA_VISIBLE_DEVICES is applied as
    the driver applies it. CUDA numbers the fastest GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID;
    when the GPUs differ in compute capability and that order is not set, the two numberings can
    differ, so the CUDA driver itself is asked (it reads this process's CUDA_VISIBLE_DEVICES). The
    CUDA driver also stands in where NVML is missing or fails.
    """
    listed = _nvml_devices()
    if listed is not None:
        mixed = len({(device.major, device.minor) for device in listed}) > 1
        if not mixed or environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
            value = environ.get("CUDA_VISIBLE_DEVICES")
            if value is None:
                return listed
            return [listed[i] for i in cuda_selection([d.uuid for d in listed], value)]
    from_driver = cuda_driver_devices()
    return from_driver if from_driver is not None else []


def _load_library(name: str) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


class _NvmlPciInfo(ctypes.Structure):
    # nvml.h nvmlPciInfo_t (the layout nvmlDeviceGetPciInfo_v3 fills)
    _fields_ = (
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    )


def normalise_bus_id(bus_id: str) -> str:
    """0000:19:00.0 from NVML's 00000000:19:00.0 or CUDA's 0000:19:00.0."""
    text = bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}" if rest else text
    except ValueError:
        return text


def _nvml_devices() -> list[NvidiaDevice] | None:
    """Every NVIDIA GPU NVML sees, in its (PCI) order; None when NVML is absent or fails."""
    nvml = _load_library("libnvidia-ml.so.1")
    if nvml is None or nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        devices = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            name = ctypes.create_string_buffer(96)
            uuid = ctypes.create_string_buffer(96)
            pci = _NvmlPciInfo()
            statuses = (
                nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)),
                nvml.nvmlDeviceGetCudaComputeCapability(
                    handle, ctypes.byref(major), ctypes.byref(minor)
                ),
                nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(len(name))),
                nvml.nvmlDeviceGetUUID(handle, uuid, ctypes.c_uint(len(uuid))),
                nvml.nvmlDeviceGetPciInfo_v3(handle, ctypes.byref(pci)),
            )
            if any(statuses):
                return None
            devices.append(
                NvidiaDevice(
                    name=name.value.decode(errors="replace"),
                    major=major.value,
                    minor=minor.value,
                    location=normalise_bus_id(pci.busId.decode(errors="replace")),
                    uuid=uuid.value.decode(errors="replace"),
                    source="nvml",
                )
            )
        return devices
    finally:
        nvml.nvmlShutdown()


# --- KERNELPACK_TARGET ----------------------------------------------------------------------------


def forced_target(value: str) -> GpuTarget:
    """The target KERNELPACK_TARGET names: an AMD target id or an NVIDIA GPU ``sm_XY``."""
    if len(value.strip()) > MAX_TARGET_NAME:
        raise UsageError(
            f"KERNELPACK_TARGET={_echo(value)}: not a target name (target names have at most "
            f"{MAX_TARGET_NAME} characters, such as gfx942, gfx90a:xnack+ or sm_90)"
        )
    try:
        parsed = parse_target(value)
        if parsed.kind == "family":
            raise UsageError(
                f"{value.strip()} is a family; name one of {', '.join(parsed.members)}"
            )
        if parsed.vendor == "amd":
            return parsed.amd
        target = parsed.nvidia
    except UsageError as error:
        raise UsageError(f"KERNELPACK_TARGET={value!r}: {error}") from None
    if target.ptx or target.arch_specific:
        raise UsageError(
            f"KERNELPACK_TARGET={_echo(value)}: name the GPU, sm_{target.major}{target.minor}; "
            f"{target} is a code target"
        )
    return target


def force_target(gpus: Sequence[Gpu], value: str) -> list[Gpu]:
    """Every GPU of the forced target's vendor runs it; with none found, one stands for device 0,
    listed where that vendor's GPUs are (AMD ones first)."""
    target = forced_target(value)
    vendor: Vendor = "amd" if isinstance(target, TargetId) else "nvidia"
    override = f"KERNELPACK_TARGET={value}"
    if not any(gpu.vendor == vendor for gpu in gpus):
        stand_in = Gpu(0, vendor, target, "", "", "", None, "KERNELPACK_TARGET", "", override)
        return [stand_in, *gpus] if vendor == "amd" else [*gpus, stand_in]
    return [
        gpu._replace(target=target, override=override) if gpu.vendor == vendor else gpu
        for gpu in gpus
    ]


def cuda_driver_devices() -> list[NvidiaDevice] | None:
    """The GPUs the CUDA driver numbers for this process; None without libcuda, [] when cuInit
    fails (no device, no kernel driver, a stub library): the driver then runs nothing here."""
    try:
        driver = CudaDriver()
    except RuntimeLibraryError:
        return None
    if driver.init() != 0:
        return []
    devices = []
    for ordinal in range(driver.device_count()):
        major, minor = driver.compute_capability(ordinal)
        devices.append(
            NvidiaDevice(
                name=driver.name(ordinal),
                major=major,
                minor=minor,
                location=normalise_bus_id(driver.pci_bus_id(ordinal)),
                uuid=driver.uuid(ordinal),
                source="cuda",
            )
        )
    return devices
