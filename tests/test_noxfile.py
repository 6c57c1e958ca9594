"""The noxfile as a newcomer meets it: the Quick start's sessions say nothing of uv, which they do
not use (issue 50, smaller: "nox > uv binary not found." read as an error to fix)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from buildsys import REPO_ROOT

nox = pytest.importorskip("nox", reason="nox is in the test group; this machine's Python lacks it")


@pytest.fixture
def noxfile(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """kernelpack's noxfile, loaded as nox loads it (from the checkout's root); its logging
    filter is taken off again afterwards."""
    monkeypatch.chdir(REPO_ROOT)
    spec = importlib.util.spec_from_file_location("kernelpack_noxfile", REPO_ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    before = list(logging.getLogger("nox").filters)
    spec.loader.exec_module(module)
    yield module
    logging.getLogger("nox").filters[:] = before


def test_nox_says_nothing_of_an_absent_uv(
    noxfile: ModuleType, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """nox's own uv probe, on a uv that is not there: its line is dropped, the rest of nox's
    output kept."""
    assert noxfile.nox.options.default_venv_backend == "venv"
    with caplog.at_level(logging.INFO, logger="nox"):
        nox.virtualenv.uv_version(str(tmp_path / "no-uv-here"))
        logging.getLogger("nox").info("Running session wheels")
    assert [r.getMessage() for r in caplog.records] == ["Running session wheels"]
