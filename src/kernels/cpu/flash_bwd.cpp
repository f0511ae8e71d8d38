// The fused backward. P is recomputed tile by tile from the saved lse; nothing of size Tq x Tk
// is stored. Work is split over (batch, k/v head, key chunk): each item owns the dK and dV rows
// of its keys, and writes its share of dQ into a partial buffer of its chunk; the partials are
// summed in chunk order at the end. The number of chunks depends on the problem only, never on
// the thread count, and no two items write the same element, so the result is bitwise the same
// on any number of threads.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/flash_bwd.cpp"
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/block_view.hpp"
#include "kernels/cpu/bf16_dots.hpp"
#include "kernels/cpu/bf16_grads-inl.h"
#include "kernels/cpu/drop_cache-inl.h"
#include "kernels/cpu/entry.hpp"
#include "kernels/cpu/gemm-inl.h"
#include "kernels/cpu/large_buffer.hpp"
#include "kernels/cpu/pack-inl.h"
#include "kernels/cpu/pack_once.hpp"
#include "kernels/cpu/tile-inl.h"
#include "kernels/cpu/upcoming.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

constexpr std::int64_t kBq = TileTraits::kBlockQ;

// The items the backward aims for, where the key length allows (chunks of at least 4 k-blocks,
// at most 8 a head): enough for two to a few threads to balance. Capping the chunks a head at
// 32 / (B Hk), not at 8, at B 1, H 8 (4 chunks a head, not 8): peak RSS of `qkv bench --pass bwd
// --T 8192 --D 64 --threads 2` 346 -> 282 MiB, causal 290 -> 258; times of T 2048 and 8192, D 64
// and 128, causal and not, over 3 alternated rounds, 0.94-1.04 of 8 chunks', median 0.996. 16
// items (2 chunks a head): 250 / 242 MiB, but 1.00-1.06 of the time at T 8192, D 128. AMD EPYC
// (avx2 avx512_bf16 avx512f), 2 cores, 2026-11-29.
constexpr std::int64_t kBackwardItems = 32;

// Per-thread scratch of the backward: the raw scores (for captured gradients), score/probability
// tile, P * Z (dropout), dP, dropout factors, the score mod's derivative, the dK/dV accumulators
// of one k-block, and which of an item's dQ slots a tile has written.
template <class T>
struct BackwardScratch {
  hwy::AlignedFreeUniquePtr<T[]> raw, p, pz, dp, z, grad, dk, dv;
  std::vector<std::uint8_t> dq_written;  // per slot of an item's dQ partial
  BackwardScratch(std::int64_t dim, std::int64_t dim_v)
      : raw(hwy::AllocateAligned<T>(kBq * kBk)),
        p(hwy::AllocateAligned<T>(kBq * kBk)),
        pz(hwy::AllocateAligned<T>(kBq * kBk)),
        dp(hwy::AllocateAligned<T>(kBq * kBk)),
        z(hwy::AllocateAligned<T>(kBq * kBk)),
        grad(hwy::AllocateAligned<T>(kBq * kBk)),
        dk(hwy::AllocateAligned<T>(kBk * dim)),
        dv(hwy::AllocateAligned<T>(kBk * dim_v)) {}
};

// Packed operands shared by all items, for every (b, k/v head), in tiles of kBk keys so that no
// product strides across pages or cache sets (see pack-inl.h): K^T and V^T ([D or Dv, kBk] per
// tile) for the scores and dP, and K ([kBk, D] per tile) for dQ. head_stride = tk_pad. And Q and
// dO head by head, [B, Hq, Tq, D or Dv], so that a q-block's rows are contiguous. And whether
// they hold only finite numbers: per (b, k/v head, k-block) for K, per (b, head, q-block of kBq
// rows) for Q and dO together.
template <class T>
struct Packed {
  // Packs the K^T, K and V^T tiles of k-block kb of k/v head `head` unless they are
  // (pack_once.hpp): each by the item that owns the k-block, or before it by inverse_row_sums.
  std::function<void(std::int64_t head, std::int64_t kb)> ensure;
  // The same for q-block qb of query head `head` (b * Hq + h): its rows of q and dout, lse, delta
  // and qo_finite, by the first item (or inverse_row_sums) that reads them, while they are in the
  // cache (a pass over every row ahead of the items was 6% of a window's backward). While another
  // thread packs them, packs q-block `ahead` (>= 0: the caller's next) if no thread has started.
  std::function<void(std::int64_t head, std::int64_t qb, std::int64_t ahead)> ensure_rows;
  std::int64_t tk_pad = 0;
  const T* kt = nullptr;
  const T* vt = nullptr;
  const T* k = nullptr;
  const T* q = nullptr;
  const T* dout = nullptr;
  // K and dO where they lie, when their rows lie one after another (a heads-first view, a single
  // head): then they are not copied (data null otherwise). Copying them cost a sliding window's
  // backward ~5% (perf, T = 8192, heads-first, Intel Xeon VM, 2026-11-27).
  Rows<const T> k_in_place, dout_in_place;
  std::int64_t hk = 0, hq = 0, tq = 0;
  const std::uint8_t* k_finite = nullptr;   // [B * Hk, tk_pad / kBk]
  const std::uint8_t* qo_finite = nullptr;  // [B * Hq, q_blocks]
  std::int64_t q_blocks = 0;
  // With soft-capping: 1 / sum_j P_ij per row [B, Hq, Tq] (inverse_row_sums).
  const T* inv_sigma = nullptr;
  // The bf16 products (T = float, bf16 inputs, a matrix path; else null): then kt and vt are not
  // packed, and the tiles' products go through it.
  const Bf16Grads* bf16 = nullptr;
  // Decode shapes of bf16 inputs whose forward took its scores from the bf16 dot products
  // (decode_bf16_dots; else null): Q [B, Hq, Tq, D] and K [B, Hk, Tk, D] as bf16 bits, and the
  // dots' path.
  const std::uint16_t* q_bf16 = nullptr;
  const std::uint16_t* k_bf16 = nullptr;
  MatrixPath dots_path = MatrixPath::amx_emulated;

  // The bf16 products' index of q-block qb of query head bh (b * Hq + h), and of k-block kb of
  // k/v head `head`.
  std::int64_t q_slot(std::int64_t bh, std::int64_t qb) const { return bh * q_blocks + qb; }
  // K's rows from key j0 of k/v head `head` (b * Hk + hk), [keys, D] (the valid keys only: the
  // products read no further).
  const T* k_rows(std::int64_t head, std::int64_t j0, std::int64_t dim) const {
    if (k_in_place.data != nullptr) return k_in_place.at(head / hk, j0, head % hk);
    return k + head * dim * tk_pad + j0 * dim;
  }
  // dO's rows from row0 of [B, Hq, Tq], [rows, Dv] (rows within one q-block).
  const T* dout_rows(std::int64_t row0, std::int64_t dim_v) const {
    if (dout_in_place.data != nullptr) {
      const std::int64_t bh = row0 / tq;
      return dout_in_place.at(bh / hq, row0 % tq, bh % hq);
    }
    return dout + row0 * dim_v;
  }
  std::int64_t k_slot(std::int64_t head, std::int64_t kb) const {
    return head * (tk_pad / kBk) + kb;
  }
};

