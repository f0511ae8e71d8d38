// Building a block mask: every (batch, head, q-block) row of tiles classified by the mod's
// classify_row, in parallel; then the transposed layout and the spans the kernels walk.
#include "qkv/block_mask.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/thread_budget.hpp"
#include "kernels/cpu/tile_traits.hpp"
#include "qkv/error.hpp"
#include "qkv/system.hpp"

namespace qkv {
namespace detail {

std::shared_ptr<const BlockMaskData> build_block_mask(ErasedMask mask, std::int64_t B,
                                                      std::int64_t H, std::int64_t Tq,
                                                      std::int64_t Tk) {
  const auto check = [](std::int64_t value, std::int64_t least, const char* name) {
    if (value < least) {
      throw Error(name, "a value >= " + std::to_string(least), std::to_string(value));
    }
  };
  check(B, 1, "B");
  check(H, 1, "H");
  check(Tq, 0, "Tq");
  check(Tk, 0, "Tk");
  auto d = std::make_shared<BlockMaskData>();
  d->batches = B;
  d->heads = H;
  d->Tq = Tq;
  d->Tk = Tk;
  // The kernels' tiles: the forward's 128-row q-blocks are two of these rows.
  d->block_q = kernels::cpu::TileTraits::kBlockQ;
  d->block_k = kernels::cpu::TileTraits::kBlockK;
  d->q_blocks = (Tq + d->block_q - 1) / d->block_q;
  d->k_blocks = (Tk + d->block_k - 1) / d->block_k;
  const std::int64_t QB = d->q_blocks, KB = d->k_blocks, rows = B * H * QB;
  d->kinds.assign(static_cast<std::size_t>(rows * KB), TileKind::empty);
  d->kinds_t.assign(d->kinds.size(), TileKind::empty);
  d->k_lo.assign(static_cast<std::size_t>(rows), 0);
  d->k_hi.assign(static_cast<std::size_t>(rows), 0);
  d->q_lo.assign(static_cast<std::size_t>(B * H * KB), 0);
  d->q_hi.assign(static_cast<std::size_t>(B * H * KB), 0);
  {
    const ThreadShare threads(num_threads());
    const void* mod = mask.mod.get();
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t row = 0; row < rows; ++row) {  // row = (b * H + h) * QB + qb
      const std::int64_t qb = row % QB;
      const std::int64_t h = row / QB % H;
      const std::int64_t b = row / QB / H;
      const std::int64_t i0 = qb * d->block_q;
      TileKind* kinds = d->kinds.data() + row * KB;
      mask.classify_row(mod, b, h, i0, std::min(i0 + d->block_q, Tq), Tk, d->block_k, kinds);
      std::int64_t lo = KB, hi = 0;
      for (std::int64_t kb = 0; kb < KB; ++kb) {
        if (kinds[kb] == TileKind::empty) continue;
        lo = std::min(lo, kb);
        hi = kb + 1;
      }
      d->k_lo[row] = static_cast<std::int32_t>(std::min(lo, hi));
      d->k_hi[row] = static_cast<std::int32_t>(hi);
    }
#pragma omp parallel for schedule(static)
    for (std::int64_t col = 0; col < B * H * KB; ++col) {  // col = (b * H + h) * KB + kb
      const std::int64_t kb = col % KB;
      const std::int64_t bh = col / KB;
      std::int64_t lo = QB, hi = 0;
      for (std::int64_t qb = 0; qb < QB; ++qb) {
        const TileKind kind = d->kinds[(bh * QB + qb) * KB + kb];
        d->kinds_t[col * QB + qb] = kind;
        if (kind == TileKind::empty) continue;
        lo = std::min(lo, qb);
        hi = qb + 1;
      }
      d->q_lo[col] = static_cast<std::int32_t>(std::min(lo, hi));
      d->q_hi[col] = static_cast<std::int32_t>(hi);
    }
  }
  for (const TileKind kind : d->kinds) ++d->counts[static_cast<int>(kind)];
  d->mask = std::move(mask);
  return d;
}

}  // namespace detail

TileKind BlockMask::kind(std::int64_t b, std::int64_t h, std::int64_t qb, std::int64_t kb) const {
  const detail::BlockMaskData& d = *data_;
  const std::int64_t bb = d.batches == 1 ? 0 : b;
  const std::int64_t hh = d.heads == 1 ? 0 : h;
  return d
      .kinds[static_cast<std::size_t>(((bb * d.heads + hh) * d.q_blocks + qb) * d.k_blocks + kb)];
}

double BlockMask::kept_fraction() const {
  const auto all = static_cast<double>(data_->kinds.size());
  return all == 0 ? 0.0 : 1.0 - static_cast<double>(count(TileKind::empty)) / all;
}

bool BlockMask::keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
  return data_->mask.keep(data_->mask.mod.get(), b, h, i, j);
}

Tensor BlockMask::dense() const {
  const detail::BlockMaskData& d = *data_;
  Tensor out = Tensor::empty({d.batches, d.heads, d.Tq, d.Tk}, DType::boolean);
  auto* x = out.data_as<std::uint8_t>();
  std::int64_t n = 0;
  for (std::int64_t b = 0; b < d.batches; ++b) {
    for (std::int64_t h = 0; h < d.heads; ++h) {
      for (std::int64_t i = 0; i < d.Tq; ++i) {
        for (std::int64_t j = 0; j < d.Tk; ++j) x[n++] = keep(b, h, i, j);
      }
    }
  }
  return out;
}

std::string BlockMask::picture(std::int64_t b, std::int64_t h) const {
  std::string s;
  for (std::int64_t qb = 0; qb < q_blocks(); ++qb) {
    for (std::int64_t kb = 0; kb < k_blocks(); ++kb)
      s += ".+#"[static_cast<int>(kind(b, h, qb, kb))];
    s += '\n';
  }
  return s;
}

}  // namespace qkv
