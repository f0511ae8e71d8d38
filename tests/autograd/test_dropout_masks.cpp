// Dropout drops the same entries of P on every path: the fused kernel and the reference through
// attention_forward and attention_backward, the autograd primitive on both backends, and the
// composed ops (softmax, then the dropout op); and those entries are exactly the ones the mask
// keeps where qkv::dropout_keep(seed, offset, b * Hq + h, i, j, p) is false. The forward's mask
// is read off out with v = identity (out[b, i, h, j] = P_ij keep_ij / (1 - p)), the backward's off
// dv with dout = identity (dv[b, j, hk, g * Tq + i] = P_ij keep_ij / (1 - p) for query head
// h = hk * G + g), so a backward that regenerated another mask than its forward's would show.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <qkv/qkv.hpp>
#include <string>
#include <vector>

namespace qkv::testing {
namespace {

namespace ag = qkv::autograd;

struct MaskCase {
  std::string name;
  std::int64_t B = 1, Tq = 8, Tk = 8, Hq = 2, Hk = 2, D = 8;
  AttentionOptions options;

  std::int64_t group() const { return Hq / Hk; }
  std::int64_t width() const { return std::max(Tk, group() * Tq); }  // Dv of v and dout
};

void PrintTo(const MaskCase& c, std::ostream* os) { *os << c.name; }

// For each (b, h, i, j) of [B, Hq, Tq, Tk], in that order: whether P_ij is kept.
using Kept = std::vector<bool>;

struct Inputs {
  Tensor q, k, v, dout;  // v [B, Tk, Hk, W] and dout [B, Tq, Hq, W]: identities
};

Inputs make_inputs(const MaskCase& c, DType dtype) {
  Generator g(static_cast<std::uint64_t>(c.Tq * 131 + c.Tk));
  Inputs in;
  in.q = Tensor::randn({c.B, c.Tq, c.Hq, c.D}, g, DType::f64).to(dtype);
  in.k = Tensor::randn({c.B, c.Tk, c.Hk, c.D}, g, DType::f64).to(dtype);
  const std::int64_t W = c.width();
  Tensor v = Tensor::zeros({c.B, c.Tk, c.Hk, W}, DType::f64);
  Tensor dout = Tensor::zeros({c.B, c.Tq, c.Hq, W}, DType::f64);
  double* vp = v.data_as<double>();
  double* dp = dout.data_as<double>();
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t j = 0; j < c.Tk; ++j) {
      for (std::int64_t hk = 0; hk < c.Hk; ++hk) vp[((b * c.Tk + j) * c.Hk + hk) * W + j] = 1;
    }
    for (std::int64_t i = 0; i < c.Tq; ++i) {
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        dp[((b * c.Tq + i) * c.Hq + h) * W + h % c.group() * c.Tq + i] = 1;
      }
    }
  }
  in.v = v.to(dtype);
  in.dout = dout.to(dtype);
  return in;
}

// The entries the mask keeps (the reference's P is not zero there) and Philox does not drop.
Kept expected(const MaskCase& c, const Inputs& in) {
  const std::vector<double> p = attention_weights(in.q, in.k, c.options).to_vector();
  const AttentionOptions& o = c.options;
  Kept kept(p.size());
  std::size_t n = 0;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t h = 0; h < c.Hq; ++h) {
      for (std::int64_t i = 0; i < c.Tq; ++i) {
        for (std::int64_t j = 0; j < c.Tk; ++j, ++n) {
          kept[n] =
              p[n] != 0 && dropout_keep(o.seed, o.offset, static_cast<std::uint32_t>(b * c.Hq + h),
                                        static_cast<std::uint32_t>(i),
                                        static_cast<std::uint32_t>(j), o.dropout_p);
        }
      }
    }
  }
  return kept;
}

// out [B, Tq, Hq, W] -> its nonzero entries (b, h, i, j < Tk).
Kept read_forward(const MaskCase& c, const Tensor& out) {
  const std::vector<double> o = out.to_vector();
  const std::int64_t W = c.width();
  Kept kept;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t h = 0; h < c.Hq; ++h) {
      for (std::int64_t i = 0; i < c.Tq; ++i) {
        for (std::int64_t j = 0; j < c.Tk; ++j) {
          kept.push_back(o[static_cast<std::size_t>(((b * c.Tq + i) * c.Hq + h) * W + j)] != 0);
        }
      }
    }
  }
  return kept;
}

