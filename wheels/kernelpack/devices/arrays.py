"""The one framework adapter: what kernelpack reads off the arrays of other libraries.

Everything that knows about torch, CuPy, DLPack or ``__cuda_array_interface__`` lives here, so the
ops and the launcher see plain numbers (addresses, shapes, dtype names, stream handles):

- :func:`wrap` reads one array argument (torch tensor, CuPy array, numpy array, or any GPU array
  through ``__cuda_array_interface__`` or DLPack, viewed without a copy as a torch tensor, or a
  CuPy array where torch is absent) into an :class:`Array`: framework, dtype, shape, strides,
  device and address;
- :func:`pointer_of` and :func:`stream_of` turn kernel-launch arguments into an address and a
  stream handle, decided once per Python type (the protocols cost microseconds a call);
- :func:`to_gpu`, :func:`to_host` move numpy data through whichever of torch and CuPy is
  installed (as raw bytes: numpy's bfloat16 comes from ml_dtypes, which torch reads only as bytes
  and CuPy not at all);
- :class:`DeviceMemory` is raw device memory on one GPU through torch or CuPy, for kernels that
  take plain addresses (the walks): buffers, their transfers, and page-locked host memory with a
  second stream for copies that overlap the next kernels;
- :func:`device_string` turns a device argument into a vendor-qualified ``"cuda:N"`` or
  ``"hip:N"``: a torch or CuPy device (or an array on it) names the vendor it belongs to, so on a
  machine with both AMD and NVIDIA GPUs it cannot pick the other vendor's GPU. A bare int cannot
  say which vendor it means and is refused here (:func:`kernelpack.load` itself takes one where
  all GPUs are of one vendor; :mod:`kernelpack.devices.argument` resolves the strings to GPUs).

One error convention: bad input raises :class:`~kernelpack.errors.UsageError` (a ValueError)
whose message starts with the argument's name; a missing framework raises RuntimeLibraryError.
Where no GPU can be reached, the message says which of the three it is, in kernelpack's words
(:func:`unreachable_gpu`): the machine has no GPU, torch is a build without GPU support, or
neither torch nor CuPy is installed; a framework's own error would send the user in a circle
(``.cuda()`` on a machine without a driver, numpy arrays on a machine without a GPU).
"""

from __future__ import annotations

