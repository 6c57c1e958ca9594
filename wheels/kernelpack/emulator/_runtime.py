"""The emulated AMD runtime: kernelpack's Runtime interface over the emulator, in place of
libamdhip64 and the GPU.

The loader does everything it does for a GPU (catalog, selection, sha256, kernel lookup by name,
the index's parameter layout); this runtime does what HIP does below ``hipModuleLaunchKernel``:

- the launch goes through :func:`kernelpack.backends.launch.ctypes_launcher`, the same checks and packing
  the HIP ctypes path runs, into ``kernelParams`` (one 8-byte slot an argument);
- like ROCclr, it copies each explicit argument's bytes from its slot to the offset the code
  object's metadata gives, and fills the hidden arguments (block counts, group sizes, remainders,
  grid dims, dynamic LDS) after them in a 16-byte aligned kernarg segment;
- like the command processor, it loads the user SGPRs the kernel descriptor enables (kernarg
  pointer, dispatch packet pointer) and runs the grid, workgroup by workgroup, on the emulator's
  ``run_asm`` (its own entry point loads only the first kernel of an object and packs plain
  pointer/int arguments, so kernelpack drives this lower-level piece itself), with its LDS in a
  reservation that every LDS address falls in (:mod:`._lds` says why).

Device memory is host memory (the emulator's address space is the process's), so a pointer
argument is the address of an :class:`kernelpack.emulator.DeviceArray`'s bytes.
"""

from __future__ import annotations

import ctypes
import struct
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, NamedTuple

from ..backends import launch as launching
from ..backends.runtime import LoadedModule, Runtime
from ..errors import RuntimeLibraryError
from ._code import KernelCode, PlacedImage
from ._lds import LdsReservation
from ._targets import EmulatedTarget

if TYPE_CHECKING:
    from ..backends import signature as kargs
    from ..backends.runtime import FailFn, LaunchFn
    from ._checkout import Checkout

KERNARG_ALIGN = 16
# hsa_kernel_dispatch_packet_t (64 bytes): header, setup, workgroup sizes, reserved, grid sizes
# (work-items), private and group segment bytes, kernel object, kernarg address
_DISPATCH = struct.Struct("<HHHHHHIIIIIQQ16x")
HSA_PACKET_TYPE_KERNEL_DISPATCH = 2
# error codes this runtime gives Kernel._fail (hipError_t's numbers for the same failures)
LAUNCH_FAILURE = 719  # hipErrorLaunchFailure: the emulator stopped on the kernel
INVALID_CONFIGURATION = 9  # hipErrorInvalidConfiguration: a block the kernel does not allow
_ERROR_NAMES = {
    LAUNCH_FAILURE: "hipErrorLaunchFailure",
    INVALID_CONFIGURATION: "hipErrorInvalidConfiguration",
}


class Dispatch(NamedTuple):
    """One kernel dispatch's shape, which its kernarg segment and its AQL packet both carry."""

    code: KernelCode
    grid: tuple[int, int, int]  # blocks
    block: tuple[int, int, int]  # threads
    shared_mem: int  # dynamic LDS bytes


class LaunchRecord:
    """One emulated launch: the kernel (by the index's name), its grid and block, and the wall
    time it took."""

    __slots__ = ("block", "grid", "kernel", "seconds")

    def __init__(
        self, kernel: str, grid: tuple[int, ...], block: tuple[int, ...], seconds: float
    ) -> None:
        self.kernel, self.grid, self.block, self.seconds = kernel, grid, block, seconds

    def __repr__(self) -> str:
        return f"{self.kernel} grid {self.grid} block {self.block}: {self.seconds:.2f} s"


