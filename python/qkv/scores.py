"""Score mods as values: how each score s = scale * q_i . k_j changes before the softmax, for
qkv.attention(..., score_mod=...) and qkv.torch.attention. Each is a C++ qkv::ScoreMod (the rules
of qkv.attention's alibi_slopes and softcap options, run inside the fused kernel, differentiated
on dual numbers; no Python is called per element), applied in sequence with then():

    score = qkv.scores.softcap(30.0).then(qkv.scores.alibi(slopes))  # cap, then ALiBi

For query i and key j of head h (Tq, Tk the lengths of q and k):
  alibi(slopes)   s - slopes[h] * |i + Tk - Tq - j|
  softcap(c)      c * tanh(s / c)
"""

from __future__ import annotations

from typing import Any, Sequence

from qkv import _floats, _number, _qkv

__all__ = ["ScoreMod", "alibi", "softcap"]


class ScoreMod:
    """A score mod: a C++ qkv::ScoreMod and how it was made (its repr)."""

    __slots__ = ("_mod", "_text")

    def __init__(self, mod: Any, text: str) -> None:
        self._mod = mod
        self._text = text

    def then(self, next: "ScoreMod") -> "ScoreMod":
        """s -> next(self(s))."""
        if not isinstance(next, ScoreMod):
            raise ValueError(f"next: expected a qkv.scores score mod, got {type(next).__name__}")
        return ScoreMod(self._mod.then(next._mod), f"{self}.then({next})")

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
