#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/tensor.hpp"

namespace qkv::models {

using Words = std::vector<std::string>;

// Corpus BLEU-4 (Papineni et al.) in percent: the geometric mean of the clipped n-gram
// precisions (n = 1..4, counts summed over the corpus) times the brevity penalty
// exp(1 - r / c) when the hypotheses' total length c is below the references' r. No smoothing:
// a corpus with no matching 4-gram scores 0.
double corpus_bleu(const std::vector<Words>& hypotheses, const std::vector<Words>& references);

struct AlignmentCount {
  std::int64_t hits = 0;
  std::int64_t total = 0;
  double accuracy() const { return total == 0 ? 0.0 : static_cast<double>(hits) / total; }
};

// weights [H, T', S] (a decoder layer's cross-attention, T' >= T query rows), alignment [T]
// (the source positions of each target word) -> how often the argmax over S of the head-averaged
// weights of row t is one of alignment[t].
AlignmentCount alignment_hits(const Tensor& weights,
                              const std::vector<std::vector<std::int64_t>>& alignment);

}  // namespace qkv::models
