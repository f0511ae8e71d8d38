// BLEU and alignment accuracy for the translator's evaluation.
#include "qkv/models/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "qkv/error.hpp"

namespace qkv::models {

namespace {

constexpr int kMaxOrder = 4;

std::map<Words, std::int64_t> ngrams(const Words& words, int n) {
  std::map<Words, std::int64_t> counts;
  for (std::size_t i = 0; i + static_cast<std::size_t>(n) <= words.size(); ++i) {
    ++counts[Words(words.begin() + static_cast<std::ptrdiff_t>(i),
                   words.begin() + static_cast<std::ptrdiff_t>(i) + n)];
  }
  return counts;
}

}  // namespace

double corpus_bleu(const std::vector<Words>& hypotheses, const std::vector<Words>& references) {
  if (hypotheses.size() != references.size()) {
    throw Error("references", std::to_string(hypotheses.size()) + " (one per hypothesis)",
                std::to_string(references.size()));
  }
  std::int64_t matches[kMaxOrder] = {}, totals[kMaxOrder] = {};
  std::int64_t hypothesis_length = 0, reference_length = 0;
  for (std::size_t s = 0; s < hypotheses.size(); ++s) {
    hypothesis_length += static_cast<std::int64_t>(hypotheses[s].size());
    reference_length += static_cast<std::int64_t>(references[s].size());
    for (int n = 1; n <= kMaxOrder; ++n) {
      const auto reference = ngrams(references[s], n);
      for (const auto& [gram, count] : ngrams(hypotheses[s], n)) {
        const auto it = reference.find(gram);
        matches[n - 1] += it == reference.end() ? 0 : std::min(count, it->second);
        totals[n - 1] += count;
      }
    }
  }
  double log_precision = 0;
  for (int n = 0; n < kMaxOrder; ++n) {
    if (matches[n] == 0) return 0.0;
    log_precision += std::log(static_cast<double>(matches[n]) / totals[n]) / kMaxOrder;
  }
  const double brevity =
      hypothesis_length < reference_length
          ? 1.0 - static_cast<double>(reference_length) / static_cast<double>(hypothesis_length)
          : 0.0;
  return 100.0 * std::exp(log_precision + brevity);
}

// weights [H, T', S] -> hits of the head-averaged argmax among the aligned positions
AlignmentCount alignment_hits(const Tensor& weights,
                              const std::vector<std::vector<std::int64_t>>& alignment) {
  const auto T = static_cast<std::int64_t>(alignment.size());
  if (weights.dim() != 3 || weights.size(1) < T) {
    throw Error("weights", "[H, T >= " + std::to_string(T) + ", S]", shape_string(weights.shape()));
  }
  const std::int64_t H = weights.size(0), S = weights.size(2);
  AlignmentCount count;
  for (std::int64_t t = 0; t < T; ++t) {
    std::int64_t best = 0;
    double best_weight = -1;
    for (std::int64_t s = 0; s < S; ++s) {
      double w = 0;
      for (std::int64_t h = 0; h < H; ++h) w += weights.at({h, t, s});
      if (w > best_weight) {
        best_weight = w;
        best = s;
      }
    }
    const auto& aligned = alignment[static_cast<std::size_t>(t)];
    count.hits += std::find(aligned.begin(), aligned.end(), best) != aligned.end() ? 1 : 0;
    ++count.total;
  }
  return count;
}

}  // namespace qkv::models
