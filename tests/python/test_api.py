"""The Python surface: array kinds in and out, strides without copies, PyTorch's
scaled_dot_product_attention, errors as ValueError with the C++ message, threads, and
`import qkv` without torch."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import qkv
from reference import attention_ref, check_f32, check_f64


def randn(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_numpy_in_numpy_out() -> None:
    q, k, v = (randn(2, 9, 4, 8, seed=s).numpy() for s in range(3))
    out, lse = qkv.attention(q, k, v, causal="top_left", return_lse=True)
    assert isinstance(out, np.ndarray) and isinstance(lse, np.ndarray)
    assert out.dtype == np.float64 and out.shape == (2, 9, 4, 8) and lse.shape == (2, 4, 9)
    ref = attention_ref(*(torch.from_numpy(x) for x in (q, k, v)), causal="top_left")[0]
    check_f64("out", torch.from_numpy(out), ref)
    grads = qkv.attention_backward(np.ones_like(out), q, k, v, out, lse, causal="top_left")
    assert all(isinstance(g, np.ndarray) for g in grads)
    p = qkv.attention_weights(q.astype(np.float32), k.astype(np.float32))
    assert isinstance(p, np.ndarray) and p.dtype == np.float32 and p.shape == (2, 4, 9, 9)


def test_torch_in_torch_out() -> None:
    q, k, v = (randn(1, 5, 2, 4, dtype=torch.float32, seed=s) for s in range(3))
    out, lse = qkv.attention(q, k, v, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert isinstance(lse, torch.Tensor) and lse.shape == (1, 2, 5)
    assert not out.requires_grad
    dq, dk, dv = qkv.attention_backward(torch.ones_like(out), q, k, v, out, lse)
    assert all(isinstance(g, torch.Tensor) for g in (dq, dk, dv))


def test_bhtd_views_are_read_without_a_copy() -> None:
    """A [B, H, T, D] tensor transposed to [B, T, H, D] reaches the kernel as it is."""
    q_bhtd, k_bhtd, v_bhtd = (randn(2, 3, 11, 8, seed=s) for s in range(3))
    q, k, v = (x.transpose(1, 2) for x in (q_bhtd, k_bhtd, v_bhtd))
    assert not q.is_contiguous()
    address, strides = qkv._qkv.array_view(q)
    assert address == q.data_ptr() and strides == list(q.stride())
    out = qkv.attention(q, k, v, causal="bottom_right")
    ref = attention_ref(q.contiguous(), k.contiguous(), v.contiguous(), causal="bottom_right")[0]
    check_f64("out", out, ref)

    q_np = q_bhtd.numpy().swapaxes(1, 2)
    address, strides = qkv._qkv.array_view(q_np)
    assert address == q_np.ctypes.data
    assert strides == [s // q_np.itemsize for s in q_np.strides]


def test_odd_strides_numpy() -> None:
    """Every other element, reversed time, a broadcast (stride 0) key head: no copies, same
    results as contiguous copies."""
    base = randn(2, 20, 3, 16, seed=1).numpy()
    q = base[:, ::2, :, ::2]  # [2, 10, 3, 8], strided
    k = randn(2, 7, 3, 8, seed=2).numpy()[:, ::-1]  # negative time stride
    v = np.broadcast_to(randn(2, 7, 1, 5, seed=3).numpy(), (2, 7, 3, 5))  # stride 0 over heads
    assert qkv._qkv.array_view(k)[1][1] < 0 and qkv._qkv.array_view(v)[1][2] == 0
    out = qkv.attention(q, k, v, causal="bottom_right")
    expected = qkv.attention(*(np.ascontiguousarray(x) for x in (q, k, v)), causal="bottom_right")
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-13)


def test_torch_autograd_through_views() -> None:
    """qkv.torch.attention on [B, H, T, D] leaves viewed as [B, T, H, D]: gradients arrive in
    the leaves' own layout."""
    leaves = [randn(2, 4, 9, 8, seed=s).requires_grad_() for s in range(3)]
    out = qkv.torch.attention(*(x.transpose(1, 2) for x in leaves), causal="top_left")
    out.square().sum().backward()
    ref_leaves = [x.detach().clone().requires_grad_() for x in leaves]
    ref = attention_ref(*(x.transpose(1, 2) for x in ref_leaves), causal="top_left")[0]
    ref.square().sum().backward()
    for a, b in zip(leaves, ref_leaves):
        check_f64("grad", a.grad, b.grad)