// One key chunk's share of dQ: the q-blocks that the chunk's tiles reach, each in a slot of kBq
// rows, [B * Hq, slots, kBq, D] at data (slots is 0 where the mask leaves the chunk no tile).
// Under a sparse mask a chunk reaches few rows: a window's chunk of 1024 keys, about 1300 (T =
// 8192, 8 chunks), so the partials hold about 1.3x dQ, not 8x, and zeroing and summing them
// costs as much less (they were 25% of a window's backward, perf, 2 threads, AMD EPYC Zen 3).
// Slots rather than one range of rows: Longformer's global rows reach every chunk, and a range
// from them to the chunk's window would span most rows.
template <class T>
struct DqPart {
  T* data = nullptr;
  std::vector<std::int64_t> slot;  // per q-block: its slot, or -1 where no tile reaches it
  std::int64_t slots = 0;
  // Row i (of a reached q-block) of head bh = b * Hq + h.
  T* at(std::int64_t bh, std::int64_t i, std::int64_t dim) const {
    return data + ((bh * slots + slot[static_cast<size_t>(i / kBq)]) * kBq + i % kBq) * dim;
  }
  bool holds(std::int64_t i) const { return slot[static_cast<size_t>(i / kBq)] >= 0; }
};

// dSij = P_ij (dP_ij - D_i) subtracts D_i = dO_i . O_i from dP_ij = z_ij dO_i . v_j, two dot
// products rounded apart. Where key j holds most of row i's weight, O_i is close to z_ij v_j, the
// two nearly cancel, and what is left is mostly their rounding errors, of the size of |dO_i| |v_j|
// (autograd's softmax backward takes D_i = sum_j P_ij dP_ij, which shares dP_ij's error, and
// there it cancels). So where P_ij > 1/2 (one key at most per row) and dSij is finite (a
// non-finite one keeps its NaN or inf), dSij is recomputed as P_ij dO_i . (z_ij v_j - O_i),
// differences first. Only with soft-capping, where rows put most of their weight on one key and
// the cap's small derivative at large scores keeps the rest of the f32 error small: softcap 30,
// a window of 16, scores up to 10c, D = 64: dq and dk 4.8x and 4.6x the f32 error of PyTorch's
// composed ops, 0.7x and 1.0x with this and inverse_row_sums (test_softcap_accuracy.cpp).
// P, dS [kBk] and z [kBk] (null without dropout): row i of a tile of keys [j0, j0 + cols);
// dout, out [Dv]: row i's; v: key j0's row of V, the next keys v_stride apart.
template <class T>
void dominant_key(const T* P, const T* z, std::int64_t cols, const T* dout, const T* out,
                  const T* v, std::int64_t v_stride, std::int64_t dim_v, T* dS) {
  for (std::int64_t c = 0; c < cols; ++c) {
    if (!(P[c] > T(0.5)) || !std::isfinite(dS[c])) continue;
    const T zc = z != nullptr ? z[c] : T(1);
    const T* vj = v + c * v_stride;
    T sum = 0;
    for (std::int64_t x = 0; x < dim_v; ++x) sum += dout[x] * (zc * vj[x] - out[x]);
    dS[c] = P[c] * sum;
  }
}

// The products of one tile over the pairs that reach a result only: (r, c) with c < cols, a row
// whose lse is not -inf, and a key the mask keeps. For tiles where a non-finite value of Q or dO
// (row side) or K (key side) would otherwise meet a dropped pair's 0 and make NaN (0 * inf):
//   dV [cols, Dv] += (P * Z)^T dO and dK [cols, D] += dS^T Q when rows_finite is false,
//   dQ [rows, D] += dS K when keys_finite is false; the other products are left to the caller.
template <class T, class ScoreMod, class MaskMod>
void products_kept(const FwdParams<T, ScoreMod, MaskMod>& p, std::int64_t b, std::int64_t h,
                   std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols,
                   TileKind kind, const T* lse_row, bool rows_finite, bool keys_finite, const T* PZ,
                   const T* dS, const T* q, const T* dob, const T* k, T* dq, T* dk, T* dv) {
  const Dims& d = p.dims;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    if (lse_row[r] == kNegInf) continue;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (kind == TileKind::partial && !p.mask_mod(b, h, i0 + r, j0 + c)) continue;
      const T ds = dS[r * kBk + c];
      if (!rows_finite) {
        axpy(PZ[r * kBk + c], dob + r * d.Dv, dv + c * d.Dv, d.Dv);
        axpy(ds, q + r * d.D, dk + c * d.D, d.D);
      }
      if (!keys_finite) axpy(ds, k + c * d.D, dq + r * d.D, d.D);
    }
  }
}

// The columns of a tile of cols keys that the f32 products for S and dP compute: whole vectors up
// to cols; the rest of the kBk are set to 0, and K^T and V^T are packed with zeros only that far.
// Each computed element is the same chain of multiply-adds as over all kBk, so the bits are too.
// A sequence of 14 keys (qkv demo's translator) had its one tile computed 64 keys wide, and
// zeroing the packs' 50 padding keys was 2.6% of a training step (perf, 2 threads of the AMD EPYC
// Zen 5 VM, 2026-11-29).
template <class T>
std::int64_t product_cols(std::int64_t cols) {
  const auto L =
      static_cast<std::int64_t>(hwy::HWY_NAMESPACE::Lanes(hwy::HWY_NAMESPACE::ScalableTag<T>()));
  return std::min(kBk, (cols + L - 1) / L * L);
}

// rows of S [rows, kBk] from column n on <- 0.
template <class T>
void zero_columns(T* S, std::int64_t rows, std::int64_t n) {
  if (n == kBk) return;
  for (std::int64_t r = 0; r < rows; ++r) std::fill(S + r * kBk + n, S + (r + 1) * kBk, T(0));
}

