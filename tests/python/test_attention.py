"""qkv.attention, attention_backward and qkv.torch.attention against the same math written from
torch primitives in float64 (reference.py): every option alone and all of them together,
forward and gradients (through torch.autograd), both backends, float32 and float64."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import pytest
import torch

import qkv
import qkv.torch
from reference import attention_ref, check_f32, check_f64


@dataclass
class Case:
    """One problem: sizes, options, and how the bias (if any) is shaped."""

    name: str
    B: int = 2
    Tq: int = 37
    Tk: int = 37
    Hq: int = 4
    Hk: int = 4
    D: int = 16
    Dv: int = 16
    options: Dict[str, Any] = field(default_factory=dict)
    bias_shape: Optional[Tuple[int, ...]] = None
    mask_shape: Optional[Tuple[int, ...]] = None

    def __str__(self) -> str:
        return self.name


CASES = [
    Case("plain"),
    Case("cross Tq<Tk Dv!=D", Tq=19, Tk=70, Dv=24),
    Case("several tiles", B=1, Tq=130, Tk=150, D=32, Dv=32),
    Case("causal top_left", Tq=23, Tk=41, options={"causal": "top_left"}),
    Case("causal bottom_right", Tq=23, Tk=41, options={"causal": "bottom_right"}),
    Case("causal bottom_right Tq>Tk", Tq=41, Tk=23, options={"causal": "bottom_right"}),
    Case("window (5, 0)", options={"window": (5, 0)}),
    Case("window (3, 7) cross", Tq=20, Tk=50, options={"window": (3, 7)}),
    Case("window (-1, 2)", options={"window": (-1, 2)}),
    Case("GQA 6/2", Hq=6, Hk=2),
    Case("MQA 4/1", Hq=4, Hk=1, options={"causal": "bottom_right"}),
    Case("key and query lengths", options={"key_lengths": [30, 11], "query_lengths": [37, 20]}),
    Case("ALiBi", Tq=20, Tk=33, options={"alibi_slopes": [0.5, 0.25, 0.125, 0.0625]}),
    Case("softcap", options={"softcap": 2.0, "scale": 0.6}),
    Case("scale", options={"scale": 0.3}),
    Case("bias [Hq, Tq, Tk]", bias_shape=(4, 37, 37)),
    Case("bias [B, 1, 1, Tk]", bias_shape=(2, 1, 1, 37)),
    Case("mask [B, 1, Tq, Tk]", mask_shape=(2, 1, 37, 37)),
    Case("mask [Tk] with empty rows", mask_shape=(37,), options={"causal": "top_left"}),
    Case(
        "everything",
        B=2,
        Tq=29,
        Tk=45,
        Hq=6,
        Hk=3,
        D=16,
        Dv=8,
        options={
            "causal": "bottom_right",
            "window": (9, -1),
            "key_lengths": [45, 31],
            "query_lengths": [29, 12],
            "alibi_slopes": [0.3, 0.2, 0.1, 0.05, 0.02, 0.01],
            "softcap": 3.0,
            "scale": 0.4,
        },
        bias_shape=(6, 29, 45),
        mask_shape=(2, 1, 29, 45),
    ),
]


def make_inputs(case: Case, seed: int = 0) -> Dict[str, Any]:
    """float64 inputs: q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], dout
    [B, Tq, Hq, Dv], and the case's bias and mask."""
    g = torch.Generator().manual_seed(seed)
    x = {
        "q": torch.randn(case.B, case.Tq, case.Hq, case.D, generator=g, dtype=torch.float64),
        "k": torch.randn(case.B, case.Tk, case.Hk, case.D, generator=g, dtype=torch.float64),
        "v": torch.randn(case.B, case.Tk, case.Hk, case.Dv, generator=g, dtype=torch.float64),
        "dout": torch.randn(case.B, case.Tq, case.Hq, case.Dv, generator=g, dtype=torch.float64),
        "bias": None,
        "mask": None,
    }
    if case.bias_shape is not None:
        x["bias"] = torch.randn(case.bias_shape, generator=g, dtype=torch.float64)
    if case.mask_shape is not None:
        mask = torch.rand(case.mask_shape, generator=g) > 0.3
        if case.mask_shape == (case.Tk,):
            mask[:5] = False  # with top-left causal, rows 0-4 keep no key
        x["mask"] = mask
    return x