SDPA_CASES = {
    "plain": dict(Tq=13, Tk=13, Hk=4),
    "causal Tq<Tk (top-left)": dict(Tq=7, Tk=19, Hk=4, is_causal=True),
    "causal Tq>Tk (top-left)": dict(Tq=19, Tk=7, Hk=4, is_causal=True),
    "bool mask": dict(Tq=13, Tk=17, Hk=4, mask="bool"),
    "float mask": dict(Tq=13, Tk=17, Hk=4, mask="float"),
    "GQA": dict(Tq=13, Tk=13, Hk=2, enable_gqa=True),
    "scale": dict(Tq=13, Tk=13, Hk=4, scale=0.2),
}


@pytest.mark.parametrize("name", SDPA_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_scaled_dot_product_attention_matches_torch(name: str, dtype: torch.dtype) -> None:
    c = dict(SDPA_CASES[name])
    Tq, Tk, Hk = c.pop("Tq"), c.pop("Tk"), c.pop("Hk")
    q64, k64, v64 = (
        randn(2, 4, Tq, 16, seed=0),
        randn(2, Hk, Tk, 16, seed=1),
        randn(2, Hk, Tk, 16, seed=2),
    )
    mask = c.pop("mask", None)
    if mask == "bool":
        c["attn_mask"] = (randn(Tq, Tk, seed=4) > -1.0).unsqueeze(0)  # [1, Tq, Tk]
    elif mask == "float":
        c["attn_mask"] = randn(2, 1, Tq, Tk, seed=4)

    def cast(x):
        return x.to(dtype) if x.is_floating_point() else x

    ref64 = F.scaled_dot_product_attention(q64, k64, v64, **c)
    c32 = {n: cast(x) if isinstance(x, torch.Tensor) else x for n, x in c.items()}
    torch_out = F.scaled_dot_product_attention(cast(q64), cast(k64), cast(v64), **c32)
    out = qkv.scaled_dot_product_attention(cast(q64), cast(k64), cast(v64), **c32)
    assert out.shape == ref64.shape and out.dtype == dtype
    if dtype == torch.float64:
        check_f64(name, out, ref64)
    else:
        check_f32(name, out, torch_out, ref64)


def test_scaled_dot_product_attention_gradients() -> None:
    """Tensors that require grad go through qkv.torch.attention: gradients to query, key, value
    and a float mask, against PyTorch's own in float64."""
    names = ("query", "key", "value", "attn_mask")
    shapes = ((2, 4, 9, 8), (2, 2, 13, 8), (2, 2, 13, 6), (4, 9, 13))

    def grads(fn):
        leaves = [randn(*shape, seed=s).requires_grad_() for s, shape in enumerate(shapes)]
        out = fn(*leaves[:3], attn_mask=leaves[3], enable_gqa=True)
        assert out.requires_grad
        (out * randn(*out.shape, seed=9)).sum().backward()
        return [leaf.grad for leaf in leaves]

    for name, got, ref in zip(
        names, grads(qkv.scaled_dot_product_attention), grads(F.scaled_dot_product_attention)
    ):
        check_f64(name, got, ref)


def test_scaled_dot_product_attention_numpy_and_dropout() -> None:
    q, k, v = (randn(1, 2, 6, 4, seed=s).numpy() for s in range(3))
    out = qkv.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert isinstance(out, np.ndarray) and out.shape == (1, 2, 6, 4)
    ref = F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)))
    assert not np.allclose(out, ref.numpy()), "dropout_p=0.5 dropped nothing"


def test_errors_are_value_errors_with_the_cpp_message() -> None:
    q, k, v = randn(1, 4, 2, 16), randn(1, 4, 2, 8), randn(1, 4, 2, 16)
    with pytest.raises(ValueError, match=r"^k: expected head dim 16 \(from q\), got 8$"):
        qkv.attention(q, k, v)
    k = randn(1, 4, 2, 16)
    with pytest.raises(ValueError, match=r"^q: expected 4 dimensions \[B, T, H, D\], got 3"):
        qkv.attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"^q: expected float32, float64, bfloat16 or float16, got int64$"):
        qkv.attention(q.long(), k, v)
    with pytest.raises(ValueError, match=r"^causal: expected None, 'top_left' or 'bottom_right'"):
        qkv.attention(q, k, v, causal="diagonal")
    with pytest.raises(ValueError, match=r"^backend: expected 'auto', 'cpu' or 'reference'"):
        qkv.attention(q, k, v, backend="gpu")
    with pytest.raises(ValueError, match=r"^mask: expected bool, got float64$"):
        qkv.attention(q, k, v, mask=randn(4, 4))
    with pytest.raises(ValueError, match=r"^options.bias: expected a shape broadcastable"):
        qkv.attention(q, k, v, bias=randn(3, 4))
    with pytest.raises(ValueError, match=r"^options.dropout_p: expected a probability in \[0, 1\)"):
        qkv.attention(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match=r"^options.window.left: expected -1"):
        qkv.attention(q, k, v, window=(-2, 0))
    with pytest.raises(ValueError, match=r"^options.alibi_slopes: expected 2 slopes"):
        qkv.attention(q, k, v, alibi_slopes=[0.5])
    with pytest.raises(ValueError, match=r"^options.scale: expected a finite number with magnitude"):
        qkv.attention(q.float(), k.float(), v.float(), scale=1e39)  # computed in float32
    assert torch.isfinite(qkv.attention(q.double(), k.double(), v.double(), scale=1e39)).all()
    with pytest.raises(ValueError, match=r"^key: expected 2 heads \(from query"):
        qkv.scaled_dot_product_attention(randn(1, 2, 4, 8), randn(1, 1, 4, 8), randn(1, 1, 4, 8))
    out, lse = qkv.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match=r"^lse: "):
        qkv.attention_backward(out, q, k, v, out, lse[:, :, :2])