// S [rows, kBk] <- (scale q_i) . k_j for the rows [row0, row0 + rows) of [B, Hq, Tq] against the
// keys [j0, j0 + cols) of k/v head `head` (b * Hk + hk); columns past cols hold 0 (the pack's
// zero padding, or set here), which soft-capping reads with the rest of the row before the mask
// sets them to -inf. Decode shapes take their scores as the split-keys forward did: from
// score_dot, or for a k/v head of kDecodeGroupedRows query rows or more from the same product
// (each score the same chain of multiply-adds over D whatever the rows around it), or with
// packed.q_bf16 from the bf16 dot products (bf16_dots.hpp) as the forward's.
// With packed.bf16, from the bf16 products (row0 = (b * Hq + h) * Tq + i0).
template <class T>
void tile_scores(const Dims& d, const Packed<T>& packed, T scale, std::int64_t head,
                 std::int64_t row0, std::int64_t rows, std::int64_t j0, std::int64_t cols, T* S) {
  if constexpr (std::is_same_v<T, float>) {
    if (packed.bf16 != nullptr) {
      const std::int64_t bh = row0 / d.Tq, qb = row0 % d.Tq / kBq;
      packed.bf16->scores(packed.q_slot(bh, qb), packed.k_slot(head, j0 / kBk), rows, scale, S);
      return;
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    if (packed.q_bf16 != nullptr) {
      const std::uint16_t* k = packed.k_bf16 + (head * d.Tk + j0) * d.D;
      const std::uint16_t* q[kBf16DotRows];
      float* s[kBf16DotRows];
      for (std::int64_t r0 = 0; r0 < rows; r0 += kBf16DotRows) {
        const std::int64_t m = std::min(kBf16DotRows, rows - r0);
        for (std::int64_t r = 0; r < m; ++r) q[r] = packed.q_bf16 + (row0 + r0 + r) * d.D;
        for (std::int64_t c = 0; c < cols; c += kBf16DotKeys) {
          for (std::int64_t r = 0; r < m; ++r) s[r] = S + (r0 + r) * kBk + c;
          bf16_score_dots(packed.dots_path, q, m, k + c * d.D, d.D,
                          std::min(kBf16DotKeys, cols - c), d.D, scale, s);
        }
      }
      zero_columns(S, rows, cols);
      return;
    }
  }
  const T* q = packed.q + row0 * d.D;
  if (TileTraits::decode_shape(d.Tq, d.Tk) && d.group() * d.Tq < TileTraits::kDecodeGroupedRows) {
    const T* k = packed.k_rows(head, j0, d.D);  // this tile's rows, [cols, D]
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; c += kScoreRun) {
        score_dots(q + r * d.D, k + c * d.D, d.D, std::min(kScoreRun, cols - c), d.D,
                   S + r * kBk + c);
      }
      std::fill(S + r * kBk + cols, S + (r + 1) * kBk, T(0));
    }
  } else {
    const std::int64_t n = product_cols<T>(cols);
    gemm<true>(rows, n, d.D, q, d.D, packed.kt + head * d.D * packed.tk_pad + j0 * d.D, kBk, S, kBk,
               false);
    zero_columns(S, rows, n);
  }
}

// One tile: rows [i0, i0 + rows) of head h against keys [j0, j0 + cols) of k/v head hk.
// Accumulates into scratch.dk / scratch.dv (this k-block), dq_part (the rows of its chunk; written
// instead, all kBq rows of the slot, where dq_first), p.dbias and sink (the captured tensors'
// gradients); lse and delta [B, Hq, Tq]. kept [rows]: a partial tile's kept keys as bits
// (PartialTileBits), or null for the mask mod. upcoming and tile_ahead: lines asked of the cache,
// a step of each at each row of the tile's two softmax loops.
template <class T, class ScoreMod, class MaskMod>
void backward_tile(const BwdParams<T, ScoreMod, MaskMod>& p, const Packed<T>& packed, const T* lse,
                   const T* delta, std::int64_t b, std::int64_t h, std::int64_t i0,
                   std::int64_t rows, std::int64_t j0, std::int64_t cols, TileKind kind,
                   BackwardScratch<T>& scratch, Bf16Scratch* bf16_scratch, const DqPart<T>& dq_part,
                   const detail::CaptureSink<T>& sink, const std::uint64_t* kept, bool dq_first,
                   Upcoming& upcoming, Upcoming& tile_ahead) {
  const Dims& d = p.dims;
  const std::int64_t hk = h / d.group();
  const std::int64_t head = b * d.Hk + hk;
  const std::int64_t row0 = (b * d.Hq + h) * d.Tq + i0;  // of [B, Hq, Tq]
  const T* q = packed.q + row0 * d.D;
  const T* k = packed.k_rows(head, j0, d.D);  // this tile's rows, [cols, D]
  const T* dob = packed.dout_rows(row0, d.Dv);
  const T* lse_row = lse + row0;
  const T* delta_row = delta + row0;
  const bool rows_finite = packed.qo_finite[(b * d.Hq + h) * packed.q_blocks + i0 / kBq];
  const bool keys_finite = packed.k_finite[head * (packed.tk_pad / kBk) + j0 / kBk];
  const bool slope = has_slope(p.score_mod);
  const bool dominant = renormalizes(p.score_mod);
  const bool dropout = p.dropout.enabled();
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T* P = scratch.p.get();
  T* dP = scratch.dp.get();
  T* Z = scratch.z.get();
  T* grad = scratch.grad.get();

  // forward: s = score_mod((scale q) . k), masked; P = exp(s - lse), with soft-capping divided
  // by its row sum (inv_sigma)
  tile_scores(d, packed, p.scale, head, row0, rows, j0, cols, P);
  if (p.captured > 0) std::copy_n(P, rows * kBk, scratch.raw.get());
  score_tile(p, b, h, i0, rows, j0, cols, &kind, P, slope ? grad : static_cast<T*>(nullptr), kept);
  for (std::int64_t r = 0; r < rows; ++r) {
    upcoming.step();
    tile_ahead.step();
    T* row = P + r * kBk;
    if (lse_row[r] == kNegInf) {
      std::fill(row, row + kBk, T(0));  // every key of this row dropped: zero gradients
    } else {
      row_exp(row, lse_row[r]);
      if (packed.inv_sigma != nullptr) scale_row(row, kBk, packed.inv_sigma[row0 + r]);
      // A NaN lse (a row the forward found NaN) makes exp(-inf - lse) NaN where the mask drops.
      if (kind == TileKind::partial && std::isnan(lse_row[r])) {
        mask_row(p.mask_mod, b, h, i0 + r, j0, cols, T(0), row);
      }
    }
  }
  if (dropout) dropout_tile(p, b, h, i0, rows, j0, cols, Z);

  // forward: out = (P * Z) V  ->  dV += (P * Z)^T dO. The products with P^T and dS^T read the
  // tiles transposed where they are (gemm's kATransposed): the two scalar transposed copies this
  // replaces took ~8% of the backward.
  const T* PZ = P;
  if (dropout) {
    T* pz = scratch.pz.get();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) pz[r * kBk + c] = P[r * kBk + c] * Z[r * kBk + c];
    }
    PZ = pz;
  }
  const Bf16Grads* bf16 = nullptr;
  if constexpr (std::is_same_v<T, float>) bf16 = packed.bf16;
  const std::int64_t q_slot = packed.q_slot(b * d.Hq + h, i0 / kBq);
  const std::int64_t k_slot = packed.k_slot(head, j0 / kBk);
  if (rows_finite) {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16 != nullptr) bf16->add_dv(q_slot, rows, cols, PZ, *bf16_scratch);
    }
    if (bf16 == nullptr) {
      gemm<false, true>(cols, d.Dv, rows, PZ, kBk, dob, d.Dv, scratch.dv.get(), d.Dv, true);
    }
  }

  // dP = (dO V^T) * Z; dS = P * (dP - D_i), with D_i = rowsum(dO_i * O_i)
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 != nullptr) bf16->dp(q_slot, k_slot, rows, dP);
  }
  if (bf16 == nullptr) {
    const std::int64_t n = product_cols<T>(cols);
    gemm<true>(rows, n, d.Dv, dob, d.Dv, packed.vt + head * d.Dv * packed.tk_pad + j0 * d.Dv, kBk,
               dP, kBk, false);
    zero_columns(dP, rows, n);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    upcoming.step();
    tile_ahead.step();
    T* dp = dP + r * kBk;
    const T* pr = P + r * kBk;
    if (lse_row[r] == kNegInf) {  // zero gradients, whatever dO, O and V hold
      std::fill(dp, dp + kBk, T(0));
      continue;
    }
    if (dropout) row_mul(dp, Z + r * kBk);
    for (std::int64_t c = 0; c < cols; ++c) dp[c] = pr[c] * (dp[c] - delta_row[r]);
    if (dominant) {
      dominant_key(pr, dropout ? Z + r * kBk : static_cast<T*>(nullptr), cols, dob + r * d.Dv,
                   p.out.at(b, i0 + r, h), p.v.at(b, j0, hk), p.v.row, d.Dv, dp);
    }
    // Where the mask drops, P is 0 but dP - D_i may be NaN (a NaN value, a NaN dO): 0, not NaN.
    // Where the row is finite, P = 0 has made dS 0 already (or -0, which adds as 0), so the mask
    // need not run again: a mask given as a lambda tests each key of a partial tile, and doing so
    // twice per tile made a lambda window's backward 1.16x the built-in window's (T = 8192, 2
    // threads, AMD EPYC Zen 3).
    if (kind == TileKind::partial && !row_finite(dp)) {
      mask_row(p.mask_mod, b, h, i0 + r, j0, cols, T(0), dp);
    }
    // forward: s += bias  ->  dbias = dS, summed over the bias's broadcast dimensions
    if (p.dbias != nullptr) {
      for (std::int64_t c = 0; c < cols; ++c)
        p.dbias[p.dbias_index.offset(b, h, i0 + r, j0 + c)] += dp[c];
    }
    // and to what the score mod captured: d captured += dS * ds'/d captured
    if (p.captured > 0) {
      captured_row(p.score_mod, b, h, i0 + r, j0, cols, scratch.raw.get() + r * kBk, dp, sink);
    }
    // forward: s' = score_mod(s), s = (scale q) . k  ->  ds = ds' * score_mod'(s)
    if (slope) row_mul(dp, grad + r * kBk);
  }
  // dQ += dS K (times the scale, applied once to the sum of the partials); dK += dS^T (scale Q)
  // (with the bf16 products, dK^T += Q^T dS, the scale applied when the k-block is written)
  // The first tile of a q-block's slot writes its rows (dq_first): zeroing an item's slots ahead
  // of its tiles wrote up to a MiB (BigBird's chunks reach ~60 of 128 q-blocks), more than L2
  // holds, and read it back from memory. Time over full x kept tiles, T = 8192, 2 threads, AMD
  // EPYC (avx2 avx512_bf16 avx512f), 2026-11-28, three alternated runs: BigBird 1.29, 1.29, 1.28
  // -> 1.25, 1.25, 1.25; window 1.23, 1.29, 1.27 -> 1.19, 1.25, 1.24.
  T* dq = dq_part.at(b * d.Hq + h, i0, d.D);
  const bool dq_written = dq_first && bf16 == nullptr && keys_finite;
  if (dq_first) std::fill(dq + (dq_written ? rows : 0) * d.D, dq + kBq * d.D, T(0));
  if constexpr (std::is_same_v<T, float>) {
    if (bf16 != nullptr) {
      bf16->add_dq_dk(q_slot, k_slot, rows, cols, dP, keys_finite, rows_finite, dq, *bf16_scratch);
    }
  }
  if (bf16 == nullptr) {
    if (keys_finite) gemm(rows, d.D, cols, dP, kBk, k, d.D, dq, d.D, !dq_written);
    if (rows_finite) {
      gemm<false, true>(cols, d.D, rows, dP, kBk, q, d.D, scratch.dk.get(), d.D, true);
    }
  }
  if (!rows_finite || !keys_finite) {
    products_kept(p, b, h, i0, rows, j0, cols, kind, lse_row, rows_finite, keys_finite, PZ, dP, q,
                  dob, k, dq, scratch.dk.get(), scratch.dv.get());
  }
}

