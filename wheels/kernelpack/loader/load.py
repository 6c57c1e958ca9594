"""From a module name to a kernel running on the GPU: selection, verification, loading.

``load(module, device, package="kernelpack")`` does, once per (package, GPU, module) and process:

1. read the package's embedded index and, when it has no image that fits the GPU (a split
   install), merge the index fragments of that package's installed device wheels, which must be
   of the package's own version (:mod:`kernelpack.loader.catalog`); any kernelpack-built package is read
   the same way (``package=`` its import name), kernelpack's own modules included;
2. detect the GPUs (:mod:`kernelpack.devices.detect`) and find the one ``device`` names
   (:mod:`kernelpack.devices.argument`: None, "cuda:N", "hip:N", or an int on a one-vendor machine);
3. rank the module's images for the GPU's target (:func:`kernelpack.targets.select_image`) and take
   the best; with KERNELPACK_DEBUG=1 every image's verdict goes to standard error;
4. get the image's bytes (:func:`kernelpack.loader.images.read_image`): straight from the package file,
   or from the disk cache for images inside compressed bundles and for PTX already compiled by the
   driver; checked against the index's sha256 before they are loaded (a cubin the driver compiled,
   like an object compiled from source, is in no index: the cache's keyed digest checks it, and
   the cache is used only in a folder of the user's own, :mod:`kernelpack.loader.cache`);
5. without a fitting image, compile the module's embedded source with NVRTC or hipRTC (cached on
   disk by source hash, target and compiler version; a warning says so once); without a compiler
   either, a NoImageError that says what to install or set (:mod:`kernelpack.loader.hints`);
6. load it through the vendor runtime (:mod:`kernelpack.backends.runtime`) into a
   :class:`kernelpack.Module`.

Concurrent first calls for one (GPU, module) wait for a single load; later calls with the same
arguments are a dict lookup. The packages' loaders share the process's vendor runtimes and GPUs.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.cuda import CudaRuntime
from ..devices.argument import Device, device_name, resolve_device
from ..devices.detect import cuda_driver_devices, detect_gpus
from ..errors import (
    IntegrityError,
    KernelpackWarning,
    NoImageError,
    RuntimeLibraryError,
    UsageError,
    debug_enabled,
)
from ..files.digest import sha256_hex
from ..files.regular import SOURCE_FILE_LIMIT, read_regular
from ..formats.index import Index, KernelResources, ModuleEntry
from ..targets import select_image
from . import catalog as installed
from .catalog import Catalog, Choice, Located
from .images import read_image
from .module import Module
from .oncemap import OnceMap

if TYPE_CHECKING:
    from ..backends.rtc import Compiled, SourceCompiler
    from ..backends.runtime import Runtime
    from ..devices.detect import Gpu, NvidiaDevice
    from .cache import DiskCache


def _debug(message: str) -> None:
    if debug_enabled():
        print(f"kernelpack: {message}", file=sys.stderr)


class Loader:
    """Selection and loading for one process; :func:`load` uses one shared instance.

    ``package`` is the import name of the kernelpack-built package whose modules it loads. Every
    part that touches the machine can be replaced, which is how the tests run without a GPU:
    ``index`` and ``root`` (else ``<package>/_index.py`` and the package's folder), ``fragments``
    (device wheels' index fragments, else the package's entry points), ``gpus`` (else
    kernelpack.devices.detect), ``runtimes`` and ``compilers`` (vendor -> runtime / run-time compiler),
    ``cache`` (the disk cache).
    """

    def __init__(
        self,
        *,
        package: str = installed.RUNTIME_PACKAGE,
        index: Index | None = None,
        root: Path | None = None,
        fragments: Callable[[], list[tuple[Index, Path, str]]] | None = None,
        gpus: Sequence[Gpu] | Callable[[], Sequence[Gpu]] | None = None,
        runtimes: Callable[[str], Runtime] | None = None,
        compilers: Callable[[str], SourceCompiler] | None = None,
        cache: DiskCache | None = None,
    ) -> None:
        self.package = package
        self._index = index
        self._root = root
        self._fragments = fragments
        self._gpu_source = gpus
        self._gpus: list[Gpu] | None = None
        self._runtime_factory = runtimes
        self._compiler_factory = compilers
        self._cache = cache
        self._catalog: Catalog | None = None
        self._merged = False
        self._lock = threading.RLock()
        # without a factory, the process's runtimes: one per vendor whichever package loads
        self._runtimes: OnceMap[str, Runtime] = OnceMap() if runtimes else _PROCESS_RUNTIMES
        self._modules: OnceMap[tuple[str, str], Module] = OnceMap()  # (device name, module)
        self._by_argument: dict[tuple[Device, str], Module] = {}  # load()'s arguments as given
        self._said: set[tuple[str, str]] = set()

    @property
    def cache(self) -> DiskCache:
        """The disk cache given, else the default folder's, made on first use: a cubin's load
        uses none, and the cache's modules (with hashlib's OpenSSL start, hmac, fcntl) would cost
        every load about 2 ms to import."""
        with self._lock:
            if self._cache is None:
                from .cache import DiskCache  # deferred: for bundles, PTX and sources alone

                self._cache = DiskCache()
            return self._cache

    # -- what is installed and what is present

    def catalog(self, *, with_device_wheels: bool = False) -> Catalog:
        """The package's index, and with ``with_device_wheels`` the device wheels' merged in."""
        with self._lock:
            if self._catalog is None:
                index = self._index
                if index is None:
                    index = installed.package_index(self.package)
                root = self._root
                if root is None:
                    root = installed.package_folder(self.package)
                catalog = Catalog()
                if index is not None:
                    catalog.add(index, root, self.package)
                self._catalog = catalog
            if with_device_wheels and not self._merged:
                for fragment, root, origin in self._device_fragments():
                    if self._catalog.version and fragment["version"] != self._catalog.version:
                        warnings.warn(
                            f"device wheel {origin} is version {fragment['version']}, "
                            f"{self.package} is {self._catalog.version}; skipped. Reinstall it "
                            "with the same version",
                            KernelpackWarning,
                            stacklevel=3,
                        )
                        continue
                    self._catalog.add(fragment, root, origin)
                    _debug(f"merged device wheel {origin} ({root})")
                self._merged = True
            return self._catalog

    def _device_fragments(self) -> list[tuple[Index, Path, str]]:
        if self._fragments is not None:
            return self._fragments()
        return installed.device_fragments(self.package)

    def gpus(self) -> list[Gpu]:
        with self._lock:
            if self._gpus is None:
                source = self._gpu_source
                if source is None:
                    self._gpus = list(detect_gpus(nvidia_probe=_driver_probe))
                else:
                    self._gpus = list(source() if callable(source) else source)
                for gpu in self._gpus:
                    _debug(
                        f"{device_name(gpu)}: {gpu.vendor} {gpu.name or '?'} target {gpu.target}"
                        f"{' (' + gpu.override + ')' if gpu.override else ''}"
                    )
            return self._gpus

    def gpu(self, device: Device) -> Gpu:
        """The GPU ``device`` names (see :mod:`kernelpack.devices.argument`)."""
        return resolve_device(device, self.gpus())

    def runtime(self, vendor: str) -> Runtime:
        def make() -> Runtime:
            if self._runtime_factory is not None:
                return self._runtime_factory(vendor)
            return open_runtime(vendor)

        return self._runtimes.get_or_make(vendor, make)

    # -- selection

    def choose(self, module: str, gpu: Gpu) -> Choice:
        """The best image of ``module`` for ``gpu``, looking in device wheels when the package has
        none that fits (a split install), with one reason line per image considered."""
        catalog = self.catalog()
        if module not in catalog.modules:
            catalog = self.catalog(with_device_wheels=True)
        if module not in catalog.modules:
            known = ", ".join(sorted(catalog.modules)) or (
                "none (no index installed: `python -m buildsys build` makes one in a source tree)"
            )
            raise UsageError(f"no kernel module {module!r} in {self.package}; modules: {known}")
        located = catalog.images[module]
        v6 = None
        if gpu.vendor == "amd":
            # deferred: the runtime's code object version, which only AMD's generic images need
            from ..backends.support import amd_code_object_v6

            v6 = amd_code_object_v6()
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

    def load(self, module: str, device: Device = None) -> Module:
        """``module`` loaded on the GPU ``device`` names, once per process (see the docstring)."""
        try:
            found = self._by_argument.get((device, module))
        except TypeError:  # unhashable: resolve_device below says what a device can be
            found = None
        if found is not None and type(device) is not bool:  # True == 1, but is no device
            return found
        gpu = self.gpu(device)
        loaded = self._modules.get_or_make(
            (device_name(gpu), module), lambda: self._load(module, gpu)
        )
        self._by_argument[(device, module)] = loaded
        return loaded

    def _load(self, module: str, gpu: Gpu) -> Module:
        choice = self.choose(module, gpu)
        entry = self.catalog().modules[module]
        compiler = None
        if choice.located is None:
            compiler = self.compiler_for(module, gpu, choice)
        runtime = self.runtime(gpu.vendor)
        ordinal = runtime.ordinal_for(gpu.location or None, gpu.index)
        if choice.located is None:
            assert compiler is not None
            compiled, image, why = self._compiled(module, entry, gpu, compiler)
            data = compiled.image
            index_symbols = self._vendor_symbols(module, gpu.vendor)
            symbols = {**index_symbols, **compiled.symbols}
            resources = _resources_of(data, gpu.vendor, image, symbols)
            lookup = _compiled_lookup(image, compiled, index_symbols)
        else:
            located = choice.located
            data = self.image_bytes(located)
            symbols = located.image["symbols"]
            recorded = located.image["kernels"]
            resources = lambda: recorded  # noqa: E731
            image = located.label
            why = next((r for r in choice.reasons if "selected" in r), "")
            lookup = None
            if located.image["kind"] == "ptx":
                data = self._driver_compiled(runtime, ordinal, located, gpu)
                if not recorded and data.startswith(b"\x7fELF"):
                    resources = _resources_of(data, gpu.vendor, f"{image} compiled", symbols)
        loaded = runtime.load(ordinal, data)
        _debug(f"{module}: loaded {image} on {device_name(gpu)} (runtime ordinal {ordinal})")
        return Module(
            module,
            gpu,
            image,
            why,
            entry["kernels"],
            resources,
            runtime,
            loaded,
            symbols,
            image_symbols=choice.located is not None,
            lookup=lookup,
        )

    def _vendor_symbols(self, module: str, vendor: str) -> dict[str, str]:
        """The kernels' symbols in an image of ``vendor``, for an object compiled at run time from
        the same source (the same front end mangles alike); empty when the index has none."""
        for located in self.catalog(with_device_wheels=True).images.get(module, []):
            if located.image["vendor"] == vendor:
                return located.image["symbols"]
        return {}

    def image_bytes(self, located: Located) -> bytes:
        """The image's bytes, checked against the index's sha256; an image inside a compressed
        bundle is kept in the disk cache, so each is decompressed once per machine."""
        image = located.image
        compressed = image["compression"] != "none"
        if compressed:
            cached = self.cache.get(image["sha256"])
            if cached is not None and sha256_hex(cached) == image["sha256"]:
                _debug(f"{located.label}: from the disk cache")
                return cached
        data = read_image(located.root, image)
        _debug(f"{located.label}: sha256 verified")
        if compressed:
            self.cache.put(image["sha256"], data)
        return data

    def _driver_compiled(self, runtime: Runtime, ordinal: int, located: Located, gpu: Gpu) -> bytes:
        """PTX compiled by the driver for this GPU, kept in the disk cache (keyed by the PTX's hash,
        the GPU's target and the driver's version)."""
        from .cache import cache_key  # deferred: for bundles, PTX and sources alone

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
                # deferred: the run-time compilers' binding, for a module no image fits
                from ..backends.rtc import open_compiler

                return open_compiler(gpu.vendor)
            except RuntimeLibraryError as error:
                problem = str(error)
        from .hints import no_image_message  # deferred: the advice, for a load that fails

        raise NoImageError(no_image_message(choice, self.catalog(), problem))

    def _compiled(
        self, module: str, entry: ModuleEntry, gpu: Gpu, compiler: SourceCompiler
    ) -> tuple[Compiled, str, str]:
        """The module's source compiled for ``gpu`` (or from the disk cache: the object with the
        symbols its compiler gave the index's kernel names), its label and why."""
        target = _compile_target(gpu)
        version = compiler.version()
        source = self.source_text(module, entry, gpu.vendor)
        kernels = sorted(entry["kernels"])
        names = sha256_hex("\n".join(kernels).encode())
        from .cache import cache_key  # deferred: for bundles, PTX and sources alone

        key = cache_key("source", sha256_hex(source.encode()), names, target, version)
        # deferred: the run-time compilers' binding, for a module no image fits
        from ..backends.rtc import Compiled

        cached = self.cache.get(key)
        compiled = Compiled.from_bytes(cached) if cached is not None else None
        if compiled is None:
            _debug(f"{module}: compiling its source with {version} for {target}")
            # NVRTC's symbols for internal kernels are its own; clang's are the index's
            # (docs/loader.md, "Run-time compilation"), so hipRTC is asked where there are none
            ask = gpu.vendor == "nvidia" or not self._vendor_symbols(module, gpu.vendor)
            compiled = compiler.compile(source, module, target, kernels if ask else [])
            self.cache.put(key, compiled.to_bytes())
        if compiled.note:
            _debug(f"{module}: {compiled.note}")
        if (module, target) not in self._said:
            self._said.add((module, target))
            kept = "memory" if self.cache.in_memory else self.cache.folder
            warnings.warn(
                f"kernelpack: no prebuilt image of module {module} fits {gpu.target}; compiled its "
                f"source with {version} (cached in {kept}). Install the device wheel "
                f"or rebuild with {target} to skip this",
                KernelpackWarning,
                stacklevel=4,
            )
        return compiled, f"{target} compiled by {version}", "no prebuilt image fits"

    def source_text(self, module: str, entry: ModuleEntry, vendor: str) -> str:
        """The module's CUDA source, checked against the index; for AMD the builder's hipified
        copy beside it where there is one (hipRTC compiles HIP; plain CUDA only in part)."""
        path = self.catalog().sources[module]
        cuda = _installed_source(path, "the module's source")
        digest = sha256_hex(cuda)
        if digest != entry["source_sha256"]:
            raise IntegrityError(
                f"{path}: the source's sha256 is {digest}, the index says "
                f"{entry['source_sha256']}; the installed file was changed or damaged: "
                "reinstall kernelpack"
            )
        hip = path.with_suffix(".hip")
        if vendor == "amd" and hip.is_file():
            return _installed_source(hip, "the hipified source").decode("utf-8")
        return cuda.decode("utf-8")


