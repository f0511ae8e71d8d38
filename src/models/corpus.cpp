// The synthetic English -> French-like corpus: a small grammar rendered on both sides at once, so
// that every target word knows which source words it translates.
#include "qkv/models/corpus.hpp"

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/philox.hpp"

namespace qkv::models {

namespace {

struct Noun {
  const char* en;
  const char* fr;
  bool feminine;
};

struct Adjective {
  const char* en;
  const char* fr;
};

struct Verb {
  const char* base;     // "see": after "does not" and "will"
  const char* third;    // "sees"
  const char* past;     // "saw"
  const char* present;  // "voit"
  const char* aux;      // "a": the past is aux + participle
  const char* participle;
  const char* future;  // "verra"
  bool transitive;
};

constexpr Noun kNouns[] = {
    {"cat", "chat", false},           {"dog", "chien", false},        {"mat", "tapis", false},
    {"house", "maison", true},        {"bird", "oiseau", false},      {"tree", "arbre", false},
    {"man", "homme", false},          {"woman", "femme", true},       {"child", "enfant", false},
    {"car", "voiture", true},         {"book", "livre", false},       {"table", "table", true},
    {"garden", "jardin", false},      {"river", "riviere", true},     {"city", "ville", true},
    {"teacher", "professeur", false}, {"student", "etudiante", true}, {"friend", "ami", false},
    {"boat", "bateau", false},        {"horse", "cheval", false},     {"apple", "pomme", true},
    {"door", "porte", true},          {"window", "fenetre", true},    {"road", "route", true},
    {"king", "roi", false},           {"queen", "reine", true},       {"doctor", "medecin", false},
    {"farmer", "fermier", false},     {"baker", "boulanger", false},  {"letter", "lettre", true},
    {"song", "chanson", true},        {"girl", "fille", true},        {"boy", "garcon", false},
    {"mountain", "montagne", true},   {"forest", "foret", true},      {"fish", "poisson", false},
    {"bread", "pain", false},         {"cheese", "fromage", false},   {"chair", "chaise", true},
    {"bridge", "pont", false},
};

constexpr Adjective kAdjectives[] = {
    {"black", "noir"},    {"white", "blanc"}, {"big", "grand"},   {"small", "petit"},
    {"red", "rouge"},     {"green", "vert"},  {"old", "vieux"},   {"young", "jeune"},
    {"happy", "heureux"}, {"sad", "triste"},  {"blue", "bleu"},   {"quiet", "calme"},
    {"fast", "rapide"},   {"slow", "lent"},   {"strong", "fort"}, {"cold", "froid"},
    {"warm", "chaud"},    {"new", "neuf"},    {"dark", "sombre"}, {"clever", "malin"},
};

constexpr Verb kVerbs[] = {
    {"see", "sees", "saw", "voit", "a", "vu", "verra", true},
    {"eat", "eats", "ate", "mange", "a", "mange", "mangera", true},
    {"like", "likes", "liked", "aime", "a", "aime", "aimera", true},
    {"find", "finds", "found", "trouve", "a", "trouve", "trouvera", true},
    {"take", "takes", "took", "prend", "a", "pris", "prendra", true},
    {"watch", "watches", "watched", "regarde", "a", "regarde", "regardera", true},
    {"follow", "follows", "followed", "suit", "a", "suivi", "suivra", true},
    {"open", "opens", "opened", "ouvre", "a", "ouvert", "ouvrira", true},
    {"read", "reads", "read", "lit", "a", "lu", "lira", true},
    {"paint", "paints", "painted", "peint", "a", "peint", "peindra", true},
    {"sleep", "sleeps", "slept", "dort", "a", "dormi", "dormira", false},
    {"run", "runs", "ran", "court", "a", "couru", "courra", false},
    {"sing", "sings", "sang", "chante", "a", "chante", "chantera", false},
    {"wait", "waits", "waited", "attend", "a", "attendu", "attendra", false},
    {"fall", "falls", "fell", "tombe", "est", "tombe", "tombera", false},
    {"arrive", "arrives", "arrived", "arrive", "est", "arrive", "arrivera", false},
    {"sit", "sits", "sat", "assied", "est", "assis", "assiera", false},
};

// Determiners: English, French masculine, French feminine.
struct Determiner {
  const char* en;
  const char* masculine;
  const char* feminine;
};
constexpr Determiner kDeterminers[] = {
    {"the", "le", "la"},           {"a", "un", "une"}, {"this", "ce", "cette"}, {"my", "mon", "ma"},
    {"every", "chaque", "chaque"},
};

// Prepositions other than "of", which fuses with "the".
struct Preposition {
  const char* en;
  const char* fr;  // may be two words ("pres de")
};
constexpr Preposition kPrepositions[] = {
    {"on", "sur"}, {"in", "dans"}, {"with", "avec"}, {"near", "pres de"}, {"under", "sous"},
};

constexpr const char* kPronouns[][2] = {{"he", "il"}, {"she", "elle"}};

template <typename T, std::size_t N>
const T& pick(const T (&items)[N], Generator& g) {
  return items[g.next_u32() % N];
}

bool chance(Generator& g, double p) { return g.next_uniform() < p; }

// Both sides of a pair under construction. source() appends a source word and returns its
// position; target() appends target words (split on spaces), each aligned to `from`.
class Pair {
 public:
  std::int64_t source(const std::string& word) {
    pair_.source.push_back(word);
    return static_cast<std::int64_t>(pair_.source.size()) - 1;
  }
  void target(const std::string& words, const std::vector<std::int64_t>& from) {
    for (std::string& w : split_words(words)) {
      pair_.target.push_back(std::move(w));
      pair_.alignment.push_back(from);
    }
  }
  SentencePair take() { return std::move(pair_); }

