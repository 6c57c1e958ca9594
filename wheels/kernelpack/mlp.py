"""SwiGLU and RMSNorm, the MLP kernels of LLaMA-style transformer blocks.

Each op takes the arrays of whatever framework the caller uses: torch tensors and CuPy arrays
directly; other GPU arrays (JAX, Numba, ...) through ``__cuda_array_interface__`` or DLPack, viewed
without a copy as torch tensors (or CuPy arrays where torch is absent); numpy arrays are copied to
the GPU and the results back. Outputs are allocated in the framework of the first array argument
unless ``out=`` is given, and the kernel runs on that framework's current stream, so it orders with
the caller's own work like any of the framework's ops.

Arguments are checked before anything touches a GPU, so a wrong dtype, shape, layout or device fails
with a TypeError or ValueError naming the argument on any machine. Arithmetic is in float32 for
every storage type (float32, float16, bfloat16).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

__all__ = ["fused_add_rms_norm", "rms_norm", "silu_and_mul", "swiglu"]

MODULE = "mlp"

# dtype name -> kernel name suffix (mlp.cu defines one kernel per op and dtype)
KERNEL_SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
ITEM_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
SUPPORTED = ", ".join(KERNEL_SUFFIX)

# Launch geometry; the constants mirror mlp.cu where they must agree with it.
VECTOR_BYTES = 16  # kVectorBytes: the widest load the kernels issue
ELEMENTWISE_BLOCK = 128  # kElementwiseBlockThreads, the elementwise kernels' __launch_bounds__
BLOCK_MIN = 64  # the smallest block: a multiple of every wavefront width (32 and 64)
ROW_BLOCK_MAX = 512  # kRowBlockThreads, the row kernels' __launch_bounds__
CACHED_CHUNKS = 4  # kCachedChunks: vectors per thread kept in registers across RMSNorm's two passes
MAX_GRID_Y = 65535
MAX_ROW = 2**30  # the row kernels index inside a row in 32 bits
# A grid's total thread count stays below 2**31: HIP counts work-items in 32 bits, and the
# kernels' loops stride over whatever the grid does not cover.
MAX_GRID_THREADS = 2**31


class _Array(NamedTuple):
    """One array argument as the ops see it, read once from its framework (a NamedTuple: the ops
    build several per call, and this is the cheapest record to build)."""

    name: str  # the argument's name, for messages
    value: Any  # the torch tensor, CuPy array or numpy array itself
    framework: str  # "torch", "cupy" or "numpy"
    dtype: str
    shape: tuple[int, ...]
    device: int  # the GPU's number; -1 for numpy arrays

    @property
    def on_gpu(self) -> bool:
        return self.device >= 0


def _framework(value: object) -> str:
    module = type(value).__module__.split(".")[0]
    if module == "torch" and hasattr(value, "data_ptr"):
        return "torch"
    if module == "cupy" and hasattr(value, "data"):
        return "cupy"
    if isinstance(value, np.ndarray):
        return "numpy"
    return ""


def _import_gpu_view(name: str, value: object) -> Any:
    """A zero-copy torch (or CuPy) view of a foreign GPU array, for its pointer and allocation."""
    has_cai = hasattr(value, "__cuda_array_interface__")
    has_dlpack = hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__")
    if not (has_cai or has_dlpack):
        raise TypeError(
            f"{name}: expected a GPU array (torch, CuPy, __cuda_array_interface__ or DLPack) or a "
            f"numpy array, got {type(value).__name__}"
        )
    try:
        import torch

        return torch.as_tensor(value, device="cuda") if has_cai else torch.from_dlpack(value)
    except ImportError:
        pass
    try:
        import cupy

        return cupy.asarray(value) if has_cai else cupy.from_dlpack(value)
    except ImportError:
        raise TypeError(
            f"{name}: a {type(value).__name__} is used through torch or CuPy, and neither is "
            "installed; install one, or pass a numpy array"
        ) from None


def _array(name: str, value: object) -> _Array:
    framework = _framework(value)
    if not framework:
        value = _import_gpu_view(name, value)
        framework = _framework(value)
    v: Any = value
    if framework == "torch":
        dtype = str(v.dtype).removeprefix("torch.")
        where = v.device
        if where.type != "cuda":
            raise ValueError(
                f"{name}: a torch tensor on {where} is not on a GPU; move it with .cuda() "
                "or pass a numpy array"
            )
        device = where.index or 0
    else:
        dtype = v.dtype.name
        device = -1 if framework == "numpy" else v.device.id
    if dtype not in KERNEL_SUFFIX:
        raise TypeError(f"{name}: dtype {dtype} is not supported; expected one of {SUPPORTED}")
    return _Array(name, v, framework, dtype, tuple(v.shape), device)


def _contiguous(array: _Array) -> bool:
    if array.framework == "torch":
        return bool(array.value.is_contiguous())
    return bool(array.value.flags.c_contiguous)


def _pointer(array: _Array) -> int:
    if array.framework == "torch":
        return int(array.value.data_ptr())
    return int(array.value.data.ptr)


def _check_same(first: _Array, *others: _Array) -> None:
    """Every array has the first's dtype and the same kind of memory, and device arrays are
    C-contiguous and on one device."""
    for other in others:
        if other.dtype != first.dtype:
            raise TypeError(
                f"{other.name}: dtype {other.dtype} differs from {first.name}'s {first.dtype}"
            )
        if other.on_gpu != first.on_gpu:
            where = "GPU" if first.on_gpu else "host (numpy)"
            raise TypeError(
                f"{other.name}: {first.name} is a {where} array, so {other.name} must be one too"
            )
    if not first.on_gpu:
        return
    for array in (first, *others):
        if not _contiguous(array):
            raise ValueError(
                f"{array.name}: must be C-contiguous (call .contiguous() or "
                "ascontiguousarray first)"
            )
        if array.device != first.device:
            raise ValueError(
                f"{array.name}: on GPU {array.device}, but {first.name} is on GPU {first.device}"
            )


def _check_shape(array: _Array, shape: tuple[int, ...], what: str) -> None:
    if array.shape != shape:
        raise ValueError(f"{array.name}: shape {array.shape} does not match {what} {shape}")


def _check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps: expected a float, got {type(eps).__name__}")
    value = float(eps)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"eps: must be a finite number >= 0, got {eps!r}")
    return value


def _output(out: object, like: _Array, shape: tuple[int, ...]) -> _Array | None:
    """The checked ``out=`` array, or None when the op allocates its own."""
    if out is None:
        return None
    array = _array("out", out)
    _check_same(like, array)
    _check_shape(array, shape, "the result's")
    if not array.on_gpu and not array.value.flags.writeable:
        raise ValueError("out: is read-only")
    return array


def _empty(like: _Array, shape: tuple[int, ...]) -> _Array:
    """An uninitialised array of like's framework, dtype and device."""
    v = like.value
    if like.framework == "torch":
        value: Any = v.new_empty(shape)
    elif like.framework == "cupy":
        import cupy

        with v.device:
            value = cupy.empty(shape, dtype=v.dtype)
    else:
        value = np.empty(shape, dtype=v.dtype)
    return _Array("out", value, like.framework, like.dtype, shape, like.device)