def test_options_are_checked_not_truncated() -> None:
    """A float where an integer is expected, or a value that is not a number, is refused with the
    option's name instead of being truncated (2.7 keys would silently become 2)."""
    q, k, v = randn(2, 4, 2, 8), randn(2, 4, 2, 8), randn(2, 4, 2, 8)
    integers = r"expected a sequence of integers"
    with pytest.raises(ValueError, match=rf"^key_lengths: {integers}, got \[2\.7, 3\]$"):
        qkv.attention(q, k, v, key_lengths=[2.7, 3])
    with pytest.raises(ValueError, match=rf"^query_lengths: {integers}"):
        qkv.attention(q, k, v, query_lengths=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"^key_lengths: expected 64-bit integers, got \[\d+, 2\]"):
        qkv.attention(q, k, v, key_lengths=[2**70, 2])
    with pytest.raises(ValueError, match=r"^window: expected \(left, right\), got 3$"):
        qkv.attention(q, k, v, window=3)
    with pytest.raises(ValueError, match=r"^window: expected \(left, right\), got \(1\.5, 0\)"):
        qkv.attention(q, k, v, window=(1.5, 0))
    with pytest.raises(ValueError, match=r"^seed: expected an integer in \[0, 2\*\*64\), got 1\.5"):
        qkv.attention(q, k, v, dropout_p=0.1, seed=1.5)
    with pytest.raises(ValueError, match=r"^softcap: expected a number, got 'x'$"):
        qkv.attention(q, k, v, softcap="x")
    with pytest.raises(ValueError, match=r"^alibi_slopes: expected a sequence of numbers"):
        qkv.attention(q, k, v, alibi_slopes=0.5)
    with pytest.raises(ValueError, match=r"^attn_mask: expected bool, float32, float64, bfloat16 or float16, got int"):
        qkv.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(4, 4, dtype=torch.int64))
    lengths = (np.array([3, 4]), torch.tensor([3, 4]), [np.int32(3), 4])
    outs = [qkv.attention(q, k, v, key_lengths=n) for n in lengths]
    assert all(torch.equal(outs[0], out) for out in outs[1:])


def test_threads() -> None:
    before = qkv.get_num_threads()
    qkv.set_num_threads(1)
    assert qkv.get_num_threads() == 1
    qkv.set_num_threads(before)
    assert qkv.get_num_threads() == before
    with pytest.raises(ValueError, match=r"^n: expected at least 1 thread, got 0$"):
        qkv.set_num_threads(0)


def test_threads_budget_is_qkvs_own() -> None:
    """qkv.set_num_threads sets qkv's budget, not torch's count (nor the reverse)."""
    before, torch_before = qkv.get_num_threads(), torch.get_num_threads()
    qkv.set_num_threads(3)
    torch.set_num_threads(1)
    assert (qkv.get_num_threads(), torch.get_num_threads()) == (3, 1)
    qkv.set_num_threads(before)
    torch.set_num_threads(torch_before)


def test_release_cached_memory_while_calls_run() -> None:
    """qkv.release_cached_memory() frees the kernels' pooled scratch; emptying the pool while
    Python threads run calls whose packed K (2176 keys x 4 heads x 64 x 4 bytes, 2.1 MiB) is
    pooled changes none of their results."""
    q, k, v = (randn(1, 2176, 4, 64, dtype=torch.float32, seed=s) for s in range(3))
    mask = qkv.masks.sliding_window(24, 8)
    expected = qkv.attention(q, k, v, mask_mod=mask)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(qkv.attention, q, k, v, mask_mod=mask) for _ in range(8)]
        while not all(f.done() for f in futures):
            qkv.release_cached_memory()
        assert all(torch.equal(f.result(), expected) for f in futures)
    qkv.release_cached_memory()
    assert torch.equal(qkv.attention(q, k, v, mask_mod=mask), expected)