// With soft-capping, lse [B, Hq, Tq]: inv_sigma [B * Hq * Tq] <- 1 / sum_j P_ij over the keys row i
// keeps, P_ij = exp(s_ij - lse_i) exactly as backward_tile computes it (1 where lse is -inf or the
// sum is not a positive number), by which backward_tile divides P. The sum is exp(LSE_i - lse_i),
// LSE_i the log-sum-exp of the row's scores, which lse_i rounds to f32: by up to half an ulp of
// |lse_i|, 2^-19 relative where soft-capping at c = 50 puts lse near 50, 32x f32's own rounding,
// and every P of the row carries it. The forward's out is normalized by its own sum, so D_i = dO_i
// . O_i does not share it, and dV, dS and through them dQ and dK err by it: dv's f32 error 1.26x
// PyTorch's composed ops' (median over 300 problems: softcap 5, 30, 50, D 32-256, ALiBi, windows,
// GQA), 0.85x with this (and the cap in double). One more S = Q K^T, cap and exp per tile: about
// 40 ms of a soft-capped backward of 165 (T = 1024, D = 64, H = 8, one thread of the Zen 3 VM).
template <class T, class ScoreMod, class MaskMod>
void inverse_row_sums(const FwdParams<T, ScoreMod, MaskMod>& p, const Packed<T>& packed,
                      const T* lse, T* inv_sigma) {
  const Dims& d = p.dims;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  std::fill(inv_sigma, inv_sigma + d.B * d.Hq * d.Tq, T(1));
  const std::int64_t items = d.B * d.Hq * packed.q_blocks;
  const BlockView blocks(p.blocks);
#pragma omp parallel
  {
    auto tile = hwy::AllocateAligned<T>(kBq * kBk);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t i0 = item % packed.q_blocks * kBq;
      const std::int64_t h = item / packed.q_blocks % d.Hq;
      const std::int64_t b = item / packed.q_blocks / d.Hq;
      const std::int64_t rows = std::min({kBq, d.Tq - i0, row_limit(p.mask_mod, b) - i0});
      if (rows <= 0) continue;
      packed.ensure_rows(b * d.Hq + h, i0 / kBq, -1);
      const std::int64_t row0 = (b * d.Hq + h) * d.Tq + i0;  // of [B, Hq, Tq]
      const std::int64_t head = b * d.Hk + h / d.group();
      double sums[kBq] = {};
      const KeyRange span = blocks.k_span(b, h, i0 / kBq);
      for (std::int64_t kb = span.lo; kb < span.hi; ++kb) {
        const std::int64_t j0 = kb * kBk;
        const std::int64_t cols = std::min(kBk, d.Tk - j0);
        const TileKind kind = blocks.kind(b, h, i0 / kBq, kb);
        if (kind == TileKind::empty) continue;
        packed.ensure(head, kb);
        tile_scores(d, packed, p.scale, head, row0, rows, j0, cols, tile.get());
        score_tile(p, b, h, i0, rows, j0, cols, &kind, tile.get(), static_cast<T*>(nullptr));
        for (std::int64_t r = 0; r < rows; ++r) {
          if (lse[row0 + r] != kNegInf) sums[r] += row_exp(tile.get() + r * kBk, lse[row0 + r]);
        }
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        if (sums[r] > 0 && std::isfinite(sums[r])) inv_sigma[row0 + r] = T(1 / sums[r]);
      }
    }
  }
}