def reference(case: Case, x: Dict[str, Any], dtype: torch.dtype):
    """The torch-primitive formula in dtype: out, lse and the gradients of <out, dout>."""

    def leaf(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype, copy=True).requires_grad_()

    leaves = {n: leaf(x[n]) for n in ("q", "k", "v")}
    bias = None if x["bias"] is None else leaf(x["bias"])
    out, lse = attention_ref(**leaves, bias=bias, mask=x["mask"], **case.options)
    out.backward(x["dout"].to(dtype))
    grads = [leaves[n].grad for n in ("q", "k", "v")] + ([bias.grad] if bias is not None else [])
    return out.detach(), lse.detach(), grads


@pytest.mark.parametrize("backend", ["auto", "reference"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_and_backward_f32(case: Case, backend: str) -> None:
    x = make_inputs(case)
    out64, lse64, grads64 = reference(case, x, torch.float64)
    out32_torch, lse32_torch, grads32_torch = reference(case, x, torch.float32)

    f32 = {n: None if x[n] is None else x[n].float() for n in ("q", "k", "v", "dout", "bias")}
    opts = dict(case.options, mask=x["mask"], bias=f32["bias"], backend=backend)
    out, lse = qkv.attention(f32["q"], f32["k"], f32["v"], return_lse=True, **opts)
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    check_f32(f"{case} out", out, out32_torch, out64)
    check_f32(f"{case} lse", lse, lse32_torch, lse64)

    grads = qkv.attention_backward(f32["dout"], f32["q"], f32["k"], f32["v"], out, lse, **opts)
    assert len(grads) == len(grads64)
    for name, got, naive, ref in zip(("dq", "dk", "dv", "dbias"), grads, grads32_torch, grads64):
        check_f32(f"{case} {name}", got, naive, ref)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_and_backward_f64(case: Case) -> None:
    x = make_inputs(case)
    out64, lse64, grads64 = reference(case, x, torch.float64)
    opts = dict(case.options, mask=x["mask"], bias=x["bias"])
    out, lse = qkv.attention(x["q"], x["k"], x["v"], return_lse=True, **opts)
    check_f64(f"{case} out", out, out64)
    check_f64(f"{case} lse", lse, lse64)
    grads = qkv.attention_backward(x["dout"], x["q"], x["k"], x["v"], out, lse, **opts)
    for name, got, ref in zip(("dq", "dk", "dv", "dbias"), grads, grads64):
        check_f64(f"{case} {name}", got, ref)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_torch_autograd_function(case: Case) -> None:
    """qkv.torch.attention inside torch.autograd: the gradients PyTorch accumulates in .grad."""
    x = make_inputs(case)
    out64, _, grads64 = reference(case, x, torch.float64)
    _, _, grads32_torch = reference(case, x, torch.float32)
    leaves = {n: x[n].float().requires_grad_() for n in ("q", "k", "v")}
    bias = None if x["bias"] is None else x["bias"].float().requires_grad_()
    out = qkv.torch.attention(**leaves, bias=bias, mask=x["mask"], **case.options)
    assert out.requires_grad
    (out * x["dout"].float()).sum().backward()
    got = [leaves[n].grad for n in ("q", "k", "v")] + ([bias.grad] if bias is not None else [])
    for name, g, naive, ref in zip(("dq", "dk", "dv", "dbias"), got, grads32_torch, grads64):
        check_f32(f"{case} {name}", g, naive, ref)


def test_torch_autograd_sum_backward_broadcast_dout() -> None:
    """out.sum().backward() hands the backward an expanded dout (stride 0 everywhere)."""
    case = Case("sum", options={"causal": "top_left"})
    x = make_inputs(case)
    leaves = {n: x[n].clone().requires_grad_() for n in ("q", "k", "v")}
    qkv.torch.attention(**leaves, causal="top_left").sum().backward()
    ref_leaves = {n: x[n].clone().requires_grad_() for n in ("q", "k", "v")}
    attention_ref(**ref_leaves, causal="top_left")[0].sum().backward()
    for n in ("q", "k", "v"):
        check_f64(f"d{n}", leaves[n].grad, ref_leaves[n].grad)


def test_attention_weights() -> None:
    case = CASES[-1]
    x = make_inputs(case)
    opts = dict(case.options, mask=x["mask"], bias=x["bias"])
    p = qkv.attention_weights(x["q"], x["k"], **opts)
    # P = exp(S - lse): the reference's probabilities, from its out with v = identity rows.
    eye = torch.eye(case.Tk, dtype=torch.float64).view(1, case.Tk, 1, case.Tk)
    v = eye.expand(case.B, case.Tk, case.Hk, case.Tk)
    p_ref = attention_ref(x["q"], x["k"], v, **opts)[0].permute(0, 2, 1, 3)
    assert p.shape == (case.B, case.Hq, case.Tq, case.Tk)
    check_f64("P", p, p_ref)
