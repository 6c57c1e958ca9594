"""What torch's dispatcher adds to an MLP op's hot call, on the CPU (no GPU needed):

    python bench/probe_dispatch.py [--loops 21] [--calls 3000]

The C hot call of rms_norm (launcher.c's TorchHotPath, compiled here with cc) over CPU tensors at
1 x 4096 bfloat16, with an entry prepared for device index -1 whose launch does nothing (as
tests/test_mlp_hot.py builds it), timed alone and as the CPU kernel of a torch.library op called
through torch.ops, beside that op's floor (a Python kernel that returns a tensor made beforehand)
and torch.empty_like; under torch.inference_mode (no autograd layer), the fastest and the median
of interleaved loops. The GPU's figures are bench/bench_mlp.py's host table (docs/bench-mlp.md);
docs/bench-mlp-notes.md ("The host's cost per call") compares the two.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "wheels"))

from kernelpack.ops.mlp import hot as mlp_hot  # noqa: E402  (after the path)

SOURCE = REPO / "wheels" / "kernelpack" / "backends" / "_native" / "launcher.c"
ROWS, COLS = 1, 4096


def native(work: Path) -> Any:
    """kernelpack.backends._launcher compiled from source into ``work``."""
    out = work / "_launcher.abi3.so"
    include = sysconfig.get_paths()["include"]
    command = ["cc", "-O2", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o", str(out)]
    try:
        subprocess.run(command, check=True)
    except FileNotFoundError:
        raise SystemExit(
            "probe_dispatch: no C compiler `cc` to build the launcher; install one"
        ) from None
    except subprocess.CalledProcessError as error:
        raise SystemExit(
            f"probe_dispatch: cc failed building {SOURCE} (status {error.returncode})"
        ) from None
    spec = importlib.util.spec_from_file_location("kernelpack.backends._launcher", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def no_launch(*args: object, **kwargs: object) -> None:
    """The entry's launch: nothing, so that what is timed is the host's path to it."""


def calls(launcher: Any) -> tuple[dict[str, Callable[[], object]], Any]:
    """The timed calls, and the library that keeps their ops registered."""
    x = torch.randn(ROWS, COLS).to(torch.bfloat16)
    weight = torch.randn(COLS).to(torch.bfloat16)
    key = (torch.bfloat16, -1, torch.Size((ROWS, COLS)))
    prepared = {key: (no_launch, 1, (64, 1), (0, ROWS, COLS), (COLS,), None, 1, None)}
    exchange = torch.Tensor.__dlpack_c_exchange_api__
    spec = tuple(mlp_hot.SPECS["rms_norm"])
    hot = launcher.TorchHotPath(spec, {torch.Tensor}, prepared, exchange, None).call
    if hot(x, weight) is NotImplemented:
        raise SystemExit("probe_dispatch: the hot call did not take the prepared call")
    made = torch.empty_like(x)
    library = torch.library.Library("kernelpack_probe", "DEF")
    for name in ("through_hot", "returns_made"):
        library.define(f"{name}(Tensor x, Tensor weight, float eps=1e-06) -> Tensor")
    library.impl("through_hot", lambda *args: hot(*args), "CPU")
    library.impl("returns_made", lambda *args: made, "CPU")
    ops = torch.ops.kernelpack_probe
    timed: dict[str, Callable[[], object]] = {
        "hot call alone": lambda: hot(x, weight),
        "op whose kernel is the hot call": lambda: ops.through_hot.default(x, weight),
        "op whose kernel returns a tensor made before": lambda: ops.returns_made.default(x, weight),
        "torch.empty_like": lambda: torch.empty_like(x),
    }
    return timed, library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=21, help="interleaved loops of each call")
    parser.add_argument("--calls", type=int, default=3000, help="calls a loop")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernelpack-probe-") as work:
        timed, _library = calls(native(Path(work)))
        per_call: dict[str, list[float]] = {name: [] for name in timed}
        with torch.inference_mode():
            for _ in range(args.loops):
                for name, call in timed.items():
                    began = time.perf_counter()
                    for _ in range(args.calls):
                        call()
                    per_call[name].append((time.perf_counter() - began) / args.calls * 1e6)
    print(f"µs per call, {args.loops} interleaved loops of {args.calls} (fastest, median):")
    for name, times in per_call.items():
        print(f"  {name:46s} {min(times):6.2f} {statistics.median(times):6.2f}")


if __name__ == "__main__":
    main()
