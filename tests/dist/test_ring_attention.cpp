// Ring attention against flex_attention over the whole sequence in one process: every rank makes
// the same global q, k, v and dout from one seed, computes the whole problem itself, and its
// shard by the ring. out, lse, dq, dk and dv of its rows must agree to the rounding of sums taken
// in another order: f64 within 1e-12 of the largest value, f32 within 2e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qkv/dist.hpp"
#include "qkv/ops.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

using dist::Communicator;

// Tl rows a rank: as two chunks of 19 with zigzag sharding, neither a multiple of a tile.
constexpr std::int64_t B = 2, Tl = 38, Hq = 4, Hk = 2, D = 16, Dv = 12;

// max |got - want| over max(1, max |want|); NaN where they disagree on a NaN.
double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0, scale = 1.0;
  for (std::size_t n = 0; n < a.size() && n < b.size(); ++n) {
    if (std::isinf(b[n]) || std::isinf(a[n])) {
      if (a[n] != b[n]) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(a[n] - b[n]));
    scale = std::max(scale, std::abs(b[n]));
  }
  return worst / scale;
}

// The rows of this rank's shard (dim 1 of [B, T, H, D], dim 2 of lse [B, H, T]; T / ranks rows
// a rank): a view of them with contiguous sharding, a copy of its two chunks with zigzag.
Tensor shard(const Tensor& x, const Communicator& comm, dist::Sharding sharding,
             std::int64_t dim = 1) {
  const std::int64_t r = comm.rank(), n = comm.size(), rows = x.size(dim) / n;
  if (sharding == dist::Sharding::contiguous) return x.slice(dim, r * rows, (r + 1) * rows);
  const std::int64_t c = rows / 2;
  return ops::concat(
      {x.slice(dim, r * c, (r + 1) * c), x.slice(dim, (2 * n - 1 - r) * c, (2 * n - r) * c)}, dim);
}

// Document ids of a packed sequence of T tokens, documents of 23, 50, 11 and 40 tokens in turn:
// they cross the shards' boundaries.
std::vector<std::int64_t> documents(std::int64_t T) {
  const std::int64_t lengths[] = {23, 50, 11, 40};
  std::vector<std::int64_t> ids;
  for (std::int64_t doc = 0; static_cast<std::int64_t>(ids.size()) < T; ++doc) {
    ids.insert(ids.end(), static_cast<std::size_t>(lengths[doc % 4]), doc);
  }
  ids.resize(static_cast<std::size_t>(T));
  return ids;
}

struct Inputs {
  Tensor q, k, v, dout;  // global
};

Inputs make_inputs(std::int64_t T, DType dtype) {
  Generator g(7);
  return {Tensor::randn({B, T, Hq, D}, g, DType::f64).to(dtype),
          Tensor::randn({B, T, Hk, D}, g, DType::f64).to(dtype),
          Tensor::randn({B, T, Hk, Dv}, g, DType::f64).to(dtype),
          Tensor::randn({B, T, Hq, Dv}, g, DType::f64).to(dtype)};
}

// The whole problem in this process and this rank's shard by the ring, compared, with each
// sharding. `whole(in, blocks)` and `ring(q, k, v, dout, options)` return the forward's output and
// the gradients.
template <class Mask, class Whole, class Ring>
void compare(const std::string& name, DType dtype, const Mask& mask, Whole whole, Ring ring) {
  const Communicator world = Communicator::world();
  const std::int64_t T = world.size() * Tl;
  const Inputs in = make_inputs(T, dtype);
  const BlockMask blocks = create_block_mask(mask, B, Hq, T, T);
  const auto [want, want_grads] = whole(in, blocks);
  for (const dist::Sharding sharding : {dist::Sharding::contiguous, dist::Sharding::zigzag}) {
    SCOPED_TRACE(name + " " + std::string(dtype_name(dtype)) + ", rank " +
                 std::to_string(world.rank()) + " of " + std::to_string(world.size()) +
                 (sharding == dist::Sharding::zigzag ? ", zigzag" : ", contiguous"));
    dist::RingOptions options;
    options.sharding = sharding;
    // Contiguous shards are views of the global tensors: strided, read where they lie.
    const auto [got, got_grads] =
        ring(shard(in.q, world, sharding), shard(in.k, world, sharding),
             shard(in.v, world, sharding), shard(in.dout, world, sharding), options);
    const double tolerance = dtype == DType::f64 ? 1e-12 : 2e-5;
    EXPECT_LE(relative_error(got.out, shard(want.out, world, sharding)), tolerance) << "out";
    EXPECT_LE(relative_error(got.lse, shard(want.lse, world, sharding, 2)), tolerance) << "lse";
    EXPECT_LE(relative_error(got_grads.dq, shard(want_grads.dq, world, sharding)), tolerance)
        << "dq";
    EXPECT_LE(relative_error(got_grads.dk, shard(want_grads.dk, world, sharding)), tolerance)
        << "dk";
    EXPECT_LE(relative_error(got_grads.dv, shard(want_grads.dv, world, sharding)), tolerance)
        << "dv";
  }
}