// Work item: keys of k-blocks [kb_lo, kb_hi) for batches [b_lo, b_hi) and k/v heads
// [hk_lo, hk_hi), which own the rows of dq_part of those batches and heads (written here).
template <class T, class ScoreMod, class MaskMod>
void backward_item(const BwdParams<T, ScoreMod, MaskMod>& p, const Packed<T>& packed, const T* lse,
                   const T* delta, std::int64_t b_lo, std::int64_t b_hi, std::int64_t hk_lo,
                   std::int64_t hk_hi, std::int64_t kb_lo, std::int64_t kb_hi,
                   BackwardScratch<T>& scratch, Bf16Scratch* bf16_scratch, const DqPart<T>& dq_part,
                   const detail::CaptureSink<T>& sink, const PartialTileBits* bits) {
  const Dims& d = p.dims;
  const BlockView blocks(p.blocks);
  for (std::int64_t b = b_lo; b < b_hi; ++b) {
    for (std::int64_t hk = hk_lo; hk < hk_hi; ++hk) {
      // This item's rows of the chunk's dQ partial: the query heads of (b, hk).
      // This item's slots of the chunk's dQ partial, [group, slots]: whether a tile wrote them.
      T* dq_rows = dq_part.data + (b * d.Hq + hk * d.group()) * dq_part.slots * kBq * d.D;
      std::vector<std::uint8_t>& written = scratch.dq_written;
      written.assign(static_cast<std::size_t>(d.group() * dq_part.slots), 0);
      for (std::int64_t kb = kb_lo; kb < kb_hi; ++kb) {
        const std::int64_t j0 = kb * kBk;
        const std::int64_t cols = std::min(kBk, d.Tk - j0);
        std::fill(scratch.dk.get(), scratch.dk.get() + cols * d.D, T(0));
        std::fill(scratch.dv.get(), scratch.dv.get() + cols * d.Dv, T(0));
        if (bf16_scratch != nullptr) {
          std::fill(bf16_scratch->dkt.get(), bf16_scratch->dkt.get() + packed.bf16->cols_d() * kBk,
                    0.0f);
          std::fill(bf16_scratch->dvt.get(), bf16_scratch->dvt.get() + packed.bf16->cols_dv() * kBk,
                    0.0f);
        }
        // Asked of the cache during this k-block's tiles: the rows of each head's first q-block
        // that the previous k-block did not reach (a window's next rows), the next k-block's K
        // and V rows, and this k-block's dK and dV rows.
        Upcoming upcoming;
        std::int64_t tiles = 0;
        const std::int64_t size = static_cast<std::int64_t>(sizeof(T));
        for (std::int64_t h = hk * d.group(); h < (hk + 1) * d.group(); ++h) {
          const KeyRange queries = blocks.q_span(b, h, kb);
          for (std::int64_t qb = queries.lo; qb < queries.hi; ++qb) {
            tiles += blocks.kind_t(b, h, kb, qb) != TileKind::empty;
          }
          const std::int64_t qb =
              kb == 0 ? queries.lo : std::max(queries.lo, blocks.q_span(b, h, kb - 1).hi);
          if (qb >= queries.hi) continue;
          const std::int64_t i0 = qb * kBq, rows = std::min(kBq, d.Tq - i0);
          upcoming.add(p.q.at(b, i0, h), p.q.row * size, rows, d.D * size, false);
          upcoming.add(p.dout.at(b, i0, h), p.dout.row * size, rows, d.Dv * size, false);
          upcoming.add(p.out.at(b, i0, h), p.out.row * size, rows, d.Dv * size, false);
        }
        if (kb + 1 < kb_hi) {
          const std::int64_t keys = std::min(kBk, d.Tk - j0 - kBk);
          upcoming.add(p.k.at(b, j0 + kBk, hk), p.k.row * size, keys, d.D * size, false);
          upcoming.add(p.v.at(b, j0 + kBk, hk), p.v.row * size, keys, d.Dv * size, false);
        }
        upcoming.add(p.dk.at(b, j0, hk), p.dk.row * size, cols, d.D * size, true);
        upcoming.add(p.dv.at(b, j0, hk), p.dv.row * size, cols, d.Dv * size, true);
        // Spread over the rows of the k-block's tiles' two row loops. Time over full x kept tiles
        // (T = 8192, H = 8, D = 64, 2 threads, AMD EPYC (avx2 avx512_bf16 avx512f), 2026-11-28),
        // three alternated runs: window 1.26, 1.26, 1.27 -> 1.20, 1.21, 1.22; Longformer and
        // BigBird within the noise (+-2%).
        upcoming.pace(2 * kBq * tiles);
        for (std::int64_t h = hk * d.group(); h < (hk + 1) * d.group(); ++h) {
          const KeyRange queries = blocks.q_span(b, h, kb);  // in q-blocks
          std::int64_t partials = 0;                         // met in this k-block of this head
          for (std::int64_t qb = queries.lo; qb < queries.hi; ++qb) {
            const TileKind kind = blocks.kind_t(b, h, kb, qb);
            if (kind == TileKind::empty) continue;
            const std::uint64_t* kept = bits != nullptr && kind == TileKind::partial
                                            ? bits->tile(b, kb, partials++)
                                            : nullptr;
            const std::int64_t i0 = qb * kBq;
            const std::int64_t rows = std::min({kBq, d.Tq - i0, row_limit(p.mask_mod, b) - i0});
            if (rows <= 0) continue;
            packed.ensure(b * d.Hk + hk, kb);
            // Items on neighbouring k-blocks of a head walk the same q-blocks in the same order:
            // the one that finds its rows being packed packs the next ones meanwhile (`qkv bench
            // --peak --T 2048 4096 --D 64 --pass bwd --threads 2`, AMD EPYC (avx2 avx512_bf16
            // avx512f), 2026-11-28, three alternated runs, % of the FMA burst: T 2048 80.9-83.0
            // -> 82.5-83.9, causal 75.8-76.4 -> 75.9-78.6; T 4096 the same within the noise).
            const bool next = qb + 1 < queries.hi &&
                              blocks.kind_t(b, h, kb, qb + 1) != TileKind::empty &&
                              (qb + 1) * kBq < row_limit(p.mask_mod, b);
            packed.ensure_rows(b * d.Hq + h, qb, next ? qb + 1 : -1);
            std::uint8_t& slot_written = written[static_cast<std::size_t>(
                (h - hk * d.group()) * dq_part.slots + dq_part.slot[static_cast<std::size_t>(qb)])];
            // Where the next tile's q-block is not the next one (BigBird's random blocks), its
            // rows of Q and dO, which the hardware's prefetchers do not guess, during this tile.
            // BigBird's backward (T = 8192, 2 threads, AMD EPYC (avx2 avx512_bf16 avx512f),
            // 2026-11-28, four alternated runs, ms): 74.2-76.3 -> 71.6-72.2; window, Longformer and
            // full the same within the noise. For every next tile full's took 2-5% longer, and
            // with the next slot of dQ BigBird's gained no more.
            Upcoming tile_ahead;
            std::int64_t nq = qb + 1;
            while (nq < queries.hi && blocks.kind_t(b, h, kb, nq) == TileKind::empty) ++nq;
            if (nq > qb + 1 && nq < queries.hi) {
              const std::int64_t n0 = nq * kBq, n_rows = std::min(kBq, d.Tq - n0);
              const std::int64_t r0 = (b * d.Hq + h) * d.Tq + n0;  // of [B, Hq, Tq]
              tile_ahead.add(packed.q + r0 * d.D, d.D * size, n_rows, d.D * size, false);
              tile_ahead.add(packed.dout_rows(r0, d.Dv), d.Dv * size, n_rows, d.Dv * size, false);
            }
            tile_ahead.pace(2 * rows);
            backward_tile(p, packed, lse, delta, b, h, i0, rows, j0, cols, kind, scratch,
                          bf16_scratch, dq_part, sink, kept, !slot_written, upcoming, tile_ahead);
            slot_written = 1;
          }
        }
        if (bf16_scratch != nullptr) {  // the transposed sums of the bf16 products added
          const float* dkt = bf16_scratch->dkt.get();
          const float* dvt = bf16_scratch->dvt.get();
          for (std::int64_t c = 0; c < cols; ++c) {
            T* dk = scratch.dk.get() + c * d.D;
            T* dv = scratch.dv.get() + c * d.Dv;
            for (std::int64_t x = 0; x < d.D; ++x) dk[x] += p.scale * dkt[x * kBk + c];
            for (std::int64_t x = 0; x < d.Dv; ++x) dv[x] += dvt[x * kBk + c];
          }
        }
        for (std::int64_t c = 0; c < cols; ++c) {
          std::copy_n(scratch.dk.get() + c * d.D, d.D, p.dk.at(b, j0 + c, hk));
          std::copy_n(scratch.dv.get() + c * d.Dv, d.Dv, p.dv.at(b, j0 + c, hk));
        }
      }
      // Slots no tile of this item reached (another head's, under a mask that varies by head)
      // hold zeros for the sum.
      for (std::size_t at = 0; at < written.size(); ++at) {
        if (written[at] == 0) std::fill_n(dq_rows + at * kBq * d.D, kBq * d.D, T(0));
      }
    }
  }
}

