#pragma once

// Mask mods: which keys each query keeps. A mask mod is any callable
//
//   bool mod(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j)  // true = keep
//
// (FlexAttention's mask_mod). create_block_mask (qkv/block_mask.hpp) evaluates it once per shape
// to mark each (q-block, k-block) tile empty, partial or full; the fused kernel skips empty tiles
// and calls the mod element by element only in partial ones. A mod may say more about itself, and
// the block mask then needs no element walk:
//
//   KeyRange keys(b, h, i) const               row i keeps exactly the keys [lo, hi)
//   KeyRange hull(b, h, i, j0, j1) const       a range within [j0, j1) holding every key of
//       [j0, j1) that row i keeps (it may hold dropped keys too): the fused forward computes a
//       partial tile's products only over it
//   void classify_row(b, h, i0, i1, Tk, bk, const TileKind* only, TileKind* kinds) const
//       the kinds of the tiles rows [i0, i1) x keys [kb bk, min((kb + 1) bk, Tk)) for every
//       k-block kb; where only is not null, tiles with only[kb] == empty may be left empty
//       unexamined. Kinds are exact: and_masks and or_masks walk the elements of the tiles where
//       both parts are partial.
//
// The mods below have those closed forms; user lambdas are walked element by element, once.
// Compose with and_masks / or_masks. Each rule is written once here, and the built-in options,
// the reference, the block mask, the decomposed autograd path and the tests all call it.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace qkv {

enum class TileKind : std::uint8_t { empty, partial, full };

// Keys [lo, hi).
struct KeyRange {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
  bool empty() const noexcept { return lo >= hi; }
  bool contains(std::int64_t j) const noexcept { return lo <= j && j < hi; }
};

