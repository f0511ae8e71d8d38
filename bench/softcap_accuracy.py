"""Soft-capping's f32 accuracy, measured as FlashAttention's rule reads it: for out, dq, dk and dv,
the max error against float64 of qkv's fused kernel and of its reference backend in float32,
next to the error of the same math done naively by PyTorch in float32 (matmul, tanh, softmax,
autograd), and their ratio (the rule: at most 3). q is multiplied by --q-scale times the cap, as
FlashAttention's test multiplies it by the cap. With --time, also the fused forward + backward's
time with and without the cap. Needs torch and the qkv package (docs/numerics.md has what it
found).

    python bench/softcap_accuracy.py --softcap 50 --D 64 --T 512 --alibi --window 16 --Hk 1
"""

from __future__ import annotations

import argparse
import math
import time
from typing import List, Optional, Tuple

import torch

import qkv


def composed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    softcap: float,
    slopes: Optional[List[float]],
    window: int,
) -> Tuple[torch.Tensor, ...]:
    """q [B, T, Hq, D], k, v [B, T, Hk, D] -> out, dq, dk, dv of PyTorch's composed ops, in q's
    dtype."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    T, Hq = q.shape[1], q.shape[2]
    group = Hq // k.shape[2]
    qh = q.permute(0, 2, 1, 3)
    kh = k.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    vh = v.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    s = qh @ kh.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[3]))
    s = softcap * torch.tanh(s / softcap)
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    if slopes is not None:
        s = s - torch.tensor(slopes, dtype=q.dtype).view(1, Hq, 1, 1) * (i - j).abs().to(q.dtype)
    if window >= 0:
        s = s.masked_fill((i - j).abs() > window, -math.inf)
    out = (torch.softmax(s, dim=-1) @ vh).permute(0, 2, 1, 3)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def run_qkv(q, k, v, dout, backend: str, options: dict) -> Tuple[torch.Tensor, ...]:
    out, lse = qkv.attention(q, k, v, backend=backend, return_lse=True, **options)
    dq, dk, dv = qkv.attention_backward(dout, q, k, v, out, lse, backend=backend, **options)[:3]
    return out, dq, dk, dv


def fwd_bwd_ms(q, k, v, dout, options: dict, reps: int) -> float:
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter()
        run_qkv(q, k, v, dout, "cpu", options)
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--softcap", type=float, default=50.0)
    p.add_argument("--q-scale", type=float, default=2.0, help="q = randn * q_scale * softcap")
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--H", type=int, default=4, help="query heads")
    p.add_argument("--Hk", type=int, default=0, help="key/value heads (default: H)")
    p.add_argument("--D", type=int, default=64)
    p.add_argument("--alibi", action="store_true", help="slopes 1/2, 1/4, ... by head")
    p.add_argument("--window", type=int, default=-1, help="keys with |i - j| <= window")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time", action="store_true", help="also time the fused forward + backward")
    a = p.parse_args()
    Hk = a.Hk or a.H
    g = torch.Generator().manual_seed(a.seed)
    q = (torch.randn(a.B, a.T, a.H, a.D, generator=g) * (a.q_scale * a.softcap)).float()
    k = torch.randn(a.B, a.T, Hk, a.D, generator=g)
    v = torch.randn(a.B, a.T, Hk, a.D, generator=g)
    dout = torch.randn(a.B, a.T, a.H, a.D, generator=g)
    slopes = [2.0 ** -(h + 1) for h in range(a.H)] if a.alibi else None
    options = {"softcap": a.softcap}
    if slopes is not None:
        options["alibi_slopes"] = slopes
    if a.window >= 0:
        options["window"] = (a.window, a.window)

    wide = [x.double() for x in (q, k, v, dout)]
    truth = composed(*wide, a.softcap, slopes, a.window)
    naive = composed(q, k, v, dout, a.softcap, slopes, a.window)
    fused = run_qkv(q, k, v, dout, "cpu", options)
    ref = run_qkv(q, k, v, dout, "reference", options)
    raw = (q.double().permute(0, 2, 1, 3) @ wide[1].permute(0, 2, 1, 3).transpose(-1, -2)).abs()
    print(
        f"B={a.B} T={a.T} Hq={a.H} Hk={Hk} D={a.D} softcap={a.softcap:g} alibi={a.alibi} "
        f"window={a.window} seed={a.seed}: max |raw score| = "
        f"{raw.max().item() / math.sqrt(a.D) / a.softcap:.1f} softcap"
    )
    columns = ["torch f32", "fused f32", "ref f32"]
    ratios = f" {'fused/torch':>12} {'ref/torch':>10}"
    print(f"  {'':4} " + " ".join(f"{c:>10}" for c in columns) + ratios)
    for n, name in enumerate(["out", "dq", "dk", "dv"]):
        err = [(x[n].double() - truth[n]).abs().max().item() for x in (naive, fused, ref)]
        print(
            f"  {name:4} {err[0]:10.3e} {err[1]:10.3e} {err[2]:10.3e} {err[1] / err[0]:12.2f} "
            f"{err[2] / err[0]:10.2f}"
        )
    if a.time:
        plain = {key: value for key, value in options.items() if key != "softcap"}
        print(
            f"  fused forward + backward: {fwd_bwd_ms(q, k, v, dout, options, 5):.1f} ms with the "
            f"cap, {fwd_bwd_ms(q, k, v, dout, plain, 5):.1f} ms without"
        )


if __name__ == "__main__":
    main()
