// Position information: sinusoidal and learned absolute embeddings, RoPE, ALiBi slopes and T5's
// bucketed relative position bias.
#include "qkv/nn/positional.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::nn {

namespace ag = autograd;

// -> [T, E]
Tensor sinusoidal_positions(std::int64_t length, std::int64_t dim, DType dtype) {
  if (length < 0) throw Error("length", ">= 0", std::to_string(length));
  if (dim <= 0 || dim % 2 != 0) throw Error("dim", "even and > 0", std::to_string(dim));
  std::vector<double> pe(static_cast<std::size_t>(length * dim));
  for (std::int64_t t = 0; t < length; ++t) {
    for (std::int64_t i = 0; i < dim / 2; ++i) {
      const double angle =
          static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / dim);
      pe[t * dim + 2 * i] = std::sin(angle);
      pe[t * dim + 2 * i + 1] = std::cos(angle);
    }
  }
  return Tensor::from_values({length, dim}, pe, dtype);
}

LearnedPositions::LearnedPositions(std::int64_t max_length, std::int64_t dim, Generator& generator,
                                   DType dtype)
    : max_length_(max_length) {
  if (max_length <= 0) throw Error("max_length", "> 0", std::to_string(max_length));
  if (dim <= 0) throw Error("dim", "> 0", std::to_string(dim));
  weight_ = Var(Tensor::randn({max_length, dim}, generator, dtype), true);
  register_parameter("weight", weight_);
}

// x [B, T, E] -> [B, T, E]
Var LearnedPositions::forward(const Var& x, std::int64_t start) const {
  if (x.dim() != 3 || x.size(2) != weight_.size(1)) {
    throw Error("x", "[B, T, " + std::to_string(weight_.size(1)) + "]", shape_string(x.shape()));
  }
  if (start < 0 || start + x.size(1) > max_length_) {
    throw Error("x", "positions below " + std::to_string(max_length_),
                "positions up to " + std::to_string(start + x.size(1)));
  }
  return x + ag::slice(weight_, 0, start, start + x.size(1));  // [T, E] broadcast over B
}

// x [B, T, H, D] -> [B, T, H, D]
Var rope(const Var& x, double base, std::int64_t start) {
  if (x.dim() != 4 || x.size(3) % 2 != 0) {
    throw Error("x", "[B, T, H, D] with D even", shape_string(x.shape()));
  }
  const std::int64_t T = x.size(1), D = x.size(3), half = D / 2;
  // cos and sin of t theta_i, repeated over both halves: [T, 1, D], broadcast over B and H.
  std::vector<double> c(static_cast<std::size_t>(T * D)), s(c.size());
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double theta = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const double angle = static_cast<double>(t + start) * theta;
      c[t * D + i] = c[t * D + i + half] = std::cos(angle);
      s[t * D + i] = s[t * D + i + half] = std::sin(angle);
    }
  }
  const Var cos_t(Tensor::from_values({T, 1, D}, c, x.dtype()));
  const Var sin_t(Tensor::from_values({T, 1, D}, s, x.dtype()));
  // rotate_half(x) = (-x2, x1) for x = (x1, x2): the rotation by 90 degrees of every pair.
  const Var x1 = ag::slice(x, 3, 0, half), x2 = ag::slice(x, 3, half, D);
  const Var rotated = ag::concat({-x2, x1}, 3);
  return x * cos_t + rotated * sin_t;
}

std::vector<double> alibi_slopes(std::int64_t num_heads) {
  if (num_heads <= 0) throw Error("num_heads", "> 0", std::to_string(num_heads));
  const auto power_of_two = [](std::int64_t n) {
    std::vector<double> slopes(static_cast<std::size_t>(n));
    const double start = std::pow(2.0, -8.0 / static_cast<double>(n));
    for (std::int64_t h = 0; h < n; ++h) slopes[h] = std::pow(start, static_cast<double>(h + 1));
    return slopes;
  };
  std::int64_t p = 1;
  while (p * 2 <= num_heads) p *= 2;
  std::vector<double> slopes = power_of_two(p);
  const std::vector<double> extra = power_of_two(2 * p);
  for (std::int64_t h = 0; static_cast<std::int64_t>(slopes.size()) < num_heads; h += 2) {
    slopes.push_back(extra[h]);
  }
  return slopes;
}

