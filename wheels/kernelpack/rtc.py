"""NVRTC and hipRTC: a module's CUDA source compiled for one GPU when no prebuilt image fits.

The loader keeps what they make in the disk cache, keyed by the source's hash, the target and the
compiler's version (:meth:`SourceCompiler.version`), so each GPU compiles a module once.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from .errors import CompileError
from .libraries import library_file, open_library
from .runtime import c_string


class SourceCompiler:
    """NVRTC or hipRTC: a module's CUDA source compiled for one GPU when no prebuilt image fits."""

    def __init__(self, kind: str, lib: ctypes.CDLL | None = None) -> None:
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

    def compile(self, source: str, name: str, target: str) -> bytes:
        """A cubin (NVRTC, target sm_XY) or an AMDGPU code object (hipRTC, target gfx...)."""
        program = ctypes.c_void_p()
        self._check(
            self._fn("CreateProgram")(
                ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None
            ),
            "CreateProgram",
        )
        try:
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
            return output.raw
        finally:
            self._fn("DestroyProgram")(ctypes.byref(program))


def open_compiler(vendor: str) -> SourceCompiler:
    """NVRTC for NVIDIA GPUs, hipRTC for AMD ones (RuntimeLibraryError where it is missing)."""
    return SourceCompiler("nvrtc" if vendor == "nvidia" else "hiprtc")
