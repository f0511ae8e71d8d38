#pragma once

#include <cstdint>

#include "qkv/block_mask.hpp"

namespace qkv::kernels {

// The fused kernels' reading of a block mask: tile kinds by (b, h, q-block, k-block), a batch or
// head count of 1 standing for all.
class BlockView {
 public:
  explicit BlockView(const detail::BlockMaskData* d) : d_(d) {}

  TileKind kind(std::int64_t b, std::int64_t h, std::int64_t qb, std::int64_t kb) const {
    return d_
        ->kinds[static_cast<std::size_t>((head(b, h) * d_->q_blocks + qb) * d_->k_blocks + kb)];
  }
  // The same, from the transposed layout the backward walks.
  TileKind kind_t(std::int64_t b, std::int64_t h, std::int64_t kb, std::int64_t qb) const {
    return d_
        ->kinds_t[static_cast<std::size_t>((head(b, h) * d_->k_blocks + kb) * d_->q_blocks + qb)];
  }
  // The k-blocks [lo, hi) with work for q-block qb; the q-blocks with work for k-block kb.
  KeyRange k_span(std::int64_t b, std::int64_t h, std::int64_t qb) const {
    const auto at = static_cast<std::size_t>(head(b, h) * d_->q_blocks + qb);
    return {d_->k_lo[at], d_->k_hi[at]};
  }
  // Whether most tiles are empty: the kernels then take 64-row q-blocks, and walk the heads inside
  // each block of rows (flash_bwd.cpp; flash_fwd.cpp where its heads_inside says so).
  bool sparse() const {
    return 2 * count(TileKind::empty) > static_cast<std::int64_t>(d_->kinds.size());
  }
  std::int64_t count(TileKind kind) const { return d_->counts[static_cast<int>(kind)]; }
  // The tiles a q-block keeps, on average over the mask's q-blocks.
  double kept_per_q_block() const {
    const auto tiles = static_cast<double>(d_->kinds.size());
    return (tiles - static_cast<double>(count(TileKind::empty))) /
           (tiles / static_cast<double>(d_->k_blocks));
  }
  KeyRange q_span(std::int64_t b, std::int64_t h, std::int64_t kb) const {
    const auto at = static_cast<std::size_t>(head(b, h) * d_->k_blocks + kb);
    return {d_->q_lo[at], d_->q_hi[at]};
  }

 private:
  std::int64_t head(std::int64_t b, std::int64_t h) const {
    return (d_->batches == 1 ? 0 : b) * d_->heads + (d_->heads == 1 ? 0 : h);
  }
  const detail::BlockMaskData* d_;
};

}  // namespace qkv::kernels
