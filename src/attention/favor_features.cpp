// FAVOR+'s positive orthogonal random features (qkv/linear_attention.hpp): the draw, the number
// of features an options struct asks for, and the feature options' checks (linear_features.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/linear_features.hpp"
#include "attention/validate.hpp"
#include "qkv/error.hpp"
#include "qkv/linear_attention.hpp"
#include "qkv/philox.hpp"

namespace qkv {

// -> [F, D] f64
Tensor favor_features(std::int64_t D, std::int64_t F, std::uint64_t seed) {
  if (D < 1) throw Error("D", ">= 1", std::to_string(D));
  if (F < 1) throw Error("F", ">= 1", std::to_string(F));
  Generator generator(seed);
  Tensor omega = Tensor::empty({F, D}, DType::f64);
  double* w = omega.data_as<double>();
  std::vector<double> block(static_cast<std::size_t>(D * D));
  for (std::int64_t f0 = 0; f0 < F; f0 += D) {
    // A D x D Gaussian matrix made orthonormal row by row (modified Gram-Schmidt): its rows are
    // uniformly distributed orthonormal directions. A row that comes out (numerically) dependent
    // is drawn again.
    for (std::int64_t r = 0; r < D; ++r) {
      double* row = block.data() + r * D;
      for (;;) {
        for (std::int64_t c = 0; c < D; ++c) row[c] = generator.next_normal();
        for (std::int64_t p = 0; p < r; ++p) {
          const double* prev = block.data() + p * D;
          double dot = 0;
          for (std::int64_t c = 0; c < D; ++c) dot += row[c] * prev[c];
          for (std::int64_t c = 0; c < D; ++c) row[c] -= dot * prev[c];
        }
        double norm = 0;
        for (std::int64_t c = 0; c < D; ++c) norm += row[c] * row[c];
        norm = std::sqrt(norm);
        if (norm > 1e-6) {
          for (std::int64_t c = 0; c < D; ++c) row[c] /= norm;
          break;
        }
      }
    }
    // Each kept row scaled to the length of an independent N(0, I_D) vector, so that the row is
    // N(0, I_D) itself while the block stays orthogonal.
    for (std::int64_t r = 0; r < std::min(D, F - f0); ++r) {
      double length = 0;
      for (std::int64_t c = 0; c < D; ++c) {
        const double x = generator.next_normal();
        length += x * x;
      }
      length = std::sqrt(length);
      for (std::int64_t c = 0; c < D; ++c) w[(f0 + r) * D + c] = length * block[r * D + c];
    }
  }
  return omega;
}

std::int64_t linear_feature_count(const LinearOptions& options, std::int64_t D) {
  if (options.feature_map == FeatureMap::elu) return D;
  if (options.num_features > 0) return options.num_features;
  // Performer's default, int(D ln D)
  return std::max<std::int64_t>(
      1, static_cast<std::int64_t>(static_cast<double>(D) * std::log(static_cast<double>(D))));
}

namespace attention {

void validate_feature_options(const LinearOptions& options, DType inputs) {
  const bool favor = options.feature_map == FeatureMap::favor;
  if (options.feature_map != FeatureMap::elu && !favor) {
    throw Error("options.feature_map", "FeatureMap::elu or FeatureMap::favor",
                std::to_string(static_cast<int>(options.feature_map)));
  }
  if (options.num_features < 0 || (!favor && options.num_features != 0)) {
    throw Error("options.num_features", favor ? ">= 0 (0: D ln D)" : "0 under FeatureMap::elu",
                std::to_string(options.num_features));
  }
  if (options.scale.has_value()) {
    const double s = *options.scale;
    if (!favor) throw Error("options.scale", "unset under FeatureMap::elu", num(s));
    if (!(s > 0) || !finite_in_compute(s, inputs)) {
      throw Error("options.scale", finite_for(inputs, "a finite number > 0"), num(s));
    }
  }
  if (!(options.eps > 0) || !finite_in_compute(options.eps, inputs)) {
    throw Error("options.eps", finite_for(inputs, "a finite number > 0"), num(options.eps));
  }
}

double favor_scale(const LinearOptions& options, std::int64_t D) {
  return options.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
}

std::vector<double> scaled_favor_features(const LinearOptions& options, std::int64_t D) {
  const Tensor omega = favor_features(D, linear_feature_count(options, D), options.seed);
  const double root = std::sqrt(favor_scale(options, D));
  const double* w = omega.data_as<double>();
  std::vector<double> scaled(w, w + omega.numel());
  for (double& x : scaled) x *= root;
  return scaled;
}

}  // namespace attention
}  // namespace qkv