 private:
  SentencePair pair_;
};

// A sentence is drawn as a structure first, because the two sides order it differently.
struct NounPhrase {
  int determiner = 0;  // index into kDeterminers; -1 for a pronoun
  int pronoun = 0;
  std::vector<int> adjectives;
  int noun = 0;
  int preposition = -1;                // -1 none; kOf for "of the"; else index into kPrepositions
  std::vector<NounPhrase> complement;  // zero or one phrase after the preposition
};
constexpr int kOf = 100;

enum class Tense { present, past, future, negated };

struct Clause {
  NounPhrase subject;
  Tense tense = Tense::present;
  int verb = 0;
  std::vector<NounPhrase> object;  // zero or one
  int place_preposition = 0;       // "sleeps on the mat": index into kPrepositions
  std::vector<NounPhrase> place;   // zero or one, after an intransitive verb
};

enum class Joint { single, conjunction, when, because };

NounPhrase draw_noun_phrase(Generator& g, int depth, bool allow_pronoun) {
  NounPhrase np;
  if (allow_pronoun && chance(g, 0.15)) {
    np.determiner = -1;
    np.pronoun = static_cast<int>(g.next_u32() % 2);
    return np;
  }
  np.determiner = static_cast<int>(g.next_u32() % std::size(kDeterminers));
  const double r = g.next_uniform();
  const int adjectives = r < 0.45 ? 0 : r < 0.8 ? 1 : 2;
  for (int a = 0; a < adjectives; ++a) {
    int adjective;
    do {
      adjective = static_cast<int>(g.next_u32() % std::size(kAdjectives));
    } while (std::find(np.adjectives.begin(), np.adjectives.end(), adjective) !=
             np.adjectives.end());
    np.adjectives.push_back(adjective);
  }
  np.noun = static_cast<int>(g.next_u32() % std::size(kNouns));
  if (depth > 0 && chance(g, 0.3)) {
    np.preposition =
        chance(g, 0.4) ? kOf : static_cast<int>(g.next_u32() % std::size(kPrepositions));
    np.complement.push_back(draw_noun_phrase(g, depth - 1, false));
    if (np.preposition == kOf) np.complement[0].determiner = 0;  // "of the" only
  }
  return np;
}

Clause draw_clause(Generator& g) {
  Clause c;
  c.subject = draw_noun_phrase(g, 1, true);
  const double r = g.next_uniform();
  c.tense = r < 0.4    ? Tense::present
            : r < 0.65 ? Tense::past
            : r < 0.85 ? Tense::future
                       : Tense::negated;
  c.verb = static_cast<int>(g.next_u32() % std::size(kVerbs));
  if (kVerbs[c.verb].transitive) {
    c.object.push_back(draw_noun_phrase(g, 1, false));
  } else if (chance(g, 0.6)) {
    c.place_preposition = static_cast<int>(g.next_u32() % std::size(kPrepositions));
    c.place.push_back(draw_noun_phrase(g, 0, false));
  }
  return c;
}

// Source positions of a rendered noun phrase, kept for its target side.
struct NounPhraseSource {
  std::int64_t determiner = -1, noun = -1, of = -1;
  std::vector<std::int64_t> adjectives;
  std::vector<NounPhraseSource> complement;
};

// English: det adj* noun [prep np]
NounPhraseSource render_source(const NounPhrase& np, Pair& pair) {
  NounPhraseSource s;
  if (np.determiner < 0) {
    s.noun = pair.source(kPronouns[np.pronoun][0]);
    return s;
  }
  s.determiner = pair.source(kDeterminers[np.determiner].en);
  for (const int a : np.adjectives) s.adjectives.push_back(pair.source(kAdjectives[a].en));
  s.noun = pair.source(kNouns[np.noun].en);
  if (!np.complement.empty()) {
    s.of = pair.source(np.preposition == kOf ? "of" : kPrepositions[np.preposition].en);
    s.complement.push_back(render_source(np.complement[0], pair));
  }
  return s;
}

// French: det noun adj* [prep np]; "of the" + masculine noun fuses into "du".
void render_target(const NounPhrase& np, const NounPhraseSource& s, Pair& pair,
                   std::int64_t fused_of = -1) {
  if (np.determiner < 0) {
    pair.target(kPronouns[np.pronoun][1], {s.noun});
    return;
  }
  const Noun& noun = kNouns[np.noun];
  const Determiner& det = kDeterminers[np.determiner];
  if (fused_of >= 0 && !noun.feminine) {
    pair.target("du", {fused_of, s.determiner});
  } else {
    if (fused_of >= 0) pair.target("de", {fused_of});
    pair.target(noun.feminine ? det.feminine : det.masculine, {s.determiner});
  }
  pair.target(noun.fr, {s.noun});
  for (std::size_t a = 0; a < np.adjectives.size(); ++a) {
    pair.target(kAdjectives[np.adjectives[a]].fr, {s.adjectives[a]});
  }
  if (!np.complement.empty()) {
    if (np.preposition == kOf) {
      render_target(np.complement[0], s.complement[0], pair, s.of);
    } else {
      pair.target(kPrepositions[np.preposition].fr, {s.of});
      render_target(np.complement[0], s.complement[0], pair);
    }
  }
}

struct ClauseSource {
  NounPhraseSource subject, object, place;
  std::int64_t place_preposition = -1;
  std::int64_t verb = -1, auxiliary = -1;  // auxiliary: "will" or "does"; negation: "not"
  std::int64_t negation = -1;
};

ClauseSource render_source(const Clause& c, Pair& pair) {
  ClauseSource s;
  s.subject = render_source(c.subject, pair);
  const Verb& v = kVerbs[c.verb];
  switch (c.tense) {
    case Tense::present:
      s.verb = pair.source(v.third);
      break;
    case Tense::past:
      s.verb = pair.source(v.past);
      break;
    case Tense::future:
      s.auxiliary = pair.source("will");
      s.verb = pair.source(v.base);
      break;
    case Tense::negated:
      s.auxiliary = pair.source("does");
      s.negation = pair.source("not");
      s.verb = pair.source(v.base);
      break;
  }
  if (!c.object.empty()) s.object = render_source(c.object[0], pair);
  if (!c.place.empty()) {
    s.place_preposition = pair.source(kPrepositions[c.place_preposition].en);
    s.place = render_source(c.place[0], pair);
  }
  return s;
}

void render_target(const Clause& c, const ClauseSource& s, Pair& pair) {
  render_target(c.subject, s.subject, pair);
  const Verb& v = kVerbs[c.verb];
  switch (c.tense) {
    case Tense::present:
      pair.target(v.present, {s.verb});
      break;
    case Tense::past:
      pair.target(std::string(v.aux) + " " + v.participle, {s.verb});
      break;
    case Tense::future:
      pair.target(v.future, {s.auxiliary, s.verb});
      break;
    case Tense::negated:
      pair.target("ne", {s.auxiliary, s.negation});
      pair.target(v.present, {s.verb});
      pair.target("pas", {s.negation});
      break;
  }
  if (!c.object.empty()) render_target(c.object[0], s.object, pair);
  if (!c.place.empty()) {
    pair.target(kPrepositions[c.place_preposition].fr, {s.place_preposition});
    render_target(c.place[0], s.place, pair);
  }
}

SentencePair draw_pair(Generator& g) {
  const double r = g.next_uniform();
  const Joint joint = r < 0.55   ? Joint::single
                      : r < 0.7  ? Joint::conjunction
                      : r < 0.85 ? Joint::when
                                 : Joint::because;
  const Clause first = draw_clause(g);
  const Clause second = joint == Joint::single ? Clause() : draw_clause(g);
  Pair pair;
  switch (joint) {
    case Joint::single: {
      const ClauseSource a = render_source(first, pair);
      const std::int64_t stop = pair.source(".");
      render_target(first, a, pair);
      pair.target(".", {stop});
      break;
    }
    case Joint::conjunction:
    case Joint::because: {
      const ClauseSource a = render_source(first, pair);
      const bool because = joint == Joint::because;
      const std::int64_t link = pair.source(because ? "because" : "and");
      const ClauseSource b = render_source(second, pair);
      const std::int64_t stop = pair.source(".");
      render_target(first, a, pair);
      pair.target(because ? "parce que" : "et", {link});
      render_target(second, b, pair);
      pair.target(".", {stop});
      break;
    }
    case Joint::when: {  // "when A , B ." -> "B quand A ."
      const std::int64_t when = pair.source("when");
      const ClauseSource a = render_source(first, pair);
      pair.source(",");
      const ClauseSource b = render_source(second, pair);
      const std::int64_t stop = pair.source(".");
      render_target(second, b, pair);
      pair.target("quand", {when});
      render_target(first, a, pair);
      pair.target(".", {stop});
      break;
    }
  }
  return pair.take();
}

// A sentence of up to max_clauses clauses (CorpusOptions::clauses > 2): n clauses, n drawn
// uniformly from [1, max_clauses], joined by "and" or "because" each; when it has two or more, a
// quarter of the time it opens with "when": "when A , B and C ." -> "B et C quand A .", the
// grammar's longest-range reordering now spanning every clause after the first.
SentencePair draw_long_pair(Generator& g, std::int64_t max_clauses) {
  const auto n =
      1 + static_cast<std::int64_t>(g.next_u32() % static_cast<std::uint32_t>(max_clauses));
  const bool when = n >= 2 && chance(g, 0.25);
  std::vector<Clause> clauses;
  std::vector<bool> because;  // the link before clause k (k >= 1, or >= 2 after "when")
  for (std::int64_t k = 0; k < n; ++k) {
    clauses.push_back(draw_clause(g));
    because.push_back(chance(g, 0.5));
  }
  Pair pair;
  std::vector<ClauseSource> sources;
  std::vector<std::int64_t> links(static_cast<std::size_t>(n), -1);
  const std::int64_t when_at = when ? pair.source("when") : -1;
  for (std::int64_t k = 0; k < n; ++k) {
    const auto ku = static_cast<std::size_t>(k);
    if (k == 1 && when) {
      pair.source(",");
    } else if (k >= 1) {
      links[ku] = pair.source(because[ku] ? "because" : "and");
    }
    sources.push_back(render_source(clauses[ku], pair));
  }
  const std::int64_t stop = pair.source(".");
  for (std::int64_t k = when ? 1 : 0; k < n; ++k) {
    const auto ku = static_cast<std::size_t>(k);
    if (links[ku] >= 0) pair.target(because[ku] ? "parce que" : "et", {links[ku]});
    render_target(clauses[ku], sources[ku], pair);
  }
  if (when) {
    pair.target("quand", {when_at});
    render_target(clauses[0], sources[0], pair);
  }
  pair.target(".", {stop});
  return pair.take();
}

std::vector<std::string> sorted(std::set<std::string> words) {
  return std::vector<std::string>(words.begin(), words.end());
}

}  // namespace

std::vector<SentencePair> generate_corpus(std::int64_t count, std::uint64_t seed,
                                          const CorpusOptions& options) {
  if (count < 0) throw Error("count", ">= 0", std::to_string(count));
  if (options.min_length < 1 || options.max_length < options.min_length) {
    throw Error("options", "1 <= min_length <= max_length",
                std::to_string(options.min_length) + ", " + std::to_string(options.max_length));
  }
  // The shortest sentence the grammar makes ("he sleeps .") has 3 words; the bounds must leave
  // room for it, or the loop below would never end.
  if (options.max_length < 3)
    throw Error("options.max_length", ">= 3", std::to_string(options.max_length));
  if (options.clauses < 2 || options.clauses > 64) {
    throw Error("options.clauses", "in [2, 64]", std::to_string(options.clauses));
  }
  Generator g(seed);
  std::vector<SentencePair> corpus;
  corpus.reserve(static_cast<std::size_t>(count));
  while (static_cast<std::int64_t>(corpus.size()) < count) {
    SentencePair pair = options.clauses > 2 ? draw_long_pair(g, options.clauses) : draw_pair(g);
    const auto fits = [&](std::size_t n) {
      return static_cast<std::int64_t>(n) >= options.min_length &&
             static_cast<std::int64_t>(n) <= options.max_length;
    };
    if (fits(pair.source.size()) && fits(pair.target.size())) corpus.push_back(std::move(pair));
  }
  return corpus;
}

std::vector<std::string> source_words() {
  std::set<std::string> words = {".", ",", "and", "when", "because", "of", "will", "does", "not"};
  for (const Noun& n : kNouns) words.insert(n.en);
  for (const Adjective& a : kAdjectives) words.insert(a.en);
  for (const Verb& v : kVerbs) words.insert({v.base, v.third, v.past});
  for (const Determiner& d : kDeterminers) words.insert(d.en);
  for (const Preposition& p : kPrepositions) words.insert(p.en);
  for (const auto& p : kPronouns) words.insert(p[0]);
  return sorted(std::move(words));
}

std::vector<std::string> target_words() {
  std::set<std::string> words = {".", "et", "quand", "parce", "que", "du", "de", "ne", "pas"};
  for (const Noun& n : kNouns) words.insert(n.fr);
  for (const Adjective& a : kAdjectives) words.insert(a.fr);
  for (const Verb& v : kVerbs) words.insert({v.present, v.aux, v.participle, v.future});
  for (const Determiner& d : kDeterminers) words.insert({d.masculine, d.feminine});
  for (const Preposition& p : kPrepositions) {
    for (std::string& w : split_words(p.fr)) words.insert(std::move(w));
  }
  for (const auto& p : kPronouns) words.insert(p[1]);
  return sorted(std::move(words));
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ') ++j;
    if (j > i) words.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

std::vector<std::string> tokenize(std::string_view text) {
  std::string spaced;
  for (const char c : text) {
    if (c == ',' || c == '.') {
      spaced += ' ';
      spaced += c;
      spaced += ' ';
    } else if (c == '\t' || c == '\n' || c == '\r') {
      spaced += ' ';
    } else {
      spaced += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  std::vector<std::string> words = split_words(spaced);
  if (!words.empty() && words.back() != ".") words.emplace_back(".");
  return words;
}

std::string join_words(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& w : words) {
    if (!text.empty()) text += ' ';
    text += w;
  }
  return text;
}

Vocabulary::Vocabulary(const std::vector<std::string>& words)
    : words_{"<pad>", "<bos>", "<eos>", "<unk>"} {
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(words_.size()); ++i) ids_[words_[i]] = i;
  for (const std::string& w : words) {
    if (ids_.count(w) != 0) throw Error("words", "distinct words", "\"" + w + "\" twice");
    ids_[w] = static_cast<std::int64_t>(words_.size());
    words_.push_back(w);
  }
}

std::int64_t Vocabulary::id(const std::string& word) const {
  const auto it = ids_.find(word);
  return it == ids_.end() ? kUnk : it->second;
}

const std::string& Vocabulary::word(std::int64_t id) const {
  if (id < 0 || id >= size()) {
    throw Error("id", "in [0, " + std::to_string(size()) + ")", std::to_string(id));
  }
  return words_[static_cast<std::size_t>(id)];
}

std::vector<std::int64_t> Vocabulary::encode(const std::vector<std::string>& words) const {
  std::vector<std::int64_t> ids;
  ids.reserve(words.size());
  for (const std::string& w : words) ids.push_back(id(w));
  return ids;
}

std::vector<std::string> Vocabulary::decode(const std::vector<std::int64_t>& ids) const {
  std::vector<std::string> words;
  for (const std::int64_t id : ids) {
    if (id == kEos) break;
    if (id == kPad || id == kBos) continue;
    words.push_back(word(id));
  }
  return words;
}

}  // namespace qkv::models
