"""Mask and score mods as values (qkv.masks, qkv.scores) through qkv.attention, attention_backward,
qkv.torch.attention and scaled_dot_product_attention: each mask, alone and composed with & and |,
against torch's scaled_dot_product_attention given the same mask as a dense boolean tensor built
here from the definitions (document: ids[i] == ids[j]; strided and fixed as Child et al. 2019 state
them; BigBird's random blocks from the documented Philox draws); the score mods against the dense
additive bias or the torch formula; forward and gradients, float32 and float64."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv
import qkv.torch
from reference import attention_ref, check_f32, check_f64
from test_dropout import MASK32, philox4x32_10

B, Hq, Hk, D = 2, 4, 2, 16
SHAPES = [(70, 70), (45, 100), (100, 45)]  # (Tq, Tk): partial and full 64 x 64 tiles


def grid(Tq: int, Tk: int):
    """i [1, 1, Tq, 1] and j [1, 1, 1, Tk] for masks [B or 1, Hq or 1, Tq, Tk]."""
    return torch.arange(Tq).view(1, 1, Tq, 1), torch.arange(Tk).view(1, 1, 1, Tk)


def per_batch(values) -> torch.Tensor:
    return torch.tensor(values).view(-1, 1, 1, 1)


def ids_for(T: int) -> np.ndarray:
    """[B, T] document ids: three documents in batch 0, two in batch 1."""
    t = np.arange(T)
    return np.stack([np.where(t < T // 5, 4, np.where(t < T // 2, 9, 2)), (t >= 2 * T // 3)])


def bigbird_dense(block, window_blocks, global_blocks, random_blocks, seed, heads, Tq, Tk):
    """BigBird's block layout [heads, nq, nk] expanded to keys: query block ib keeps key blocks
    |ib - jb| <= window_blocks // 2, the first global_blocks key blocks (and the first
    global_blocks query blocks everything), and random_blocks of the others, picked by a partial
    Fisher-Yates shuffle of the free blocks (ascending) with draw n of (head h, query block ib)
    the 64-bit word (x0 << 32 | x1) of Philox4x32-10, counter (n, ib, h, 0x6269), key (seed low
    and high 32 bits): qkv::masks::bigbird's documented draws."""
    nq, nk = -(-Tq // block), -(-Tk // block)
    layout = np.zeros((heads, nq, nk), dtype=bool)
    key = (seed & int(MASK32), seed >> 32)
    for h in range(heads):
        for ib in range(nq):
            row = layout[h, ib]
            for jb in range(nk):
                near = abs(ib - jb) <= window_blocks // 2
                row[jb] = ib < global_blocks or jb < global_blocks or near
            free = [jb for jb in range(nk) if not row[jb]]
            for n in range(min(random_blocks, len(free))):
                x = philox4x32_10((n, ib, h, 0x6269), key)
                r = (int(x[0]) << 32) | int(x[1])
                pick = n + r % (len(free) - n)
                free[n], free[pick] = free[pick], free[n]
                row[free[n]] = True
    i, j = grid(Tq, Tk)
    rows, cols = i[0, 0, :, 0] // block, j[0, 0, 0] // block
    return torch.from_numpy(layout)[:, rows][:, :, cols].unsqueeze(0)


@dataclass
class MaskCase:
    """A mask mod and the same mask as a dense boolean [B or 1, Hq or 1, Tq, Tk] of (Tq, Tk)."""

    name: str
    mod: Callable[[int, int], "qkv.masks.MaskMod"]
    dense: Callable[[int, int], torch.Tensor]

    def __str__(self) -> str:
        return self.name


def causal_dense(Tq, Tk, offset=0):
    i, j = grid(Tq, Tk)
    return j <= i + offset


def window_dense(Tq, Tk, left, right, offset=0):
    i, j = grid(Tq, Tk)
    keep = torch.ones(1, 1, Tq, Tk, dtype=torch.bool)
    if left >= 0:
        keep = keep & (j >= i + offset - left)
    if right >= 0:
        keep = keep & (j <= i + offset + right)
    return keep


def global_dense(Tq, Tk, positions):
    i, j = grid(Tq, Tk)
    p = torch.tensor(positions)
    return (i.unsqueeze(-1) == p).any(-1) | (j.unsqueeze(-1) == p).any(-1)


def document_dense(Tq, Tk):
    ids = torch.from_numpy(ids_for(max(Tq, Tk)))  # [B, T]
    return (ids[:, :Tq, None] == ids[:, None, :Tk]).unsqueeze(1)


def strided_dense(Tq, Tk, stride):
    # Child et al. 2019, strided: A1 = {t, ..., i} with t = max(0, i - l + 1) (the previous l
    # positions), A2 = {j : (i - j) mod l = 0}, both causal.
    i, j = grid(Tq, Tk)
    return (j <= i) & ((i - j < stride) | ((i - j) % stride == 0))


def fixed_dense(Tq, Tk, block, summary):
    # Child et al. 2019, fixed: A1 = {j : floor(j / l) = floor(i / l)}, A2 = {j : j mod l in
    # {t, ..., l}} with t = l - c, both causal.
    i, j = grid(Tq, Tk)
    return (j <= i) & ((j // block == i // block) | (j % block >= block - summary))


LAYOUT = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=bool)  # blocks of 40 tokens


def layout_dense(Tq, Tk):
    i, j = grid(Tq, Tk)
    cells = torch.zeros(8, 8, dtype=torch.bool)  # the layout, then nothing past it
    cells[:3, :3] = torch.from_numpy(LAYOUT)
    return cells[i // 40, j // 40]


M = qkv.masks
MASKS = [
    MaskCase("full", lambda Tq, Tk: M.full(), lambda Tq, Tk: torch.ones(1, 1, Tq, Tk, dtype=bool)),
    MaskCase("causal", lambda Tq, Tk: M.causal(), causal_dense),
    MaskCase(
        "causal lower_right",
        lambda Tq, Tk: M.causal(align="lower_right"),
        lambda Tq, Tk: causal_dense(Tq, Tk, Tk - Tq),
    ),
    MaskCase(
        "sliding_window",
        lambda Tq, Tk: M.sliding_window(20, 5),
        lambda Tq, Tk: window_dense(Tq, Tk, 20, 5),
    ),
    MaskCase(
        "sliding_window lower_right",
        lambda Tq, Tk: M.sliding_window(-1, 3, align="lower_right"),
        lambda Tq, Tk: window_dense(Tq, Tk, -1, 3, Tk - Tq),
    ),
    MaskCase(
        "key_lengths",
        lambda Tq, Tk: M.key_lengths([Tk, 33]),
        lambda Tq, Tk: grid(Tq, Tk)[1] < per_batch([Tk, 33]),
    ),
    MaskCase(
        "prefix_lm",
        lambda Tq, Tk: M.prefix_lm([30, 7]),
        lambda Tq, Tk: (grid(Tq, Tk)[1] < per_batch([30, 7])) | causal_dense(Tq, Tk),
    ),
    MaskCase("document", lambda Tq, Tk: M.document(ids_for(max(Tq, Tk))), document_dense),
    MaskCase(
        "global_tokens",
        lambda Tq, Tk: M.global_tokens([0, 5, 41]),
        lambda Tq, Tk: global_dense(Tq, Tk, [0, 5, 41]),
    ),
    MaskCase(
        "longformer",
        lambda Tq, Tk: M.longformer(6, [0, 41]),
        lambda Tq, Tk: window_dense(Tq, Tk, 6, 6) | global_dense(Tq, Tk, [0, 41]),
    ),
    MaskCase(
        "bigbird",
        lambda Tq, Tk: M.bigbird(16, 1, 1, 1, seed=2**40 + 7, heads=Hq),
        lambda Tq, Tk: bigbird_dense(16, 1, 1, 1, 2**40 + 7, Hq, Tq, Tk),
    ),
    MaskCase("strided", lambda Tq, Tk: M.strided(9), lambda Tq, Tk: strided_dense(Tq, Tk, 9)),
    MaskCase("fixed", lambda Tq, Tk: M.fixed(16, 3), lambda Tq, Tk: fixed_dense(Tq, Tk, 16, 3)),
    MaskCase("from_block_layout", lambda Tq, Tk: M.from_block_layout(LAYOUT, 40), layout_dense),
    MaskCase(
        "causal & document",
        lambda Tq, Tk: M.causal() & M.document(ids_for(max(Tq, Tk))),
        lambda Tq, Tk: causal_dense(Tq, Tk) & document_dense(Tq, Tk),
    ),
    MaskCase(
        "sliding_window | strided",
        lambda Tq, Tk: M.sliding_window(4, 4) | M.strided(16),
        lambda Tq, Tk: window_dense(Tq, Tk, 4, 4) | strided_dense(Tq, Tk, 16),
    ),
    MaskCase(
        "(fixed | global_tokens) & key_lengths",
        lambda Tq, Tk: (M.fixed(16, 3) | M.global_tokens([2])) & M.key_lengths([40, Tk]),
        lambda Tq, Tk: (fixed_dense(Tq, Tk, 16, 3) | global_dense(Tq, Tk, [2]))
        & (grid(Tq, Tk)[1] < per_batch([40, Tk])),
    ),
    MaskCase(
        "causal lower_right & bigbird | global_tokens",
        lambda Tq, Tk: M.causal(align="lower_right") & M.bigbird(16, 1, 0, 1, seed=3, heads=2)
        | M.global_tokens([1]),
        lambda Tq, Tk: causal_dense(Tq, Tk, Tk - Tq)
        & bigbird_dense(16, 1, 0, 1, 3, 2, Tq, Tk)[:, [0, 1, 0, 1]]
        | global_dense(Tq, Tk, [1]),
    ),
]


def inputs(Tq: int, Tk: int, seed: int = 0):
    """float64 q [B, Tq, Hq, D], k and v [B, Tk, Hk, D], dout [B, Tq, Hq, D]."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(*shape, generator=g, dtype=torch.float64)
        for shape in ((B, Tq, Hq, D), (B, Tk, Hk, D), (B, Tk, Hk, D), (B, Tq, Hq, D))
    ]


def sdpa(q, k, v, keep: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """torch's scaled_dot_product_attention on q [B, Tq, Hq, D], k, v [B, Tk, Hk, D] with keep
    (bool, broadcast to [B, Hq, Tq, Tk]) and an additive bias -> [B, Tq, Hq, D]. A row keeping no
    key gives 0 and no gradient, as in qkv (PyTorch's own gives NaN): SDPA sees key 0 there and
    the row is zeroed after it."""
    Tq, Tk = q.shape[1], k.shape[1]
    keep = keep.expand(B, Hq, Tq, Tk)
    empty = ~keep.any(-1, keepdim=True)
    allowed = keep | (empty & (grid(Tq, Tk)[1] == 0))
    if bias is None:
        mask = allowed
    else:
        mask = torch.zeros_like(bias).masked_fill(~allowed, -math.inf) + bias
    qh = q.transpose(1, 2)
    kh, vh = (x.transpose(1, 2).repeat_interleave(Hq // Hk, dim=1) for x in (k, v))
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask).masked_fill(empty, 0.0)
    return out.transpose(1, 2)


def run(fn, x, dtype):
    """out and the gradients of <out, dout> for q, k, v through torch.autograd, in dtype."""
    q, k, v = (t.to(dtype, copy=True).requires_grad_() for t in x[:3])
    out = fn(q, k, v)
    out.backward(x[3].to(dtype))
    return [out.detach(), q.grad, k.grad, v.grad]


NAMES = ("out", "dq", "dk", "dv")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("case", MASKS, ids=str)
def test_mask_against_sdpa_f64(case: MaskCase, shape) -> None:
    Tq, Tk = shape
    x = inputs(Tq, Tk)
    keep, mod = case.dense(Tq, Tk), case.mod(Tq, Tk)
    want = run(lambda q, k, v: sdpa(q, k, v, keep), x, torch.float64)
    got = run(lambda q, k, v: qkv.torch.attention(q, k, v, mask_mod=mod), x, torch.float64)
    for name, g, w in zip(NAMES, got, want):
        check_f64(f"{case} {shape} {name}", g, w)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("case", MASKS, ids=str)
def test_mask_against_sdpa_f32(case: MaskCase, shape) -> None:
    Tq, Tk = shape
    x = inputs(Tq, Tk, seed=1)
    keep, mod = case.dense(Tq, Tk), case.mod(Tq, Tk)
    want64 = run(lambda q, k, v: sdpa(q, k, v, keep), x, torch.float64)
    naive32 = run(lambda q, k, v: sdpa(q, k, v, keep), x, torch.float32)
    got = run(lambda q, k, v: qkv.torch.attention(q, k, v, mask_mod=mod), x, torch.float32)
    for name, g, n, w in zip(NAMES, got, naive32, want64):
        assert g.dtype == torch.float32
        check_f32(f"{case} {shape} {name}", g, n, w)


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_numpy_in_numpy_out_with_lse(backend: str) -> None:
    """qkv.attention and attention_backward on numpy arrays, lse included, against the torch
    formula with the dense mask (reference.attention_ref)."""
    Tq, Tk = 45, 100
    case = MASKS[-1]
    q, k, v, dout = inputs(Tq, Tk, seed=2)
    mod = case.mod(Tq, Tk)
    out, lse = qkv.attention(q.numpy(), k.numpy(), v.numpy(), mask_mod=mod, backend=backend,
                             return_lse=True)
    assert isinstance(out, np.ndarray) and isinstance(lse, np.ndarray)
    grads = qkv.attention_backward(dout.numpy(), q.numpy(), k.numpy(), v.numpy(), out, lse,
                                   mask_mod=mod, backend=backend)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    want_out, want_lse = attention_ref(*leaves, mask=case.dense(Tq, Tk))
    want_out.backward(dout)
    check_f64("out", torch.from_numpy(out), want_out.detach())
    check_f64("lse", torch.from_numpy(lse), want_lse.detach())
    for name, g, leaf in zip(("dq", "dk", "dv"), grads, leaves):
        check_f64(name, torch.from_numpy(g), leaf.grad)


def alibi_bias(slopes, Tq, Tk, dtype):
    i, j = grid(Tq, Tk)
    return -torch.tensor(slopes, dtype=dtype).view(1, -1, 1, 1) * (i + Tk - Tq - j).abs().to(dtype)


SLOPES = [0.5, 0.25, 0.125, 0.0625]
S = qkv.scores


def formula(q, k, v, keep, score_fn):
    """Attention from torch primitives with s -> score_fn(s, Tq, Tk) before the mask."""
    Tq, Tk = q.shape[1], k.shape[1]
    qh = q.transpose(1, 2)
    kh, vh = (x.transpose(1, 2).repeat_interleave(Hq // Hk, dim=1) for x in (k, v))
    s = score_fn(qh @ kh.transpose(-1, -2) / math.sqrt(D), Tq, Tk)
    p = torch.softmax(s.masked_fill(~keep, -math.inf), dim=-1)
    return (p @ vh).transpose(1, 2)


def cap(c):
    return lambda s, Tq, Tk: c * torch.tanh(s / c)


def alibi(s, Tq, Tk):
    return s + alibi_bias(SLOPES, Tq, Tk, s.dtype)


SCORES = [
    # (name, score mod, s -> s', whether SDPA takes it as an additive bias)
    ("alibi", lambda: S.alibi(SLOPES), alibi, True),
    ("softcap", lambda: S.softcap(2.0), cap(2.0), False),
    ("softcap then alibi", lambda: S.softcap(2.0).then(S.alibi(SLOPES)),
     lambda s, Tq, Tk: alibi(cap(2.0)(s, Tq, Tk), Tq, Tk), False),
    ("alibi then softcap", lambda: S.alibi(SLOPES).then(S.softcap(1.5)),
     lambda s, Tq, Tk: cap(1.5)(alibi(s, Tq, Tk), Tq, Tk), False),
]


@pytest.mark.parametrize("with_mask", [False, True], ids=["full", "causal lower_right"])
@pytest.mark.parametrize("name, mod, fn, additive", SCORES, ids=[c[0] for c in SCORES])
def test_score_mods(name, mod, fn, additive, with_mask) -> None:
    """f64 to rounding and f32 by the 2x rule, against SDPA with the ALiBi bias as attn_mask
    where it is additive, else the torch formula; the mask given as a mod."""
    Tq, Tk = 45, 100
    x = inputs(Tq, Tk, seed=3)
    keep = causal_dense(Tq, Tk, Tk - Tq) if with_mask else torch.ones(1, 1, Tq, Tk, dtype=bool)
    mask_mod = qkv.masks.causal(align="lower_right") if with_mask else None

    def oracle(q, k, v):
        if additive:
            return sdpa(q, k, v, keep, alibi_bias(SLOPES, Tq, Tk, q.dtype).expand(B, Hq, Tq, Tk))
        return formula(q, k, v, keep, fn)

    def ours(q, k, v):
        return qkv.torch.attention(q, k, v, mask_mod=mask_mod, score_mod=mod())

    want64 = run(oracle, x, torch.float64)
    for n, g, w in zip(NAMES, run(ours, x, torch.float64), want64):
        check_f64(f"{name} {n}", g, w)
    naive32 = run(oracle, x, torch.float32)
    for n, g, nv, w in zip(NAMES, run(ours, x, torch.float32), naive32, want64):
        check_f32(f"{name} {n}", g, nv, w)


def t5_buckets(Tq: int, Tk: int, n: int = 8) -> list:
    """A bucket per offset j - i from -(Tq - 1) to Tk - 1: T5-like, exact near 0, log-spaced
    beyond, direction kept."""
    out = []
    for offset in range(-(Tq - 1), Tk):
        magnitude = abs(offset)
        b = magnitude if magnitude < n // 4 else min(n // 2 - 1, n // 4 + int(math.log2(magnitude)))
        out.append(b + (n // 2 if offset > 0 else 0))
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("with_mask", [False, True], ids=["full", "causal lower_right"])
def test_relative_bias_table_gets_its_gradient(dtype, with_mask) -> None:
    """qkv.scores.relative_bias with a torch table that requires grad: out, dq, dk, dv and the
    table's gradient against SDPA given table[:, buckets] gathered as a dense bias (torch's own
    autograd through the gather); then the soft cap after it against the torch formula."""
    Tq, Tk, n = 45, 100, 8
    x = inputs(Tq, Tk, seed=6)
    buckets = t5_buckets(Tq, Tk, n)
    i, j = grid(Tq, Tk)
    index = (j - i + Tq - 1).view(Tq, Tk)
    keep = causal_dense(Tq, Tk, Tk - Tq) if with_mask else torch.ones(1, 1, Tq, Tk, dtype=bool)
    mask_mod = qkv.masks.causal(align="lower_right") if with_mask else None
    table0 = torch.randn(Hq, n, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    gather = torch.tensor(buckets)[index]  # [Tq, Tk] bucket of each pair

    def both(score_of, oracle_of):
        got_table = table0.to(dtype, copy=True).requires_grad_()
        want_table = table0.to(dtype, copy=True).requires_grad_()
        got = run(lambda q, k, v: qkv.torch.attention(
            q, k, v, mask_mod=mask_mod, score_mod=score_of(got_table)), x, dtype)
        want = run(lambda q, k, v: oracle_of(q, k, v, want_table[:, gather].unsqueeze(0)), x, dtype)
        return got + [got_table.grad], want + [want_table.grad]

    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-5)
    got, want = both(lambda t: S.relative_bias(t, buckets),
                     lambda q, k, v, bias: sdpa(q, k, v, keep, bias.expand(B, Hq, Tq, Tk)))
    for name, g, w in zip(NAMES + ("dtable",), got, want):
        torch.testing.assert_close(g, w, **tol, msg=name)
    got, want = both(lambda t: S.relative_bias(t, buckets).then(S.softcap(2.0)),
                     lambda q, k, v, bias: formula(q, k, v, keep,
                                                   lambda s, Tq, Tk: cap(2.0)(s + bias, Tq, Tk)))
    for name, g, w in zip(NAMES + ("dtable",), got, want):
        torch.testing.assert_close(g, w, **tol, msg=f"capped {name}")


def test_relative_bias_numpy_backward_returns_the_table_gradient() -> None:
    """qkv.attention_backward with a relative_bias score mod: dq, dk, dv, then dtable, equal to
    the torch path's."""
    Tq, Tk, n = 30, 30, 8
    q, k, v, dout = inputs(Tq, Tk, seed=8)
    table = torch.randn(Hq, n, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    mod = S.relative_bias(table.numpy(), t5_buckets(Tq, Tk, n))
    out, lse = qkv.attention(q.numpy(), k.numpy(), v.numpy(), score_mod=mod, return_lse=True)
    grads = qkv.attention_backward(dout.numpy(), q.numpy(), k.numpy(), v.numpy(), out, lse,
                                   score_mod=mod)
    assert len(grads) == 4 and grads[3].shape == (Hq, n)
    t = table.clone().requires_grad_()
    qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
    qkv.torch.attention(qq, kk, vv, score_mod=S.relative_bias(t, t5_buckets(Tq, Tk, n))).backward(dout)
    for g, w in zip(grads, (qq.grad, kk.grad, vv.grad, t.grad)):
        np.testing.assert_array_equal(g, w.numpy())


def test_score_mods_equal_the_builtin_options() -> None:
    """softcap then alibi is the built-in softcap and alibi_slopes options' rule."""
    Tq, Tk = 45, 100
    q, k, v, _ = inputs(Tq, Tk, seed=4)
    mods = qkv.attention(q, k, v, mask_mod=qkv.masks.causal(align="lower_right"),
                         score_mod=S.softcap(2.0).then(S.alibi(SLOPES)))
    builtin = qkv.attention(q, k, v, causal="bottom_right", softcap=2.0, alibi_slopes=SLOPES)
    check_f64("out", mods, builtin)
    alibi_only = qkv.attention(q, k, v, score_mod=S.alibi(SLOPES))
    assert torch.equal(alibi_only, qkv.attention(q, k, v, alibi_slopes=SLOPES))


def test_dropout_through_mods_is_the_builtin_dropout() -> None:
    """The same Philox decisions as the built-in options for the same seed and offset."""
    Tq, Tk = 70, 70
    x = inputs(Tq, Tk, seed=5)
    opts = dict(dropout_p=0.3, seed=99, offset=4)
    got = run(lambda q, k, v: qkv.torch.attention(q, k, v, mask_mod=M.causal(), **opts), x,
              torch.float64)
    want = run(lambda q, k, v: qkv.torch.attention(q, k, v, causal="top_left", **opts), x,
               torch.float64)
    for n, g, w in zip(NAMES, got, want):
        check_f64(n, g, w)


def test_sdpa_signature_with_mods() -> None:
    """qkv.scaled_dot_product_attention keeps PyTorch's [B, H, T, D] signature; mask_mod and
    score_mod are keywords after it; is_causal with a score_mod alone is the causal mask."""
    Tq, Tk = 45, 100
    q, k, v, _ = inputs(Tq, Tk, seed=6)
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    keep = document_dense(Tq, Tk)
    out = qkv.scaled_dot_product_attention(
        qh, kh, vh, enable_gqa=True, mask_mod=M.document(ids_for(Tk))
    )
    check_f64("document", out.transpose(1, 2), sdpa(q, k, v, keep))
    out = qkv.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True,
                                           score_mod=S.softcap(2.0))
    want = formula(q, k, v, causal_dense(Tq, Tk), cap(2.0))
    check_f64("causal softcap", out.transpose(1, 2), want)
    leaves = [t.clone().requires_grad_() for t in (qh, kh, vh)]
    out = qkv.scaled_dot_product_attention(*leaves, enable_gqa=True, mask_mod=M.strided(5))
    out.sum().backward()
    assert all(t.grad is not None for t in leaves)


def test_repr_and_composition() -> None:
    m = M.causal() & M.document([0, 0, 1]) | M.global_tokens([0])
    want = "((causal(align='upper_left') & document(ids of shape [3])) | global_tokens([0]))"
    assert repr(m) == want
    assert repr(S.softcap(30).then(S.alibi([1.0]))) == "softcap(30.0).then(alibi([1.0]))"
    with pytest.raises(TypeError):
        M.causal() & 1


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: qkv.attention(*x, mask_mod=M.causal(), causal="top_left"),
         "causal: expected None with mask_mod or score_mod"),
        (lambda x: qkv.attention(*x, score_mod=S.softcap(2.0), softcap=2.0),
         "softcap: expected 0 with mask_mod or score_mod"),
        (lambda x: qkv.attention(*x, mask_mod=M.causal(), mask=np.ones((8, 8), dtype=bool)),
         "mask: expected None with mask_mod or score_mod (give it as a mod: qkv.masks, "
         "qkv.scores), got an array of shape [8, 8]"),
        (lambda x: qkv.attention(*x, mask_mod="causal"),
         "mask_mod: expected a qkv.masks mask"),
        (lambda x: qkv.attention(*x, score_mod=M.causal()),
         "score_mod: expected a qkv.scores score mod"),
        (lambda x: qkv.attention(*x, score_mod=S.alibi([1.0])),
         "score_mod: alibi slopes: expected 4 slopes (one per query head, from q), got 1"),
        (lambda x: qkv.attention_weights(x[0], x[1], mask_mod=M.causal()),
         "mask_mod: expected None for attention_weights"),
        (lambda x: qkv.scaled_dot_product_attention(*x, is_causal=True, mask_mod=M.causal()),
         "is_causal: expected False with mask_mod"),
        (lambda x: qkv.scaled_dot_product_attention(
            *x, attn_mask=np.ones((8, 8), dtype=bool), score_mod=S.softcap(1.0)),
         "attn_mask: expected None with mask_mod or score_mod"),
        (lambda x: M.causal(align="top_left"),
         "align: expected 'upper_left' or 'lower_right', got 'top_left'"),
        (lambda x: M.document([[0, 1, 0]]), "ids: expected each document's tokens contiguous"),
        (lambda x: M.document([0.5, 1.0]), "ids: expected integers [T] or [B, T], got float64"),
        (lambda x: M.strided(0), "stride: expected a value > 0, got 0"),
        (lambda x: M.bigbird(16, 3, -1, 2, seed=0), "global_blocks"),
        (lambda x: M.key_lengths([2.5]), "lengths: expected a sequence of integers"),
        (lambda x: S.softcap(-1.0), "softcap: expected a finite cap > 0, got -1"),
        (lambda x: S.alibi(["a"]), "slopes: expected a sequence of numbers"),
    ],
)
def test_errors_name_the_argument(call, message) -> None:
    x = [np.zeros((1, 8, 4, 8)) for _ in range(3)]
    with pytest.raises(ValueError) as e:
        call(x)
    assert message in str(e.value)