import ctypes
import importlib
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import RuntimeLibraryError, UsageError
from . import detect
from .argument import DeviceString
from .argument import parse_device as _parse
from .pinned import pool as pinned_pool

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
        """Strides in elements (numpy and CuPy count bytes; converted)."""
        if self.framework == "torch":
            return tuple(self.value.stride())
        size = self.value.dtype.itemsize
        return tuple(s // size for s in self.value.strides)

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
        import torch

        if has_cai:
            return torch.as_tensor(value, device="cuda")
        from torch.utils.dlpack import from_dlpack

        return from_dlpack(value)
    except ImportError:
        pass
    try:
        import cupy

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
        import torch

        where = v.device
        if where.type != "cuda":
            raise UsageError(host_tensor_message(name, str(where), torch))
        dtype = str(v.dtype).removeprefix("torch.")
        return Array(
            name, v, framework, dtype, tuple(v.shape), where.index or 0, torch_runtime(torch)
        )
    if framework == "cupy":
        import cupy

        return Array(
            name, v, framework, v.dtype.name, tuple(v.shape), int(v.device.id), _cupy_vendor(cupy)
        )
    return Array(name, v, framework, v.dtype.name, tuple(v.shape), -1, "")


def current_stream(array: Array) -> int:
    """The raw handle of the current stream of the array's framework on its device, so a kernel
    orders with the caller's own work like any of the framework's ops."""
    if array.framework == "torch":
        import torch

        # The raw accessor (what Triton and torch.compile's launchers call) skips building a
        # torch.cuda.Stream object, a few µs on every launch.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return int(raw(array.device))
        return int(torch.cuda.current_stream(array.device).cuda_stream)
    import cupy

    with cupy.cuda.Device(array.device):
        return int(cupy.cuda.get_current_stream().ptr)


def empty(like: Array, shape: tuple[int, ...], name: str = "out") -> Array:
    """An uninitialised array of like's framework, dtype and device."""
    v = like.value
    if like.framework == "torch":
        value: Any = v.new_empty(shape)
    elif like.framework == "cupy":
        import cupy

        with v.device:
            value = cupy.empty(shape, dtype=v.dtype)
    else:
        import numpy as np

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
    import numpy as np

    if framework_of(buffer) == "torch":
        import torch

        raw: np.ndarray[Any, Any] = buffer.reshape(-1).view(torch.uint8).cpu().numpy()
        return raw
    return np.asarray(buffer.reshape(-1).view(np.uint8).get())


def to_gpu(array: Array, framework: str) -> Array:
    """A device copy of a host array, as the same dtype in ``framework`` (CuPy has no bfloat16:
    there the copy holds the bits as unsigned integers of the same size; kernels take only the
    address)."""
    import numpy as np

    host = np.ascontiguousarray(array.value)
    raw = host.reshape(-1).view(np.uint8)
    if not raw.flags.writeable:
        raw = raw.copy()
    if framework == "torch":
        import torch

        device_raw: Any = torch.from_numpy(raw).cuda()
        value: Any = device_raw.view(getattr(torch, array.dtype)).reshape(array.shape)
        index, vendor = value.device.index or 0, torch_runtime(torch)
    else:
        import cupy

        storage = np.dtype(f"u{host.dtype.itemsize}")
        value = cupy.asarray(raw).view(storage).reshape(array.shape)
        index, vendor = int(value.device.id), _cupy_vendor(cupy)
    return Array(array.name, value, framework, array.dtype, array.shape, index, vendor)


def to_host(device_array: Array, host: Array) -> None:
    """Copy a device result into the numpy array ``host`` (any layout), after the kernel ran."""
    raw = download(device_array.value)
    host.value[...] = raw.view(host.value.dtype).reshape(host.shape)


# ---- device memory for kernels on raw addresses (the walks) ----------------------------------


# DLPack device types of memory on a GPU: CUDA, ROCm, managed (not page-locked host memory)
_DLPACK_DEVICE_MEMORY = frozenset({2, 10, 13})


def is_gpu_array(value: object) -> bool:
    """Whether ``value`` is an array in GPU memory (torch, CuPy, or any other through
    ``__cuda_array_interface__`` or DLPack); host arrays and CPU tensors are not."""
    if hasattr(value, "__cuda_array_interface__"):  # a CPU torch tensor raises AttributeError
        return True
    where = getattr(value, "__dlpack_device__", None)
    return where is not None and int(where()[0]) in _DLPACK_DEVICE_MEMORY


class DeviceMemory:
    """Raw device bytes on one GPU through torch or CuPy, for kernels that take plain addresses.

    Buffers are 1-D uint8 arrays of the framework, at least 16 bytes (an empty table still gets
    an address), made and used on the framework's current stream on the device, so that they
    order with the caller's own work. For results copied back while the next kernels run there
    are page-locked host memory, a second stream that waits for the current one, and events.
    """

    def __init__(self, device: str, framework: str = "") -> None:
        """``device`` "cuda:N" or "hip:N"; ``framework`` "torch" or "cupy" (that of the
        caller's arrays, so results come back in it), or "" for the installed one, torch first."""
        self.index = parse_device(device).ordinal
        self.framework = framework or gpu_framework()
        self._xp: Any = importlib.import_module(self.framework)
        self._torch_device = f"cuda:{self.index}"  # ROCm builds of torch say "cuda" too

    def free_bytes(self) -> int:
        """Free memory on the device as the framework reports it."""
        if self.framework == "torch":
            return int(self._xp.cuda.mem_get_info(self.index)[0])
        with self._xp.cuda.Device(self.index):
            return int(self._xp.cuda.runtime.memGetInfo()[0])

    def upload(self, host: np.ndarray[Any, Any]) -> Any:
        """A device copy of a numpy array's bytes."""
        import numpy as np

        raw = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        if raw.size == 0:
            raw = np.zeros(16, dtype=np.uint8)
        if not raw.flags.writeable:  # torch warns on read-only numpy memory
            raw = raw.copy()
        if self.framework == "torch":
            return self._xp.from_numpy(raw).to(self._torch_device)
        with self._xp.cuda.Device(self.index):
            return self._xp.asarray(raw)

    def filled(self, nbytes: int, byte: int) -> Any:
        """``nbytes`` bytes, each ``byte`` (poison for outputs, zeros for counters)."""
        xp, nbytes = self._xp, max(nbytes, 16)
        if self.framework == "torch":
            return xp.full((nbytes,), byte, dtype=xp.uint8, device=self._torch_device)
        with xp.cuda.Device(self.index):
            return xp.full(nbytes, byte, dtype=xp.uint8)

    def download(self, buffer: Any, dtype: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        """The first bytes of ``buffer`` on the host as a numpy array of ``dtype`` and ``shape``
        (after the work queued so far)."""
        import numpy as np

        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        host: np.ndarray[Any, Any] = download(buffer[:count]).view(dtype).reshape(shape)
        return host

    def typed(self, buffer: Any, dtype: str, shape: tuple[int, ...]) -> Any:
        """The first bytes of ``buffer`` as a device array of ``dtype`` (a numpy name) and
        ``shape``, without a copy."""
        import numpy as np

        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return buffer[:count].view(getattr(self._xp, dtype)).reshape(shape)

    def pointer(self, buffer: Any) -> int:
        return int(buffer.data_ptr()) if self.framework == "torch" else int(buffer.data.ptr)

    def stream(self) -> int:
        """The raw handle of the framework's current stream on the device."""
        if self.framework == "torch":
            return int(self._xp.cuda.current_stream(self.index).cuda_stream)
        with self._xp.cuda.Device(self.index):
            return int(self._xp.cuda.get_current_stream().ptr)

    def pinned(self, nbytes: int) -> tuple[Any, np.ndarray[Any, Any]]:
        """Page-locked host memory of ``nbytes`` (its owner, and its bytes as numpy), from the
        framework's pool (kernelpack.devices.pinned): it goes back there once the numpy view
        and every array made from it are collected, for a later call of any size to reuse."""
        owner, view, _ = pinned_pool(self.framework).take(nbytes)
        return owner, view

    def side_stream(self) -> Any:
        """A second stream on the device, for copies that overlap the current stream's work."""
        if self.framework == "torch":
            return self._xp.cuda.Stream(device=self.index)
        with self._xp.cuda.Device(self.index):
            return self._xp.cuda.Stream(non_blocking=True)

    def side_waits(self, side: Any) -> None:
        """What is queued on ``side`` next runs only after the current stream's work so far."""
        if self.framework == "torch":
            event = self._xp.cuda.Event()
            event.record(self._xp.cuda.current_stream(self.index))
        else:
            with self._xp.cuda.Device(self.index):  # CuPy makes the event on this device
                event = self._xp.cuda.Event()
                event.record(self._xp.cuda.get_current_stream())
        side.wait_event(event)

    def copy_to_host(
        self,
        host: tuple[Any, np.ndarray[Any, Any]],
        offset: int,
        buffer: Any,
        nbytes: int,
        side: Any,
    ) -> None:
        """Queue on ``side`` a copy of the first ``nbytes`` of ``buffer`` into pinned ``host``
        (from :meth:`pinned`) at ``offset``."""
        owner, view = host
        if self.framework == "torch":
            with self._xp.cuda.stream(side):
                owner[offset : offset + nbytes].copy_(buffer[:nbytes], non_blocking=True)
            buffer.record_stream(side)  # the allocator keeps it until the copy has run
            return
        runtime = self._xp.cuda.runtime
        target = view.ctypes.data + offset
        kind = runtime.memcpyDeviceToHost
        runtime.memcpyAsync(target, self.pointer(buffer), nbytes, kind, side.ptr)

    def mark(self, side: Any) -> Any:
        """An event after the work queued on ``side`` so far (wait on it with .synchronize())."""
        if self.framework == "torch":
            event = self._xp.cuda.Event()
            event.record(side)
            return event
        with self._xp.cuda.Device(self.index):
            event = self._xp.cuda.Event()
            event.record(side)
        return event


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
        import torch

        where: Any = device
        if where.type != "cuda":
            raise UsageError(f"device: torch device {where} is not a GPU")
        index = torch.cuda.current_device() if where.index is None else where.index
        return DeviceString.of(torch_runtime(torch), index)
    if module == "cupy" and hasattr(device, "id"):
        import cupy

        return DeviceString.of(_cupy_vendor(cupy), int(device.id))
    raise UsageError(
        f"device: cannot use a {kind.__name__} as a device; pass 'cuda:N' or 'hip:N', a torch or "
        "CuPy device, or an array on the GPU"
    )


# ---- launch arguments: addresses and streams --------------------------------------------------

# DLPack device types whose memory a kernel can address (CUDA, CUDA host, ROCm, ROCm host, managed)
_DLPACK_GPU_DEVICES = frozenset({2, 3, 10, 11, 13})


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DLTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_uint32),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    )