def _installed_source(path: Path, what: str) -> bytes:
    """An installed source file's bytes: a regular file of bounded size (files.regular), else an
    IntegrityError that says to reinstall (the install is damaged, not the user's input)."""
    try:
        return read_regular(path, limit=SOURCE_FILE_LIMIT, what=what)
    except (OSError, UsageError) as error:
        raise IntegrityError(
            f"{path}: cannot read {what} ({error}); reinstall kernelpack"
        ) from None


def _resources_of(
    data: bytes, vendor: str, label: str, symbols: Mapping[str, str]
) -> Callable[[], dict[str, KernelResources]]:
    """Reads a compiled object's per-kernel resources when called (see Module.resources), by
    kernel name (``symbols``: name -> symbol; a symbol not there is its own name)."""

    def read() -> dict[str, KernelResources]:
        # deferred: the ELF readers, for kernel.info of a run-time compiled image only
        from ..formats import read_code_object, read_cubin

        reader = read_cubin if vendor == "nvidia" else read_code_object
        names = {symbol: name for name, symbol in symbols.items()}
        found = reader(data, label).resources()
        return {names.get(symbol, symbol): figures for symbol, figures in found.items()}

    return read


def _compiled_lookup(
    label: str, compiled: Compiled, recorded: Mapping[str, str]
) -> Callable[[str, str], str]:
    """For a kernel of a module compiled at run time that the runtime did not find: how its
    symbol was chosen, and what to do (docs/loader.md, "Run-time compilation")."""

    def explain(name: str, symbol: str) -> str:
        if name in compiled.symbols:
            how = "the symbol its compiler gave its name"
        elif name in recorded:
            how = (
                "the symbol of the prebuilt images in the index, which a run-time compile "
                "reproduces except for a kernel in an unnamed namespace (named after a hash "
                "of the translation unit)"
            )
        else:
            how = "its own name (the index records no symbol for it on this vendor)"
        note = f"; {compiled.note}" if compiled.note else ""
        return (
            f"the module was compiled at run time ({label}) and the kernel looked up as "
            f"{symbol!r}, {how}{note}; install the device wheel with a prebuilt image for "
            "this GPU (python -m kernelpack info names it)"
        )

    return explain


