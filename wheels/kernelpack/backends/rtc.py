"""NVRTC and hipRTC: a module's CUDA source compiled for one GPU when no prebuilt image fits.

The loader keeps what they make in the disk cache, keyed by the source's hash, the target and the
compiler's version (:meth:`SourceCompiler.version`), so each GPU compiles a module once.

A kernel is looked up by its symbol. The compiler can be asked for the symbols of the kernels
it is given by name (a name expression ``&<name>``, then the lowered name): the index's names are
C++ as the CUDA source spells them (docs/loader.md, "Kernel names"). The loader asks NVRTC always
(only it knows the symbol of a kernel in an unnamed namespace, which nvcc and NVRTC name after
different hashes of the translation unit), hipRTC only where the index has no AMD symbols (clang's
are the same in every one-file compile; docs/loader.md, "Run-time compilation").
"""

from __future__ import annotations

import ctypes
import json
import re
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..devices.libraries import c_string, library_file, open_library
from ..errors import CompileError

# What no name expression can spell: a closure type, an unnamed type, an ABI tag, a floating-point
# template argument as the demangler prints it, and a kernel named after its unit (linked
# modules, which carry no source anyway).
_UNSPELLABLE = re.compile(r"[{}\[\]'@$]|\blambda\b|\(anonymous |\bunnamed\b")


def name_expression(kernel: str) -> str | None:
    """The name expression that asks NVRTC for ``kernel``'s symbol (``&ops::add<float>``), or
    None for a name no C++ expression spells (then the index's symbol stands)."""
    return None if _UNSPELLABLE.search(kernel) else "&" + kernel


_CACHE_MAGIC = b"KPRTC1"  # a Compiled in the disk cache: magic, JSON length (u32 LE), JSON, object


class Compiled(NamedTuple):
    """A module compiled at run time: the object, each kernel's symbol in it as the compiler
    named it (NVRTC's lowered names; empty for hipRTC), and ``note``: why the compiler named
    none where it was asked to (empty otherwise)."""

    image: bytes
    symbols: dict[str, str]
    note: str = ""

    def to_bytes(self) -> bytes:
        """The disk cache's entry: the names travel with the object they name."""
        names = json.dumps({"symbols": self.symbols, "note": self.note}, sort_keys=True).encode()
        return _CACHE_MAGIC + struct.pack("<I", len(names)) + names + self.image

    @classmethod
    def from_bytes(cls, data: bytes) -> Compiled | None:
        """An entry :meth:`to_bytes` wrote, or None for anything else (a miss: compiled again)."""
        head = len(_CACHE_MAGIC) + 4
        if len(data) < head or not data.startswith(_CACHE_MAGIC):
            return None
        (size,) = struct.unpack_from("<I", data, len(_CACHE_MAGIC))
        try:
            names = json.loads(data[head : head + size])
            symbols, note = names["symbols"], names["note"]
        except (ValueError, KeyError, TypeError):
            return None
        if not (isinstance(symbols, dict) and isinstance(note, str)):
            return None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in symbols.items()):
            return None
        return cls(data[head + size :], symbols, note)


class SourceCompiler:
    """NVRTC or hipRTC: a module's CUDA source compiled for one GPU when no prebuilt image fits."""

    def __init__(self, kind: str, lib: Any = None) -> None:
        self.kind = kind
        self._prefix = kind  # "nvrtc" / "hiprtc": the two APIs differ only in their prefix
        self._lib = lib if lib is not None else open_library(kind)
        self._fn("GetErrorString").restype = ctypes.c_char_p
        self._fn("GetErrorString").argtypes = (ctypes.c_int,)

    def _fn(self, name: str) -> Any:
        return getattr(self._lib, self._prefix + name)

    def _check(self, code: int, call: str, log: str = "") -> None:
        if code != 0:
            message = c_string(self._fn("GetErrorString")(code))
            detail = f":\n{log.strip()}" if log.strip() else ""
            raise CompileError(f"{self.kind} {call} failed: {message} ({code}){detail}")

    def version(self) -> str:
        """ "nvrtc 13.0 (libnvrtc.so.13.0.88)": part of the disk cache's key for compiled images."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self._fn("Version")(ctypes.byref(major), ctypes.byref(minor)), "Version")
        file = Path(library_file(self._lib, self._prefix + "Version")).name
        return f"{self.kind} {major.value}.{minor.value} ({file})"

    def compile(self, source: str, name: str, target: str, kernels: Sequence[str] = ()) -> Compiled:
        """A cubin (NVRTC, target sm_XY) or an AMDGPU code object (hipRTC, target gfx...), with
        the compiler's symbol for each of ``kernels`` (index names) that a name expression spells
        (``nvrtcAddNameExpression`` / ``hiprtcAddNameExpression``, then ``...GetLoweredName``).

        Should the compiler reject the name expressions (a name the rule spells that the source
        cannot resolve), the source is compiled once more without them, so a module that
        compiles is never refused for its names; ``note`` then says why the index's symbols
        stand in."""
        expressions = {k: e for k in kernels if (e := name_expression(k)) is not None}
        try:
            return self._compile(source, name, target, expressions)
        except CompileError as error:
            if not expressions:
                raise
            rejected = str(error)
        compiled = self._compile(source, name, target, {})
        first = next((line for line in rejected.splitlines()[1:] if "error" in line), rejected)
        note = (
            f"{self.kind} rejected the kernels' name expressions ({first.strip()}), so no kernel "
            "was looked up by the symbol it gave"
        )
        return compiled._replace(note=note)

    def _compile(
        self, source: str, name: str, target: str, expressions: dict[str, str]
    ) -> Compiled:
        program = ctypes.c_void_p()
        self._check(
            self._fn("CreateProgram")(
                ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None
            ),
            "CreateProgram",
        )
        try:
            for expression in expressions.values():
                self._check(
                    self._fn("AddNameExpression")(program, expression.encode()),
                    f"AddNameExpression({expression})",
                )
            arch = (
                f"--gpu-architecture={target}"
                if self.kind == "nvrtc"
                else f"--offload-arch={target}"
            )
            options = [arch.encode(), b"-std=c++17"]
            code = self._fn("CompileProgram")(
                program, len(options), (ctypes.c_char_p * len(options))(*options)
            )
            log_size = ctypes.c_size_t()
            self._fn("GetProgramLogSize")(program, ctypes.byref(log_size))
            log = ctypes.create_string_buffer(max(log_size.value, 1))
            self._fn("GetProgramLog")(program, log)
            self._check(code, f"compile of {name} for {target}", c_string(log.value))
            get_size, get = (
                ("GetCUBINSize", "GetCUBIN") if self.kind == "nvrtc" else ("GetCodeSize", "GetCode")
            )
            size = ctypes.c_size_t()
            self._check(self._fn(get_size)(program, ctypes.byref(size)), get_size)
            output = ctypes.create_string_buffer(size.value)
            self._check(self._fn(get)(program, output), get)
            symbols = {}
            for kernel, expression in expressions.items():
                lowered = ctypes.c_char_p()
                self._check(
                    self._fn("GetLoweredName")(program, expression.encode(), ctypes.byref(lowered)),
                    f"GetLoweredName({expression})",
                )
                symbols[kernel] = c_string(lowered.value)
            return Compiled(output.raw, symbols)
        finally:
            self._fn("DestroyProgram")(ctypes.byref(program))


def open_compiler(vendor: str) -> SourceCompiler:
    """NVRTC for NVIDIA GPUs, hipRTC for AMD ones (RuntimeLibraryError where it is missing)."""
    return SourceCompiler("nvrtc" if vendor == "nvidia" else "hiprtc")
