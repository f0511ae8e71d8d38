#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/models/seq2seq.hpp"
#include "qkv/nn/layers.hpp"
#include "qkv/nn/recurrent.hpp"
#include "qkv/tensor.hpp"

// The recurrent translators of the bottleneck experiment (`qkv demo bottleneck`), after Bahdanau,
// Cho and Bengio 2014 ("Neural Machine Translation by Jointly Learning to Align and Translate"):
//
// - both read the source with a bidirectional GRU: annotations h_j = [fwd h_j; bwd h_j] [2H];
// - RNNencdec (attention = false, Cho et al. 2014) hands the decoder one fixed vector, the summary
//   c = [fwd h_last; bwd h_first] [2H], at every step: the whole sentence through 2H numbers;
// - RNNsearch (attention = true) gives step i its own context c_i = sum_j a_ij h_j, with
//   a_ij = softmax_j(v^T tanh(W_a s_{i-1} + U_a h_j)) (additive attention) over the source words;
// - the decoder is a GRU over [E(y_{i-1}); c_i] from s_0 = tanh(W_s c), and the output layer
//   reads the state, the context and the previous word: logits = W_y tanh(W_o [s_i; c_i;
//   E(y_{i-1})] + b_o) (the paper's deep output, tanh in place of maxout).
namespace qkv::models {

struct RnnTranslatorConfig {
  std::int64_t source_vocab = 0;
  std::int64_t target_vocab = 0;
  std::int64_t embedding = 128;   // E, the word vectors of both languages
  std::int64_t hidden = 128;      // H, each encoder direction and the decoder's state
  std::int64_t alignment = 128;   // A, the additive attention's hidden size (attention only)
  std::int64_t output = 128;      // the deep output layer's size
  bool attention = true;          // RNNsearch; false: RNNencdec
  std::int64_t max_length = 128;  // the most target tokens a decode produces
  std::uint64_t seed = 0;         // parameter initialization
};

class RnnTranslator : public Seq2Seq {
 public:
  explicit RnnTranslator(const RnnTranslatorConfig& config);
  const RnnTranslatorConfig& config() const noexcept { return config_; }
  // How many parameters a model of this config has, without building it (the bottleneck
  // experiment sizes the recurrent models to the Transformer's count with it).
  static std::int64_t parameter_count(const RnnTranslatorConfig& config);

  std::int64_t target_vocab() const override { return config_.target_vocab; }
  std::int64_t max_length() const override { return config_.max_length; }
  bool attends() const override { return config_.attention; }

  // source ids [B, S] -> memory [B, S + 1, 2H]: the annotations of the S positions (0 past each
  // source's length), then the summary c.
  Var encode(const Batch& source) override;
  // memory [B, S + 1, 2H], target inputs [B, T] -> logits [B, T, V]; cross_weights (attention
  // only) [B, 1, T, S], 0 past each source's length.
  Var decode(const Var& memory, const Batch& source, const Batch& target_in,
             Tensor* cross_weights = nullptr) override;
  std::unique_ptr<DecoderState> begin_decoding(const Var& memory,
                                               const std::vector<std::int64_t>& source_lengths,
                                               std::int64_t max_length) override;
  // tokens [N] -> logits [N, V]; cross_weights (attention only) [N, 1, S].
  Tensor step(DecoderState& state, const std::vector<std::int64_t>& tokens,
              Tensor* cross_weights = nullptr) override;

 private:
  // What one decoder step reads of the source for N rows.
  struct Source {
    Var annotations;  // [N, S, 2H]
    Var keys;         // [N, S, A]: U_a h_j (attention only)
    Tensor padding;   // [N, 1, S] boolean: true past each source's length (attention only)
    Var summary;      // [N, 2H]
  };
  struct Step {
    Var state;    // s_i [N, H]
    Var output;   // tanh(W_o [s_i; c_i; E(y_{i-1})] + b_o) [N, O]
    Var weights;  // a_i [N, 1, S] (attention only)
  };
  // memory [N, S + 1, 2H] and the source lengths -> what the steps read.
  Source source_of(const Var& memory, const std::vector<std::int64_t>& lengths) const;
  // s_{i-1} [N, H], E(y_{i-1}) [N, E] -> step i.
  Step advance(const Source& source, const Var& state, const Var& word) const;

  RnnTranslatorConfig config_;
  Generator generator_;
  nn::Embedding source_embedding_, target_embedding_;
  nn::GRU encoder_;
  nn::Linear init_;                                // W_s: c [2H] -> s_0 [H]
  std::unique_ptr<nn::Linear> query_, key_;        // W_a [H -> A], U_a [2H -> A] (attention only)
  Var score_;                                      // v [A, 1] (attention only)
  Var weight_ih_, weight_hh_, bias_ih_, bias_hh_;  // the decoder's GRU cell
  nn::Linear deep_, output_;                       // W_o [H + 2H + E -> O], W_y [O -> V]
};

}  // namespace qkv::models
