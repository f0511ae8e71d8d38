"""qkv: scaled dot-product attention from qkv's C++ kernels, on numpy arrays and torch tensors.

Layouts follow FlashAttention: q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv],
out [B, Tq, Hq, Dv], lse [B, Hq, Tq]; any strides (a [B, H, T, D] array is passed as its
transposed view), float32 or float64, or bfloat16 / float16 (numpy's bfloat16 is
ml_dtypes.bfloat16), accumulated in float32: the forward reads 16-bit K and V as they lie and
computes bfloat16 in bf16 products where the CPU has them (qkv.matrix_paths()) from 1024 keys;
the backward converts 16-bit inputs first. float32 and float64 inputs are read where they are,
never copied; outputs come back as the kind of array q is (numpy in, numpy out; torch in, torch
out), out in q's dtype, lse in float32 (float64 for float64). Bad input raises
ValueError with the C++ library's message ("k: expected head dim 64 (from q), got 80").

The options compose; for query i and key j of batch b and head h (tq, tk the lengths of batch b):
  s = scale * q_i . k_j (scale defaults to 1/sqrt(D)); softcap c > 0: s = c * tanh(s / c);
  s += bias[b, h, i, j]; with alibi_slopes, s -= slope_h * |i + tk - tq - j|;
  key j is dropped when j >= tk, i >= tq, mask[b, h, i, j] is False, causal excludes it
  ("top_left": j > i; "bottom_right": j > i + tk - tq) or window = (left, right) does
  (j < i + tk - tq - left or j > i + tk - tq + right; -1 is unbounded);
  P = softmax over the kept keys; dropout keeps each P entry with probability 1 - dropout_p (a
  Philox decision keyed by seed, offset, b, h, i, j, the same as C++'s
  qkv::dropout_keep(seed, offset, b * Hq + h, i, j, dropout_p)) and scales it by
  1 / (1 - dropout_p);
  out_i = sum_j P_ij v_j, the k/v head of query head h being h // (Hq // Hk).
A row with every key dropped gives out 0, lse -inf and zero gradients.

mask_mod (qkv.masks) and score_mod (qkv.scores) give the mask and the score change as values
instead, composed with & / | and then(): they run through qkv's flex_attention, in place of the
mask and score options above (causal, window, key_lengths, query_lengths, mask, bias,
alibi_slopes, softcap; give those as mods), with scale, dropout and backend as above.

`import qkv.torch` (or `qkv.torch`) gives `qkv.torch.attention`, a torch.autograd.Function.
"""

from __future__ import annotations

import importlib
import operator
import random
import sys
from typing import Any, Optional, Sequence, Tuple

from qkv import _qkv
from qkv._qkv import (
    __version__,
    cpu_features,
    get_num_threads,
    matrix_paths,
    release_cached_memory,
    set_num_threads,
)

__all__ = [
    "__version__",
    "attention",
    "attention_backward",
    "attention_weights",
    "cpu_features",
    "get_num_threads",
    "inspect",
    "LinearState",
    "favor_features",
    "linear_attention",
    "linear_attention_backward",
    "masks",
    "matrix_paths",
    "release_cached_memory",
    "scaled_dot_product_attention",
    "scores",
    "set_num_threads",
]

Array = Any  # a numpy.ndarray or a torch.Tensor on the CPU


def _is_torch(x: Array) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_numpy_bf16(x: Array) -> bool:
    # A numpy array of ml_dtypes.bfloat16 (numpy has none of its own).
    return type(x).__module__ == "numpy" and getattr(x.dtype, "name", "") == "bfloat16"


def _array(x: Array) -> Array:
    # DLPack refuses a tensor that requires grad; detach() is a view, not a copy. numpy's buffer
    # protocol and DLPack export carry no bfloat16: its bits go over as uint16, seen as bfloat16.
    if _is_torch(x):
        return x.detach()
    if _is_numpy_bf16(x):
        return _qkv.bf16_view(x.view("uint16"))
    return x


