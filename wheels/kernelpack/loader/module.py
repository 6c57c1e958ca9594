"""A module loaded on a GPU and its kernels: the public ``kernelpack.Module`` and ``kernelpack.Kernel``.

The loader (:mod:`kernelpack.loader.load`) makes them; they hold the runtime's handles and turn a
launch that does not happen into an error that names the argument, grid, block or stream at fault.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..backends import signature as kargs
from ..devices import pointers
from ..devices.argument import device_name
from ..errors import RuntimeLibraryError, UsageError
from ..formats.index import KernelParam, KernelResources

if TYPE_CHECKING:
    from ..backends.runtime import LaunchFn, LoadedModule, Runtime
    from ..devices.detect import Gpu


class Kernel:
    """One kernel of a loaded module, ready to launch on the module's device.

    ``kernel.launch(grid, block, *args, shared_mem=0, stream=None)`` launches it on ``stream``
    (None: the default stream; torch or CuPy streams, objects with __cuda_stream__, raw handles).
    ``grid`` and ``block`` are an int or 1 to 3 ints. Arguments follow the kernel's C parameters
    (:attr:`params`): pointers as int addresses, torch tensors, CuPy arrays or any object with
    __cuda_array_interface__ or DLPack; scalars as Python numbers within the C type's range. The
    count, each pointer or scalar and each integer's range are checked before the launch, and a
    problem raises a UsageError naming the argument. ``launch`` is the runtime binding's own
    callable (the C launcher's method where it was built), so no Python frame sits in between.

    ``info`` holds the kernel's resources: registers, LDS, scratch, spills, wavefront size and
    the largest block it allows (from the index, or read off the object compiled at run time).

    ``shared_mem_for_blocks(threads, blocks)`` is the ``shared_mem`` that holds the kernel to at
    most ``blocks`` blocks a multiprocessor (a memory-bound kernel can move its bytes faster with
    fewer blocks in flight than its registers allow).
    """

    launch: LaunchFn

    def __init__(
        self, name: str, module: Module, signature: kargs.Signature, function: int
    ) -> None:
        """``function``: the kernel's handle in ``module``, whose runtime launches it."""
        self.name = name
        self.module = module
        self.signature = signature
        self._function = function
        self._capping: dict[tuple[int, int], int] = {}  # (threads, blocks) -> shared memory
        self.launch = module._runtime.launcher(module._loaded, function, signature, self._fail)

    @property
    def info(self) -> KernelResources:
        return self.module.resources().get(self.name) or _NO_RESOURCES

    @property
    def params(self) -> list[KernelParam]:
        """The parameter layout the index records (types as the demangled symbol spells them)."""
        return [dict(p) for p in self.module._params[self.name]]  # type: ignore[misc]

    def shared_mem_for_blocks(self, threads: int, blocks: int) -> int:
        """The dynamic shared memory (``launch(..., shared_mem=)``) with which at most ``blocks``
        blocks of ``threads`` threads are resident on one multiprocessor of the module's device,
        the kernel allowed it; 0 where its registers and threads already allow no more, and on
        AMD GPUs (the runtime caps nothing there). Worked out by the vendor's occupancy
        calculator once per (threads, blocks)."""
        for name, value in (("threads", threads), ("blocks", blocks)):
            if type(value) is not int or value < 1:
                raise UsageError(f"{name} must be a positive int, got {value!r}")
        found = self._capping.get((threads, blocks))
        if found is None:
            found = self._capping[(threads, blocks)] = self.module._runtime.shared_mem_for_blocks(
                self.module._loaded, self._function, threads, blocks
            )
        return found

    def _fail(
        self,
        code: int,
        grid: object,
        block: object,
        args: Sequence[object],
        shared_mem: object,
        stream: object,
    ) -> None:
        """The error for a launch that did not happen (-1) or that the runtime refused."""
        if code != -1:
            limit = self.info.get("max_workgroup", 0)
            hint = f" (this kernel allows at most {limit} threads a block)" if limit else ""
            raise RuntimeLibraryError(
                f"launch of {self.name} failed: {self.module._runtime.error_name(code)}{hint}"
            )
        kargs.dims(grid, "grid")
        kargs.dims(block, "block")
        if type(shared_mem) is not int or not 0 <= shared_mem < 2**32:
            raise UsageError(f"shared_mem must be an int from 0 to 2**32-1, got {shared_mem!r}")
        pointers.stream_of(stream)
        raise self.signature.explain(args)

    def __repr__(self) -> str:
        return f"<kernelpack.Kernel {self.signature.describe()} on device {self.module.device}>"


class Module:
    """A module loaded on one GPU: its kernels by name, and which image was loaded and why.

    ``device`` names the GPU as :func:`kernelpack.load` accepts it ("cuda:0", "hip:1"); ``gpu``
    is what detection knows of it; ``image`` which image was loaded ("sm_90 cubin
    (kernelpack/device/mlp.sm_90.cubin)", "sm_90 compiled by nvrtc 13.0 (...)") and ``why``.
    """

    def __init__(
        self,
        name: str,
        gpu: Gpu,
        image: str,
        why: str,
        kernels: dict[str, list[KernelParam]],
        resources: Callable[[], dict[str, KernelResources]],
        runtime: Runtime,
        loaded: LoadedModule,
        symbols: dict[str, str] | None = None,
        *,
        image_symbols: bool = False,
        lookup: Callable[[str, str], str] | None = None,
    ) -> None:
        self.name = name
        self.gpu = gpu
        self.device = device_name(gpu)  # "cuda:0", "hip:1": what load(device=...) accepts
        self.image = image  # "sm_90 cubin (kernelpack/device/mlp.sm_90.cubin)", "sm_90 nvrtc 13.0"
        self.why = why
        self._params = kernels
        # kernel name -> its symbol in the loaded image (mangled for C++ kernels); a name that is
        # not here is its own symbol (C linkage)
        self._symbols = symbols or {}
        self._image_symbols = image_symbols  # whether the symbols are the loaded image's own
        # for an image compiled at run time: (name, symbol) -> how the symbol was chosen, added
        # to the runtime's error when it finds no such kernel
        self._lookup = lookup
        self._read_resources = resources
        self._resources: dict[str, KernelResources] | None = None
        self._runtime = runtime
        self._loaded = loaded
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()

    def multiprocessor_count(self) -> int:
        """The multiprocessors (SMs, CUs) of the module's device, as its runtime reports them."""
        return self._runtime.multiprocessor_count(self._loaded.ordinal)

    def resources(self) -> dict[str, KernelResources]:
        """Per kernel, its resources; read off a run-time compiled object only when asked for
        (reading imports kernelpack.formats, which a load should not wait for)."""
        if self._resources is None:
            self._resources = self._read_resources()
        return self._resources

    @property
    def kernel_names(self) -> list[str]:
        return sorted(self._params)

    def kernel(self, name: str) -> Kernel:
        """The kernel named by the kernel-name rule (docs/loader.md): ``"swiglu<float>"``,
        ``"walk::walk_float<2>"``, a C-linkage kernel by its plain name."""
        found = self._kernels.get(name)
        if found is not None:
            return found
        params = self._params.get(name)
        per_unit = [k for k in self.kernel_names if k.startswith(name + "@")]
        if params is None and per_unit:
            raise UsageError(
                f"module {self.name}: several of its translation units define a kernel {name!r} "
                f"of internal linkage; ask for one by its unit: {', '.join(per_unit)}"
            )
        if params is None:
            raise UsageError(
                f"module {self.name} has no kernel {name!r}; kernels: {', '.join(self.kernel_names)}"
            )
        if self._image_symbols and name not in self._symbols:
            raise UsageError(
                f"kernel {name!r} of module {self.name} is not in the image loaded on "
                f"{self.device} ({self.image}): the build allowed it to be missing there "
                "(allow-missing-kernels)"
            )
        with self._lock:
            found = self._kernels.get(name)
            if found is None:
                signature = kargs.Signature.from_index(name, params)
                symbol = self._symbols.get(name, name)
                try:
                    function = self._runtime.function(self._loaded, symbol)
                except RuntimeLibraryError as error:
                    if self._lookup is None:
                        raise
                    raise RuntimeLibraryError(
                        f"kernel {name!r} of module {self.name}: {error}: "
                        f"{self._lookup(name, symbol)}"
                    ) from None
                found = self._kernels[name] = Kernel(name, self, signature, function)
            return found

    def __repr__(self) -> str:
        return f"<kernelpack.Module {self.name} on device {self.device} ({self.gpu.target}): {self.image}>"


_NO_RESOURCES = KernelResources(
    registers=0, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=0, max_workgroup=0
)