def _capsule_pointer(capsule: object) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = (ctypes.py_object, ctypes.c_char_p)
    address = get(capsule, b"dltensor")
    if not address:
        raise UsageError("__dlpack__() returned a capsule that is not an unconsumed 'dltensor'")
    return int(address)


def _dlpack_pointer(obj: Any) -> int:
    """The device address of a DLPack producer, taken from the DLTensor inside its capsule.

    The capsule is not consumed: when it is dropped, the producer's deleter runs as DLPack intends,
    while ``obj`` itself keeps the memory alive.
    """
    device_type, _ = obj.__dlpack_device__()
    if int(device_type) not in _DLPACK_GPU_DEVICES:
        raise UsageError(
            f"{type(obj).__name__} lives on DLPack device type {int(device_type)}, not a GPU; "
            "move it to the GPU first"
        )
    capsule = obj.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule))
    return int(tensor.data or 0) + int(tensor.byte_offset)


def _cai_pointer(obj: Any) -> int:
    return int(obj.__cuda_array_interface__["data"][0])


def torch_pointer(tensor: Any) -> int:
    """A torch tensor's address (the C launcher does the same without a Python frame)."""
    if tensor.is_cuda:
        return int(tensor.data_ptr())
    raise UsageError(f"a torch tensor on {tensor.device} is not GPU memory; move it with .cuda()")


