"""kernelpack.emulator: installed AMD images executed on tinygrad's AMD ISA emulator.

Tests marked ``amd_emulator`` run kernels on the emulator (KERNELPACK_AMD_EMULATOR names its
checkout; skipped with that reason where it is unset, failed where it names no checkout); they need
the MLP module built for the targets they run (`nox -s amd` builds them). Here: a launch checked as
on a GPU, and a kernel that must fail. Every MLP kernel against float64 is
tests/test_emulator_mlp.py's; the walk kernels, tests/test_emulator_walk.py's.

A kernel written wrong for wave64 (a 32-bit ballot mask) is built into a tiny project and must fail
its check on gfx942 while passing on gfx1100: the check can fail.

The refusal messages run everywhere, without the emulator.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelpack.emulator import EMULATED_TARGETS, Emulator
from kernelpack.emulator._checkout import ENVIRONMENT, PINNED_COMMIT
from kernelpack.errors import RuntimeLibraryError, UsageError

RUN_TARGETS = [t.processor for t in EMULATED_TARGETS]  # wave64: gfx942, gfx950; wave32: the others
TIMINGS: list[str] = []  # "kernel target: seconds", printed at the end of the run (-s)


# ---- without the emulator: the refusals ---------------------------------------------------------


@pytest.mark.parametrize("target", ["gfx90a", "gfx1030", "sm_90", "gfx9-4-generic", "", 942])
def test_a_target_the_emulator_cannot_run_is_refused_with_the_ones_it_can(target: Any) -> None:
    with pytest.raises(UsageError) as raised:
        Emulator(target, environ={})
    message = str(raised.value)
    assert "\n" not in message
    assert f"cannot run target {target!r}" in message
    assert "runs: " + ", ".join(t.processor for t in EMULATED_TARGETS) in message
    assert raised.value.exit_code == 2


@pytest.mark.parametrize("target", [t.processor for t in EMULATED_TARGETS])
def test_without_the_emulator_the_message_says_how_to_get_it(target: str) -> None:
    with pytest.raises(RuntimeLibraryError) as raised:
        Emulator(target, environ={})
    message = str(raised.value)
    assert f"{ENVIRONMENT} is not set" in message
    assert "git clone https://github.com/tinygrad/tinygrad" in message
    assert PINNED_COMMIT in message
    assert "\n" not in message


def test_a_folder_that_is_no_tinygrad_checkout_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tinygrad").mkdir()
    with pytest.raises(RuntimeLibraryError) as raised:
        Emulator("gfx1100", environ={ENVIRONMENT: str(tmp_path)})
    message = str(raised.value)
    assert f"{ENVIRONMENT}={tmp_path}: not a tinygrad checkout" in message
    assert "test/mockgpu/amd/emu.py" in message
    assert "git clone" in message


# ---- on the emulator ----------------------------------------------------------------------------

_emulators: dict[str, Emulator] = {}


def emulator(target: str) -> Emulator:
    """One Emulator a target for the whole run (the emulator keeps each instruction it compiled)."""
    found = _emulators.get(target)
    if found is None:
        found = _emulators[target] = Emulator(target)
    return found


@pytest.fixture(scope="module", autouse=True)
def _print_timings() -> Any:
    yield
    if TIMINGS:
        print("\nemulated launches (wall time, this machine):", *TIMINGS, sep="\n  ")
        for target, emu in sorted(_emulators.items()):
            print(f"  {target}: {'; '.join(emu.notes) or 'nothing rewritten'}")


def timed_launch(
    emu: Emulator, kernel: Any, grid: Any, block: Any, *args: Any, **options: Any
) -> None:
    started = time.perf_counter()
    kernel.launch(grid, block, *args, **options)
    TIMINGS.append(
        f"{kernel.name} {emu.target.processor} grid {grid} block {block}: "
        f"{time.perf_counter() - started:.1f} s"
    )


@pytest.mark.amd_emulator
def test_a_launch_is_checked_as_on_a_gpu() -> None:
    emu = emulator("gfx1100")
    kernel = emu.load("mlp").kernel("mlp::swiglu<float>")
    x = emu.array(np.zeros(4, np.float32))
    with pytest.raises(UsageError, match="takes 4 arguments, got 3"):
        kernel.launch(1, 64, x, x, x)
    with pytest.raises(UsageError, match=r"argument 3 \(long long\): expected an integer"):
        kernel.launch(1, 64, x, x, x, x)
    with pytest.raises(UsageError, match="lives in host memory"):
        kernel.launch(1, 64, np.zeros(4, np.float32), x, x, 4)
    with pytest.raises(UsageError, match="block sizes must be ints"):
        kernel.launch(1, 0, x, x, x, 4)
    with pytest.raises(RuntimeLibraryError, match="hipErrorInvalidConfiguration"):
        kernel.launch(1, 2048, x, x, x, 4)


# ---- the check can fail: a kernel wrong for wave64 ---------------------------------------------

# A warp vote counted through a 32-bit mask: right at wave32, on wave64 the lanes 32-63 of each
# wave are lost (HIP's __ballot is 64 bits there; the cast to unsigned drops its top half).
WAVE_PROBE = """\
extern "C" __global__ void count_positive(const float* x, unsigned* count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  bool positive = i < n && x[i] > 0.0f;
  unsigned mask = (unsigned)__ballot(positive);
  if (threadIdx.x % warpSize == 0) atomicAdd(count, (unsigned)__popc(mask));
}
"""
PROBE_PACKAGE = "kp_wave_probe"


@pytest.fixture(scope="module")
def wave_probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-kernel project built for gfx942 and gfx1100 into an importable package folder."""
    from tests.build_project import make_project, matrix_text

    root = tmp_path_factory.mktemp("wave_probe")
    project = make_project(
        root, files={"probe/probe.cu": WAVE_PROBE}, matrix=matrix_text(("gfx942", "gfx1100"))
    )
    site = root / "site"
    (site / PROBE_PACKAGE).mkdir(parents=True)
    (site / PROBE_PACKAGE / "__init__.py").write_text("")
    project.build(out=site / PROBE_PACKAGE)
    return site


def check_count_positive(target: str, site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's count of positive inputs on ``target`` against numpy's."""
    monkeypatch.syspath_prepend(str(site))
    emu = emulator(target)
    kernel = emu.load("probe", package=PROBE_PACKAGE).kernel("count_positive")
    rng = np.random.default_rng(7)
    x = rng.standard_normal(256).astype(np.float32)
    count = emu.array(np.zeros(1, np.uint32))
    timed_launch(emu, kernel, 1, 256, emu.array(x), count, 256)
    got, expected = int(emu.numpy(count)[0]), int((x > 0).sum())
    assert got == expected, f"count_positive on {target} counted {got}, numpy {expected}"


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_a_32_bit_ballot_mask_passes_at_wave32(
    wave_probe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_count_positive("gfx1100", wave_probe, monkeypatch)


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_a_32_bit_ballot_mask_fails_its_check_at_wave64(
    wave_probe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AssertionError, match="count_positive on gfx942 counted"):
        check_count_positive("gfx942", wave_probe, monkeypatch)
