#pragma once

// Linear attention as its kernels see it (qkv/linear_attention.hpp): strided q, k, v, out and
// their gradients, the key lengths, the causal rule and eps, and the feature map: elu(x) + 1, or
// FAVOR+'s random features.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/params.hpp"
#include "qkv/attention.hpp"
#include "qkv/linear_attention.hpp"

namespace qkv::kernels {

template <class T>
struct LinearParams {
  Dims dims;
  FeatureMap feature_map = FeatureMap::elu;
  std::int64_t F = 0;        // features: D under elu
  const T* omega = nullptr;  // favor: [F, D] the random features times sqrt(scale), row-major
  T scale = T(1);            // favor: the softmax scale s
  Rows<const T> q, k, v;
  Rows<T> out;  // the forward writes it
  Rows<const T> dout;
  Rows<T> dq, dk, dv;                         // the backward writes them
  const std::int64_t* key_lengths = nullptr;  // [B]; null: Tk for every batch
  Causal causal = Causal::none;
  T eps = T(1e-6);

  std::int64_t key_length(std::int64_t b) const {
    return key_lengths == nullptr ? dims.Tk : key_lengths[b];
  }
  // The keys query i of batch b keeps: [0, visible_end(b, i)), the same for every head, never
  // decreasing in i.
  std::int64_t visible_end(std::int64_t b, std::int64_t i) const {
    const std::int64_t tk = key_length(b);
    if (causal == Causal::none) return tk;
    const std::int64_t last = causal == Causal::top_left ? i : i + tk - dims.Tq;
    return std::clamp<std::int64_t>(last + 1, 0, tk);
  }
};

// phi(x) = elu(x) + 1 and its derivative.
template <class T>
T elu_feature(T x) {
  return x > T(0) ? x + T(1) : std::exp(x);
}
template <class T>
T elu_feature_slope(T x) {
  return x > T(0) ? T(1) : std::exp(x);
}

}  // namespace qkv::kernels
