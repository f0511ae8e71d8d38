// The fused backward's products in bf16 on the machine's matrix units (bf16_gemm.hpp), for q, k,
// v and dout all bf16 (T = float, their values converted exactly): S = Q K^T as the bf16 forward
// computes it (the same bits, so P matches the forward's lse), dP = dO V^T from the bf16 values
// as they are, and dV^T += dO^T (P Z), dQ += dS K, dK^T += Q^T dS with P Z and dS rounded to bf16;
// f32 accumulation. The softmax, the mods, dropout and dS itself stay the f32 path's. dK and dV
// are accumulated transposed, so that P Z and dS enter as B in pairs (two rows interleaved, no
// transpose per tile) and dO^T and Q^T are laid out once per q-block. Per-target include guard.
#if defined(QKV_KERNELS_CPU_BF16_GRADS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QKV_KERNELS_CPU_BF16_GRADS_INL_H_
#undef QKV_KERNELS_CPU_BF16_GRADS_INL_H_
#else
#define QKV_KERNELS_CPU_BF16_GRADS_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/exp_round_bf16.hpp"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/pack-inl.h"
#include "kernels/cpu/round_bf16-inl.h"
#include "kernels/cpu/tile-inl.h"
#include "kernels/cpu/tile_traits.hpp"
#include "kernels/params.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

// One thread's buffers for Bf16Grads: a product's f32 result, P Z and dS rounded (in pairs, and
// dS row-major), and the transposed dK and dV accumulators of one k-block, [cols_d, kBlockK] and
// [cols_dv, kBlockK], which the products add into (the rows past D and Dv take zero products).
// The thread's tile configuration lives as long as it does.
struct Bf16Scratch {
  hwy::AlignedFreeUniquePtr<float[]> c, dkt, dvt;
  hwy::AlignedFreeUniquePtr<std::uint16_t[]> pz_pairs, ds_pairs, ds_rows;
  MatrixTileScope tile_scope;
  Bf16Scratch(std::int64_t cols_d, std::int64_t cols_dv)
      : c(hwy::AllocateAligned<float>(TileTraits::kBlockK *
                                      std::max({cols_d, cols_dv, TileTraits::kBlockQ}))),
        dkt(hwy::AllocateAligned<float>(cols_d * TileTraits::kBlockK)),
        dvt(hwy::AllocateAligned<float>(cols_dv * TileTraits::kBlockK)),
        pz_pairs(hwy::AllocateAligned<std::uint16_t>(TileTraits::kBlockQ * TileTraits::kBlockK)),
        ds_pairs(hwy::AllocateAligned<std::uint16_t>(TileTraits::kBlockQ * TileTraits::kBlockK)),
        ds_rows(hwy::AllocateAligned<std::uint16_t>(TileTraits::kBlockQ * TileTraits::kBlockK)) {}
};

class Bf16Grads {
 public:
  static constexpr std::int64_t kRows = TileTraits::kBlockQ;  // of a q-block
  static constexpr std::int64_t kKeys = TileTraits::kBlockK;  // of a k-block
  static_assert(kRows % kUnitDepth == 0 && kKeys % kUnitDepth == 0 && kKeys % kUnitCols == 0,
                "q- and k-blocks of whole bf16 tiles");

  // For q_blocks q-blocks of each of B * Hq query heads and k_tiles k-blocks of each of B * Hk
  // k/v heads.
  Bf16Grads(const Dims& d, MatrixPath path, std::int64_t q_blocks, std::int64_t k_tiles)
      : path_(path),
        dim_(d.D),
        dim_v_(d.Dv),
        depth_d_(round_up(std::max<std::int64_t>(d.D, 1), kUnitDepth)),
        depth_dv_(round_up(std::max<std::int64_t>(d.Dv, 1), kUnitDepth)),
        cols_d_(round_up(std::max<std::int64_t>(d.D, 1), kUnitCols)),
        cols_dv_(round_up(std::max<std::int64_t>(d.Dv, 1), kUnitCols)),
        q_rows_(allocate_large<std::uint16_t>(size(d.B * d.Hq * q_blocks * kRows * depth_d_))),
        q_t_(allocate_large<std::uint16_t>(size(d.B * d.Hq * q_blocks * cols_d_ * kRows))),
        do_rows_(allocate_large<std::uint16_t>(size(d.B * d.Hq * q_blocks * kRows * depth_dv_))),
        do_t_(allocate_large<std::uint16_t>(size(d.B * d.Hq * q_blocks * cols_dv_ * kRows))),
        k_t_(allocate_large<std::uint16_t>(size(d.B * d.Hk * k_tiles * depth_d_ * kKeys))),
        v_t_(allocate_large<std::uint16_t>(size(d.B * d.Hk * k_tiles * depth_dv_ * kKeys))),
        k_rows_(allocate_large<std::uint16_t>(size(d.B * d.Hk * k_tiles * kKeys * cols_d_))),
        round_run_(native_round_run()),
        round_pairs_(native_round_pairs()) {}

