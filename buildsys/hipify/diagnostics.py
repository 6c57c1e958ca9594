"""Diagnostics: one line each, ``file:line:col: severity[code]: message``, like a compiler's.

Each class of finding has its own code, so a reviewer can silence exactly what was reviewed with a
comment on the line: ``// hipify: allow(warp-size)``, ``// hipify: allow(warp-size, ballot-32bit)``,
or ``// hipify: allow(wave32)`` for every wave-size class at once (the line was written for 32-lane
warps on purpose). Any code may be allowed, errors included: a reviewer may know that an inline asm
sits in a branch HIP never compiles.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Severity(Enum):
    ERROR = "error"  # the translated file will not compile or cannot mean the same
    WARNING = "warning"  # compiles, but may mean something else on a wave64 or wave32 target
    NOTE = "note"  # a translation choice worth knowing about


@dataclass(frozen=True)
class Code:
    name: str
    severity: Severity
    wave_size: bool  # one of the classes that assume a 32-lane warp
    summary: str


CODES: tuple[Code, ...] = (
    Code(
        "warp-size",
        Severity.WARNING,
        True,
        "a literal 32, 31, 0x1f, >> 5 or % 32 used as the warp size, a lane or a warp id",
    ),
    Code(
        "shfl-offset16",
        Severity.WARNING,
        True,
        "a shuffle reduction that starts at offset 16 or stops at 32 lanes",
    ),
    Code("ballot-32bit", Severity.WARNING, True, "a ballot or active mask stored in 32 bits"),
    Code(
        "tile32",
        Severity.WARNING,
        True,
        "a 32-thread cooperative-groups tile, a whole warp on NVIDIA but half a wave64",
    ),
    Code(
        "warp-mask",
        Severity.WARNING,
        True,
        "a 32-bit lane mask: a partial literal mask, or 0xffffffff compared or combined with lane masks",
    ),
    Code(
        "mask-dropped",
        Severity.NOTE,
        False,
        "a lane mask held in a variable was dropped: the HIP form acts on the active lanes",
    ),
    Code(
        "warp-sync-builtins",
        Severity.NOTE,
        False,
        "HIP_ENABLE_WARP_SYNC_BUILTINS was defined for cooperative-groups tile votes",
    ),
    Code(
        "arch-feature",
        Severity.NOTE,
        False,
        "inline PTX behind an architecture guard: the source's alternative branch is compiled",
    ),
    Code(
        "register-removed",
        Severity.NOTE,
        False,
        "the register storage class, which C++17 removed (nvcc accepts it, clang refuses it), was removed",
    ),
    Code(
        "texture-targets",
        Severity.WARNING,
        False,
        "a texture fetch the compat layer does not carry (Lod, Grad, Cubemap, gather) or a surface "
        "access, which AMD GPUs without image instructions (gfx942, gfx950) lack",
    ),
    Code("inline-asm", Severity.ERROR, False, "inline PTX assembly, which cannot be translated"),
    Code(
        "unsupported-api",
        Severity.ERROR,
        False,
        "a removed or unsupported CUDA API with no HIP counterpart",
    ),
    Code(
        "wmma-portable",
        Severity.WARNING,
        False,
        "WMMA (mma.h) runs on kernelpack's portable implementation, without matrix cores",
    ),
    Code("untranslated", Severity.WARNING, False, "a cuda/cu identifier left untranslated"),
    Code(
        "bad-allow", Severity.WARNING, False, "a hipify: allow(...) comment names an unknown code"
    ),
)
CODES_BY_NAME: dict[str, Code] = {code.name: code for code in CODES}
WAVE_SIZE_CODES = frozenset(code.name for code in CODES if code.wave_size)
ALLOW_ALL_WAVE = "wave32"

_ALLOW_RE = re.compile(r"hipify:\s*allow\(([^)]*)\)")


@dataclass(frozen=True, order=True)
class Diagnostic:
    path: str
    line: int
    col: int
    code: str
    message: str

    @property
    def severity(self) -> Severity:
        return CODES_BY_NAME[self.code].severity

    def format(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.severity.value}[{self.code}]: {self.message}"

    def as_json(self) -> dict[str, object]:
        return {
            "file": self.path,
            "line": self.line,
            "col": self.col,
            "severity": self.severity.value,
            "code": self.code,
            "message": self.message,
        }


def allowed_codes(comment: str) -> frozenset[str]:
    """The codes a ``hipify: allow(...)`` comment silences; ``wave32`` stands for all wave classes."""
    codes: set[str] = set()
    for match in _ALLOW_RE.finditer(comment):
        for name in match.group(1).split(","):
            name = name.strip()
            if name == ALLOW_ALL_WAVE:
                codes |= WAVE_SIZE_CODES
            elif name:
                codes.add(name)
    return frozenset(codes)