def _stream(array: _Array) -> int:
    """The raw handle of the current stream of the array's framework on its device."""
    if array.framework == "torch":
        import torch

        # The raw accessor (what Triton and torch.compile's launchers call) skips building a
        # torch.cuda.Stream object, a few µs on every launch.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return int(raw(array.device))
        return int(torch.cuda.current_stream(array.device).cuda_stream)
    import cupy

    with cupy.cuda.Device(array.device):
        return int(cupy.cuda.get_current_stream().ptr)


_KERNELS: dict[tuple[int, str], Any] = {}


def _kernel(device: int, name: str) -> Any:
    kernel = _KERNELS.get((device, name))
    if kernel is None:
        from . import loader

        kernel = loader.load(MODULE, device=device).kernel(name)
        _KERNELS[(device, name)] = kernel
    return kernel


# ---- numpy: through a GPU framework, copies in and out -----------------------------------------


def _host_framework() -> str:
    for name in ("torch", "cupy"):
        try:
            __import__(name)
        except ImportError:
            continue
        return name
    raise TypeError(
        "numpy arrays are copied to the GPU through torch or CuPy, and neither is installed; "
        "install one of them"
    )


def _to_gpu(array: _Array, framework: str) -> _Array:
    """A device copy of a numpy array, moved as raw bytes: numpy's bfloat16 comes from ml_dtypes,
    which torch reads only as bytes and CuPy not at all (there the copy keeps the bits as unsigned
    integers of the same size; the kernels take only the address)."""
    host = np.ascontiguousarray(array.value)
    raw = host.reshape(-1).view(np.uint8)
    if not raw.flags.writeable:  # torch warns on read-only numpy memory
        raw = raw.copy()
    if framework == "torch":
        import torch

        device_raw: Any = torch.from_numpy(raw).cuda()
        value: Any = device_raw.view(getattr(torch, array.dtype)).reshape(array.shape)
        device = int(value.device.index or 0)
    else:
        import cupy

        storage = np.dtype(f"u{ITEM_SIZE[array.dtype]}")
        value = cupy.asarray(raw).view(storage).reshape(array.shape)
        device = int(value.device.id)
    return _Array(array.name, value, framework, array.dtype, array.shape, device)