def open_runtime(vendor: str) -> Runtime:
    """The runtime for a vendor's GPUs ("nvidia" or "amd")."""
    if vendor == "nvidia":
        return CudaRuntime()
    from ..backends.hip import HipRuntime  # deferred: HIP's binding, for AMD GPUs only

    return HipRuntime()


def _driver_probe(environ: Mapping[str, str]) -> list[NvidiaDevice]:
    """NVIDIA GPUs as the CUDA driver numbers them (CUDA_VISIBLE_DEVICES applied by the driver).

    The loader starts the driver to load anything on an NVIDIA GPU, so asking it costs nothing
    more, where starting NVML, detection's first choice, costs tens of milliseconds
    (docs/loader.md has the measurement).
    """
    return cuda_driver_devices() or []


def _compile_target(gpu: Gpu) -> str:
    """What NVRTC (sm_XY, giving a cubin) or hipRTC (the full target id) is asked to build."""
    return str(gpu.target)


# ---- every installed package, for info and doctor ---------------------------------------------


def installed_loaders(gpus: Sequence[Gpu]) -> tuple[list[Loader], list[installed.Unreadable]]:
    """One Loader per installed kernelpack-built package (:func:`catalog.kernelpack_packages`)
    whose index reads, device wheels merged, and each package that does not read with the line
    that says why: a stale ``kernelpack.packages`` registration or a damaged index is that
    package's problem alone, so ``info`` and ``doctor`` still list every other package."""
    loaders: list[Loader] = []
    unreadable: list[installed.Unreadable] = []
    for package in installed.kernelpack_packages():
        loader = Loader(package=package, gpus=gpus)
        try:
            installed.package_folder(package)
        except UsageError:
            distribution = installed.package_registrations().get(package, "?")
            unreadable.append(
                installed.Unreadable(
                    package,
                    distribution,
                    f"package {package!r} is registered (entry point group "
                    f"{installed.PACKAGES_ENTRY_POINTS}, distribution {distribution}) but no "
                    f"importable package has that name: reinstall {distribution}, or uninstall "
                    "it if it is gone",
                )
            )
            continue
        try:
            loader.catalog(with_device_wheels=True)
        except UsageError as error:
            distribution = installed.package_registrations().get(package, package)
            unreadable.append(installed.Unreadable(package, distribution, str(error)))
            continue
        loaders.append(loader)
    return loaders, unreadable


