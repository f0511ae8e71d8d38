"""qkv demo's translator trained and decoded in qkv and in PyTorch, interleaved, same threads.

qkv's side is `qkv bench --training` (the demo's model, corpus and batches of 32, AdamW, label
smoothing 0.1, clipping at 1), run as a subprocess; PyTorch's is the same architecture here:
token embeddings plus sinusoidal positions, nn.Transformer (2 + 2 pre-norm layers, d_model 128,
4 heads, feed-forward 512, ReLU, no dropout, batch first, final layer norms), a linear output
layer, cross-entropy with label smoothing 0.1, AdamW (betas 0.9, 0.98, weight decay 0.01),
gradients clipped to norm 1, trained on the very batches qkv trained on (qkv writes them with
--batches-json). Rounds alternate qkv, PyTorch, qkv, ... so both see the same load on a shared
machine; each round trains a fresh model for the warm-up steps untimed and then the timed steps.
The training figure is the median step's target tokens per second (the host stalls a step now
and then), with all tokens over all time beside it.

Decoding: the same sentences, in batches of 64, each batch run for (its longest reference + 1)
greedy steps: qkv with its KV cache; PyTorch's nn.Transformer recomputing the whole prefix each
step (it has no cache); and a PyTorch decoder over the same layers' weights with a hand-written
cache of each layer's self-attention keys and values and of the cross-attention's.

    build/venv/bin/python bench/compare_training.py --json bench/training-$(date +%F).json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from compare import cpu_model  # bench/compare.py, beside this script


def sinusoidal(length: int, d_model: int) -> torch.Tensor:
    """[length, d_model]: sin on even features, cos on odd ones (Vaswani et al. 2017)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return table


class Translator(nn.Module):
    """The twin of qkv::models::Translator."""

    def __init__(self, source_vocab: int, target_vocab: int, m: Dict[str, int]):
        super().__init__()
        d = m["d_model"]
        self.source_embedding = nn.Embedding(source_vocab, d)
        self.target_embedding = nn.Embedding(target_vocab, d)
        self.register_buffer("positions", sinusoidal(m["max_length"], d))
        self.transformer = nn.Transformer(
            d_model=d,
            nhead=m["heads"],
            num_encoder_layers=m["encoder_layers"],
            num_decoder_layers=m["decoder_layers"],
            dim_feedforward=m["dim_feedforward"],
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        self.output = nn.Linear(d, target_vocab)

    def encode(self, source: torch.Tensor, source_pad: torch.Tensor) -> torch.Tensor:
        """source [B, S] ids, source_pad [B, S] True on padding -> memory [B, S, E]"""
        x = self.source_embedding(source) + self.positions[: source.size(1)]
        return self.transformer.encoder(x, src_key_padding_mask=source_pad)

    def decode(self, memory: torch.Tensor, source_pad: torch.Tensor, target_in: torch.Tensor):
        """memory [B, S, E], target_in [B, T] -> logits [B, T, V]"""
        T = target_in.size(1)
        x = self.target_embedding(target_in) + self.positions[:T]
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        y = self.transformer.decoder(
            x, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=source_pad
        )
        return self.output(y)


def padded(rows: List[List[int]], pad: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """rows -> ids [B, L] padded with pad, and [B, L] True on padding"""
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    return ids, torch.arange(L)[None, :] >= lengths[:, None]


def prepared_batches(doc: dict) -> list:
    """Each training batch as tensors: source, its padding, decoder input, targets, token count."""
    bos, eos, pad = doc["bos"], doc["eos"], doc["pad"]
    out = []
    for b in doc["batches"]:
        source, source_pad = padded(b["source"], pad)
        target_in, _ = padded([[bos] + t for t in b["target"]], pad)
        targets, target_pad = padded([t + [eos] for t in b["target"]], pad)
        targets = targets.masked_fill(target_pad, -100)
        tokens = sum(len(t) + 1 for t in b["target"])
        out.append((source, source_pad, target_in, targets, tokens))
    return out


def torch_training(doc: dict, batches: list, warmup: int, steps: int) -> Tuple[List[float], List[int]]:
    """A fresh twin trained on the batches: the timed steps' seconds and target tokens."""
    torch.manual_seed(0)
    model = Translator(doc["source_vocab"], doc["target_vocab"], doc["model"])
    t = doc["train"]
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=t["lr"], betas=tuple(t["betas"]), weight_decay=t["weight_decay"]
    )
    seconds, tokens = [], []
    for step in range(warmup + steps):
        source, source_pad, target_in, targets, n = batches[step]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        logits = model.decode(model.encode(source, source_pad), source_pad, target_in)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)),
            targets.reshape(-1),
            ignore_index=-100,
            label_smoothing=t["label_smoothing"],
        )
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), t["clip_norm"])
        optimizer.step()
        loss.item()
        if step >= warmup:
            seconds.append(time.perf_counter() - start)
            tokens.append(n)
    return seconds, tokens


