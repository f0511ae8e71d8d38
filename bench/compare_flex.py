"""qkv's flex path against PyTorch's FlexAttention on the CPU, in one process.

For the same mask and score mods (causal, a sliding window of 128 either side, 8 packed documents,
causal & documents, ALiBi, a soft cap of 30, a T5-style relative-position bias table), B = 1,
H = 8, D = 64, float32, it times qkv's flex path (qkv.attention and qkv.torch.attention with
mask_mod= / score_mod=, the mods as qkv.masks / qkv.scores values) against
torch.nn.attention.flex_attention given the same mods as Python functions, with a block mask
from create_block_mask made once per row (as PyTorch documents: reuse it across calls) and
flex_attention compiled with torch.compile. The same thread count for both.

What PyTorch can run on a CPU decides the columns:

- forward: FlexAttention compiled (Inductor's C++ template, a fused CPU kernel) and, labelled
  "eager", flex_attention uncompiled (it materializes the whole score matrix);
- forward + backward: FlexAttention refuses any q, k or v that requires grad on the CPU, compiled
  or not ("FlexAttention does not support backward on CPU"; the script probes it and records the
  message). The PyTorch columns there are not FlexAttention but the same mod functions applied
  densely with PyTorch's ops under autograd (scores, score mod, mask, softmax, matmul: what eager
  flex_attention does in its forward), compiled with torch.compile and, labelled "eager", not.

Reps are interleaved (every contender once, then the next rep in a rotated order) so all see the
same load on a shared machine; medians are reported. The untimed warm-up call of each (for
PyTorch's compiled paths, the compilation; its time is recorded, from an empty Inductor cache
unless --warm-cache) also checks agreement: the largest difference between qkv's output (and
gradients, the relative-bias table's included) and PyTorch's, and, unless --no-f64, each one's
largest error against the dense computation in float64.

    build/venv/bin/python bench/compare_flex.py --json bench/compare-flex-$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Dict, List, Optional

import torch
import torch._dynamo
from torch.nn.attention.flex_attention import and_masks, create_block_mask, flex_attention

import qkv
import qkv.torch
from compare import cpu_model, timed  # bench/compare.py, beside this script

MODS = ("causal", "window", "document", "causal_document", "alibi", "softcap", "relative_bias")
WINDOW = 128  # left = right: 257 keys around the diagonal
DOCUMENTS = 8  # equal lengths, as qkv bench --variants
SOFTCAP = 30.0
REL_BUCKETS, REL_MAX_DISTANCE = 32, 128  # T5's bidirectional buckets
UNFUSED_WARNING = "flex_attention called without torch.compile()"


def t5_buckets(T: int) -> torch.Tensor:
    """The bucket of every offset j - i from -(T - 1) to T - 1 (Raffel et al. 2020,
    bidirectional): half the buckets per sign, exact up to a quarter, then logarithmic up to
    REL_MAX_DISTANCE, the last bucket beyond. -> [2T - 1] int64."""
    rel = torch.arange(-(T - 1), T)
    half = REL_BUCKETS // 2
    exact = half // 2
    distance = rel.abs()
    scaled = torch.log(distance.clamp(min=1).double() / exact) / math.log(REL_MAX_DISTANCE / exact)
    log_bucket = (exact + (scaled * (half - exact)).long()).clamp(max=half - 1)
    return (rel > 0).long() * half + torch.where(distance < exact, distance, log_bucket)


def make_mod(name: str, T: int, H: int, dtype: torch.dtype = torch.float32) -> Dict[str, object]:
    """One mod in both libraries' forms: qkv's values (mask_mod, score_mod) and PyTorch's
    functions (torch_mask(b, h, q_idx, kv_idx), torch_score(score, b, h, q_idx, kv_idx)),
    written as FlexAttention's documentation writes them. table: the relative-position table
    [H, REL_BUCKETS] (a leaf the backward gives a gradient), else None."""
    mod: Dict[str, object] = {"qkv_mask": None, "qkv_score": None, "torch_mask": None}
    mod["torch_score"] = mod["table"] = None
    ids = torch.arange(T) * DOCUMENTS // T  # [T]: document of each position

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() <= WINDOW

    def document(b, h, q_idx, kv_idx):
        return ids[q_idx] == ids[kv_idx]

    if name == "causal":
        mod.update(qkv_mask=qkv.masks.causal(), torch_mask=causal)
        mod["describe"] = "mask j <= i"
    elif name == "window":
        mod.update(qkv_mask=qkv.masks.sliding_window(WINDOW, WINDOW), torch_mask=window)
        mod["describe"] = f"mask |i - j| <= {WINDOW}"
    elif name == "document":
        mod.update(qkv_mask=qkv.masks.document(ids), torch_mask=document)
        mod["describe"] = f"mask doc[i] == doc[j], {DOCUMENTS} documents of T/{DOCUMENTS}"
    elif name == "causal_document":
        mod.update(
            qkv_mask=qkv.masks.causal() & qkv.masks.document(ids),
            torch_mask=and_masks(causal, document),
        )
        mod["describe"] = "mask j <= i and doc[i] == doc[j]"
    elif name == "alibi":
        slopes = [2.0 ** (-8.0 * (h + 1) / H) for h in range(H)]
        slopes_t = torch.tensor(slopes, dtype=dtype)

        def alibi(score, b, h, q_idx, kv_idx):
            return score - slopes_t[h] * (q_idx - kv_idx).abs()

        mod.update(qkv_score=qkv.scores.alibi(slopes), torch_score=alibi)
        mod["describe"] = "score s - slope_h |i - j|, slope_h = 2^(-8(h+1)/H), no mask"
    elif name == "softcap":

        def softcap(score, b, h, q_idx, kv_idx):
            return SOFTCAP * torch.tanh(score / SOFTCAP)

        mod.update(qkv_score=qkv.scores.softcap(SOFTCAP), torch_score=softcap)
        mod["describe"] = f"score {SOFTCAP:g} tanh(s / {SOFTCAP:g}), no mask"
    elif name == "relative_bias":
        g = torch.Generator().manual_seed(T + 7)
        table = (0.5 * torch.randn(H, REL_BUCKETS, generator=g)).to(dtype)
        buckets = t5_buckets(T)

        def relative_bias(score, b, h, q_idx, kv_idx):
            return score + table[h, buckets[kv_idx - q_idx + (T - 1)]]

        mod.update(
            qkv_score=qkv.scores.relative_bias(table, buckets.tolist()),
            torch_score=relative_bias,
            table=table,
        )
        mod["describe"] = (
            f"score s + table[h, bucket(j - i)], table [{H}, {REL_BUCKETS}], T5 buckets "
            f"(max distance {REL_MAX_DISTANCE}), no mask"
        )
    else:
        raise ValueError(f"--mods: unknown mod {name!r}, expected one of {', '.join(MODS)}")
    return mod


def dense(q, k, v, mod, dense_mask: Optional[torch.Tensor], heads: slice) -> torch.Tensor:
    """The mod applied densely with PyTorch's ops, for the heads in `heads`: q, k, v
    [B, H, T, D] -> out [B, len(heads), T, D]. Differentiable in q, k, v and the table."""
    q, k, v = q[:, heads], k[:, heads], v[:, heads]
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[3]))  # [B, h, T, T]
    if mod["torch_score"] is not None:
        h = torch.arange(heads.start, heads.stop).view(1, -1, 1, 1)
        i = torch.arange(T).view(1, 1, T, 1)
        j = torch.arange(T).view(1, 1, 1, T)
        s = mod["torch_score"](s, torch.zeros((), dtype=torch.long), h, i, j)
    if dense_mask is not None:
        s = s.masked_fill(~dense_mask, -math.inf)
    return torch.softmax(s, dim=-1) @ v


def dense_mask_of(mod, T: int) -> Optional[torch.Tensor]:
    if mod["torch_mask"] is None:
        return None
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    zero = torch.zeros((), dtype=torch.long)  # b and h: no mask here reads them
    return mod["torch_mask"](zero, zero, i, j)  # [T, T] bool


def f64_reference(q, k, v, dout, name: str, T: int, H: int, backward: bool):
    """out (and dq, dk, dv, dtable) of the dense form in float64, head by head (one head's
    T x T scores at a time). Tensors [B, H, T, D]."""
    mod = make_mod(name, T, H, torch.float64)
    mask = dense_mask_of(mod, T)
    q, k, v, dout = (x.detach().double().requires_grad_(backward) for x in (q, k, v, dout))
    table = mod["table"]
    if table is not None:
        table.requires_grad_(backward)
    outs = []
    for h in range(H):
        out = dense(q, k, v, mod, mask, slice(h, h + 1))
        if backward:
            out.backward(dout[:, h : h + 1])
        outs.append(out.detach())
    result = [torch.cat(outs, dim=1)]
    if backward:
        result += [q.grad, k.grad, v.grad] + ([table.grad] if table is not None else [])
    return result


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().double() - b.detach().double()).abs().max().item()


PROBE = """
import sys, warnings, torch
from torch.nn.attention.flex_attention import flex_attention
warnings.simplefilter("ignore")
fn = torch.compile(flex_attention) if sys.argv[1] == "compiled" else flex_attention
q = torch.randn(1, 1, 128, 16, requires_grad=True)
try:
    fn(q, q, q).sum().backward()
    print("ok")