// q, k, v, out, lse and dout -> dq, dk, dv (every row written: each k-block of each (b, k/v
// head) belongs to one item) and dbias; kernels/flash_params.hpp.
template <class T, class ScoreMod, class MaskMod>
void backward_impl(const BwdParams<T, ScoreMod, MaskMod>& p) {
  const Dims& d = p.dims;
  const std::int64_t q_elems = d.B * d.Tq * d.Hq * d.D;
  // Per q-block on first use (packed.ensure_rows): D_i = rowsum(dO_i * O_i), [B, Hq, Tq]; and
  // scale * Q and dO head by head ([B, Hq, Tq, D or Dv]). scale * Q as the forward rounds it
  // (scale_rows): the scores come out the same, and d s / d k = scale * q is what dK needs. Head by
  // head because in place, a q-block's rows are Hq * D apart (2 KiB at D = 64, H = 8), so the rows
  // of a register tile share a few of L1's sets, and so do the dQ rows each tile accumulates into
  // (dQ's partials are head by head too). T = 2048, H = 8, 2 threads, median fraction of the FMA
  // burst measured beside each rep: D = 64 0.61 -> 0.71, D = 128 0.63 -> 0.71.
  const std::int64_t rows_all = d.B * d.Hq * d.Tq;
  const auto delta = allocate_large<T>(static_cast<size_t>(std::max<std::int64_t>(rows_all, 1)));
  // lse as [B, Hq, Tq] side by side (the caller's may have any strides): a tile reads the rows
  // of its q-block together.
  const auto lse = allocate_large<T>(static_cast<size_t>(std::max<std::int64_t>(rows_all, 1)));
  const auto q_heads = allocate_large<T>(static_cast<size_t>(std::max<std::int64_t>(q_elems, 1)));
  Packed<T> packed;
  packed.hk = d.Hk;
  packed.hq = d.Hq;
  packed.tq = d.Tq;
  if (p.k.row == d.D) packed.k_in_place = p.k;
  if (p.dout.row == d.Dv) packed.dout_in_place = p.dout;
  const bool copy_dout = packed.dout_in_place.data == nullptr;
  const auto dout_heads = allocate_large<T>(
      static_cast<size_t>(copy_dout ? std::max<std::int64_t>(rows_all * d.Dv, 1) : 0));
  const std::int64_t q_blocks = (d.Tq + kBq - 1) / kBq;
  std::vector<std::uint8_t> qo_finite(static_cast<size_t>(d.B * d.Hq * q_blocks));
  packed.q_blocks = q_blocks;
  packed.tk_pad = round_up(d.Tk, kBk);
  const std::int64_t k_tiles = packed.tk_pad / kBk;
  // The bf16 products where the forward took them for the same inputs (flash_fwd.cpp's
  // forward_tiled: the same path, from as many keys, not a decode shape), so that P is the
  // forward's.
  std::optional<Bf16Grads> bf16;
  if constexpr (std::is_same_v<T, float>) {
    MatrixPath path;
    if (p.bf16_inputs && !TileTraits::decode_shape(d.Tq, d.Tk) && fused_bf16_path(d.Tk, path)) {
      bf16.emplace(d, path, q_blocks, k_tiles);
      packed.bf16 = &*bf16;
    }
  }
  // Decode shapes' bf16 dot products where the forward took them (flash_decode.cpp), from Q and
  // K as bf16 bits again (exactly: their values are bf16's).
  LargeBuffer<std::uint16_t> q_bf16, k_bf16;
  if constexpr (std::is_same_v<T, float>) {
    MatrixPath path;
    if (p.bf16_inputs && decode_bf16_dots(d, path)) {
      q_bf16 = allocate_large<std::uint16_t>(static_cast<size_t>(rows_all * d.D));
      k_bf16 = allocate_large<std::uint16_t>(static_cast<size_t>(d.B * d.Hk * d.Tk * d.D));
      const auto bits = [&](const float* from, std::uint16_t* to) {
        for (std::int64_t x = 0; x < d.D; ++x) {
          to[x] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(from[x]) >> 16);
        }
      };
#pragma omp parallel for schedule(static)
      for (std::int64_t row = 0; row < rows_all; ++row) {  // [B, Hq, Tq]
        const std::int64_t i = row % d.Tq, h = row / d.Tq % d.Hq, b = row / d.Tq / d.Hq;
        bits(p.q.at(b, i, h), q_bf16.get() + row * d.D);
      }
#pragma omp parallel for schedule(static)
      for (std::int64_t key = 0; key < d.B * d.Hk * d.Tk; ++key) {  // [B, Hk, Tk]
        const std::int64_t j = key % d.Tk, hk = key / d.Tk % d.Hk, b = key / d.Tk / d.Hk;
        bits(p.k.at(b, j, hk), k_bf16.get() + key * d.D);
      }
      packed.q_bf16 = q_bf16.get();
      packed.k_bf16 = k_bf16.get();
      packed.dots_path = path;
    }
  }
  const PackOnce rows_once(d.B * d.Hq * q_blocks);
  const auto pack_rows_of = [&](std::int64_t head, std::int64_t qb) {
    const std::int64_t b = head / d.Hq, h = head % d.Hq, i0 = qb * kBq;
    const std::int64_t rows = std::min(kBq, d.Tq - i0);
    const std::int64_t first = head * d.Tq + i0;  // row of [B, Hq, Tq]
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = i0 + r, row = first + r;
      const T* dout = p.dout.at(b, i, h);
      // In vectors (score_dot): one scalar chain of Dv dependent adds per row took 5% of a
      // window's backward (T = 8192, 2 threads, AMD EPYC Zen 3).
      delta[row] = score_dot(dout, p.out.at(b, i, h), d.Dv);
      lse[row] = p.lse(b, h, i);
      scale_rows(p.q.at(b, i, h), d.D, 1, d.D, p.scale, q_heads.get() + row * d.D);
      if (copy_dout) std::copy_n(dout, d.Dv, dout_heads.get() + row * d.Dv);
    }
    if constexpr (std::is_same_v<T, float>) {
      if (bf16) {
        bf16->pack_rows(packed.q_slot(head, qb), p.q.at(b, i0, h), p.q.row, p.dout.at(b, i0, h),
                        p.dout.row, rows);
      }
    }
    qo_finite[static_cast<size_t>(head * q_blocks + qb)] =
        all_finite(q_heads.get() + first * d.D, rows * d.D) &&
        all_finite(copy_dout ? dout_heads.get() + first * d.Dv : p.dout.at(b, i0, h), rows * d.Dv);
  };
  packed.ensure_rows = [&](std::int64_t head, std::int64_t qb, std::int64_t ahead) {
    rows_once.ensure(head * q_blocks + qb, ahead >= 0 ? head * q_blocks + ahead : -1,
                     [&](std::int64_t slot) { pack_rows_of(head, slot - head * q_blocks); });
  };
  // K^T and V^T only for the f32 products; K (rows) always: products_kept reads it.
  const std::int64_t transposed = bf16 ? 1 : d.B * d.Hk * packed.tk_pad;
  const auto kt = allocate_large<T>(static_cast<size_t>(transposed * d.D));
  const auto vt = allocate_large<T>(static_cast<size_t>(transposed * d.Dv));
  const bool copy_k = packed.k_in_place.data == nullptr;
  const auto kp =
      allocate_large<T>(static_cast<size_t>(copy_k ? d.B * d.Hk * d.D * packed.tk_pad : 0));
  std::vector<std::uint8_t> k_finite(static_cast<size_t>(d.B * d.Hk * k_tiles));
  const PackOnce once(d.B * d.Hk * k_tiles);
  packed.ensure = [&](std::int64_t head, std::int64_t kb) {
    once.ensure(head * k_tiles + kb, [&] {
      const std::int64_t b = head / d.Hk, hk = head % d.Hk, j0 = kb * kBk;
      const std::int64_t n = std::min(kBk, d.Tk - j0);
      const std::int64_t tile = head * k_tiles + kb;
      if (copy_k) {
        T* k_rows = kp.get() + tile * kBk * d.D;
        // The tile's n rows only, not zero-padded to kBk: the products read K up to the tile's
        // keys (a 14-key sequence's padding was 0.8 MB of zeros a call).
        convert_rows(p.k.at(b, j0, hk), p.k.row, n, d.D, k_rows, d.D);
        k_finite[static_cast<size_t>(tile)] = all_finite(k_rows, n * d.D);
      } else {
        k_finite[static_cast<size_t>(tile)] = all_finite(p.k.at(b, j0, hk), n * d.D);
      }
      if constexpr (std::is_same_v<T, float>) {
        if (bf16) {
          bf16->pack_keys(tile, p.k.at(b, j0, hk), p.k.row, p.v.at(b, j0, hk), p.v.row, n);
          return;
        }
      }
      pack_transposed(p.k.at(b, j0, hk), p.k.row, n, d.D, kBk, kt.get() + tile * kBk * d.D,
                      product_cols<T>(n));
      pack_transposed(p.v.at(b, j0, hk), p.v.row, n, d.Dv, kBk, vt.get() + tile * kBk * d.Dv,
                      product_cols<T>(n));
    });
  };
  packed.kt = kt.get();
  packed.vt = vt.get();
  packed.k = kp.get();
  packed.q = q_heads.get();
  packed.dout = dout_heads.get();
  packed.k_finite = k_finite.data();
  packed.qo_finite = qo_finite.data();
  std::vector<T> inv_sigma;
  if (renormalizes(p.score_mod)) {
    inv_sigma.resize(static_cast<size_t>(rows_all));
    inverse_row_sums(p, packed, lse.get(), inv_sigma.data());
    packed.inv_sigma = inv_sigma.data();
  }

  // Items must not share dbias elements: a bias broadcast over B, heads or keys keeps those
  // dimensions inside one item.
  const bool shared_b = p.dbias != nullptr && p.dbias_index.stride[0] == 0;
  const bool shared_h = p.dbias != nullptr && p.dbias_index.stride[1] == 0;
  const bool shared_j = p.dbias != nullptr && p.dbias_index.stride[3] == 0;
  const std::int64_t k_blocks = (d.Tk + kBk - 1) / kBk;
  const std::int64_t nb = shared_b ? 1 : d.B;
  const std::int64_t nh = shared_h ? 1 : d.Hk;
  // Chunks of at least 4 k-blocks, at most 8, and no more than give kBackwardItems items over
  // the batches and heads (a shape's rule, never the thread count's: docs/numerics.md). Each
  // chunk keeps a dQ partial over the q-blocks it reaches, up to 8x dQ: at T 8192, B 1, H 8, D 64,
  // f32, they were 128 of the backward's 346 MiB.
  const std::int64_t wanted = (kBackwardItems + nb * nh - 1) / (nb * nh);
  const std::int64_t chunks =
      shared_j ? 1 : std::clamp<std::int64_t>(std::min(k_blocks / 4, wanted), 1, 8);
  // dQ partials, one per chunk, over the q-blocks its tiles reach (in any batch or head the mask
  // tells apart).
  const BlockView blocks(p.blocks);
  const std::int64_t mask_b = p.blocks->batches == 1 ? 1 : d.B;
  const std::int64_t mask_h = p.blocks->heads == 1 ? 1 : d.Hq;
  std::vector<DqPart<T>> parts(static_cast<size_t>(chunks));
  std::int64_t part_elems = 0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    DqPart<T>& part = parts[static_cast<size_t>(c)];
    part.slot.assign(static_cast<size_t>(q_blocks), -1);
    for (std::int64_t kb = c * k_blocks / chunks; kb < (c + 1) * k_blocks / chunks; ++kb) {
      for (std::int64_t b = 0; b < mask_b; ++b) {
        for (std::int64_t h = 0; h < mask_h; ++h) {
          const KeyRange q = blocks.q_span(b, h, kb);
          for (std::int64_t qb = q.lo; qb < q.hi; ++qb) {
            if (blocks.kind_t(b, h, kb, qb) != TileKind::empty)
              part.slot[static_cast<size_t>(qb)] = 0;
          }
        }
      }
    }
    for (std::int64_t& s : part.slot) s = s < 0 ? -1 : part.slots++;
    part_elems += d.B * d.Hq * part.slots * kBq * d.D;
  }
  const auto partials =
      allocate_large<T>(static_cast<size_t>(std::max<std::int64_t>(part_elems, 1)));
  for (std::int64_t c = 0, at = 0; c < chunks; ++c) {
    DqPart<T>& part = parts[static_cast<size_t>(c)];
    part.data = partials.get() + at;
    at += d.B * d.Hq * part.slots * kBq * d.D;
  }

  // A lambda's partial tiles (drop_cache-inl.h): their kept bits once for all heads.
  const std::optional<PartialTileBits> partial_bits = partial_tile_bits<T>(p.mask_mod, *p.blocks);
  const std::int64_t items = nb * nh * chunks;
  // Under a sparse mask, the items of one key chunk for every head one after another: the heads'
  // rows of a [B, T, H, D] tensor lie side by side, so the two threads read and write rows of the
  // same pages at the same time (T = 8192, H = 8, 2 threads of an Intel Xeon VM, 2026-11-27, time
  // over full x kept tiles, alternated with full, builds before -> after: window 1.51, 1.53 ->
  // 1.45, 1.45; Longformer 1.44 -> 1.41; BigBird 1.32 -> 1.35, within this host's noise).
  const bool heads_inner = BlockView(p.blocks).sparse();
  // The captured tensors' gradients: a partial buffer per item, summed in item order at the end,
  // so the result does not depend on which thread ran which item. Where those buffers would pass
  // kCapturedPartialBytes (a captured tensor the size of a score matrix; the bias option is the
  // way to such a tensor), the items run one after another into one buffer instead.
  constexpr std::int64_t kCapturedPartialBytes = std::int64_t{1} << 28;
  std::vector<std::int64_t> captured_at(static_cast<size_t>(p.captured) + 1, 0);
  for (int c = 0; c < p.captured; ++c) captured_at[c + 1] = captured_at[c] + p.captured_sizes[c];
  const std::int64_t captured_total = captured_at.back();
  const bool serial =
      p.captured > 0 &&
      items * captured_total * static_cast<std::int64_t>(sizeof(T)) > kCapturedPartialBytes;
  const std::int64_t partial_count = p.captured == 0 ? 0 : serial ? 1 : items;
  std::vector<T> captured_partials(static_cast<size_t>(partial_count * captured_total), T(0));
  std::vector<T*> captured_grads(static_cast<size_t>(partial_count * p.captured));
  for (std::int64_t n = 0; n < partial_count; ++n) {
    for (int c = 0; c < p.captured; ++c) {
      captured_grads[n * p.captured + c] =
          captured_partials.data() + n * captured_total + captured_at[c];
    }
  }