inline KeyRange intersect(KeyRange a, KeyRange b) noexcept {
  return {std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
}

namespace masks {

inline constexpr std::int64_t kUnbounded = std::int64_t{1} << 62;

// The rules, as key intervals of row i. offset moves the diagonal: key i + offset is row i's
// (0: top-left aligned; tk - tq: bottom-right aligned, the last query on the last key).
// Causal: j <= i + offset.
constexpr KeyRange causal_keys(std::int64_t i, std::int64_t offset) noexcept {
  return {0, i + offset + 1};
}
// A band around the diagonal: i + offset - left <= j <= i + offset + right (-1: unbounded side).
constexpr KeyRange window_keys(std::int64_t i, std::int64_t offset, std::int64_t left,
                               std::int64_t right) noexcept {
  return {left < 0 ? 0 : i + offset - left, right < 0 ? kUnbounded : i + offset + right + 1};
}
// Prefix-LM: the first `prefix` keys are seen by every row, the rest causally (j < prefix or j <=
// i).
constexpr KeyRange prefix_lm_keys(std::int64_t i, std::int64_t prefix) noexcept {
  return {0, std::max(prefix, i + 1)};
}

// Is mod M one with exact key intervals, or its own row classifier?
template <class M>
concept HasKeys = requires(const M& m, std::int64_t x) {
  { m.keys(x, x, x) } -> std::convertible_to<KeyRange>;
};
template <class M>
concept HasClassifyRow = requires(const M& m, std::int64_t x, const TileKind* only, TileKind* k) {
  m.classify_row(x, x, x, x, x, x, only, k);
};

// Whether key_hull bounds M's kept keys better than the whole range asked about.
template <class M>
concept HasKeyHull = HasKeys<M> || requires(const M& m, std::int64_t x) {
  { m.hull(x, x, x, x, x) } -> std::convertible_to<KeyRange>;
};

// A range within [j0, j1) that holds every key of [j0, j1) row i keeps: its interval, the mod's
// own hull, or [j0, j1) itself.
template <class M>
KeyRange key_hull(const M& m, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                  std::int64_t j1) {
  if constexpr (HasKeys<M>) {
    return intersect(m.keys(b, h, i), {j0, j1});
  } else if constexpr (HasKeyHull<M>) {
    return m.hull(b, h, i, j0, j1);
  } else {
    return {j0, j1};
  }
}

// Whether drop_keys fills intervals for M rather than running its mod key by key (the And and
// Or of two parts: where both parts do).
template <class M>
inline constexpr bool drops_by_interval = HasKeys<M> ||
                                          requires(const M& m, std::int64_t x, float* row) {
  m.drop_row(x, x, x, x, x, 0.0f, row);
};

// own drop_row (And, Or, GlobalTokens, Strided), its key interval (a fill before and after it: a
// compare per key took 5.6% of a sliding-window forward, T = 8192, one thread of the Zen 3 VM),
// else a select per key, which vectorizes for a simple mod.
template <class M, class T>
void drop_keys(const M& m, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
               std::int64_t cols, T value, T* x) {
  if constexpr (requires { m.drop_row(b, h, i, j0, cols, value, x); }) {
    m.drop_row(b, h, i, j0, cols, value, x);
  } else if constexpr (HasKeys<M>) {
    const KeyRange r = intersect(m.keys(b, h, i), {j0, j0 + cols});
    if (r.empty()) {
      std::fill(x, x + cols, value);
    } else {
      std::fill(x, x + (r.lo - j0), value);
      std::fill(x + (r.hi - j0), x + cols, value);
    }
  } else {
    for (std::int64_t c = 0; c < cols; ++c) x[c] = m(b, h, i, j0 + c) ? x[c] : value;
  }
}

// The drop of an or of two parts: x[c] <- value for c < cols where neither part keeps key j0 + c.
// drop_first(j, len, kept) and drop_second set kept[c] to 0 where their part drops key j + c
// (kept arrives all 1), for chunks of at most 64 keys (the kernels' rows of keys).
template <class T, class DropFirst, class DropSecond>
void drop_unless_either(std::int64_t j0, std::int64_t cols, T value, T* x, DropFirst drop_first,
                        DropSecond drop_second) {
  constexpr std::int64_t kChunk = 64;
  T kept_first[kChunk], kept_second[kChunk];
  for (std::int64_t c0 = 0; c0 < cols; c0 += kChunk) {
    const std::int64_t len = std::min(kChunk, cols - c0);
    std::fill_n(kept_first, len, T(1));
    std::fill_n(kept_second, len, T(1));
    drop_first(j0 + c0, len, kept_first);
    drop_second(j0 + c0, len, kept_second);
    T* row = x + c0;
    for (std::int64_t c = 0; c < len; ++c) {
      row[c] = kept_first[c] != T(0) || kept_second[c] != T(0) ? row[c] : value;
    }
  }
}

// The drop of an or whose one part keeps exactly the keys `kept` in this row: the other part
// decides the keys outside them only. drop_other(j, len, at) drops the other part's keys of
// [j, j + len), whose entries start at `at`.
template <class T, class DropOther>
void drop_beside(KeyRange kept, std::int64_t j0, std::int64_t cols, T* x, DropOther drop_other) {
  const KeyRange r = intersect(kept, {j0, j0 + cols});
  if (r.empty()) {
    drop_other(j0, cols, x);
    return;
  }
  if (r.lo > j0) drop_other(j0, r.lo - j0, x);
  if (r.hi < j0 + cols) drop_other(r.hi, j0 + cols - r.hi, x + (r.hi - j0));
}

// The kind of a tile by evaluating the mod on every element (stops once it saw both).
template <class M>
TileKind tile_by_elements(const M& m, std::int64_t b, std::int64_t h, std::int64_t i0,
                          std::int64_t i1, std::int64_t j0, std::int64_t j1) {
  bool kept = false, dropped = false;
  for (std::int64_t i = i0; i < i1; ++i) {
    for (std::int64_t j = j0; j < j1; ++j) {
      if (m(b, h, i, j)) {
        kept = true;
      } else {
        dropped = true;
      }
      if (kept && dropped) return TileKind::partial;
    }
  }
  return kept ? TileKind::full : TileKind::empty;
}

// kinds [ceil(Tk / bk)]: the tiles rows [i0, i1) x each k-block of bk keys, by the best means
// the mod offers. Interval mods take O(rows + k-blocks): each row adds its interval to a
// difference array of touched and of covered k-blocks.
template <class M>
void classify_row(const M& m, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                  std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) {
  const std::int64_t k_blocks = (Tk + bk - 1) / bk;
  if constexpr (HasClassifyRow<M>) {
    m.classify_row(b, h, i0, i1, Tk, bk, only, kinds);
  } else if constexpr (HasKeys<M>) {
    std::vector<std::int64_t> touched(k_blocks + 1, 0), covered(k_blocks + 1, 0);
    for (std::int64_t i = i0; i < i1; ++i) {
      const KeyRange r = intersect(m.keys(b, h, i), {0, Tk});
      if (r.empty()) continue;
      ++touched[r.lo / bk];
      --touched[(r.hi - 1) / bk + 1];
      const std::int64_t first = (r.lo + bk - 1) / bk;  // first k-block starting at or after lo
      const std::int64_t last = r.hi == Tk ? k_blocks : r.hi / bk;  // k-blocks ending by hi
      if (first < last) {
        ++covered[first];
        --covered[last];
      }
    }
    std::int64_t t = 0, c = 0;
    for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
      t += touched[kb];
      c += covered[kb];
      kinds[kb] = c == i1 - i0 ? TileKind::full : t > 0 ? TileKind::partial : TileKind::empty;
    }
  } else {
    for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
      kinds[kb] = only != nullptr && only[kb] == TileKind::empty
                      ? TileKind::empty
                      : tile_by_elements(m, b, h, i0, i1, kb * bk, std::min((kb + 1) * bk, Tk));
    }
  }
}

