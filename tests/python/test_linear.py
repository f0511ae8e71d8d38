"""qkv.linear_attention against the formula written in numpy and in torch (whose autograd gives
the reference gradients), causal rules, key lengths and GQA, for elu + 1 and FAVOR+; the torch
autograd path; the recurrent state after a prompt; errors."""

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


def _favor_formula(q, k, v, omega, causal, scale, eps=1e-6):
    # FAVOR+ as qkv/linear_attention.hpp defines it, in numpy float64: phi(q)_f =
    # exp(w_f . x - max_f w_f . x) / sqrt(F), phi_i(k)_f = exp(w_f . y - |y|^2 / 2 - m_i) / sqrt(F)
    # with x = sqrt(s) q, y = sqrt(s) k and m_i the largest key logit over row i's keys.
    B, Tq, Hq, D = q.shape
    Tk, Hk = k.shape[1], k.shape[2]
    F = omega.shape[0]
    out = np.zeros((B, Tq, Hq, v.shape[3]))
    for b in range(B):
        for h in range(Hq):
            hk = h // (Hq // Hk)
            y = np.sqrt(scale) * k[b, :, hk]
            ku = y @ omega.T - (y * y).sum(-1, keepdims=True) / 2  # [Tk, F]
            for i in range(Tq):
                kept = Tk if causal is None else i + 1
                xu = np.sqrt(scale) * q[b, i, h] @ omega.T
                a = np.exp(xu - xu.max()) / np.sqrt(F)
                m = ku[:kept].max()
                f = np.exp(ku[:kept] - m) / np.sqrt(F)
                w = f @ a
                out[b, i, h] = w @ v[b, :kept, hk] / (w.sum() + eps)
    return out


@pytest.mark.parametrize("causal", [None, "top_left"])
def test_favor_matches_the_formula_and_estimates_softmax(causal):
    rng = np.random.default_rng(3)
    q, k, v = (0.5 * rng.standard_normal((2, 40, h, 8)) for h in (4, 2, 2))
    omega = qkv.favor_features(8, 24, seed=5)
    assert omega.shape == (24, 8)
    want = _favor_formula(q, k, v, omega, causal, 8 ** -0.5)
    got = qkv.linear_attention(q, k, v, feature_map="favor", num_features=24, seed=5, causal=causal)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    other = qkv.linear_attention(q, k, v, feature_map="favor", num_features=24, seed=6, causal=causal)
    assert np.abs(other - got).max() > 1e-3  # another seed, other features
    # Many features: close to softmax attention with the same scale.
    many = qkv.linear_attention(q, k, v, feature_map="favor", num_features=4096, causal=causal)
    qt, kt, vt = (torch.from_numpy(x).transpose(1, 2) for x in (q, k, v))
    exact = torch.nn.functional.scaled_dot_product_attention(
        qt, kt.repeat_interleave(2, 1), vt.repeat_interleave(2, 1), is_causal=causal is not None
    ).transpose(1, 2).numpy()
    assert np.linalg.norm(many - exact) / np.linalg.norm(exact) < 0.05