std::int64_t relative_position_bucket(std::int64_t relative_position, bool bidirectional,
                                      std::int64_t num_buckets, std::int64_t max_distance) {
  // At least one exact bucket per direction, and a logarithmic range beyond it.
  const std::int64_t minimum = bidirectional ? 4 : 2;
  if (num_buckets < minimum) {
    throw Error("num_buckets", ">= " + std::to_string(minimum), std::to_string(num_buckets));
  }
  if (max_distance <= num_buckets / minimum) {
    throw Error("max_distance", "> " + std::to_string(num_buckets / minimum),
                std::to_string(max_distance));
  }
  std::int64_t bucket = 0;
  std::int64_t n = relative_position;
  if (bidirectional) {
    num_buckets /= 2;
    if (n > 0) bucket += num_buckets;
    n = std::llabs(n);
  } else {
    n = -std::min<std::int64_t>(n, 0);
  }
  const std::int64_t max_exact = num_buckets / 2;
  if (n < max_exact) return bucket + n;
  // T5 computes the logarithmic part in float32 and truncates toward zero.
  const float ratio = static_cast<float>(n) / static_cast<float>(max_exact);
  const float scaled = std::log(ratio) /
                       static_cast<float>(std::log(static_cast<double>(max_distance) /
                                                   static_cast<double>(max_exact))) *
                       static_cast<float>(num_buckets - max_exact);
  const std::int64_t large = max_exact + static_cast<std::int64_t>(scaled);
  return bucket + std::min(large, num_buckets - 1);
}

RelativePositionBias::RelativePositionBias(std::int64_t num_buckets, std::int64_t max_distance,
                                           std::int64_t num_heads, bool bidirectional,
                                           Generator& generator, DType dtype)
    : num_buckets_(num_buckets), max_distance_(max_distance), bidirectional_(bidirectional) {
  relative_position_bucket(0, bidirectional, num_buckets, max_distance);  // validates both
  if (num_heads <= 0) throw Error("num_heads", "> 0", std::to_string(num_heads));
  weight_ = Var(Tensor::randn({num_buckets, num_heads}, generator, dtype), true);
  register_parameter("weight", weight_);
}

// -> [H, Tq, Tk]
Var RelativePositionBias::forward(std::int64_t query_length, std::int64_t key_length) const {
  std::vector<std::int64_t> buckets(static_cast<std::size_t>(query_length * key_length));
  for (std::int64_t i = 0; i < query_length; ++i) {
    for (std::int64_t j = 0; j < key_length; ++j) {
      buckets[i * key_length + j] =
          relative_position_bucket(j - i, bidirectional_, num_buckets_, max_distance_);
    }
  }
  // weight[bucket(j - i), h]: [Tq, Tk, H] -> [H, Tq, Tk]
  const Var table = ag::embedding(weight_, buckets, {query_length, key_length});
  return ag::permute(table, {2, 0, 1});
}

BiasScoreMod RelativePositionBias::score_mod(std::int64_t query_length,
                                             std::int64_t key_length) const {
  if (query_length < 0) throw Error("query_length", ">= 0", std::to_string(query_length));
  if (key_length < 0) throw Error("key_length", ">= 0", std::to_string(key_length));
  // buckets[o]: the bucket of offset j - i = o - (Tq - 1), o in [0, Tq + Tk - 1)
  std::vector<std::int64_t> buckets(
      static_cast<std::size_t>(std::max<std::int64_t>(query_length + key_length - 1, 0)));
  for (std::size_t o = 0; o < buckets.size(); ++o) {
    buckets[o] = relative_position_bucket(static_cast<std::int64_t>(o) - (query_length - 1),
                                          bidirectional_, num_buckets_, max_distance_);
  }
  // table [H, num_buckets] = weight [num_buckets, H] transposed, the same memory
  const Var table = ag::permute(weight_, {1, 0});
  return {scores::relative_bias(Captured(table.value()), std::move(buckets)), table};
}

}  // namespace qkv::nn
