// The keys a mask mod keeps in the partial tiles of one q-block's rows, as bits, for a mod that
// has no closed form (a lambda given to flex_attention runs once per key) and does not depend on
// the head (its block mask was built for one head). DropCache: a forward that takes the heads of
// a q-block one after another (flash_fwd.cpp) evaluates the mod once per tile and reads the bits
// for its other heads of the same rows: a lambda sliding window ran its mod over 10% of its
// forward (perf, T = 8192, H = 8, heads-first, 2 threads of an Intel Xeon VM, 2026-11-27), where
// the built-in window fills key intervals in 1.5%. PartialTileBits: every partial tile's bits
// once per call, for the backward and for a sparse mask's forward. Per-target include guard.
#if defined(QKV_KERNELS_CPU_DROP_CACHE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_CPU_DROP_CACHE_INL_H_
#undef QKV_KERNELS_CPU_DROP_CACHE_INL_H_
#else
#define QKV_KERNELS_CPU_DROP_CACHE_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "kernels/block_view.hpp"
#include "kernels/cpu/tile-inl.h"
#include "kernels/cpu/tile_traits.hpp"
#include "kernels/flex_mods.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {
// The keys [j0, j0 + cols) that mask keeps in row i of head h of batch b, as bits (bit c for key
// j0 + c), from the mod run key by key.
template <class T>
std::uint64_t kept_bits(const FlexMask& mask, std::int64_t b, std::int64_t h, std::int64_t i,
                        std::int64_t j0, std::int64_t cols) {
  T ones[TileTraits::kBlockK];
  std::fill(ones, ones + cols, T(1));
  mask.drop_row(b, h, i, j0, cols, T(0), ones);
  std::uint64_t kept = 0;
  for (std::int64_t c = 0; c < cols; ++c) {
    kept |= static_cast<std::uint64_t>(ones[c] != T(0)) << c;
  }
  return kept;
}

class DropCache {
 public:
  // Whether the cache serves this mask: a mod run key by key, the same for every head.
  static bool serves(const FlexMask& mask, const detail::BlockMaskData& blocks) {
    return !mask.erased->drops_by_interval && blocks.heads == 1;
  }
  template <class M>
  static bool serves(const M&, const detail::BlockMaskData&) {
    return false;
  }

  // The kept bits of rows [i0, i0 + rows) (the rows whose block-mask q-block is partial in this
  // tile, kinds[r / kBlockQ]; the others are not computed) against keys [j0, j0 + cols) of batch
  // b: [rows] words, from the cache where this thread computed them for these rows before (any
  // head), else from the mod (through head h).
  template <class T>
  const std::uint64_t* tile(const FlexMask& mask, const detail::BlockMaskData& blocks,
                            std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t rows,
                            std::int64_t j0, std::int64_t cols, const TileKind* kinds) {
    const std::int64_t kb = j0 / TileTraits::kBlockK;
    const std::int64_t batch = blocks.batches == 1 ? 0 : b;
    if (batch != batch_ || i0 != i0_ || rows != rows_) {
      batch_ = batch;
      i0_ = i0;
      rows_ = rows;
      ++generation_;
    }
    if (static_cast<std::int64_t>(generation_of_.size()) <= kb) {
      generation_of_.resize(static_cast<std::size_t>(kb + 1), 0);
      bits_.resize(generation_of_.size() * TileTraits::kForwardBlockQ);
    }
    std::uint64_t* bits = bits_.data() + kb * TileTraits::kForwardBlockQ;
    if (generation_of_[static_cast<std::size_t>(kb)] == generation_) return bits;
    for (std::int64_t r = 0; r < rows; ++r) {
      if (kinds[r / TileTraits::kBlockQ] != TileKind::full) {
        bits[r] = kept_bits<T>(mask, b, h, i0 + r, j0, cols);
      }
    }
    generation_of_[static_cast<std::size_t>(kb)] = generation_;
    return bits;
  }

 private:
  std::int64_t batch_ = -1, i0_ = -1, rows_ = -1;
  std::uint64_t generation_ = 0;
  std::vector<std::uint64_t> generation_of_;  // per k-block: the generation its bits are from
  std::vector<std::uint64_t> bits_;           // per k-block: kForwardBlockQ words
};

// The same bits computed for every partial tile once per call, one head's worth of mod
// evaluations, in parallel: for the backward, whose items walk one head's k-blocks and meet a
// tile's rows once per head on different threads (the lambda window's backward took 1.04-1.05x
// the built-in window's time evaluating its mod per head, T = 8192 and 16384, 2 threads, AMD EPYC
// (avx2 avx512_bf16 avx512f), 2026-11-28), and for a sparse mask's forward, which with them walks
// the heads in the order the built-in masks do (flash_fwd.cpp, heads_inside). Tiles of each
// (batch, k-block) in q-block order.
class PartialTileBits {
 public:
  // Not built past this size (4096 partial tiles a MiB): such a mask evaluates its mod per tile.
  static constexpr std::int64_t kMaxBytes = std::int64_t{1} << 26;

