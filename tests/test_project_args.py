"""Parameters of kernels with C linkage (a project's ``extern "C"`` kernels, candle's): the objects
give their sizes only, so a 4- or 8-byte one is passed by the Python value, one rule on both launch
paths (kernelpack/backends/signature.py and _native/launcher.c): a float as IEEE float32 / float64, an int as an
integer of that size (signed or unsigned), for 8 bytes anything else as a pointer. The expected
bytes come from ``struct.pack`` of the value with the format a C compiler would use for the type
the source declares."""

from __future__ import annotations

import ctypes
import math
import random
import struct
from typing import Any

import pytest
from test_loader_launch import CONTEXT, GET_CURRENT, LAUNCH, PUSH, Failed, fail, native

from kernelpack.backends import launch as launching
from kernelpack.backends import signature as kargs
from kernelpack.errors import UsageError

__all__ = ["native"]  # the fixture that compiles the C launcher, used here by name

# candle's affine_f32(numel, num_dims, info, inp, out, mul, add): size_t, size_t, size_t*,
# float*, float*, float, float, as the cubin records it (sizes only)
AFFINE = kargs.Signature.from_index(
    "affine_f32",
    [
        {"type": "", "offset": o, "size": n}
        for o, n in ((0, 8), (8, 8), (16, 8), (24, 8), (32, 8), (40, 4), (44, 4))
    ],
)
# an 8-byte untyped (double or 64-bit int) and a 4-byte one (float or 32-bit int)
WIDE = kargs.Signature.from_index(
    "wide", [{"type": "", "offset": 0, "size": 8}, {"type": "", "offset": 8, "size": 4}]
)


def _random_cases(count: int) -> list[tuple[object, object, bytes]]:
    """(8-byte value, 4-byte value, expected slots) for fresh random floats and ints."""
    rng = random.Random()
    cases = []
    for _ in range(count):
        wide: object
        if rng.random() < 0.5:
            wide = rng.uniform(-1e300, 1e300)
            wide_bytes = struct.pack("<d", wide)
        else:
            wide = rng.randrange(-(2**63), 2**64)
            wide_bytes = struct.pack("<q" if wide < 0 else "<Q", wide)
        narrow: object
        if rng.random() < 0.5:
            narrow = float(struct.unpack("<f", struct.pack("<f", rng.uniform(-3e38, 3e38)))[0])
            narrow_bytes = struct.pack("<f", narrow)
        else:
            narrow = rng.randrange(-(2**31), 2**32)
            narrow_bytes = struct.pack("<i" if narrow < 0 else "<I", narrow)
        cases.append((wide, narrow, wide_bytes + narrow_bytes + bytes(4)))
    return cases


HAND_CASES = [
    (1.5, -0.25, struct.pack("<d", 1.5) + struct.pack("<f", -0.25) + bytes(4)),
    (-1, -(2**31), struct.pack("<q", -1) + struct.pack("<i", -(2**31)) + bytes(4)),
    (2**64 - 1, 2**32 - 1, struct.pack("<Q", 2**64 - 1) + struct.pack("<I", 2**32 - 1) + bytes(4)),
    (0.0, math.inf, struct.pack("<d", 0.0) + struct.pack("<f", math.inf) + bytes(4)),
    (7, 3, struct.pack("<Q", 7) + struct.pack("<I", 3) + bytes(4)),  # ints stay ints
]


@pytest.mark.parametrize(("wide", "narrow", "expected"), HAND_CASES + _random_cases(40))
def test_untyped_values_pack_by_their_python_type(
    wide: object, narrow: object, expected: bytes
) -> None:
    assert WIDE.pack([wide, narrow]) == expected


def test_affine_takes_float_mul_and_add() -> None:
    packed = AFFINE.pack([1000, 1, 0, 0x7F00_0000_0000, 0x7F00_0000_1000, 1.5, -0.25])
    assert packed[40:48] == struct.pack("<f", 1.5) + bytes(4)
    assert packed[48:56] == struct.pack("<f", -0.25) + bytes(4)
    assert packed[:8] == struct.pack("<Q", 1000)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([0, 1e39], r"argument 1 \(<4 bytes>\): 1e\+39 is out of range for float"),
        ([0, 2**32], r"argument 1 \(<4 bytes>\): 4294967296 is out of range"),
        ([0, -(2**31) - 1], r"argument 1 \(<4 bytes>\): -2147483649 is out of range"),
        ([0, "1"], r"argument 1 \(<4 bytes>\): expected an integer or a float, got str"),
        ([2**64, 0], r"argument 0 \(<8 bytes>\): .*out of range"),
        ([object(), 0], r"argument 0 \(<8 bytes>\)"),
    ],
)
def test_untyped_values_that_do_not_fit_are_named(values: list[object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        WIDE.pack(values)


class SlotRecorder:
    """A launch function with cuLaunchKernel's C signature that keeps each parameter's bytes
    (what the driver reads of its slot: its size)."""

    def __init__(self, signature: kargs.Signature) -> None:
        self.sizes = [t.size for t in signature.types]
        self.slots: list[bytes] = []
        self.launch = LAUNCH(self._launch)
        self.get_current = GET_CURRENT(self._get_current)
        self.push = PUSH(lambda context: 0)
        self.pop = GET_CURRENT(lambda out: 0)

    def _launch(self, function: int, *rest: Any) -> int:
        params = rest[-2]
        self.slots = [ctypes.string_at(params[i], size) for i, size in enumerate(self.sizes)]
        return 0

    def _get_current(self, out: Any) -> int:
        out[0] = CONTEXT
        return 0


def _launchers(native_module: Any, recorder: SlotRecorder, signature: kargs.Signature) -> list[Any]:
    binding = launching.DeviceBinding(1, recorder.get_current, recorder.push, recorder.pop, CONTEXT)
    native_launch = launching.native_launch(
        native_module.Launcher, recorder.launch, 0x1234, signature, fail, binding
    )
    ctypes_launch = launching.ctypes_launcher(
        signature, recorder.launch, 0x1234, fail, lambda: CONTEXT, CONTEXT, lambda: 0, lambda: None
    )
    return [native_launch, ctypes_launch]


def test_both_launch_paths_pass_untyped_values_alike(native: Any) -> None:
    """The C launcher and the ctypes one give the driver the bytes struct.pack gives."""
    recorder = SlotRecorder(WIDE)
    for launch in _launchers(native, recorder, WIDE):
        for wide, narrow, expected in HAND_CASES + _random_cases(40):
            recorder.slots = []
            launch(1, 1, wide, narrow)
            assert b"".join(recorder.slots) == expected[:12], (launch, wide, narrow)
        for bad in ([0, 1e39], [0, 2**32], [0, "1"], [2**64, 0]):
            with pytest.raises(Failed):
                launch(1, 1, *bad)


def test_both_launch_paths_pass_affines_floats(native: Any) -> None:
    recorder = SlotRecorder(AFFINE)
    args = (1000, 1, 0, 0x7F00_0000_0000, 0x7F00_0000_1000, 1.5, -0.25)
    for launch in _launchers(native, recorder, AFFINE):
        launch(4, 256, *args)
        assert recorder.slots[5] == struct.pack("<f", 1.5)
        assert recorder.slots[6] == struct.pack("<f", -0.25)
        assert recorder.slots[3] == struct.pack("<Q", 0x7F00_0000_0000)