// The tiles of rows [i0, i1) for a composition `whole` of parts a and b (conjunction: and_masks,
// else or_masks). A tile takes the kind that decides alone (empty for and, full for or) if a
// part has it, the other part's kind if one part has the kind that changes nothing, and the walk
// of `whole`'s elements where both are partial. For and, b is examined only where a left tiles.
template <class Whole, class A, class B>
void classify_parts(const Whole& whole, const A& a, const B& b, bool conjunction, std::int64_t n,
                    std::int64_t h, std::int64_t i0, std::int64_t i1, std::int64_t Tk,
                    std::int64_t bk, const TileKind* only, TileKind* kinds) {
  const std::int64_t k_blocks = (Tk + bk - 1) / bk;
  std::vector<TileKind> other(k_blocks);
  masks::classify_row(a, n, h, i0, i1, Tk, bk, only, kinds);
  masks::classify_row(b, n, h, i0, i1, Tk, bk, conjunction ? kinds : only, other.data());
  const TileKind decides = conjunction ? TileKind::empty : TileKind::full;
  const TileKind neutral = conjunction ? TileKind::full : TileKind::empty;
  for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
    const TileKind x = kinds[kb], y = other[kb];
    kinds[kb] = x == decides || y == decides ? decides
                : x == neutral               ? y
                : y == neutral
                    ? x
                    : tile_by_elements(whole, n, h, i0, i1, kb * bk, std::min((kb + 1) * bk, Tk));
  }
}