  template <class T>
  PartialTileBits(const FlexMask& mask, const detail::BlockMaskData& data, T /*type*/) {
    const BlockView blocks(&data);
    const std::int64_t kb_count = data.k_blocks;
    first_.assign(static_cast<std::size_t>(data.batches * kb_count + 1), 0);
    for (std::int64_t b = 0; b < data.batches; ++b) {
      for (std::int64_t kb = 0; kb < kb_count; ++kb) {
        const KeyRange q = blocks.q_span(b, 0, kb);
        std::int64_t n = 0;
        for (std::int64_t qb = q.lo; qb < q.hi; ++qb) {
          if (blocks.kind_t(b, 0, kb, qb) != TileKind::partial) continue;
          q_block_.push_back(qb);
          ++n;
        }
        first_[static_cast<std::size_t>(b * kb_count + kb + 1)] =
            first_[static_cast<std::size_t>(b * kb_count + kb)] + n;
      }
    }
    if (first_.back() * kWords * 8 > kMaxBytes) {
      q_block_.clear();
      return;
    }
    bits_.assign(static_cast<std::size_t>(first_.back() * kWords), 0);
    k_blocks_ = kb_count;
    batches_ = data.batches;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t at = 0; at < data.batches * kb_count; ++at) {
      const std::int64_t b = at / kb_count, kb = at % kb_count;
      const std::int64_t j0 = kb * TileTraits::kBlockK;
      const std::int64_t cols = std::min(TileTraits::kBlockK, data.Tk - j0);
      const KeyRange q = blocks.q_span(b, 0, kb);
      std::uint64_t* bits = bits_.data() + first_[static_cast<std::size_t>(at)] * kWords;
      for (std::int64_t qb = q.lo; qb < q.hi; ++qb) {
        if (blocks.kind_t(b, 0, kb, qb) != TileKind::partial) continue;
        const std::int64_t i0 = qb * TileTraits::kBlockQ;
        const std::int64_t rows = std::min(TileTraits::kBlockQ, data.Tq - i0);
        for (std::int64_t r = 0; r < rows; ++r)
          bits[r] = kept_bits<T>(mask, b, 0, i0 + r, j0, cols);
        bits += kWords;
      }
    }
  }

  bool built() const { return k_blocks_ > 0; }
  // The partial tile (q-block qb, k-block kb) of batch b: one word per row; null where the tile
  // is not partial.
  const std::uint64_t* find(std::int64_t b, std::int64_t qb, std::int64_t kb) const {
    const std::int64_t at = (batches_ == 1 ? 0 : b) * k_blocks_ + kb;
    const auto lo = q_block_.begin() + first_[static_cast<std::size_t>(at)];
    const auto hi = q_block_.begin() + first_[static_cast<std::size_t>(at + 1)];
    const auto tile = std::lower_bound(lo, hi, qb);
    if (tile == hi || *tile != qb) return nullptr;
    return bits_.data() + (tile - q_block_.begin()) * kWords;
  }
  // The n-th partial tile of k-block kb (in q-block order) of batch b (any batch where the mask
  // has one for all): one word per row.
  const std::uint64_t* tile(std::int64_t b, std::int64_t kb, std::int64_t n) const {
    const std::int64_t batch = batches_ == 1 ? 0 : b;
    return bits_.data() + (first_[static_cast<std::size_t>(batch * k_blocks_ + kb)] + n) * kWords;
  }

 private:
  static constexpr std::int64_t kWords = TileTraits::kBlockQ;
  std::int64_t k_blocks_ = 0, batches_ = 0;
  std::vector<std::int64_t> first_;  // per (batch, k-block): its first tile's index, then the total
  std::vector<std::int64_t> q_block_;  // per tile: its q-block
  std::vector<std::uint64_t> bits_;
};

// A call's PartialTileBits where they serve its mask (a mod run key by key, the same for every
// head, with partial tiles) and fit in kMaxBytes; none otherwise.
template <class T, class MaskMod>
std::optional<PartialTileBits> partial_tile_bits(const MaskMod& mask,
                                                 const detail::BlockMaskData& blocks) {
  if constexpr (std::is_same_v<MaskMod, FlexMask>) {
    if (DropCache::serves(mask, blocks) && BlockView(&blocks).count(TileKind::partial) > 0) {
      std::optional<PartialTileBits> bits(std::in_place, mask, blocks, T(0));
      if (bits->built()) return bits;
    }
  }
  return std::nullopt;
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_DROP_CACHE_INL_H_