template <class Mask>
void compare_mask(const std::string& name, const Mask& mask) {
  for (const DType dtype : {DType::f64, DType::f32}) {
    compare(
        name, dtype, mask,
        [&](const Inputs& in, const BlockMask& blocks) {
          AttentionOutput o = flex_attention(in.q, in.k, in.v, blocks);
          AttentionGrads g =
              flex_attention_backward(in.dout, in.q, in.k, in.v, o.out, o.lse, blocks);
          return std::pair{o, g};
        },
        [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
            const dist::RingOptions& options) {
          const Communicator world = Communicator::world();
          AttentionOutput o = dist::ring_attention(q, k, v, mask, world, options);
          AttentionGrads g =
              dist::ring_attention_backward(dout, q, k, v, o.out, o.lse, mask, world, options);
          return std::pair{o, g};
        });
  }
}

TEST(RingAttention, EveryKey) { compare_mask("full", masks::Full{}); }

TEST(RingAttention, Causal) { compare_mask("causal", masks::causal()); }

TEST(RingAttention, SlidingWindowAcrossShards) {
  compare_mask("window", masks::sliding_window(45, 3));
}

TEST(RingAttention, DocumentsAcrossShards) {
  const std::int64_t T = Communicator::world().size() * Tl;
  compare_mask("document", masks::document(documents(T)));
  compare_mask("causal document", and_masks(masks::causal(), masks::document(documents(T))));
}

// A row that keeps no key anywhere: out 0, lse -inf, no gradient, as in one process; and a
// lambda, which the block mask walks element by element.
TEST(RingAttention, RowWithNoKey) {
  compare_mask("no key for row 40", [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
    return i != 40 && j <= i;
  });
}

// A score mod in global positions (ALiBi's distance), which each step must see shifted.
TEST(RingAttention, ScoreModInGlobalPositions) {
  const auto alibi = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return s - 0.25 * static_cast<double>(h + 1) * static_cast<double>(i >= j ? i - j : j - i);
  };
  const auto mask = masks::causal();
  for (const DType dtype : {DType::f64, DType::f32}) {
    compare(
        "alibi", dtype, mask,
        [&](const Inputs& in, const BlockMask& blocks) {
          AttentionOutput o = flex_attention(in.q, in.k, in.v, alibi, blocks);
          AttentionGrads g =
              flex_attention_backward(in.dout, in.q, in.k, in.v, o.out, o.lse, alibi, blocks);
          return std::pair{o, g};
        },
        [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
            const dist::RingOptions& options) {
          const Communicator world = Communicator::world();
          AttentionOutput o = dist::ring_attention(q, k, v, mask, alibi, world, options);
          AttentionGrads g = dist::ring_attention_backward(dout, q, k, v, o.out, o.lse, mask, alibi,
                                                           world, options);
          return std::pair{o, g};
        });
  }
}

// Dropout keyed on global positions: each rank drops exactly the entries flex_attention over the
// whole sequence drops, with chunks whose starts are not multiples of 4 (a Philox call's group).
// A causal document mask and ALiBi's distance beside it. The dropped run must differ from an
// undropped one, or the comparison would not show that dropout ran.
TEST(RingAttention, DropoutAsTheWholeSequenceDropsIt) {
  const std::int64_t T = Communicator::world().size() * Tl;
  const auto mask = and_masks(masks::causal(), masks::document(documents(T)));
  const auto alibi = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return s - 0.25 * static_cast<double>(h + 1) * static_cast<double>(i >= j ? i - j : j - i);
  };
  FlexOptions dropout;
  dropout.dropout_p = 0.3, dropout.seed = 1ull << 33 | 21, dropout.offset = 4;
  for (const DType dtype : {DType::f64, DType::f32}) {
    compare(
        "dropout", dtype, mask,
        [&](const Inputs& in, const BlockMask& blocks) {
          AttentionOutput o = flex_attention(in.q, in.k, in.v, alibi, blocks, dropout);
          const AttentionOutput plain = flex_attention(in.q, in.k, in.v, alibi, blocks);
          EXPECT_GT(relative_error(o.out, plain.out), 1e-2) << "dropout changed nothing";
          AttentionGrads g = flex_attention_backward(in.dout, in.q, in.k, in.v, o.out, o.lse, alibi,
                                                     blocks, dropout);
          return std::pair{o, g};
        },
        [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
            dist::RingOptions options) {
          const Communicator world = Communicator::world();
          options.flex = dropout;
          AttentionOutput o = dist::ring_attention(q, k, v, mask, alibi, world, options);
          AttentionGrads g = dist::ring_attention_backward(dout, q, k, v, o.out, o.lse, mask, alibi,
                                                           world, options);
          return std::pair{o, g};
        });
  }
}