// Keep where both keep. Exact intervals when both parts have them.
template <class A, class B>
struct And {
  A first;
  B second;
  bool operator()(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return first(n, h, i, j) && second(n, h, i, j);
  }
  KeyRange keys(std::int64_t n, std::int64_t h, std::int64_t i) const
      requires(HasKeys<A>&& HasKeys<B>) {
    return intersect(first.keys(n, h, i), second.keys(n, h, i));
  }
  void classify_row(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const
      requires(!(HasKeys<A> && HasKeys<B>)) {
    // The part with a closed form first; the element walk only where it left tiles.
    if constexpr (!HasKeys<A> && !HasClassifyRow<A> && (HasKeys<B> || HasClassifyRow<B>)) {
      classify_parts(*this, second, first, true, n, h, i0, i1, Tk, bk, only, kinds);
    } else {
      classify_parts(*this, first, second, true, n, h, i0, i1, Tk, bk, only, kinds);
    }
  }
  KeyRange hull(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j0,
                std::int64_t j1) const
      requires(!(HasKeys<A> && HasKeys<B>)&&(HasKeyHull<A> || HasKeyHull<B>)) {
    return intersect(key_hull(first, n, h, i, j0, j1), key_hull(second, n, h, i, j0, j1));
  }
  // Each part drops its keys (with both intervals, keys() above serves instead).
  template <class T>
  void drop_row(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                T value, T* x) const requires(!(HasKeys<A> && HasKeys<B>)) {
    drop_keys(first, n, h, i, j0, cols, value, x);
    drop_keys(second, n, h, i, j0, cols, value, x);
  }
};

// Keep where either keeps.
template <class A, class B>
struct Or {
  A first;
  B second;
  bool operator()(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return first(n, h, i, j) || second(n, h, i, j);
  }
  void classify_row(std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const {
    classify_parts(*this, first, second, false, n, h, i0, i1, Tk, bk, only, kinds);
  }
  KeyRange hull(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j0,
                std::int64_t j1) const requires(HasKeyHull<A>&& HasKeyHull<B>) {
    const KeyRange a = key_hull(first, n, h, i, j0, j1), c = key_hull(second, n, h, i, j0, j1);
    if (a.empty()) return c;
    if (c.empty()) return a;
    return {std::min(a.lo, c.lo), std::max(a.hi, c.hi)};
  }
  // Where neither part keeps, each part by its own route (per key through operator(), Longformer's
  // band | globals took a third of its forward's partial tiles). A part with a key interval lets
  // the other decide outside it alone (drop_beside); else the two drops are merged
  // (drop_unless_either, a fifth of Longformer's forward: T = 8192, 2 threads, AMD EPYC Zen 3).
  template <class T>
  void drop_row(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                T value, T* x) const {
    if constexpr (HasKeys<A>) {
      drop_beside(first.keys(n, h, i), j0, cols, x, [&](std::int64_t j, std::int64_t len, T* at) {
        drop_keys(second, n, h, i, j, len, value, at);
      });
    } else if constexpr (HasKeys<B>) {
      drop_beside(second.keys(n, h, i), j0, cols, x, [&](std::int64_t j, std::int64_t len, T* at) {
        drop_keys(first, n, h, i, j, len, value, at);
      });
    } else {
      drop_either(n, h, i, j0, cols, value, x);
    }
  }

 private:
  template <class T>
  void drop_either(std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j0,
                   std::int64_t cols, T value, T* x) const {
    drop_unless_either(
        j0, cols, value, x,
        [&](std::int64_t j, std::int64_t len, T* kept) {
          drop_keys(first, n, h, i, j, len, T(0), kept);
        },
        [&](std::int64_t j, std::int64_t len, T* kept) {
          drop_keys(second, n, h, i, j, len, T(0), kept);
        });
  }
};

template <class A, class B>
inline constexpr bool drops_by_interval<And<A, B>> = drops_by_interval<A>&& drops_by_interval<B>;
template <class A, class B>
inline constexpr bool drops_by_interval<Or<A, B>> = drops_by_interval<A>&& drops_by_interval<B>;

}  // namespace masks

// and_masks(m1, m2, ...): keep where every mod keeps; or_masks: where any keeps.
template <class A, class B>
masks::And<A, B> and_masks(A a, B b) {
  return {std::move(a), std::move(b)};
}
template <class A, class B, class C, class... Rest>
auto and_masks(A a, B b, C c, Rest... rest) {
  return and_masks(and_masks(std::move(a), std::move(b)), std::move(c), std::move(rest)...);
}
template <class A, class B>
masks::Or<A, B> or_masks(A a, B b) {
  return {std::move(a), std::move(b)};
}
template <class A, class B, class C, class... Rest>
auto or_masks(A a, B b, C c, Rest... rest) {
  return or_masks(or_masks(std::move(a), std::move(b)), std::move(c), std::move(rest)...);
}

namespace masks {

// Keeps every key.
struct Full {
  bool operator()(std::int64_t, std::int64_t, std::int64_t, std::int64_t) const { return true; }
  KeyRange keys(std::int64_t, std::int64_t, std::int64_t) const { return {0, kUnbounded}; }
};

// j <= i + offset: offset 0 is top-left aligned; causal_lower_right(Tq, Tk) is bottom-right.
struct Causal {
  std::int64_t offset = 0;
  bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    return causal_keys(i, offset).contains(j);
  }
  KeyRange keys(std::int64_t, std::int64_t, std::int64_t i) const { return causal_keys(i, offset); }
};
inline Causal causal() { return {0}; }
inline Causal causal_lower_right(std::int64_t Tq, std::int64_t Tk) { return {Tk - Tq}; }

// Longformer's local band: i + offset - left <= j <= i + offset + right; -1 leaves a side open.
struct SlidingWindow {
  std::int64_t left = -1, right = -1, offset = 0;
  bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    return window_keys(i, offset, left, right).contains(j);
  }
  KeyRange keys(std::int64_t, std::int64_t, std::int64_t i) const {
    return window_keys(i, offset, left, right);
  }
};
inline SlidingWindow sliding_window(std::int64_t left, std::int64_t right,
                                    std::int64_t offset = 0) {
  return {left, right, offset};
}