def test_python_threads_give_the_sequential_results() -> None:
    """8 Python threads (the calls release the GIL) calling the forward and the backward on
    different inputs at once give bitwise the results of the same calls made one by one."""

    def work(n: int):
        q = randn(2, 40, 4, 16, seed=n)
        k = randn(2, 70, 2, 16, seed=n + 1)
        v = randn(2, 70, 2, 16, seed=n + 2)
        options = {"causal": "bottom_right", "dropout_p": 0.2, "seed": n, "offset": 2**40 + n}
        out, lse = qkv.attention(q, k, v, return_lse=True, **options)
        return (out, lse) + tuple(qkv.attention_backward(out, q, k, v, out, lse, **options))

    sequential = [work(n) for n in range(16)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        concurrent_results = list(pool.map(work, range(16)))
    for n, (a, b) in enumerate(zip(sequential, concurrent_results)):
        assert all(torch.equal(x, y) for x, y in zip(a, b)), f"work {n}"


def test_import_without_torch() -> None:
    """`import qkv` and numpy attention work where torch cannot be imported."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, qkv\n"
        "x = np.ones((1, 3, 2, 4))\n"
        "print(type(qkv.attention(x, x, x)).__name__)\n"
        "try:\n"
        "    qkv.torch\n"
        "except ImportError:\n"
        "    print('no torch')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ndarray", "no", "torch"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sixteen_bit_tensors_in_and_out(dtype: torch.dtype) -> None:
    """bfloat16 and float16 tensors come in without a copy and go out in their dtype: computed in
    float32, the very bits of the call on the tensors converted to float32 first, rounded once;
    a decode-shaped call (4 queries against a KV cache view) reads the cache as it lies. (Tiled
    bf16 calls compute in bf16 products where the CPU has bf16 matrix units, qkv.matrix_paths(),
    from 1024 keys, on AMX from any number: tests/kernels/cpu/test_bf16_forward.cpp; and bf16
    decode calls with 3 query rows or more a k/v head, as here, take VDPBF16PS dot products
    wherever the CPU has them: tests/kernels/cpu/test_bf16_decode.cpp. Such a call here is held to
    the f64 reference's rule, not to the float32 call's bits.) Through qkv.torch's autograd the
    gradients come back in the inputs' dtype."""
    gen = torch.Generator().manual_seed(3)
    cache = torch.randn(2, 4, 300, 32, generator=gen).to(dtype)  # [B, Hk, capacity, D]
    k, v = cache[:, :, :257].transpose(1, 2), cache[:, :, 1:258].transpose(1, 2)
    for tq in (4, 70):  # the decode path and the tiled one
        q = torch.randn(2, tq, 8, 32, generator=gen).to(dtype)
        out, lse = qkv.attention(q, k, v, causal="bottom_right", return_lse=True)
        want, want_lse = qkv.attention(
            q.float(), k.float(), v.float(), causal="bottom_right", return_lse=True
        )
        assert out.dtype == dtype and lse.dtype == torch.float32
        paths = qkv.matrix_paths()
        products = dtype == torch.bfloat16 and (
            (tq > 16 and paths[0] == "amx-bf16") or (tq <= 16 and "avx512-bf16" in paths)
        )
        if products:  # S from the same values, summed in another order
            assert (lse - want_lse).abs().max() <= 1e-5 * want_lse.abs().max()
        else:
            assert torch.equal(out, want.to(dtype)) and torch.equal(lse, want_lse)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.double().transpose(1, 2),
            k.double().transpose(1, 2).repeat_interleave(2, dim=1),
            v.double().transpose(1, 2).repeat_interleave(2, dim=1),
            attn_mask=torch.ones(tq, 257, dtype=torch.bool).tril(257 - tq),
        ).transpose(1, 2)
        rounded = (want.to(dtype).double() - ref).abs().max()
        assert (out.double() - ref).abs().max() <= 2 * rounded + 1e-6
    q = torch.randn(1, 5, 2, 16, generator=gen).to(dtype).requires_grad_()
    kk = torch.randn(1, 9, 2, 16, generator=gen).to(dtype).requires_grad_()
    vv = torch.randn(1, 9, 2, 16, generator=gen).to(dtype).requires_grad_()
    qkv.torch.attention(q, kk, vv).sum().backward()
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, kk, vv))
    qkv.torch.attention(q32, k32, v32).sum().backward()
    # The backward reads out as the forward rounded it to 16 bits, float32's run its own out: the
    # gradients agree within a few of the dtype's rounding steps.
    eps = torch.finfo(dtype).eps
    for got, want in ((q.grad, q32.grad), (kk.grad, k32.grad), (vv.grad, v32.grad)):
        assert got.dtype == dtype
        assert (got.float() - want).abs().max() <= 4 * eps * want.abs().max()
    half = np.random.default_rng(0).standard_normal((1, 3, 2, 8)).astype(np.float16)
    out = qkv.attention(half, half, half)
    assert isinstance(out, np.ndarray) and out.dtype == np.float16
    assert np.array_equal(out, qkv.attention(*(half.astype(np.float32),) * 3).astype(np.float16))