def _bf16_out(like: Array, result: Any) -> Any:
    # The extension hands bfloat16 to numpy as uint16 bits: where the call's q was a numpy
    # bfloat16 array, those outputs are viewed as its dtype (each array, or each in a tuple).
    if not _is_numpy_bf16(like):
        return result
    if isinstance(result, (tuple, list)):
        return type(result)(_bf16_out(like, r) for r in result)
    return result.view(like.dtype) if str(result.dtype) == "uint16" else result


def _ints(name: str, values: Optional[Sequence[int]]) -> list:
    # Python, numpy or torch integers; a float is refused, not truncated (2.7 keys are not 2).
    if values is None:
        return []
    try:
        ints = [operator.index(n) for n in values]
    except TypeError:
        raise ValueError(f"{name}: expected a sequence of integers, got {values!r}") from None
    if not all(-(2**63) <= n < 2**63 for n in ints):
        raise ValueError(f"{name}: expected 64-bit integers, got {values!r}")
    return ints


def _number(name: str, x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {x!r}") from None


def _uint64(name: str, x: Any) -> int:
    # A Python, numpy or torch integer in [0, 2**64); a float is refused, not truncated.
    try:
        n = operator.index(x)
    except TypeError:
        n = None
    if n is None or not 0 <= n < 2**64:
        raise ValueError(f"{name}: expected an integer in [0, 2**64), got {x!r}")
    return n


def _floats(name: str, values: Optional[Sequence[float]]) -> list:
    if values is None:
        return []
    try:
        return [float(x) for x in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a sequence of numbers, got {values!r}") from None


def _options(
    *,
    causal: Optional[str] = None,
    window: Optional[Tuple[int, int]] = None,
    key_lengths: Optional[Sequence[int]] = None,
    query_lengths: Optional[Sequence[int]] = None,
    mask: Optional[Array] = None,
    bias: Optional[Array] = None,
    alibi_slopes: Optional[Sequence[float]] = None,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    backend: str = "auto",
) -> _qkv.Options:
    options = _qkv.Options()
    if causal is not None and not isinstance(causal, str):
        raise ValueError(f"causal: expected None, 'top_left' or 'bottom_right', got {causal!r}")
    options.causal = causal
    if window is not None:
        try:
            left, right = _ints("window", window)
        except ValueError:
            raise ValueError(f"window: expected (left, right), got {window!r}") from None
        options.window = (left, right)
    options.key_lengths = _ints("key_lengths", key_lengths)
    options.query_lengths = _ints("query_lengths", query_lengths)
    options.mask = None if mask is None else _array(mask)
    options.bias = None if bias is None else _array(bias)
    options.alibi_slopes = _floats("alibi_slopes", alibi_slopes)
    options.softcap = _number("softcap", softcap)
    options.scale = None if scale is None else _number("scale", scale)
    options.dropout_p = _number("dropout_p", dropout_p)
    options.seed = _uint64("seed", seed)
    options.offset = _uint64("offset", offset)
    options.backend = backend
    return options


# The options that mask_mod and score_mod replace.
_REPLACED_BY_MODS = ("causal", "window", "key_lengths", "query_lengths", "mask", "bias",
                     "alibi_slopes", "softcap")


def _flex(
    mask_mod: Any,
    score_mod: Any,
    q: Array,
    k: Array,
    *,
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    backend: str = "auto",
    **replaced: Any,
) -> tuple:
    """The arguments of the flex path: (block mask for q and k's sizes or None, C++ score mod
    or None, _qkv.FlexOptions), refusing the options the mods replace."""
    for name, value in replaced.items():
        if name not in _REPLACED_BY_MODS:
            raise TypeError(f"unexpected keyword argument {name!r}")
        unset = _number(name, value) == 0.0 if name == "softcap" else value is None
        if not unset:
            shape = getattr(value, "shape", None)
            got = repr(value) if shape is None else f"an array of shape {list(shape)}"
            raise ValueError(
                f"{name}: expected {'0' if name == 'softcap' else 'None'} with mask_mod or "
                f"score_mod (give it as a mod: qkv.masks, qkv.scores), got {got}"
            )
    if mask_mod is not None and not isinstance(mask_mod, masks.MaskMod):
        raise ValueError(
            f"mask_mod: expected a qkv.masks mask (qkv.masks.causal(), ...), got "
            f"{type(mask_mod).__name__}"
        )
    if score_mod is not None and not isinstance(score_mod, scores.ScoreMod):
        raise ValueError(
            f"score_mod: expected a qkv.scores score mod (qkv.scores.softcap(30.0), ...), got "
            f"{type(score_mod).__name__}"
        )
    options = _qkv.FlexOptions()
    options.scale = None if scale is None else _number("scale", scale)
    options.dropout_p = _number("dropout_p", dropout_p)
    options.seed = _uint64("seed", seed)
    options.offset = _uint64("offset", offset)
    options.backend = backend
    blocks = None if mask_mod is None else _qkv.block_mask(mask_mod._mod, _array(q), _array(k))
    return blocks, None if score_mod is None else score_mod._mod, options


def attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    causal: Optional[str] = None,
    window: Optional[Tuple[int, int]] = None,
    key_lengths: Optional[Sequence[int]] = None,
    query_lengths: Optional[Sequence[int]] = None,
    mask: Optional[Array] = None,
    bias: Optional[Array] = None,
    alibi_slopes: Optional[Sequence[float]] = None,
    softcap: float = 0.0,
    scale: Optional[float] = None,
    dropout_p: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    backend: str = "auto",
    return_lse: bool = False,
    mask_mod: Optional["masks.MaskMod"] = None,
    score_mod: Optional["scores.ScoreMod"] = None,
):
    """q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv], or
    (out, lse [B, Hq, Tq]) with return_lse. mask (bool, True keeps) and bias (added) broadcast
    to [B, Hq, Tq, Tk]; backend is "auto" (the fused kernel), "cpu" or "reference". mask_mod
    and score_mod (qkv.masks, qkv.scores) run through flex_attention in place of the mask and
    score options."""
    options = dict(
        causal=causal,
        window=window,
        key_lengths=key_lengths,
        query_lengths=query_lengths,
        mask=mask,
        bias=bias,
        alibi_slopes=alibi_slopes,
        softcap=softcap,
        scale=scale,
        dropout_p=dropout_p,
        seed=seed,
        offset=offset,
        backend=backend,
    )
    if mask_mod is not None or score_mod is not None:
        flex = _flex(mask_mod, score_mod, q, k, **options)
        out, lse = _qkv.flex_forward(_array(q), _array(k), _array(v), *flex, _is_torch(q))
    else:
        out, lse = _qkv.forward(_array(q), _array(k), _array(v), _options(**options), _is_torch(q))
    out = _bf16_out(q, out)
    return (out, lse) if return_lse else out


def attention_backward(
    dout: Array, q: Array, k: Array, v: Array, out: Array, lse: Array, **options: Any
) -> tuple:
    """dout [B, Tq, Hq, Dv], q, k, v, out and lse as attention(..., return_lse=True) took and
    gave them, with the same keyword options (seed and offset included) -> (dq, dk, dv), and
    dbias in the bias's own shape as a fourth element when a bias is given; with a score_mod, the
    gradient of each relative_bias table it holds follows dq, dk, dv instead."""
    arrays = [_array(x) for x in (dout, q, k, v, out, lse)]
    mask_mod, score_mod = options.pop("mask_mod", None), options.pop("score_mod", None)
    if mask_mod is not None or score_mod is not None:
        flex = _flex(mask_mod, score_mod, q, k, **options)
        captured = [] if score_mod is None else [c for c, _ in score_mod._captured]
        return _bf16_out(q, _qkv.flex_backward(*arrays, *flex, captured, _is_torch(q)))
    return _bf16_out(q, _qkv.backward(*arrays, _options(**options), _is_torch(q)))


def attention_weights(q: Array, k: Array, **options: Any) -> Array:
    """q [B, Tq, Hq, D], k [B, Tk, Hk, D] -> P [B, Hq, Tq, Tk], the attention probabilities
    (before dropout) under the same keyword options as attention(), but for mask_mod and
    score_mod (flex_attention gives no weights)."""
    for name in ("mask_mod", "score_mod"):
        if options.get(name) is not None:
            raise ValueError(
                f"{name}: expected None for attention_weights (flex_attention gives no weights), "
                f"got {options[name]!r}"
            )
        options.pop(name, None)
    return _bf16_out(q, _qkv.weights(_array(q), _array(k), _options(**options), _is_torch(q)))


def _feature_options(
    feature_map: str = "elu",
    num_features: Optional[int] = None,
    seed: int = 0,
    scale: Optional[float] = None,
    eps: float = 1e-6,
) -> tuple:
    if num_features is None:
        features = 0
    else:
        try:
            features = operator.index(num_features)
        except TypeError:
            features = None
        if features is None or features < 1:
            raise ValueError(f"num_features: expected None or an integer >= 1, got {num_features!r}")
    return (
        feature_map,
        features,
        _uint64("seed", seed),
        None if scale is None else _number("scale", scale),
        _number("eps", eps),
    )


def _linear_options(
    feature_map: str = "elu",
    num_features: Optional[int] = None,
    causal: Optional[str] = None,
    key_lengths: Optional[Sequence[int]] = None,
    seed: int = 0,
    scale: Optional[float] = None,
    eps: float = 1e-6,
    backend: str = "auto",
) -> tuple:
    # The positional tail of _qkv.linear_forward and linear_backward.
    feature_map, features, seed, scale, eps = _feature_options(
        feature_map, num_features, seed, scale, eps
    )
    return (feature_map, features, seed, scale, causal, _ints("key_lengths", key_lengths), eps, backend)


def favor_features(D: int, num_features: int, seed: int = 0) -> Any:
    """FAVOR+'s random features [num_features, D] (float64 numpy) for head size D, as
    linear_attention(feature_map="favor", seed=seed) draws them (before sqrt(scale)): blocks of D
    orthogonal rows, each scaled to the length of a Gaussian vector."""
    return _qkv.favor_features(D, num_features, _uint64("seed", seed))


class LinearState:
    """Causal linear attention one token at a time (qkv::LinearState): per sequence and k/v head
    the state S = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j) over the keys so far, in float64,
    O(F Dv) per step whatever the length. step(q [B, 1, Hq, D], k [B, 1, Hk, D],
    v [B, 1, Hk, Dv]) adds the key, then attends q to every key so far -> out [B, 1, Hq, Dv] (the
    row linear_attention with causal="top_left" gives); append(k [B, T, Hk, D], v) adds T keys
    without attending. Feature options as linear_attention's."""

    def __init__(
        self,
        B: int,
        Hk: int,
        D: int,
        Dv: int,
        *,
        feature_map: str = "elu",
        num_features: Optional[int] = None,
        seed: int = 0,
        scale: Optional[float] = None,
        eps: float = 1e-6,
    ) -> None:
        options = _feature_options(feature_map, num_features, seed, scale, eps)
        self._state = _qkv.LinearState(B, Hk, D, Dv, *options)

    def step(self, q: Array, k: Array, v: Array) -> Array:
        return self._state.step(_array(q), _array(k), _array(v), _is_torch(q))

    def append(self, k: Array, v: Array) -> None:
        self._state.append(_array(k), _array(v))

    @property
    def length(self) -> int:
        """Keys taken so far."""
        return self._state.length


def linear_attention(
    q: Array,
    k: Array,
    v: Array,
    *,
    feature_map: str = "elu",
    num_features: Optional[int] = None,
    causal: Optional[str] = None,
    key_lengths: Optional[Sequence[int]] = None,
    seed: int = 0,
    scale: Optional[float] = None,
    eps: float = 1e-6,
    backend: str = "auto",
    return_state: bool = False,
) -> Any:
    """Linear attention: q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] ->
    out [B, Tq, Hq, Dv] with out_i = sum_j w_ij v_j / (sum_j w_ij + eps), w_ij = phi(q_i) . phi(k_j),
    over the keys j < key_lengths[b] that the causal rule keeps (as attention's). Feature maps:
    "elu", phi = elu + 1 (Katharopoulos et al. 2020); "favor", Performer's FAVOR+ (Choromanski
    et al. 2021): num_features positive orthogonal random features (None: int(D ln D)) drawn from
    seed, whose products estimate softmax attention's exp(scale q . k) (scale None: 1/sqrt(D)),
    with Performer's stabilizers. float32 or float64 (bfloat16 and float16: widened to float32
    and the results rounded back); backend "auto" or "cpu" (the chunked kernel,
    O(T F Dv)) or "reference" (the formula evaluated directly in f64). On torch tensors that
    require grad, it records qkv's backward in torch's autograd. return_state: also a LinearState
    holding every key (no key_lengths), to go on decoding -> (out, state)."""
    options = _linear_options(
        feature_map, num_features, causal, key_lengths, seed, scale, eps, backend
    )
    if return_state and key_lengths is not None:
        raise ValueError(
            "return_state: expected no key_lengths (one state holds the same keys for every "
            f"batch), got {key_lengths!r}"
        )
    if _needs_grad(q, k, v):
        import qkv.torch

        out = qkv.torch.LinearFunction.apply(q, k, v, options)
    else:
        out = _qkv.linear_forward(_array(q), _array(k), _array(v), *options, _is_torch(q))
    if not return_state:
        return out
    kd, vd = (x.detach() if _is_torch(x) else x for x in (k, v))
    B, _, Hk, D = kd.shape
    state = LinearState(
        B, Hk, D, vd.shape[3], feature_map=feature_map, num_features=num_features, seed=seed,
        scale=scale, eps=eps,
    )
    state.append(kd, vd)
    return out, state


def linear_attention_backward(dout: Array, q: Array, k: Array, v: Array, **options: Any) -> tuple:
    """dout [B, Tq, Hq, Dv] and linear_attention's q, k, v and keyword options -> (dq, dk, dv);
    the forward is recomputed (it saves nothing)."""
    arrays = [_array(x) for x in (dout, q, k, v)]
    return _qkv.linear_backward(*arrays, *_linear_options(**options), _is_torch(q))


def _alignment_rows(rows: Any) -> list:
    """One batch's alignment: per row an int (the key; -1 or None: unknown) or a sequence of
    ints -> a list of lists."""
    out = []
    for row in rows:
        if row is None:
            out.append([])
            continue
        try:
            j = operator.index(row)
            out.append([] if j == -1 else [j])
            continue
        except TypeError:
            pass
        try:
            out.append([operator.index(j) for j in row])
        except TypeError:
            raise ValueError(
                f"alignments: expected per row an integer key or a list of them, got {row!r}"
            ) from None
    return out


def inspect(
    weights: Array,
    alignments: Optional[Sequence[Any]] = None,
    *,
    causal: bool = False,
    key_lengths: Optional[Sequence[int]] = None,
    query_lengths: Optional[Sequence[int]] = None,
    uniform: float = 0.9,
    sharp: float = 0.5,
    right: float = 0.5,
) -> list:
    """Attention as a debugging tool: weights [B, H, Tq, Tk] or [H, Tq, Tk] (numpy or torch,
    each row a distribution over the keys it may attend) -> one dict per head: the mean entropy
    of its rows (nats) against the uniform distribution's over the keys each row may attend
    (causal: keys 0..i; key_lengths per batch), their ratio, the mean peak weight, the mean
    attended distance sum_j p_ij |i - j|, with alignments the fraction of rows whose argmax is an
    aligned key, and a verdict: "uniform" (normalized entropy >= uniform: not learned),
    "diffuse", "sharp" (<= sharp), "sharp and right" / "sharp and wrong" (argmax on the
    alignment in at least / less than `right` of the rows), or "empty"; "line" says it in words.
    alignments: per batch (for [H, Tq, Tk] weights: the one batch's rows), per row an int key
    (-1 or None: unknown) or a list of keys. Rows past query_lengths[b] are left out."""
    w = _array(weights.detach() if _is_torch(weights) else weights)
    batches: list = []
    if alignments is not None:
        if len(w.shape) == 3:
            batches = [_alignment_rows(alignments)]
        else:
            batches = [_alignment_rows(rows) for rows in alignments]
    return _qkv.diagnose(
        w,
        batches,
        bool(causal),
        _ints("key_lengths", key_lengths),
        _ints("query_lengths", query_lengths),
        _number("uniform", uniform),
        _number("sharp", sharp),
        _number("right", right),
    )


def _needs_grad(*arrays: Optional[Array]) -> bool:
    # Whether torch's autograd is recording and one of the arrays asks for a gradient.
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and torch.is_grad_enabled()
        and any(isinstance(x, torch.Tensor) and x.requires_grad for x in arrays)
    )


