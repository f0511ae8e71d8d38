#pragma once

#include <cstdint>
#include <vector>

#include "qkv/autograd/ops.hpp"
#include "qkv/mod_values.hpp"
#include "qkv/nn/module.hpp"

namespace qkv::nn {

// The fixed sinusoidal table of "Attention Is All You Need": pe[t, 2i] = sin(t / 10000^(2i/E)),
// pe[t, 2i + 1] = cos(t / 10000^(2i/E)). -> [T, E] (E even).
Tensor sinusoidal_positions(std::int64_t length, std::int64_t dim, DType dtype = DType::f32);

// Learned absolute positions: a table [max_length, E] ("weight"), N(0, 1) as nn.Embedding.
class LearnedPositions : public Module {
 public:
  LearnedPositions(std::int64_t max_length, std::int64_t dim, Generator& generator,
                   DType dtype = DType::f32);
  // x [B, T, E] -> x + weight[start : start + T]
  Var forward(const Var& x, std::int64_t start = 0) const;

 private:
  std::int64_t max_length_;
  Var weight_;
};

// Rotary embeddings (RoPE, Su et al.), in the half-split layout of GPT-NeoX and Llama: for
// position t and i < D/2, with theta_i = base^(-2i/D), the pair (x_i, x_{i + D/2}) is rotated by
// the angle t theta_i. Composed of mul, slice and concat, so the engine derives its backward.
// x [B, T, H, D] (D even) -> [B, T, H, D]; positions start, start + 1, ...
Var rope(const Var& x, double base = 10000.0, std::int64_t start = 0);

// ALiBi's head slopes (Press et al.): for H a power of two, 2^(-8 (h + 1) / H); otherwise the
// slopes of the power of two P below H, then every other slope of 2P, as the paper's code does.
std::vector<double> alibi_slopes(std::int64_t num_heads);

// T5's _relative_position_bucket for relative_position = key position - query position:
// bidirectional uses half the buckets per direction; otherwise (causal) positive positions go to
// bucket 0. Half of the (per-direction) buckets are exact, the rest logarithmic up to
// max_distance.
std::int64_t relative_position_bucket(std::int64_t relative_position, bool bidirectional,
                                      std::int64_t num_buckets, std::int64_t max_distance);

// The flex form of a learned bias (RelativePositionBias::score_mod): a score mod that reads
// `table` (qkv::scores::relative_bias), and the Var of that table for autograd (pass it in
// AttentionCall::score_tables, or to ag::flex_attention's tables).
struct BiasScoreMod {
  ScoreMod score_mod;
  Var table;
};

// T5's learned relative position bias: a table [num_buckets, num_heads] ("weight", N(0, 1)),
// looked up by bucket. forward() materializes the bias, whose gradient flows through the attention
// primitive's dbias; score_mod() reads the table inside the fused kernel instead, with no [H, Tq,
// Tk] bias, and its gradient comes from the flex backward's captured pass.
class RelativePositionBias : public Module {
 public:
  RelativePositionBias(std::int64_t num_buckets, std::int64_t max_distance, std::int64_t num_heads,
                       bool bidirectional, Generator& generator, DType dtype = DType::f32);
  // -> bias [H, Tq, Tk] for query positions 0..Tq-1 and key positions 0..Tk-1
  Var forward(std::int64_t query_length, std::int64_t key_length) const;
  // The same bias as a score mod for Tq queries and Tk keys: s + weight[bucket(j - i), h], the
  // table read through a [num_heads, num_buckets] view of weight (no copy).
  BiasScoreMod score_mod(std::int64_t query_length, std::int64_t key_length) const;
  const Var& weight() const noexcept { return weight_; }

 private:
  std::int64_t num_buckets_, max_distance_;
  bool bidirectional_;
  Var weight_;
};

}  // namespace qkv::nn
