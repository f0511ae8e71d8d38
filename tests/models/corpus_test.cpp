// The synthetic corpus: deterministic from its seed, within its bounds, and every alignment
// consistent with the sentences (checked against a dictionary written here, not the grammar's).
#include "qkv/models/corpus.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::models {
namespace {

TEST(Corpus, SameSeedSameCorpusOtherSeedAnother) {
  const auto a = generate_corpus(200, 7), b = generate_corpus(200, 7), c = generate_corpus(200, 8);
  ASSERT_EQ(a.size(), 200u);
  int differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].source, b[i].source);
    EXPECT_EQ(a[i].target, b[i].target);
    EXPECT_EQ(a[i].alignment, b[i].alignment);
    differing += a[i].source != c[i].source ? 1 : 0;
  }
  EXPECT_GT(differing, 150);
}

TEST(Corpus, LengthsWithinBoundsAndSpread) {
  const auto corpus = generate_corpus(3000, 1);
  std::size_t shortest = 1000, longest = 0;
  for (const SentencePair& p : corpus) {
    for (const auto* side : {&p.source, &p.target}) {
      EXPECT_GE(side->size(), 3u);
      EXPECT_LE(side->size(), 40u);
      shortest = std::min(shortest, side->size());
      longest = std::max(longest, side->size());
    }
  }
  EXPECT_LE(shortest, 5u);  // the grammar reaches both ends of the range
  EXPECT_GE(longest, 30u);
  CorpusOptions tight;
  tight.min_length = 6;
  tight.max_length = 9;
  for (const SentencePair& p : generate_corpus(100, 2, tight)) {
    EXPECT_GE(p.source.size(), 6u);
    EXPECT_LE(p.target.size(), 9u);
  }
}

TEST(Corpus, VocabulariesCoverTheCorpusAndAreSmall) {
  const std::vector<std::string> s = source_words(), t = target_words();
  EXPECT_GE(s.size(), 100u);
  EXPECT_LE(s.size(), 300u);
  EXPECT_GE(t.size(), 100u);
  EXPECT_LE(t.size(), 300u);
  const std::set<std::string> ss(s.begin(), s.end()), ts(t.begin(), t.end());
  for (const SentencePair& p : generate_corpus(2000, 3)) {
    for (const auto& w : p.source) EXPECT_EQ(ss.count(w), 1u) << w;
    for (const auto& w : p.target) EXPECT_EQ(ts.count(w), 1u) << w;
  }
}

// Target word -> the source words it may be aligned with, for the words whose translation is
// fixed (content words and the grammar's multi-word cases).
const std::map<std::string, std::set<std::string>> kDictionary = {
    {"chat", {"cat"}},
    {"tapis", {"mat"}},
    {"maison", {"house"}},
    {"noir", {"black"}},
    {"grand", {"big"}},
    {"rouge", {"red"}},
    {"verra", {"will", "see"}},
    {"voit", {"sees", "see"}},
    {"vu", {"saw"}},
    {"assis", {"sat"}},
    {"quand", {"when"}},
    {"parce", {"because"}},
    {"que", {"because"}},
    {"du", {"of", "the"}},
    {"pas", {"not"}},
    {"ne", {"does", "not"}},
    {"et", {"and"}},
    {".", {"."}},
    {"il", {"he"}},
    {"elle", {"she"}},
    {"pres", {"near"}},
};

// The demo's grammar (2 clauses at most) and the bottleneck experiment's long sentences (up to 8).
class Alignments : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(Alignments, AreConsistentWithTheSentences) {
  int checked = 0, reordered = 0, one_to_two = 0, two_to_one = 0;
  CorpusOptions options;
  options.clauses = GetParam();
  options.max_length = GetParam() > 2 ? 70 : 40;
  for (const SentencePair& p : generate_corpus(2000, 4, options)) {
    ASSERT_EQ(p.alignment.size(), p.target.size());
    std::set<std::int64_t> covered;
    std::int64_t previous = -1;
    for (std::size_t t = 0; t < p.target.size(); ++t) {
      const auto& from = p.alignment[t];
      ASSERT_FALSE(from.empty()) << "target word " << t << " aligned to nothing";
      for (const std::int64_t s : from) {
        ASSERT_GE(s, 0);
        ASSERT_LT(s, static_cast<std::int64_t>(p.source.size()));
        covered.insert(s);
      }
      if (from.size() == 2) ++two_to_one;
      if (t > 0 && p.alignment[t - 1] == from) ++one_to_two;  // "a vu", "parce que"
      if (from[0] < previous) ++reordered;
      previous = from[0];
      const auto it = kDictionary.find(p.target[t]);
      if (it == kDictionary.end()) continue;
      for (const std::int64_t s : from) {
        EXPECT_EQ(it->second.count(p.source[static_cast<std::size_t>(s)]), 1u)
            << p.target[t] << " aligned to " << p.source[static_cast<std::size_t>(s)];
      }
      ++checked;
    }
    // Every source word is translated except the comma of "when A , B" and "does" of negation.
    for (std::size_t s = 0; s < p.source.size(); ++s) {
      if (covered.count(static_cast<std::int64_t>(s)) == 0) {
        EXPECT_TRUE(p.source[s] == "," || p.source[s] == "does") << p.source[s];
      }
    }
  }
  EXPECT_GT(checked, 5000);
  EXPECT_GT(reordered, 500);  // adjectives after nouns, clauses swapped
  EXPECT_GT(two_to_one, 100);
  EXPECT_GT(one_to_two, 100);
}

