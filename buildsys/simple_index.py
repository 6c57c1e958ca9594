"""A local package index in the PEP 503 "simple" layout, over the files of a dist/ folder.

``DIST/simple/index.html`` lists the projects; ``DIST/simple/<project>/index.html`` links each of
the project's files (``../../<file>#sha256=<digest>``), the variants JSON among kernelpack's, as
PEP 825 asks of an index that serves variant wheels. ``pip install --index-url
file:///.../dist/simple kernelpack`` installs from it; a maintainer uploads the same files to a
real index (docs/wheels.md). The folder is written beside and renamed into place, so a reader sees
the old index or the new one, never half of either.
"""

from __future__ import annotations

import hashlib
import html
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .wheelfile import files_by_project


def _page(title: str, links: list[tuple[str, str]]) -> str:
    anchors = "\n".join(
        f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br>' for href, text in links
    )
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" '
        f'content="1.0">\n    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n'
        f"{anchors}\n  </body>\n</html>\n"
    )


def write_simple_index(dist: Path, files: Sequence[Path]) -> Path:
    """DIST/simple for ``files`` (all inside ``dist``); returns the folder."""
    projects = files_by_project(files)
    staging = Path(tempfile.mkdtemp(prefix=".simple-", dir=dist))
    (staging / "index.html").write_text(
        _page("Simple index", [(f"{name}/", name) for name in sorted(projects)])
    )
    for name, paths in sorted(projects.items()):
        folder = staging / name
        folder.mkdir()
        links = []
        for path in paths:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            links.append((f"../../{path.name}#sha256={digest}", path.name))
        (folder / "index.html").write_text(_page(f"Links for {name}", links))
    for entry in [staging, *staging.rglob("*")]:
        entry.chmod(0o755 if entry.is_dir() else 0o644)
    target = dist / "simple"
    if target.exists():
        retired = Path(tempfile.mkdtemp(prefix=".simple-old-", dir=dist))
        target.rename(retired / "simple")
        staging.rename(target)
        shutil.rmtree(retired)
    else:
        staging.rename(target)
    return target