def _swap_heads_and_time(x: Array) -> Array:
    # [B, H, T, D] <-> [B, T, H, D], as a view.
    return x.transpose(1, 2) if _is_torch(x) else x.swapaxes(1, 2)


def scaled_dot_product_attention(
    query: Array,
    key: Array,
    value: Array,
    attn_mask: Optional[Array] = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Optional[float] = None,
    enable_gqa: bool = False,
    *,
    mask_mod: Optional["masks.MaskMod"] = None,
    score_mod: Optional["scores.ScoreMod"] = None,
) -> Array:
    """torch.nn.functional.scaled_dot_product_attention's layout and semantics: query
    [B, Hq, Tq, D], key [B, Hk, Tk, D], value [B, Hk, Tk, Dv] -> [B, Hq, Tq, Dv]. A boolean
    attn_mask keeps where True, a float one is added; is_causal is top-left aligned; Hq != Hk
    needs enable_gqa. Dropout draws its seed from Python's `random` (random.seed() repeats it).
    On torch tensors that require grad (with grad mode on) it runs through qkv.torch.attention,
    so gradients reach query, key, value and a float attn_mask. Unlike PyTorch, a row whose keys
    are all masked gives 0, not NaN. mask_mod and score_mod (qkv.masks, qkv.scores; not in
    PyTorch's signature) run through flex_attention: a mask_mod takes no attn_mask and no
    is_causal (compose qkv.masks.causal() & mask_mod), a score_mod alone takes is_causal as
    qkv.masks.causal() and no attn_mask."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if len(x.shape) != 4:
            raise ValueError(
                f"{name}: expected 4 dimensions [B, H, T, D], got {len(x.shape)} dimensions "
                f"{list(x.shape)}"
            )
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError(
            f"key: expected {query.shape[1]} heads (from query; enable_gqa=True allows fewer), "
            f"got {key.shape[1]}"
        )
    if is_causal and attn_mask is not None:
        raise ValueError("attn_mask: expected None with is_causal=True (as PyTorch), got a mask")
    if mask_mod is not None and is_causal:
        raise ValueError(
            "is_causal: expected False with mask_mod (compose qkv.masks.causal() & mask_mod), "
            "got True"
        )
    if (mask_mod is not None or score_mod is not None) and attn_mask is not None:
        raise ValueError(
            "attn_mask: expected None with mask_mod or score_mod (give it as a mod: qkv.masks), "
            f"got a mask of shape {list(attn_mask.shape)}"
        )
    mask = bias = None
    if attn_mask is not None:
        dtype = str(attn_mask.dtype).replace("torch.", "")
        if dtype not in ("bool", "float32", "float64", "bfloat16", "float16"):
            raise ValueError(
                f"attn_mask: expected bool, float32, float64, bfloat16 or float16, got {dtype}"
            )
        is_bool = dtype == "bool"
        mask, bias = (attn_mask, None) if is_bool else (None, attn_mask)
    seed = random.getrandbits(64) if dropout_p > 0 else 0
    options = dict(scale=scale, dropout_p=dropout_p, seed=seed)
    if mask_mod is not None or score_mod is not None:
        if is_causal:
            mask_mod = masks.causal()
        options.update(mask_mod=mask_mod, score_mod=score_mod)
    else:
        options.update(causal="top_left" if is_causal else None, mask=mask, bias=bias)
    q, k, v = (_swap_heads_and_time(x) for x in (query, key, value))
    if _needs_grad(query, key, value, bias):
        out = importlib.import_module("qkv.torch").attention(q, k, v, **options)
    else:
        out = attention(q, k, v, **options)
    return _swap_heads_and_time(out)


# After the helpers above, which they use.
from qkv import masks, scores  # noqa: E402


def __getattr__(name: str) -> Any:
    # qkv.torch imports torch, so it is loaded on first use: `import qkv` works without torch.
    if name == "torch":
        return importlib.import_module("qkv.torch")
    raise AttributeError(f"module 'qkv' has no attribute {name!r}")
