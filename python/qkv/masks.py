"""Mask mods as values: which keys each query keeps, for qkv.attention(..., mask_mod=...) and
qkv.torch.attention. Each is a C++ qkv::MaskMod (the rules of qkv/masks.hpp, run inside the fused
kernel with their closed-form tile kinds; no Python is called per element), composed with
& (keep where both keep) and | (where either keeps):

    mask = qkv.masks.causal() & qkv.masks.document(ids) | qkv.masks.global_tokens([0])

For query i and key j of batch b and head h (Tq, Tk the lengths of q and k):
  causal(align)             j <= i + offset, offset 0 ("upper_left") or Tk - Tq ("lower_right")
  sliding_window(l, r, a)   i + offset - l <= j <= i + offset + r (-1: that side unbounded)
  key_lengths(n)            j < n[b] (one length serves every batch)
  prefix_lm(n)              j < n[b] or j <= i
  document(ids)             ids[b, i] == ids[b, j] (ids [T] or [B, T], documents contiguous)
  global_tokens(p)          i in p or j in p
  longformer(w, p)          |i - j| <= w, or i or j in p
  bigbird(...)              BigBird's blocks: window, global and seeded random blocks
  strided(s)                0 <= i - j and (i - j < s or (i - j) % s == 0)   (Sparse Transformer)
  fixed(block, summary)     j <= i and (j // block == i // block or j % block >= block - summary)
  from_block_layout(l, n)   l[i // n, j // n]
  full()                    every key
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from qkv import _ints, _qkv, _uint64

__all__ = [
    "MaskMod",
    "bigbird",
    "causal",
    "document",
    "fixed",
    "from_block_layout",
    "full",
    "global_tokens",
    "key_lengths",
    "longformer",
    "prefix_lm",
    "sliding_window",
    "strided",
]


class MaskMod:
    """A mask mod: a C++ qkv::MaskMod and how it was made (its repr)."""

    __slots__ = ("_mod", "_text")

    def __init__(self, mod: Any, text: str) -> None:
        self._mod = mod
        self._text = text

    def __and__(self, other: "MaskMod") -> "MaskMod":
        if not isinstance(other, MaskMod):
            return NotImplemented
        return MaskMod(self._mod & other._mod, f"({self} & {other})")

    def __or__(self, other: "MaskMod") -> "MaskMod":
        if not isinstance(other, MaskMod):
            return NotImplemented
        return MaskMod(self._mod | other._mod, f"({self} | {other})")

    def __repr__(self) -> str:
        return self._text


def _int(name: str, x: Any) -> int:
    return _ints(name, [x])[0]


def _align(align: Any) -> str:
    if align not in ("upper_left", "lower_right"):
        raise ValueError(f"align: expected 'upper_left' or 'lower_right', got {align!r}")
    return align


def _int_array(name: str, values: Any, dims: Sequence[int], shapes: str) -> np.ndarray:
    # A list, numpy array or torch tensor of integers with one of the allowed numbers of dims.
    a = np.asarray(values)
    if a.dtype.kind not in "iu" or a.ndim not in dims:
        raise ValueError(
            f"{name}: expected integers {shapes}, got {a.dtype} of shape {list(a.shape)}"
        )
    return a


def full() -> MaskMod:
    """Keeps every key."""
    return MaskMod(_qkv.mask_full(), "full()")


def causal(align: str = "upper_left") -> MaskMod:
    """j <= i ("upper_left", as PyTorch's is_causal) or j <= i + Tk - Tq ("lower_right": the
    last query sees every key)."""
    return MaskMod(_qkv.mask_causal(_align(align)), f"causal(align={align!r})")


def sliding_window(left: int, right: int, align: str = "upper_left") -> MaskMod:
    """A band around the diagonal (as causal's align): i + offset - left <= j <= i + offset +
    right; -1 leaves that side unbounded."""
    left, right = _int("left", left), _int("right", right)
    mod = _qkv.mask_sliding_window(left, right, _align(align))
    return MaskMod(mod, f"sliding_window({left}, {right}, align={align!r})")


def key_lengths(lengths: Sequence[int]) -> MaskMod:
    """Key padding: batch b keeps keys j < lengths[b] (one length serves every batch)."""
    n = _ints("lengths", lengths)
    return MaskMod(_qkv.mask_key_lengths(n), f"key_lengths({n})")


def prefix_lm(prefix_lengths: Sequence[int]) -> MaskMod:
    """Prefix-LM: batch b's first prefix_lengths[b] keys seen by every query, the rest causally."""
    n = _ints("prefix_lengths", prefix_lengths)
    return MaskMod(_qkv.mask_prefix_lm(n), f"prefix_lm({n})")


def document(ids: Any) -> MaskMod:
    """Packed sequences: query i keeps the keys of its own document, ids[b, i] == ids[b, j].
    ids [T] (every batch) or [B, T]; each document's tokens contiguous. Queries and keys past T
    keep nothing."""
    a = _int_array("ids", ids, (1, 2), "[T] or [B, T]")
    batches = a.shape[0] if a.ndim == 2 else 1
    mod = _qkv.mask_document(_ints("ids", a.reshape(-1).tolist()), batches)
    return MaskMod(mod, f"document(ids of shape {list(a.shape)})")


def global_tokens(positions: Sequence[int]) -> MaskMod:
    """The listed positions attend to every key and are attended by every query."""
    p = _ints("positions", positions)
    return MaskMod(_qkv.mask_global_tokens(p), f"global_tokens({p})")


def longformer(window: int, global_tokens: Sequence[int]) -> MaskMod:
    """Longformer: the band |i - j| <= window, or global tokens."""
    w, p = _int("window", window), _ints("global_tokens", global_tokens)
    return MaskMod(_qkv.mask_longformer(w, p), f"longformer({w}, {p})")


def bigbird(
    block: int,
    window_blocks: int,
    global_blocks: int,
    random_blocks: int,
    seed: int,
    heads: int = 1,
) -> MaskMod:
    """BigBird (Zaheer et al. 2020) on blocks of `block` tokens: query block ib keeps key blocks
    |ib - jb| <= window_blocks // 2, the first global_blocks key blocks (and the first
    global_blocks query blocks keep every key), and random_blocks more key blocks drawn per
    (head, query block) from Philox keyed by seed (qkv::masks::bigbird's draws); head h uses draw
    h % heads. Laid out for each call's Tq and Tk."""
    args = [_int(n, x) for n, x in zip(
        ("block", "window_blocks", "global_blocks", "random_blocks"),
        (block, window_blocks, global_blocks, random_blocks),
    )]
    s, h = _uint64("seed", seed), _int("heads", heads)
    mod = _qkv.mask_bigbird(*args, s, h)
    return MaskMod(mod, f"bigbird({', '.join(map(str, args))}, seed={s}, heads={h})")


def strided(stride: int) -> MaskMod:
    """Sparse Transformer, strided (Child et al. 2019): causal, the previous `stride` keys and
    every stride-th key before them."""
    s = _int("stride", stride)
    return MaskMod(_qkv.mask_strided(s), f"strided({s})")


def fixed(block: int, summary: int) -> MaskMod:
    """Sparse Transformer, fixed: causal, the keys of the query's own block of `block` tokens and
    the last `summary` keys of every block."""
    b, c = _int("block", block), _int("summary", summary)
    return MaskMod(_qkv.mask_fixed(b, c), f"fixed({b}, {c})")


def from_block_layout(layout: Any, block: int) -> MaskMod:
    """layout [q_blocks, k_blocks] (bool or integers, nonzero keeps): query i keeps key j when
    layout[i // block, j // block]; queries and keys past the layout keep nothing."""
    a = np.asarray(layout)
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    a = _int_array("layout", a, (2,), "[q_blocks, k_blocks]")
    cells = (a != 0).astype(np.uint8).reshape(-1).tolist()
    b = _int("block", block)
    mod = _qkv.mask_from_block_layout(cells, a.shape[0], a.shape[1], b)
    return MaskMod(mod, f"from_block_layout(layout of shape {list(a.shape)}, {b})")
