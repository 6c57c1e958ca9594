"""The PEP 517 build backend of kernel projects: ``pip wheel DIR`` and ``python -m build DIR``.

A project names it in its pyproject.toml (docs/your-kernels.md)::

    [build-system]
    requires = ["kernelpack-buildsys"]
    build-backend = "buildsys.backend"

``build_wheel`` compiles the project's kernels for its matrix (the builder's settings: defaults,
``[tool.kernelpack]``, ``KERNELPACK_BUILD_*``, then the frontend's config settings, e.g. ``pip wheel
. -C targets=gfx942``; the config's ``cache-dir`` excepted: the cache is the user's, see
IGNORED_CONFIG) and writes the fat wheel, the same file ``python -m buildsys wheels`` makes
as the null variant's content; ``build_sdist`` writes the project's files with PKG-INFO. The split
and variant wheels need the whole set at once and come from ``python -m buildsys wheels``.

``build_editable`` (PEP 660, ``pip install -e .``) builds the kernels into the project's own
package folder (``_index.py`` and ``device/``, as kernelpack's checkout holds its own) and writes a
wheel whose ``.pth`` file puts that folder's parent on ``sys.path``: edited Python files take
effect at once, edited kernels after ``pip install -e .`` again (or ``kernelpack-build build
--project . --out <package folder>``). A project without Python files of its own gets the
generated package in ``build/kernelpack-editable/``.

A failure is one line on standard error and a non-zero exit, as from the builder's command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from kernelpack.errors import KernelpackError, UsageError, debug_enabled
from kernelpack.files.atomic import atomic_write

from .build import build
from .packaging import (
    GENERATED_INIT,
    ProjectMetadata,
    file_name_part,
    metadata_text,
    project_metadata,
    runtime_requirement,
    sdist_bytes,
    wheel_file,
    with_package_entry_point,
)
from .project import check_inside_project
from .provenance import source_state
from .report import failure_error
from .settings import (
    CONFIG_TABLE,
    OPTIONS,
    OPTIONS_BY_NAME,
    BuildSettings,
    check_writable_folder,
    project_config,
    resolve_settings,
)
from .trees import scratch_folder
from .wheelfile import write_wheel
from .wheels import build_fat_wheel, source_date_epoch, stamp_index

ConfigSettings = Mapping[str, str | list[str]] | None
_Result = TypeVar("_Result")


# Settings a project's own config does not choose here: a frontend builds whatever sdist it was
# given, and the compile cache is the user's. Entries in a cache are taken as compiled from the
# sources their key names; a cache the project points at (a folder it ships) could hold images no
# source of it gives. Where the config names one, the build says so and uses the user's cache.
IGNORED_CONFIG = ("cache_dir",)


def _settings(config_settings: ConfigSettings) -> BuildSettings:
    """The wheels command's settings for the project in the current folder (where frontends run
    the backend), the frontend's config settings standing for command-line options; the config's
    IGNORED_CONFIG are not taken, with a notice."""
    allowed = {o.name.replace("_", "-"): o for o in OPTIONS if "wheels" in o.commands}
    allowed.pop("project")
    allowed.pop("dist")
    project = Path.cwd()
    config = project_config(project)
    for name in IGNORED_CONFIG:
        if name in config:
            ignored = OPTIONS_BY_NAME[name]
            print(
                f"notice: {project / 'pyproject.toml'}: {CONFIG_TABLE}.{ignored.config_key} is not "
                "used when a frontend builds the project (the compile cache is the user's: "
                f"{ignored.environment}, or -C {ignored.config_key}=DIR)",
                file=sys.stderr,
            )
    given: dict[str, object] = {"project": str(project)}
    for key, value in (config_settings or {}).items():
        option = allowed.get(key.replace("_", "-"))
        if option is None:
            raise UsageError(
                f"config setting {key!r}: not a kernelpack setting; known: {', '.join(sorted(allowed))}"
            )
        text = value[-1] if isinstance(value, list) else value
        if option.type.metavar is None:  # a switch: "1"/"0", as the environment gives it
            given[option.name] = option.type.parse(text, f"config setting {key}", Path.cwd())
        else:
            given[option.name] = text
    return resolve_settings(
        argparse.Namespace(**given), command="wheels", ignore_config=IGNORED_CONFIG
    )


def _project_step(
    config_settings: ConfigSettings, step: Callable[[BuildSettings, ProjectMetadata], _Result]
) -> _Result:
    """``step`` of a hook on the project's settings and metadata (read from the current folder
    and ``config_settings``), any kernelpack error one line on standard error and its exit
    status, as from the builder's command line."""
    try:
        settings = _settings(config_settings)
        return step(settings, project_metadata(settings))
    except KernelpackError as error:
        if debug_enabled():
            raise
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """The project's fat wheel (every image of its matrix) into wheel_directory; its file name."""

    def step(settings: BuildSettings, meta: ProjectMetadata) -> str:
        check_writable_folder(settings.cache_dir, "cache_dir")
        epoch = source_date_epoch(settings.project)
        source = source_state(settings.project)
        with scratch_folder(settings.cache_dir) as scratch:
            device_dir = scratch / "device"
            result = build(replace(settings, out=device_dir), progress=False)
            if result.count("failed") or result.count("not run"):
                raise failure_error(result)
            stamp_index(device_dir, meta)
            wheel, _ = build_fat_wheel(
                meta, device_dir, Path(wheel_directory), epoch=epoch, source=source
            )
        return wheel.name

    return _project_step(config_settings, step)


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    return []


EDITABLE_DIR = "build/kernelpack-editable"  # the generated package of a project without its own


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: str | None = None,
) -> str:
    """The project's editable wheel (see the module's docstring) into wheel_directory."""

    def step(settings: BuildSettings, meta: ProjectMetadata) -> str:
        package = meta.python_folder()
        if package is None:
            package = settings.project / EDITABLE_DIR / meta.package
            check_inside_project(
                settings.project,
                package,
                f"{settings.project}: the editable package folder {EDITABLE_DIR}/{meta.package}",
                f"remove the link from {EDITABLE_DIR.split('/')[0]}/",
            )
            package.mkdir(parents=True, exist_ok=True)
            atomic_write(package / "__init__.py", GENERATED_INIT.format(name=meta.name).encode())
        result = build(replace(settings, out=package), progress=False)
        if result.failed:
            raise failure_error(result)
        stamp_index(package, meta)
        name = f"{file_name_part(meta.name)}-{meta.version}-py3-none-any.whl"
        files = {
            f"__editable__.{file_name_part(meta.name)}-{meta.version}.pth": (
                f"{package.parent.resolve()}\n".encode()
            ),
            f"{meta.dist_info}/METADATA": metadata_text(meta, runtime_requirement(meta)).encode(),
            f"{meta.dist_info}/WHEEL": wheel_file("py3-none-any"),
            f"{meta.dist_info}/entry_points.txt": with_package_entry_point(
                "", meta.package
            ).encode(),
        }
        epoch = source_date_epoch(settings.project)
        return write_wheel(Path(wheel_directory) / name, files, epoch=epoch).name

    return _project_step(config_settings, step)


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    """The project's source distribution into sdist_directory; its file name."""

    def step(settings: BuildSettings, meta: ProjectMetadata) -> str:
        name, data = sdist_bytes(meta, epoch=source_date_epoch(settings.project))
        atomic_write(Path(sdist_directory) / name, data)
        return name

    return _project_step(config_settings, step)
