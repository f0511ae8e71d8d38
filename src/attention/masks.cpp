// The predefined mask mods' constructors (which check their arguments) and closed-form tile
// classifiers.
#include "qkv/masks.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/philox.hpp"

namespace qkv::masks {
namespace {

std::shared_ptr<const std::vector<std::int64_t>> nonnegative(std::vector<std::int64_t> values,
                                                             const char* name) {
  if (values.empty()) throw Error(name, "at least one value", "none");
  for (std::size_t n = 0; n < values.size(); ++n) {
    if (values[n] < 0) {
      throw Error(std::string(name) + "[" + std::to_string(n) + "]", "a value >= 0",
                  std::to_string(values[n]));
    }
  }
  return std::make_shared<const std::vector<std::int64_t>>(std::move(values));
}

void positive(std::int64_t value, const char* name) {
  if (value <= 0) throw Error(name, "a value > 0", std::to_string(value));
}

}  // namespace

KeyLengths key_lengths(std::vector<std::int64_t> lengths) {
  return {nonnegative(std::move(lengths), "key_lengths")};
}

PrefixLM prefix_lm(std::vector<std::int64_t> prefix_lengths) {
  return {nonnegative(std::move(prefix_lengths), "prefix_lengths")};
}

Document document(std::vector<std::int64_t> ids, std::int64_t batches) {
  positive(batches, "batches");
  const auto n = static_cast<std::int64_t>(ids.size());
  if (n % batches != 0) {
    throw Error("ids", "a multiple of batches (" + std::to_string(batches) + ") ids",
                std::to_string(n));
  }
  auto runs = std::make_shared<Document::Runs>();
  runs->batches = batches;
  runs->T = n / batches;
  runs->start.resize(ids.size());
  runs->end.resize(ids.size());
  for (std::int64_t b = 0; b < batches; ++b) {
    const std::int64_t* row = ids.data() + b * runs->T;
    std::vector<std::int64_t> seen;  // ids of the documents already closed in this row
    std::int64_t start = 0;
    for (std::int64_t t = 1; t <= runs->T; ++t) {
      if (t < runs->T && row[t] == row[start]) continue;
      if (std::find(seen.begin(), seen.end(), row[start]) != seen.end()) {
        throw Error("ids", "each document's tokens contiguous (packed sequences)",
                    "document " + std::to_string(row[start]) + " again at position " +
                        std::to_string(start) + " of batch " + std::to_string(b));
      }
      seen.push_back(row[start]);
      for (std::int64_t x = start; x < t; ++x) {
        runs->start[static_cast<std::size_t>(b * runs->T + x)] = start;
        runs->end[static_cast<std::size_t>(b * runs->T + x)] = t;
      }
      start = t;
    }
  }
  runs->ids = std::move(ids);
  return {std::move(runs)};
}

GlobalTokens global_tokens(std::vector<std::int64_t> positions) {
  std::int64_t last = -1;
  for (std::size_t n = 0; n < positions.size(); ++n) {
    if (positions[n] < 0) {
      throw Error("global[" + std::to_string(n) + "]", "a position >= 0",
                  std::to_string(positions[n]));
    }
    last = std::max(last, positions[n]);
  }
  std::vector<std::uint8_t> is_global(static_cast<std::size_t>(last + 1), 0);
  for (const std::int64_t p : positions) is_global[static_cast<std::size_t>(p)] = 1;
  auto count = std::make_shared<std::vector<std::int64_t>>(is_global.size() + 1, 0);
  for (std::size_t n = 0; n < is_global.size(); ++n) (*count)[n + 1] = (*count)[n] + is_global[n];
  return {std::move(count)};
}

void GlobalTokens::classify_row(std::int64_t, std::int64_t, std::int64_t i0, std::int64_t i1,
                                std::int64_t Tk, std::int64_t bk, const TileKind*,
                                TileKind* kinds) const {
  const std::int64_t global_rows = below(i1) - below(i0);
  for (std::int64_t kb = 0; kb * bk < Tk; ++kb) {
    const std::int64_t j0 = kb * bk, j1 = std::min(j0 + bk, Tk);
    const std::int64_t global_cols = below(j1) - below(j0);
    kinds[kb] = global_rows == i1 - i0 || global_cols == j1 - j0 ? TileKind::full
                : global_rows == 0 && global_cols == 0           ? TileKind::empty
                                                                 : TileKind::partial;
  }
}

BlockLayout from_block_layout(std::vector<std::uint8_t> layout, std::int64_t q_blocks,
                              std::int64_t k_blocks, std::int64_t block) {
  positive(block, "block");
  if (q_blocks < 0 || k_blocks < 0 ||
      static_cast<std::int64_t>(layout.size()) != q_blocks * k_blocks) {
    throw Error("layout", std::to_string(q_blocks) + " x " + std::to_string(k_blocks) + " cells",
                std::to_string(layout.size()));
  }
  auto cells = std::make_shared<BlockLayout::Cells>();
  cells->block = block;
  cells->q_blocks = q_blocks;
  cells->k_blocks = k_blocks;
  cells->keep = std::move(layout);
  return {std::move(cells)};
}

void BlockLayout::classify_row(std::int64_t, std::int64_t h, std::int64_t i0, std::int64_t i1,
                               std::int64_t Tk, std::int64_t bk, const TileKind* only,
                               TileKind* kinds) const {
  const std::int64_t block = cells->block;
  for (std::int64_t kb = 0; kb * bk < Tk; ++kb) {
    if (only != nullptr && only[kb] == TileKind::empty) {
      kinds[kb] = TileKind::empty;
      continue;
    }
    const std::int64_t j0 = kb * bk, j1 = std::min(j0 + bk, Tk);
    bool any = false, all = true;
    for (std::int64_t ib = i0 / block; ib <= (i1 - 1) / block; ++ib) {
      for (std::int64_t jb = j0 / block; jb <= (j1 - 1) / block; ++jb) {
        const bool keep = cell(h, ib, jb);
        any = any || keep;
        all = all && keep;
      }
    }
    kinds[kb] = all ? TileKind::full : any ? TileKind::partial : TileKind::empty;
  }
}

BlockLayout bigbird(std::int64_t block, std::int64_t window_blocks, std::int64_t global_blocks,
                    std::int64_t random_blocks, std::uint64_t seed, std::int64_t Tq,
                    std::int64_t Tk, std::int64_t heads) {
  positive(block, "block");
  positive(heads, "heads");
  if (window_blocks < 0) throw Error("window_blocks", ">= 0", std::to_string(window_blocks));
  if (global_blocks < 0) throw Error("global_blocks", ">= 0", std::to_string(global_blocks));
  if (random_blocks < 0) throw Error("random_blocks", ">= 0", std::to_string(random_blocks));
  if (Tq < 0 || Tk < 0)
    throw Error("Tq, Tk", ">= 0", std::to_string(Tq) + ", " + std::to_string(Tk));
  auto cells = std::make_shared<BlockLayout::Cells>();
  cells->block = block;
  cells->q_blocks = (Tq + block - 1) / block;
  cells->k_blocks = (Tk + block - 1) / block;
  cells->heads = heads;
  const std::int64_t nq = cells->q_blocks, nk = cells->k_blocks;
  cells->keep.assign(static_cast<std::size_t>(heads * nq * nk), 0);
  const PhiloxKey key = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  std::vector<std::int64_t> free;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t ib = 0; ib < nq; ++ib) {
      std::uint8_t* row = cells->keep.data() + (h * nq + ib) * nk;
      free.clear();
      for (std::int64_t jb = 0; jb < nk; ++jb) {
        const bool keep = ib < global_blocks || jb < global_blocks ||
                          (jb - ib <= window_blocks / 2 && ib - jb <= window_blocks / 2);
        row[jb] = keep;
        if (!keep) free.push_back(jb);
      }
      // random_blocks of the free blocks, by a partial Fisher-Yates shuffle on Philox draws.
      const auto draws =
          std::min<std::int64_t>(random_blocks, static_cast<std::int64_t>(free.size()));
      for (std::int64_t n = 0; n < draws; ++n) {
        const PhiloxCounter bits =
            philox4x32_10({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(ib),
                           static_cast<std::uint32_t>(h), 0x6269u /* "bi" */},
                          key);
        const std::uint64_t r = (std::uint64_t{bits[0]} << 32) | bits[1];
        const auto pick =
            n + static_cast<std::int64_t>(r % static_cast<std::uint64_t>(free.size() - n));
        std::swap(free[static_cast<std::size_t>(n)], free[static_cast<std::size_t>(pick)]);
        row[free[static_cast<std::size_t>(n)]] = 1;
      }
    }
  }
  return {std::move(cells)};
}

