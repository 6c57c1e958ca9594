"""From a module name to a kernel running on the GPU: index, selection, verification, loading.

``load(module, device)`` does, once per (device, module) and process:

1. read the package's embedded index (``kernelpack/_index.py``) and, when it has no image that fits
   the GPU (a split install), merge the index fragments of the installed device wheels, found
   through the ``kernelpack.device`` entry point group;
2. detect the GPUs (:mod:`kernelpack.detect`; ``device`` is a position in that list, which follows
   the visible-devices variables, so on one vendor's machine it is the runtime's device number);
3. rank the module's images for the GPU's target (:func:`kernelpack.targets.select_image`) and take
   the best; with KERNELPACK_DEBUG=1 every image's verdict goes to standard error;
4. get the image's bytes: straight from the package file, or from the disk cache for images inside
   compressed bundles and for PTX already compiled by the driver; check them against the index's
   sha256 before they are loaded;
5. without a fitting image, compile the module's embedded source with NVRTC or hipRTC (cached on
   disk by source hash, target and compiler version; a warning says so once); without a compiler
   either, a NoImageError that says what to install or set;
6. load it through the vendor runtime (:mod:`kernelpack.runtime`).

Concurrent first calls for one (device, module) wait for a single load; later calls are a dict
lookup.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from . import args as kargs
from ._console import debug_enabled
from .cache import DiskCache, cache_key
from .errors import (
    KernelpackError,
    KernelpackWarning,
    NoImageError,
    RuntimeLibraryError,
    UsageError,
)
from .index import SCHEMA_VERSION, Image, Index, KernelParam, KernelResources
from .index import Module as IndexModule

if TYPE_CHECKING:
    from .detect import Gpu, NvidiaDevice
    from .runtime import LaunchFn, LoadedModule, Runtime, SourceCompiler

PACKAGE_DIR = Path(__file__).resolve().parent
DEVICE_ENTRY_POINTS = "kernelpack.device"


def _debug(message: str) -> None:
    if debug_enabled():
        print(f"kernelpack: {message}", file=sys.stderr)


# ---- the merged index -----------------------------------------------------------------------


class Located(NamedTuple):
    """An index image and the package folder its ``file`` is relative to."""

    image: Image
    root: Path
    origin: str  # the package whose index lists it: "kernelpack", "kernelpack_device_sm90"

    @property
    def path(self) -> Path:
        return self.root / self.image["file"]

    @property
    def label(self) -> str:
        return f"{self.image['target']} {self.image['kind']} ({self.origin}/{self.image['file']})"


class Catalog:
    """What the installed packages carry: every module's kernels, source and located images."""

    def __init__(self) -> None:
        self.version = ""
        self.modules: dict[str, IndexModule] = {}
        self.images: dict[str, list[Located]] = {}
        self.device_wheels: dict[str, str] = {}  # built target -> the extra of its device wheel
        self.origins: list[str] = []  # the packages whose indexes were read
        self.sources: dict[str, Path] = {}  # module -> its CUDA source (the hipified one beside it)

    def add(self, index: Index, root: Path, origin: str) -> None:
        if index.get("schema") != SCHEMA_VERSION:
            raise KernelpackError(
                f"{root / '_index.py'}: index schema {index.get('schema')}, this kernelpack reads "
                f"{SCHEMA_VERSION}; install matching versions of kernelpack and its device wheels"
            )
        self.version = self.version or index["version"]
        self.device_wheels.update(index.get("device_wheels", {}))
        self.origins.append(origin)
        for name, module in sorted(index["modules"].items()):
            self.modules.setdefault(name, module)
            if module["source"] and name not in self.sources:
                self.sources[name] = root / module["source"]
            located = self.images.setdefault(name, [])
            located += [Located(image, root, origin) for image in module["images"]]


def package_index() -> Index | None:
    """The fat or host wheel's embedded index; None where kernelpack was installed without one."""
    try:
        from ._index import INDEX
    except ImportError:
        return None
    index: Index = INDEX
    return index


