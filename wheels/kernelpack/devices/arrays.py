"""The one framework adapter: what kernelpack reads off the arrays of other libraries.

Everything that knows about torch, CuPy, DLPack or ``__cuda_array_interface__`` lives here, so the
ops and the launcher see plain numbers (addresses, shapes, dtype names, stream handles):

- :func:`wrap` reads one array argument (torch tensor, CuPy array, numpy array, or any GPU array
  through ``__cuda_array_interface__`` or DLPack, viewed without a copy as a torch tensor, or a
  CuPy array where torch is absent) into an :class:`Array`: framework, dtype, shape, strides,
  device and address;
- :func:`to_gpu`, :func:`to_host` move numpy data through whichever of torch and CuPy is
  installed (as raw bytes: numpy's bfloat16 comes from ml_dtypes, which torch reads only as bytes
  and CuPy not at all);
- :func:`device_string` turns a device argument into a vendor-qualified ``"cuda:N"`` or
  ``"hip:N"``: a torch or CuPy device (or an array on it) names the vendor it belongs to, so on a
  machine with both AMD and NVIDIA GPUs it cannot pick the other vendor's GPU. A bare int cannot
  say which vendor it means and is refused here (:func:`kernelpack.load` itself takes one where
  all GPUs are of one vendor; :mod:`kernelpack.devices.argument` resolves the strings to GPUs).

Built on it: :mod:`.memory`'s DeviceMemory, raw device memory through the same frameworks;
:mod:`.pointers` turns kernel-launch arguments into addresses and stream handles.

One error convention: bad input raises :class:`~kernelpack.errors.UsageError` (a ValueError)
whose message starts with the argument's name; a missing framework raises RuntimeLibraryError.
Where no GPU can be reached, the message says which of the three it is, in kernelpack's words
(:func:`unreachable_gpu`): the machine has no GPU, torch is a build without GPU support, or
neither torch nor CuPy is installed; a framework's own error would send the user in a circle
(``.cuda()`` on a machine without a driver, numpy arrays on a machine without a GPU).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import RuntimeLibraryError, UsageError
from . import detect
from .argument import DeviceString
from .argument import parse_device as _parse

if TYPE_CHECKING:
    import numpy as np


class Array(NamedTuple):
    """One array argument, read once from its framework (a NamedTuple: ops build several per
    call, and this is the cheapest record to build)."""

    name: str  # the argument's name, for messages
    value: Any  # the torch tensor, CuPy array or numpy array itself
    framework: str  # "torch", "cupy" or "numpy"
    dtype: str  # numpy's spelling: "float32", "float16", "bfloat16", ...
    shape: tuple[int, ...]
    device: int  # the vendor runtime's ordinal; -1 for host (numpy) arrays
    vendor: str  # "cuda" or "hip"; "" for host arrays

    @property
    def on_gpu(self) -> bool:
        return self.device >= 0

    @property
    def device_name(self) -> str:
        """The vendor-qualified device, "cuda:0" (a :class:`DeviceString`); "cpu" for host arrays."""
        return DeviceString.of(self.vendor, self.device) if self.on_gpu else "cpu"

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements (numpy and CuPy count bytes; converted), or a UsageError where
        one is not a whole number of elements (a byte-strided view no kernel can index)."""
        if self.framework == "torch":
            return tuple(self.value.stride())
        size = self.value.dtype.itemsize
        given = tuple(self.value.strides)
        if any(stride % size for stride in given):
            raise UsageError(
                f"{self.name}: strides {given} in bytes are not whole {self.dtype} elements of "
                f"{size} bytes; pass a view at whole-element strides (or a contiguous copy)"
            )
        return tuple(stride // size for stride in given)

    @property
    def contiguous(self) -> bool:
        if self.framework == "torch":
            return bool(self.value.is_contiguous())
        return bool(self.value.flags.c_contiguous)

    @property
    def pointer(self) -> int:
        """The device address of the first element (GPU arrays only)."""
        if self.framework == "torch":
            return int(self.value.data_ptr())
        return int(self.value.data.ptr)


def framework_of(value: object) -> str:
    """ "torch", "cupy" or "numpy" for arrays read directly; "" for anything else."""
    module = type(value).__module__.split(".")[0]
    if module == "torch" and hasattr(value, "data_ptr"):
        return "torch"
    if module == "cupy" and hasattr(value, "data"):
        return "cupy"
    if module == "numpy" and type(value).__name__ == "ndarray":
        return "numpy"
    return ""


def torch_runtime(torch: Any) -> str:
    """The runtime torch's GPUs run on, "cuda" or "hip": torch on ROCm calls its GPUs "cuda" too;
    torch.version.hip tells them apart."""
    return "hip" if getattr(torch.version, "hip", None) else "cuda"


def _cupy_vendor(cupy: Any) -> str:
    return "hip" if getattr(cupy.cuda.runtime, "is_hip", False) else "cuda"


def _import_gpu_view(name: str, value: object) -> Any:
    """A zero-copy torch (or CuPy) view of a foreign GPU array, for its pointer and allocation."""
    has_cai = hasattr(value, "__cuda_array_interface__")
    has_dlpack = hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__")
    if not (has_cai or has_dlpack):
        raise UsageError(
            f"{name}: expected a GPU array (torch, CuPy, __cuda_array_interface__ or DLPack) or a "
            f"numpy array, got {type(value).__name__}"
        )
    try:
        import torch  # deferred: torch is optional

        if has_cai:
            try:
                return torch.as_tensor(value, device="cuda")
            except TypeError as error:  # a type string torch has no dtype for (bfloat16's "<V2")
                raise UsageError(
                    f"{name}: torch cannot read this __cuda_array_interface__ array ({error}); "
                    "pass it through DLPack, or as a torch or CuPy array"
                ) from None
        from torch.utils.dlpack import from_dlpack  # deferred: torch is optional

        return from_dlpack(value)
    except ImportError:
        pass
    try:
        import cupy  # deferred: CuPy is optional

        return cupy.asarray(value) if has_cai else cupy.from_dlpack(value)
    except ImportError:
        raise RuntimeLibraryError(
            f"{name}: a {type(value).__name__} is used through torch or CuPy, and neither is "
            "installed; install one, or pass a numpy array"
        ) from None


def wrap(name: str, value: object) -> Array:
    """The array argument ``name`` as kernelpack reads it; foreign GPU arrays become torch (or
    CuPy) views. A torch tensor must be on a GPU (CPU tensors: pass numpy, or move it)."""
    framework = framework_of(value)
    if not framework:
        value = _import_gpu_view(name, value)
        framework = framework_of(value)
    v: Any = value
    if framework == "torch":
        import torch  # deferred: torch is optional

        where = v.device
        if where.type != "cuda":
            raise UsageError(host_tensor_message(name, str(where), torch))
        dtype = str(v.dtype).removeprefix("torch.")
        return Array(
            name, v, framework, dtype, tuple(v.shape), where.index or 0, torch_runtime(torch)
        )
    if framework == "cupy":
        import cupy  # deferred: CuPy is optional

        return Array(
            name, v, framework, v.dtype.name, tuple(v.shape), int(v.device.id), _cupy_vendor(cupy)
        )
    return Array(name, v, framework, v.dtype.name, tuple(v.shape), -1, "")


def current_stream(array: Array) -> int:
    """The raw handle of the current stream of the array's framework on its device, so a kernel
    orders with the caller's own work like any of the framework's ops."""
    if array.framework == "torch":
        import torch  # deferred: torch is optional

        # The raw accessor (what Triton and torch.compile's launchers call) skips building a
        # torch.cuda.Stream object, a few µs on every launch.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return int(raw(array.device))
        return int(torch.cuda.current_stream(array.device).cuda_stream)
    import cupy  # deferred: CuPy is optional

    with cupy.cuda.Device(array.device):
        return int(cupy.cuda.get_current_stream().ptr)


def empty(like: Array, shape: tuple[int, ...], name: str = "out") -> Array:
    """An uninitialised array of like's framework, dtype and device."""
    v = like.value
    if like.framework == "torch":
        value: Any = v.new_empty(shape)
    elif like.framework == "cupy":
        import cupy  # deferred: CuPy is optional

        with v.device:
            value = cupy.empty(shape, dtype=v.dtype)
    else:
        import numpy as np  # deferred: kernelpack's report commands run without numpy

        value = np.empty(shape, dtype=v.dtype)
    return Array(name, value, like.framework, like.dtype, shape, like.device, like.vendor)


# ---- numpy data through the installed framework -----------------------------------------------


def gpu_framework() -> str:
    """The framework that moves numpy data to the GPU: torch, else CuPy, whichever reaches one."""
    for name in ("torch", "cupy"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if _reaches_gpu(name, module):
            return name
    raise RuntimeLibraryError(f"numpy arrays cannot be copied to a GPU: {unreachable_gpu()}")


def _reaches_gpu(name: str, module: Any) -> bool:
    if name == "torch":
        return bool(module.cuda.is_available())
    try:
        return int(module.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # CuPy raises its runtime's error where no driver or GPU is present
        return False


NO_GPU = (
    "this machine has no GPU that kernelpack can use (no AMD GPU in /sys/class/kfd, no NVIDIA GPU "
    "through its driver): kernelpack's kernels run on AMD and NVIDIA GPUs only; run on a "
    "machine with one (`python -m kernelpack doctor` lists what it finds)"
)


def unreachable_gpu() -> str:
    """Why no framework reaches a GPU, and what to do: the first of no GPU on the machine, a torch
    without GPU support, no torch or CuPy installed. Called where that failure is certain, so
    the detection (sysfs and the NVIDIA driver) costs nothing on the way that works."""
    gpus = detect.detect_gpus()
    if not gpus:
        return NO_GPU
    found = ", ".join(sorted({f"{gpu.vendor} {gpu.target}" for gpu in gpus}))
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return (
            f"this machine has a GPU ({found}), and neither torch nor CuPy, which kernelpack "
            "copies numpy data with, is installed; install one (pip install torch)"
        )
    return (
        f"this machine has a GPU ({found}), and torch {torch.__version__} cannot reach it (a "
        "build without CUDA or ROCm, or no driver loaded); install the torch build for the GPU's "
        "runtime (https://pytorch.org/get-started/locally/), or CuPy"
    )


def host_tensor_message(name: str, where: str, torch: Any) -> str:
    """The message for a torch tensor ``name`` on a host device ``where``: where to move it, or,
    where no GPU can be reached, why not (not a `.cuda()` that would fail in turn)."""
    if torch.cuda.is_available():
        return (
            f"{name}: a torch tensor on {where}, and kernelpack's kernels run on the GPU; move it "
            f"there with .cuda() (a module's parameters with module.cuda())"
        )
    return f"{name}: a torch tensor on {where}, and {unreachable_gpu()}"


def download(buffer: Any) -> np.ndarray[Any, Any]:
    """The bytes of a device array (any dtype, contiguous) as a 1-D uint8 numpy array."""
    import numpy as np  # deferred: kernelpack's report commands run without numpy

    if framework_of(buffer) == "torch":
        import torch  # deferred: torch is optional

        raw: np.ndarray[Any, Any] = buffer.reshape(-1).view(torch.uint8).cpu().numpy()
        return raw
    return np.asarray(buffer.reshape(-1).view(np.uint8).get())


def to_gpu(array: Array, framework: str) -> Array:
    """A device copy of a host array, as the same dtype in ``framework`` (CuPy has no bfloat16:
    there the copy holds the bits as unsigned integers of the same size; kernels take only the
    address)."""
    import numpy as np  # deferred: kernelpack's report commands run without numpy

    host = np.ascontiguousarray(array.value)
    raw = host.reshape(-1).view(np.uint8)
    if not raw.flags.writeable:
        raw = raw.copy()
    if framework == "torch":
        import torch  # deferred: torch is optional

        device_raw: Any = torch.from_numpy(raw).cuda()
        value: Any = device_raw.view(getattr(torch, array.dtype)).reshape(array.shape)
        index, vendor = value.device.index or 0, torch_runtime(torch)
    else:
        import cupy  # deferred: CuPy is optional

        storage = np.dtype(f"u{host.dtype.itemsize}")
        value = cupy.asarray(raw).view(storage).reshape(array.shape)
        index, vendor = int(value.device.id), _cupy_vendor(cupy)
    return Array(array.name, value, framework, array.dtype, array.shape, index, vendor)


def to_host(device_array: Array, host: Array) -> None:
    """Copy a device result into the numpy array ``host`` (any layout), after the kernel ran."""
    raw = download(device_array.value)
    host.value[...] = raw.view(host.value.dtype).reshape(host.shape)


# DLPack device types of memory on a GPU: CUDA, ROCm, managed (not page-locked host memory)
_DLPACK_DEVICE_MEMORY = frozenset({2, 10, 13})


def is_gpu_array(value: object) -> bool:
    """Whether ``value`` is an array in GPU memory (torch, CuPy, or any other through
    ``__cuda_array_interface__`` or DLPack); host arrays and CPU tensors are not."""
    if hasattr(value, "__cuda_array_interface__"):  # a CPU torch tensor raises AttributeError
        return True
    where = getattr(value, "__dlpack_device__", None)
    return where is not None and int(where()[0]) in _DLPACK_DEVICE_MEMORY


# ---- devices ----------------------------------------------------------------------------------


def parse_device(device: str) -> DeviceString:
    """``DeviceString`` "cuda:0" (runtime "cuda", ordinal 0) for "cuda:0"; a UsageError naming the
    accepted forms otherwise."""
    parsed = _parse(device)
    if parsed is None:
        raise UsageError(
            f"device: {device!r} is not a vendor-qualified GPU; expected 'cuda:N' or 'hip:N', "
            "a torch or CuPy device, or an array on the GPU"
        )
    return parsed


def device_string(device: object) -> DeviceString:
    """The vendor-qualified GPU ("cuda:N" or "hip:N") that ``device`` names.

    Takes such a string, a torch.device (its index, or torch's current device when it has none),
    a CuPy Device, or a torch tensor / CuPy array (the device it lives on). A bare int is refused:
    on a machine with both vendors' GPUs it could mean either.
    """
    if isinstance(device, str):
        return parse_device(device)
    if isinstance(device, (bool, int)):
        raise UsageError(
            f"device: {device!r} does not say which vendor's GPU it means; pass 'cuda:{device}' or "
            f"'hip:{device}', or a torch or CuPy device"
        )
    kind = type(device)
    module = kind.__module__.split(".")[0]
    if framework_of(device) in ("torch", "cupy"):
        return parse_device(wrap("device", device).device_name)
    if module == "torch" and kind.__name__ == "device":
        import torch  # deferred: torch is optional

        where: Any = device
        if where.type != "cuda":
            raise UsageError(f"device: torch device {where} is not a GPU")
        index = torch.cuda.current_device() if where.index is None else where.index
        return DeviceString.of(torch_runtime(torch), index)
    if module == "cupy" and hasattr(device, "id"):
        import cupy  # deferred: CuPy is optional

        return DeviceString.of(_cupy_vendor(cupy), int(device.id))
    raise UsageError(
        f"device: cannot use a {kind.__name__} as a device; pass 'cuda:N' or 'hip:N', a torch or "
        "CuPy device, or an array on the GPU"
    )
