"""The walks on the GPU: the kernels of kernel_sources/walk/walk.cu through kernelpack's loader.

Memory comes from torch or CuPy through kernelpack.devices.memory.DeviceMemory (the framework of the
caller's arrays, else whichever is installed, torch first), as raw bytes on that framework's
current stream; the kernels take plain addresses. Two ways in and out:

- shifts and dirs already on the GPU (torch, CuPy, or any array kernelpack.devices.arrays reads) are
  read in place and checked there (walk_bounds); the outputs are whole-batch arrays of that
  framework on that device;
- numpy in: each piece of the batch is uploaded, and the outputs asked for come back on a second
  stream into page-locked memory while the next piece computes (PIPELINE_PIECES).

Only the outputs asked for are kept (P_final is not even written otherwise), and the search's
selection (hits, top k) runs on the device per piece; the pieces' few records merge on the host.
A batch whose buffers would take more than half of the device's free memory runs in pieces.
What the kernels are given besides the walks is built in kernelpack.walk.launch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..devices.arrays import Array, download, is_gpu_array, wrap
from ..devices.memory import DeviceMemory
from ..errors import RuntimeLibraryError, UsageError
from ..loader import load as loader
from .inputs import (
    OUTPUTS,
    CheckedWalks,
    Request,
    WalkInputs,
    WalkResult,
    check_positions,
    check_shape,
    positions_fit,
    scalar_fields,
)
from .launch import Launch
from .lower import Lowered, lower
from .program import INT64_MAX, INT64_MIN
from .select import Selection, merge_hits, merge_top
from .walker import WalkCall, walker

MODULE = "walk"
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


@dataclass(frozen=True, eq=False, kw_only=True)
class DeviceInputs(CheckedWalks):
    """Checked walks whose shifts and dirs are int64 (B, dim) arrays on the GPU, read in place
    (``shifts_ptr``/``dirs_ptr`` their addresses); ``bounds`` comes from walk.cu's
    walk_bounds."""

    shifts: Any
    dirs: Any
    shifts_ptr: int
    dirs_ptr: int


def piece_walks(inputs: CheckedWalks, free_bytes: int, p_final: bool = True) -> int:
    """How many walks one piece of the batch takes: its buffers within MEMORY_FRACTION of the
    free memory (at least one walk, at most MAX_PIECE_WALKS). Per walk: shifts and dirs, P_final
    when asked for, alive and the four estimates, and room for it as a hit (a record with its
    shift and dir)."""
    m, primes = inputs.program.m, len(inputs.primes)
    record = 4 + 8 + 8 + 16 * inputs.dim
    per_walk = 16 * inputs.dim + (4 * primes * m * m if p_final else 0) + 4 + 4 * 8 + record
    return max(1, min(MAX_PIECE_WALKS, int(free_bytes * MEMORY_FRACTION) // per_walk))


def _residue_launch(
    module: Any, lowered: Lowered, launch: Launch, ptr: dict[str, int]
) -> tuple[Any, Callable[[int, int, int, int, int], tuple[object, ...]]]:
    """The residue kernel for the lowered form, and the arguments it takes per piece of the batch
    (from the piece's shifts, dirs, walk count, P_final and alive addresses)."""
    residue, m = lowered.residue, lowered.m
    head = (lowered.dim, ptr["code"], launch.n_setup)
    tail = (ptr["consts"], len(lowered.consts), ptr["moduli"], launch.depth, launch.depth2)
    if residue.form == "registers":
        kernel = module.kernel(f"walk_registers<{m}, {residue.degree}>")
        return kernel, _per_piece((*head, int(residue.out[0]), *tail))
    kernel = module.kernel(f"walk_residues<{m}>")
    tables = (launch.n_step, ptr["tables"], len(launch.tables), ptr["out"])
    return kernel, _per_piece((*head, *tables, *tail))


def _per_piece(
    fixed: tuple[object, ...],
) -> Callable[[int, int, int, int, int], tuple[object, ...]]:
    """The residue kernel's arguments for one piece of the batch: its shifts, dirs and walk
    count, the arguments ``fixed`` for the whole batch, then its P_final and alive addresses."""

    def arguments(
        shifts: int, dirs: int, count: int, p_final: int, alive: int
    ) -> tuple[object, ...]:
        return (shifts, dirs, count, *fixed, p_final, alive)

    return arguments


class _Selector:
    """The selection kernels over each piece of a batch, and the merge of the pieces' records
    on the host (kernelpack.walk.select's rule; walk.cu's "Selection on the device")."""

    def __init__(
        self, module: Any, memory: DeviceMemory, request: Request, dim: int, stream: int
    ) -> None:
        self.kernels = {
            name: module.kernel(f"walk_select_{name}")
            for name in ("hits", "histogram", "pick", "top")
        }
        self.memory, self.request, self.dim, self.stream = memory, request, dim, stream
        self.hits: list[Selection] = []
        self.top: list[Selection] = []

    def _records(self, capacity: int) -> tuple[Any, list[int]]:
        """A poisoned buffer for ``capacity`` records and the addresses of its five columns
        (walk int32, est, delta, shift and dir rows), 8-byte columns first."""
        sizes = [
            8 * capacity,
            8 * capacity,
            8 * capacity * self.dim,
            8 * capacity * self.dim,
            4 * capacity,
        ]
        buffer = self.memory.filled(sum(sizes), POISON)
        base, addresses = self.memory.pointer(buffer), []
        for size in sizes:
            addresses.append(base)
            base += size
        est, delta, shift, direction, walk = addresses
        return buffer, [walk, est, delta, shift, direction]

    def _read(self, buffer: Any, capacity: int, count: int) -> Selection:
        dim, at = self.dim, 0
        columns: list[npt.NDArray[Any]] = []
        for dtype, width in (
            (np.float64, 1),
            (np.float64, 1),
            (np.int64, dim),
            (np.int64, dim),
            (np.int32, 1),
        ):
            size = np.dtype(dtype).itemsize * capacity * width
            if count:
                part = buffer[at : at + size]
                columns.append(self.memory.download(part, dtype, (count, width)))
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
        state = self.memory.filled(8 * SELECT_STATE_WORDS, 0)
        histogram = self.memory.filled(4 * SELECT_DIGITS * SELECT_BINS, 0)
        walks = (
            pointers["est2"],
            pointers["delta2"],
            pointers["alive"],
            pointers["shifts"],
            pointers["dirs"],
            count,
            self.dim,
        )
        hit_capacity = count if request.min_delta is not None else 1
        hits, hit_columns = self._records(hit_capacity)
        # NaN compares false: with no threshold the kernel only counts the candidates
        threshold = math.nan if request.min_delta is None else request.min_delta
        state_ptr = self.memory.pointer(state)
        self.kernels["hits"].launch(
            blocks, SELECT_BLOCK, *walks, threshold, state_ptr, *hit_columns, **launch
        )
        top_capacity = max(1, min(request.top_k, count))  # at most the piece's walks are kept
        top, top_columns = self._records(top_capacity)
        if request.top_k:
            histogram_ptr = self.memory.pointer(histogram)
            for digit in range(SELECT_DIGITS):
                self.kernels["histogram"].launch(
                    blocks,
                    SELECT_BLOCK,
                    pointers["delta2"],
                    pointers["alive"],
                    count,
                    digit,
                    state_ptr,
                    histogram_ptr,
                    **launch,
                )
                self.kernels["pick"].launch(
                    1, 1, digit, request.top_k, state_ptr, histogram_ptr, **launch
                )
            self.kernels["top"].launch(
                blocks, SELECT_BLOCK, *walks, state_ptr, *top_columns, **launch
            )
        counts = self.memory.download(state, np.uint64, (SELECT_STATE_WORDS,))
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


def _device_array(value: object, name: str) -> Array:
    """A C-contiguous int64 array on the GPU, read in place, or a UsageError naming it."""
    array = wrap(name, value)
    if array.dtype != "int64" or not array.contiguous:
        layout = "" if array.contiguous else ", not C-contiguous"
        raise UsageError(
            f"{name}: expected a C-contiguous int64 array on the GPU, got {array.dtype}{layout}; "
            "convert it on the device first (torch: .to(torch.int64).contiguous())"
        )
    return array


def _check_device_inputs(
    call: WalkCall, shifts: Array, dirs: Array, module: Any, memory: DeviceMemory
) -> DeviceInputs:
    """Shifts and dirs on the GPU, checked there: their shape here, their positions from the
    per-axis bounds that walk_bounds computes (the exact walk-by-walk check, on the host, only
    when the bounds alone cannot rule out an overflow)."""
    check_shape(call.program, shifts.shape, dirs.shape)
    walks, dim = shifts.shape
    start = np.array([[INT64_MAX] * dim, [INT64_MIN] * dim] * 2, dtype=np.int64)
    bounds_d = memory.upload(start)
    blocks = min(SELECT_MAX_BLOCKS, -(-walks // SELECT_BLOCK))
    module.kernel("walk_bounds").launch(
        blocks,
        SELECT_BLOCK,
        shifts.pointer,
        dirs.pointer,
        walks,
        dim,
        memory.pointer(bounds_d),
        stream=memory.stream(),
    )
    bounds = memory.download(bounds_d, np.int64, (4, dim))
    depth = call.scalars.depth
    if not positions_fit(bounds, depth):
        host = [
            download(array.value).view(np.int64).reshape(walks, dim) for array in (shifts, dirs)
        ]
        check_positions(host[0], host[1], depth)
    return DeviceInputs(
        **scalar_fields(call.scalars),
        program=call.program,
        shape=(walks, dim),
        bounds=bounds,
        shifts=shifts.value,
        dirs=dirs.value,
        shifts_ptr=shifts.pointer,
        dirs_ptr=dirs.pointer,
    )


@walker
def run(call: WalkCall) -> WalkResult:
    """The walks of WALK.md on the GPU ``device`` (None: the first; "cuda:N", "hip:N"; a torch or
    CuPy device; an int on a machine of one vendor).

    shifts and dirs may be numpy (or anything array-like) or int64 arrays on the GPU (torch or
    CuPy; the walks then run on their device, and the outputs are arrays of that framework
    there). ``outputs`` names the WalkResult arrays wanted (the others are None: P_final, half a
    gigabyte at B = 10^6 and K = 32, is then never written). With ``min_delta`` and/or
    ``top_k`` the selection runs on the GPU (kernelpack.walk.select): only the kept walks come
    back to the host.
    """
    shifts, dirs, device = call.shifts, call.dirs, call.device
    if is_gpu_array(shifts) or is_gpu_array(dirs):
        if not (is_gpu_array(shifts) and is_gpu_array(dirs)):
            raise UsageError(
                "shifts, dirs: one is on the GPU and the other is not; pass both there"
            )
        shifts_d, dirs_d = _device_array(shifts, "shifts"), _device_array(dirs, "dirs")
        name = shifts_d.device_name
        if dirs_d.device_name != name:
            raise UsageError(f"shifts, dirs: on different GPUs ({name} and {dirs_d.device_name})")
        if device is not None and device not in (name, shifts_d.device):
            raise UsageError(f"device: {device!r}, but shifts and dirs are on {name}")
        module = loader.load(MODULE, device=name)
        memory = DeviceMemory(module.device, shifts_d.framework)
        inputs: WalkInputs | DeviceInputs = _check_device_inputs(
            call, shifts_d, dirs_d, module, memory
        )
    else:
        inputs = call.host_inputs()
        module = loader.load(MODULE, device=device)
        memory = DeviceMemory(module.device)
    return _walk(inputs, call.request, module, memory)


def _walk(
    inputs: WalkInputs | DeviceInputs, request: Request, module: Any, memory: DeviceMemory
) -> WalkResult:
    program = inputs.program
    lowered = lower(program, inputs.dim, inputs.depth, registers=True)
    launch = Launch.build(lowered, inputs)
    m, dim = program.m, inputs.dim
    constant = {name: memory.upload(array) for name, array in launch.device_arrays().items()}
    ptr = {name: memory.pointer(buffer) for name, buffer in constant.items()}
    residue_kernel, residue_arguments = _residue_launch(module, lowered, launch, ptr)
    if launch.float_registers:
        float_kernel = module.kernel(f"walk_float_registers<{m}, {lowered.residue.degree}>")
        float_program: tuple[object, ...] = (
            ptr["float_code"],
            len(launch.float_code),
            int(lowered.residue.out[0]),
        )
        float_slots = lowered.residue.n_slots
    else:
        float_kernel = module.kernel(f"walk_float<{m}>")
        float_program = (ptr["float_code"], len(launch.float_code), ptr["float_out"])
        float_slots = lowered.float.n_slots
    walks, primes_count = inputs.walks, len(inputs.primes)
    wanted = request.outputs
    on_gpu = isinstance(inputs, DeviceInputs)
    stream = memory.stream()
    selector = _Selector(module, memory, request, dim, stream) if request.selects else None
    p_final_bytes = primes_count * m * m * 4
    # On the GPU, the outputs are whole-batch arrays that each piece writes its part of; for
    # numpy, each piece's part comes back to the host.
    whole: dict[str, Any] = {}
    if on_gpu:
        whole["alive"] = memory.filled(walks * 4, 0)
        whole["est"] = memory.filled(4 * walks * 8, POISON)
        if "P_final" in wanted:
            whole["P_final"] = memory.filled(walks * p_final_bytes, POISON)
    host: dict[str, tuple[Any, npt.NDArray[np.uint8]]] = {}
    if not on_gpu:
        if "alive" in wanted:
            host["alive"] = memory.pinned(4 * walks)
        if wanted & {"est1", "est2", "delta1", "delta2"}:
            host["est"] = memory.pinned(4 * 8 * walks)
        if "P_final" in wanted:
            host["P_final"] = memory.pinned(walks * p_final_bytes)
    side = memory.side_stream() if not on_gpu else None
    # pieces whose copies may still be running: (event after its copies, its device buffers)
    in_flight: list[tuple[Any, list[Any]]] = []
    piece = piece_walks(inputs, memory.free_bytes(), "P_final" in wanted)
    if not on_gpu and walks >= 2 * PIPELINE_MIN_WALKS:
        # at least PIPELINE_PIECES pieces, so that copies overlap the next piece's kernels
        piece = max(1, min(piece // 2, max(PIPELINE_MIN_WALKS, -(-walks // PIPELINE_PIECES))))
    # the pinned leases go back to their pool with this call's arrays: no copy into them may
    # still run then, whatever ends the loop
    try:
        for start in range(0, walks, piece):
            count = min(walks, start + piece) - start
            if isinstance(inputs, DeviceInputs):
                shifts_ptr = inputs.shifts_ptr + 8 * dim * start
                dirs_ptr = inputs.dirs_ptr + 8 * dim * start
                alive_d, est_d, rows = whole["alive"], whole["est"], walks
                alive_ptr = memory.pointer(alive_d) + 4 * start
                est_ptr = memory.pointer(est_d) + 8 * start
                p_final_ptr = (
                    memory.pointer(whole["P_final"]) + p_final_bytes * start
                    if "P_final" in whole
                    else 0
                )
                p_final_d = None
            else:
                while len(in_flight) >= 2:  # at most two pieces' buffers held
                    in_flight.pop(0)[0].synchronize()
                part = slice(start, start + count)
                shifts_d = memory.upload(inputs.shifts[part])
                dirs_d = memory.upload(inputs.dirs[part])
                shifts_ptr, dirs_ptr = memory.pointer(shifts_d), memory.pointer(dirs_d)
                alive_d = memory.filled(count * 4, 0)
                est_d = memory.filled(4 * count * 8, POISON)
                alive_ptr, est_ptr, rows = memory.pointer(alive_d), memory.pointer(est_d), count
                p_final_d = (
                    memory.filled(count * p_final_bytes, POISON) if "P_final" in host else None
                )
                p_final_ptr = 0 if p_final_d is None else memory.pointer(p_final_d)
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
                memory.side_waits(side)
                if p_final_d is not None:
                    memory.copy_to_host(
                        host["P_final"],
                        p_final_bytes * start,
                        p_final_d,
                        p_final_bytes * count,
                        side,
                    )
                if "alive" in host:
                    memory.copy_to_host(host["alive"], 4 * start, alive_d, 4 * count, side)
                for row in range(4 if "est" in host else 0):
                    memory.copy_to_host(
                        host["est"],
                        8 * (row * walks + start),
                        est_d[8 * row * count :],
                        8 * count,
                        side,
                    )
                in_flight.append((memory.mark(side), [shifts_d, dirs_d, alive_d, est_d, p_final_d]))
            if selector is not None:
                selector.piece(
                    {
                        "est2": est_rows[1],
                        "delta2": est_rows[3],
                        "alive": alive_ptr,
                        "shifts": shifts_ptr,
                        "dirs": dirs_ptr,
                    },
                    count,
                    start,
                )
    finally:
        for event, _ in in_flight:
            event.synchronize()
    hits, top = selector.result() if selector is not None else (None, None)
    if on_gpu:
        estimates = memory.typed(whole["est"], "float64", (4, walks))
        alive = memory.typed(whole["alive"], "int32", (walks,)) != 0  # 0 or 1
        p_final = (
            memory.typed(whole["P_final"], "uint32", (walks, primes_count, m, m))
            if "P_final" in whole
            else None
        )
    else:
        estimates = (
            host["est"][1].view(np.float64).reshape(4, walks) if "est" in host else [None] * 4
        )
        alive = host["alive"][1].view(np.uint32) != 0 if "alive" in host else None
        p_final = (
            host["P_final"][1].view(np.uint32).reshape(walks, primes_count, m, m)
            if "P_final" in host
            else None
        )
    values = dict(zip(OUTPUTS, (p_final, alive, *estimates), strict=True))  # est1 .. delta2
    kept = {name: values[name] if name in wanted else None for name in OUTPUTS}
    return WalkResult(**kept, hits=hits, top=top)
