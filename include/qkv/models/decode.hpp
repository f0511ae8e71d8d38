#pragma once

#include <cstdint>
#include <vector>

#include "qkv/models/seq2seq.hpp"
#include "qkv/tensor.hpp"

namespace qkv::models {

struct DecodeOptions {
  std::int64_t max_length = 0;  // target tokens, <eos> included; 0: the model's max_length
  // Keep keys and values between steps (the KV cache). false recomputes the decoder over the
  // whole prefix at every step: the same tokens and logits, for the test that says so.
  bool use_cache = true;
  bool keep_weights = false;  // keep the last layer's cross-attention of every step
};

struct Translation {
  std::vector<std::int64_t> tokens;  // without <bos> and <eos>
  double log_probability = 0;        // sum over the tokens and <eos> (when reached)
  double score = 0;                  // what beam search ranked by (log_probability normalized)
  // [Hq, T, S]: the last decoder layer's cross-attention for each emitted token (and <eos>),
  // when keep_weights.
  Tensor cross_weights;
  // [T, V] logits of every step (greedy only, for the cached-vs-uncached test).
  Tensor logits;
  std::vector<double> step_seconds;  // wall time of each decoder step (KV cache: near constant)
};

// Greedy decoding of a batch: at each step every unfinished row takes its most likely token.
// source ids [B, S] -> B translations.
std::vector<Translation> greedy_decode(Seq2Seq& model, const Batch& source,
                                       const DecodeOptions& options = {});

struct BeamOptions {
  std::int64_t beam = 4;
  // GNMT's length penalty: hypotheses rank by log p / ((5 + length) / 6)^alpha, so longer
  // hypotheses are not punished for having more terms.
  double length_alpha = 0.6;
  DecodeOptions decode;
};

// Beam search for one sentence: source ids [S] -> the best translation. Beams share the source's
// cross-attention keys and values; the cache follows each surviving hypothesis.
Translation beam_search(Seq2Seq& model, const std::vector<std::int64_t>& source,
                        const BeamOptions& options = {});

}  // namespace qkv::models
