"""compute-sanitizer driver for the MLP kernels: every kernel and dtype, aligned and misaligned views,
edge sizes; each result checked against float64 (run by bench/gpu_all.sh under memcheck and racecheck)."""

import sys

import torch

from kernelpack import mlp

EPS = 1e-6
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def view(n, dtype, offset):
    buf = torch.randn(n + offset, device="cuda").to(dtype)
    return buf[offset:]


def check(got, ref, dtype, what):
    err = ((got.double() - ref).abs() / (ref.abs() + 1e-3)).max().item() if ref.numel() else 0.0
    if not err <= TOL[dtype] * 10:
        print("FAIL", what, err)
        sys.exit(1)


for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for off in (0, 1):
        for n in (1, 9, 4099):
            g, u = view(n, dtype, off), view(n, dtype, off)
            out = mlp.swiglu(g, u)
            gd = g.double()
            check(out, gd * gd.sigmoid() * u.double(), dtype, f"swiglu {n} {off}")
        for rows, cols in ((3, 9), (2, 4096), (1, 12)):
            x = view(rows * 2 * cols, dtype, off).view(rows, 2 * cols)
            out = mlp.silu_and_mul(x)
            gd = x[:, :cols].double()
            check(
                out, gd * gd.sigmoid() * x[:, cols:].double(), dtype, f"silu_and_mul {rows}x{cols}"
            )
        for rows, cols in ((3, 1), (2, 9), (2, 4099), (2, 8192), (1, 65536)):
            x = view(rows * cols, dtype, off).view(rows, cols)
            w = view(cols, dtype, off)
            r = view(rows * cols, dtype, off).view(rows, cols)
            xd = x.double()
            ref = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + EPS) * w.double()
            check(mlp.rms_norm(x, w, EPS), ref, dtype, f"rms_norm {rows}x{cols} {off}")
            s = (x.double() + r.double()).to(dtype).double()
            ref = s * torch.rsqrt(s.square().mean(-1, keepdim=True) + EPS) * w.double()
            mlp.fused_add_rms_norm(x, r, w, EPS)
            check(x, ref, dtype, f"fused {rows}x{cols} {off}")
torch.cuda.synchronize()
print("sanitize driver: all kernels ran and matched")
