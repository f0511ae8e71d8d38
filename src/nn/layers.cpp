// Linear, Embedding, LayerNorm, Dropout and the feed-forward block, as PyTorch defines and
// initializes them.
#include "qkv/nn/layers.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::nn {

namespace ag = autograd;

Linear::Linear(std::int64_t in_features, std::int64_t out_features, Generator& generator, bool bias,
               DType dtype)
    : in_(in_features), out_(out_features) {
  if (in_features <= 0) throw Error("in_features", "> 0", std::to_string(in_features));
  if (out_features <= 0) throw Error("out_features", "> 0", std::to_string(out_features));
  // kaiming_uniform_(a = sqrt(5)) gives the bound sqrt(6 / ((1 + 5) in)) = 1 / sqrt(in), and
  // PyTorch draws the bias with the same bound.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = uniform_parameter({out_features, in_features}, bound, generator, dtype);
  register_parameter("weight", weight_);
  if (bias) {
    bias_ = uniform_parameter({out_features}, bound, generator, dtype);
    register_parameter("bias", bias_);
  }
}

// x [..., in] -> [..., out]
Var Linear::forward(const Var& x) const {
  if (x.dim() < 1 || x.size(-1) != in_) {
    throw Error("x", "last dimension " + std::to_string(in_), shape_string(x.shape()));
  }
  return ag::linear(x, weight_, bias_);  // [..., out]
}

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, Generator& generator,
                     DType dtype) {
  if (num_embeddings <= 0) throw Error("num_embeddings", "> 0", std::to_string(num_embeddings));
  if (embedding_dim <= 0) throw Error("embedding_dim", "> 0", std::to_string(embedding_dim));
  weight_ = Var(Tensor::randn({num_embeddings, embedding_dim}, generator, dtype), true);
  register_parameter("weight", weight_);
}

// indices of shape -> [*shape, E]
Var Embedding::forward(const std::vector<std::int64_t>& indices, const Shape& shape) const {
  return ag::embedding(weight_, indices, shape);
}

LayerNorm::LayerNorm(std::int64_t normalized_size, double eps, DType dtype)
    : size_(normalized_size), eps_(eps) {
  if (normalized_size <= 0) throw Error("normalized_size", "> 0", std::to_string(normalized_size));
  weight_ = constant_parameter({normalized_size}, 1.0, dtype);
  bias_ = constant_parameter({normalized_size}, 0.0, dtype);
  register_parameter("weight", weight_);
  register_parameter("bias", bias_);
}

// x [..., N] -> [..., N]
Var LayerNorm::forward(const Var& x) const {
  return ag::layer_norm(x, {size_}, weight_, bias_, eps_);
}

Dropout::Dropout(double p, std::uint64_t seed) : p_(p), seed_(seed) {
  if (!(p >= 0 && p < 1)) throw Error("p", "a probability in [0, 1)", std::to_string(p));
}

// x [...] -> [...]
Var Dropout::forward(const Var& x) {
  if (!training() || p_ == 0) return x;
  return ag::dropout(x, p_, seed_, calls_++);
}

FeedForward::FeedForward(std::int64_t d_model, std::int64_t dim_feedforward, Generator& generator,
                         Activation activation, double dropout, DType dtype)
    : activation_(activation),
      linear1_(d_model, dim_feedforward, generator, true, dtype),
      linear2_(dim_feedforward, d_model, generator, true, dtype),
      dropout_(dropout, draw_seed(generator)) {
  register_module("linear1", linear1_);
  register_module("dropout", dropout_);
  register_module("linear2", linear2_);
}

// x [..., d_model] -> [..., d_model]
Var FeedForward::forward(const Var& x) {
  const Var h = linear1_(x);  // [..., dim_feedforward]
  const Var a = activation_ == Activation::relu ? ag::relu(h) : ag::gelu(h);
  return linear2_(dropout_(a));
}

}  // namespace qkv::nn