// Mod m seen from a block of a longer sequence: row i of the block is m's row i + q0, key j its
// key j + k0 (a shard of ring attention, qkv/dist.hpp; a chunk of a prefill). Keeps m's key
// intervals where m has them; other mods are walked element by element.
template <class M>
struct Shifted {
  M mod;
  std::int64_t q0 = 0, k0 = 0;
  bool operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return mod(b, h, i + q0, j + k0);
  }
  KeyRange keys(std::int64_t b, std::int64_t h, std::int64_t i) const requires HasKeys<M> {
    const KeyRange r = mod.keys(b, h, i + q0);
    if (r.empty()) return {0, 0};
    return {std::max<std::int64_t>(r.lo - k0, 0), std::max<std::int64_t>(r.hi - k0, 0)};
  }
};
template <class M>
Shifted<M> shifted(M mod, std::int64_t q0, std::int64_t k0) {
  return {std::move(mod), q0, k0};
}

// Key padding: batch b keeps keys [0, lengths[b]) (one length broadcasts over the batch).
struct KeyLengths {
  std::shared_ptr<const std::vector<std::int64_t>> lengths;
  std::int64_t of(std::int64_t b) const {
    return (*lengths)[lengths->size() == 1 ? 0 : static_cast<std::size_t>(b)];
  }
  bool operator()(std::int64_t b, std::int64_t, std::int64_t, std::int64_t j) const {
    return j < of(b);
  }
  KeyRange keys(std::int64_t b, std::int64_t, std::int64_t) const { return {0, of(b)}; }
};
KeyLengths key_lengths(std::vector<std::int64_t> lengths);

// Prefix-LM (T5, UniLM): batch b's first prefix[b] keys bidirectional, the rest causal.
struct PrefixLM {
  std::shared_ptr<const std::vector<std::int64_t>> prefix;
  std::int64_t of(std::int64_t b) const {
    return (*prefix)[prefix->size() == 1 ? 0 : static_cast<std::size_t>(b)];
  }
  bool operator()(std::int64_t b, std::int64_t, std::int64_t i, std::int64_t j) const {
    return prefix_lm_keys(i, of(b)).contains(j);
  }
  KeyRange keys(std::int64_t b, std::int64_t, std::int64_t i) const {
    return prefix_lm_keys(i, of(b));
  }
};
PrefixLM prefix_lm(std::vector<std::int64_t> prefix_lengths);

