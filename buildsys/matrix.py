"""arch_matrix.toml: which targets to build, validated once, in the order written.

Every target the builder, the CI matrix and the wheels know of comes from here. Validation is
strict because a typo in a target name would otherwise surface as a missing image on a user's GPU:
unknown keys, wrong types, unknown targets and duplicates (after family expansion) are each one
MatrixError line naming the file, the key and the value, with the nearest known target suggested.
The file may be anything a user or a tool wrote, so the line stays one short line: values are
echoed shortened, a name longer than any target is refused before the nearest one is looked for
(that search costs the name's length times every known name), and arrays nested too deeply for
the TOML reader are one error, not a RecursionError.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kernelpack.errors import UsageError
from kernelpack.files.regular import read_toml
from kernelpack.loader.images import KindName
from kernelpack.targets import TargetId, suggest, written_kind
from kernelpack.targets.processors import AMD_BY_NAME, AMD_FAMILIES, NVIDIA_BY_NAME

from . import REPO_ROOT
from .errors import MatrixError

DEFAULT_MATRIX = REPO_ROOT / "arch_matrix.toml"
MATRIX_LIMIT = 16 * 2**20  # bytes of a target matrix read at most (a few lines of target names)

# The schema of arch_matrix.toml: table -> key -> what the key holds.
_SCHEMA: dict[str, tuple[str, ...]] = {"amd": ("targets",), "nvidia": ("targets", "ptx")}
MAX_TARGET_NAME = 64  # the longest target id, "gfx908:sramecc+:xnack-", has 22 characters
_PTX_NAMES = {f"compute_{a.name[3:]}": a for a in NVIDIA_BY_NAME.values() if not a.arch_specific}


_ECHO = reprlib.Repr()
_ECHO.maxlevel, _ECHO.maxlist, _ECHO.maxstring, _ECHO.maxother = 2, 4, 40, 40


def _echo(value: object) -> str:
    """A value of the file as an error line shows it: repr, shortened, never nested deeply."""
    return _ECHO.repr(value)


def _short(text: str) -> str:
    """A name of the file as an error line shows it: at most 40 characters and the length."""
    return text if len(text) <= 40 else f"{text[:37]}... ({len(text)} characters)"


@dataclass(frozen=True)
class MatrixTarget:
    """One target of the matrix: one build job, one CI shard."""

    vendor: Literal["amd", "nvidia"]
    target: str  # canonical: "gfx90a:xnack+", "sm_90", "compute_80"
    kind: KindName
    source: str  # what the file said ("gfx110X" for a target that came from a family)

    @property
    def shard(self) -> str:
        """A name safe for files and CI artifact names."""
        return self.target.replace(":", "_")

    def as_json(self) -> dict[str, object]:
        entry: dict[str, object] = {
            "vendor": self.vendor,
            "target": self.target,
            "kind": self.kind,
            "shard": self.shard,
        }
        if self.vendor == "amd":
            entry["wavefront"] = TargetId.parse(self.target).info.wavefront
        return entry


@dataclass(frozen=True)
class Matrix:
    path: Path
    targets: tuple[MatrixTarget, ...]

    @property
    def amd(self) -> tuple[MatrixTarget, ...]:
        return tuple(t for t in self.targets if t.vendor == "amd")

    @property
    def nvidia(self) -> tuple[MatrixTarget, ...]:
        return tuple(t for t in self.targets if t.vendor == "nvidia")

    def select(self, names: Sequence[str]) -> Matrix:
        """The targets named on a command line (``--targets gfx942,sm_90``), families expanded.

        A name outside the matrix is still accepted when it is a valid target: a maintainer may
        build one more target by hand without editing the file.
        """
        chosen: list[MatrixTarget] = []
        for name in names:
            for target in _expand("--targets", name.strip(), _vendor_of(name.strip())):
                if target not in chosen:
                    chosen.append(target)
        if not chosen:
            raise MatrixError("--targets: no target given")
        return Matrix(self.path, tuple(chosen))

    def as_json(self) -> dict[str, list[dict[str, object]]]:
        return {"include": [t.as_json() for t in self.targets]}


def load_matrix(path: Path | None = None) -> Matrix:
    path = path or DEFAULT_MATRIX
    try:
        data = read_toml(path, limit=MATRIX_LIMIT, what="a target matrix (TOML)")
    except (FileNotFoundError, NotADirectoryError):
        default = (
            DEFAULT_MATRIX if DEFAULT_MATRIX.is_file() else "arch_matrix.toml of its repository"
        )
        raise MatrixError(
            f'{path}: no such target matrix; write one ([amd] targets = ["gfx942"], [nvidia] '
            f'targets = ["sm_90"]; kernelpack\'s default set is {default}; docs/your-kernels.md '
            "step 3), or name another with --matrix or [tool.kernelpack] matrix"
        ) from None
    except UsageError as error:  # not a regular file, unreadable, not UTF-8 TOML, too deep
        raise MatrixError(str(error)) from None

    for table, value in data.items():
        if table not in _SCHEMA:
            raise MatrixError(
                f"{path}: unknown table [{_short(table)}]; known: {', '.join(_SCHEMA)}"
            )
        if not isinstance(value, dict):
            raise MatrixError(f"{path}: {table}: expected a table, got {type(value).__name__}")
        for key in value:
            if key not in _SCHEMA[table]:
                raise MatrixError(
                    f"{path}: unknown key {table}.{_short(key)}; known: "
                    + ", ".join(f"{table}.{k}" for k in _SCHEMA[table])
                )

    targets: list[MatrixTarget] = []
    seen: dict[str, str] = {}
    for table, keys in _SCHEMA.items():
        for key in keys:
            where = f"{table}.{key}"
            names = data.get(table, {}).get(key, [])
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise MatrixError(
                    f"{path}: {where}: expected a list of strings, got {_echo(names)}"
                )
            for position, name in enumerate(names):
                location = f"{path}: {where}[{position}]"
                expanded = _expand(location, name, "ptx" if key == "ptx" else table)
                for target in expanded:
                    if target.target in seen:
                        raise MatrixError(
                            f"{location}: duplicate target {target.target}"
                            f" (also from {seen[target.target]}); list each target once"
                        )
                    seen[target.target] = name
                    targets.append(target)
    if not targets:
        raise MatrixError(f"{path}: no targets; add amd.targets or nvidia.targets")
    return Matrix(path, tuple(targets))


def _vendor_of(name: str) -> str:
    """The matrix table a name written on the command line belongs to (amd, nvidia or ptx)."""
    return {"amd": "amd", "sm": "nvidia", "compute": "ptx"}[written_kind(name)]


def _expand(location: str, name: str, vendor: str) -> Iterable[MatrixTarget]:
    """One written name as targets: a family becomes its processors, others are canonicalised."""
    if len(name) > MAX_TARGET_NAME:
        raise MatrixError(
            f"{location}: {_short(name)}: not a target name (target names have at most "
            f"{MAX_TARGET_NAME} characters, such as gfx90a:xnack+, sm_90 or compute_80)"
        )
    if vendor == "amd":
        if name in AMD_FAMILIES:
            return [MatrixTarget("amd", p, "code_object", name) for p in AMD_FAMILIES[name]]
        try:
            target = TargetId.parse(name)
        except UsageError as error:
            known = {**AMD_BY_NAME, **AMD_FAMILIES}
            processor = name.split(":")[0]
            if processor in AMD_BY_NAME:
                raise MatrixError(f"{location}: {error}") from None
            raise MatrixError(
                f"{location}: {processor}: unknown AMD target{suggest(processor, known)}"
            ) from None
        return [MatrixTarget("amd", str(target), "code_object", name)]
    if vendor == "nvidia":
        if name not in NVIDIA_BY_NAME:
            raise MatrixError(
                f"{location}: {name}: unknown NVIDIA target{suggest(name, NVIDIA_BY_NAME)}"
            )
        return [MatrixTarget("nvidia", name, "cubin", name)]
    if name not in _PTX_NAMES:
        raise MatrixError(
            f"{location}: {name}: unknown PTX target (expected compute_XY)"
            f"{suggest(name, _PTX_NAMES)}"
        )
    return [MatrixTarget("nvidia", name, "ptx", name)]