#pragma omp parallel if (!serial)
  {
    BackwardScratch<T> scratch(d.D, d.Dv);
    std::optional<Bf16Scratch> bf16_scratch;
    if (bf16) bf16_scratch.emplace(bf16->cols_d(), bf16->cols_dv());
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t chunk = heads_inner ? item / (nb * nh) : item % chunks;
      const std::int64_t hi = heads_inner ? item % nh : item / chunks % nh;
      const std::int64_t bi = heads_inner ? item / nh % nb : item / chunks / nh;
      const std::int64_t b_lo = shared_b ? 0 : bi;
      const std::int64_t hk_lo = shared_h ? 0 : hi;
      const detail::CaptureSink<T> sink{
          p.captured_ids, captured_grads.data() + (serial ? 0 : item) * p.captured, p.captured};
      backward_item(p, packed, lse.get(), delta.get(), b_lo, shared_b ? d.B : bi + 1, hk_lo,
                    shared_h ? d.Hk : hi + 1, chunk * k_blocks / chunks,
                    (chunk + 1) * k_blocks / chunks, scratch,
                    bf16_scratch ? &*bf16_scratch : nullptr, parts[static_cast<size_t>(chunk)],
                    sink, partial_bits ? &*partial_bits : nullptr);
    }
  }
  for (int c = 0; c < p.captured; ++c) {
    for (std::int64_t e = 0; e < p.captured_sizes[c]; ++e) {
      T sum = 0;
      for (std::int64_t n = 0; n < partial_count; ++n) {
        sum += captured_partials[n * captured_total + captured_at[c] + e];
      }
      p.captured_grads[c][e] += sum;
    }
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows_all; ++row) {  // row = (b * Hq + h) * Tq + i
    const std::int64_t i = row % d.Tq;
    const std::int64_t h = row / d.Tq % d.Hq;
    const std::int64_t b = row / d.Tq / d.Hq;
    T* dq_row = p.dq.at(b, i, h);
    bool first = true;  // the partials in chunk order, whatever the thread count
    for (const DqPart<T>& part : parts) {
      if (!part.holds(i)) continue;
      const T* from = part.at(b * d.Hq + h, i, d.D);
      if (first) {
        std::copy_n(from, d.D, dq_row);
      } else {
        for (std::int64_t x = 0; x < d.D; ++x) dq_row[x] += from[x];
      }
      first = false;
    }
    if (first) std::fill(dq_row, dq_row + d.D, T(0));  // no tile reaches this row
    // forward: s = (scale q) . k  ->  dq = scale * sum_j ds_j k_j
    for (std::int64_t x = 0; x < d.D; ++x) dq_row[x] *= p.scale;
  }
}

void BackwardF32(const BwdParams<float>& p) { backward_impl(p); }
void BackwardF64(const BwdParams<double>& p) { backward_impl(p); }
void FlexBackwardF32(const FlexBwdParams<float>& p) { backward_impl(p); }
void FlexBackwardF64(const FlexBwdParams<double>& p) { backward_impl(p); }

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {

HWY_EXPORT(BackwardF32);
HWY_EXPORT(BackwardF64);
HWY_EXPORT(FlexBackwardF32);
HWY_EXPORT(FlexBackwardF64);

template <>
void backward(const BwdParams<float>& params) {
  HWY_DYNAMIC_DISPATCH(BackwardF32)(params);
}

template <>
void backward(const BwdParams<double>& params) {
  HWY_DYNAMIC_DISPATCH(BackwardF64)(params);
}

template <>
void backward(const FlexBwdParams<float>& params) {
  HWY_DYNAMIC_DISPATCH(FlexBackwardF32)(params);
}

template <>
void backward(const FlexBwdParams<double>& params) {
  HWY_DYNAMIC_DISPATCH(FlexBackwardF64)(params);
}

}  // namespace qkv::kernels::cpu
#endif
