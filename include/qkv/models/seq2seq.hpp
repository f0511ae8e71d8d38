#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/autograd.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/tensor.hpp"

// What training, decoding and evaluation need of a sequence-to-sequence model: the Transformer
// translator (translator.hpp) and the recurrent ones of the bottleneck experiment
// (rnn_translator.hpp) alike, so that train(), greedy_decode(), beam_search() and evaluate() treat
// them the same way.
namespace qkv::models {

using autograd::Var;

// Token ids of B sequences padded to one length: ids [B, T] row-major, 0 (<pad>) after each
// sequence's length.
struct Batch {
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> lengths;  // [B]
  std::int64_t batch = 0;
  std::int64_t length = 0;  // T, the longest sequence
};
Batch make_batch(const std::vector<std::vector<std::int64_t>>& sequences);

// What incremental decoding keeps between steps for N rows (sentences, or sentences x beams).
class DecoderState {
 public:
  DecoderState() = default;
  DecoderState(const DecoderState&) = delete;
  DecoderState& operator=(const DecoderState&) = delete;
  virtual ~DecoderState() = default;

  virtual std::int64_t rows() const = 0;
  // Row i becomes the old row rows[i] (beam search keeps the best hypotheses); rows may repeat
  // and change the row count.
  virtual void select(const std::vector<std::int64_t>& rows) = 0;
};

class Seq2Seq : public nn::Module {
 public:
  virtual std::int64_t target_vocab() const = 0;
  virtual std::int64_t max_length() const = 0;  // the most target tokens a decode may produce
  // Whether decode() and step() give cross-attention weights (an encoder-decoder without
  // attention has none).
  virtual bool attends() const = 0;

  // source ids [B, S] -> memory (the model's encoding of the source).
  virtual Var encode(const Batch& source) = 0;
  // Teacher forcing: memory from encode(source), target inputs [B, T] (<bos> y1 .. y_{T-1}) ->
  // logits [B, T, V]. With cross_weights (and attends()): the attention over the source that
  // predicted each position, [B, H, T, S] (H heads; 1 for additive attention).
  virtual Var decode(const Var& memory, const Batch& source, const Batch& target_in,
                     Tensor* cross_weights = nullptr) = 0;

  // Incremental decoding: memory from encode() -> the state for up to max_length target tokens.
  virtual std::unique_ptr<DecoderState> begin_decoding(
      const Var& memory, const std::vector<std::int64_t>& source_lengths,
      std::int64_t max_length) = 0;
  // tokens [N], each row's next input token -> logits [N, V] for the token after it. With
  // cross_weights (and attends()): this step's attention [N, H, S].
  virtual Tensor step(DecoderState& state, const std::vector<std::int64_t>& tokens,
                      Tensor* cross_weights = nullptr) = 0;
};

}  // namespace qkv::models
