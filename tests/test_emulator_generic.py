"""The generic images (gfx9-4-generic, gfx11-generic, gfx12-generic) run on the emulator.

``Emulator(target, generic=True)`` shows the loader the package without the processor's own
images, so the loader's own selection takes the family's generic image, as on a GPU whose own
image is missing. Each generic image runs on the emulator's decoder for its family: gfx9-4-generic
as gfx950 (CDNA, wave64), gfx11-generic as gfx1100 (RDNA3), gfx12-generic as gfx1201 (RDNA4).

The checks are tests/test_emulator_mlp.py's and tests/test_emulator_walk.py's own, run with the
generic emulator in place of the processor's (their references, tolerances and poisoning): a
sample of the MLP's forward and backward kernels in every dtype, and the walk's residue kernels
the host picks for random programs. Their coverage records are swapped for empty ones while these
run, so the generic runs never count towards the processors' own coverage tests.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from kernelpack.emulator import Emulator
from tests import test_emulator_mlp as mlp_checks
from tests import test_emulator_walk as walk_checks
from tests.test_mlp import DTYPES

pytestmark = pytest.mark.amd_emulator

GENERIC_IMAGES = {
    "gfx950": "gfx9-4-generic",
    "gfx1100": "gfx11-generic",
    "gfx1201": "gfx12-generic",
}
_emulators: dict[str, Emulator] = {}


def generic_emulator(target: str) -> Emulator:
    """One generic-image Emulator a target for the whole run."""
    found = _emulators.get(target)
    if found is None:
        found = _emulators[target] = Emulator(target, generic=True)
    return found


@pytest.fixture
def generic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MLP and walk checks run on the generic emulators, recording into their own tallies."""
    for checks in (mlp_checks, walk_checks):
        monkeypatch.setattr(checks, "emulator", generic_emulator)
    monkeypatch.setattr(mlp_checks, "LAUNCHED", defaultdict(set))
    monkeypatch.setattr(mlp_checks, "SECONDS", defaultdict(list))
    monkeypatch.setattr(mlp_checks, "DIRECT", {})


@pytest.mark.parametrize("target", sorted(GENERIC_IMAGES))
def test_the_loader_selects_the_generic_image(target: str) -> None:
    emu = generic_emulator(target)
    for module in ("mlp", "walk"):
        loaded = emu.load(module)
        assert loaded.image.startswith(f"{GENERIC_IMAGES[target]} code_object"), loaded.image
        assert "selected: generic code for" in loaded.why
    own = Emulator(target).load("mlp")
    assert own.image.startswith(f"{target} code_object")  # without the option: its own image


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", sorted(GENERIC_IMAGES))
def test_mlp_sample_on_the_generic_image(
    target: str, dtype: str, generic: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SwiGLU and SiLU-and-mul forward and backward (exact 8-byte and general forms), RMSNorm
    and its backward (general and short-row), add_rms_norm short-row."""
    before = len(generic_emulator(target).launches)
    for case in ("exact 8-byte", "general, vectors and a tail"):
        mlp_checks.test_swiglu(target, dtype, case, monkeypatch)
        mlp_checks.test_swiglu_backward(target, dtype, case, monkeypatch)
        mlp_checks.test_silu_and_mul(target, dtype, case, monkeypatch)
        mlp_checks.test_silu_and_mul_backward(target, dtype, case, monkeypatch)
    for op, form, cols in (
        ("rms_norm", "rms_norm", 202),
        ("rms_norm", "rms_norm_short", 200),
        ("add_rms_norm", "add_rms_norm_short", 200),
    ):
        mlp_checks.test_forward_norm(target, op, form, 3, cols, dtype, False, monkeypatch)
    for case in ("general", "general, extra"):
        mlp_checks.test_rms_norm_backward(target, case, dtype, monkeypatch)
    ran = generic_emulator(target).launches[before:]
    assert len(ran) >= 15, "each of the 15 checks launched on the generic emulator"


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("target", sorted(GENERIC_IMAGES))
def test_walk_residues_on_the_generic_image(target: str, m: int, generic: None) -> None:
    before = len(generic_emulator(target).launches)
    walk_checks.test_random_programs(target, m)
    assert {r.kernel for r in generic_emulator(target).launches[before:]}