def test_numpy_bfloat16_in_and_out() -> None:
    """numpy's bfloat16 (ml_dtypes) goes in without a copy, strided views too, and comes back as
    numpy bfloat16: the same bits as the call on the same values as torch.bfloat16 tensors, for
    out, lse, the gradients (dbias included) and the weights; lse stays float32. 1100 keys take
    the bf16 products where the CPU has them, so both paths are crossed. A view whose last
    dimension is not contiguous (reversed here) is converted to float32 first, and then the call
    gives the float32 call's out, rounded."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16

    def as_torch(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.uint16)).view(torch.bfloat16)

    rng = np.random.default_rng(5)
    for tk in (40, 1100):
        base = rng.standard_normal((2, 1, 2, tk, 32)).astype(bf16)  # [2, B, H, T, D]
        q = rng.standard_normal((1, 70, 2, 32)).astype(bf16)
        k, v = base[0].swapaxes(1, 2), base[1].swapaxes(1, 2)  # heads-first views
        bias = rng.standard_normal((1, 2, 70, tk)).astype(bf16)
        out, lse = qkv.attention(q, k, v, bias=bias, return_lse=True)
        assert isinstance(out, np.ndarray) and out.dtype == bf16 and out.shape == (1, 70, 2, 32)
        assert lse.dtype == np.float32
        t_out, t_lse = qkv.attention(
            as_torch(q), as_torch(k), as_torch(v), bias=as_torch(bias), return_lse=True
        )
        assert torch.equal(as_torch(out), t_out) and torch.equal(torch.from_numpy(lse), t_lse)
        ref = torch.nn.functional.scaled_dot_product_attention(
            *(as_torch(x).double().transpose(1, 2) for x in (q, k, v)),
            attn_mask=as_torch(bias).double(),
        ).transpose(1, 2)
        assert (as_torch(out).double() - ref).abs().max() < 2e-2
        dout = rng.standard_normal((1, 70, 2, 32)).astype(bf16)
        grads = qkv.attention_backward(dout, q, k, v, out, lse, bias=bias)
        t_grads = qkv.attention_backward(
            *(as_torch(x) for x in (dout, q, k, v, out)), t_lse, bias=as_torch(bias)
        )
        assert len(grads) == 4
        for got, want in zip(grads, t_grads):
            assert got.dtype == bf16 and torch.equal(as_torch(got), want)
        reversed_v = v[..., ::-1]
        f32 = qkv.attention(*(x.astype(np.float32) for x in (q, k, reversed_v)))
        assert np.array_equal(qkv.attention(q, k, reversed_v).view(np.uint16),
                              f32.astype(bf16).view(np.uint16))
    weights = qkv.attention_weights(q, k)
    assert weights.dtype == bf16
    assert torch.equal(as_torch(weights), qkv.attention_weights(as_torch(q), as_torch(k)))
    sdpa = qkv.scaled_dot_product_attention(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2))
    assert sdpa.dtype == bf16 and np.array_equal(sdpa.swapaxes(1, 2).view(np.uint16),
                                                 qkv.attention(q, k, v).view(np.uint16))
    with pytest.raises(ValueError, match=r"^q: expected float32, float64, bfloat16 or float16, got"):
        qkv.attention(q.view(np.uint16), k, v)


def test_matrix_paths_name_what_this_cpu_runs() -> None:
    paths, features = qkv.matrix_paths(), qkv.cpu_features()
    assert paths[-1] == "f32-fma" and set(paths) <= {"amx-bf16", "avx512-bf16", "f32-fma"}
    assert ("avx512-bf16" in paths) == ("avx512_bf16" in features and "avx512bw" in features)
    assert ("amx-bf16" in paths) == ("amx_bf16" in features)
