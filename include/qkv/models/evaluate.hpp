#pragma once

#include <cstdint>
#include <vector>

#include "qkv/models/corpus.hpp"
#include "qkv/models/metrics.hpp"
#include "qkv/models/seq2seq.hpp"

namespace qkv::models {

struct EvaluationOptions {
  std::int64_t batch_size = 64;  // sentences decoded together (greedy)
  std::int64_t beam = 1;         // 1: greedy, batched; more: beam search sentence by sentence
  double length_alpha = 0.6;
  // Source-length buckets for BLEU and exact match: [bounds[i], bounds[i + 1]).
  std::vector<std::int64_t> bucket_bounds = {3, 11, 21, 31, 41};
  // Keep the teacher-forced cross-attention of the first this many pairs (Evaluation::attention).
  std::int64_t keep_attention = 0;
};

// The last decoder layer's cross-attention while the decoder reads the reference, for the first
// EvaluationOptions::keep_attention pairs: weights [n, H, T, S] (f32, zero past each pair's
// lengths), row t of pair i predicting target word t (row T_i, the last, predicts the end);
// query_lengths[i] = its target words + 1, key_lengths[i] = its source tokens. For
// qkv::viz::diagnose with the pairs' alignments.
struct KeptAttention {
  Tensor weights;
  std::vector<std::int64_t> query_lengths, key_lengths;
};

struct BucketScore {
  std::int64_t min_length = 0, max_length = 0;  // source words, inclusive
  std::int64_t sentences = 0;
  double exact_match = 0;  // fraction
  double bleu = 0;         // percent
};

struct Evaluation {
  std::int64_t sentences = 0;
  double exact_match = 0;         // fraction of translations equal to the reference
  double bleu = 0;                // corpus BLEU-4, percent
  double alignment_accuracy = 0;  // see alignment_hits; teacher-forced on the references
  std::vector<BucketScore> buckets;
  std::vector<Words> hypotheses;  // one per sentence
  double seconds = 0;             // decoding, alignment excluded
  KeptAttention attention;        // with EvaluationOptions::keep_attention
};

// Translates every pair's source and scores it against the target. Alignment: the last decoder
// layer's cross-attention, averaged over heads, while the decoder reads the reference (so every
// row belongs to a known target word): how often its argmax is a word the target word translates.
Evaluation evaluate(Seq2Seq& model, const Vocabulary& source, const Vocabulary& target,
                    const std::vector<SentencePair>& pairs, const EvaluationOptions& options = {});

}  // namespace qkv::models
