#pragma once

// The copy task the translator tests train on (target = source, 3 to 8 words of kSymbols), and
// the teacher-forced log probability that checks what beam search reports, for any Seq2Seq.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "qkv/autograd/var.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/models/seq2seq.hpp"
#include "qkv/models/train.hpp"
#include "qkv/models/translator.hpp"
#include "qkv/philox.hpp"

namespace qkv::models::test_support {

inline constexpr std::int64_t kSymbols = 12;  // copy-task words: ids 4 .. 4 + kSymbols

// The small translator the copy-task tests train: one layer each side, d_model 32, two heads.
inline TranslatorConfig small_translator() {
  TranslatorConfig c;
  c.source_vocab = c.target_vocab = 4 + kSymbols;
  c.d_model = 32;
  c.heads = 2;
  c.encoder_layers = c.decoder_layers = 1;
  c.dim_feedforward = 64;
  c.max_length = 16;
  c.seed = 3;
  return c;
}

inline std::vector<Example> copy_task(std::int64_t count, std::uint64_t seed) {
  Generator g(seed);
  std::vector<Example> out;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t n = 3 + static_cast<std::int64_t>(g.next_u32() % 6);
    Example e;
    for (std::int64_t t = 0; t < n; ++t) e.source.push_back(4 + g.next_u32() % kSymbols);
    e.target = e.source;
    out.push_back(e);
  }
  return out;
}

// Teacher-forced log probability of tokens + <eos> for one source, in f64 from the logits.
inline double forced_log_probability(Seq2Seq& model, const std::vector<std::int64_t>& source,
                                     const std::vector<std::int64_t>& tokens) {
  autograd::NoGrad no_grad;
  std::vector<std::int64_t> in = {Vocabulary::kBos};
  in.insert(in.end(), tokens.begin(), tokens.end());
  const Batch s = make_batch({source}), t = make_batch({in});
  const Tensor logits = model.decode(model.encode(s), s, t).value();  // [1, T, V]
  const std::int64_t V = logits.size(2);
  double total = 0;
  for (std::int64_t step = 0; step < t.length; ++step) {
    const std::int64_t next =
        step < static_cast<std::int64_t>(tokens.size()) ? tokens[step] : Vocabulary::kEos;
    double max = -1e300, sum = 0;
    for (std::int64_t v = 0; v < V; ++v) max = std::max(max, logits.at({0, step, v}));
    for (std::int64_t v = 0; v < V; ++v) sum += std::exp(logits.at({0, step, v}) - max);
    total += logits.at({0, step, next}) - max - std::log(sum);
  }
  return total;
}

}  // namespace qkv::models::test_support
