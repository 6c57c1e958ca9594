"""Installed AMD images run on an AMD ISA emulator, through the loader's own path.

::

    from kernelpack.emulator import Emulator     # KERNELPACK_AMD_EMULATOR=DIR: a tinygrad checkout
    emu = Emulator("gfx942")                     # the processor whose installed image is run
    mod = emu.load("mlp")                        # or emu.load("affine", package="candle_kp")
    x = emu.array(np.arange(1024, dtype=np.float32)); y = emu.empty_like(x)
    mod.kernel("name").launch(grid, block, x, y, 1024)   # Kernel.launch as on a GPU
    out = emu.numpy(y)
    result = emu.walk(program, shifts, dirs, primes, depth, depth1, depth2, target)  # walk.run's

``load`` is :class:`kernelpack.loader.load.Loader`'s: the package's catalog, the image selected
for the target by the same rules as on a GPU, its sha256 checked, kernels found by name and launched with
the index's parameter layout. ``Emulator(target, generic=True)`` runs the image a GPU of that
processor loads where its own image is missing: the loader is shown the package without the
processor's own images, so its selection takes the generic target's (gfx9-4-generic for gfx942,
gfx11-generic for gfx1100, gfx12-generic for gfx1201); the emulator (:mod:`._runtime`) stands in for libamdhip64 and the
GPU. The emulator is tinygrad's (test/mockgpu/amd/emu.py, MIT), never copied into kernelpack: a
checkout named by KERNELPACK_AMD_EMULATOR (:mod:`._checkout`). It runs the processors of
:data:`EMULATED_TARGETS`; what it needed rewritten or swapped to run them is counted in
:attr:`Emulator.notes` (docs/amd.md says what the emulator proves and what it does not).

Device memory is host memory: :meth:`Emulator.array` copies a numpy array into a
:class:`DeviceArray` (256-byte aligned, or ``misalign`` bytes past that), which a launch takes as a
pointer argument; :meth:`Emulator.empty_like` gives one whose bytes are all 0xFF (NaN in every
float type), so an element a kernel leaves unwritten shows. Every array sits between GUARD bytes of
0xFF on either side, which :meth:`DeviceArray.guards_intact` checks: a write past either end shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..devices import pointers
from ..devices.detect import Gpu
from ..errors import RuntimeLibraryError, UsageError
from ..loader import catalog as installed
from ..loader.load import Loader
from ..targets import TargetId
from ..walk import gpu
from ..walk.walker import walker
from ._checkout import open_checkout
from ._memory import EmulatorMemory
from ._runtime import EmulatorRuntime, LaunchRecord
from ._targets import EMULATED_TARGETS, EmulatedTarget, emulated_target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..backends.rtc import SourceCompiler
    from ..formats.index import Index
    from ..loader.module import Module
    from ..walk.inputs import WalkResult
    from ..walk.walker import WalkCall, Walker

__all__ = [
    "EMULATED_TARGETS",
    "DeviceArray",
    "EmulatedTarget",
    "Emulator",
    "LaunchRecord",
]

ALIGNMENT = 256  # what hipMalloc gives at least
GUARD = 256  # 0xFF bytes kept before and after every array


class DeviceArray:
    """An array in the emulator's memory (host memory at a fixed address): pass it as a kernel's
    pointer argument; :meth:`Emulator.numpy` copies it out."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, misalign: int = 0) -> None:
        if type(misalign) is not int or not 0 <= misalign < ALIGNMENT:
            raise UsageError(f"misalign must be an int from 0 to {ALIGNMENT - 1}, got {misalign!r}")
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._raw = np.full(self.nbytes + 2 * (GUARD + ALIGNMENT), 0xFF, dtype=np.uint8)
        start = GUARD + -(self._raw.ctypes.data + GUARD) % ALIGNMENT + misalign
        self._start = start
        self._bytes = self._raw[start : start + self.nbytes]
        self.address = int(self._bytes.ctypes.data)

    def guards_intact(self) -> bool:
        """Whether every byte outside the array (at least GUARD on either side) is still 0xFF:
        nothing wrote past either end of it."""
        before, after = self._raw[: self._start], self._raw[self._start + self.nbytes :]
        return bool((before == 0xFF).all() and (after == 0xFF).all())

    def view(self) -> np.ndarray[Any, Any]:
        """The array's memory as numpy sees it (no copy)."""
        view: np.ndarray[Any, Any] = self._bytes.view(self.dtype).reshape(self.shape)
        return view

    def __repr__(self) -> str:
        return f"<DeviceArray {self.dtype} {self.shape} at {self.address:#x}>"


# Kernel.launch reads a pointer argument's address through this cache of per-type getters
# (kernelpack.devices.pointers.pointer_of, and the C launcher on a miss).
pointers.POINTER_GETTERS[DeviceArray] = lambda array: array.address


def _no_compiler(vendor: str) -> SourceCompiler:
    """The emulator runs prebuilt images only: a module with none for the target is refused
    (the loader turns this into a NoImageError that says so)."""
    raise RuntimeLibraryError(
        "the emulator runs prebuilt images only (no run-time compiler); build the target "
        "(python -m buildsys build --targets T)"
    )


def without_images_for(index: Index, processor: str) -> Index:
    """``index`` with every image built for ``processor`` itself (with any features) left out,
    the rest as they are: what a GPU of that processor sees where only its family's generic image
    was installed."""
    modules = {
        name: {
            **entry,
            "images": [
                image
                for image in entry["images"]
                if image["vendor"] != "amd" or image["target"].split(":")[0] != processor
            ],
        }
        for name, entry in index["modules"].items()
    }
    return cast("Index", {**index, "modules": modules})


