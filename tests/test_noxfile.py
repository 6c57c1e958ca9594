"""`nox -s tests` on a machine without a GPU installs torch's CPU build, not PyPI's 4.9 GB CUDA
build (issue 50, smaller list): the extra index is chosen from the NVIDIA driver's list of GPUs."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def noxfile(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    pytest.importorskip("nox")
    monkeypatch.chdir(REPO)  # the noxfile reads pyproject.toml from where nox runs
    spec = importlib.util.spec_from_file_location("kernelpack_noxfile", REPO / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_comes_from_the_cpu_index_where_no_nvidia_gpu_is(
    noxfile: ModuleType, tmp_path: Path
) -> None:
    test_group = noxfile.nox.project.dependency_groups(noxfile.PYPROJECT, "test")
    assert any(r.startswith("torch==") for r in test_group)
    gpus = tmp_path / "gpus"
    cpu = ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert noxfile.torch_index_args(test_group, gpus) == cpu  # no driver
    gpus.mkdir()
    assert noxfile.torch_index_args(test_group, gpus) == cpu  # a driver, no GPU
    (gpus / "0000:19:00.0").mkdir()
    assert noxfile.torch_index_args(test_group, gpus) == []  # PyPI's CUDA build
    assert noxfile.torch_index_args(["rich>=13", "torchvision"], tmp_path / "none") == []
