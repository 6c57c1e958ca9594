"""The builder's settings: one object for build, merge and wheels, resolved in one place.

Precedence, later wins:

1. the defaults written in :class:`BuildSettings`;
2. the project's config: the ``[tool.kernelpack]`` table of ``<project>/pyproject.toml`` (keys are
   the option names with dashes, ``cache-dir = "..."``, but ``device-dir`` for ``out``, named apart
   from ``dist``, the wheels' folder; :data:`RENAMED_CONFIG_KEYS` still read, with a notice;
   paths there are relative to the project
   and, links followed, stay inside it, as the defaults must: the project is untrusted input);
   per-module flags in ``[tool.kernelpack.modules.<module>]`` (``flags``, ``defines``,
   ``include-dirs``);
3. the environment: ``KERNELPACK_BUILD_<OPTION>`` for each option (``KERNELPACK_BUILD_TARGETS=
   gfx942,sm_90``, ``KERNELPACK_BUILD_COMPRESS=0``), which is how CMake (``pip wheel``), nox and CI
   pass settings through tools that do not forward arguments;
4. the command line.

Each option is declared once, in :data:`OPTIONS`: its command-line flag, environment variable and
config key are derived from its name, and it says which commands take it. An unknown key in the
config, or a value of the wrong type anywhere, is a UsageError (exit 2) naming where it came from
(each option's type reads its value: buildsys.setting_types). The project folder (``--project``,
default: buildsys.project.default_project) comes from the command line or the environment only,
since it says where the config is.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kernelpack.errors import UsageError
from kernelpack.files.paths import user_cache_folder
from kernelpack.loader.images import IMAGE_KINDS

from . import REPO_ROOT
from .project import (
    check_inside_project,
    default_project,
    default_project_words,
    package_version,
    read_pyproject,
)
from .scm_version import cached_version
from .setting_types import (
    COMPILE_FLAGS,
    DEFINES,
    JOBS,
    KERNEL_LISTS,
    PATH,
    PATHS,
    SWITCH,
    TARGETS,
    TEXT,
    VENDOR,
    VERSION,
    ValueType,
)

ENV_PREFIX = "KERNELPACK_BUILD_"
CONFIG_TABLE = "tool.kernelpack"

# The compile flags of each kind of image, from kernelpack's image-kind table (recorded in the
# index); jobs.compile_argv adds the per-job parts: target, defines, include folders, output.
FLAGS: dict[str, tuple[str, ...]] = {kind.name: kind.compile_flags for kind in IMAGE_KINDS}


# The defaults that live inside a project folder, relative to it.
PROJECT_LAYOUT = {
    "out": "build/device",
    "dist": "dist",
    "sources": "kernel_sources",
    "matrix": "arch_matrix.toml",
}


def environment_epoch(environ: Mapping[str, str] | None = None) -> int | None:
    """SOURCE_DATE_EPOCH (reproducible-builds.org) as seconds, None when unset: the one reader.

    A value that is not a whole number of seconds since 1970 is a UsageError naming it.
    """
    env = os.environ if environ is None else environ
    text = env.get("SOURCE_DATE_EPOCH", "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise UsageError(
            f"SOURCE_DATE_EPOCH={text[:40]!r}: expected whole seconds since 1970 "
            "(e.g. `git log -1 --format=%ct`), or leave it unset"
        )
    return int(text)


@dataclass(frozen=True)
class ModuleFlags:
    """Extra compile flags of one kernel module, from ``[tool.kernelpack.modules.<module>]``."""

    flags: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    include_dirs: tuple[Path, ...] = ()


@dataclass(frozen=True)
class BuildSettings:
    """Everything a build, a merge or a wheels run needs (see the module's docstring for where
    each value comes from)."""

    project: Path = REPO_ROOT
    targets: tuple[str, ...] = ()  # empty: the whole matrix
    vendor: str | None = None  # "amd" or "nvidia": only that vendor's targets
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    out: Path = REPO_ROOT / PROJECT_LAYOUT["out"]
    dist: Path = REPO_ROOT / PROJECT_LAYOUT["dist"]
    cache_dir: Path = field(default_factory=lambda: user_cache_folder() / "build")
    sources: Path = REPO_ROOT / PROJECT_LAYOUT["sources"]
    matrix: Path = REPO_ROOT / PROJECT_LAYOUT["matrix"]
    compress: bool = True
    keep_going: bool = False
    provision: bool = False
    package_version: str = ""  # empty: package_version(project), computed when needed
    package: str = ""  # the import name of the project's package; empty: from [project] name
    defines: tuple[str, ...] = ()  # NAME or NAME=VALUE, for every target
    amd_defines: tuple[str, ...] = ("USE_ROCM",)  # for AMD targets only (the USE_ROCM convention)
    include_dirs: tuple[Path, ...] = ()
    modules: Mapping[str, ModuleFlags] = field(default_factory=dict)
    # module -> kernels that may be missing from some targets (docs/loader.md, "Kernel names")
    allow_missing_kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(FLAGS))

    @property
    def is_shard(self) -> bool:
        return bool(self.targets) or self.vendor is not None

    @property
    def version(self) -> str:
        """The version given, else setuptools-scm's through the cache of buildsys.scm_version
        (a no-op build would otherwise spend a third of its time asking git)."""
        return self.package_version or cached_version(self.project, self.cache_dir, package_version)


@dataclass(frozen=True)
class Option:
    """One setting: its BuildSettings field, how it is read, which commands take it, its help.

    Its command-line flag is ``--<name with dashes>`` unless ``flag`` says otherwise, its
    environment variable ``KERNELPACK_BUILD_<NAME>``, its config key the name with dashes unless
    ``config`` says otherwise (``device-dir`` for ``out``, which the config must tell apart from
    the wheels' folder ``dist``, ``wheels --out`` on the command line).
    """

    name: str
    type: ValueType
    commands: frozenset[str]
    help: str
    flag: str = ""
    in_config: bool = True
    config: str = ""

    @property
    def option_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def environment(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def config_key(self) -> str:
        return self.config or self.name.replace("_", "-")


_BUILD = frozenset({"build", "wheels"})
_OUTPUT = frozenset({"build", "merge"})

# One option per entry reads as a table (ruff would spread each over six lines, hence fmt: skip).
OPTIONS: tuple[Option, ...] = (
    Option("project", PATH, frozenset({"build", "merge", "matrix", "toolchain", "wheels"}),
           "the kernel project: a folder with pyproject.toml",
           in_config=False),
    Option("targets", TARGETS, _BUILD, "targets or families, comma-separated (default: the matrix)"),
    Option("vendor", VENDOR, _BUILD, "only this vendor's targets: amd or nvidia"),
    Option("jobs", JOBS, _BUILD, "parallel compile jobs (default: the number of cores)"),
    Option("out", PATH, _OUTPUT, "output folder of _index.py and device/ (default: build/device)",
           config="device-dir"),
    Option("dist", PATH, frozenset({"wheels"}), "where the wheels, the variants JSON and the "
           "simple index (DIR/simple) go (default: dist)", flag="--out"),
    Option("cache_dir", PATH, _BUILD, "compile cache (default: ~/.cache/kernelpack/build)"),
    Option("sources", PATH, _BUILD, "kernel sources (default: kernel_sources)"),
    Option("matrix", PATH, frozenset({"build", "merge", "matrix", "toolchain", "wheels"}),
           "target matrix (default: arch_matrix.toml)"),
    Option("compress", SWITCH, frozenset({"build", "merge", "wheels"}),
           "zstd-compress the AMD bundles (CCOB; the default)"),
    Option("keep_going", SWITCH, _BUILD, "after a failed job, build the others anyway"),
    Option("provision", SWITCH, frozenset({"build", "toolchain", "wheels"}),
           "provision the AMD toolchain if none can build the targets (downloads over 1 GB)"),
    Option("package_version", VERSION, _BUILD, "the version the index records (PEP 440)"),
    Option("package", TEXT, frozenset({"wheels"}), "the import name of the project's package "
           "(default: [project] name with - and . as _)"),
    Option("defines", DEFINES, _BUILD, "preprocessor defines for every target"),
    Option("amd_defines", DEFINES, _BUILD, "preprocessor defines for AMD targets (default: "
           "USE_ROCM)"),
    Option("include_dirs", PATHS, _BUILD, "extra include folders, searched after include/"),
    Option("allow_missing_kernels", KERNEL_LISTS, _BUILD | {"merge"}, "kernels that may be "
           "missing from some targets, per module (else such a build or merge fails)"),
)  # fmt: skip  # one option per entry, read as a table (see above)
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}
# Config keys renamed, still read: the old name, with a notice, stands for the new one.
RENAMED_CONFIG_KEYS = {"out": "device-dir"}
_MODULE_KEYS = {"flags": COMPILE_FLAGS, "defines": DEFINES, "include-dirs": PATHS}
_FIELDS = {f.name for f in fields(BuildSettings)}
assert all(option.name in _FIELDS for option in OPTIONS), "an option without a settings field"


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The options ``command`` takes (each also read from its environment variable), and --json."""
    for option in OPTIONS:
        if command not in option.commands:
            continue
        help_text = f"{option.help} [{option.environment}]"
        if option.name == "project":
            help_text = f"{option.help} (default: {default_project_words()}) [{option.environment}]"
        if option.type.metavar is None:
            parser.add_argument(
                option.option_flag,
                dest=option.name,
                help=help_text,
                action=argparse.BooleanOptionalAction,
            )
        else:
            parser.add_argument(
                option.option_flag, dest=option.name, help=help_text, metavar=option.type.metavar
            )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def project_config(project: Path) -> dict[str, Any]:
    """The values of the project's ``[tool.kernelpack]``, checked and with paths made absolute."""
    path = project / "pyproject.toml"
    table = read_pyproject(project).get("tool", {}).get("kernelpack", {})
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [{CONFIG_TABLE}] must be a table")
    by_key = {o.config_key: o for o in OPTIONS if o.in_config}
    values: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{path}: {CONFIG_TABLE}.{key}"
        if key == "modules":
            values["modules"] = _module_flags(value, where, project)
            continue
        option = by_key.get(RENAMED_CONFIG_KEYS.get(key) or key)
        if option is None:
            known = sorted([*by_key, "modules"])
            raise UsageError(
                f"{path}: unknown key {CONFIG_TABLE}.{key}; known: {', '.join(known)}"
                f"{did_you_mean(key, known)}"
            )
        if key in RENAMED_CONFIG_KEYS:
            if option.config_key in table:
                raise UsageError(
                    f"{path}: {CONFIG_TABLE} sets both {key} and {option.config_key}, the old and "
                    f"the new name of one setting; keep {option.config_key}"
                )
            _say_renamed(path, key, option.config_key)
        values[option.name] = option.type.parse(value, where, project)
    return values


def did_you_mean(key: str, known: Collection[str]) -> str:
    """'; did you mean K?' for the known key nearest ``key``, or '' when none is near: a key
    written with underscores (``include_dirs``) or a letter off (``sorces``) is the usual slip."""
    spelled = {k.replace("-", "_"): k for k in known}
    near = difflib.get_close_matches(key.replace("-", "_").lower(), list(spelled), n=1)
    return f"; did you mean {spelled[near[0]]}?" if near else ""


_said_renamed: set[tuple[Path, str]] = set()


def _say_renamed(path: Path, old: str, new: str) -> None:
    """One notice a process per file and renamed key (settings are resolved several times)."""
    if (path, old) in _said_renamed:
        return
    _said_renamed.add((path, old))
    print(
        f"notice: {path}: {CONFIG_TABLE}.{old} is deprecated, write {new} (the folder of _index.py "
        f"and device/; the wheels go to dist, wheels --out); {old} is read as {new} for now",
        file=sys.stderr,
    )


def _module_flags(value: object, where: str, project: Path) -> dict[str, ModuleFlags]:
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a table of modules ([{CONFIG_TABLE}.modules.NAME])")
    modules: dict[str, ModuleFlags] = {}
    for module, table in sorted(value.items()):
        if not isinstance(table, dict):
            raise UsageError(f"{where}.{module}: expected a table")
        parts: dict[str, Any] = {}
        for key, item in table.items():
            if key not in _MODULE_KEYS:
                raise UsageError(
                    f"{where}.{module}: unknown key {key}; known: {', '.join(sorted(_MODULE_KEYS))}"
                    f"{did_you_mean(key, _MODULE_KEYS)}"
                )
            parts[key.replace("-", "_")] = _MODULE_KEYS[key].parse(
                item, f"{where}.{module}.{key}", project
            )
        modules[module] = ModuleFlags(**parts)
    return modules


def resolve_settings(
    args: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    command: str = "build",
    ignore_config: Collection[str] = (),
) -> BuildSettings:
    """BuildSettings for ``command`` from the defaults, the project's config, the environment and
    the parsed arguments, in that order (the module's docstring).

    The paths the project supplies for ``command`` (its config's, and the defaults inside it) must
    lead to a place inside the project, links followed: a ProjectError otherwise
    (:func:`check_inside_project`).
    The paths the user gives (command line, environment) are taken as given. ``ignore_config``
    names options whose config value is not taken (the PEP 517 backend's, buildsys.backend).
    """
    environ = os.environ if environ is None else environ
    cwd = Path.cwd()
    given: dict[str, object] = {}
    for option in OPTIONS:
        if command not in option.commands:
            continue
        value = getattr(args, option.name, None) if args is not None else None
        if isinstance(value, bool):  # a switch: argparse made it a bool already
            given[option.name] = value
        elif value is not None:
            given[option.name] = option.type.parse(value, option.option_flag, cwd)
        elif option.environment in environ:
            given[option.name] = option.type.parse(
                environ[option.environment], option.environment, cwd
            )
    project = Path(str(given.get("project", default_project()))).resolve()
    values: dict[str, Any] = {name: project / path for name, path in PROJECT_LAYOUT.items()}
    values.update(project_config(project))
    for name in ignore_config:
        values.pop(name, None)
    for name, value in values.items():
        declared = OPTIONS_BY_NAME.get(name)
        used = command in (declared.commands if declared is not None else _BUILD)
        if used and name not in given:
            _check_project_paths(project, name, value)
    values.update(given)
    values["project"] = project
    return BuildSettings(**values)


def _check_project_paths(project: Path, name: str, value: object) -> None:
    """The paths of one setting the project supplied, each inside the project."""
    pyproject = project / "pyproject.toml"
    if name == "modules":
        assert isinstance(value, Mapping)
        for module, flags in value.items():
            for path in flags.include_dirs:
                check_inside_project(
                    project,
                    path,
                    f"{pyproject}: {CONFIG_TABLE}.modules.{module}.include-dirs",
                    "name a folder inside the project (vendor the headers there)",
                )
        return
    paths = value if isinstance(value, tuple) else (value,)
    option = OPTIONS_BY_NAME.get(name)
    if option is None or not all(isinstance(p, Path) for p in paths):
        return
    for path in paths:
        assert isinstance(path, Path)
        check_inside_project(
            project,
            path,
            f"{pyproject}: {CONFIG_TABLE}.{option.config_key}",
            f"a project's paths stay inside it: name one there, or give {option.option_flag} "
            f"({option.environment}) yourself",
        )


def check_writable_folder(path: Path, name: str) -> None:
    """Make sure ``path`` is a folder this process can write (made if missing), before any work:
    an unusable one is one UsageError line naming it and the option ``name`` that moves it."""
    option = OPTIONS_BY_NAME[name].option_flag
    require_writable_folder(
        path, f"{path} ({option} / {OPTIONS_BY_NAME[name].environment})", option
    )


def require_writable_folder(path: Path, where: str, option: str) -> None:
    """The check behind every output folder of the builder's commands: ``where`` names the path and
    how it was given, ``option`` the flag that names another."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{where}: exists and is not a folder; name a folder with {option} DIR")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"{where}: cannot be made ({error.strerror}); name a writable folder with {option} DIR"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: not writable; name a writable folder with {option} DIR")
