"""qkv.linear_attention against the formula written in numpy and in torch (whose autograd gives
the reference gradients), causal rules, key lengths and GQA; the torch autograd path; errors."""

import numpy as np
import pytest
import torch

import qkv
import qkv.torch


def _phi(x):
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


def _formula(q, k, v, causal=None, key_lengths=None, eps=1e-6):
    # The definition, one (b, h, i) at a time, in float64.
    B, Tq, Hq, D = q.shape
    Tk, Hk = k.shape[1], k.shape[2]
    out = np.zeros((B, Tq, Hq, v.shape[3]))
    for b in range(B):
        tk = Tk if key_lengths is None else key_lengths[b]
        for h in range(Hq):
            hk = h // (Hq // Hk)
            for i in range(Tq):
                last = tk - 1 if causal is None else (i if causal == "top_left" else i + tk - Tq)
                keys = range(0, max(0, min(tk, last + 1)))
                w = np.array([_phi(q[b, i, h]) @ _phi(k[b, j, hk]) for j in keys])
                num = sum((w[n] * v[b, j, hk] for n, j in enumerate(keys)), np.zeros(v.shape[3]))
                out[b, i, h] = num / (w.sum() + eps)
    return out


@pytest.mark.parametrize(
    "causal,key_lengths,shape",
    [
        (None, None, (2, 9, 9, 2, 2)),
        ("top_left", None, (1, 70, 70, 4, 2)),
        ("bottom_right", [11, 7], (2, 5, 11, 2, 1)),
        (None, [0, 6], (2, 4, 6, 3, 3)),
    ],
)
def test_numpy_matches_the_formula(causal, key_lengths, shape):
    B, Tq, Tk, Hq, Hk = shape
    rng = np.random.default_rng(1)
    q = rng.standard_normal((B, Tq, Hq, 5))
    k = rng.standard_normal((B, Tk, Hk, 5))
    v = rng.standard_normal((B, Tk, Hk, 3))
    want = _formula(q, k, v, causal, key_lengths)
    got = qkv.linear_attention(q, k, v, causal=causal, key_lengths=key_lengths)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    got32 = qkv.linear_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
        causal=causal, key_lengths=key_lengths,
    )
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=2e-5, atol=2e-5)


def _torch_formula(q, k, v, causal):
    # The same formula in torch ops (elu + 1, a masked weight matrix), for torch's gradients.
    qf = torch.nn.functional.elu(q) + 1
    kf = torch.nn.functional.elu(k) + 1
    group = q.shape[2] // k.shape[2]
    kf = kf.repeat_interleave(group, dim=2)
    vv = v.repeat_interleave(group, dim=2)
    w = torch.einsum("bihd,bjhd->bhij", qf, kf)
    if causal == "top_left":
        w = w * torch.ones(q.shape[1], k.shape[1]).tril().to(w.dtype)
    num = torch.einsum("bhij,bjhe->bihe", w, vv)
    den = w.sum(-1).transpose(1, 2).unsqueeze(-1) + 1e-6
    return num / den


@pytest.mark.parametrize("causal", [None, "top_left"])
def test_torch_autograd_matches_torchs_own_gradients(causal):
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 67, h, 8, dtype=torch.float64, requires_grad=True) for h in (4, 2, 2))
    dout = torch.randn(2, 67, 4, 8, dtype=torch.float64)
    out = qkv.torch.linear_attention(q, k, v, causal=causal)
    (out * dout).sum().backward()
    got = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    want_out = _torch_formula(q, k, v, causal)
    (want_out * dout).sum().backward()
    torch.testing.assert_close(out, want_out, rtol=1e-10, atol=1e-10)
    for g, x in zip(got, (q, k, v)):
        torch.testing.assert_close(g, x.grad, rtol=1e-9, atol=1e-10)
    # qkv.linear_attention on tensors that require grad records the same backward.
    out2 = qkv.linear_attention(q, k, v, causal=causal)
    assert out2.requires_grad
    grads = qkv.linear_attention_backward(dout, q, k, v, causal=causal)
    for g, h in zip(grads, got):
        torch.testing.assert_close(g, h, rtol=0, atol=0)


def test_refuses_bad_arguments():
    q = np.zeros((1, 3, 2, 4))
    with pytest.raises(ValueError, match="feature_map"):
        qkv.linear_attention(q, q, q, feature_map="favor")
    with pytest.raises(ValueError, match="causal"):
        qkv.linear_attention(q, q, q, causal="diagonal")
    with pytest.raises(ValueError, match="eps"):
        qkv.linear_attention(q, q, q, eps=0.0)
    with pytest.raises(ValueError, match="key_lengths"):
        qkv.linear_attention(q, q, q, key_lengths=[4])
    with pytest.raises(ValueError, match="q"):
        qkv.linear_attention(q.astype(np.float16), q, q)
