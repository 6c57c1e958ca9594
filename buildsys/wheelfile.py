"""Wheel files as bytes: written deterministically (sorted entries, RECORD computed and last, fixed
times and permissions), read back, and a dist/ folder's files grouped by project.

A leaf of the wheel builder: it imports nothing of the orchestration (:mod:`buildsys.wheels`,
:mod:`buildsys.variants`, :mod:`buildsys.simple_index` all build on it), so no import circle can
form through it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from kernelpack.files.atomic import atomic_write

# The host wheel's PEP 427 build tag. The fat wheel keeps the plain name every PEP 517 frontend
# gives it (`pip wheel .`, `python -m build`, the project's own backend); the host wheel, which
# only `wheels` makes, is another file with other content, so it gets a name of its own: one
# name, one content (docs/wheels.md, "One name, one content"). At the same version pip prefers a
# tagged wheel to an untagged one, so an index or folder holding both gives pip the host wheel,
# whose extras name the device wheels.
HOST_BUILD_TAG = "0host"


def host_wheel_name(fat_name: str) -> str:
    """kernelpack-1.0-cp311-abi3-PLAT.whl -> kernelpack-1.0-0host-cp311-abi3-PLAT.whl."""
    name, version, tags = fat_name.split("-", 2)
    return f"{name}-{version}-{HOST_BUILD_TAG}-{tags}"


def write_wheel(path: Path, files: Mapping[str, bytes], *, epoch: int) -> Path:
    """Write a wheel deterministically; RECORD is computed here and goes last."""
    dist_info = next(n.split("/")[0] for n in files if n.split("/")[0].endswith(".dist-info"))
    record_name = f"{dist_info}/RECORD"
    entries = {n: data for n, data in files.items() if n != record_name}
    record = io.StringIO()
    for name in sorted(entries):
        digest = base64.urlsafe_b64encode(hashlib.sha256(entries[name]).digest()).rstrip(b"=")
        record.write(f"{name},sha256={digest.decode()},{len(entries[name])}\n")
    record.write(f"{record_name},,\n")
    date_time = time.gmtime(max(epoch, 315532800))[:6]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in [*sorted(entries), record_name]:
            data = entries.get(name, record.getvalue().encode())
            info = zipfile.ZipInfo(name, date_time=date_time)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=9)
    atomic_write(path, buffer.getvalue())
    return path


def read_wheel(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}


def files_by_project(paths: Sequence[Path]) -> dict[str, list[Path]]:
    """The files of a dist/ folder grouped by normalised project name (PEP 503), for the index."""
    projects: dict[str, list[Path]] = {}
    for path in sorted(paths):
        if path.name.endswith("-variants.json"):
            name = path.name.rsplit("-", 2)[0]
        else:
            name = path.name.split("-", 1)[0]
        projects.setdefault(re.sub(r"[-_.]+", "-", name).lower(), []).append(path)
    return projects
