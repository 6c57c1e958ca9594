"""Which step of the MLP ops' C hot call costs more inside a torch dispatcher kernel, on the GPU:

    python bench/probe_dispatch_gpu.py [--keep-gil] [--loops 21] [--calls 1000]

rms_norm at 1 x 4096 bfloat16, under torch.inference_mode. Each step (nothing, the hot call, the
hot call with out=, torch.empty_like, the bare launch, the current stream, data_ptr) is timed
called from Python and as the CUDA kernel of a torch.library op called through torch.ops; what a
step costs inside the kernel beyond its direct call and the op's floor (the op whose kernel does
nothing) is printed last, beside the torch ops' own rows. --keep-gil builds launcher.c with the
GIL held through cuLaunchKernel, to size what releasing it costs. bench/probe_dispatch.py is the
CPU's counterpart; docs/bench-mlp-notes.md ("The host's cost per call") reads the two.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "wheels"))
SOURCE = REPO / "wheels" / "kernelpack" / "backends" / "_native" / "launcher.c"


def native(work: Path, keep_gil: bool) -> None:
    """launcher.c compiled into ``work`` and installed as kernelpack.backends._launcher."""
    source = SOURCE.read_text()
    if keep_gil:
        source = source.replace("Py_BEGIN_ALLOW_THREADS", "{").replace("Py_END_ALLOW_THREADS", "}")
    (work / "launcher.c").write_text(source)
    for header in SOURCE.parent.glob("*.h"):
        (work / header.name).write_text(header.read_text())
    out = work / "_launcher.abi3.so"
    include = sysconfig.get_paths()["include"]
    command = ["cc", "-O2", "-shared", "-fPIC", f"-I{include}", str(work / "launcher.c")]
    try:
        subprocess.run([*command, "-o", str(out)], check=True)
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        raise SystemExit(f"probe_dispatch_gpu: cc could not build {SOURCE}: {error}") from None
    spec = importlib.util.spec_from_file_location("kernelpack.backends._launcher", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernelpack.backends._launcher"] = module
    spec.loader.exec_module(module)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-gil", action="store_true", help="hold the GIL in the launch")
    parser.add_argument("--loops", type=int, default=21, help="interleaved loops of each call")
    parser.add_argument("--calls", type=int, default=1000, help="calls a loop")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernelpack-probe-") as work:
        native(Path(work), args.keep_gil)  # loaded: the folder can go
    import torch  # after the launcher: kernelpack must import the one built here
    from bench_mlp import host_us_per_calls  # the host table's timing, for the same figures

    import kernelpack.mlp as mlp
    import kernelpack.torch_ops  # noqa: F401
    from kernelpack.ops.mlp import hot

    x = torch.randn(1, 4096, device="cuda").to(torch.bfloat16)
    w = torch.randn(4096, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(x)
    eps = 1e-6
    mlp.rms_norm(x, w, eps)
    hot_call = hot.HOT_BELOW_AUTOGRAD["rms_norm"]
    assert hot_call(x, w) is not NotImplemented
    entry = hot.PREPARED["rms_norm"][hot.entry_key(x)]
    launch = getattr(entry[0], "launch", entry[0])
    grid, block, sizes = entry[1], entry[2], entry[3]
    pointers = (x.data_ptr(), w.data_ptr(), out.data_ptr())
    raw_stream = torch._C._cuda_getCurrentRawStream
    stream = raw_stream(0)

    def bare() -> None:  # the entry's launch, as launcher.c's hot_launch makes it
        launch(grid, block, *pointers, *sizes, eps, stream=stream)

    steps = {
        "nothing": lambda x, w: None,
        "hot(x, w)": lambda x, w: hot_call(x, w),
        "hot(x, w, eps, out)": lambda x, w: hot_call(x, w, eps, out),
        "torch.empty_like": lambda x, w: torch.empty_like(x),
        "bare launch": lambda x, w: bare(),
        "raw stream": lambda x, w: raw_stream(0),
        "x.data_ptr()": lambda x, w: x.data_ptr(),
    }
    library = torch.library.Library("kernelpack_probe", "DEF")
    calls: dict[str, tuple[Callable[[], Any], Callable[[], object]]] = {}
    for n, (name, step) in enumerate(steps.items()):
        op_name = f"step{n}"
        library.define(f"{op_name}(Tensor x, Tensor w) -> Tensor")

        def kernel(x: Any, w: Any, step: Callable[[Any, Any], object] = step) -> Any:
            result = step(x, w)
            return result if isinstance(result, torch.Tensor) else out

        library.impl(op_name, kernel, "CUDA")
        op = getattr(torch.ops.kernelpack_probe, op_name).default
        calls[f"direct {name}"] = (torch.inference_mode, lambda step=step: step(x, w))
        calls[f"op     {name}"] = (torch.inference_mode, lambda op=op: op(x, w))
    ops = torch.ops.kernelpack
    calls["torch.ops.kernelpack.rms_norm inference_mode"] = (
        torch.inference_mode,
        lambda: ops.rms_norm(x, w),
    )
    calls["torch.ops.kernelpack.rms_norm.default inference_mode"] = (
        torch.inference_mode,
        lambda: ops.rms_norm.default(x, w),
    )
    calls["torch.ops.kernelpack.rms_norm no_grad"] = (torch.no_grad, lambda: ops.rms_norm(x, w))
    calls["kernelpack.mlp.rms_norm no_grad"] = (torch.no_grad, lambda: mlp.rms_norm(x, w, eps))
    calls["aten.neg.default inference_mode"] = (
        torch.inference_mode,
        lambda: torch.ops.aten.neg.default(x),
    )
    calls["torch.neg inference_mode"] = (torch.inference_mode, lambda: torch.neg(x))
    fastest = host_us_per_calls(calls, per_loop=args.calls, loops=args.loops)
    print(f"keep_gil={args.keep_gil}; µs per call, fastest of {args.loops} loops of {args.calls}")
    for name, us in fastest.items():
        print(f"  {name:58s} {us:7.2f}")
    floor = fastest["op     nothing"] - fastest["direct nothing"]
    print(f"op floor over a direct call: {floor:.2f}")
    for name in steps:
        extra = fastest[f"op     {name}"] - fastest[f"direct {name}"] - floor
        print(f"  extra inside a kernel, {name:30s} {extra:+7.2f}")


if __name__ == "__main__":
    main()