class Emulator:
    """One emulated AMD GPU of processor ``target`` (one of :data:`EMULATED_TARGETS`); with
    ``generic``, one that finds no image of its own processor installed."""

    def __init__(
        self, target: str, *, generic: bool = False, environ: Mapping[str, str] | None = None
    ) -> None:
        self.target: EmulatedTarget = emulated_target(target)
        self.generic = generic
        self.checkout = open_checkout(environ)
        self.runtime = EmulatorRuntime(self.checkout, self.target)
        arch = self.target.arch
        self.gpu = Gpu(
            0,
            "amd",
            TargetId.parse(self.target.processor),
            f"AMD ISA emulator ({arch}, wave{self.target.wavefront})",
            "",
            "",
            None,
            "emulator",
            self.target.processor,
        )
        self._loaders: dict[str, Loader] = {}

    def load(self, module: str, *, package: str = "kernelpack") -> Module:
        """``module`` of the kernelpack-built ``package`` through the loader, run on the emulator."""
        loader = self._loaders.get(package)
        if loader is None:
            loader = self._loaders[package] = self._loader(package)
        return loader.load(module, 0)

    def _loader(self, package: str) -> Loader:
        if not self.generic:
            return Loader(
                package=package,
                gpus=[self.gpu],
                runtimes=lambda vendor: self.runtime,
                compilers=_no_compiler,
            )
        processor = self.target.processor
        index = installed.package_index(package)
        fragments = [
            (without_images_for(fragment, processor), root, origin)
            for fragment, root, origin in installed.device_fragments(package)
        ]
        return Loader(
            package=package,
            index=None if index is None else without_images_for(index, processor),
            root=installed.package_folder(package),
            fragments=lambda: fragments,
            gpus=[self.gpu],
            runtimes=lambda vendor: self.runtime,
            compilers=_no_compiler,
        )

    @property
    def notes(self) -> list[str]:
        """What the emulator needed to run this target: its decoder's stand-in, and every
        instruction rewritten in the loaded copies (counted by kernel)."""
        said = []
        if self.generic:
            said.append(
                f"{self.target.processor}'s own images hidden from the loader: it loads the "
                "generic image of its family"
            )
        if self.target.stand_in:
            said.append(
                f"{self.target.processor} runs on the emulator's {self.target.stand_in} "
                f"({self.target.arch}) decoder"
            )
        said += [f"{n} x {what}" for what, n in self.runtime.rewrites.items()]
        said += [
            f"{n} launches of {kernel} touched LDS outside their allocation (inactive lanes' "
            "reads, which the emulator does not mask, or a kernel's own; run on a 4 GiB LDS "
            "reservation)"
            for kernel, n in self.runtime.lds_outside.items()
        ]
        return said

    @property
    def launches(self) -> list[LaunchRecord]:
        """Every launch run so far, with its wall time."""
        return self.runtime.launches

    def array(self, host: Any, *, misalign: int = 0) -> DeviceArray:
        """A copy of the numpy array ``host`` in the emulator's memory."""
        source = np.ascontiguousarray(host)
        made = DeviceArray(source.shape, source.dtype, misalign)
        made.view()[...] = source
        return made

    def empty(self, shape: tuple[int, ...], dtype: Any, *, misalign: int = 0) -> DeviceArray:
        """An array of 0xFF bytes (NaN in every float type)."""
        return DeviceArray(shape, dtype, misalign)

    def empty_like(self, array: DeviceArray | Any, *, misalign: int = 0) -> DeviceArray:
        """An array of the same shape and dtype as ``array`` (a DeviceArray or numpy array),
        its bytes 0xFF."""
        return DeviceArray(tuple(array.shape), array.dtype, misalign)

    def memory(self) -> EmulatorMemory:
        """Raw bytes in the emulator's memory through kernelpack.devices.memory.DeviceMemory's interface,
        for hosts that work in plain addresses (each buffer a 0xFF-filled DeviceArray's bytes)."""
        return EmulatorMemory(lambda nbytes: DeviceArray((nbytes,), "uint8"))

    @property
    def walk(self) -> Walker:
        """kernelpack.walk.run on the emulator: the same arguments and WalkResult (shifts and
        dirs on the host, no device), run by the same host code (kernelpack.walk.gpu: pieces,
        the residue and float kernels, the selection kernels) on this target's walk module."""

        def walk(call: WalkCall) -> WalkResult:
            if call.device is not None:
                raise UsageError(
                    f"device: the emulator's walk runs on {self.target.processor}, got "
                    f"{call.device!r}"
                )
            memory: Any = self.memory()  # DeviceMemory's interface
            return gpu._walk(call.host_inputs(), call.request, self.load("walk"), memory)

        return walker(walk)

    def numpy(self, array: DeviceArray) -> np.ndarray[Any, Any]:
        """A numpy copy of a DeviceArray (after the kernels that wrote it: launches are
        synchronous here)."""
        if not isinstance(array, DeviceArray):
            raise UsageError(f"expected a DeviceArray, got {type(array).__name__}")
        return array.view().copy()

    def __repr__(self) -> str:
        generic = ", generic image" if self.generic else ""
        return (
            f"<kernelpack.emulator.Emulator {self.target.processor}{generic} "
            f"({self.runtime.library})>"
        )