# ---- the process-wide loaders: one per package, sharing the runtimes and the GPUs ------------

_PROCESS_RUNTIMES: OnceMap[str, Runtime] = OnceMap()
_shared: dict[str, Loader] = {}
_shared_lock = threading.Lock()


def shared_loader(package: str = installed.RUNTIME_PACKAGE) -> Loader:
    """The process's loader of ``package`` (the first one made detects the GPUs for all)."""
    found = _shared.get(package)
    if found is None:
        with _shared_lock:
            found = _shared.get(package)
            if found is None:
                first = next(iter(_shared.values()), None)
                found = Loader(package=package, gpus=first.gpus if first is not None else None)
                _shared[package] = found
    return found


def load(module: str, device: Device = None, *, package: str = installed.RUNTIME_PACKAGE) -> Module:
    """The module of ``package`` (a kernelpack-built package's import name; kernelpack's own by
    default) loaded on ``device``: None (the first GPU), "cuda:N", "hip:N", or an int where every
    GPU is of one vendor (:mod:`kernelpack.devices.argument`). A package offers its own as a one-liner:
    ``def load(module, device=None): return kernelpack.load(module, device, package=__name__)``."""
    loader = _shared.get(package)
    if loader is None:
        loader = shared_loader(package)
    return loader.load(module, device)
