"""Kernel-launch arguments as the launcher passes them: device addresses and stream handles.

:func:`pointer_of` and :func:`stream_of` read an argument (a torch tensor, a CuPy array, any
``__cuda_array_interface__`` or DLPack producer, an int; a torch, CuPy or ``__cuda_stream__``
stream) into a number, decided once per Python type: the protocols cost microseconds a call, and
the C launcher looks the getters up in POINTER_GETTERS itself.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

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