class EmulatorRuntime(Runtime):
    """Loads AMD images into host memory and runs their kernels on the emulator."""

    vendor = "amd"
    binding = "ctypes"

    def __init__(self, checkout: Checkout, target: EmulatedTarget) -> None:
        self.checkout = checkout
        self.target = target
        self.library = f"AMD ISA emulator (tinygrad {checkout.commit[:12]}, {checkout.folder})"
        self._images: dict[int, PlacedImage] = {}
        self._functions: dict[int, KernelCode] = {}
        self._lock = threading.Lock()
        self.rewrites: Counter[str] = Counter()  # "buffer_gl0_inv in <kernel>" -> count
        self.launches: list[LaunchRecord] = []
        # kernel -> launches that touched LDS outside their allocation (inactive lanes' reads)
        self.lds_outside: Counter[str] = Counter()
        self._lds = LdsReservation()
        self.last_error = ""

    def version(self) -> str:
        return self.library

    def device_count(self) -> int:
        return 1

    def pci_bus_id(self, ordinal: int) -> str:
        return ""

    def error_name(self, code: int) -> str:
        name = _ERROR_NAMES.get(code, "hipError")
        detail = f": {self.last_error}" if self.last_error else ""
        return f"{name} ({code}, emulated{detail})"

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        placed = PlacedImage(image, f"emulated {self.target.processor} image", self.target.arch)
        with self._lock:
            handle = len(self._images) + 1
            self._images[handle] = placed
        return LoadedModule(handle, ordinal)

    def function(self, module: LoadedModule, name: str) -> int:
        code = self._images[module.handle].kernel(name, self.checkout.decode)
        if code.wavefront != self.target.wavefront:
            raise RuntimeLibraryError(
                f"kernel {name} was built for wave{code.wavefront}; the emulator runs "
                f"{self.target.processor} at wave{self.target.wavefront} only"
            )
        if code.kernarg_preload:
            raise RuntimeLibraryError(
                f"kernel {name} preloads kernel arguments into SGPRs, which the emulated runtime "
                "does not do"
            )
        for mnemonic, count in code.rewrites.items():
            self.rewrites[f"{mnemonic} in {name}"] = count
        with self._lock:
            handle = len(self._functions) + 1
            self._functions[handle] = code
        return handle

    def launcher(
        self, module: LoadedModule, function: int, signature: kargs.Signature, fail: FailFn
    ) -> LaunchFn:
        code = self._functions[function]
        explicit = [a for a in code.args if not a.value_kind.startswith("hidden_")]
        if len(explicit) != len(signature.types):
            raise RuntimeLibraryError(
                f"kernel {signature.kernel}: the object has {len(explicit)} explicit arguments, "
                f"the index {len(signature.types)}; the index does not match the image"
            )
        sizes = [arg.size for arg in explicit]
        name = signature.kernel

        def launch(
            _handle: Any,
            gx: int,
            gy: int,
            gz: int,
            bx: int,
            by: int,
            bz: int,
            shared_mem: int,
            _stream: int,
            params: Any,
            _extra: Any,
        ) -> int:
            slots = [ctypes.string_at(params[i], size) for i, size in enumerate(sizes)]
            return self._run(Dispatch(code, (gx, gy, gz), (bx, by, bz), shared_mem), name, slots)

        return launching.ctypes_launcher(
            signature, launch, 0, fail, lambda: module.ordinal, module.ordinal, lambda: 0, int
        )

    # -- below hipModuleLaunchKernel

    def _run(self, dispatch: Dispatch, name: str, slots: list[bytes]) -> int:
        code, grid, block, shared_mem = dispatch
        self.last_error = ""
        threads = block[0] * block[1] * block[2]
        limit = 1024
        if threads > limit or block[0] > 1024 or block[1] > 1024 or block[2] > 1024:
            self.last_error = f"{threads} threads a block; at most {limit}"
            return INVALID_CONFIGURATION
        kernarg = _kernarg_segment(dispatch, slots)
        memory = ctypes.create_string_buffer(len(kernarg) + _DISPATCH.size + KERNARG_ALIGN)
        base = -ctypes.addressof(memory) % KERNARG_ALIGN + ctypes.addressof(memory)
        ctypes.memmove(base, kernarg, len(kernarg))
        dispatch_at = base + len(kernarg) + (-len(kernarg) % KERNARG_ALIGN)
        ctypes.memmove(dispatch_at, _dispatch_packet(dispatch, base), 64)
        user = _user_sgprs(code, base, dispatch_at)
        lds_granules = -(-(code.group_segment + shared_mem) // 512) & 0x1FF
        rsrc2 = code.rsrc2 | (lds_granules << 15)
        started = time.perf_counter()
        try:
            with self._lds.around(self.checkout.emu, lds_granules * 512) as outside:
                status = self.checkout.emu.run_asm(
                    code.entry,
                    code.size,
                    *grid,
                    *block,
                    base,
                    rsrc2,
                    code.private_segment,
                    self.target.arch,
                    user,
                )
        except RuntimeLibraryError:
            raise
        except Exception as error:  # the emulator's own failure: kept for the error message
            self.last_error = f"{type(error).__name__}: {error}"
            return LAUNCH_FAILURE
        finally:
            del memory  # the segment lives until the emulator returns
        if outside[0]:
            self.lds_outside[code.name] += 1
        seconds = time.perf_counter() - started
        self.launches.append(LaunchRecord(name, grid, block, seconds))
        if status:
            self.last_error = f"run_asm returned {status}"
            return LAUNCH_FAILURE
        return 0


def _kernarg_segment(dispatch: Dispatch, slots: list[bytes]) -> bytes:
    """The kernarg segment as ROCclr writes it: each explicit argument at its metadata offset,
    then the hidden arguments the kernel declares (code object v5)."""
    code, grid, block, shared_mem = dispatch
    size = max([code.kernarg_size, *(a.offset + a.size for a in code.args)])
    segment = bytearray(size)
    values = iter(slots)
    hidden = {
        "hidden_block_count_x": grid[0],
        "hidden_block_count_y": grid[1],
        "hidden_block_count_z": grid[2],
        "hidden_group_size_x": block[0],
        "hidden_group_size_y": block[1],
        "hidden_group_size_z": block[2],
        "hidden_remainder_x": 0,  # a HIP grid is whole blocks
        "hidden_remainder_y": 0,
        "hidden_remainder_z": 0,
        "hidden_grid_dims": 3,
        "hidden_dynamic_lds_size": shared_mem,
    }
    for arg in code.args:
        if not arg.value_kind.startswith("hidden_"):
            segment[arg.offset : arg.offset + arg.size] = next(values)
        elif arg.value_kind in hidden:
            segment[arg.offset : arg.offset + arg.size] = hidden[arg.value_kind].to_bytes(
                arg.size, "little"
            )
        # others (global offsets, printf/hostcall/heap buffers, queue pointers): zero
    return bytes(segment)


def _dispatch_packet(dispatch: Dispatch, kernarg: int) -> bytes:
    """The AQL kernel dispatch packet (hsa_kernel_dispatch_packet_t) of ``dispatch``, its
    kernarg segment at address ``kernarg``."""
    code, grid, block, shared_mem = dispatch
    return _DISPATCH.pack(
        HSA_PACKET_TYPE_KERNEL_DISPATCH,
        3,
        *block,
        0,
        *(g * b for g, b in zip(grid, block, strict=True)),
        code.private_segment,
        code.group_segment + shared_mem,
        0,  # the kernel object: no kernel reads it back
        kernarg,
    )


def _user_sgprs(code: KernelCode, kernarg: int, dispatch: int) -> list[int]:
    """The user SGPRs in the order the descriptor enables them; those the emulator provides
    another way (scratch: its own per-lane memory) or that no kernel here reads are zero."""
    values: list[int] = []
    for what, count in code.user_sgprs:
        if what == "kernarg_segment_ptr":
            values += [kernarg & 0xFFFFFFFF, kernarg >> 32]
        elif what == "dispatch_ptr":
            values += [dispatch & 0xFFFFFFFF, dispatch >> 32]
        elif what == "private_segment_size":
            values.append(code.private_segment)
        else:
            values += [0] * count
    # the count in rsrc2 may reserve more (LLVM sets it for the kernarg preload of gfx11+ even
    # where nothing is preloaded): those the command processor loads from zeroed registers
    user_count = (code.rsrc2 >> 1) & 0x1F
    if len(values) > user_count:
        raise RuntimeLibraryError(
            f"kernel {code.name}: its descriptor enables {len(values)} user SGPRs and its rsrc2 "
            f"counts {user_count}; the emulated runtime cannot load it"
        )
    return values + [0] * (user_count - len(values))
