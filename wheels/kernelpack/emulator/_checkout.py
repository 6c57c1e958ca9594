"""Finding and importing the emulator: a checkout of tinygrad's repository named by
KERNELPACK_AMD_EMULATOR, the one place that touches the environment, the checkout and its imports.

The emulator is not on PyPI (tinygrad's wheel has no ``test/``), so kernelpack never ships or copies
it: the user points the variable at a checkout. The emulator compiles each instruction it meets into
a small CPU program with ``clang`` (tinygrad's CPU backend), so ``clang`` must be on PATH too.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RuntimeLibraryError

ENVIRONMENT = "KERNELPACK_AMD_EMULATOR"
REPOSITORY = "https://github.com/tinygrad/tinygrad"
# The commit the emulated suite was run with (docs/amd.md); others may work.
PINNED_COMMIT = "a9069c177a9da9cca18593edf55acd2e6073cca6"
EMULATOR_FILE = Path("test", "mockgpu", "amd", "emu.py")

HOW_TO_GET = (
    f"git clone {REPOSITORY} DIR && git -C DIR checkout {PINNED_COMMIT}, then "
    f"export {ENVIRONMENT}=DIR (docs/amd.md)"
)


@dataclass(frozen=True)
class Checkout:
    """The emulator's checkout and the modules imported from it: ``emu`` (test.mockgpu.amd.emu,
    ``run_asm`` and its pieces) and ``decode`` (tinygrad.renderer.amd.decode_inst)."""

    folder: Path
    commit: str
    emu: Any
    decode: Any


def checkout_folder(environ: Mapping[str, str] | None = None) -> Path:
    """The folder KERNELPACK_AMD_EMULATOR names, checked to be a tinygrad checkout with the
    emulator; a RuntimeLibraryError that says how to get one otherwise."""
    env = os.environ if environ is None else environ
    value = env.get(ENVIRONMENT, "").strip()
    if not value:
        raise RuntimeLibraryError(
            f"{ENVIRONMENT} is not set; the AMD emulator is tinygrad's: {HOW_TO_GET}"
        )
    folder = Path(value).expanduser()
    if (
        not (folder / EMULATOR_FILE).is_file()
        or not (folder / "tinygrad" / "__init__.py").is_file()
    ):
        raise RuntimeLibraryError(
            f"{ENVIRONMENT}={value}: not a tinygrad checkout with {EMULATOR_FILE.as_posix()}; "
            f"{HOW_TO_GET}"
        )
    return folder.resolve()


def _commit(folder: Path) -> str:
    git = shutil.which("git")
    if git is None:
        return "unknown (git not found)"
    result = subprocess.run(
        [git, "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else "unknown (not a git work tree)"


def _imported_elsewhere(name: str, folder: Path) -> str:
    """The file of an already imported module ``name`` that is not the checkout's, else ""."""
    module = sys.modules.get(name)
    where = getattr(module, "__file__", None) if module is not None else None
    if where and not Path(where).resolve().is_relative_to(folder):
        return str(where)
    return ""


_loaded: dict[Path, Checkout] = {}


def open_checkout(environ: Mapping[str, str] | None = None) -> Checkout:
    """The emulator imported from the checkout (once a process)."""
    folder = checkout_folder(environ)
    found = _loaded.get(folder)
    if found is not None:
        return found
    if shutil.which("clang") is None:
        raise RuntimeLibraryError(
            "the AMD emulator compiles each instruction with clang (tinygrad's CPU backend), and "
            "no clang is on PATH; install it (apt-get install clang)"
        )
    for name in ("tinygrad", "test"):
        other = _imported_elsewhere(name, folder)
        if other:
            raise RuntimeLibraryError(
                f"module {name!r} is already imported from {other}, not from the emulator's "
                f"checkout {folder}; run the emulator in a process that has not imported it"
            )
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    try:
        emu = importlib.import_module("test.mockgpu.amd.emu")
        decode = importlib.import_module("tinygrad.renderer.amd").decode_inst
    except Exception as error:  # the checkout's own failure, named with what to do
        raise RuntimeLibraryError(
            f"{ENVIRONMENT}={folder}: importing the emulator failed ({type(error).__name__}: "
            f"{error}); {HOW_TO_GET}"
        ) from error
    _supply_glc(emu)
    found = _loaded[folder] = Checkout(folder, _commit(folder), emu, decode)
    return found


def _supply_glc(emu: Any) -> None:
    """Gives the emulator's CDNA FLAT and GLOBAL and RDNA4 VFLAT and VGLOBAL instructions a
    ``glc``, the name its memory compiler reads to decide whether an atomic returns the memory's
    old value: CDNA (gfx940 on) calls that bit sc0 and RDNA4 th:TH_ATOMIC_RETURN (bit 0 of th),
    and those classes know it by that name only, so every returning atomic left its destination
    unwritten. The property reads that bit (only atomics read glc); nothing is set where a class
    has its own ``glc`` (RDNA3's, or a later emulator's). Counted per kernel in Emulator.notes
    (kernelpack.emulator._code)."""
    returns = {
        emu.irc.FLAT: lambda instruction: instruction.sc0,
        emu.irc.GLOBAL: lambda instruction: instruction.sc0,
        emu.ir4.VFLAT: lambda instruction: instruction.th & 1,
        emu.ir4.VGLOBAL: lambda instruction: instruction.th & 1,
    }
    for inst, bit in returns.items():
        if not hasattr(inst, "glc"):
            inst.glc = property(bit)