  std::int64_t cols_d() const { return cols_d_; }
  std::int64_t cols_dv() const { return cols_dv_; }

  // q-block `slot` (of [B * Hq, q_blocks]) from q [rows, D] and dout [rows, Dv] (row strides
  // q_row, do_row): as A row-major (Q for S, dO for dP) and transposed (Q^T for dK^T, dO^T for
  // dV^T), zero past rows, D and Dv.
  void pack_rows(std::int64_t slot, const float* q, std::int64_t q_row, const float* dout,
                 std::int64_t do_row, std::int64_t rows) const {
    lay_out(q, q_row, rows, dim_, depth_d_, cols_d_, q_rows_.get() + slot * kRows * depth_d_,
            q_t_.get() + slot * cols_d_ * kRows);
    lay_out(dout, do_row, rows, dim_v_, depth_dv_, cols_dv_,
            do_rows_.get() + slot * kRows * depth_dv_, do_t_.get() + slot * cols_dv_ * kRows);
  }

  // k-block `tile` (of [B * Hk, k_tiles]) from k [n, D] and v [n, Dv] (row strides k_row,
  // v_row), in pairs: K^T (B of S), V^T (B of dP) and K (B of dQ), zero past n, D and Dv.
  void pack_keys(std::int64_t tile, const float* k, std::int64_t k_row, const float* v,
                 std::int64_t v_row, std::int64_t n) const {
    float* t = transposed_scratch(std::max(dim_, dim_v_));
    pack_transposed(k, k_row, n, dim_, kKeys, t);
    pairs_of(t, dim_, depth_d_, kKeys, k_t_.get() + tile * depth_d_ * kKeys);
    pack_transposed(v, v_row, n, dim_v_, kKeys, t);
    pairs_of(t, dim_v_, depth_dv_, kKeys, v_t_.get() + tile * depth_dv_ * kKeys);
    pairs_of(k, k_row, n, dim_, kKeys, cols_d_, k_rows_.get() + tile * kKeys * cols_d_);
  }

  // S [rows, kKeys] <- scale * (Q K^T), as the bf16 forward computes it (flash_fwd.cpp's
  // Bf16Products::scores); columns past the keys hold 0.
  void scores(std::int64_t slot, std::int64_t tile, std::int64_t rows, float scale,
              float* S) const {
    bf16_gemm(path_, row_tiles(rows), kKeys / kUnitCols, depth_d_ / kUnitDepth,
              q_rows_.get() + slot * kRows * depth_d_, depth_d_,
              k_t_.get() + tile * depth_d_ * kKeys, S, kKeys);
    scale_rows(S, kKeys, rows, kKeys, scale, S);
  }

  // dP [rows, kKeys] <- dO V^T.
  void dp(std::int64_t slot, std::int64_t tile, std::int64_t rows, float* dP) const {
    bf16_gemm(path_, row_tiles(rows), kKeys / kUnitCols, depth_dv_ / kUnitDepth,
              do_rows_.get() + slot * kRows * depth_dv_, depth_dv_,
              v_t_.get() + tile * depth_dv_ * kKeys, dP, kKeys);
  }

  // scratch.dvt [Dv, kKeys] += dO^T (P Z), with PZ [rows, kKeys] of which the first cols
  // columns are read (the tile's keys; the rest is taken as 0).
  void add_dv(std::int64_t slot, std::int64_t rows, std::int64_t cols, const float* PZ,
              Bf16Scratch& scratch) const {
    const std::int64_t depth = round_up(std::max<std::int64_t>(rows, 1), kUnitDepth);
    pairs_of(PZ, kKeys, rows, cols, depth, kKeys, scratch.pz_pairs.get());
    bf16_gemm(path_, cols_dv_ / kUnitRows, kKeys / kUnitCols, depth / kUnitDepth,
              do_t_.get() + slot * cols_dv_ * kRows, kRows, scratch.pz_pairs.get(),
              scratch.dvt.get(), kKeys, /*accumulate=*/true);
  }

