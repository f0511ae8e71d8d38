#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

// A synthetic parallel corpus for the translator demo: an English-like source and a French-like
// target from a small grammar with real word-order differences, generated in code from a seed, with
// the true word alignment of every pair.
namespace qkv::models {

struct SentencePair {
  std::vector<std::string> source;
  std::vector<std::string> target;
  // [target length]: the source positions each target word translates (one or two; never empty).
  std::vector<std::vector<std::int64_t>> alignment;
};

struct CorpusOptions {
  std::int64_t min_length = 3;   // words, punctuation included, on both sides
  std::int64_t max_length = 40;  // words, on both sides
  // The most clauses a sentence joins. 2: the demo's grammar (one clause, or two joined by "and",
  // "because" or "when"). More: the long sentences of the bottleneck experiment, 1 to `clauses`
  // clauses (uniformly), each after the first joined by "and" or "because", a quarter of those
  // of two or more opening with "when" (see generate_corpus); 8 reaches 70 words.
  std::int64_t clauses = 2;
};

// What the grammar does to word order and word counts:
//   - adjectives follow the noun:        "the black cat"   -> "le chat noir"
//   - determiners agree with the noun:   "the house"       -> "la maison"
//   - "when A , B" puts B first:         "when A , B ."    -> "B quand A ."
//   - negation surrounds the verb:       "does not see"    -> "ne voit pas"
//   - one word to two:                   "saw"             -> "a vu", "because" -> "parce que"
//   - two words to one:                  "will see"        -> "verra", "of the" -> "du"
// `count` pairs drawn from Generator(seed); every pair's lengths lie in the options' bounds. The
// same seed gives the same corpus on every machine.
std::vector<SentencePair> generate_corpus(std::int64_t count, std::uint64_t seed,
                                          const CorpusOptions& options = {});

// Every word the grammar can emit on each side (punctuation included), sorted.
std::vector<std::string> source_words();
std::vector<std::string> target_words();

// Words split on spaces, and joined back.
std::vector<std::string> split_words(std::string_view text);
// What a user types -> the corpus' words: lower case, "," and "." split off as words of their
// own, and a final "." added when the text lacks one ("The cat sat" -> the cat sat .).
std::vector<std::string> tokenize(std::string_view text);
std::string join_words(const std::vector<std::string>& words);

// Token ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 <unk>, then the words in the order given.
class Vocabulary {
 public:
  static constexpr std::int64_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;

  explicit Vocabulary(const std::vector<std::string>& words);
  std::int64_t size() const noexcept { return static_cast<std::int64_t>(words_.size()); }
  std::int64_t id(const std::string& word) const;  // kUnk for a word not in the vocabulary
  const std::string& word(std::int64_t id) const;  // throws qkv::Error out of range
  std::vector<std::int64_t> encode(const std::vector<std::string>& words) const;
  // Stops at the first <eos>; <pad> and <bos> are skipped.
  std::vector<std::string> decode(const std::vector<std::int64_t>& ids) const;
  const std::vector<std::string>& words() const noexcept { return words_; }

 private:
  std::vector<std::string> words_;
  std::unordered_map<std::string, std::int64_t> ids_;
};

}  // namespace qkv::models
