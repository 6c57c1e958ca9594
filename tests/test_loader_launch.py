"""Both launch paths, the C extension and ctypes, against a launch function that records its call.

The recording function has cuLaunchKernel's (and hipModuleLaunchKernel's) C signature and is
called through a real C function pointer, so what it sees is exactly what the driver would be
given: the grid, the block, the stream and each parameter's bytes. Both paths must agree byte for
byte and refuse the same arguments. The C extension is compiled here with the system compiler.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import struct
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelpack.backends import launch as launching
from kernelpack.backends import signature as kargs
from kernelpack.devices import pointers
from kernelpack.errors import UsageError

NATIVE_SOURCE = (
    Path(__file__).parent.parent / "wheels" / "kernelpack" / "backends" / "_native" / "launcher.c"
)

LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    *[ctypes.c_uint] * 7,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
)
GET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
PUSH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

PARAMS = [
    ("char", "b"),
    ("unsigned char", "B"),
    ("short", "h"),
    ("unsigned short", "H"),
    ("int", "i"),
    ("unsigned int", "I"),
    ("long long", "q"),
    ("size_t", "Q"),
    ("float", "f"),
    ("double", "d"),
    ("bool", "?"),
    ("const float *__restrict__", "P"),
]
SIGNATURE = kargs.Signature.from_index(
    "everything",
    [
        {"type": t, "offset": 8 * i, "size": struct.calcsize("Q" if code == "P" else code)}
        for i, (t, code) in enumerate(PARAMS)
    ],
)
GOOD = (
    -128,
    255,
    -32768,
    65535,
    -(2**31),
    2**32 - 1,
    -(2**63),
    2**64 - 1,
    1.5,
    -2.25,
    True,
    0xDEAD_BEEF_0000,
)
CONTEXT = 0xC0FFEE


class Recorder:
    """The fake driver: a launch function, and the context calls the CUDA binding makes."""

    def __init__(self, current: int) -> None:
        self.current = current
        self.answer = 0  # what the launch function returns: 0, or a driver error code
        self.calls: list[dict[str, Any]] = []
        self.pushes: list[int] = []
        self.pops = 0
        self.launch = LAUNCH(self._launch)
        self.get_current = GET_CURRENT(self._get_current)
        self.push = PUSH(self._push)
        self.pop = GET_CURRENT(self._pop)

    def _launch(
        self,
        function: int,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: int | None,
        params: Any,
        extra: int | None,
    ) -> int:
        if self.answer:
            return self.answer
        slots = [ctypes.string_at(params[i], SIGNATURE.types[i].size) for i in range(len(PARAMS))]
        self.calls.append(
            {
                "function": function,
                "dims": (gx, gy, gz, bx, by, bz),
                "shared": shared,
                "stream": stream or 0,
                "slots": slots,
                "current": self.current,
            }
        )
        return 0

    def _get_current(self, out: Any) -> int:
        out[0] = self.current
        return 0

    def _push(self, context: int) -> int:
        self.pushes.append(context)
        self.current = context
        return 0

    def _pop(self, out: Any) -> int:
        self.pops += 1
        self.current = 0x1111
        return 0


def address(function: Any) -> int:
    return int(ctypes.cast(function, ctypes.c_void_p).value or 0)


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """kernelpack.backends._launcher compiled from source (skipped where no C compiler is installed)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build kernelpack.backends._launcher")
    out = tmp_path_factory.mktemp("native") / "_launcher.abi3.so"
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [
            compiler,
            "-O2",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Werror",
            f"-I{include}",
            str(NATIVE_SOURCE),
            "-o",
            str(out),
        ],
        check=True,
    )
    spec = importlib.util.spec_from_file_location("kernelpack.backends._launcher", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Failed(Exception):
    """What the recording fail callable raises: the code and the arguments it was given."""

    def __init__(self, code: int, args: tuple[object, ...]) -> None:
        super().__init__(code)
        self.code = code
        self.args_given = args


def fail(
    code: int, grid: object, block: object, args: tuple[object, ...], shared: object, stream: object
) -> None:
    raise Failed(code, args)


LauncherFactory = Callable[[Recorder, kargs.Signature], Callable[..., None]]


def native_path(native: Any) -> LauncherFactory:
    def make(recorder: Recorder, signature: kargs.Signature) -> Callable[..., None]:
        binding = launching.DeviceBinding(
            1, recorder.get_current, recorder.push, recorder.pop, CONTEXT
        )
        return launching.native_launch(  # type: ignore[no-any-return]
            native.Launcher, recorder.launch, 0x1234, signature, fail, binding
        )

    return make


def ctypes_path(recorder: Recorder, signature: kargs.Signature) -> Callable[..., None]:
    def current() -> int:
        value = ctypes.c_void_p()
        recorder.get_current(ctypes.byref(value))
        return value.value or 0

    return launching.ctypes_launcher(
        signature,
        recorder.launch,
        0x1234,
        fail,
        current,
        CONTEXT,
        lambda: recorder.push(CONTEXT),
        lambda: recorder.pop(ctypes.byref(ctypes.c_void_p())),
    )


@pytest.fixture(params=["native", "ctypes"])
def make_launcher(request: pytest.FixtureRequest) -> LauncherFactory:
    if request.param == "ctypes":
        return ctypes_path
    return native_path(request.getfixturevalue("native"))


def expected_slots(values: tuple[Any, ...]) -> list[bytes]:
    return [
        struct.pack("<" + ("Q" if code == "P" else code), v)
        for (_, code), v in zip(PARAMS, values, strict=True)
    ]


def test_every_c_type_is_packed_as_the_driver_reads_it(make_launcher: LauncherFactory) -> None:
    recorder = Recorder(current=CONTEXT)
    launch = make_launcher(recorder, SIGNATURE)
    assert launch((3, 2), [64, 2, 1], *GOOD, shared_mem=256, stream=0xABC) is None
    (call,) = recorder.calls
    assert call["function"] == 0x1234
    assert call["dims"] == (3, 2, 1, 64, 2, 1)
    assert call["shared"] == 256 and call["stream"] == 0xABC
    assert call["slots"] == expected_slots(GOOD)
    assert recorder.pushes == [] and recorder.pops == 0


def test_another_current_context_is_restored(make_launcher: LauncherFactory) -> None:
    recorder = Recorder(current=0x1111)
    make_launcher(recorder, SIGNATURE)(1, 1, *GOOD)
    assert recorder.calls[0]["current"] == CONTEXT
    assert recorder.pushes == [CONTEXT] and recorder.pops == 1
    assert recorder.current == 0x1111


def test_a_driver_error_goes_to_fail(make_launcher: LauncherFactory) -> None:
    recorder = Recorder(current=CONTEXT)
    recorder.answer = 700
    with pytest.raises(Failed) as failed:
        make_launcher(recorder, SIGNATURE)(1, 1, *GOOD)
    assert failed.value.code == 700 and failed.value.args_given == GOOD


def bad_arguments() -> list[tuple[str, tuple[Any, ...]]]:
    cases = []
    for position, (_, code) in enumerate(PARAMS):
        for value in {
            "b": (128, -129),
            "B": (256, -1),
            "h": (32768,),
            "H": (-1, 65536),
            "i": (2**31,),
            "I": (-1, 2**32),
            "q": (2**63,),
            "Q": (-1, 2**64),
            "f": ("1.0", 1e39),
            "d": (None,),
            "?": (1.5,),
            "P": (-1, 2**64, 1.0),
        }[code]:
            args = list(GOOD)
            args[position] = value
            cases.append((f"p{position}={value!r}", tuple(args)))
    return cases


@pytest.mark.parametrize(("case", "args"), bad_arguments(), ids=[c for c, _ in bad_arguments()])
def test_bad_arguments_are_refused_before_the_launch(
    make_launcher: LauncherFactory, case: str, args: tuple[Any, ...]
) -> None:
    recorder = Recorder(current=CONTEXT)
    with pytest.raises(Failed) as failed:
        make_launcher(recorder, SIGNATURE)(1, 1, *args)
    assert failed.value.code == -1 and failed.value.args_given == args
    assert recorder.calls == []
    with pytest.raises(UsageError, match=f"argument {case.split('=')[0][1:]} \\("):
        raise SIGNATURE.explain(args)


@pytest.mark.parametrize(
    ("grid", "block", "shared", "count"),
    [
        (0, 1, 0, 12),
        ((1, 1, 1, 1), 1, 0, 12),
        (1, 2**32, 0, 12),
        (1, 1, -1, 12),
        (1, 1, 2**32, 12),
        (1, 1, 0, 11),
        ("1", 1, 0, 12),
    ],
)
def test_bad_launch_shapes_are_refused(
    make_launcher: LauncherFactory, grid: Any, block: Any, shared: int, count: int
) -> None:
    recorder = Recorder(current=CONTEXT)
    with pytest.raises(Failed) as failed:
        make_launcher(recorder, SIGNATURE)(grid, block, *GOOD[:count], shared_mem=shared)
    assert failed.value.code == -1
    assert recorder.calls == []


def test_unknown_keywords_are_refused(make_launcher: LauncherFactory) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'shared'"):
        make_launcher(Recorder(current=CONTEXT), SIGNATURE)(1, 1, *GOOD, shared=4)


class CudaArray:
    """Any object with the CUDA array interface (what Numba, JAX and others hand over)."""

    def __init__(self, pointer: int) -> None:
        self.__cuda_array_interface__ = {
            "data": (pointer, False),
            "shape": (4,),
            "typestr": "<f4",
            "version": 3,
        }


class TorchLikeStream:
    cuda_stream = 0x5555


def test_objects_become_pointers_and_streams(make_launcher: LauncherFactory) -> None:
    recorder = Recorder(current=CONTEXT)
    launch = make_launcher(recorder, SIGNATURE)
    launch(1, 1, *GOOD[:-1], CudaArray(0x7F00_0000_1000), stream=TorchLikeStream())
    assert recorder.calls[0]["slots"][-1] == struct.pack("<Q", 0x7F00_0000_1000)
    assert recorder.calls[0]["stream"] == 0x5555


class FakeTorchTensor:
    """Looks like torch.Tensor to the pointer lookup, which the C launcher then reads itself."""

    __module__ = "torch"

    def __init__(self, pointer: int, device: str) -> None:
        self.pointer = pointer
        self.device = device

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    def data_ptr(self) -> int:
        return self.pointer


def test_torch_tensors_are_read_and_host_ones_refused(make_launcher: LauncherFactory) -> None:
    recorder = Recorder(current=CONTEXT)
    launch = make_launcher(recorder, SIGNATURE)
    launch(1, 1, *GOOD[:-1], FakeTorchTensor(0x7F00_0000_2000, "cuda"))
    assert recorder.calls[0]["slots"][-1] == struct.pack("<Q", 0x7F00_0000_2000)
    host = (*GOOD[:-1], FakeTorchTensor(0x1000, "cpu"))
    with pytest.raises(Failed):
        launch(1, 1, *host)
    assert len(recorder.calls) == 1
    with pytest.raises(
        UsageError, match=r"argument 11 \(const float \*__restrict__\).*on cpu is not GPU memory"
    ):
        raise SIGNATURE.explain(host)


def test_host_arrays_are_refused_with_a_message(make_launcher: LauncherFactory) -> None:
    numpy = pytest.importorskip("numpy")
    recorder = Recorder(current=CONTEXT)
    host = (*GOOD[:-1], numpy.zeros(4))
    with pytest.raises(Failed):
        make_launcher(recorder, SIGNATURE)(1, 1, *host)
    assert recorder.calls == []
    with pytest.raises(UsageError, match="host memory"):
        raise SIGNATURE.explain(host)


def test_dlpack_producer_on_the_cpu_is_refused() -> None:
    class CpuDLPack:
        def __dlpack__(self) -> object:
            raise AssertionError("not called for a CPU device")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    with pytest.raises(UsageError, match="DLPack device type 1"):
        pointers.pointer_of(CpuDLPack())


def test_dlpack_capsule_address_is_read() -> None:
    numpy = pytest.importorskip("numpy")
    array = numpy.arange(16, dtype=numpy.float32)[4:]

    class Relabelled:
        """A DLPack producer claiming CUDA memory, backed by a NumPy array's capsule."""

        def __dlpack__(self) -> object:
            return array.__dlpack__()

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

    assert pointers.pointer_of(Relabelled()) == array.ctypes.data


def test_unsupported_parameter_type_is_named() -> None:
    with pytest.raises(UsageError, match=r"'struct params' cannot be passed from Python"):
        kargs.Signature.from_index("k", [{"type": "struct params", "offset": 0, "size": 16}])


def test_a_size_that_disagrees_with_the_type_is_refused() -> None:
    with pytest.raises(UsageError, match=r"parameter 0 \(int\) is 8 bytes in the compiled object"):
        kargs.Signature.from_index("k", [{"type": "int", "offset": 0, "size": 8}])


def test_c_linkage_parameters_pass_by_size() -> None:
    """No type in the symbol: 1 and 2 bytes an unsigned integer; 4 and 8 bytes by the Python
    value (tests/test_project_args.py checks that rule on both launch paths)."""
    signature = kargs.Signature.from_index(
        "plain",
        [{"type": "", "offset": o, "size": n} for o, n in ((0, 8), (8, 4), (12, 2), (14, 1))],
    )
    assert signature.describe() == "plain(<8 bytes>, <4 bytes>, <2 bytes>, <1 bytes>)"
    packed = signature.pack([0xDEAD_BEEF_0000, 2**32 - 1, 65535, 255])
    assert struct.unpack("<QI4xH6xB7x", packed) == (0xDEAD_BEEF_0000, 2**32 - 1, 65535, 255)
    with pytest.raises(UsageError, match=r"argument 1 \(<4 bytes>\): 4294967296 is out of range"):
        signature.pack([0, 2**32, 0, 0])
    with pytest.raises(UsageError, match=r"argument 2 .*expected an integer, got float"):
        signature.pack([0, 0, 1.5, 0])
    with pytest.raises(UsageError, match="3 bytes with no type"):
        kargs.Signature.from_index("odd", [{"type": "", "offset": 0, "size": 3}])


def test_signature_describes_itself() -> None:
    assert SIGNATURE.describe().startswith("everything(char, unsigned char, short")
    assert sys.byteorder == "little"  # the slots are packed little-endian, as the GPUs read them