def device_fragments() -> list[tuple[Index, Path, str]]:
    """The index fragments of the installed device wheels (entry point group kernelpack.device).

    Each entry point names a package holding ``_index.py``; a package that cannot be imported is
    skipped with a warning, so one broken device wheel does not stop the others.
    """
    from importlib.metadata import entry_points

    found: list[tuple[Index, Path, str]] = []
    for entry in sorted(entry_points(group=DEVICE_ENTRY_POINTS), key=lambda e: e.name):
        try:
            package = importlib.import_module(entry.value.split(":")[0].strip())
            fragment: Index = importlib.import_module(package.__name__ + "._index").INDEX
        except Exception as error:  # a broken third-party install must not stop the loader
            warnings.warn(
                f"device wheel {entry.value} (entry point {entry.name}) cannot be read: {error}; "
                "reinstall it",
                KernelpackWarning,
                stacklevel=3,
            )
            continue
        found.append((fragment, Path(package.__file__ or "").resolve().parent, package.__name__))
    return found


# ---- the in-process cache ------------------------------------------------------------------

K = TypeVar("K")
V = TypeVar("V")


class OnceMap(Generic[K, V]):
    """A dict whose values are made once: concurrent callers for one key wait for one maker.

    A maker that raises leaves the key empty, so a later call tries again.
    """

    def __init__(self) -> None:
        self._values: dict[K, V] = {}
        self._locks: dict[K, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        return self._values.get(key)

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        found = self._values.get(key)
        if found is not None:
            return found
        with self._lock:
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:
            found = self._values.get(key)
            if found is None:
                found = self._values[key] = make()
            return found

    def values(self) -> list[V]:
        return list(self._values.values())


# ---- modules and kernels -------------------------------------------------------------------


class Choice(NamedTuple):
    """Which image of a module a GPU gets and why; ``located`` is None when none fits."""

    module: str
    gpu: Gpu
    located: Located | None
    reasons: list[str]


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
    """

    launch: LaunchFn

    def __init__(
        self,
        name: str,
        module: Module,
        signature: kargs.Signature,
        runtime: Runtime,
        function: int,
    ) -> None:
        self.name = name
        self.module = module
        self.signature = signature
        self._runtime = runtime
        self.launch = runtime.launcher(module._loaded, function, signature, self._fail)

    @property
    def info(self) -> KernelResources:
        return self.module.resources().get(self.name) or _NO_RESOURCES

    @property
    def params(self) -> list[KernelParam]:
        return [
            {"name": n, "type": t}
            for n, t in zip(self.signature.names, self.signature.spellings, strict=True)
        ]

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
                f"launch of {self.name} failed: {self._runtime.error_name(code)}{hint}"
            )
        kargs.dims(grid, "grid")
        kargs.dims(block, "block")
        if type(shared_mem) is not int or not 0 <= shared_mem < 2**32:
            raise UsageError(f"shared_mem must be an int from 0 to 2**32-1, got {shared_mem!r}")
        kargs.stream_of(stream)
        raise self.signature.explain(args)

    def __repr__(self) -> str:
        return f"<kernelpack.Kernel {self.signature.describe()} on device {self.module.device}>"


class Module:
    """A module loaded on one device: its kernels by name, and which image was loaded and why."""

    def __init__(
        self,
        name: str,
        gpu: Gpu,
        device: int,
        image: str,
        why: str,
        kernels: dict[str, list[KernelParam]],
        resources: Callable[[], dict[str, KernelResources]],
        runtime: Runtime,
        loaded: LoadedModule,
    ) -> None:
        self.name = name
        self.gpu = gpu
        self.device = device
        self.image = image  # "sm_90 cubin (kernelpack/device/mlp.sm_90.cubin)", "sm_90 nvrtc 13.0"
        self.why = why
        self._params = kernels
        self._read_resources = resources
        self._resources: dict[str, KernelResources] | None = None
        self._runtime = runtime
        self._loaded = loaded
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()

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
        found = self._kernels.get(name)
        if found is not None:
            return found
        params = self._params.get(name)
        if params is None:
            raise UsageError(
                f"module {self.name} has no kernel {name!r}; kernels: {', '.join(self.kernel_names)}"
            )
        with self._lock:
            found = self._kernels.get(name)
            if found is None:
                signature = kargs.Signature.from_index(name, params)
                function = self._runtime.function(self._loaded, name)
                found = self._kernels[name] = Kernel(name, self, signature, self._runtime, function)
            return found

    def __repr__(self) -> str:
        return f"<kernelpack.Module {self.name} on device {self.device} ({self.gpu.target}): {self.image}>"


_NO_RESOURCES = KernelResources(
    registers=0, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=0, max_workgroup=0
)


# ---- the loader ----------------------------------------------------------------------------


class Loader:
    """Selection and loading for one process; :func:`load` uses one shared instance.

    Every part that touches the machine can be replaced, which is how the tests run without a GPU:
    ``index`` (the package's own, else kernelpack/_index.py), ``fragments`` (device wheels' index
    fragments, else the entry points), ``gpus`` (else kernelpack.detect), ``runtimes`` and
    ``compilers`` (vendor -> runtime / run-time compiler), ``cache`` (the disk cache).
    """

    def __init__(
        self,
        *,
        index: Index | None = None,
        root: Path | None = None,
        fragments: Callable[[], list[tuple[Index, Path, str]]] = device_fragments,
        gpus: Sequence[Gpu] | Callable[[], Sequence[Gpu]] | None = None,
        runtimes: Callable[[str], Runtime] | None = None,
        compilers: Callable[[str], SourceCompiler] | None = None,
        cache: DiskCache | None = None,
    ) -> None:
        self._index = index
        self._root = root if root is not None else PACKAGE_DIR
        self._fragments = fragments
        self._gpu_source = gpus
        self._gpus: list[Gpu] | None = None
        self._runtime_factory = runtimes
        self._compiler_factory = compilers
        self.cache = cache if cache is not None else DiskCache()
        self._catalog: Catalog | None = None
        self._merged = False
        self._lock = threading.RLock()
        self._runtimes: OnceMap[str, Runtime] = OnceMap()
        self._modules: OnceMap[tuple[int, str], Module] = OnceMap()
        self._verified: set[str] = set()
        self._said: set[tuple[str, str]] = set()

    # -- what is installed and what is present

    def catalog(self, *, with_device_wheels: bool = False) -> Catalog:
        """The package's index, and with ``with_device_wheels`` the device wheels' merged in."""
        with self._lock:
            if self._catalog is None:
                index = self._index if self._index is not None else package_index()
                catalog = Catalog()
                if index is not None:
                    catalog.add(index, self._root, "kernelpack")
                self._catalog = catalog
            if with_device_wheels and not self._merged:
                for fragment, root, origin in self._fragments():
                    if self._catalog.version and fragment["version"] != self._catalog.version:
                        warnings.warn(
                            f"device wheel {origin} is version {fragment['version']}, kernelpack is "
                            f"{self._catalog.version}; skipped. Reinstall it with the same version",
                            KernelpackWarning,
                            stacklevel=3,
                        )
                        continue
                    self._catalog.add(fragment, root, origin)
                    _debug(f"merged device wheel {origin} ({root})")
                self._merged = True
            return self._catalog

    def gpus(self) -> list[Gpu]:
        with self._lock:
            if self._gpus is None:
                source = self._gpu_source
                if source is None:
                    from .detect import detect_gpus

                    self._gpus = list(detect_gpus(nvidia_probe=_driver_probe))
                else:
                    self._gpus = list(source() if callable(source) else source)
                for position, gpu in enumerate(self._gpus):
                    _debug(
                        f"device {position}: {gpu.vendor} {gpu.name or '?'} target {gpu.target}"
                        f"{' (' + gpu.override + ')' if gpu.override else ''}"
                    )
            return self._gpus

    def gpu(self, device: int | None) -> tuple[int, Gpu]:
        gpus = self.gpus()
        position = 0 if device is None else device
        if type(position) is not int:
            raise UsageError(
                f"device must be an int (a position in kernelpack's GPU list), got {device!r}"
            )
        if not gpus:
            raise NoImageError(
                "no GPU found: no AMD GPU in the KFD topology and no NVIDIA GPU through NVML or "
                "libcuda; set KERNELPACK_TARGET to name one, or check the driver"
            )
        if not 0 <= position < len(gpus):
            raise UsageError(
                f"device {device}: this machine has {len(gpus)} visible GPU(s), 0 to {len(gpus) - 1} "
                "(after CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES)"
            )
        return position, gpus[position]

    def runtime(self, vendor: str) -> Runtime:
        def make() -> Runtime:
            if self._runtime_factory is not None:
                return self._runtime_factory(vendor)
            from .runtime import open_runtime

            return open_runtime(vendor)

        return self._runtimes.get_or_make(vendor, make)

    # -- selection

    def choose(self, module: str, gpu: Gpu) -> Choice:
        """The best image of ``module`` for ``gpu``, looking in device wheels when the package has
        none that fits (a split install), with one reason line per image considered."""
        from .runtime_support import amd_code_object_v6
        from .targets import select_image

        catalog = self.catalog()
        if module not in catalog.modules:
            catalog = self.catalog(with_device_wheels=True)
        if module not in catalog.modules:
            known = ", ".join(sorted(catalog.modules)) or (
                "none (no index installed: `python -m buildsys build` makes one in a source tree)"
            )
            raise UsageError(f"no kernel module {module!r}; modules: {known}")
        located = catalog.images[module]
        v6 = amd_code_object_v6() if gpu.vendor == "amd" else None
        best, reasons = select_image(
            [entry.image for entry in located], gpu.target, runtime_code_object_v6=v6
        )
        if best is None and not self._merged:
            located = self.catalog(with_device_wheels=True).images[module]
            best, reasons = select_image(
                [entry.image for entry in located], gpu.target, runtime_code_object_v6=v6
            )
        chosen = next((entry for entry in located if entry.image is best), None)
        reasons = [
            f"{reason} [{entry.origin}]" for reason, entry in zip(reasons, located, strict=True)
        ]
        for reason in reasons:
            _debug(f"{module} on {gpu.target}: {reason}")
        return Choice(module, gpu, chosen, reasons)

    # -- loading

    def load(self, module: str, device: int | None = None) -> Module:
        key = (0 if device is None else device, module)
        found = self._modules.get(key)
        if found is not None:
            return found
        position, gpu = self.gpu(device)
        return self._modules.get_or_make(
            (position, module), lambda: self._load(module, position, gpu)
        )

    def loaded(self) -> list[Module]:
        return self._modules.values()

    def _load(self, module: str, position: int, gpu: Gpu) -> Module:
        choice = self.choose(module, gpu)
        entry = self.catalog().modules[module]
        compiler = None
        if choice.located is None:
            compiler = self.compiler_for(module, gpu, choice)
        runtime = self.runtime(gpu.vendor)
        ordinal = runtime.ordinal_for(gpu.location or None, gpu.index)
        if choice.located is None:
            assert compiler is not None
            data, image, why = self._compiled(module, entry, gpu, compiler)
            resources = _resources_of(data, gpu.vendor, image)
        else:
            located = choice.located
            data = self.image_bytes(located)
            recorded = located.image["kernels"]
            resources = lambda: recorded  # noqa: E731
            image = located.label
            why = next((r for r in choice.reasons if "selected" in r), "")
            if located.image["kind"] == "ptx":
                data = self._driver_compiled(runtime, ordinal, located, gpu)
                if not recorded and data.startswith(b"\x7fELF"):
                    resources = _resources_of(data, gpu.vendor, f"{image} compiled")
        loaded = runtime.load(ordinal, data)
        _debug(f"{module}: loaded {image} on device {position} ({gpu.vendor} ordinal {ordinal})")
        return Module(
            module, gpu, position, image, why, entry["kernels"], resources, runtime, loaded
        )

    def image_bytes(self, located: Located) -> bytes:
        """The image's bytes, checked against the index's sha256 (compressed bundles through the
        disk cache, so each is decompressed once per machine)."""
        image = located.image
        if image["compression"] == "none":
            data = _read_range(located.path, image["offset"], image["size"])
            return self._verified_image(located, data)
        cached = self.cache.get(image["sha256"])
        if cached is not None and hashlib.sha256(cached).hexdigest() == image["sha256"]:
            _debug(f"{located.label}: from the disk cache")
            self._verified.add(image["sha256"])
            return cached
        from .formats import read_bundle

        bundle = _read_range(located.path, 0, None)
        entries = read_bundle(bundle, str(located.path))
        data = next(
            (e.data for e in entries if e.offset == image["offset"] and e.size == image["size"]),
            b"",
        )
        data = self._verified_image(located, data)
        self.cache.put(image["sha256"], data)
        return data

    def _verified_image(self, located: Located, data: bytes) -> bytes:
        image = located.image
        digest = hashlib.sha256(data).hexdigest()
        if digest != image["sha256"]:
            raise KernelpackError(
                f"{located.path}: the {image['target']} image (offset {image['offset']}, "
                f"{image['size']} bytes) has sha256 {digest[:16]}..., the index says "
                f"{image['sha256'][:16]}...; the installed file was changed or damaged: "
                "reinstall kernelpack"
            )
        self._verified.add(digest)
        _debug(f"{located.label}: sha256 verified")
        return data

    def _driver_compiled(self, runtime: Runtime, ordinal: int, located: Located, gpu: Gpu) -> bytes:
        """PTX compiled by the driver for this GPU, kept in the disk cache (keyed by the PTX's hash,
        the GPU's target and the driver's version)."""
        key = cache_key("ptx", located.image["sha256"], str(gpu.target), runtime.version())
        cached = self.cache.get(key)
        if cached is not None:
            _debug(f"{located.label}: compiled for {gpu.target} earlier (disk cache)")
            return cached
        ptx = self.image_bytes(located)
        jit = getattr(runtime, "jit_ptx", None)
        if jit is None:
            return ptx
        cubin: bytes = jit(ordinal, ptx)
        _debug(f"{located.label}: compiled by the driver for {gpu.target}")
        self.cache.put(key, cubin)
        return cubin

    def compiler_for(self, module: str, gpu: Gpu, choice: Choice) -> SourceCompiler:
        """The run-time compiler for a module with no fitting image, or the NoImageError."""
        problem = "the index carries no source for this module"
        if module in self.catalog().sources:
            try:
                if self._compiler_factory is not None:
                    return self._compiler_factory(gpu.vendor)
                from .runtime import open_compiler

                return open_compiler(gpu.vendor)
            except RuntimeLibraryError as error:
                problem = str(error)
        raise NoImageError(self.no_image_message(choice, problem))

    def _compiled(
        self, module: str, entry: IndexModule, gpu: Gpu, compiler: SourceCompiler
    ) -> tuple[bytes, str, str]:
        target = _compile_target(gpu)
        version = compiler.version()
        source = self._source_text(module, entry, gpu.vendor)
        key = cache_key("source", hashlib.sha256(source.encode()).hexdigest(), target, version)
        data = self.cache.get(key)
        if data is None:
            _debug(f"{module}: compiling its source with {version} for {target}")
            data = compiler.compile(source, module, target)
            self.cache.put(key, data)
        if (module, target) not in self._said:
            self._said.add((module, target))
            warnings.warn(
                f"kernelpack: no prebuilt image of module {module} fits {gpu.target}; compiled its "
                f"source with {version} (cached in {self.cache.folder}). Install the device wheel "
                f"or rebuild with {target} to skip this",
                KernelpackWarning,
                stacklevel=4,
            )
        return data, f"{target} compiled by {version}", "no prebuilt image fits"

    def _source_text(self, module: str, entry: IndexModule, vendor: str) -> str:
        """The module's CUDA source, checked against the index; for AMD the builder's hipified
        copy beside it where there is one (hipRTC compiles HIP; plain CUDA only in part)."""
        path = self.catalog().sources[module]
        try:
            cuda = path.read_bytes()
        except OSError as error:
            raise KernelpackError(
                f"{path}: cannot read the module's source: {error.strerror}; reinstall kernelpack"
            ) from None
        if hashlib.sha256(cuda).hexdigest() != entry["source_sha256"]:
            raise KernelpackError(
                f"{path}: the source's sha256 differs from the index's; the installed file was "
                "changed or damaged: reinstall kernelpack"
            )
        hip = path.with_suffix(".hip")
        if vendor == "amd" and hip.is_file():
            return hip.read_text(encoding="utf-8")
        return cuda.decode("utf-8")

    # -- what to say when nothing fits

    def no_image_message(self, choice: Choice, compile_problem: str) -> str:
        catalog = self.catalog()
        gpu = choice.gpu
        built = sorted({f"{e.image['target']}" for e in catalog.images.get(choice.module, [])})
        lines = [
            f"no image of module {choice.module} fits GPU {gpu.index} "
            f"({gpu.vendor}{' ' + gpu.name if gpu.name else ''}, target {gpu.target}); built for: "
            f"{', '.join(built) or 'no targets'}",
            *[f"  {reason}" for reason in choice.reasons],
            f"  run-time compilation: {compile_problem}",
            "what to do:",
            f"  - install the device wheel for it: {install_hint(gpu, catalog)}",
            f"  - or rebuild with the target: python -m buildsys build --targets {_build_target(gpu)}",
            f"  - or run a compatible build: {override_hint(gpu, built)}",
        ]
        return "\n".join(lines)


def _resources_of(data: bytes, vendor: str, label: str) -> Callable[[], dict[str, KernelResources]]:
    """Reads a compiled object's per-kernel resources when called (see Module.resources)."""

    def read() -> dict[str, KernelResources]:
        from .formats import read_code_object, read_cubin

        reader = read_cubin if vendor == "nvidia" else read_code_object
        return reader(data, label).resources()

    return read


def _driver_probe(environ: Mapping[str, str]) -> list[NvidiaDevice]:
    """NVIDIA GPUs as the CUDA driver numbers them (CUDA_VISIBLE_DEVICES applied by the driver).

    The loader starts the driver to load anything on an NVIDIA GPU, so asking it costs nothing
    more, where starting NVML, detection's first choice, took 30 to 40 ms on the H100
    (docs/loader.md).
    """
    from .detect import cuda_driver_devices

    return cuda_driver_devices() or []


def _read_range(path: Path, offset: int, size: int | None) -> bytes:
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            data = file.read() if size is None else file.read(size)
    except OSError as error:
        raise KernelpackError(
            f"{path}: cannot read the image: {error.strerror}; reinstall kernelpack"
        ) from None
    if size is not None and len(data) != size:
        raise KernelpackError(
            f"{path}: {len(data)} bytes at offset {offset}, the index says {size}; the file is "
            "truncated: reinstall kernelpack"
        )
    return data


def _compile_target(gpu: Gpu) -> str:
    """What NVRTC (sm_XY, giving a cubin) or hipRTC (the full target id) is asked to build."""
    return str(gpu.target)


def _build_target(gpu: Gpu) -> str:
    from .targets import TargetId

    return gpu.target.processor if isinstance(gpu.target, TargetId) else str(gpu.target)


def install_hint(gpu: Gpu, catalog: Catalog) -> str:
    """The pip command for the device wheel that would fit ``gpu``: from the host index's map of
    targets to extras where it names one that fits, else the name the wheels are given."""
    from .targets import select_image

    vendor = gpu.vendor
    candidates: list[dict[str, Any]] = [
        {"vendor": vendor, "target": t, "kind": _kind_of(t)}
        for t in sorted(catalog.device_wheels)
        if t.startswith("gfx") == (vendor == "amd")
    ]
    best, _ = select_image(candidates, gpu.target)
    if best is not None:
        return f'pip install "kernelpack[{catalog.device_wheels[best["target"]]}]"'
    extra = _build_target(gpu).replace("_", "").lower()
    return f'pip install "kernelpack[{extra}]" (if a device wheel for {_build_target(gpu)} is published)'


def _kind_of(target: str) -> str:
    if target.startswith("gfx"):
        return "code_object"
    return "ptx" if target.startswith("compute_") else "cubin"


def override_hint(gpu: Gpu, built: Sequence[str]) -> str:
    """KERNELPACK_TARGET with a built target of the GPU's vendor, and for AMD the
    HSA_OVERRIDE_GFX_VERSION that makes the runtime treat the GPU as a built processor."""
    from .targets import AMD_BY_NAME, TargetId, gfx_target_version, split_gfx_target_version

    if gpu.vendor == "nvidia":
        same = [t for t in built if t.startswith("sm_")]
        pick = same[0] if same else "sm_XY"
        return f"KERNELPACK_TARGET={pick} (only if this GPU can run it)"
    processors = sorted({TargetId.parse(t).processor for t in built if t.startswith("gfx")})
    assert isinstance(gpu.target, TargetId)
    own = gpu.target.processor
    specific = [p for p in processors if not AMD_BY_NAME[p].is_generic]
    # Closest first: the same generic family (gfx1151 -> gfx1100), the same generation, any.
    family = (
        [p for p in specific if AMD_BY_NAME[p].generic == AMD_BY_NAME[own].generic is not None]
        or [p for p in specific if p[:-2] == own[:-2]]
        or specific
    )
    if not family:
        return "KERNELPACK_TARGET=<a built target> or HSA_OVERRIDE_GFX_VERSION=<major.minor.step>"
    version = ".".join(str(v) for v in split_gfx_target_version(gfx_target_version(family[0])))
    return (
        f"HSA_OVERRIDE_GFX_VERSION={version} (runs {family[0]} code; only if the GPU is close "
        f"enough) or KERNELPACK_TARGET={family[0]}"
    )


# ---- kernelpack info -----------------------------------------------------------------------


def info_report(loader: Loader) -> dict[str, Any]:
    """What ``python -m kernelpack info`` shows: GPUs, per module and GPU the image chosen and
    why (or why none, and whether run-time compilation stands in), cache and runtime libraries."""
    from .runtime import library_versions

    catalog = loader.catalog(with_device_wheels=True)
    gpus = loader.gpus()
    modules: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(catalog.modules):
        rows = modules[name] = []
        for position, gpu in enumerate(gpus):
            choice = loader.choose(name, gpu)
            row: dict[str, Any] = {
                "device": position,
                "target": str(gpu.target),
                "image": None,
                "reasons": choice.reasons,
                "instead": None,
            }
            if choice.located is not None:
                image = choice.located.image
                row["image"] = {
                    "target": image["target"],
                    "kind": image["kind"],
                    "file": image["file"],
                    "package": choice.located.origin,
                    "compression": image["compression"],
                }
            else:
                try:
                    compiler = loader.compiler_for(name, gpu, choice)
                    row["instead"] = f"run-time compile with {compiler.version()}"
                except NoImageError as error:
                    row["instead"] = str(error)
            rows.append(row)
    cache = loader.cache
    entries = cache.entries()
    return {
        "version": catalog.version,
        "packages": catalog.origins,
        "gpus": [{"device": i, **gpu.to_json()} for i, gpu in enumerate(gpus)],
        "modules": modules,
        "cache": {
            "folder": str(cache.folder),
            "entries": len(entries),
            "bytes": sum(e.size for e in entries),
            "max_bytes": cache.max_bytes,
        },
        "runtimes": library_versions(),
    }


# ---- the process-wide loader ---------------------------------------------------------------

_shared: Loader | None = None
_shared_lock = threading.Lock()


def shared_loader() -> Loader:
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = Loader()
    return _shared


def load(module: str, device: int | None = None) -> Module:
    """The module loaded on ``device`` (a position in the detected GPU list; default 0)."""
    loader = _shared if _shared is not None else shared_loader()
    return loader.load(module, device)
