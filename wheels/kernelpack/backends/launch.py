"""Kernel.launch for CUDA and HIP: check and pack the arguments, then one call into the runtime.

A launch goes through the C extension ``kernelpack.backends._launcher`` when it was built (it checks and
packs the arguments and calls the launch function in one C call, see _native/launcher.c), else
through ctypes with the same behaviour; both keep the caller's current context (CUDA) or device
(HIP) unchanged. cuLaunchKernel and hipModuleLaunchKernel take the same arguments, so one launcher
serves both. docs/loader.md has the measurements.
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import ctypes
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..devices import pointers
from ..errors import KernelpackError, RuntimeLibraryError
from . import signature as kargs
from .runtime import FailFn, LaunchFn

# cuLaunchKernel and hipModuleLaunchKernel: function, grid x/y/z, block x/y/z, shared memory
# bytes, stream, kernelParams, extra
LAUNCH_ARGTYPES: list[Any] = [
    ctypes.c_void_p,
    *[ctypes.c_uint] * 7,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
]


def declare_module_calls(load_data: Any, get_function: Any, launch: Any) -> None:
    """Argument types of the three calls CUDA's driver API and HIP's module API share, each under
    its vendor's name: cu/hipModuleLoadData, cu/hipModuleGetFunction, cuLaunchKernel and
    hipModuleLaunchKernel."""
    load_data.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p)
    get_function.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p)
    launch.argtypes = LAUNCH_ARGTYPES


def native_launcher_class() -> Any:
    """The C launcher class, or None where the extension was not built (the ctypes path runs)."""
    try:
        from ._launcher import Launcher  # deferred: the C extension, absent where not built
    except ImportError:
        return None
    return Launcher


def choose_launcher(binding: str | None) -> tuple[Any, str]:
    """The C launcher class to launch with (None: ctypes) and the binding's name, for a runtime
    opened with ``binding``: None takes the C launcher where it was built, "native" insists on it
    (a RuntimeLibraryError where it was not built), "ctypes" never uses it."""
    native = native_launcher_class() if binding in (None, "native") else None
    if binding == "native" and native is None:
        raise RuntimeLibraryError("the C launcher kernelpack.backends._launcher was not built")
    return native, "native" if native is not None else "ctypes"


def address(function: Any) -> int:
    return int(ctypes.cast(function, ctypes.c_void_p).value or 0)


class DeviceBinding(NamedTuple):
    """How a launch runs on the kernel's device and leaves the caller's as it was (the C launcher's
    ``enum binding``): ``kind`` 1, a CUDA context (cuCtxGetCurrent, cuCtxPushCurrent, and
    cuCtxPopCurrent to leave), or 2, a HIP device (hipGetDevice, hipSetDevice, hipSetDevice back);
    ``context`` is the CUcontext or the device number."""

    kind: int
    get_current: Any
    enter: Any
    leave: Any
    context: int


def native_launch(
    native: Any,
    launch: Any,
    function: int,
    signature: kargs.Signature,
    fail: FailFn,
    binding: DeviceBinding,
) -> LaunchFn:
    """The C launcher's bound method: Kernel.launch with no Python frame of its own."""
    launcher = native(
        launch=address(launch),
        function=function,
        codes=signature.codes,
        binding=binding.kind,
        get_current=address(binding.get_current),
        enter=address(binding.enter),
        leave=address(binding.leave),
        context=binding.context,
        pointer_getters=pointers.POINTER_GETTERS,
        pointer_of=pointers.pointer_of,
        torch_getter=pointers.torch_pointer,
        stream_of=pointers.stream_of,
        fail=fail,
    )
    return launcher.launch  # type: ignore[no-any-return]


def ctypes_launcher(
    signature: kargs.Signature,
    launch: Any,
    function: int,
    fail: FailFn,
    current: Callable[[], int],
    wanted: int,
    enter: Callable[[], int],
    leave: Callable[[], object],
) -> LaunchFn:
    """The pure-Python launch: pack into a per-thread buffer, then one ctypes call.

    It behaves as the C launcher does: anything that does not fit, and any error the runtime
    returns, goes to ``fail``, which raises.
    """
    pack_into = struct.Struct(signature.struct_format).pack_into
    count = len(signature.types)
    pointer_slots = signature.pointer_positions
    bools = signature.bool_positions
    untyped = signature.untyped_positions
    pointer_of, stream_of, dims = pointers.pointer_of, pointers.stream_of, kargs.dims
    local = threading.local()
    function_handle = ctypes.c_void_p(function)

    def packed(args: tuple[object, ...], shared_mem: object, stream: object) -> Any:
        """(buffer pointers, stream handle), or None when something does not fit."""
        try:
            params = local.params
        except AttributeError:
            local.buffer = ctypes.create_string_buffer(max(count, 1) * kargs.SLOT)
            base = ctypes.addressof(local.buffer)
            params = local.params = (ctypes.c_void_p * max(count, 1))(
                *[base + kargs.SLOT * i for i in range(count)]
            )
        if len(args) != count or type(shared_mem) is not int or not 0 <= shared_mem < 2**32:
            return None
        values: Sequence[object] = args
        try:
            if any(type(args[p]) is not int for p in pointer_slots):
                values = [
                    pointer_of(a) if p in pointer_slots and type(a) is not int else a
                    for p, a in enumerate(args)
                ]
            if any(not isinstance(args[p], int) for p in bools):
                return None
            if untyped:
                values = signature.with_untyped_bits(values)
            pack_into(local.buffer, 0, *values)
            handle = stream if type(stream) is int else stream_of(stream)
        except Exception:  # the fail path names the argument and raises what fits
            return None
        return params, handle

    def run(
        grid: object, block: object, *args: object, shared_mem: int = 0, stream: object = None
    ) -> None:
        ready = packed(args, shared_mem, stream)
        try:
            gx, gy, gz = dims(grid, "grid")
            bx, by, bz = dims(block, "block")
        except KernelpackError:
            ready = None
        if ready is None:
            return fail(-1, grid, block, args, shared_mem, stream)
        params, handle = ready
        call = (function_handle, gx, gy, gz, bx, by, bz, shared_mem, handle, params, None)
        if current() == wanted:
            code = int(launch(*call))
        else:
            code = enter()
            if not code:
                try:
                    code = int(launch(*call))
                finally:
                    leave()
        if code:
            fail(code, grid, block, args, shared_mem, stream)
        return None

    return run