def _to_host(device_array: _Array, host: _Array) -> None:
    """Copy a device result into the numpy array ``host`` (any layout), after the kernel ran."""
    v = device_array.value
    if device_array.framework == "torch":
        import torch

        raw = v.reshape(-1).view(torch.uint8).cpu().numpy()
    else:
        raw = v.reshape(-1).view(np.uint8).get()
    host.value[...] = raw.view(host.value.dtype).reshape(host.shape)


# ---- launches ---------------------------------------------------------------------------------


def _grid_cap(threads_per_block: int) -> int:
    return max(1, MAX_GRID_THREADS // threads_per_block)


def _vector_width(dtype: str) -> int:
    return VECTOR_BYTES // ITEM_SIZE[dtype]


def _launch_swiglu(gate: _Array, up: _Array, out: _Array) -> None:
    n = math.prod(gate.shape)
    if n == 0:
        return
    chunks = -(-n // _vector_width(gate.dtype))  # one 16-byte vector per thread
    grid = min(-(-chunks // ELEMENTWISE_BLOCK), _grid_cap(ELEMENTWISE_BLOCK))
    _kernel(gate.device, f"swiglu_{KERNEL_SUFFIX[gate.dtype]}").launch(
        grid,
        ELEMENTWISE_BLOCK,
        _pointer(gate),
        _pointer(up),
        _pointer(out),
        n,
        stream=_stream(gate),
    )


def _launch_silu_and_mul(x: _Array, out: _Array) -> None:
    cols = x.shape[-1] // 2
    rows = math.prod(x.shape[:-1])
    if rows * cols == 0:
        return
    chunks = -(-cols // _vector_width(x.dtype))  # one 16-byte vector per thread
    block = min(max(BLOCK_MIN, 1 << (chunks - 1).bit_length()), ELEMENTWISE_BLOCK)
    grid_y = min(rows, MAX_GRID_Y)
    grid_x = min(-(-chunks // block), _grid_cap(block * grid_y))
    _kernel(x.device, f"silu_and_mul_{KERNEL_SUFFIX[x.dtype]}").launch(
        (grid_x, grid_y),
        block,
        _pointer(x),
        _pointer(out),
        rows,
        cols,
        stream=_stream(x),
    )


def _row_launch(rows: int, cols: int, dtype: str) -> tuple[int, tuple[int, int]]:
    """The grid, and the block as (threads per row, rows per block). A row gets a power of two of
    threads, enough that each keeps at most CACHED_CHUNKS vectors in registers; rows that need
    fewer than BLOCK_MIN threads share a block of BLOCK_MIN. (Measured on the H100 from 1 x 4096
    to 16384 x 8192: several rows of 64 or more threads to a block were slower everywhere, and
    twice the threads to a row were at best 2% faster and up to 20% slower at 512 rows.)"""
    chunks = -(-cols // _vector_width(dtype))
    per_thread = -(-chunks // CACHED_CHUNKS)
    threads = min(1 << (per_thread - 1).bit_length(), ROW_BLOCK_MAX)
    per_block = max(1, BLOCK_MIN // threads)
    grid = min(-(-rows // per_block), _grid_cap(threads * per_block))
    return grid, (threads, per_block)


def _launch_rms_norm(x: _Array, weight: _Array, out: _Array, eps: float) -> None:
    cols = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if rows * cols == 0:
        return
    grid, block = _row_launch(rows, cols, x.dtype)
    _kernel(x.device, f"rms_norm_{KERNEL_SUFFIX[x.dtype]}").launch(
        grid,
        block,
        _pointer(x),
        _pointer(weight),
        _pointer(out),
        rows,
        cols,
        eps,
        stream=_stream(x),
    )


def _launch_fused_add_rms_norm(x: _Array, residual: _Array, weight: _Array, eps: float) -> None:
    cols = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if rows * cols == 0:
        return
    grid, block = _row_launch(rows, cols, x.dtype)
    _kernel(x.device, f"fused_add_rms_norm_{KERNEL_SUFFIX[x.dtype]}").launch(
        grid,
        block,
        _pointer(x),
        _pointer(residual),
        _pointer(weight),
        rows,
        cols,
        eps,
        stream=_stream(x),
    )


# ---- the ops ----------------------------------------------------------------------------------


def swiglu(gate: Any, up: Any, out: Any = None) -> Any:
    """silu(gate) * up, elementwise; gate and up have one shape.

    Returns ``out``, or a new array of gate's framework.
    """
    g = _array("gate", gate)
    u = _array("up", up)
    _check_same(g, u)
    _check_shape(u, g.shape, "gate's")
    result = _output(out, g, g.shape) or _empty(g, g.shape)
    if not g.on_gpu:
        framework = _host_framework()
        device_gate = _to_gpu(g, framework)
        device_out = _empty(device_gate, g.shape)
        _launch_swiglu(device_gate, _to_gpu(u, framework), device_out)
        _to_host(device_out, result)
    else:
        _launch_swiglu(g, u, result)
    return result.value


def silu_and_mul(x: Any, out: Any = None) -> Any:
    """silu(gate) * up where x is [..., 2d] holding gate (first half) and up (second half) in
    each row, the layout inference servers use; the result is [..., d]."""
    a = _array("x", x)
    if not a.shape or a.shape[-1] % 2:
        raise ValueError(f"x: shape {a.shape}: the last dimension must be even (gate and up)")
    shape = (*a.shape[:-1], a.shape[-1] // 2)
    _check_same(a)
    result = _output(out, a, shape) or _empty(a, shape)
    if not a.on_gpu:
        device_x = _to_gpu(a, _host_framework())
        device_out = _empty(device_x, shape)
        _launch_silu_and_mul(device_x, device_out)
        _to_host(device_out, result)
    else:
        _launch_silu_and_mul(a, result)
    return result.value


def _check_norm_args(x: _Array, weight: _Array) -> None:
    if not x.shape:
        raise ValueError("x: must have at least one dimension (the normalised one)")
    if x.shape[-1] > MAX_ROW:
        raise ValueError(f"x: rows of {x.shape[-1]} elements; at most 2**30 are supported")
    _check_same(x, weight)
    _check_shape(weight, x.shape[-1:], "x's last dimension")


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, out: Any = None) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension of x; weight is 1-D.

    Returns ``out``, or a new array of x's framework.
    """
    a = _array("x", x)
    w = _array("weight", weight)
    _check_norm_args(a, w)
    eps_value = _check_eps(eps)
    result = _output(out, a, a.shape) or _empty(a, a.shape)
    if not a.on_gpu:
        framework = _host_framework()
        device_x = _to_gpu(a, framework)
        device_out = _empty(device_x, a.shape)
        _launch_rms_norm(device_x, _to_gpu(w, framework), device_out, eps_value)
        _to_host(device_out, result)
    else:
        _launch_rms_norm(a, w, result, eps_value)
    return result.value


def fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> None:
    """In place, in one pass: residual += x, then x = rms_norm(residual, weight, eps).

    The sum is rounded to the storage dtype when stored, and the norm is taken of the stored
    value, exactly as the two steps done one after the other.
    """
    a = _array("x", x)
    r = _array("residual", residual)
    w = _array("weight", weight)
    _check_norm_args(a, w)
    _check_same(a, r)
    _check_shape(r, a.shape, "x's")
    eps_value = _check_eps(eps)
    if not a.on_gpu:
        for host in (a, r):
            if not host.value.flags.writeable:
                raise ValueError(f"{host.name}: is read-only; it is updated in place")
        framework = _host_framework()
        device_x = _to_gpu(a, framework)
        device_residual = _to_gpu(r, framework)
        _launch_fused_add_rms_norm(device_x, device_residual, _to_gpu(w, framework), eps_value)
        _to_host(device_x, a)
        _to_host(device_residual, r)
        return
    _launch_fused_add_rms_norm(a, r, w, eps_value)
