"""The vendor runtime as the loader sees it: load an image on a device, find a kernel, launch it.

:class:`Runtime` is the interface; :mod:`kernelpack.backends.cuda` (CUDA's driver API) and
:mod:`kernelpack.backends.hip` (HIP's module API) implement it through ctypes, never linked, and
:mod:`kernelpack.backends.launch` builds the launch callables both use. Modules are loaded into the
device's primary context (CUDA) or on the device (HIP), the same place PyTorch and CuPy put their
memory and streams, so their pointers and streams can be passed straight to a launch.

Everything that touches a vendor library sits in those modules, so the rest of the loader is pure
Python and testable without a GPU (tests pass a recording Runtime).
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..devices.libraries import CheckFn
from ..errors import RuntimeLibraryError

if TYPE_CHECKING:
    from . import signature as kargs


class LoadedModule(NamedTuple):
    """A module loaded on one device: the runtime's handle and the ordinal it lives on."""

    handle: int
    ordinal: int


LaunchFn = Callable[..., None]  # launch(grid, block, *args, shared_mem=0, stream=None)
# fail(code, grid, block, args, shared_mem, stream): raises the error for a launch that did not
# happen (code -1: arguments, grid, block, shared memory or stream that do not fit) or failed
FailFn = Callable[[int, object, object, tuple[object, ...], object, object], None]


class Runtime:
    """What the loader needs from a vendor runtime. Subclasses bind CUDA and HIP."""

    vendor: str
    library: str
    binding: str  # "native" (the C extension) or "ctypes"

    def version(self) -> str:
        raise NotImplementedError

    def device_count(self) -> int:
        raise NotImplementedError

    def pci_bus_id(self, ordinal: int) -> str:
        raise NotImplementedError

    def multiprocessor_count(self, ordinal: int) -> int:
        """The device's multiprocessors (SMs, CUs): what a grid of one block each fills."""
        raise NotImplementedError

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        raise NotImplementedError

    def function(self, module: LoadedModule, name: str) -> int:
        raise NotImplementedError

    def launcher(
        self, module: LoadedModule, function: int, signature: "kargs.Signature", fail: FailFn
    ) -> LaunchFn:
        """Kernel.launch for one kernel: checks, packs and launches, or calls ``fail``."""
        raise NotImplementedError

    def error_name(self, code: int) -> str:
        raise NotImplementedError

    def shared_mem_for_blocks(
        self, module: LoadedModule, function: int, threads: int, blocks: int
    ) -> int:
        """The dynamic shared memory a launch of ``function`` in blocks of ``threads`` asks for so
        that at most ``blocks`` of its blocks are resident on a multiprocessor at once, with the
        function allowed that much; 0 where registers and threads already allow no more. This
        runtime caps nothing (0): HIP's occupancy is waves a SIMD, which the compiler's bounds set,
        and no cap was measured on an AMD GPU."""
        return 0

    def ordinal_for(self, pci_bus_id: str | None, position: int) -> int:
        """The runtime's number for a detected GPU: matched by PCI address where detection knows
        it (the runtime may order devices differently), else its position among this vendor's."""
        if pci_bus_id:
            wanted = pci_bus_id.lower()
            for ordinal in range(self.device_count()):
                if self.pci_bus_id(ordinal).lower() == wanted:
                    return ordinal
        return position


# on_device(ordinal, work, call): runs work() with the device current, checks its status, and
# leaves the caller's context (CUDA) or device (HIP) as it was
OnDeviceFn = Callable[[int, Callable[[], int], str], None]


def load_module(on_device: OnDeviceFn, load_data: Any, ordinal: int, image: bytes) -> LoadedModule:
    """``image`` loaded on a device by cuModuleLoadData or hipModuleLoadData (the same arguments
    under two names), run through the vendor's ``on_device``."""
    handle = ctypes.c_void_p()
    on_device(ordinal, lambda: load_data(ctypes.byref(handle), image), load_data.__name__)
    return LoadedModule(handle.value or 0, ordinal)


def module_function(check: CheckFn, get_function: Any, module: LoadedModule, name: str) -> int:
    """The kernel ``name`` of a loaded module: cuModuleGetFunction or hipModuleGetFunction."""
    handle = ctypes.c_void_p()
    status = get_function(ctypes.byref(handle), module.handle, name.encode())
    check(status, f"{get_function.__name__}({name})")
    return handle.value or 0


# Shared memory is allocated to a block in whole units of this many bytes (the CUDA occupancy
# calculator's "shared memory allocation unit size" on sm_80 to sm_120).
SHARED_MEM_UNIT = 128


def capping_shared_mem(
    resident: Callable[[int], int],
    blocks: int,
    per_multiprocessor: int,
    reserved_per_block: int,
    static_per_block: int,
    most: int,
) -> int:
    """The least dynamic shared memory with which at most ``blocks`` blocks are resident on a
    multiprocessor, by the vendor's occupancy calculator ``resident(dynamic bytes) -> blocks``;
    0 where ``resident(0)`` is no more than ``blocks``. The search starts where the
    multiprocessor's shared memory (``per_multiprocessor``, each block taking the driver's
    ``reserved_per_block`` and its own static ``static_per_block`` besides) holds ``blocks`` blocks
    and not one more, and climbs by allocation units to ``most`` (the most a block may ask for)."""
    if resident(0) <= blocks:
        return 0
    shared = per_multiprocessor // (blocks + 1) - reserved_per_block - static_per_block + 1
    shared = max(shared, 1)
    while shared <= most:
        if resident(shared) <= blocks:
            return shared
        shared += SHARED_MEM_UNIT
    raise RuntimeLibraryError(
        f"no dynamic shared memory up to {most} bytes a block keeps a multiprocessor to "
        f"{blocks} blocks"
    )
