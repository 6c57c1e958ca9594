"""The walks on the GPU: the kernels of kernel_sources/walk/walk.cu through kernelpack's loader.

Host arrays go to the device and back through torch or CuPy, whichever is installed (torch
first), as raw bytes on that framework's current stream; the kernels take plain addresses. A
batch whose buffers would take more than half of the device's free memory runs in pieces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import RuntimeLibraryError
from .inputs import WalkInputs, WalkResult, check_inputs
from .lower import FLOAT_REGISTER_DEGREES, Lowered, lower
from .program import Op, Program

MODULE = "walk"
# Block sizes tried, largest first, until the block's slots fit SHARED_LIMIT; every target runs
# 48 KiB of dynamic shared memory without asking for more. The kernels' __launch_bounds__ is 256.
BLOCK_SIZES = (256, 128, 64, 32, 16)
# The residue kernel's blocks stop at 128 threads: at 10^4 walks, blocks of 256 left the SMs
# unevenly loaded (2 or 3 blocks each on an H100), and 128 ran 4-26% faster there and the same
# at 10^5 and 10^6 walks.
RESIDUE_MAX_BLOCK = 128
SHARED_LIMIT = 48 * 1024
MEMORY_FRACTION = 0.5  # of the device's free memory that one piece of a batch may take
MAX_PIECE_WALKS = 1 << 24  # keeps every grid's thread count far below 2^31
POISON = 0xFF  # outputs are filled with this byte before a launch (NaN for the floats)
# Below 2^53 every integer is a float64; the margin of one bit covers the rounding of the
# float64 interval arithmetic that bounds the values (float_registers_exact).
FLOAT_EXACT_BOUND = 2.0**52


def montgomery_moduli(primes: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    """(K, 4): p, -p^-1 mod 2^32, 2^64 mod p, 2^96 mod p for each prime (walk.cu's moduli)."""
    rows = [
        (p, (-pow(p, -1, 2**32)) % 2**32, 2**64 % p, 2**96 % p) for p in (int(v) for v in primes)
    ]
    return np.array(rows, dtype=np.uint32).reshape(-1, 4)


def constants_in_montgomery_form(
    consts: tuple[int, ...], primes: npt.NDArray[np.uint32]
) -> npt.NDArray[np.uint32]:
    """(K, n): each constant times 2^32 mod each prime, the form the residue kernel holds."""
    table = [[(c % int(p)) * 2**32 % int(p) for c in consts] for p in primes]
    return np.array(table, dtype=np.uint32).reshape(len(primes), len(consts))


def block_size(slots: int, slot_bytes: int, largest: int = BLOCK_SIZES[0]) -> int:
    """The largest block, up to ``largest``, whose threads' slots fit the shared-memory limit."""
    for size in BLOCK_SIZES:
        if size <= largest and slots * slot_bytes * size <= SHARED_LIMIT:
            return size
    raise ValueError(
        f"program: needs {slots} slots of {slot_bytes} bytes per thread, more than "
        f"{SHARED_LIMIT} bytes of shared memory hold for {BLOCK_SIZES[-1]} threads"
    )


def _interval(op: Op, a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if op is Op.ADD:
        return a[0] + b[0], a[1] + b[1]
    if op is Op.SUB:
        return a[0] - b[1], a[1] - b[0]
    if op is Op.MUL:
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if op is Op.NEG:
        return -a[1], -a[0]
    return a  # COPY


def float_registers_exact(inputs: WalkInputs, degree: int) -> bool:
    """Whether the float register kernel of ``degree`` steps these walks exactly as evaluating the
    program in float64 would: every value the program computes at a position from step 0 to
    depth + degree (the setup evaluates steps 0..degree, the tables hold differences of the
    entries up to that far), and 2^degree times every entry (a bound on its differences), below
    FLOAT_EXACT_BOUND. Interval arithmetic over all walks at once, in float64; an overflow gives
    inf or NaN, which fails the bound."""
    program = inputs.program
    shifts = inputs.shifts.astype(np.float64)
    far = shifts + float(inputs.depth + degree) * inputs.dirs.astype(np.float64)
    lows, highs = np.minimum(shifts, far).min(axis=0), np.maximum(shifts, far).max(axis=0)
    register: dict[int, tuple[float, float]] = {}
    bounds: list[float] = []
    for row in program.instrs:
        op, dst, a, b = (int(v) for v in row)
        name = Op(op)
        if name is Op.LOAD_AXIS:
            value = float(lows[a]), float(highs[a])
        elif name is Op.LOAD_CONST:
            value = (float(program.consts[a]),) * 2
        else:
            value = _interval(name, register[a], register.get(b, (0.0, 0.0)))
        register[dst] = value
        bounds.extend(abs(v) for v in value)
    bounds.extend(abs(v) * 2.0**degree for r in program.out_reg for v in register[int(r)])
    return all(bound < FLOAT_EXACT_BOUND for bound in bounds)


def _offsets(slots: npt.NDArray[np.int64], stride: int) -> npt.NDArray[np.uint32]:
    return (slots * stride).astype(np.uint32)


def _code_rows(rows: npt.NDArray[np.int64], stride: int) -> npt.NDArray[np.uint32]:
    """Slot code as walk.cu reads it: (op, dst, a, b) with slots turned into byte offsets."""
    coded = _offsets(rows, stride)
    coded[:, 0] = rows[:, 0]
    return coded


@dataclass(frozen=True)
class _Launch:
    """What both kernels need besides the walks: geometry and the arrays built from the program."""

    residue_block: int
    float_block: int
    float_registers: bool  # the float walk takes the register form (residue setup code, tables)
    code: npt.NDArray[np.uint32]  # setup rows, then step rows
    n_setup: int
    n_step: int
    tables: npt.NDArray[np.uint32]
    out: npt.NDArray[np.uint32]
    consts: npt.NDArray[np.uint32]  # (K, n_consts), Montgomery form
    moduli: npt.NDArray[np.uint32]
    float_code: npt.NDArray[np.uint32]  # step rows, or in the register form setup rows
    float_out: npt.NDArray[np.uint32]
    float_consts: npt.NDArray[np.float64]
    depth: int
    depth2: int

    @classmethod
    def build(cls, lowered: Lowered, inputs: WalkInputs) -> _Launch:
        residue, floats = lowered.residue, lowered.float
        block = block_size(residue.n_slots, 4, RESIDUE_MAX_BLOCK)
        stride = block * 4
        float_registers = (
            residue.form == "registers"
            and residue.degree <= FLOAT_REGISTER_DEGREES[lowered.m]
            and float_registers_exact(inputs, residue.degree)
        )
        float_rows, float_out = (
            (residue.setup, residue.out) if float_registers else (floats.step, floats.out)
        )
        float_block = block_size(residue.n_slots if float_registers else floats.n_slots, 8)
        float_stride = float_block * 8
        tables = _offsets(residue.tables, stride)
        tables[:, 1] = residue.tables[:, 1]
        return cls(
            residue_block=block,
            float_block=float_block,
            float_registers=float_registers,
            code=np.concatenate(
                [_code_rows(residue.setup, stride), _code_rows(residue.step, stride)]
            ),
            n_setup=len(residue.setup),
            n_step=len(residue.step),
            tables=tables,
            out=_offsets(residue.out, stride),
            consts=constants_in_montgomery_form(lowered.consts, inputs.primes),
            moduli=montgomery_moduli(inputs.primes),
            float_code=_code_rows(float_rows, float_stride),
            float_out=_offsets(float_out, float_stride),
            float_consts=np.array([float(c) for c in lowered.consts], dtype=np.float64),
            depth=inputs.depth,
            depth2=inputs.depth2,
        )


class _Buffers:
    """Device buffers through torch or CuPy on one device, as raw bytes."""

    def __init__(self, device: int) -> None:
        self.device = device
        try:
            import torch

            self.framework = "torch"
            self._torch: Any = torch
            return
        except ImportError:
            pass
        try:
            import cupy

            self.framework = "cupy"
            self._cupy: Any = cupy
        except ImportError:
            raise RuntimeLibraryError(
                "kernelpack.walk.run moves arrays to the GPU through torch or CuPy, and neither is "
                "installed; install one of them (or use run_numpy on the CPU)"
            ) from None

    def free_bytes(self) -> int:
        if self.framework == "torch":
            return int(self._torch.cuda.mem_get_info(self.device)[0])
        with self._cupy.cuda.Device(self.device):
            return int(self._cupy.cuda.runtime.memGetInfo()[0])

    def upload(self, array: npt.NDArray[Any]) -> Any:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if raw.size == 0:  # a valid address for an empty table
            raw = np.zeros(16, dtype=np.uint8)
        if not raw.flags.writeable:  # torch warns on read-only numpy memory
            raw = raw.copy()
        if self.framework == "torch":
            return self._torch.from_numpy(raw).to(f"cuda:{self.device}")
        with self._cupy.cuda.Device(self.device):
            return self._cupy.asarray(raw)

    def filled(self, nbytes: int, byte: int) -> Any:
        if self.framework == "torch":
            torch = self._torch
            return torch.full((nbytes,), byte, dtype=torch.uint8, device=f"cuda:{self.device}")
        with self._cupy.cuda.Device(self.device):
            return self._cupy.full(nbytes, byte, dtype=self._cupy.uint8)

    def download(self, buffer: Any, dtype: type[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        raw = buffer.cpu().numpy() if self.framework == "torch" else buffer.get()
        host: npt.NDArray[Any] = np.asarray(raw).view(dtype).reshape(shape)
        return host

    def pointer(self, buffer: Any) -> int:
        return int(buffer.data_ptr()) if self.framework == "torch" else int(buffer.data.ptr)

    def stream(self) -> int:
        if self.framework == "torch":
            return int(self._torch.cuda.current_stream(self.device).cuda_stream)
        with self._cupy.cuda.Device(self.device):
            return int(self._cupy.cuda.get_current_stream().ptr)


def piece_walks(inputs: WalkInputs, free_bytes: int) -> int:
    """How many walks one piece of the batch takes: its buffers within MEMORY_FRACTION of the
    free memory (at least one walk, at most MAX_PIECE_WALKS)."""
    m, primes = inputs.program.m, len(inputs.primes)
    per_walk = 16 * inputs.dim + 4 * primes * m * m + 4 + 4 * 8
    return max(1, min(MAX_PIECE_WALKS, int(free_bytes * MEMORY_FRACTION) // per_walk))


def _residue_launch(
    module: Any, lowered: Lowered, launch: _Launch, ptr: dict[str, int]
) -> tuple[Any, Callable[[int, int, int, int, int], tuple[object, ...]]]:
    """The residue kernel for the lowered form, and the arguments it takes per piece of the batch
    (from the piece's shifts, dirs, walk count, P_final and alive addresses)."""
    residue, m = lowered.residue, lowered.m
    inputs_tail = (ptr["consts"], len(lowered.consts), ptr["moduli"])
    if residue.form == "registers":
        kernel = module.kernel(f"walk_registers_m{m}_d{residue.degree}")

        def arguments(
            shifts: int, dirs: int, count: int, p_final: int, alive: int
        ) -> tuple[object, ...]:
            return (shifts, dirs, count, lowered.dim, ptr["code"], launch.n_setup,
                    int(residue.out[0]), *inputs_tail, launch.depth, launch.depth2, p_final,
                    alive)  # fmt: skip

        return kernel, arguments
    kernel = module.kernel(f"walk_residues_m{m}")

    def general(shifts: int, dirs: int, count: int, p_final: int, alive: int) -> tuple[object, ...]:
        return (shifts, dirs, count, lowered.dim, ptr["code"], launch.n_setup, launch.n_step,
                ptr["tables"], len(launch.tables), ptr["out"], *inputs_tail, launch.depth,
                launch.depth2, p_final, alive)  # fmt: skip

    return kernel, general


def run(
    program: Program,
    shifts: object,
    dirs: object,
    primes: object,
    depth: object,
    depth1: object,
    depth2: object,
    target: object,
    device: int | None = None,
) -> WalkResult:
    """The walks of WALK.md on the GPU ``device`` (a position in kernelpack's GPU list)."""
    inputs = check_inputs(program, shifts, dirs, primes, depth, depth1, depth2, target)
    lowered = lower(program, inputs.dim, inputs.depth, registers=True)
    launch = _Launch.build(lowered, inputs)
    from .. import loader

    module = loader.load(MODULE, device=device)
    buffers = _Buffers(module.gpu.index)  # the vendor runtime's number, as torch/CuPy count
    m = program.m
    constant = {
        name: buffers.upload(getattr(launch, name))
        for name in ("code", "tables", "out", "consts", "moduli", "float_code", "float_out",
                     "float_consts")
    }  # fmt: skip
    ptr = {name: buffers.pointer(buffer) for name, buffer in constant.items()}
    residue_kernel, residue_arguments = _residue_launch(module, lowered, launch, ptr)
    if launch.float_registers:
        float_kernel = module.kernel(f"walk_float_registers_m{m}_d{lowered.residue.degree}")
        float_program: tuple[object, ...] = (ptr["float_code"], len(launch.float_code),
                                             int(lowered.residue.out[0]))  # fmt: skip
        float_slots = lowered.residue.n_slots
    else:
        float_kernel = module.kernel(f"walk_float_m{m}")
        float_program = (ptr["float_code"], len(launch.float_code), ptr["float_out"])
        float_slots = lowered.float.n_slots
    walks, primes_count = inputs.walks, len(inputs.primes)
    p_final = np.empty((walks, primes_count, m, m), dtype=np.uint32)
    alive = np.empty(walks, dtype=bool)
    estimates = np.empty((4, walks))
    piece = piece_walks(inputs, buffers.free_bytes())
    stream = buffers.stream()
    for start in range(0, walks, piece):
        part = slice(start, min(walks, start + piece))
        count = part.stop - part.start
        shifts_d = buffers.upload(inputs.shifts[part])
        dirs_d = buffers.upload(inputs.dirs[part])
        p_final_d = buffers.filled(count * primes_count * m * m * 4, POISON)
        alive_d = buffers.filled(count * 4, 0)
        estimates_d = buffers.filled(4 * count * 8, POISON)
        est = buffers.pointer(estimates_d)
        residue_kernel.launch(
            (-(-count // launch.residue_block), primes_count),
            launch.residue_block,
            *residue_arguments(
                buffers.pointer(shifts_d),
                buffers.pointer(dirs_d),
                count,
                buffers.pointer(p_final_d),
                buffers.pointer(alive_d),
            ),
            shared_mem=lowered.residue.n_slots * 4 * launch.residue_block,
            stream=stream,
        )
        float_kernel.launch(
            -(-count // launch.float_block),
            launch.float_block,
            buffers.pointer(shifts_d),
            buffers.pointer(dirs_d),
            count,
            inputs.dim,
            *float_program,
            ptr["float_consts"],
            len(lowered.consts),
            launch.depth,
            inputs.depth1,
            launch.depth2,
            inputs.target,
            est,
            est + 8 * count,
            est + 16 * count,
            est + 24 * count,
            shared_mem=float_slots * 8 * launch.float_block,
            stream=stream,
        )
        p_final[part] = buffers.download(p_final_d, np.uint32, (count, primes_count, m, m))
        alive[part] = buffers.download(alive_d, np.uint32, (count,)) != 0
        estimates[:, part] = buffers.download(estimates_d, np.float64, (4, count))
    return WalkResult(p_final, alive, estimates[0], estimates[1], estimates[2], estimates[3])
