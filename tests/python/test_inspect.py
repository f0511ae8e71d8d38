"""qkv.inspect: the per-head diagnostics on planted heads (numpy and torch, 3 and 4 dimensions),
against the closed forms numpy computes here: entropy, its uniform bound, peak weight, distance,
argmax on the alignment, and the verdicts; the keys a row may attend; bad input."""

import math

import numpy as np
import pytest

import qkv

T = 8


def planted() -> np.ndarray:
    """[H = 3, T, T]: head 0 on the diagonal (0.9), head 1 uniform, head 2 on the next key."""
    w = np.full((3, T, T), 0.1 / (T - 1))
    w[1] = 1.0 / T
    for i in range(T):
        w[0, i, i] = 0.9
        w[2, i, (i + 1) % T] = 0.9
    return w


def closed_form(w: np.ndarray) -> dict:
    rows = np.arange(w.shape[-2])[:, None]
    keys = np.arange(w.shape[-1])[None, :]
    entropy = -(w * np.log(w)).sum(-1)
    return {
        "entropy": entropy.mean(),
        "normalized_entropy": (entropy / math.log(w.shape[-1])).mean(),
        "max_weight": w.max(-1).mean(),
        "mean_distance": (w * np.abs(rows - keys)).sum(-1).mean(),
    }


def test_planted_heads_match_their_closed_forms_and_verdicts():
    w = planted()
    diagonal = [[i] for i in range(T)]
    heads = qkv.inspect(w, diagonal)
    assert [h["verdict"] for h in heads] == ["sharp and right", "uniform", "sharp and wrong"]
    for h, head in zip(heads, w):
        for key, value in closed_form(head).items():
            assert h[key] == pytest.approx(value, rel=1e-12), key
        assert h["uniform_entropy"] == pytest.approx(math.log(T))
        assert h["rows"] == T
    assert heads[0]["alignment_accuracy"] == 1.0 and heads[2]["alignment_accuracy"] == 0.0
    assert "sharp and right" in heads[0]["line"]
    # Without an alignment: sharp, no accuracy; -1 and None rows are unknown.
    assert qkv.inspect(w)[0]["verdict"] == "sharp"
    assert qkv.inspect(w)[0]["alignment_accuracy"] is None
    partial = qkv.inspect(w, [0, -1, None] + [[i, 0] for i in range(3, T)])
    assert partial[0]["aligned_rows"] == T - 2


def test_torch_batches_and_the_keys_a_row_may_attend():
    torch = pytest.importorskip("torch")
    w = np.stack([planted(), planted()])  # [B = 2, H, T, T]
    causal = np.tril(np.ones((T, T)))
    w[1, 1] = causal / causal.sum(-1, keepdims=True)  # uniform over keys 0..i in batch 1
    w[1, 1][causal == 0] = np.nan  # never read under the causal rule
    t = torch.tensor(w, dtype=torch.float32, requires_grad=True)
    heads = qkv.inspect(t, [[[i] for i in range(T)], [[i] for i in range(T)]], causal=True,
                        query_lengths=[T, T])
    assert len(heads) == 3 and heads[1]["rows"] == 2 * T
    # Batch 1's head 1 is uniform over each row's keys: entropy equals its bound there.
    alone = qkv.inspect(w[1:, 1:2], causal=True)
    assert alone[0]["entropy"] == pytest.approx(alone[0]["uniform_entropy"], rel=1e-12)
    assert alone[0]["normalized_entropy"] == pytest.approx((T - 1) / T, rel=1e-12)
    assert qkv.inspect(w[1:, 1:2], causal=True, query_lengths=[0])[0]["verdict"] == "empty"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda w: qkv.inspect(w[0]), "weights: expected 3 dimensions"),
        (lambda w: qkv.inspect(-w), "weights: expected finite, non-negative"),
        (lambda w: qkv.inspect(w, [[T]] * T), "alignments[0]"),
        (lambda w: qkv.inspect(w, [0.5] * T), "alignments: expected per row an integer"),
        (lambda w: qkv.inspect(w, key_lengths=[T + 1]), "options.key_lengths"),
        (lambda w: qkv.inspect(w, sharp=0.95), "options.sharp, options.uniform"),
        (lambda w: qkv.inspect(w.astype(np.int64)), "weights: expected float32"),
    ],
)
def test_bad_input_names_its_argument(call, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        call(planted())