  // dq [rows, D] += dS K (with keys: the keys' values are finite), scratch.dkt [D, kKeys] +=
  // Q^T dS (with queries: the rows' q and dO are), dS [rows, kKeys] of which the first cols
  // columns are read (the rest is taken as 0).
  void add_dq_dk(std::int64_t slot, std::int64_t tile, std::int64_t rows, std::int64_t cols,
                 const float* dS, bool keys, bool queries, float* dq, Bf16Scratch& scratch) const {
    if (keys) {
      const std::int64_t tiles = row_tiles(rows);
      std::uint16_t* a = scratch.ds_rows.get();
      for (std::int64_t r = 0; r < rows; ++r) {
        round_run(dS + r * kKeys, a + r * kKeys, cols);
        std::fill(a + r * kKeys + cols, a + (r + 1) * kKeys, std::uint16_t{0});
      }
      std::fill(a + rows * kKeys, a + tiles * kUnitRows * kKeys, std::uint16_t{0});
      if (cols_d_ == dim_ && rows % kUnitRows == 0) {  // into dq itself: whole tiles of its rows
        bf16_gemm(path_, tiles, cols_d_ / kUnitCols, kKeys / kUnitDepth, a, kKeys,
                  k_rows_.get() + tile * kKeys * cols_d_, dq, dim_, /*accumulate=*/true);
      } else {
        bf16_gemm(path_, tiles, cols_d_ / kUnitCols, kKeys / kUnitDepth, a, kKeys,
                  k_rows_.get() + tile * kKeys * cols_d_, scratch.c.get(), cols_d_);
        for (std::int64_t r = 0; r < rows; ++r) {
          axpy(1.0f, scratch.c.get() + r * cols_d_, dq + r * dim_, dim_);
        }
      }
    }
    if (queries) {
      const std::int64_t depth = round_up(std::max<std::int64_t>(rows, 1), kUnitDepth);
      pairs_of(dS, kKeys, rows, cols, depth, kKeys, scratch.ds_pairs.get());
      bf16_gemm(path_, cols_d_ / kUnitRows, kKeys / kUnitCols, depth / kUnitDepth,
                q_t_.get() + slot * cols_d_ * kRows, kRows, scratch.ds_pairs.get(),
                scratch.dkt.get(), kKeys, /*accumulate=*/true);
    }
  }

 private:
  static size_t size(std::int64_t n) { return static_cast<size_t>(std::max<std::int64_t>(n, 1)); }
  static std::int64_t row_tiles(std::int64_t rows) { return (rows + kUnitRows - 1) / kUnitRows; }

  // dst [n] <- x [n] rounded to bf16, by the CPU's instruction where it has one.
  void round_run(const float* x, std::uint16_t* dst, std::int64_t n) const {
    if (round_run_ != nullptr) return round_run_(x, dst, n);
    round_bf16(x, dst, n);
  }

  // pairs [depth / 2, N, 2] <- x [rows, cols] (row stride ld) rounded to bf16, as B of a
  // product over the rows (two rows interleaved), zero past rows and cols.
  void pairs_of(const float* x, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                std::int64_t depth, std::int64_t N, std::uint16_t* pairs) const {
    for (std::int64_t r = 0; r < depth; r += 2) {
      std::uint16_t* dst = pairs + r * N;
      if (r < rows) {
        const float* odd = r + 1 < rows ? x + (r + 1) * ld : nullptr;
        if (round_pairs_ != nullptr) {
          round_pairs_(x + r * ld, odd, dst, cols);
        } else {
          round_bf16_pairs(x + r * ld, odd, dst, cols);
        }
        std::fill(dst + 2 * cols, dst + 2 * N, std::uint16_t{0});
      } else {
        std::fill(dst, dst + 2 * N, std::uint16_t{0});
      }
    }
  }
  // The same for x [rows, kKeys] contiguous (a transposed tile): pairs [depth / 2, kKeys, 2].
  void pairs_of(const float* x, std::int64_t rows, std::int64_t depth, std::int64_t N,
                std::uint16_t* pairs) const {
    pairs_of(x, N, rows, N, depth, N, pairs);
  }

  // This thread's f32 buffer for a transposed tile of dim rows.
  static float* transposed_scratch(std::int64_t dim) {
    thread_local std::vector<float> buffer;
    buffer.resize(static_cast<size_t>(std::max(dim, kKeys) * std::max(kKeys, kRows)));
    return buffer.data();
  }

  // rows_out [kRows, depth] and t_out [cols, kRows] <- src [rows, dim] (row stride ld) and its
  // transpose, as bf16, zero elsewhere.
  void lay_out(const float* src, std::int64_t ld, std::int64_t rows, std::int64_t dim,
               std::int64_t depth, std::int64_t cols, std::uint16_t* rows_out,
               std::uint16_t* t_out) const {
    for (std::int64_t r = 0; r < rows; ++r) {
      round_run(src + r * ld, rows_out + r * depth, dim);
      std::fill(rows_out + r * depth + dim, rows_out + (r + 1) * depth, std::uint16_t{0});
    }
    std::fill(rows_out + rows * depth, rows_out + kRows * depth, std::uint16_t{0});
    float* t = transposed_scratch(dim);
    pack_transposed(src, ld, rows, dim, kRows, t);
    round_run(t, t_out, dim * kRows);
    std::fill(t_out + dim * kRows, t_out + cols * kRows, std::uint16_t{0});
  }

  MatrixPath path_;
  std::int64_t dim_, dim_v_, depth_d_, depth_dv_, cols_d_, cols_dv_;
  LargeBuffer<std::uint16_t> q_rows_, q_t_, do_rows_, do_t_, k_t_, v_t_, k_rows_;
  RoundRun round_run_;  // the CPU's roundings (exp_round_bf16.hpp), or null: Highway's
  RoundPairs round_pairs_;
};

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QKV_KERNELS_CPU_BF16_GRADS_INL_H_
