"""Output for people (issue 50 item 9): what ``info`` and ``inspect`` print for a module's kernels.

A module can have thousands of kernels (kernelpack's mlp: 4,722 characters of names on one line),
so ``info`` counts them and ``--kernels`` lists them one a line; ``inspect`` shows a file's symbols
and ``load(...).kernel()`` takes the index's names, so where they differ (a mangled C++ kernel)
each command shows the other's spelling beside its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_loader import AXPY_SYMBOL, packaged  # noqa: F401  (packaged: the fixture)

from kernelpack.cli import main as cli
from kernelpack.loader import catalog

OBJECTS = Path(__file__).parent / "fixtures" / "objects"


def test_info_counts_a_modules_kernels_and_lists_them_when_asked(
    packaged: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "demo: 1 kernel (--kernels lists them)" in out
    assert AXPY_SYMBOL not in out
    assert cli.main(["info", "--kernels"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("demo: 1 kernel:")
    assert lines[at + 1] == f"  axpy  (symbol {AXPY_SYMBOL})"


def test_inspect_names_the_kernel_an_installed_index_gives_a_symbol(
    packaged: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = catalog.package_index("kernelpack")
    assert index is not None
    for image in index["modules"]["demo"]["images"]:
        image["symbols"] = {"tile_sum_f32": "tile_sum"}
    monkeypatch.setattr(catalog, "package_index", lambda package: index)
    assert cli.main(["inspect", str(OBJECTS / "gfx90a.co")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["tile_sum"].startswith("tile_sum [tile_sum_f32] ")
    assert rows["axpy"].startswith("axpy ") and "[" not in rows["axpy"]  # no index names it