except Exception as e:
    print(f"{type(e).__name__}: {str(e).splitlines()[0]}")
"""


def probe_flex_backward() -> Dict[str, str]:
    """What FlexAttention says when asked for a backward on the CPU, compiled and not. In a
    child process: once a compiled call has failed, Dynamo skips flex_attention's frame for the
    rest of the process, and every later torch.compile(flex_attention) runs it uncompiled."""
    found = {}
    for label in ("compiled", "eager"):
        child = subprocess.run(
            [sys.executable, "-c", PROBE, label], capture_output=True, text=True, timeout=600
        )
        lines = child.stdout.strip().splitlines()
        found[label] = lines[-1] if lines else f"probe failed (rc {child.returncode})"
    return found


def make_runners(name: str, B: int, H: int, T: int, D: int, backward: bool, compiled_flex):
    """One callable per contender on the same values in its own native layout: qkv's
    [B, T, H, D] and PyTorch's [B, H, T, D], both contiguous. Also the mod, the block mask's
    making time and the tensors the agreement check reads."""
    g = torch.Generator().manual_seed(T * 1000 + D + MODS.index(name))
    q, k, v, dout = (torch.randn(B, H, T, D, generator=g) for _ in range(4))  # [B, H, T, D]
    q_t, k_t, v_t, dout_t = (x.transpose(1, 2).contiguous() for x in (q, k, v, dout))
    mod = make_mod(name, T, H)
    table = mod["table"]
    # PyTorch's documented use: the block mask made once, reused by every call.
    start = time.perf_counter()
    block_mask = (
        create_block_mask(mod["torch_mask"], 1, 1, T, T, device="cpu")
        if mod["torch_mask"] is not None
        else None
    )
    block_mask_ms = (time.perf_counter() - start) * 1e3
    leaves = [q, k, v, q_t, k_t, v_t] + ([table] if table is not None else [])
    for x in leaves:
        x.requires_grad_(backward)

    def clear() -> None:
        for x in leaves:
            x.grad = None

    qkv_mods = {"mask_mod": mod["qkv_mask"], "score_mod": mod["qkv_score"]}

    def run_qkv():
        if not backward:
            with torch.no_grad():
                return qkv.attention(q_t, k_t, v_t, **qkv_mods)
        clear()
        out = qkv.torch.attention(q_t, k_t, v_t, **qkv_mods)
        out.backward(dout_t)
        return out

    def run_flex(fn):
        def run():
            with torch.no_grad():
                return fn(q, k, v, score_mod=mod["torch_score"], block_mask=block_mask)

        return run

    mask = dense_mask_of(mod, T)  # made once, as the block mask

    def dense_all_heads(q, k, v):
        return dense(q, k, v, mod, mask, slice(0, H))

    def run_dense(fn):
        def run():
            clear()
            out = fn(q, k, v)
            out.backward(dout)
            return out

        return run

    if backward:
        runners = {
            "qkv": run_qkv,
            "torch_dense": run_dense(torch.compile(dense_all_heads, dynamic=False, fullgraph=True)),
            "torch_dense_eager": run_dense(dense_all_heads),
        }
    else:
        runners = {"qkv": run_qkv, "torch_flex": run_flex(compiled_flex)}
        runners["torch_flex_eager"] = run_flex(flex_attention)

    def grads_torch():
        return [x.grad for x in (q, k, v)] + ([table.grad] if table is not None else [])

    def grads_qkv():
        found = [x.grad.transpose(1, 2) for x in (q_t, k_t, v_t)]
        return found + ([table.grad] if table is not None else [])

    grads = {"qkv": grads_qkv, "torch_dense": grads_torch, "torch_dense_eager": grads_torch}
    return runners, grads, mod, block_mask, block_mask_ms, (q, k, v, dout)


def measure(name: str, args, T: int, backward: bool, compiled_flex) -> Dict[str, object]:
    B, H, D, reps = args.B, args.H, args.D, args.reps
    runners, grads, mod, block_mask, block_mask_ms, tensors = make_runners(
        name, B, H, T, D, backward, compiled_flex
    )
    row: Dict[str, object] = {
        "mod": name,
        "describe": mod["describe"],
        "pass": "fwd+bwd" if backward else "fwd",
        "B": B,
        "H": H,
        "T": T,
        "D": D,
        "dtype": "float32",
        "reps": reps,
        "torch_block_mask_ms": block_mask_ms,
        "torch_block_mask_sparsity": None if block_mask is None else block_mask.sparsity(),
    }
    # Warm-up (compilation included, timed apart), and the check that all compute the same.
    outs, grad_sets = {}, {}
    for n, run in runners.items():
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=UNFUSED_WARNING)
                outs[n] = run()
        except Exception as e:  # a contender that cannot run is recorded, not fatal
            row[f"{n}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            print(f"  {name} T={T} {n}: {row[f'{n}_error']}", flush=True)
            continue
        finally:
            if n == "torch_flex":  # compiled with fullgraph: ran means fused
                row["torch_flex_compiled"] = n in outs
        row[f"{n}_first_call_s"] = time.perf_counter() - start
        if backward:
            grad_sets[n] = [x.detach().clone() for x in grads[n]()]
    for n in [n for n in runners if n not in outs]:
        del runners[n]
    if "qkv" not in outs:
        raise RuntimeError(f"{name} T={T}: qkv failed: {row.get('qkv_error')}")
    outs["qkv"] = outs["qkv"].detach().transpose(1, 2)
    agreement: Dict[str, float] = {}
    for n in (n for n in outs if n != "qkv"):
        agreement[f"out_qkv_vs_{n}"] = max_diff(outs["qkv"], outs[n])
    if "torch_flex" in outs and "torch_flex_eager" in outs:
        agreement["out_torch_flex_vs_torch_flex_eager"] = max_diff(
            outs["torch_flex"], outs["torch_flex_eager"]
        )
    labels = ["dq", "dk", "dv", "dtable"]
    for n in (n for n in grad_sets if n != "qkv"):
        for label, a, b in zip(labels, grad_sets["qkv"], grad_sets[n]):
            agreement[f"{label}_qkv_vs_{n}"] = max_diff(a, b)
    if args.f64:
        ref = f64_reference(*tensors, name, T, H, backward)
        for label, x in zip(["out"] + labels, ref):
            agreement[f"{label}_f64_max_abs"] = x.abs().max().item()
        for n, out in outs.items():
            agreement[f"out_{n}_vs_f64"] = max_diff(out, ref[0])
            for label, a, b in zip(labels, grad_sets.get(n, []), ref[1:]):
                agreement[f"{label}_{n}_vs_f64"] = max_diff(a, b)
        del ref
    row["agreement"] = agreement
    row["max_abs_diff"] = max(
        (v for key, v in agreement.items() if "_qkv_vs_torch" in key),
        default=float("nan"),
    )
    del outs, grad_sets
    times: Dict[str, List[float]] = {n: [] for n in runners}
    names = list(runners)
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for n in order:
            times[n].append(timed(runners[n]))
    for n in names:
        row[f"{n}_ms"] = statistics.median(times[n])
        row[f"{n}_ms_min"] = min(times[n])
        row[f"{n}_ms_max"] = max(times[n])
    peer = "torch_dense" if backward else "torch_flex"
    row["peer"] = peer
    if f"{peer}_ms" in row:
        row["peer_over_qkv"] = row[f"{peer}_ms"] / row["qkv_ms"]
    eager = peer + "_eager"
    row["peer_eager"] = eager
    if f"{eager}_ms" in row:
        row["peer_eager_over_qkv"] = row[f"{eager}_ms"] / row["qkv_ms"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--T", default="1024,4096", help="sequence lengths")
    parser.add_argument("--mods", default=",".join(MODS), help="which of " + ", ".join(MODS))
    parser.add_argument("--pass", dest="passes", default="fwd,fwd+bwd")
    parser.add_argument("--B", type=int, default=1)
    parser.add_argument("--H", type=int, default=8)
    parser.add_argument("--D", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5, help="timed reps per contender and row")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-f64", dest="f64", action="store_false", help="skip the f64 check")
    parser.add_argument(
        "--warm-cache", action="store_true", help="keep Inductor's usual on-disk cache"
    )
    parser.add_argument("--json", help="write {machine, flex_on_cpu, rows} here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    qkv.set_num_threads(args.threads)
    cold_cache = None
    if not args.warm_cache:  # so the first call's time is the compilation's
        cold_cache = tempfile.mkdtemp(prefix="compare_flex_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cold_cache
    # Every (mod, T) is its own compiled graph: past Dynamo's recompile limit (8 by default) the
    # call would silently run uncompiled; static shapes so each T gets its own kernel.
    torch._dynamo.config.recompile_limit = 256
    torch._dynamo.config.accumulated_recompile_limit = 4096
    # fullgraph: a graph break raises instead of running flex_attention uncompiled in silence.
    compiled_flex = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    load_start = os.getloadavg()
    machine = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "threads": args.threads,
        "torch_threads": torch.get_num_threads(),
        "qkv_threads": qkv.get_num_threads(),
        "torch_version": torch.__version__,
        "qkv_version": qkv.__version__,
        "python": sys.version.split()[0],
        "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR", "default"),
    }
    print(
        f"{machine['cpu']}, threads {args.threads} (torch {torch.get_num_threads()}, qkv "
        f"{qkv.get_num_threads()}), torch {torch.__version__}, qkv {qkv.__version__}, float32, "
        f"B={args.B} H={args.H} D={args.D}, median of {args.reps} interleaved reps, "
        f"load average {' '.join(f'{x:.2f}' for x in load_start)}"
    )
    backward_probe = probe_flex_backward()
    print(f"FlexAttention backward on CPU: compiled: {backward_probe['compiled']}")
    print(f"                               eager:    {backward_probe['eager']}")
    print(
        "fwd: torch = flex_attention compiled (torch.compile), eager = flex_attention uncompiled\n"
        "fwd+bwd: no FlexAttention (no CPU backward): torch = the same mods in dense PyTorch ops "
        "compiled (torch.compile), eager = the same uncompiled"
    )
    header = (
        f"{'mod':<16} {'pass':>7} {'T':>5} {'qkv ms':>10} {'torch ms':>10} {'torch path':>14} "
        f"{'torch/qkv':>9} {'eager ms':>10} {'eager/qkv':>9} {'max diff':>9}"
    )
    print(header)
    rows = []
    compiled_everywhere = True
    for T in (int(t) for t in args.T.split(",")):
        for name in args.mods.split(","):
            for p in args.passes.split(","):
                row = measure(name, args, T, p == "fwd+bwd", compiled_flex)
                rows.append(row)
                if row["pass"] == "fwd" and not row.get("torch_flex_compiled", False):
                    compiled_everywhere = False
                path = "dense compiled" if row["pass"] == "fwd+bwd" else "flex compiled"
                if row["pass"] == "fwd" and row.get("torch_flex_compiled") is False:
                    path = "flex FAILED"

                def ms(key):
                    return f"{row[key]:>10.2f}" if key in row else f"{'-':>10}"

                def ratio(key):
                    return f"{row[key]:>9.2f}" if key in row else f"{'-':>9}"

                print(
                    f"{name:<16} {row['pass']:>7} {T:>5} {ms('qkv_ms')} "
                    f"{ms(row['peer'] + '_ms')} {path:>14} {ratio('peer_over_qkv')} "
                    f"{ms(row['peer_eager'] + '_ms')} {ratio('peer_eager_over_qkv')} "
                    f"{row['max_abs_diff']:>9.1e}",
                    flush=True,
                )
    load_end = os.getloadavg()
    if cold_cache is not None:
        shutil.rmtree(cold_cache, ignore_errors=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in load_end)}")
    if args.json:
        with open(args.json, "w") as f:
            machine.update(load_average_start=load_start, load_average_end=load_end)
            report = {
                "machine": machine,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "command": " ".join(sys.argv),
                "flex_on_cpu": {
                    "forward_compiled": compiled_everywhere,
                    "backward_probe": backward_probe,
                    "backward_note": (
                        "torch.nn.attention.flex_attention refuses q, k or v that require grad "
                        "on the CPU, compiled or eager (_validate_device); Inductor's CPU "
                        "template is inference-only (pytorch/pytorch#148752, #169224, PR "
                        "#169646). fwd+bwd rows time the same mods in dense PyTorch ops, "
                        "compiled (torch_dense) and eager (torch_dense_eager)."
                    ),
                },
                "rows": rows,
            }
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
