"""compute-sanitizer driver for the MLP kernels: every kernel and dtype, aligned and misaligned views,
edge sizes; each result checked against float64 (run by bench/gpu_all.sh under memcheck and racecheck)."""

import sys

import torch

from kernelpack import mlp
from kernelpack.ops.mlp import torch_ops  # noqa: F401  (torch_ops registers torch.ops.kernelpack)

OPS = torch.ops.kernelpack

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


def check_silu_mul(out, grad_gate, grad_up, g, u, dy, dtype, what):
    """silu(g) * u and its two gradients for the incoming gradient dy, against float64."""
    gd, ud, dyd = g.double(), u.double(), dy.double()
    sigmoid = gd.sigmoid()
    check(out, gd * sigmoid * ud, dtype, what)
    check(grad_gate, dyd * ud * sigmoid * (1 + gd * (1 - sigmoid)), dtype, f"{what} d_gate")
    check(grad_up, dyd * gd * sigmoid, dtype, f"{what} d_up")


for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for off in (0, 1):
        # 4100 and 11008 take the exact kernels, which load misaligned views' vectors from
        # pointers rounded down before they test the alignment; 800 x 14336 (past 64 MiB moved)
        # the plain exact forms, and misaligned the general kernel
        for n in (1, 9, 4099, 4100, 11008, 800 * 14336):
            g, u, dy = view(n, dtype, off), view(n, dtype, off), view(n, dtype, off)
            out = mlp.swiglu(g, u)
            grad_gate, grad_up = OPS.swiglu_backward(dy, g, u)
            check_silu_mul(out, grad_gate, grad_up, g, u, dy, dtype, f"swiglu {n} {off}")
        # (1, 12) and (1, 11008) a single row
        for rows, cols in ((3, 9), (2, 4096), (1, 12), (1, 11008), (800, 14336)):
            x = view(rows * 2 * cols, dtype, off).view(rows, 2 * cols)
            dy = view(rows * cols, dtype, off).view(rows, cols)
            out = mlp.silu_and_mul(x)
            grad_x = OPS.silu_and_mul_backward(dy, x)
            gate, up = x[:, :cols], x[:, cols:]
            what = f"silu_and_mul {rows}x{cols} {off}"
            check_silu_mul(out, grad_x[:, :cols], grad_x[:, cols:], gate, up, dy, dtype, what)
        for rows, cols in (
            (3, 1),
            (2, 9),
            (2, 4099),
            (2, 8192),
            (133, 5120),
            (133, 8192),  # rms_norm_fixed_full reading its 16-bit row twice (sm_90)
            (4096, 4096),  # the fixed-length kernels for many rows
            (1, 65536),
        ):
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
        # The backward kernels, through autograd: every input's gradient against float64.
        for rows, cols in ((3, 9), (2, 4096), (1, 12), (300, 264), (2, 8200), (64, 4096)):
            args = [view(rows * cols, dtype, off).view(rows, cols) for _ in range(2)]
            w = view(cols, dtype, off)
            cases = {
                "swiglu": (OPS.swiglu, (args[0], args[1]), lambda g, u: g * g.sigmoid() * u),
                "rms_norm": (
                    lambda x, w: OPS.rms_norm(x, w, EPS),
                    (args[0], w),
                    lambda x, w: x * torch.rsqrt(x.square().mean(-1, keepdim=True) + EPS) * w,
                ),
                "add_rms_norm": (
                    lambda x, r, w: OPS.add_rms_norm(x, r, w, EPS)[0],
                    (args[0], args[1], w),
                    lambda x, r, w: (
                        (x + r) * torch.rsqrt((x + r).square().mean(-1, keepdim=True) + EPS) * w
                    ),
                ),
            }
            for name, (op, inputs, reference) in cases.items():
                leaves = [t.detach().clone().requires_grad_() for t in inputs]
                grads = torch.autograd.grad(op(*leaves).float().sum(), leaves)
                wide = [t.detach().double().requires_grad_() for t in inputs]
                expected = torch.autograd.grad(reference(*wide).sum(), wide)
                for got, want in zip(grads, expected, strict=True):
                    err = ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
                    if not err <= TOL[dtype] * 10:
                        print("FAIL", name, "backward", rows, cols, off, err)
                        sys.exit(1)
torch.cuda.synchronize()
print("sanitize driver: all kernels ran and matched")