// Block-diagonal masking of packed sequences: query i keeps the keys of its own document.
// ids [B * T] or [T] (one row for every batch): each document's tokens contiguous (a document id
// may not come back after another), else qkv::Error. Rows and keys past T keep nothing.
struct Document {
  struct Runs {
    std::int64_t batches = 1, T = 0;
    std::vector<std::int64_t> ids, start, end;  // per position: its document's [start, end)
  };
  std::shared_ptr<const Runs> runs;
  bool operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return keys(b, h, i).contains(j);
  }
  KeyRange keys(std::int64_t b, std::int64_t, std::int64_t i) const {
    if (i >= runs->T) return {0, 0};
    const std::size_t at = static_cast<std::size_t>((runs->batches == 1 ? 0 : b) * runs->T + i);
    return {runs->start[at], runs->end[at]};
  }
};
Document document(std::vector<std::int64_t> ids, std::int64_t batches = 1);

// Global tokens (Longformer): the listed positions attend everywhere and are attended by all.
struct GlobalTokens {
  std::shared_ptr<const std::vector<std::int64_t>> count;  // count[n]: global positions < n
  std::int64_t below(std::int64_t n) const {
    return (*count)[static_cast<std::size_t>(
        std::clamp<std::int64_t>(n, 0, static_cast<std::int64_t>(count->size()) - 1))];
  }
  bool global(std::int64_t x) const { return below(x + 1) > below(x); }
  bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    return global(i) || global(j);
  }
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const;
  // A global row: [j0, j1); any other: from the first to the last global key in [j0, j1).
  KeyRange hull(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j0,
                std::int64_t j1) const {
    if (global(i)) return {j0, j1};
    const std::int64_t before = below(j0), upto = below(j1);
    if (upto == before) return {j0, j0};
    const auto& c = *count;
    const auto first = std::upper_bound(c.begin(), c.end(), before) - c.begin();  // count steps
    const auto last = std::lower_bound(c.begin(), c.end(), upto) - c.begin();
    return {first - 1, last};
  }
  // A global row keeps every key; any other keeps the global keys: j where count steps up, read
  // from the table in order.
  template <class T>
  void drop_row(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j0, std::int64_t cols,
                T value, T* x) const {
    if (global(i)) return;
    const std::int64_t* c = count->data();
    // below(n) is constant past the table's last entry: no global key at or after it.
    const std::int64_t last = static_cast<std::int64_t>(count->size()) - 1;
    const std::int64_t hi = std::clamp<std::int64_t>(last - j0, 0, cols);
    const std::int64_t lo = std::clamp<std::int64_t>(-j0, 0, hi);  // keys before 0: none
    std::fill(x, x + lo, value);
    for (std::int64_t k = lo; k < hi; ++k) x[k] = c[j0 + k + 1] > c[j0 + k] ? x[k] : value;
    std::fill(x + hi, x + cols, value);
  }
};
GlobalTokens global_tokens(std::vector<std::int64_t> positions);

// Longformer: a symmetric band |i - j| <= window plus global tokens.
inline auto longformer(std::int64_t window, std::vector<std::int64_t> global) {
  return or_masks(sliding_window(window, window), global_tokens(std::move(global)));
}

// A layout of blocks: key block jb is kept for query block ib when layout(ib, jb). Tiles are
// classified from the layout cells they cover.
struct BlockLayout {
  struct Cells {
    std::int64_t block = 0, q_blocks = 0, k_blocks = 0, heads = 1;
    std::vector<std::uint8_t> keep;  // [heads, q_blocks, k_blocks]
  };
  std::shared_ptr<const Cells> cells;
  bool cell(std::int64_t h, std::int64_t ib, std::int64_t jb) const {
    const Cells& c = *cells;
    if (ib >= c.q_blocks || jb >= c.k_blocks) return false;
    return c.keep[static_cast<std::size_t>(((h % c.heads) * c.q_blocks + ib) * c.k_blocks + jb)];
  }
  bool operator()(std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return cell(h, i / cells->block, j / cells->block);
  }
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const;
};
// layout [q_blocks * k_blocks] (row-major, nonzero = keep) of blocks of `block` tokens.
BlockLayout from_block_layout(std::vector<std::uint8_t> layout, std::int64_t q_blocks,
                              std::int64_t k_blocks, std::int64_t block);

