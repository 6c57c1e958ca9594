"""The value types of the builder's settings: how each reads a text or a TOML value.

A value comes as a text from the command line or the environment (paths relative to the current
folder) or as a TOML value from a project's ``[tool.kernelpack]`` (paths relative to the project);
each type takes both, and a value of the wrong type is a UsageError naming where it came from
(buildsys.settings declares which option has which type).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernelpack.errors import UsageError
from kernelpack.targets import parse_target

from .metadata import checked_version
from .names import check_define, check_flag


def _text_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class ValueType:
    """How an option's value is read: ``parse(value, where, base)``, where value is a text from
    the command line or the environment (base: the current folder) or a TOML value from the
    config (base: the project folder)."""

    metavar: str | None  # None: an on/off switch (--x / --no-x)
    parse: Callable[[object, str, Path], object]


def _expect(value: object, kind: type, where: str, expected: str) -> None:
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise UsageError(f"{where}: {value!r}: expected {expected}")


def _as_text(value: object, where: str, base: Path) -> str:
    _expect(value, str, where, "a string")
    assert isinstance(value, str)
    return value


def _as_path(value: object, where: str, base: Path) -> Path:
    text = _as_text(value, where, base)
    if not text:
        raise UsageError(f"{where}: an empty path; name a folder or file")
    return base / Path(text).expanduser()


def _as_list(value: object, where: str, base: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(_text_list(value))
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: {value!r}: expected a list of strings")
    return tuple(value)


def _as_targets(value: object, where: str, base: Path) -> tuple[str, ...]:
    targets = _as_list(value, where, base)
    if not targets:
        raise UsageError(f"{where}: no target given; name targets like gfx942,sm_90")
    return targets


def _as_paths(value: object, where: str, base: Path) -> tuple[Path, ...]:
    return tuple(_as_path(text, where, base) for text in _as_list(value, where, base))


def _as_defines(value: object, where: str, base: Path) -> tuple[str, ...]:
    defines = _as_list(value, where, base)
    for define in defines:
        check_define(define, where)
    return defines


def _as_flags(value: object, where: str, base: Path) -> tuple[str, ...]:
    flags = _as_list(value, where, base)
    for flag in flags:
        check_flag(flag, where)
    return flags


def _as_version(value: object, where: str, base: Path) -> str:
    return checked_version(_as_text(value, where, base), where)


def _as_vendor(value: object, where: str, base: Path) -> str:
    text = _as_text(value, where, base)
    if text not in ("amd", "nvidia"):
        raise UsageError(f"{where}: {text!r}: expected amd or nvidia")
    return text


def _as_jobs(value: object, where: str, base: Path) -> int:
    number = int(value) if isinstance(value, str) and value.isdigit() else value
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise UsageError(f"{where}: {value!r}: expected a positive number of jobs")
    return number


_SWITCH_WORDS = {"1": True, "true": True, "yes": True, "on": True}
_SWITCH_WORDS |= {"0": False, "false": False, "no": False, "off": False}


def _as_switch(value: object, where: str, base: Path) -> bool:
    if isinstance(value, str):
        if value.lower() not in _SWITCH_WORDS:
            raise UsageError(f"{where}: {value!r}: expected 1 or 0")
        return _SWITCH_WORDS[value.lower()]
    _expect(value, bool, where, "true or false")
    assert isinstance(value, bool)
    return value


def _as_kernel_lists(value: object, where: str, base: Path) -> dict[str, tuple[str, ...]]:
    """``{module = ["kernel", ...]}`` in the config; "module=kernel;module=kernel" as text (kernel
    names hold commas: ``k<float, 2>``). A key may name targets, ``"module@sm_80,compute_80"``, and
    keys and kernels may be patterns (buildsys.missing_kernels.allowed_on)."""
    if isinstance(value, str):
        table: dict[str, list[str]] = {}
        for entry in (part.strip() for part in value.split(";")):
            module, equals, kernel = entry.partition("=")
            if entry and (not equals or not module.strip() or not kernel.strip()):
                raise UsageError(f"{where}: {entry!r}: expected module=kernel;module=kernel")
            if entry:
                table.setdefault(module.strip(), []).append(kernel.strip())
        value = table
    if not isinstance(value, dict) or not all(
        isinstance(k, list) and all(isinstance(n, str) and n for n in k) for k in value.values()
    ):
        raise UsageError(f'{where}: {value!r}: expected a table {{module = ["kernel", ...]}}')
    for key in value:  # "module@sm_80,compute_80": a target that is no pattern must be one
        for target in key.partition("@")[2].split(",") if "@" in key else ():
            if not target.strip() or not any(c in target for c in "*?["):
                try:
                    parse_target(target.strip())
                except UsageError as error:
                    raise UsageError(f"{where}: {key!r}: {error}") from None
    return {module: tuple(kernels) for module, kernels in sorted(value.items())}


TEXT = ValueType("TEXT", _as_text)
VERSION = ValueType("VERSION", _as_version)
KERNEL_LISTS = ValueType("MODULE=KERNEL;...", _as_kernel_lists)
PATH = ValueType("PATH", _as_path)
TARGETS = ValueType("T,...", _as_targets)
DEFINES = ValueType("NAME[=VALUE],...", _as_defines)
PATHS = ValueType("DIR,...", _as_paths)
VENDOR = ValueType("VENDOR", _as_vendor)
JOBS = ValueType("N", _as_jobs)
SWITCH = ValueType(None, _as_switch)
COMPILE_FLAGS = ValueType("FLAG,...", _as_flags)
