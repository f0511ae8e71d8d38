#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/models/seq2seq.hpp"
#include "qkv/nn/attention.hpp"
#include "qkv/nn/layers.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/tensor.hpp"

// The seq2seq translator of the demo: a pre-norm Transformer encoder-decoder built from qkv's nn
// modules (TransformerEncoderLayer, TransformerDecoderLayer), trained with teacher forcing,
// decoded step by step with a KV cache.
namespace qkv::models {

using autograd::Var;

struct TranslatorConfig {
  std::int64_t source_vocab = 0;
  std::int64_t target_vocab = 0;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t encoder_layers = 2;
  std::int64_t decoder_layers = 2;
  std::int64_t dim_feedforward = 512;
  double dropout = 0.0;
  std::int64_t max_length = 128;  // longest sequence the sinusoidal position table covers
  std::uint64_t seed = 0;         // parameter initialization and dropout streams
};

// What incremental decoding keeps between steps, for N rows (sentences, or sentences x beams):
// each decoder layer's self-attention keys and values so far and its cross-attention keys and
// values, computed once from the encoder output.
struct DecoderCache {
  std::vector<std::int64_t> source_lengths;   // [N]
  std::vector<nn::DecoderLayerCache> layers;  // one per decoder layer
  std::int64_t length = 0;                    // tokens decoded so far (the <bos> included)

  std::int64_t rows() const { return static_cast<std::int64_t>(source_lengths.size()); }
  // Row i of every tensor becomes the old row rows[i] (beam search keeps the best hypotheses);
  // rows may repeat and change the row count.
  void select(const std::vector<std::int64_t>& rows);
};

class Translator : public Seq2Seq {
 public:
  explicit Translator(const TranslatorConfig& config);
  const TranslatorConfig& config() const noexcept { return config_; }

  // source ids [B, S] -> memory [B, S, E] (padding ignored through the source lengths). Where no
  // backward follows (NoGrad), a batch with enough padding is encoded with its words packed
  // together (ops::pack_rows): the same bits at every word, and 0 past each length, where nothing
  // reads the memory.
  Var encode(const Batch& source) override;
  // Teacher forcing: memory [B, S, E], target inputs [B, T] (<bos> y1 .. y_{T-1}) -> logits
  // [B, T, V]. With cross_weights, the last decoder layer's cross-attention [B, H, T, S].
  Var decode(const Var& memory, const Batch& source, const Batch& target_in,
             Tensor* cross_weights = nullptr) override;

  // Incremental decoding. memory [N, S, E] -> a cache for up to max_length target tokens.
  DecoderCache start_decoding(const Var& memory, const std::vector<std::int64_t>& source_lengths,
                              std::int64_t max_length) const;
  // tokens [N], the next input token of each row -> logits [N, V] for the token after it. With
  // cross_weights, the last layer's cross-attention of this step [N, H, S].
  Tensor step(DecoderCache& cache, const std::vector<std::int64_t>& tokens,
              Tensor* cross_weights = nullptr);

  // Seq2Seq: the same, with the cache inside a DecoderState.
  std::int64_t target_vocab() const override { return config_.target_vocab; }
  std::int64_t max_length() const override { return config_.max_length; }
  bool attends() const override { return true; }
  std::unique_ptr<DecoderState> begin_decoding(const Var& memory,
                                               const std::vector<std::int64_t>& source_lengths,
                                               std::int64_t max_length) override;
  Tensor step(DecoderState& state, const std::vector<std::int64_t>& tokens,
              Tensor* cross_weights = nullptr) override;

 private:
  // One step of the rows in `cache` (the whole cache, or views of some of its rows), the token at
  // `position`: tokens [n] -> logits [n, V], with cross_weights [n, H, S].
  Tensor step_rows(DecoderCache& cache, const std::vector<std::int64_t>& tokens,
                   std::int64_t position, Tensor* cross_weights);
  // ids [B, T] from position start -> embeddings plus positions [B, T, E]
  Var embed(const nn::Embedding& table, const std::vector<std::int64_t>& ids, std::int64_t batch,
            std::int64_t length, std::int64_t start) const;

  TranslatorConfig config_;
  Generator generator_;
  nn::Embedding source_embedding_, target_embedding_;
  Tensor positions_;  // [max_length, E] sinusoidal
  std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> encoder_;
  std::vector<std::unique_ptr<nn::TransformerDecoderLayer>> decoder_;  // pre-norm
  nn::LayerNorm encoder_norm_, decoder_norm_;
  nn::Linear output_;
};

}  // namespace qkv::models
