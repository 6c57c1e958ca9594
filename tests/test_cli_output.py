"""Output for people (issue 50 item 9): what ``info`` and ``inspect`` print for a module's kernels.

A module can have thousands of kernels (kernelpack's mlp: 4,722 characters of names on one line),
so ``info`` counts them and ``--kernels`` lists them one a line; ``inspect`` shows a file's symbols
and ``load(...).kernel()`` takes the index's names, so where they differ (a mangled C++ kernel)
each command shows the other's spelling beside its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_install_hint import host_with_gfx90a  # noqa: F401  (a fixture)
from test_loader import AXPY_SYMBOL, SYSFS, packaged  # noqa: F401  (packaged: a fixture)

from kernelpack.cli import main as cli
from kernelpack.cli.doctor import _images_cell
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


@pytest.mark.parametrize("machine", sorted(p.name for p in SYSFS.iterdir()))
def test_doctor_lines_fit_a_terminal(
    host_with_gfx90a: None,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    machine: str,
) -> None:
    """Findings run to 1,000 characters (RDNA's host-memory note, the override advice): each is
    wrapped to 100 a line, a pip command or path kept whole."""
    cli.main(["doctor", "--sysfs-root", str(SYSFS / machine)])
    lines = capsys.readouterr().out.splitlines()
    assert "Findings" in lines
    too_long = [line for line in lines if len(line) > 100]
    assert too_long == []
    if machine == "mi300x-8gpu":  # the GPU's own pip command, whole on its line
        advice = '  what to do: pip install "kernelpack[gfx942]"; or build it:'
        assert any(line.startswith(advice) for line in lines)


def test_doctor_counts_the_modules_of_a_large_project() -> None:
    image = {"target": "gfx942", "package": "candle_device_gfx942"}
    modules: dict[str, dict[str, str] | None] = {f"m{n}": image for n in range(20)}
    modules["m20"] = None
    assert _images_cell(modules) == "20 modules: gfx942 [candle_device_gfx942]; 1 module: none"
