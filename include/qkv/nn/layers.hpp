#pragma once

#include <cstdint>
#include <vector>

#include "qkv/autograd/ops.hpp"
#include "qkv/nn/module.hpp"

namespace qkv::nn {

// y = x W^T + b, W [out, in] ("weight"), b [out] ("bias"). PyTorch's initialization: W and b
// uniform in [-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)).
class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, Generator& generator,
         bool bias = true, DType dtype = DType::f32);
  // x [..., in] -> [..., out]
  Var forward(const Var& x) const;
  Var operator()(const Var& x) const { return forward(x); }

  const Var& weight() const noexcept { return weight_; }
  const Var& bias() const noexcept { return bias_; }  // undefined without bias
  std::int64_t in_features() const noexcept { return in_; }
  std::int64_t out_features() const noexcept { return out_; }

 private:
  std::int64_t in_, out_;
  Var weight_, bias_;
};

// A table of num_embeddings vectors of size embedding_dim ("weight"), initialized N(0, 1).
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Generator& generator,
            DType dtype = DType::f32);
  // indices (in [0, num_embeddings)) row-major of shape -> [*shape, embedding_dim]
  Var forward(const std::vector<std::int64_t>& indices, const Shape& shape) const;
  const Var& weight() const noexcept { return weight_; }

 private:
  Var weight_;
};

// Over the last dimension, with "weight" (ones) and "bias" (zeros).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t normalized_size, double eps = 1e-5, DType dtype = DType::f32);
  // x [..., N] -> [..., N]
  Var forward(const Var& x) const;
  Var operator()(const Var& x) const { return forward(x); }

 private:
  std::int64_t size_;
  double eps_;
  Var weight_, bias_;
};

// Zeroes each entry with probability p in training mode and scales the rest by 1 / (1 - p);
// the identity in eval mode. The Philox stream is keyed by seed, and each call takes the next
// offset, so two calls drop different entries.
class Dropout : public Module {
 public:
  explicit Dropout(double p, std::uint64_t seed = 0);
  // x [...] -> [...]
  Var forward(const Var& x);
  Var operator()(const Var& x) { return forward(x); }
  double p() const noexcept { return p_; }

 private:
  double p_;
  std::uint64_t seed_, calls_ = 0;
};

enum class Activation : std::uint8_t { relu, gelu };

// linear2(dropout(activation(linear1(x)))), PyTorch's Transformer feed-forward block; its
// parameters are "linear1.*" and "linear2.*".
class FeedForward : public Module {
 public:
  FeedForward(std::int64_t d_model, std::int64_t dim_feedforward, Generator& generator,
              Activation activation = Activation::relu, double dropout = 0.0,
              DType dtype = DType::f32);
  // x [..., d_model] -> [..., d_model]
  Var forward(const Var& x);
  Var operator()(const Var& x) { return forward(x); }

 private:
  Activation activation_;
  Linear linear1_, linear2_;
  Dropout dropout_;
};

}  // namespace qkv::nn