// bf16 and f16 shards: K and V travel in their 16 bits (half the bytes of f32), each step runs the
// 16-bit kernel on them with its partial results in f32, and out, dq, dk, dv come back in the
// shards' dtype. Against flex_attention in one process on the same 16-bit inputs: within a
// rounding to 16 bits or two (bf16 2^-9, f16 2^-12, relative to the largest value; the single
// process rounds its result once, the ring its merged one). Against the f64 truth, FlashAttention's
// rule as the precision issue states it: out's error at most 2x, and the gradients' at most 3x,
// the single-process kernel's. Shards of 38 rows, and of 1040, whose contiguous steps (1040 keys)
// take the forward's bf16 products on CPUs with AVX512-BF16 (from 1024 keys) or AMX.
TEST(RingAttention, HalfShardsTravelAsTheyAre) {
  const Communicator world = Communicator::world();
  const std::int64_t n = world.size();
  const auto mask = masks::causal();
  struct Case {
    DType dtype;
    std::int64_t rows;
  };
  for (const auto [dtype, rows_a_rank] :
       {Case{DType::bf16, Tl}, Case{DType::f16, Tl}, Case{DType::bf16, 1040}}) {
    // Every rank computes the whole problem itself: the long shards on 1 and 2 ranks only (on 4
    // under ASan, 70 s).
    if (rows_a_rank > Tl && n > 2) continue;
    const std::int64_t T = n * rows_a_rank;
    const Inputs in = make_inputs(T, dtype);
    const BlockMask blocks = create_block_mask(mask, B, Hq, T, T);
    const auto whole = [&](DType as) {
      const Tensor q = in.q.to(as), k = in.k.to(as), v = in.v.to(as), dout = in.dout.to(as);
      AttentionOutput o = flex_attention(q, k, v, blocks);
      AttentionGrads g = flex_attention_backward(dout, q, k, v, o.out, o.lse, blocks);
      return std::pair{o, g};
    };
    const auto [truth, truth_grads] = whole(DType::f64);
    const auto [single, single_grads] = whole(dtype);
    for (const dist::Sharding sharding : {dist::Sharding::contiguous, dist::Sharding::zigzag}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", " + std::to_string(rows_a_rank) +
                   " rows a rank, rank " + std::to_string(world.rank()) + " of " +
                   std::to_string(n) +
                   (sharding == dist::Sharding::zigzag ? ", zigzag" : ", contiguous"));
      const auto rows = [&](const Tensor& x, std::int64_t dim = 1) {
        return shard(x, world, sharding, dim);
      };
      dist::RingStats stats;
      dist::RingOptions options;
      options.sharding = sharding;
      options.stats = &stats;
      const Tensor q = rows(in.q), k = rows(in.k), v = rows(in.v), dout = rows(in.dout);
      const AttentionOutput got = dist::ring_attention(q, k, v, mask, world, options);
      options.stats = nullptr;
      const AttentionGrads grads =
          dist::ring_attention_backward(dout, q, k, v, got.out, got.lse, mask, world, options);
      for (const Tensor* t : {&got.out, &grads.dq, &grads.dk, &grads.dv}) {
        EXPECT_EQ(t->dtype(), dtype);
      }
      EXPECT_EQ(got.lse.dtype(), DType::f32);
      EXPECT_EQ(stats.bytes_sent, (n - 1) * (k.numel() + v.numel()) * 2) << "16 bits on the wire";

      const double rounding = dtype == DType::bf16 ? 1e-2 : 2e-3;
      EXPECT_LE(relative_error(got.out, rows(single.out)), rounding) << "out";
      EXPECT_LE(relative_error(got.lse, rows(single.lse, 2)), 1e-5) << "lse";
      EXPECT_LE(relative_error(grads.dq, rows(single_grads.dq)), rounding) << "dq";
      EXPECT_LE(relative_error(grads.dk, rows(single_grads.dk)), rounding) << "dk";
      EXPECT_LE(relative_error(grads.dv, rows(single_grads.dv)), rounding) << "dv";

      const auto within = [&](const Tensor& ring, const Tensor& one, const Tensor& exact,
                              double factor, const char* name) {
        const double ring_error = relative_error(ring, rows(exact));
        const double one_error = relative_error(rows(one), rows(exact));
        EXPECT_LE(ring_error, factor * one_error + 1e-6)
            << name << ": the ring's error " << ring_error << ", one process's " << one_error;
      };
      within(got.out, single.out, truth.out, 2.0, "out");
      within(grads.dq, single_grads.dq, truth_grads.dq, 3.0, "dq");
      within(grads.dk, single_grads.dk, truth_grads.dk, 3.0, "dk");
      within(grads.dv, single_grads.dv, truth_grads.dv, 3.0, "dv");
    }
  }
}

