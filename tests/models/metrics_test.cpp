// BLEU against hand-computed values, and the alignment argmax.
#include "qkv/models/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "qkv/error.hpp"
#include "qkv/models/corpus.hpp"

namespace qkv::models {
namespace {

TEST(Bleu, IdenticalIsHundredDisjointIsZero) {
  const std::vector<Words> refs = {split_words("le chat noir est assis sur le tapis .")};
  EXPECT_NEAR(corpus_bleu(refs, refs), 100.0, 1e-9);
  EXPECT_EQ(corpus_bleu({split_words("a b c d e")}, refs), 0.0);
  EXPECT_THROW(corpus_bleu(refs, {}), Error);
}

TEST(Bleu, MatchesAHandComputation) {
  // hypothesis "le chat est sur le tapis" (6 words) against "le chat noir est sur le tapis" (7):
  // 1-grams 6/6, 2-grams 4/5 (le chat, est sur, sur le, le tapis), 3-grams 2/4 (est sur le,
  // sur le tapis), 4-grams 1/3 (est sur le tapis); brevity exp(1 - 7/6).
  const double expected =
      100 * std::exp(1.0 - 7.0 / 6.0) * std::pow(1.0 * 0.8 * 0.5 * (1.0 / 3.0), 0.25);
  EXPECT_NEAR(corpus_bleu({split_words("le chat est sur le tapis")},
                          {split_words("le chat noir est sur le tapis")}),
              expected, 1e-9);
  // Clipping: "le le le le" against "le chat": 1-gram precision 1/4 counts "le" once.
  EXPECT_EQ(corpus_bleu({split_words("le le le le")}, {split_words("le chat")}), 0.0);
}

TEST(Alignment, CountsArgmaxOfTheHeadAverage) {
  // 2 heads, 2 target rows, 3 source words. Row 0: head 0 says 0, head 1 says 2 strongly -> 2.
  // Row 1: both heads peak at 1.
  const Tensor w = Tensor::from_values({2, 2, 3}, {0.5, 0.3, 0.2, 0.1, 0.8, 0.1,  //
                                                   0.0, 0.1, 0.9, 0.2, 0.7, 0.1});
  AlignmentCount c = alignment_hits(w, {{2}, {1}});
  EXPECT_EQ(c.hits, 2);
  EXPECT_EQ(c.total, 2);
  c = alignment_hits(w, {{0}, {0, 1}});
  EXPECT_EQ(c.hits, 1);
  EXPECT_DOUBLE_EQ(c.accuracy(), 0.5);
  EXPECT_THROW(alignment_hits(w, {{0}, {0}, {0}}), Error);
}

}  // namespace
}  // namespace qkv::models
