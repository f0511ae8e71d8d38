"""Non-finite inputs and empty problems against PyTorch (docs/numerics.md): qkv's outputs and
gradients are NaN and infinite exactly where torch.nn.functional.scaled_dot_product_attention's
are, on both backends, for a NaN or inf in q, k, v, dout or a -inf bias row; values past
key_lengths, which torch never sees, change nothing; B = 0, Tq = 0 and Tk = 0 give empty or
fully masked results as the C++ library does."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import qkv
import qkv.torch

B, TQ, TK, H, D = 2, 9, 13, 2, 8


def _inputs(dtype):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(B, TQ, H, D, generator=g, dtype=dtype)
    k = torch.randn(B, TK, H, D, generator=g, dtype=dtype)
    v = torch.randn(B, TK, H, D, generator=g, dtype=dtype)
    dout = torch.randn(B, TQ, H, D, generator=g, dtype=dtype)
    return q, k, v, dout


def _torch_sdpa(q, k, v, dout, bias=None, is_causal=False, backends=None):
    """PyTorch's attention on the [B, T, H, D] layout, and its gradients (on the given SDPA
    backends, else on the one torch picks)."""
    leaves = [x.detach().transpose(1, 2).clone().requires_grad_(True) for x in (q, k, v)]
    mask = None if bias is None else bias.expand(B, H, TQ, TK)
    with sdpa_kernel(backends) if backends else contextlib.nullcontext():
        out = F.scaled_dot_product_attention(*leaves, attn_mask=mask, is_causal=is_causal)
    out.backward(dout.transpose(1, 2))
    return [out.transpose(1, 2)] + [x.grad.transpose(1, 2) for x in leaves]


def _qkv(q, k, v, dout, backend, **options):
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    out = qkv.torch.attention(*leaves, backend=backend, **options)
    out.backward(dout)
    return [out] + [x.grad for x in leaves]


def _same_pattern(ours, theirs, names=("out", "dq", "dk", "dv")):
    for name, a, b in zip(names, ours, theirs):
        assert torch.equal(torch.isnan(a), torch.isnan(b)), f"{name}: NaN pattern differs"
        assert torch.equal(torch.isinf(a), torch.isinf(b)), f"{name}: inf pattern differs"
        finite = torch.isfinite(b)
        tol = 1e-4 if a.dtype == torch.float32 else 1e-9
        assert torch.allclose(a[finite], b[finite], rtol=tol, atol=tol), f"{name}: values differ"


def _poison(where, q, k, v, dout):
    q, k, v, dout = (x.clone() for x in (q, k, v, dout))
    if where == "nan q":
        q[1, 4, 0, 2] = math.nan
    elif where == "inf q":
        q[0, 3, 1, 0] = math.inf
        k[0, :, 1, 0] = k[0, :, 1, 0].abs() + 0.5  # every score +inf: NaN, in torch too
    elif where == "nan k":
        k[0, 6, 1, 3] = math.nan
    elif where == "nan v":
        v[1, 2, 0, 5] = math.nan
    elif where == "inf v":
        v[0, 7, 1, 1] = -math.inf
    elif where == "nan dout":
        dout[1, 8, 1, 4] = math.nan
    return q, k, v, dout


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("where", ["nan q", "inf q", "nan k", "nan v", "inf v", "nan dout"])
def test_nan_and_inf_land_where_torch_puts_them(dtype, backend, where):
    # Against PyTorch's math path, the formula as written: its fused CPU kernel, on AVX-512 (AMD
    # Zen 5, torch 2.15), gives a finite output row for a query holding a NaN (its vector row max
    # drops the NaN), where the math path and every other row's reading give NaN.
    q, k, v, dout = _poison(where, *_inputs(dtype))
    theirs = _torch_sdpa(q, k, v, dout, backends=[SDPBackend.MATH])
    ours = _qkv(q, k, v, dout, backend)
    _same_pattern(ours, theirs)
    assert torch.isfinite(ours[0]).any(), "the poison reached every row"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("where", ["nan q", "inf q", "nan k", "nan v", "inf v", "nan dout"])
def test_under_a_causal_mask_no_row_reads_a_key_it_drops(dtype, where):
    # PyTorch differs here, deliberately not followed: its P @ V multiplies a dropped key's NaN
    # value by P = 0 and gives NaN rows that never attend to it. qkv's rows stay finite; both
    # backends agree.
    q, k, v, dout = _poison(where, *_inputs(dtype))
    fused = _qkv(q, k, v, dout, "cpu", causal="top_left")
    reference = _qkv(q, k, v, dout, "reference", causal="top_left")
    _same_pattern(fused, reference)
    if where in ("nan k", "nan v", "inf v"):
        first = {"nan k": 6, "nan v": 2, "inf v": 7}[where]  # the poisoned key
        b = 0 if where != "nan v" else 1
        assert torch.isfinite(fused[0][b, :first]).all(), "a row before the key read it"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_a_minus_infinity_bias_row_is_masked_like_torch(dtype, backend):
    q, k, v, dout = _inputs(dtype)
    bias = torch.zeros(1, H, TQ, TK, dtype=dtype)
    bias[0, 1, 4, :] = -math.inf
    dout[:, 4, 1, :] = math.nan  # a masked row's dout is never read
    theirs = _torch_sdpa(q, k, v, dout.nan_to_num(0.0), bias=bias)
    ours = _qkv(q, k, v, dout, backend, bias=bias)
    _same_pattern(ours, theirs)
    assert torch.equal(ours[0][:, 4, 1], torch.zeros(B, D, dtype=dtype))


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_values_past_the_key_lengths_are_never_read(backend):
    q, k, v, dout = _inputs(torch.float32)
    lengths = [TK, TK - 4]
    clean = _qkv(q, k, v, dout, backend, key_lengths=lengths)
    k[1, TK - 4 :] = math.nan
    v[1, TK - 4 :] = math.inf
    poisoned = _qkv(q, k, v, dout, backend, key_lengths=lengths)
    for a, b in zip(poisoned[:2], clean[:2]):  # out, dq
        assert torch.equal(a, b)
    assert torch.isfinite(poisoned[2][:, : TK - 4]).all() and torch.isfinite(poisoned[3]).all()


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("shape", [(0, 5, 7), (2, 0, 7), (2, 5, 0)])
def test_empty_problems(backend, shape):
    b, tq, tk = shape
    q = torch.randn(b, tq, H, D)
    k = torch.randn(b, tk, H, D)
    v = torch.randn(b, tk, H, D)
    out, lse = qkv.attention(q, k, v, causal="bottom_right", backend=backend, return_lse=True)
    assert out.shape == (b, tq, H, D) and lse.shape == (b, H, tq)
    assert torch.equal(out, torch.zeros_like(out))
    assert bool((lse == -math.inf).all())
    dq, dk, dv = qkv.attention_backward(torch.ones_like(out), q, k, v, out, lse,
                                        causal="bottom_right", backend=backend)[:3]
    for grad, x in ((dq, q), (dk, k), (dv, v)):
        assert grad.shape == x.shape and torch.equal(grad, torch.zeros_like(x))
