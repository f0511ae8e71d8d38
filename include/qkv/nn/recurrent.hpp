#pragma once

#include <cstdint>
#include <vector>

#include "qkv/autograd/ops.hpp"
#include "qkv/nn/module.hpp"

namespace qkv::nn {

// One GRU layer over batches of sequences, PyTorch's nn.GRU(input_size, hidden_size,
// batch_first=True, bidirectional) with one layer: each step is autograd::gru_cell. Parameters
// under PyTorch's names, so its state_dict loads: "weight_ih_l0" [3H, I], "weight_hh_l0" [3H, H],
// "bias_ih_l0", "bias_hh_l0" [3H], and the same with "_reverse" for the backward direction;
// PyTorch's initialization, uniform in [-1/sqrt(H), 1/sqrt(H)).
class GRU : public Module {
 public:
  GRU(std::int64_t input_size, std::int64_t hidden_size, Generator& generator,
      bool bidirectional = false, bool bias = true, DType dtype = DType::f32);

  struct Output {
    Var outputs;  // [B, T, D H]: each step's state, the forward direction's then the backward's
                  // (D = 2 when bidirectional), 0 past each sequence's length
    Var final;    // [D, B, H]: each direction's last state (the forward one at step length - 1,
                  // the backward one at step 0)
  };
  // x [B, T, I]; h0 [D, B, H] (undefined: zeros); lengths: per batch, in [0, T] (empty: T), as
  // PyTorch's pack_padded_sequence: the steps past a length are not run.
  Output forward(const Var& x, const Var& h0 = {},
                 const std::vector<std::int64_t>& lengths = {}) const;

  std::int64_t hidden_size() const noexcept { return hidden_; }
  std::int64_t directions() const noexcept { return bidirectional_ ? 2 : 1; }

 private:
  struct Direction {
    Var weight_ih, weight_hh, bias_ih, bias_hh;
  };
  std::int64_t input_, hidden_;
  bool bidirectional_;
  Direction forward_, backward_;
};

}  // namespace qkv::nn