// Bad input throws qkv::Error on every rank, so that no rank is left waiting in the ring: one
// rank's shard of another length, dtypes that differ or are not floating, dropout options that
// differ between ranks, an odd shard length with zigzag sharding.
TEST(RingAttention, BadShardsThrowOnEveryRank) {
  const Communicator world = Communicator::world();
  Generator g(1);
  const std::int64_t T = world.rank() == 0 ? Tl + 2 : Tl;
  const Tensor q = Tensor::randn({1, T, 2, 8}, g), k = Tensor::randn({1, T, 2, 8}, g);
  if (world.size() > 1) {
    EXPECT_THROW(dist::ring_attention(q, k, k, masks::causal(), world), Error);
  }
  const Tensor half = Tensor::randn({1, Tl, 2, 8}, g).to(DType::bf16);
  const Tensor wide = half.to(DType::f32);
  EXPECT_THROW(dist::ring_attention(half, wide, wide, masks::causal(), world), Error);
  const Tensor flags = Tensor::zeros({1, Tl, 2, 8}, DType::boolean);
  EXPECT_THROW(dist::ring_attention(flags, flags, flags, masks::causal(), world), Error);
  const Tensor ok = Tensor::randn({1, Tl, 2, 8}, g);
  if (world.size() > 1) {
    dist::RingOptions dropout;
    dropout.flex.dropout_p = 0.1;
    dropout.flex.seed = world.rank() == 0 ? 1 : 2;
    EXPECT_THROW(dist::ring_attention(ok, ok, ok, masks::causal(), world, dropout), Error);
  }
  const Tensor odd = Tensor::randn({1, Tl + 1, 2, 8}, g);
  dist::RingOptions zigzag;
  zigzag.sharding = dist::Sharding::zigzag;
  EXPECT_THROW(dist::ring_attention(odd, odd, odd, masks::causal(), world, zigzag), Error);
  // And the ring still works after them.
  const AttentionOutput o = dist::ring_attention(ok, ok, ok, masks::Full{}, world);
  EXPECT_EQ(o.out.size(1), Tl);
}

// RingStats: one kernel call per pair of chunks and step, and the bytes of K and V (and of their
// gradients in the backward) sent at every step but the last (every step).
TEST(RingAttention, StatsCountStepsAndBytes) {
  const Communicator world = Communicator::world();
  const std::int64_t n = world.size();
  Generator g(2);
  const Tensor x = Tensor::randn({1, Tl, 2, 8}, g);
  for (const dist::Sharding sharding : {dist::Sharding::contiguous, dist::Sharding::zigzag}) {
    dist::RingStats fwd, bwd;
    dist::RingOptions options;
    options.sharding = sharding;
    options.stats = &fwd;
    const AttentionOutput o = dist::ring_attention(x, x, x, masks::causal(), world, options);
    options.stats = &bwd;
    dist::ring_attention_backward(x, x, x, x, o.out, o.lse, masks::causal(), world, options);
    const int pairs = sharding == dist::Sharding::zigzag ? 4 : 1;
    const std::int64_t kv_bytes = 2 * x.numel() * 4;
    EXPECT_EQ(fwd.steps, n * pairs);
    EXPECT_EQ(bwd.steps, n * pairs);
    EXPECT_EQ(fwd.bytes_sent, (n - 1) * kv_bytes);
    EXPECT_EQ(bwd.bytes_sent, (n - 1) * kv_bytes + (n > 1 ? n * kv_bytes : 0));
    EXPECT_GE(fwd.wait_seconds, 0.0);
    EXPECT_GT(fwd.compute_seconds, 0.0);
  }
}

}  // namespace
}  // namespace qkv::testing