def test_favor_torch_gradients_match_torchs_with_the_stabilizers_held_constant():
    torch.manual_seed(4)
    q, k, v = (
        (0.5 * torch.randn(1, 30, h, 6, dtype=torch.float64)).requires_grad_() for h in (2, 1, 1)
    )
    dout = torch.randn(1, 30, 2, 6, dtype=torch.float64)
    out = qkv.torch.linear_attention(q, k, v, feature_map="favor", num_features=10, causal="top_left")
    (out * dout).sum().backward()
    got = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    omega = torch.from_numpy(qkv.favor_features(6, 10))
    xu = (q * 6 ** -0.25) @ omega.T  # [1, 30, 2, 10]
    a = torch.exp(xu - xu.amax(-1, keepdim=True).detach()) / 10 ** 0.5
    y = k * 6 ** -0.25
    ku = y @ omega.T - (y * y).sum(-1, keepdim=True) / 2  # [1, 30, 1, 10]
    m = ku.amax(-1).cummax(1).values.detach()  # [1, 30, 1]: row i's shift over keys j <= i
    f = torch.exp(ku.unsqueeze(1) - m[:, :, None, :, None]) / 10 ** 0.5  # [1, i, j, 1, 10]
    w = torch.einsum("bihf,bijhf->bhij", a, f.expand(-1, -1, -1, 2, -1))
    w = w * torch.ones(30, 30, dtype=torch.float64).tril()
    want = torch.einsum("bhij,bjhe->bihe", w, v.expand(-1, -1, 2, -1))
    want = want / (w.sum(-1).transpose(1, 2).unsqueeze(-1) + 1e-6)
    (want * dout).sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    for g, x in zip(got, (q, k, v)):
        torch.testing.assert_close(g, x.grad, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("feature_map", ["elu", "favor"])
def test_return_state_goes_on_decoding(feature_map):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 50, h, 4)) for h in (2, 1, 1))
    whole = qkv.linear_attention(q, k, v, feature_map=feature_map, causal="top_left")
    prefix, state = qkv.linear_attention(
        q[:, :30], k[:, :30], v[:, :30], feature_map=feature_map, causal="top_left",
        return_state=True,
    )
    np.testing.assert_allclose(prefix, whole[:, :30], rtol=1e-12, atol=1e-12)
    assert state.length == 30
    for t in range(30, 50):
        row = state.step(q[:, t : t + 1], k[:, t : t + 1], v[:, t : t + 1])
        np.testing.assert_allclose(row, whole[:, t : t + 1], rtol=1e-11, atol=1e-11)
    assert state.length == 50
    fresh = qkv.LinearState(2, 1, 4, 4, feature_map=feature_map)
    first = fresh.step(q[:, :1], k[:, :1], v[:, :1])
    np.testing.assert_allclose(first, whole[:, :1], rtol=1e-12, atol=1e-12)


def test_refuses_bad_arguments():
    q = np.zeros((1, 3, 2, 4))
    with pytest.raises(ValueError, match="feature_map"):
        qkv.linear_attention(q, q, q, feature_map="performer")
    with pytest.raises(ValueError, match="num_features"):
        qkv.linear_attention(q, q, q, feature_map="favor", num_features=0)
    with pytest.raises(ValueError, match="num_features"):
        qkv.linear_attention(q, q, q, num_features=8)  # elu has D features
    with pytest.raises(ValueError, match="scale"):
        qkv.linear_attention(q, q, q, feature_map="favor", scale=-1.0)
    with pytest.raises(ValueError, match="seed"):
        qkv.linear_attention(q, q, q, feature_map="favor", seed=-1)
    with pytest.raises(ValueError, match="return_state"):
        qkv.linear_attention(q, q, q, key_lengths=[3], return_state=True)
    with pytest.raises(ValueError, match="causal"):
        qkv.linear_attention(q, q, q, causal="diagonal")
    with pytest.raises(ValueError, match="eps"):
        qkv.linear_attention(q, q, q, eps=0.0)
    with pytest.raises(ValueError, match="key_lengths"):
        qkv.linear_attention(q, q, q, key_lengths=[4])
    with pytest.raises(ValueError, match="k"):
        qkv.linear_attention(q.astype(np.float16), q, q)  # k float64


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_tensors_are_the_float32_kernel_rounded(dtype):
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 40, h, 8).to(dtype) for h in (2, 1, 1))
    out = qkv.linear_attention(q, k, v, causal="top_left", feature_map="favor", num_features=16)
    assert out.dtype == dtype
    want = qkv.linear_attention(
        q.float(), k.float(), v.float(), causal="top_left", feature_map="favor", num_features=16
    )
    assert torch.equal(out, want.to(dtype))
