"""The walks on the GPU: the kernels of kernel_sources/walk/walk.cu through kernelpack's loader.

Memory comes from torch or CuPy (the framework of the caller's arrays, else whichever is
installed, torch first), as raw bytes on that framework's current stream; the kernels take plain
addresses. Two ways in and out:

- shifts and dirs already on the GPU (torch, CuPy) are read in place and checked there
  (walk_bounds); the outputs are whole-batch arrays of that framework on that device;
- numpy in: each piece of the batch is uploaded, and the outputs asked for come back on a second
  stream into page-locked memory while the next piece computes (PIPELINE_PIECES).

Only the outputs asked for are kept (P_final is not even written otherwise), and the search's
selection (hits, top k) runs on the device per piece; the pieces' few records merge on the host.
A batch whose buffers would take more than half of the device's free memory runs in pieces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..devices import Device
from ..errors import RuntimeLibraryError
from .buffers import Buffers, device_array, device_index, framework_of, on_device, vendor_of
from .inputs import (
    OUTPUTS,
    Request,
    Scalars,
    WalkInputs,
    WalkResult,
    check_inputs,
    check_positions,
    check_request,
    check_scalars,
    check_shape,
    positions_fit,
    ranges_from_bounds,
)
from .lower import FLOAT_REGISTER_DEGREES, Lowered, lower
from .program import INT64_MAX, INT64_MIN, Op, Program
from .select import Selection, merge_hits, merge_top

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
# The selection kernels (walk.cu): blocks, the state words, one pass per byte of a 96-bit key.
SELECT_BLOCK = 256
SELECT_MAX_BLOCKS = 2048
SELECT_STATE_WORDS = 8
SELECT_DIGITS = 12
SELECT_BINS = 256
# Numpy results come back piece by piece on a second stream while the next piece computes: a
# batch of at least 2 * PIPELINE_MIN_WALKS walks runs in at least PIPELINE_PIECES pieces.
PIPELINE_PIECES = 4
PIPELINE_MIN_WALKS = 65536
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


def float_registers_exact(inputs: WalkInputs | DeviceInputs, degree: int) -> bool:
    """Whether the float register kernel of ``degree`` steps these walks exactly as evaluating the
    program in float64 would: every value the program computes at a position from step 0 to
    depth + degree (the setup evaluates steps 0..degree, the tables hold differences of the
    entries up to that far), and 2^degree times every entry (a bound on its differences), below
    FLOAT_EXACT_BOUND. Interval arithmetic over all walks at once, in float64; an overflow gives
    inf or NaN, which fails the bound."""
    program = inputs.program
    lows, highs = inputs.axis_ranges(inputs.depth + degree)
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
    def build(cls, lowered: Lowered, inputs: WalkInputs | DeviceInputs) -> _Launch:
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


@dataclass(frozen=True, eq=False)
class DeviceInputs:
    """Checked arguments whose shifts and dirs are int64 (B, dim) arrays on the GPU, read in
    place: ``shifts_ptr``/``dirs_ptr`` their addresses, ``bounds`` (4, dim) the smallest and
    largest shift and dir per axis (walk.cu's walk_bounds)."""

    program: Program
    shifts: Any
    dirs: Any
    shifts_ptr: int
    dirs_ptr: int
    shape: tuple[int, int]
    bounds: npt.NDArray[np.int64]
    primes: npt.NDArray[np.uint32]
    depth: int
    depth1: int
    depth2: int
    target: float

    @property
    def walks(self) -> int:
        return self.shape[0]

    @property
    def dim(self) -> int:
        return self.shape[1]

    def axis_ranges(self, steps: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        return ranges_from_bounds(self.bounds, steps)


def piece_walks(inputs: WalkInputs | DeviceInputs, free_bytes: int, p_final: bool = True) -> int:
    """How many walks one piece of the batch takes: its buffers within MEMORY_FRACTION of the
    free memory (at least one walk, at most MAX_PIECE_WALKS). Per walk: shifts and dirs, P_final
    when asked for, alive and the four estimates, and room for it as a hit (a record with its
    shift and dir)."""
    m, primes = inputs.program.m, len(inputs.primes)
    record = 4 + 8 + 8 + 16 * inputs.dim
    per_walk = 16 * inputs.dim + (4 * primes * m * m if p_final else 0) + 4 + 4 * 8 + record
    return max(1, min(MAX_PIECE_WALKS, int(free_bytes * MEMORY_FRACTION) // per_walk))


def _residue_launch(
    module: Any, lowered: Lowered, launch: _Launch, ptr: dict[str, int]
) -> tuple[Any, Callable[[int, int, int, int, int], tuple[object, ...]]]:
    """The residue kernel for the lowered form, and the arguments it takes per piece of the batch
    (from the piece's shifts, dirs, walk count, P_final and alive addresses)."""
    residue, m = lowered.residue, lowered.m
    inputs_tail = (ptr["consts"], len(lowered.consts), ptr["moduli"])
    if residue.form == "registers":
        kernel = module.kernel(f"walk_registers<{m}, {residue.degree}>")

        def arguments(
            shifts: int, dirs: int, count: int, p_final: int, alive: int
        ) -> tuple[object, ...]:
            return (shifts, dirs, count, lowered.dim, ptr["code"], launch.n_setup,
                    int(residue.out[0]), *inputs_tail, launch.depth, launch.depth2, p_final,
                    alive)  # fmt: skip

        return kernel, arguments
    kernel = module.kernel(f"walk_residues<{m}>")

    def general(shifts: int, dirs: int, count: int, p_final: int, alive: int) -> tuple[object, ...]:
        return (shifts, dirs, count, lowered.dim, ptr["code"], launch.n_setup, launch.n_step,
                ptr["tables"], len(launch.tables), ptr["out"], *inputs_tail, launch.depth,
                launch.depth2, p_final, alive)  # fmt: skip

    return kernel, general


class _Selector:
    """The selection kernels over each piece of a batch, and the merge of the pieces' records
    on the host (kernelpack.walk.select's rule; walk.cu's "Selection on the device")."""

    def __init__(
        self, module: Any, buffers: Buffers, request: Request, dim: int, stream: int
    ) -> None:
        self.kernels = {name: module.kernel(f"walk_select_{name}")
                        for name in ("hits", "histogram", "pick", "top")}  # fmt: skip
        self.buffers, self.request, self.dim, self.stream = buffers, request, dim, stream
        self.hits: list[Selection] = []
        self.top: list[Selection] = []

    def _records(self, capacity: int) -> tuple[Any, list[int]]:
        """A poisoned buffer for ``capacity`` records and the addresses of its five columns
        (walk int32, est, delta, shift and dir rows), 8-byte columns first."""
        sizes = [8 * capacity, 8 * capacity, 8 * capacity * self.dim, 8 * capacity * self.dim,
                 4 * capacity]  # fmt: skip
        buffer = self.buffers.filled(sum(sizes), POISON)
        base, addresses = self.buffers.pointer(buffer), []
        for size in sizes:
            addresses.append(base)
            base += size
        est, delta, shift, direction, walk = addresses
        return buffer, [walk, est, delta, shift, direction]

    def _read(self, buffer: Any, capacity: int, count: int) -> Selection:
        dim, at = self.dim, 0
        columns: list[npt.NDArray[Any]] = []
        for dtype, width in ((np.float64, 1), (np.float64, 1), (np.int64, dim), (np.int64, dim),
                             (np.int32, 1)):  # fmt: skip
            size = np.dtype(dtype).itemsize * capacity * width
            if count:
                part = buffer[at : at + size]
                columns.append(self.buffers.download(part, dtype, (count, width)))
            else:
                columns.append(np.zeros((0, width), dtype=dtype))
            at += size
        est, delta, shifts, dirs, walk = columns
        return Selection(walk[:, 0].astype(np.int64), est[:, 0], delta[:, 0], shifts, dirs)

    def piece(self, pointers: dict[str, int], count: int, first: int) -> None:
        """Select among ``count`` walks (pointers: est2, delta2, alive, shifts, dirs) whose first
        is walk ``first`` of the batch."""
        request, launch = self.request, {"stream": self.stream}
        blocks = min(SELECT_MAX_BLOCKS, -(-count // SELECT_BLOCK))
        state = self.buffers.filled(8 * SELECT_STATE_WORDS, 0)
        histogram = self.buffers.filled(4 * SELECT_DIGITS * SELECT_BINS, 0)
        walks = (pointers["est2"], pointers["delta2"], pointers["alive"], pointers["shifts"],
                 pointers["dirs"], count, self.dim)  # fmt: skip
        hit_capacity = count if request.min_delta is not None else 1
        hits, hit_columns = self._records(hit_capacity)
        # NaN compares false: with no threshold the kernel only counts the candidates
        threshold = math.nan if request.min_delta is None else request.min_delta
        state_ptr = self.buffers.pointer(state)
        self.kernels["hits"].launch(blocks, SELECT_BLOCK, *walks, threshold, state_ptr,
                                    *hit_columns, **launch)  # fmt: skip
        top_capacity = max(1, min(request.top_k, count))  # at most the piece's walks are kept
        top, top_columns = self._records(top_capacity)
        if request.top_k:
            histogram_ptr = self.buffers.pointer(histogram)
            for digit in range(SELECT_DIGITS):
                self.kernels["histogram"].launch(
                    blocks, SELECT_BLOCK, pointers["delta2"], pointers["alive"], count, digit,
                    state_ptr, histogram_ptr, **launch,
                )  # fmt: skip
                self.kernels["pick"].launch(1, 1, digit, request.top_k, state_ptr, histogram_ptr,
                                            **launch)  # fmt: skip
            self.kernels["top"].launch(blocks, SELECT_BLOCK, *walks, state_ptr, *top_columns,
                                       **launch)  # fmt: skip
        counts = self.buffers.download(state, np.uint64, (SELECT_STATE_WORDS,))
        if request.min_delta is not None:
            self.hits.append(self._read(hits, hit_capacity, int(counts[1])).offset(first))
        if request.top_k:
            written = int(counts[5])
            expected = min(request.top_k, int(counts[0]))
            if written != expected:
                raise RuntimeLibraryError(
                    f"walk_select_top wrote {written} walks, expected {expected}: the selection "
                    "kernels disagree; report this with KERNELPACK_DEBUG=1 output"
                )
            self.top.append(self._read(top, top_capacity, written).offset(first))

    def result(self) -> tuple[Selection | None, Selection | None]:
        hits = merge_hits(self.hits, self.dim) if self.request.min_delta is not None else None
        top = merge_top(self.top, self.request.top_k, self.dim) if self.request.top_k else None
        return hits, top


def _check_device_inputs(
    program: Program,
    shifts: Any,
    dirs: Any,
    scalars: Scalars,
    module: Any,
    buffers: Buffers,
) -> DeviceInputs:
    """Shifts and dirs on the GPU, checked there: their shape here, their positions from the
    per-axis bounds that walk_bounds computes (the exact walk-by-walk check, on the host, only
    when the bounds alone cannot rule out an overflow)."""
    shifts_ptr, shape = device_array(shifts, "shifts")
    dirs_ptr, dir_shape = device_array(dirs, "dirs")
    check_shape(program, shape, dir_shape)
    walks, dim = shape
    start = np.array([[INT64_MAX] * dim, [INT64_MIN] * dim] * 2, dtype=np.int64)
    bounds_d = buffers.upload(start)
    blocks = min(SELECT_MAX_BLOCKS, -(-walks // SELECT_BLOCK))
    module.kernel("walk_bounds").launch(
        blocks, SELECT_BLOCK, shifts_ptr, dirs_ptr, walks, dim, buffers.pointer(bounds_d),
        stream=buffers.stream(),
    )  # fmt: skip
    bounds = buffers.download(bounds_d, np.int64, (4, dim))
    if not positions_fit(bounds, scalars.depth):
        check_positions(_to_host(shifts), _to_host(dirs), scalars.depth)
    return DeviceInputs(program, shifts, dirs, shifts_ptr, dirs_ptr, (walks, dim), bounds,
                        scalars.primes, scalars.depth, scalars.depth1, scalars.depth2,
                        scalars.target)  # fmt: skip


def _to_host(array: Any) -> npt.NDArray[np.int64]:
    host = array.cpu().numpy() if hasattr(array, "cpu") else array.get()
    return np.asarray(host, dtype=np.int64)


def run(
    program: Program,
    shifts: object,
    dirs: object,
    primes: object,
    depth: object,
    depth1: object,
    depth2: object,
    target: object,
    device: Device = None,
    *,
    outputs: Collection[str] = OUTPUTS,
    min_delta: float | None = None,
    top_k: int = 0,
) -> WalkResult:
    """The walks of WALK.md on the GPU ``device`` (None: the first; "cuda:N", "hip:N"; an int on
    a machine of one vendor).

    shifts and dirs may be numpy (or anything array-like) or int64 arrays on the GPU (torch or
    CuPy; the walks then run on their device, and the outputs are arrays of that framework
    there). ``outputs`` names the WalkResult arrays wanted (the others are None: P_final, half a
    gigabyte at B = 10^6 and K = 32, is then never written). With ``min_delta`` and/or
    ``top_k`` the selection runs on the GPU (kernelpack.walk.select): only the kept walks come
    back to the host.
    """
    request = check_request(outputs, min_delta, top_k)
    from .. import loader

    if on_device(shifts) or on_device(dirs):
        if not (on_device(shifts) and on_device(dirs)):
            raise ValueError(
                "shifts, dirs: one is on the GPU and the other is not; pass both there"
            )
        index = device_index(shifts)
        if device_index(dirs) != index:
            raise ValueError(f"shifts, dirs: on different GPUs ({index} and {device_index(dirs)})")
        name = f"{vendor_of(shifts)}:{index}"
        if device is not None and device not in (name, index):
            raise ValueError(f"device: {device!r}, but shifts and dirs are on {name}")
        scalars = check_scalars(program, primes, depth, depth1, depth2, target)
        module = loader.load(MODULE, device=name)
        buffers = Buffers(module.gpu.index, framework_of(shifts))
        inputs: WalkInputs | DeviceInputs = _check_device_inputs(
            program, shifts, dirs, scalars, module, buffers
        )
    else:
        inputs = check_inputs(program, shifts, dirs, primes, depth, depth1, depth2, target)
        module = loader.load(MODULE, device=device)
        buffers = Buffers(module.gpu.index)  # the vendor runtime's number, as torch/CuPy count
    return _walk(inputs, request, module, buffers)


def _walk(
    inputs: WalkInputs | DeviceInputs, request: Request, module: Any, buffers: Buffers
) -> WalkResult:
    program = inputs.program
    lowered = lower(program, inputs.dim, inputs.depth, registers=True)
    launch = _Launch.build(lowered, inputs)
    m, dim = program.m, inputs.dim
    constant = {
        name: buffers.upload(getattr(launch, name))
        for name in ("code", "tables", "out", "consts", "moduli", "float_code", "float_out",
                     "float_consts")
    }  # fmt: skip
    ptr = {name: buffers.pointer(buffer) for name, buffer in constant.items()}
    residue_kernel, residue_arguments = _residue_launch(module, lowered, launch, ptr)
    if launch.float_registers:
        float_kernel = module.kernel(f"walk_float_registers<{m}, {lowered.residue.degree}>")
        float_program: tuple[object, ...] = (ptr["float_code"], len(launch.float_code),
                                             int(lowered.residue.out[0]))  # fmt: skip
        float_slots = lowered.residue.n_slots
    else:
        float_kernel = module.kernel(f"walk_float<{m}>")
        float_program = (ptr["float_code"], len(launch.float_code), ptr["float_out"])
        float_slots = lowered.float.n_slots
    walks, primes_count = inputs.walks, len(inputs.primes)
    wanted = request.outputs
    on_gpu = isinstance(inputs, DeviceInputs)
    stream = buffers.stream()
    selector = _Selector(module, buffers, request, dim, stream) if request.selects else None
    p_final_bytes = primes_count * m * m * 4
    # On the GPU, the outputs are whole-batch arrays that each piece writes its part of; for
    # numpy, each piece's part comes back to the host.
    whole: dict[str, Any] = {}
    if on_gpu:
        whole["alive"] = buffers.filled(walks * 4, 0)
        whole["est"] = buffers.filled(4 * walks * 8, POISON)
        if "P_final" in wanted:
            whole["P_final"] = buffers.filled(walks * p_final_bytes, POISON)
    host: dict[str, tuple[Any, npt.NDArray[np.uint8]]] = {}
    if not on_gpu:
        if "alive" in wanted:
            host["alive"] = buffers.pinned(4 * walks)
        if wanted & {"est1", "est2", "delta1", "delta2"}:
            host["est"] = buffers.pinned(4 * 8 * walks)
        if "P_final" in wanted:
            host["P_final"] = buffers.pinned(walks * p_final_bytes)
    side = buffers.side_stream() if not on_gpu else None
    # pieces whose copies may still be running: (event after its copies, its device buffers)
    in_flight: list[tuple[Any, list[Any]]] = []
    piece = piece_walks(inputs, buffers.free_bytes(), "P_final" in wanted)
    if not on_gpu and walks >= 2 * PIPELINE_MIN_WALKS:
        # at least PIPELINE_PIECES pieces, so that copies overlap the next piece's kernels
        piece = max(1, min(piece // 2, max(PIPELINE_MIN_WALKS, -(-walks // PIPELINE_PIECES))))
    for start in range(0, walks, piece):
        count = min(walks, start + piece) - start
        if isinstance(inputs, DeviceInputs):
            shifts_ptr = inputs.shifts_ptr + 8 * dim * start
            dirs_ptr = inputs.dirs_ptr + 8 * dim * start
            alive_d, est_d, rows = whole["alive"], whole["est"], walks
            alive_ptr = buffers.pointer(alive_d) + 4 * start
            est_ptr = buffers.pointer(est_d) + 8 * start
            p_final_ptr = (buffers.pointer(whole["P_final"]) + p_final_bytes * start
                           if "P_final" in whole else 0)  # fmt: skip
            p_final_d = None
        else:
            while len(in_flight) >= 2:  # at most two pieces' buffers held
                in_flight.pop(0)[0].synchronize()
            part = slice(start, start + count)
            shifts_d = buffers.upload(inputs.shifts[part])
            dirs_d = buffers.upload(inputs.dirs[part])
            shifts_ptr, dirs_ptr = buffers.pointer(shifts_d), buffers.pointer(dirs_d)
            alive_d = buffers.filled(count * 4, 0)
            est_d = buffers.filled(4 * count * 8, POISON)
            alive_ptr, est_ptr, rows = buffers.pointer(alive_d), buffers.pointer(est_d), count
            p_final_d = buffers.filled(count * p_final_bytes, POISON) if "P_final" in host else None
            p_final_ptr = 0 if p_final_d is None else buffers.pointer(p_final_d)
        residue_kernel.launch(
            (-(-count // launch.residue_block), primes_count),
            launch.residue_block,
            *residue_arguments(shifts_ptr, dirs_ptr, count, p_final_ptr, alive_ptr),
            shared_mem=lowered.residue.n_slots * 4 * launch.residue_block,
            stream=stream,
        )
        est_rows = [est_ptr + 8 * rows * row for row in range(4)]
        float_kernel.launch(
            -(-count // launch.float_block),
            launch.float_block,
            shifts_ptr,
            dirs_ptr,
            count,
            dim,
            *float_program,
            ptr["float_consts"],
            len(lowered.consts),
            launch.depth,
            inputs.depth1,
            launch.depth2,
            inputs.target,
            *est_rows,
            shared_mem=float_slots * 8 * launch.float_block,
            stream=stream,
        )
        if side is not None:
            buffers.side_waits(side)
            if p_final_d is not None:
                buffers.copy_to_host(host["P_final"], p_final_bytes * start, p_final_d,
                                     p_final_bytes * count, side)  # fmt: skip
            if "alive" in host:
                buffers.copy_to_host(host["alive"], 4 * start, alive_d, 4 * count, side)
            for row in range(4 if "est" in host else 0):
                buffers.copy_to_host(host["est"], 8 * (row * walks + start),
                                     est_d[8 * row * count :], 8 * count, side)  # fmt: skip
            in_flight.append((buffers.mark(side), [shifts_d, dirs_d, alive_d, est_d, p_final_d]))
        if selector is not None:
            selector.piece(
                {"est2": est_rows[1], "delta2": est_rows[3], "alive": alive_ptr,
                 "shifts": shifts_ptr, "dirs": dirs_ptr},
                count,
                start,
            )  # fmt: skip
    for event, _ in in_flight:
        event.synchronize()
    hits, top = selector.result() if selector is not None else (None, None)
    if on_gpu:
        estimates = buffers.typed(whole["est"], "float64", (4, walks))
        alive = buffers.typed(whole["alive"], "int32", (walks,)) != 0  # 0 or 1
        p_final = (buffers.typed(whole["P_final"], "uint32", (walks, primes_count, m, m))
                   if "P_final" in whole else None)  # fmt: skip
    else:
        estimates = (host["est"][1].view(np.float64).reshape(4, walks) if "est" in host
                     else [None] * 4)  # fmt: skip
        alive = host["alive"][1].view(np.uint32) != 0 if "alive" in host else None
        p_final = (host["P_final"][1].view(np.uint32).reshape(walks, primes_count, m, m)
                   if "P_final" in host else None)  # fmt: skip
    values = {"P_final": p_final, "alive": alive, "est1": estimates[0], "est2": estimates[1],
              "delta1": estimates[2], "delta2": estimates[3]}  # fmt: skip
    kept = {name: values[name] if name in wanted else None for name in OUTPUTS}
    return WalkResult(**kept, hits=hits, top=top)