// dv [B, Tk, Hk, W] -> its nonzero entries (b, h, i, j), column (h % G) * Tq + i of key j.
Kept read_backward(const MaskCase& c, const Tensor& dv) {
  const std::vector<double> d = dv.to_vector();
  const std::int64_t W = c.width(), G = c.group();
  Kept kept;
  for (std::int64_t b = 0; b < c.B; ++b) {
    for (std::int64_t h = 0; h < c.Hq; ++h) {
      for (std::int64_t i = 0; i < c.Tq; ++i) {
        for (std::int64_t j = 0; j < c.Tk; ++j) {
          const std::int64_t at = ((b * c.Tk + j) * c.Hk + h / G) * W + h % G * c.Tq + i;
          kept.push_back(d[static_cast<std::size_t>(at)] != 0);
        }
      }
    }
  }
  return kept;
}

// How many entries differ, and the first that does as "(b, h, i, j)"; "" when none.
std::string difference(const MaskCase& c, const Kept& got, const Kept& want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size());
  std::int64_t count = 0, first = -1;
  for (std::size_t n = 0; n < got.size(); ++n) {
    if (got[n] != want[n]) {
      if (count++ == 0) first = static_cast<std::int64_t>(n);
    }
  }
  if (count == 0) return "";
  const std::int64_t j = first % c.Tk, i = first / c.Tk % c.Tq, h = first / c.Tk / c.Tq % c.Hq;
  const std::int64_t b = first / c.Tk / c.Tq / c.Hq;
  return std::to_string(count) + " entries differ, the first (b, h, i, j) = (" + std::to_string(b) +
         ", " + std::to_string(h) + ", " + std::to_string(i) + ", " + std::to_string(j) + ")";
}

class DropoutMasks : public ::testing::TestWithParam<MaskCase> {};

TEST_P(DropoutMasks, EveryPathDropsTheEntriesPhiloxDrops) {
  const MaskCase& c = GetParam();
  for (const DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Inputs in = make_inputs(c, dtype);
    const Kept want = expected(c, in);
    const auto dropped = std::count(want.begin(), want.end(), false);
    ASSERT_GT(dropped, 0);
    for (const Backend backend : {Backend::cpu, Backend::reference}) {
      AttentionOptions o = c.options;
      o.backend = backend;
      const char* name = backend == Backend::cpu ? "fused" : "reference";
      const AttentionOutput f = attention_forward(in.q, in.k, in.v, o);
      EXPECT_EQ(difference(c, read_forward(c, f.out), want), "") << name << " forward";
      const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, o);
      EXPECT_EQ(difference(c, read_backward(c, g.dv), want), "") << name << " backward";

      const ag::Var q(in.q, true), k(in.k, true), v(in.v, true);
      const ag::Var out = ag::attention(q, k, v, o);
      out.backward(in.dout);
      EXPECT_EQ(difference(c, read_forward(c, out.value()), want), "") << name << " primitive";
      EXPECT_EQ(difference(c, read_backward(c, v.grad()), want), "")
          << name << " primitive's backward";
    }
    const ag::Var q(in.q, true), k(in.k, true), v(in.v, true);
    const ag::Var out = ag::attention_decomposed(q, k, v, c.options);
    out.backward(in.dout);
    EXPECT_EQ(difference(c, read_forward(c, out.value()), want), "") << "composed";
    EXPECT_EQ(difference(c, read_backward(c, v.grad()), want), "") << "composed backward";
  }
}

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> cases;
  MaskCase c;
  c.name = "gqa";
  c.B = 2, c.Tq = c.Tk = 40, c.Hq = 4, c.Hk = 2;
  c.options.dropout_p = 0.3, c.options.seed = 11;
  cases.push_back(c);
  c = MaskCase();
  c.name = "causal_window_lengths_mask_seed_and_offset_high_bits";
  c.B = 2, c.Tq = 30, c.Tk = 50, c.Hq = 2, c.Hk = 1;
  c.options.causal = Causal::bottom_right, c.options.window = {25, 0};
  c.options.key_lengths = {50, 41}, c.options.query_lengths = {30, 27};
  c.options.mask = Tensor::zeros({c.B, 1, c.Tq, c.Tk}, DType::boolean);
  for (std::int64_t n = 0; n < c.options.mask.numel(); ++n) {
    c.options.mask.data_as<std::uint8_t>()[n] = n % 7 != 3;
  }
  c.options.dropout_p = 0.5, c.options.seed = 1ull << 40 | 5, c.options.offset = 1ull << 35 | 9;
  cases.push_back(c);
  c = MaskCase();
  c.name = "bias_alibi_softcap";
  c.Tq = 33, c.Tk = 65, c.Hq = 2, c.Hk = 2;
  Generator g(3);
  c.options.bias = Tensor::randn({c.Hq, c.Tq, c.Tk}, g, DType::f64);
  c.options.alibi_slopes = {0.5, 0.25};
  c.options.softcap = 3.0, c.options.dropout_p = 0.2, c.options.seed = 4, c.options.offset = 2;
  cases.push_back(c);
  c = MaskCase();
  c.name = "decode_split_keys";  // Tq <= 16: the fused forward's split-keys path, 2 splits
  c.Tq = 3, c.Tk = 1100, c.Hq = 2, c.Hk = 1;
  c.options.dropout_p = 0.4, c.options.seed = 99;
  cases.push_back(c);
  return cases;
}

