"""Wheels of distributions installed in this interpreter's environment (not a test module).

The tests that install kernelpack-built wheels into a clean virtual environment need kernelpack's
and the builder's dependencies (numpy, zstandard, rich, ...) there too, offline: each installed
distribution, with its dependencies, is packed back into a wheel from the files its RECORD lists
(the installed files, under the tags of its WHEEL file), so ``pip install --no-index
--find-links`` finds them. Files installed outside site-packages (scripts) are left out: pip
writes console scripts again from the entry points.
"""

from __future__ import annotations

import re
from importlib.metadata import Distribution, distribution
from pathlib import Path

from packaging.requirements import Requirement

from buildsys.wheelfile import write_wheel

_DROPPED = ("INSTALLER", "RECORD", "REQUESTED", "direct_url.json")


def _requirements(dist: Distribution) -> list[str]:
    names = []
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(requirement.name)
    return names


def repack(names: list[str], folder: Path) -> list[Path]:
    """Wheels of ``names`` and everything they require, into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    done: dict[str, Path] = {}
    pending = list(names)
    while pending:
        name = re.sub(r"[-_.]+", "-", pending.pop()).lower()
        if name in done:
            continue
        dist = distribution(name)
        files: dict[str, bytes] = {}
        tags: list[str] = []
        for entry in dist.files or []:
            relative = entry.as_posix()
            if relative.startswith("..") or "__pycache__" in relative:
                continue
            if relative.endswith(".dist-info/WHEEL"):
                text = Path(str(dist.locate_file(entry))).read_text()
                tags = [
                    line.split(":", 1)[1].strip()
                    for line in text.splitlines()
                    if line.startswith("Tag:")
                ]
            if relative.rsplit("/", 1)[-1] in _DROPPED and ".dist-info/" in relative:
                continue
            files[relative] = Path(str(dist.locate_file(entry))).read_bytes()
        info = next(n.split("/")[0] for n in files if n.endswith(".dist-info/METADATA"))
        stem = info.removesuffix(".dist-info")
        wheel = folder / f"{stem}-{tags[0]}.whl"
        done[name] = write_wheel(wheel, files, epoch=315532800)
        pending += _requirements(dist)
    return sorted(done.values())
