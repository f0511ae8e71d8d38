"""qkv's kernels inside PyTorch's autograd (CPU tensors, float32, float64, bfloat16 or float16).

    import qkv.torch
    out = qkv.torch.attention(q, k, v, causal="bottom_right", bias=bias)  # [B, Tq, Hq, Dv]
    out.sum().backward()  # q.grad, k.grad, v.grad, bias.grad from qkv's fused backward

The forward saves out and lse, and the backward is qkv's attention_backward with the same
options (dropout regenerates the same mask from the seed). With mask_mod or score_mod (qkv.masks,
qkv.scores) it is flex_attention's forward and backward, the block mask made once per call.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import torch
from torch.autograd.function import once_differentiable

import qkv
from qkv import _qkv

__all__ = ["AttentionFunction", "FlexFunction", "LinearFunction", "attention", "linear_attention"]

# A graph still alive when Python exits (out = qkv.torch.attention(...) at module level) keeps
# FlexFunction's block mask and score mod: torch's function nodes and their contexts form a cycle
# that is never collected then, and nanobind would report those instances as leaked.
_qkv.set_leak_warnings(False)


class AttentionFunction(torch.autograd.Function):
    """q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], bias (or None) broadcastable to
    [B, Hq, Tq, Tk], options (a dict of qkv.attention's keywords other than bias)
    -> out [B, Tq, Hq, Dv]; gradients flow to q, k, v and bias."""

    @staticmethod
    def forward(ctx: Any, q, k, v, bias, options: dict):
        o = qkv._options(bias=bias, **options)
        out, lse = _qkv.forward(q.detach(), k.detach(), v.detach(), o, True)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.options = options
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dout):
        q, k, v, bias, out, lse = ctx.saved_tensors
        o = qkv._options(bias=bias, **ctx.options)
        grads = _qkv.backward(dout, q.detach(), k.detach(), v.detach(), out, lse, o, True)
        dbias = grads[3] if bias is not None else None
        return grads[0], grads[1], grads[2], dbias, None


class FlexFunction(torch.autograd.Function):
    """q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], the block mask, score mod and
    options qkv._flex made, the score mod's captured tensors (C++) and the torch tables they
    read -> out [B, Tq, Hq, Dv]; gradients flow to q, k, v and the tables."""

    @staticmethod
    def forward(ctx: Any, q, k, v, blocks, score, options, captured, *tables):
        inputs = (q.detach(), k.detach(), v.detach())
        out, lse = _qkv.flex_forward(*inputs, blocks, score, options, True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.flex = (blocks, score, options, captured)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dout):
        q, k, v, out, lse = ctx.saved_tensors
        inputs = (q.detach(), k.detach(), v.detach())
        grads = _qkv.flex_backward(dout, *inputs, out, lse, *ctx.flex, True)
        return (grads[0], grads[1], grads[2], None, None, None, None, *grads[3:])


class LinearFunction(torch.autograd.Function):
    """q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], options (the tuple
    qkv._linear_options makes) -> out [B, Tq, Hq, Dv]; gradients flow to q, k and v from qkv's
    linear_attention_backward, which recomputes the forward."""

    @staticmethod
    def forward(ctx: Any, q, k, v, options: tuple):
        out = _qkv.linear_forward(q.detach(), k.detach(), v.detach(), *options, True)
        ctx.save_for_backward(q, k, v)
        ctx.options = options
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dout):
        q, k, v = ctx.saved_tensors
        grads = _qkv.linear_backward(
            dout.contiguous(), q.detach(), k.detach(), v.detach(), *ctx.options, True
        )
        return grads[0], grads[1], grads[2], None


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    feature_map: str = "elu",
    num_features: Optional[int] = None,
    causal: Optional[str] = None,
    key_lengths: Optional[Sequence[int]] = None,
    seed: int = 0,
    scale: Optional[float] = None,
    eps: float = 1e-6,
    backend: str = "auto",
) -> torch.Tensor:
    """qkv.linear_attention on torch tensors, differentiable in q, k and v through
    torch.autograd -> out [B, Tq, Hq, Dv]."""
    options = qkv._linear_options(
        feature_map, num_features, causal, key_lengths, seed, scale, eps, backend
    )
    return LinearFunction.apply(q, k, v, options)


def attention(
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
    seed: int = 0,
    offset: int = 0,
    backend: str = "auto",
    mask_mod: Optional[qkv.masks.MaskMod] = None,
    score_mod: Optional[qkv.scores.ScoreMod] = None,
) -> torch.Tensor:
    """qkv.attention's arguments and semantics on torch tensors, differentiable in q, k, v and
    bias through torch.autograd -> out [B, Tq, Hq, Dv]."""
    options = dict(
        causal=causal,
        window=window,
        key_lengths=key_lengths,
        query_lengths=query_lengths,
        mask=mask,
        alibi_slopes=alibi_slopes,
        softcap=softcap,
        scale=scale,
        dropout_p=dropout_p,
        seed=seed,
        offset=offset,
        backend=backend,
    )
    if mask_mod is not None or score_mod is not None:
        flex = qkv._flex(mask_mod, score_mod, q, k, bias=bias, **options)
        pairs = () if score_mod is None else score_mod._captured
        captured = [c for c, _ in pairs]
        return FlexFunction.apply(q, k, v, *flex, captured, *(t for _, t in pairs))
    return AttentionFunction.apply(q, k, v, bias, options)