// flex_attention with dropout's starts (a slice of a longer sequence, as ring attention's shards
// are) drops entry (i, j) where the whole sequence drops (q_start + i, k_start + j), on both
// backends, forward and backward: key starts that are not multiples of 4 (a Philox call serves
// four keys), a split-keys decode, and starts that end at 2^32, the counters' limit.
TEST(DropoutMasks, FlexStartsDrawAtGlobalPositions) {
  struct Starts {
    std::int64_t Tq, q_start, k_start;
  };
  constexpr std::int64_t kLast = std::int64_t{1} << 32;
  for (const Starts& at : {Starts{40, 3, 7}, Starts{40, 64, 130}, Starts{3, 1000, 1},
                           Starts{40, kLast - 40, kLast - 1100}}) {
    MaskCase c;
    c.B = 2, c.Tq = at.Tq, c.Tk = 1100, c.Hq = 4, c.Hk = 2;
    c.name = "starts " + std::to_string(at.q_start) + ", " + std::to_string(at.k_start);
    SCOPED_TRACE(c.name);
    FlexOptions o;
    o.dropout_p = 0.3, o.seed = 17, o.offset = 5;
    o.dropout_q_start = at.q_start, o.dropout_k_start = at.k_start;
    Kept want;
    for (std::int64_t b = 0; b < c.B; ++b) {
      for (std::int64_t h = 0; h < c.Hq; ++h) {
        for (std::int64_t i = 0; i < c.Tq; ++i) {
          for (std::int64_t j = 0; j < c.Tk; ++j) {
            want.push_back(dropout_keep(o.seed, o.offset, static_cast<std::uint32_t>(b * c.Hq + h),
                                        static_cast<std::uint32_t>(at.q_start + i),
                                        static_cast<std::uint32_t>(at.k_start + j), o.dropout_p));
          }
        }
      }
    }
    for (const DType dtype : {DType::f32, DType::f64}) {
      const Inputs in = make_inputs(c, dtype);
      for (const Backend backend : {Backend::cpu, Backend::reference}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) +
                     (backend == Backend::cpu ? ", fused" : ", reference"));
        o.backend = backend;
        const AttentionOutput f = flex_attention(in.q, in.k, in.v, BlockMask(), o);
        EXPECT_EQ(difference(c, read_forward(c, f.out), want), "") << "forward";
        const AttentionGrads g =
            flex_attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, BlockMask(), o);
        EXPECT_EQ(difference(c, read_backward(c, g.dv), want), "") << "backward";
      }
    }
  }
}

TEST(DropoutMasks, FlexStartsPastTheCountersThrow) {
  Generator g(1);
  const Tensor x = Tensor::randn({1, 8, 1, 4}, g);
  FlexOptions o;
  o.dropout_p = 0.1;
  o.dropout_q_start = -1;
  EXPECT_THROW(flex_attention(x, x, x, BlockMask(), o), Error);
  o.dropout_q_start = 0, o.dropout_k_start = (std::int64_t{1} << 32) - 7;
  EXPECT_THROW(flex_attention(x, x, x, BlockMask(), o), Error);
  o.dropout_k_start = (std::int64_t{1} << 32) - 8;
  EXPECT_EQ(flex_attention(x, x, x, BlockMask(), o).out.size(1), 8);
}

INSTANTIATE_TEST_SUITE_P(Paths, DropoutMasks, ::testing::ValuesIn(mask_cases()),
                         [](const ::testing::TestParamInfo<MaskCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace qkv::testing