def cached_step(model: Translator, x: torch.Tensor, caches: list, memory_kv: list, mem_pad):
    """One decoder step over nn.Transformer's own weights with hand-written caches.
    x [N, 1, E] -> [N, 1, E]; caches[l] = [k, v] of layer l's self-attention so far [N, H, t, Dh]."""
    for layer, cache, (mk, mv) in zip(model.transformer.decoder.layers, caches, memory_kv):
        sa, ca = layer.self_attn, layer.multihead_attn
        H = sa.num_heads
        N, _, E = x.shape
        h = layer.norm1(x)
        q, k, v = F.linear(h, sa.in_proj_weight, sa.in_proj_bias).split(E, dim=-1)
        q, k, v = (z.view(N, 1, H, E // H).transpose(1, 2) for z in (q, k, v))
        cache[0] = k if cache[0] is None else torch.cat([cache[0], k], dim=2)
        cache[1] = v if cache[1] is None else torch.cat([cache[1], v], dim=2)
        a = F.scaled_dot_product_attention(q, cache[0], cache[1])
        x = x + sa.out_proj(a.transpose(1, 2).reshape(N, 1, E))
        h = layer.norm2(x)
        q = F.linear(h, ca.in_proj_weight[:E], ca.in_proj_bias[:E]).view(N, 1, H, E // H)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), mk, mv, attn_mask=mem_pad)
        x = x + ca.out_proj(a.transpose(1, 2).reshape(N, 1, E))
        x = x + layer.linear2(F.relu(layer.linear1(layer.norm3(x))))
    return model.transformer.decoder.norm(x)


@torch.no_grad()
def torch_decoding(model: Translator, doc: dict, cached: bool) -> Tuple[int, float]:
    """Greedy decoding of doc's sentences in its batches, each for (longest reference + 1)
    steps: (tokens, seconds)."""
    model.eval()
    d = doc["decode"]
    bos, pad, B = doc["bos"], doc["pad"], d["batch"]
    E, H = doc["model"]["d_model"], doc["model"]["heads"]
    tokens = 0
    start = time.perf_counter()
    for first in range(0, len(d["source"]), B):
        rows = d["source"][first : first + B]
        steps = max(len(r) + 1 for r in d["reference"][first : first + B])
        tokens += sum(len(r) + 1 for r in d["reference"][first : first + B])
        source, source_pad = padded(rows, pad)
        memory = model.encode(source, source_pad)
        N, S = source.shape
        out = torch.full((N, 1), bos, dtype=torch.long)
        if cached:
            memory_kv = []
            for layer in model.transformer.decoder.layers:
                ca = layer.multihead_attn
                k, v = F.linear(memory, ca.in_proj_weight[E:], ca.in_proj_bias[E:]).split(E, dim=-1)
                memory_kv.append(tuple(z.view(N, S, H, E // H).transpose(1, 2) for z in (k, v)))
            keep = (~source_pad)[:, None, None, :]  # [N, 1, 1, S]: True where attended
            caches = [[None, None] for _ in model.transformer.decoder.layers]
            for s in range(steps):
                x = model.target_embedding(out[:, -1:]) + model.positions[s : s + 1]
                y = cached_step(model, x, caches, memory_kv, keep)
                out = torch.cat([out, model.output(y)[:, -1].argmax(-1, keepdim=True)], dim=1)
        else:
            for s in range(steps):
                logits = model.decode(memory, source_pad, out)
                out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens, time.perf_counter() - start


def check_cache(doc: dict) -> float:
    """The hand-written cache's logits against nn.Transformer's on a few steps: largest
    difference (an untrained twin, one batch)."""
    torch.manual_seed(1)
    model = Translator(doc["source_vocab"], doc["target_vocab"], doc["model"]).eval()
    d = doc["decode"]
    E, H = doc["model"]["d_model"], doc["model"]["heads"]
    with torch.no_grad():
        source, source_pad = padded(d["source"][:8], doc["pad"])
        memory = model.encode(source, source_pad)
        N, S = source.shape
        memory_kv = []
        for layer in model.transformer.decoder.layers:
            ca = layer.multihead_attn
            k, v = F.linear(memory, ca.in_proj_weight[E:], ca.in_proj_bias[E:]).split(E, dim=-1)
            memory_kv.append(tuple(z.view(N, S, H, E // H).transpose(1, 2) for z in (k, v)))
        caches = [[None, None] for _ in model.transformer.decoder.layers]
        target = torch.randint(4, doc["target_vocab"], (N, 6))
        full = model.decode(memory, source_pad, target)
        worst = 0.0
        for s in range(6):
            x = model.target_embedding(target[:, s : s + 1]) + model.positions[s : s + 1]
            y = model.output(cached_step(model, x, caches, memory_kv, (~source_pad)[:, None, None, :]))
            worst = max(worst, (y[:, 0] - full[:, s]).abs().max().item())
    return worst


def run_qkv(qkv_bin: str, threads: int, warmup: int, steps: int, sentences: int, batches_json=None):
    """One qkv round (a subprocess): its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "qkv.json")
        cmd = [qkv_bin, "bench", "--training", "--threads", str(threads), "--warmup-steps",
               str(warmup), "--train-steps", str(steps), "--decode-sentences", str(sentences),
               "--json", out]
        if batches_json:
            cmd += ["--batches-json", batches_json]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def main() -> int:
    # nn.Transformer warns that its nested-tensor fast path is off for norm_first layers.
    warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--qkv", default="build/release/tools/qkv", help="the qkv executable")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds of each")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--decode-sentences", type=int, default=500)
    parser.add_argument("--json", help="write the figures here")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "batches.json")
        first = run_qkv(a.qkv, a.threads, a.warmup_steps, a.train_steps, a.decode_sentences, path)
        with open(path) as f:
            doc = json.load(f)
    batches = prepared_batches(doc)
    cache_error = check_cache(doc)
    print(f"{cpu_model()}, {a.threads} threads, torch {torch.__version__}; the cached PyTorch "
          f"decoder's logits within {cache_error:.2e} of nn.Transformer's")

    qkv_rounds, torch_rounds = [first], []
    decode: Dict[str, List[float]] = {"torch_recompute": [], "torch_cached": []}
    decode_tokens = 0
    for r in range(a.rounds):
        if r > 0:
            qkv_rounds.append(run_qkv(a.qkv, a.threads, a.warmup_steps, a.train_steps,
                                      a.decode_sentences))
        seconds, tokens = torch_training(doc, batches, a.warmup_steps, a.train_steps)
        torch_rounds.append({"step_seconds": seconds, "step_tokens": tokens})
        torch.manual_seed(r)
        model = Translator(doc["source_vocab"], doc["target_vocab"], doc["model"])
        for name, cached in (("torch_recompute", False), ("torch_cached", True)):
            decode_tokens, s = torch_decoding(model, doc, cached)
            decode[name].append(decode_tokens / s)

    med = statistics.median

    def step_tps(seconds: List[float], tokens: List[int]) -> float:
        """The median over steps of a step's target tokens per second."""
        return med(n / t for n, t in zip(tokens, seconds))

    # Per round: the median step's rate (robust to the host's stalls), and all tokens over all
    # time (which counts them).
    qkv_train = [step_tps(q["train"]["step_seconds"], q["train"]["step_tokens"]) for q in qkv_rounds]
    torch_train = [step_tps(t["step_seconds"], t["step_tokens"]) for t in torch_rounds]
    qkv_total = [q["train"]["tokens_per_second"] for q in qkv_rounds]
    torch_total = [sum(t["step_tokens"]) / sum(t["step_seconds"]) for t in torch_rounds]
    qkv_decode = [q["decode"]["tokens_per_second"] for q in qkv_rounds]
    print(f"training, target tokens/s, the median step's (median of {a.rounds} rounds of "
          f"{a.train_steps} steps):")
    print(f"  qkv      {med(qkv_train):8.0f}  (rounds {', '.join(f'{x:.0f}' for x in qkv_train)}; "
          f"all tokens over all time {med(qkv_total):.0f})")
    print(f"  PyTorch  {med(torch_train):8.0f}  (rounds {', '.join(f'{x:.0f}' for x in torch_train)}; "
          f"all tokens over all time {med(torch_total):.0f})")
    print(f"  qkv / PyTorch {med(qkv_train) / med(torch_train):.2f} (all tokens over all time: "
          f"{med(qkv_total) / med(torch_total):.2f})")
    print(f"greedy decoding, tokens/s ({len(doc['decode']['source'])} sentences, {decode_tokens} "
          f"tokens):")
    print(f"  qkv, KV cache              {med(qkv_decode):8.0f}")
    print(f"  PyTorch, prefix recomputed {med(decode['torch_recompute']):8.0f}  "
          f"(qkv / it {med(qkv_decode) / med(decode['torch_recompute']):.2f})")
    print(f"  PyTorch, hand-written cache {med(decode['torch_cached']):7.0f}  "
          f"(qkv / it {med(qkv_decode) / med(decode['torch_cached']):.2f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "machine": {"cpu": cpu_model(), "threads": a.threads,
                                "torch_version": torch.__version__,
                                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                    "rounds": a.rounds,
                    "warmup_steps": a.warmup_steps,
                    "train_steps": a.train_steps,
                    "train_tokens_per_second_median_step": {"qkv": qkv_train, "torch": torch_train},
                    "train_ratio": med(qkv_train) / med(torch_train),
                    "train_tokens_per_second_overall": {"qkv": qkv_total, "torch": torch_total},
                    "train_ratio_overall": med(qkv_total) / med(torch_total),
                    "decode_tokens": decode_tokens,
                    "decode_tokens_per_second": {"qkv": qkv_decode, **decode},
                    "cached_decoder_max_logit_difference": cache_error,
                    "qkv_rounds": qkv_rounds,
                    "torch_rounds": torch_rounds,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
