"""Dropout: the mask is recovered from qkv's own output with v = identity rows (out[i, j] =
P_ij * keep_ij / (1 - p)), then the forward with another v and the backward are checked against
the torch-primitive formula applying that recovered mask: the backward regenerates the forward's
mask from the seed."""

from __future__ import annotations

import math

import pytest
import torch

import qkv
import qkv.torch
from reference import attention_ref, check_f32, check_f64

B, T, Hq, Hk, D, Dv = 2, 48, 4, 2, 16, 12
P_DROP = 0.3


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, Hq, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, T, Hk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, Hk, Dv, generator=g, dtype=torch.float64)
    dout = torch.randn(B, T, Hq, Dv, generator=g, dtype=torch.float64)
    return q, k, v, dout


def recover_keep(q: torch.Tensor, k: torch.Tensor, seed: int, **options) -> torch.Tensor:
    """The keep decisions [B, Hq, Tq, Tk] qkv applies for this seed, read off its output with
    v = identity rows (Dv = Tk), and checked to be exactly P * keep / (1 - p)."""
    v_eye = torch.eye(T, dtype=torch.float64).view(1, T, 1, T).expand(B, T, Hk, T)
    out = qkv.attention(q, k, v_eye, dropout_p=P_DROP, seed=seed, **options)
    dropped_p = out.permute(0, 2, 1, 3)  # [B, Hq, Tq, Tk]
    p = qkv.attention_weights(q, k, **options)
    keep = dropped_p != 0
    assert not (keep & (p == 0)).any(), "a key the mask removes was kept"
    check_f64("P * keep / (1 - p)", dropped_p, p * keep / (1 - P_DROP))
    return keep


@pytest.mark.parametrize("options", [{}, {"causal": "bottom_right", "window": (20, 0)}], ids=str)
def test_mask_rate_and_seed(options) -> None:
    q, k, _, _ = inputs()
    keep = recover_keep(q, k, seed=1234, **options)
    p = qkv.attention_weights(q, k, **options)
    candidates = p != 0
    n = candidates.sum().item()
    rate = (keep & candidates).sum().item() / n
    # Binomial(n, 0.7): 6 standard deviations.
    assert abs(rate - (1 - P_DROP)) < 6 * math.sqrt(P_DROP * (1 - P_DROP) / n), rate
    assert torch.equal(keep, recover_keep(q, k, seed=1234, **options)), "same seed, other mask"
    assert not torch.equal(keep, recover_keep(q, k, seed=1235, **options)), "seed ignored"


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_forward_and_backward_with_the_recovered_mask(backend: str) -> None:
    q, k, v, dout = inputs()
    options = {"causal": "bottom_right", "backend": backend}
    keep = recover_keep(q, k, seed=77, **options)

    out, lse = qkv.attention(q, k, v, dropout_p=P_DROP, seed=77, return_lse=True, **options)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    ref_out, ref_lse = attention_ref(*leaves, causal="bottom_right", dropout_p=P_DROP, keep=keep)
    ref_out.backward(dout)
    check_f64("out", out, ref_out.detach())
    check_f64("lse (dropout leaves it alone)", lse, ref_lse.detach())

    grads = qkv.attention_backward(dout, q, k, v, out, lse, dropout_p=P_DROP, seed=77, **options)
    for name, got, leaf in zip(("dq", "dk", "dv"), grads, leaves):
        check_f64(name, got, leaf.grad)


def test_torch_autograd_function_float32() -> None:
    q, k, v, dout = inputs(5)
    keep = recover_keep(q, k, seed=9)

    def grads(dtype, fn):
        leaves = [x.to(dtype).requires_grad_() for x in (q, k, v)]
        (fn(*leaves) * dout.to(dtype)).sum().backward()
        return [leaf.grad for leaf in leaves]

    got = grads(torch.float32, lambda *x: qkv.torch.attention(*x, dropout_p=P_DROP, seed=9))
    naive = grads(torch.float32, lambda *x: attention_ref(*x, dropout_p=P_DROP, keep=keep)[0])
    ref = grads(torch.float64, lambda *x: attention_ref(*x, dropout_p=P_DROP, keep=keep)[0])
    for name, g, n, r in zip(("dq", "dk", "dv"), got, naive, ref):
        check_f32(name, g, n, r)
