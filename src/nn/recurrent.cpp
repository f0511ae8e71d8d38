// The GRU layer: autograd::gru_cell stepped over the time axis in each direction, with the
// steps past each sequence's length left out as PyTorch's packed sequences leave them.
#include "qkv/nn/recurrent.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::nn {

namespace ag = autograd;

GRU::GRU(std::int64_t input_size, std::int64_t hidden_size, Generator& generator,
         bool bidirectional, bool bias, DType dtype)
    : input_(input_size), hidden_(hidden_size), bidirectional_(bidirectional) {
  if (input_size <= 0) throw Error("input_size", "> 0", std::to_string(input_size));
  if (hidden_size <= 0) throw Error("hidden_size", "> 0", std::to_string(hidden_size));
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (Direction* d : {&forward_, &backward_}) {
    if (d == &backward_ && !bidirectional) break;
    const std::string suffix = d == &forward_ ? "_l0" : "_l0_reverse";
    d->weight_ih = uniform_parameter({3 * hidden_size, input_size}, bound, generator, dtype);
    d->weight_hh = uniform_parameter({3 * hidden_size, hidden_size}, bound, generator, dtype);
    register_parameter("weight_ih" + suffix, d->weight_ih);
    register_parameter("weight_hh" + suffix, d->weight_hh);
    if (bias) {
      d->bias_ih = uniform_parameter({3 * hidden_size}, bound, generator, dtype);
      d->bias_hh = uniform_parameter({3 * hidden_size}, bound, generator, dtype);
      register_parameter("bias_ih" + suffix, d->bias_ih);
      register_parameter("bias_hh" + suffix, d->bias_hh);
    }
  }
}

// x [B, T, I], h0 [D, B, H] -> outputs [B, T, D H], final [D, B, H]
GRU::Output GRU::forward(const Var& x, const Var& h0,
                         const std::vector<std::int64_t>& lengths) const {
  if (x.dim() != 3 || x.size(-1) != input_) {
    throw Error("x", "[B, T, " + std::to_string(input_) + "]", shape_string(x.shape()));
  }
  const std::int64_t B = x.size(0), T = x.size(1), D = directions();
  if (h0.defined() && h0.shape() != Shape{D, B, hidden_}) {
    throw Error("h0", "shape " + shape_string({D, B, hidden_}), shape_string(h0.shape()));
  }
  if (!lengths.empty() && static_cast<std::int64_t>(lengths.size()) != B) {
    throw Error("lengths", std::to_string(B) + " (one per batch) or none",
                std::to_string(lengths.size()));
  }
  for (const std::int64_t n : lengths) {
    if (n < 0 || n > T)
      throw Error("lengths", "in [0, " + std::to_string(T) + "]", std::to_string(n));
  }
  // keep[t] [B, 1]: 1 where step t lies within the sequence, else 0 (the state is kept).
  std::vector<Var> keep;
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<double> k(static_cast<std::size_t>(B));
    for (std::int64_t b = 0; b < B; ++b) k[b] = lengths.empty() || t < lengths[b] ? 1.0 : 0.0;
    keep.emplace_back(Tensor::from_values({B, 1}, k, x.dtype()));
  }
  std::vector<Var> halves, finals;
  for (std::int64_t d = 0; d < D; ++d) {
    const Direction& w = d == 0 ? forward_ : backward_;
    Var h = h0.defined() ? ag::reshape(ag::slice(h0, 0, d, d + 1), {B, hidden_})
                         : Var(Tensor::zeros({B, hidden_}, x.dtype()));
    std::vector<Var> steps(static_cast<std::size_t>(T));
    for (std::int64_t s = 0; s < T; ++s) {
      const std::int64_t t = d == 0 ? s : T - 1 - s;
      const Var xt = ag::reshape(ag::slice(x, 1, t, t + 1), {B, input_});
      const Var next = ag::gru_cell(xt, h, w.weight_ih, w.weight_hh, w.bias_ih, w.bias_hh);
      // h = keep next + (1 - keep) h: a step past the length leaves the state as it is, and
      // its output is 0
      const Var& k = keep[static_cast<std::size_t>(t)];
      h = lengths.empty() ? next : k * next + (-k + 1.0) * h;
      steps[static_cast<std::size_t>(t)] =
          ag::reshape(lengths.empty() ? h : k * h, {B, 1, hidden_});
    }
    halves.push_back(T == 0 ? Var(Tensor::zeros({B, 0, hidden_}, x.dtype()))
                            : ag::concat(steps, 1));
    finals.push_back(ag::reshape(h, {1, B, hidden_}));
  }
  Output out;
  out.outputs = D == 1 ? halves[0] : ag::concat(halves, 2);
  out.final = D == 1 ? finals[0] : ag::concat(finals, 0);
  return out;
}

}  // namespace qkv::nn
