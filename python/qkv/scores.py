"""Score mods as values: how each score s = scale * q_i . k_j changes before the softmax, for
qkv.attention(..., score_mod=...) and qkv.torch.attention. Each is a C++ qkv::ScoreMod (the rules
of qkv.attention's alibi_slopes and softcap options, run inside the fused kernel, differentiated
on dual numbers; no Python is called per element), applied in sequence with then():

    score = qkv.scores.softcap(30.0).then(qkv.scores.alibi(slopes))  # cap, then ALiBi

For query i and key j of head h (Tq, Tk the lengths of q and k):
  alibi(slopes)                  s - slopes[h] * |i + Tk - Tq - j|
  softcap(c)                     c * tanh(s / c)
  relative_bias(table, buckets)  s + table[h, buckets[j - i + Tq - 1]]  (table learnable)
"""

from __future__ import annotations

from typing import Any, Sequence

from qkv import _floats, _ints, _number, _qkv

__all__ = ["ScoreMod", "alibi", "relative_bias", "softcap"]


class ScoreMod:
    """A score mod: a C++ qkv::ScoreMod, how it was made (its repr), and the tensors it reads
    that get gradients (relative_bias tables): pairs (C++ captured tensor, the caller's array,
    which the pair keeps alive)."""

    __slots__ = ("_mod", "_text", "_captured")

    def __init__(self, mod: Any, text: str, captured: tuple = ()) -> None:
        self._mod = mod
        self._text = text
        self._captured = captured

    def then(self, next: "ScoreMod") -> "ScoreMod":
        """s -> next(self(s))."""
        if not isinstance(next, ScoreMod):
            raise ValueError(f"next: expected a qkv.scores score mod, got {type(next).__name__}")
        return ScoreMod(
            self._mod.then(next._mod), f"{self}.then({next})", self._captured + next._captured
        )

    def __repr__(self) -> str:
        return self._text


def alibi(slopes: Sequence[float]) -> ScoreMod:
    """ALiBi (Press et al. 2022), qkv.attention's alibi_slopes: s - slopes[h] |i + Tk - Tq - j|,
    one slope per query head."""
    s = _floats("slopes", slopes)
    return ScoreMod(_qkv.score_alibi(s), f"alibi({s})")


def softcap(cap: float) -> ScoreMod:
    """Soft-capping (Gemma 2), qkv.attention's softcap: cap * tanh(s / cap), cap > 0."""
    c = _number("cap", cap)
    return ScoreMod(_qkv.score_softcap(c), f"softcap({c})")


def relative_bias(table: Any, buckets: Sequence[int]) -> ScoreMod:
    """A learned relative-position bias (Shaw et al. 2018; T5's bucketed form):
    s + table[h, buckets[j - i + Tq - 1]]. table [Hq, n] (numpy or torch, float32 or float64;
    read where it lies, so in-place updates are seen); buckets [Tq + Tk - 1]: the bucket in
    [0, n) of every offset j - i from -(Tq - 1) to Tk - 1. Through qkv.torch.attention a torch
    table gets its gradient; qkv.attention_backward returns it after dq, dk, dv."""
    source = table.detach() if hasattr(table, "detach") else table
    mod, captured = _qkv.score_relative_bias(source, _ints("buckets", buckets))
    shape = list(getattr(table, "shape", []))
    return ScoreMod(mod, f"relative_bias(table {shape}, {len(buckets)} buckets)", ((captured, table),))
