"""The math of qkv.attention written from torch primitives (matmul, masked_fill, logsumexp), the
independent oracle of the Python tests, and the error rule they check qkv with."""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch


def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: Optional[str] = None,
    window: Optional[Tuple[int, int]] = None,
    key_lengths: Optional[Sequence[int]] = None,
    query_lengths: Optional[Sequence[int]] = None,
    mask: Optional[torch.Tensor] = None,
    bias: Optional[torch.Tensor] = None,
    alibi_slopes: Optional[Sequence[float]] = None,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
    keep: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> (out [B, Tq, Hq, Dv],
    lse [B, Hq, Tq]) in q's dtype, differentiable by torch.autograd. keep [B, Hq, Tq, Tk] is the
    dropout mask (True keeps), applied with the 1 / (1 - dropout_p) scaling."""
    B, Tq, Hq, D = q.shape
    Tk, Hk = k.shape[1], k.shape[2]
    group = Hq // Hk
    qh = q.permute(0, 2, 1, 3)  # [B, Hq, Tq, D]
    kh = k.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)  # [B, Hq, Tk, D]
    vh = v.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)  # [B, Hq, Tk, Dv]
    s = (1.0 / math.sqrt(D) if scale is None else scale) * (qh @ kh.transpose(-1, -2))
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias
    i = torch.arange(Tq).view(1, 1, Tq, 1)
    j = torch.arange(Tk).view(1, 1, 1, Tk)
    tq = torch.tensor(query_lengths if query_lengths is not None else [Tq] * B).view(B, 1, 1, 1)
    tk = torch.tensor(key_lengths if key_lengths is not None else [Tk] * B).view(B, 1, 1, 1)
    diagonal = i + tk - tq  # the bottom-right aligned diagonal, per batch
    if alibi_slopes is not None:
        slopes = torch.tensor(alibi_slopes, dtype=q.dtype).view(1, Hq, 1, 1)
        s = s - slopes * (diagonal - j).abs().to(q.dtype)
    kept = (j < tk) & (i < tq)
    if mask is not None:
        kept = kept & mask
    if causal == "top_left":
        kept = kept & (j <= i)
    elif causal == "bottom_right":
        kept = kept & (j <= diagonal)
    if window is not None:
        left, right = window
        if left >= 0:
            kept = kept & (j >= diagonal - left)
        if right >= 0:
            kept = kept & (j <= diagonal + right)
    kept = kept.expand(B, Hq, Tq, Tk)
    s = s.masked_fill(~kept, -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # -inf where a row keeps no key
    finite_lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - finite_lse.unsqueeze(-1)).masked_fill(~kept, 0.0)
    if keep is not None:
        p = p * keep / (1.0 - dropout_p)
    out = (p @ vh).permute(0, 2, 1, 3)  # [B, Tq, Hq, Dv]
    return out, lse


def max_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest |got - ref| over finite entries; -inf in ref must be -inf in got."""
    got, ref = got.double(), ref.double()
    infinite = torch.isinf(ref)
    assert torch.equal(torch.isinf(got), infinite), "-inf (empty rows) in different places"
    if infinite.all():
        return 0.0
    return (got[~infinite] - ref[~infinite]).abs().max().item()


def check_f32(name: str, got32: torch.Tensor, naive32: torch.Tensor, ref64: torch.Tensor) -> None:
    """FlashAttention's rule: qkv's float32 error against the float64 reference is at most twice
    the error of the same formula computed by PyTorch in float32, plus a floor of 4 float32 ulps
    of the largest reference value (2^-21 relative): where PyTorch's float32 result happens to be
    exact (a masked zero, a single kept key) twice its error is 0, and any other order of the same
    float32 sums differs by a few ulps."""
    assert (
        got32.shape == ref64.shape
    ), f"{name}: shape {tuple(got32.shape)}, want {tuple(ref64.shape)}"
    err = max_error(got32, ref64)
    naive = max_error(naive32, ref64)
    finite = ref64[~torch.isinf(ref64)]
    floor = 2.0**-21 * max(1.0, finite.abs().max().item() if finite.numel() else 1.0)
    assert (
        err <= 2 * naive + floor
    ), f"{name}: qkv float32 error {err:.3g} > 2 x PyTorch float32 error {naive:.3g} + {floor:.2g}"


def check_f64(name: str, got64: torch.Tensor, ref64: torch.Tensor) -> None:
    """float64 against float64: equal up to rounding (1e-12 of the largest value)."""
    assert got64.dtype == torch.float64, f"{name}: dtype {got64.dtype}"
    finite = ref64[~torch.isinf(ref64)]
    scale = max(1.0, finite.abs().max().item() if finite.numel() else 1.0)
    err = max_error(got64, ref64)
    assert err <= 1e-12 * scale, f"{name}: qkv float64 error {err:.3g} > {1e-12 * scale:.3g}"