INSTANTIATE_TEST_SUITE_P(Clauses, Alignments, ::testing::Values(2, 8));

// The long sentences cover every 10-word bucket up to 70 words with at least a tenth of the
// sentences each, and "when A , B and C ." moves A after every later clause.
TEST(Corpus, LongSentencesSpreadOverEveryLength) {
  CorpusOptions options;
  options.clauses = 8;
  options.max_length = 70;
  const auto corpus = generate_corpus(4000, 5, options);
  std::vector<int> buckets(7, 0);
  int when_with_more = 0;
  for (const SentencePair& p : corpus) {
    ASSERT_LE(p.source.size(), 70u);
    ASSERT_LE(p.target.size(), 70u);
    ++buckets[std::min<std::size_t>((p.source.size() - 1) / 10, 6)];
    if (p.source[0] != "when") continue;
    const auto comma = std::find(p.source.begin(), p.source.end(), ",");
    ASSERT_NE(comma, p.source.end());
    const bool more = std::find(comma, p.source.end(), "and") != p.source.end() ||
                      std::find(comma, p.source.end(), "because") != p.source.end();
    if (!more) continue;
    ++when_with_more;
    // "quand" comes after every link word of the clauses that followed the comma.
    const auto quand = std::find(p.target.begin(), p.target.end(), "quand");
    ASSERT_NE(quand, p.target.end());
    EXPECT_EQ(std::find(quand, p.target.end(), "et"), p.target.end());
    EXPECT_EQ(std::find(quand, p.target.end(), "parce"), p.target.end());
  }
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_GE(buckets[b], 4000 / 20) << "source words " << 10 * b + 1 << " to " << 10 * b + 10;
  }
  EXPECT_GT(when_with_more, 200);
  // clauses = 2 is the default (the demo's grammar); fewer are refused.
  CorpusOptions two;
  two.clauses = 2;
  const auto a = generate_corpus(50, 9), b = generate_corpus(50, 9, two);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].source, b[i].source);
  two.clauses = 1;
  EXPECT_THROW(generate_corpus(1, 1, two), Error);
}

TEST(Corpus, TheSeedsExample) {
  // The grammar has the running example's words: a translator trained on it can answer it.
  const std::vector<std::string> words = tokenize("The black cat sat on the mat");
  EXPECT_EQ(join_words(words), "the black cat sat on the mat .");
  const std::vector<std::string> s = source_words();
  for (const auto& w : words) EXPECT_TRUE(std::binary_search(s.begin(), s.end(), w)) << w;
  EXPECT_EQ(join_words(tokenize("when he sleeps, she sings.")), "when he sleeps , she sings .");
}

TEST(Vocabulary, EncodesDecodesAndRejects) {
  const Vocabulary v({"le", "chat"});
  EXPECT_EQ(v.size(), 6);
  EXPECT_EQ(v.encode({"le", "chat", "chien"}), (std::vector<std::int64_t>{4, 5, Vocabulary::kUnk}));
  EXPECT_EQ(v.decode({Vocabulary::kBos, 4, 5, Vocabulary::kEos, 4}),
            (std::vector<std::string>{"le", "chat"}));
  EXPECT_THROW(v.word(6), Error);
  EXPECT_THROW(Vocabulary({"a", "a"}), Error);
  EXPECT_THROW(generate_corpus(-1, 0), Error);
  CorpusOptions impossible;
  impossible.max_length = 2;
  EXPECT_THROW(generate_corpus(1, 0, impossible), Error);
}

}  // namespace
}  // namespace qkv::models
