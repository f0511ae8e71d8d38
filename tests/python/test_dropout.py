"""Dropout: the mask is recovered from qkv's own output with v = identity rows (out[i, j] =
P_ij * keep_ij / (1 - p)), then the forward with another v and the backward are checked against
the torch-primitive formula applying that recovered mask: the backward regenerates the forward's
mask from the seed. The recovered mask is also the one C++ draws for the same seed and offset:
qkv::dropout_keep, written again here in numpy from <qkv/philox.hpp>'s layout and checked
against Random123's known answers."""

from __future__ import annotations

import math

import numpy as np
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


MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter, key):
    """Philox4x32-10 on numpy arrays of 32-bit values (held in uint64): counter (c0, c1, c2, c3),
    key (k0, k1) -> the 4 output words."""
    c0, c1, c2, c3 = (np.asarray(x, dtype=np.uint64) for x in counter)
    k0, k1 = (np.asarray(x, dtype=np.uint64) for x in key)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = (k0 + np.uint64(0x9E3779B9)) & MASK32
        k1 = (k1 + np.uint64(0xBB67AE85)) & MASK32
    return c0, c1, c2, c3


@pytest.mark.parametrize(
    "counter, key, expected",
    [  # Random123's known answers (kat_vectors), as tests/core/test_philox.cpp has them
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_numpy_philox_matches_random123(counter, key, expected) -> None:
    assert tuple(int(x) for x in philox4x32_10(counter, key)) == expected


def dropout_keep(seed: int, offset: int, b: int, hq: int, tq: int, tk: int, p: float):
    """qkv::dropout_keep(seed, offset, b * Hq + h, i, j, p) for every (b, h, i, j) ->
    bool [B, Hq, Tq, Tk]: key (seed low 32 bits, seed high XOR offset high), counter (j / 4, i,
    b * Hq + h, offset low), lane j % 4, kept when its top 24 bits / 2^24 >= p."""
    bi, hi, ii, ji = np.meshgrid(
        np.arange(b), np.arange(hq), np.arange(tq), np.arange(tk), indexing="ij"
    )
    bh = (bi * hq + hi).astype(np.uint64)
    key = (seed & 0xFFFFFFFF, (seed >> 32) ^ (offset >> 32))
    counter = (ji.astype(np.uint64) >> np.uint64(2), ii, bh, np.full_like(bh, offset & 0xFFFFFFFF))
    words = np.stack(philox4x32_10(counter, key))
    bits = np.take_along_axis(words, (ji & 3)[np.newaxis], axis=0)[0]
    uniform = (bits >> np.uint64(8)).astype(np.float32) * np.float32(2.0**-24)
    return uniform.astype(np.float64) >= p


@pytest.mark.parametrize(
    "seed, offset", [(1234, 0), (2**40 | 5, 2**35 | 9), (2**64 - 1, 2**64 - 2)], ids=str
)
@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_mask_is_the_cpp_librarys_for_the_same_seed_and_offset(seed, offset, backend) -> None:
    q, k, _, _ = inputs(3)
    options = {"causal": "bottom_right", "backend": backend}
    keep = recover_keep(q, k, seed=seed, offset=offset, **options)
    candidates = (qkv.attention_weights(q, k, **options) != 0).numpy()
    want = dropout_keep(seed, offset, B, Hq, T, T, P_DROP) & candidates
    assert (~want & candidates).any(), "nothing dropped"
    assert np.array_equal(keep.numpy(), want)