// BigBird (Zaheer et al. 2020) on blocks of `block` tokens, for Tq x Tk: query block ib keeps
// key blocks |ib - jb| <= window_blocks / 2, the first global_blocks key blocks (and the first
// global_blocks query blocks keep every key), and random_blocks further key blocks drawn per
// (head, query block) from Philox keyed by seed, among those the others leave. heads: how many
// heads draw their own random blocks (head h uses draw h % heads).
BlockLayout bigbird(std::int64_t block, std::int64_t window_blocks, std::int64_t global_blocks,
                    std::int64_t random_blocks, std::uint64_t seed, std::int64_t Tq,
                    std::int64_t Tk, std::int64_t heads = 1);

// Sparse Transformer, strided (Child et al. 2019): causal, keeping the previous `stride` keys and
// every stride-th key before them: 0 <= i - j and (i - j < stride or (i - j) % stride == 0).
struct Strided {
  std::int64_t stride = 1;
  bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    const std::int64_t d = i - j;
    return d >= 0 && (d < stride || d % stride == 0);
  }
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const;
  // From the first kept key in [j0, j1) to the last: the lowest key i - m stride at or after j0
  // (m >= 1), and the local interval's end, or the highest such key where the range stops short
  // of the interval. Far from the diagonal a tile row keeps one key in each stride.
  KeyRange hull(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j0,
                std::int64_t j1) const {
    const std::int64_t end = std::min(j1, i + 1);
    if (j0 >= end) return {j0, j0};
    const std::int64_t first = i - (i - j0) / stride * stride;           // >= j0
    const std::int64_t last = i - (i - end + stride) / stride * stride;  // < end
    const KeyRange local = intersect({i - stride + 1, i + 1}, {j0, end});
    const bool strided = first < end;
    if (local.empty()) return strided ? KeyRange{first, last + 1} : KeyRange{j0, j0};
    return {strided ? std::min(first, local.lo) : local.lo, local.hi};
  }
  // x[c] <- value where row i drops key j0 + c (c < cols): fills between the kept keys, which
  // are every stride-th key below the local interval, then the interval (key by key with a test
  // each, this was a fifth of a strided forward: T = 8192, stride 91, 2 threads, AMD EPYC Zen 3).
  template <class T>
  void drop_row(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j0, std::int64_t cols,
                T value, T* x) const {
    const std::int64_t end = j0 + cols;
    const KeyRange local = intersect({i - stride + 1, i + 1}, {j0, end});
    // Keys i - m stride (m >= 1) lie below the local interval; without one in this row of keys,
    // below the row's end and i.
    const std::int64_t below = local.empty() ? std::min(end, i + 1) : local.lo;
    std::int64_t pos = j0;  // keys [j0, pos) are done
    if (i >= j0) {
      for (std::int64_t j = i - (i - j0) / stride * stride; j < below; j += stride) {
        std::fill(x + (pos - j0), x + (j - j0), value);
        pos = j + 1;
      }
    }
    if (!local.empty()) {
      std::fill(x + (pos - j0), x + (local.lo - j0), value);
      pos = local.hi;
    }
    std::fill(x + (pos - j0), x + cols, value);
  }
};
Strided strided(std::int64_t stride);

// Sparse Transformer, fixed: causal, keeping the keys of the query's own block of `block` tokens
// and the last `summary` keys of every block: j <= i and (j / block == i / block or j % block >=
// block - summary).
struct Fixed {
  std::int64_t block = 1, summary = 0;
  bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    return j <= i && (j / block == i / block || j % block >= block - summary);
  }
};
Fixed fixed(std::int64_t block, std::int64_t summary);

}  // namespace masks
}  // namespace qkv