def _index_pointer(obj: Any) -> int:
    return operator.index(obj)


def _getter_for(obj: object) -> Callable[[Any], int]:
    """How to read a device address out of objects of this one's type (decided once per type:
    the protocols are looked up on the first object seen, since some set them per instance)."""
    kind = type(obj)
    module = kind.__module__.split(".")[0]
    if module == "torch" and hasattr(kind, "data_ptr") and hasattr(kind, "is_cuda"):
        return torch_pointer
    if module == "cupy" and hasattr(kind, "data") and hasattr(kind, "__cuda_array_interface__"):
        return operator.attrgetter("data.ptr")
    if hasattr(obj, "__cuda_array_interface__"):
        return _cai_pointer
    if hasattr(obj, "__array_interface__"):
        raise UsageError(
            f"a {kind.__name__} lives in host memory; pass a GPU array (torch, CuPy) or an address"
        )
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _dlpack_pointer
    if hasattr(kind, "__index__") and kind is not bool:
        return _index_pointer
    raise UsageError(
        f"cannot pass a {kind.__name__} as a pointer; pass an int device address, an object with "
        "__cuda_array_interface__, or a DLPack producer (torch, CuPy)"
    )


POINTER_GETTERS: dict[type, Callable[[Any], int]] = {}


def pointer_of(obj: object) -> int:
    """The device address an argument stands for (the native launcher calls this on a miss)."""
    getter = POINTER_GETTERS.get(type(obj))
    if getter is None:
        getter = _getter_for(obj)
        POINTER_GETTERS[type(obj)] = getter
    return getter(obj)


def _stream_getter_for(kind: type) -> Callable[[Any], int]:
    if hasattr(kind, "__cuda_stream__"):
        return lambda stream: int(stream.__cuda_stream__()[1])
    if hasattr(kind, "cuda_stream"):  # torch.cuda.Stream
        return lambda stream: int(stream.cuda_stream)
    if hasattr(kind, "ptr") and kind.__module__.split(".")[0] == "cupy":
        return lambda stream: int(stream.ptr)
    if hasattr(kind, "__int__") or hasattr(kind, "__index__"):  # cuda-bindings CUstream
        return lambda stream: int(stream)
    raise UsageError(
        f"cannot use a {kind.__name__} as a stream; pass None, an int handle, a torch or CuPy "
        "stream, or an object with __cuda_stream__"
    )


STREAM_GETTERS: dict[type, Callable[[Any], int]] = {}


def stream_of(stream: object) -> int:
    """The raw stream handle for the caller's stream object (None: the default stream)."""
    if stream is None:
        return 0
    if type(stream) is int:
        return stream
    getter = STREAM_GETTERS.get(type(stream))
    if getter is None:
        getter = _stream_getter_for(type(stream))
        STREAM_GETTERS[type(stream)] = getter
    return getter(stream)