Strided strided(std::int64_t stride) {
  positive(stride, "stride");
  return {stride};
}

void Strided::classify_row(std::int64_t, std::int64_t, std::int64_t i0, std::int64_t i1,
                           std::int64_t Tk, std::int64_t bk, const TileKind*,
                           TileKind* kinds) const {
  // The tile's pairs take every distance d = i - j in [dmin, dmax].
  for (std::int64_t kb = 0; kb * bk < Tk; ++kb) {
    const std::int64_t j0 = kb * bk, j1 = std::min(j0 + bk, Tk);
    const std::int64_t dmin = i0 - (j1 - 1), dmax = (i1 - 1) - j0;
    const std::int64_t lo = std::max<std::int64_t>(dmin, 0);
    const bool any = lo <= dmax && (lo < stride || (lo + stride - 1) / stride * stride <= dmax);
    const bool all =
        dmin >= 0 && (dmax < stride || stride == 1 || (dmin == dmax && dmin % stride == 0));
    kinds[kb] = all ? TileKind::full : any ? TileKind::partial : TileKind::empty;
  }
}

Fixed fixed(std::int64_t block, std::int64_t summary) {
  positive(block, "block");
  if (summary < 0 || summary > block) {
    throw Error("summary", "in [0, block = " + std::to_string(block) + "]",
                std::to_string(summary));
  }
  return {block, summary};
}

}  // namespace qkv::masks
