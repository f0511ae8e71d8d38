"""qkv against torch.nn.functional.scaled_dot_product_attention on the CPU, in one process.

For the shapes of the CPU benchmark (B = 1, H = 8, T in {512, ..., 8192}, D in {64, 128}, causal
and not; float32, or with --dtype bfloat16 or float16 q, k, v and gradients), times the forward and the forward + backward of qkv (the fused kernel, through
qkv.attention and the qkv.torch autograd Function) and of PyTorch's fused CPU path
(SDPBackend.FLASH_ATTENTION) and its math path (SDPBackend.MATH), with the same thread count for
both libraries. Reps are interleaved (qkv, flash, math, then the next rep in a rotated order) so
all three see the same load on a shared machine; medians are reported. The untimed warm-up
call of each also checks that the three agree: the largest difference between qkv's output (and
gradients) and PyTorch's is printed and recorded.

    build/venv/bin/python bench/compare.py --json bench/compare-$(date +%F).json
    build/venv/bin/python bench/compare.py --dtype bfloat16 --json bench/compare-bf16-$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import qkv
import qkv.torch


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it, with its family and model numbers where it
    has them ("AMD EPYC (family 25, model 17)": a VM may name Zen 4 and Zen 5 alike), as qkv's
    cpu_model() gives it; "unknown" where there is no name."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or "unknown"
    if name != "unknown" and "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def make_runners(B: int, H: int, T: int, D: int, causal: bool, backward: bool, dtype: torch.dtype):
    """One callable per contender, each on the same values in its own native layout: qkv's
    [B, T, H, D] and PyTorch's [B, H, T, D], both contiguous, in dtype."""
    g = torch.Generator().manual_seed(T * 1000 + D)
    q, k, v, dout = (torch.randn(B, H, T, D, generator=g).to(dtype) for _ in range(4))  # [B, H, T, D]
    q_t, k_t, v_t, dout_t = (x.transpose(1, 2).contiguous() for x in (q, k, v, dout))
    for x in (q, k, v, q_t, k_t, v_t):
        x.requires_grad_(backward)

    def clear() -> None:
        for x in (q, k, v, q_t, k_t, v_t):
            x.grad = None

    def run_qkv():
        if not backward:
            with torch.no_grad():
                return qkv.attention(q_t, k_t, v_t, causal="top_left" if causal else None)
        clear()
        out = qkv.torch.attention(q_t, k_t, v_t, causal="top_left" if causal else None)
        out.backward(dout_t)
        return out

    def run_torch(backend: SDPBackend):
        def run():
            with sdpa_kernel(backend):
                if not backward:
                    with torch.no_grad():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                clear()
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                out.backward(dout)
                return out

        return run

    runners = {
        "qkv": run_qkv,
        "torch_flash": run_torch(SDPBackend.FLASH_ATTENTION),
        "torch_math": run_torch(SDPBackend.MATH),
    }
    grads = {
        "qkv": lambda: [x.grad.transpose(1, 2) for x in (q_t, k_t, v_t)],
        "torch_flash": lambda: [x.grad for x in (q, k, v)],
        "torch_math": lambda: [x.grad for x in (q, k, v)],
    }
    return runners, grads


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().double() - b.detach().double()).abs().max().item()


def measure(B, H, T, D, causal, backward, reps, dtype) -> Dict[str, object]:
    runners, grads = make_runners(B, H, T, D, causal, backward, dtype)
    # Warm-up, and the check that all three compute the same thing.
    outs, grad_sets = {}, {}
    for name, run in runners.items():
        outs[name] = run()
        if backward:
            grad_sets[name] = grads[name]()
    outs["qkv"] = outs["qkv"].transpose(1, 2)
    diff = max(max_diff(outs["qkv"], outs[n]) for n in ("torch_flash", "torch_math"))
    if backward:
        for n in ("torch_flash", "torch_math"):
            diff = max(diff, *(max_diff(a, b) for a, b in zip(grad_sets["qkv"], grad_sets[n])))
    del outs, grad_sets
    times: Dict[str, List[float]] = {name: [] for name in runners}
    names = list(runners)
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            times[name].append(timed(runners[name]))
    row = {
        "B": B,
        "H": H,
        "T": T,
        "D": D,
        "causal": causal,
        "pass": "fwd+bwd" if backward else "fwd",
        "dtype": str(dtype).removeprefix("torch."),
        "reps": reps,
        "max_abs_diff": diff,
    }
    for name in names:
        row[f"{name}_ms"] = statistics.median(times[name])
        row[f"{name}_ms_min"] = min(times[name])
        row[f"{name}_ms_max"] = max(times[name])
    row["flash_over_qkv"] = row["torch_flash_ms"] / row["qkv_ms"]
    row["math_over_qkv"] = row["torch_math_ms"] / row["qkv_ms"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--T", default="512,1024,2048,4096,8192", help="sequence lengths")
    parser.add_argument("--D", default="64,128", help="head dims")
    parser.add_argument("--B", type=int, default=1)
    parser.add_argument("--H", type=int, default=8)
    parser.add_argument("--pass", dest="passes", default="fwd,fwd+bwd")
    parser.add_argument("--causal", default="false,true")
    parser.add_argument("--reps", type=int, default=5, help="timed reps per contender and row")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16"),
        help="q, k, v, dout and the gradients (both libraries accumulate in float32)",
    )
    parser.add_argument("--json", help="write {threads, torch_version, rows} here")
    args = parser.parse_args()

    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(args.threads)
    qkv.set_num_threads(args.threads)
    print(
        f"threads {args.threads} (torch {torch.get_num_threads()}, qkv {qkv.get_num_threads()}), "
        f"torch {torch.__version__}, qkv {qkv.__version__}, {args.dtype}, B={args.B} H={args.H}, "
        f"median of {args.reps} interleaved reps"
    )
    header = (
        f"{'T':>5} {'D':>4} {'causal':>6} {'pass':>7} {'qkv ms':>10} {'flash ms':>10} "
        f"{'math ms':>10} {'flash/qkv':>9} {'math/qkv':>9} {'max diff':>9}"
    )
    print(header)
    rows = []
    for T in (int(t) for t in args.T.split(",")):
        for D in (int(d) for d in args.D.split(",")):
            for causal in (c == "true" for c in args.causal.split(",")):
                for p in args.passes.split(","):
                    row = measure(
                        args.B, args.H, T, D, causal, p == "fwd+bwd", args.reps, dtype
                    )
                    rows.append(row)
                    print(
                        f"{T:>5} {D:>4} {str(causal):>6} {row['pass']:>7} "
                        f"{row['qkv_ms']:>10.2f} {row['torch_flash_ms']:>10.2f} "
                        f"{row['torch_math_ms']:>10.2f} {row['flash_over_qkv']:>9.2f} "
                        f"{row['math_over_qkv']:>9.2f} {row['max_abs_diff']:>9.1e}",
                        flush=True,
                    )
    if args.json:
        with open(args.json, "w") as f:
            report = {
                "threads": args.threads,
                "torch_version": torch.__version__,
                "qkv_version": qkv.__version__,
                "cpu": cpu_model(),
                "matrix_paths": qkv.matrix_paths(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "load_average": os.getloadavg(),
                "command": " ".join(sys.argv),
                "rows": rows,
            }
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
