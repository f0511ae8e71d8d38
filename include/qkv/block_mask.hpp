#pragma once

// Block masks: which (q-block, k-block) tiles a mask mod leaves empty, partial or full, computed
// once per shape from the mod and reusable across layers and calls. The fused kernel skips empty
// tiles, evaluates the mod only in partial ones, and walks the transposed layout in the
// backward.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/masks.hpp"
#include "qkv/tensor.hpp"

namespace qkv {
namespace detail {

// A mask mod behind function pointers, so that the compiled kernels can call a mod defined in
// the caller's code: each function is instantiated where the mod is known (create_block_mask),
// with the mod inlined into its loop, and is called once per row of a tile.
struct ErasedMask {
  std::shared_ptr<const void> mod;
  bool (*keep)(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i,
               std::int64_t j) = nullptr;
  // x[c] <- value for c < cols where row i drops key j0 + c.
  void (*drop_row_f32)(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i,
                       std::int64_t j0, std::int64_t cols, float value, float* x) = nullptr;
  void (*drop_row_f64)(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i,
                       std::int64_t j0, std::int64_t cols, double value, double* x) = nullptr;
  // masks::classify_row for the mod.
  void (*classify_row)(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i0,
                       std::int64_t i1, std::int64_t Tk, std::int64_t bk,
                       TileKind* kinds) = nullptr;
  // masks::key_hull for the mod, where it bounds the keys (masks::HasKeyHull; else null).
  KeyRange (*hull)(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                   std::int64_t j1) = nullptr;
  // Whether drop_row fills whole key intervals (the mod has keys() or its own drop_row) rather
  // than running the mod once per key.
  bool drops_by_interval = false;
};

template <class M, class T>
void drop_row(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
              std::int64_t cols, T value, T* x) {
  masks::drop_keys(*static_cast<const M*>(mod), b, h, i, j0, cols, value, x);
}

template <class M>
ErasedMask erase_mask(M mod) {
  ErasedMask e;
  e.mod = std::make_shared<const M>(std::move(mod));
  e.keep = [](const void* m, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return static_cast<bool>((*static_cast<const M*>(m))(b, h, i, j));
  };
  e.drop_row_f32 = &drop_row<M, float>;
  e.drop_row_f64 = &drop_row<M, double>;
  e.drops_by_interval = masks::drops_by_interval<M>;
  if constexpr (masks::HasKeyHull<M>) {
    e.hull = [](const void* m, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                std::int64_t j1) {
      return masks::key_hull(*static_cast<const M*>(m), b, h, i, j0, j1);
    };
  }
  e.classify_row = [](const void* m, std::int64_t b, std::int64_t h, std::int64_t i0,
                      std::int64_t i1, std::int64_t Tk, std::int64_t bk, TileKind* kinds) {
    masks::classify_row(*static_cast<const M*>(m), b, h, i0, i1, Tk, bk, nullptr, kinds);
  };
  return e;
}

// What create_block_mask computes. batches or heads 1: the mask does not depend on b or h.
struct BlockMaskData {
  std::int64_t batches = 1, heads = 1, Tq = 0, Tk = 0;
  std::int64_t block_q = 0, block_k = 0, q_blocks = 0, k_blocks = 0;
  std::vector<TileKind> kinds;    // [batches, heads, q_blocks, k_blocks]
  std::vector<TileKind> kinds_t;  // [batches, heads, k_blocks, q_blocks]: the backward's walk
  // Per (batch, head, q-block): the k-blocks [k_lo, k_hi) outside which every tile is empty;
  // per (batch, head, k-block): the q-blocks [q_lo, q_hi).
  std::vector<std::int32_t> k_lo, k_hi, q_lo, q_hi;
  std::int64_t counts[3] = {0, 0, 0};  // tiles per TileKind
  ErasedMask mask;
};

// Classifies every tile through mask.classify_row, in parallel (qkv::set_num_threads).
std::shared_ptr<const BlockMaskData> build_block_mask(ErasedMask mask, std::int64_t B,
                                                      std::int64_t H, std::int64_t Tq,
                                                      std::int64_t Tk);

}  // namespace detail

// A mask mod with its tiles classified for one shape. Cheap to copy (shared).
class BlockMask {
 public:
  BlockMask() = default;
  explicit BlockMask(std::shared_ptr<const detail::BlockMaskData> data) : data_(std::move(data)) {}

  bool defined() const noexcept { return data_ != nullptr; }
  std::int64_t batches() const { return data_->batches; }  // 1: the same for every batch
  std::int64_t heads() const { return data_->heads; }      // 1: the same for every head
  std::int64_t q_len() const { return data_->Tq; }
  std::int64_t kv_len() const { return data_->Tk; }
  std::int64_t block_q() const { return data_->block_q; }
  std::int64_t block_k() const { return data_->block_k; }
  std::int64_t q_blocks() const { return data_->q_blocks; }
  std::int64_t k_blocks() const { return data_->k_blocks; }
  TileKind kind(std::int64_t b, std::int64_t h, std::int64_t qb, std::int64_t kb) const;
  std::int64_t count(TileKind kind) const { return data_->counts[static_cast<int>(kind)]; }
  // The share of tiles that are not empty: the work left of the full problem's.
  double kept_fraction() const;
  // Whether the mod keeps key j for query i (batch b, head h).
  bool keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const;
  // The mask element by element: boolean [batches, heads, Tq, Tk], true = keep.
  Tensor dense() const;
  // One character a tile ('#' full, '+' partial, '.' empty), a line per q-block, for (b, h).
  std::string picture(std::int64_t b = 0, std::int64_t h = 0) const;
  const detail::BlockMaskData& data() const { return *data_; }

 private:
  std::shared_ptr<const detail::BlockMaskData> data_;
};

// Classifies every (q-block, k-block) tile of a B x H x Tq x Tk problem for mask_mod (any
// callable bool(b, h, i, j); see qkv/masks.hpp for the closed forms that skip the element walk).
// B = 1 or H = 1: the mod does not depend on b or h, and the mask serves any batch or head
// count. Evaluated once, in parallel; reuse the result across layers and calls.
template <class MaskMod>
BlockMask create_block_mask(MaskMod mask_mod, std::int64_t B, std::int64_t H, std::int64_t Tq,
                            std::int64_t Tk) {
  return BlockMask(detail::build_block_mask(detail::erase_mask(std::move(mask_mod)), B, H, Tq, Tk));
}

}  // namespace qkv
