// The fused CPU kernels against the reference oracle, forward (out, lse and attention_weights) and
// backward, over head dims,
// lengths that are not tile multiples, Tq != Tk both ways, GQA ratios, every option alone and
// composed, and strided inputs. f64: agreement to rounding. f32: FlashAttention's rule, the
// fused error against the f64 reference at most 2x (3x for gradients) the error of the reference
// run in f32, plus 1e-6 times the largest value of the problem's output (or gradients). The floor
// is relative because the reference can be exact by symmetry where the math cancels (Tk = 1:
// P = 1, dS = dO.v - dO.out = 0), while any other summation order leaves rounding noise of the
// size of the terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/fused_case.hpp"

namespace qkv::testing {
namespace {

struct Results {
  Tensor out, lse, weights, dq, dk, dv, dbias;
};

Results run(const FusedInputs& in, Backend backend) {
  AttentionOptions options = in.options;
  options.backend = backend;
  const AttentionOutput f = attention_forward(in.q, in.k, in.v, options);
  const AttentionGrads g = attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, options);
  return {f.out, f.lse, attention_weights(in.q, in.k, options), g.dq, g.dk, g.dv, g.dbias};
}

// The same inputs in f64 (exactly the values of `in`), for the oracle.
FusedInputs widened(const FusedInputs& in) {
  FusedInputs wide = in;
  wide.q = in.q.to(DType::f64);
  wide.k = in.k.to(DType::f64);
  wide.v = in.v.to(DType::f64);
  wide.dout = in.dout.to(DType::f64);
  if (in.options.bias.defined()) wide.options.bias = in.options.bias.to(DType::f64);
  return wide;
}

struct Named {
  const char* name;
  Tensor Results::*field;
};
constexpr Named kForward[] = {
    {"out", &Results::out}, {"lse", &Results::lse}, {"weights", &Results::weights}};
constexpr Named kGrads[] = {
    {"dq", &Results::dq}, {"dk", &Results::dk}, {"dv", &Results::dv}, {"dbias", &Results::dbias}};

class FusedVsReference : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedVsReference, F64AgreesToRounding) {
  const FusedCase& c = GetParam();
  SCOPED_TRACE(c.name());
  const FusedInputs in = make_inputs(c, DType::f64);
  const Results ref = run(in, Backend::reference);
  const Results fused = run(in, Backend::cpu);
  for (const auto& group : {std::vector<Named>(std::begin(kForward), std::end(kForward)),
                            std::vector<Named>(std::begin(kGrads), std::end(kGrads))}) {
    for (const Named& t : group) {
      if (!(ref.*t.field).defined()) continue;
      // Large scores scale the rounding of every score, and q scales dk.
      const double tolerance = 1e-11 * c.q_scale * (1 + max_abs(ref.*t.field));
      EXPECT_LE(max_error(fused.*t.field, ref.*t.field), tolerance) << t.name;
    }
  }
}

TEST_P(FusedVsReference, F32WithinTwiceTheReferenceError) {
  const FusedCase& c = GetParam();
  SCOPED_TRACE(c.name());
  const FusedInputs in = make_inputs(c, DType::f32);
  const Results oracle = run(widened(in), Backend::reference);
  const Results ref32 = run(in, Backend::reference);
  const Results fused = run(in, Backend::cpu);
  for (const Named& t : kForward) {
    const double allowed =
        2 * max_error(ref32.*t.field, oracle.*t.field) + 1e-6 * (1 + max_abs(oracle.*t.field));
    EXPECT_LE(max_error(fused.*t.field, oracle.*t.field), allowed) << t.name;
  }
  double grad_scale = 1;
  for (const Named& t : kGrads) {
    if ((oracle.*t.field).defined()) grad_scale = std::max(grad_scale, max_abs(oracle.*t.field));
  }
  for (const Named& t : kGrads) {
    if (!(oracle.*t.field).defined()) continue;
    const double allowed = 3 * max_error(ref32.*t.field, oracle.*t.field) + 1e-6 * grad_scale;
    EXPECT_LE(max_error(fused.*t.field, oracle.*t.field), allowed) << t.name;
  }
}

std::vector<FusedCase> head_dim_cases() {
  std::vector<FusedCase> cases;
  int n = 0;
  for (const std::int64_t d : {1, 7, 33, 59, 64, 80, 96, 111, 128, 256}) {
    FusedCase c;
    c.Tq = c.Tk = 65;
    c.Hq = 4;
    c.Hk = 2;
    c.D = c.Dv = d;
    c.causal = n++ % 2 ? Causal::bottom_right : Causal::none;
    cases.push_back(c);
  }
  return cases;
}

std::vector<FusedCase> length_cases() {
  std::vector<FusedCase> cases;
  const std::pair<std::int64_t, std::int64_t> lengths[] = {{1, 1},     {1, 1000},    {3, 257},
                                                           {257, 3},   {63, 65},     {65, 63},
                                                           {257, 257}, {1000, 1000}, {1000, 1}};
  int n = 0;
  for (const auto& [tq, tk] : lengths) {
    for (const Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right}) {
      if (tq * tk > 300000 && causal == Causal::top_left) continue;  // keep the suite short
      FusedCase c;
      c.Tq = tq;
      c.Tk = tk;
      c.D = 32;
      c.Dv = 24;
      c.causal = causal;
      c.seed = 100 + n++;
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<FusedCase> gqa_cases() {
  std::vector<FusedCase> cases;
  for (const std::int64_t hk : {8, 4, 2, 1}) {
    FusedCase c;
    c.B = 2;
    c.Tq = 100;
    c.Tk = 130;
    c.Hq = 8;
    c.Hk = hk;
    c.D = c.Dv = 32;
    c.causal = Causal::bottom_right;
    c.seed = 200 + hk;
    cases.push_back(c);
  }
  return cases;
}

std::vector<FusedCase> option_cases() {
  FusedCase base;
  base.B = 3;
  base.Tq = 97;
  base.Tk = 130;
  base.Hq = 4;
  base.Hk = 2;
  base.D = 40;
  base.Dv = 24;
  std::vector<FusedCase> cases;
  auto add = [&](auto edit) {
    FusedCase c = base;
    edit(c);
    c.seed = 300 + cases.size();
    cases.push_back(c);
  };
  add([](FusedCase&) {});
  add([](FusedCase& c) { c.causal = Causal::top_left; });
  add([](FusedCase& c) { c.causal = Causal::bottom_right; });
  add([](FusedCase& c) { c.window = {17, 5}; });
  add([](FusedCase& c) { c.window = {-1, 0}; });
  add([](FusedCase& c) { c.window = {70, -1}; });
  add([](FusedCase& c) { c.padding = true; });
  add([](FusedCase& c) { c.mask = true; });
  add([](FusedCase& c) { c.bias = true; });
  add([](FusedCase& c) { c.alibi = true; });
  add([](FusedCase& c) { c.softcap = 2.5; });
  add([](FusedCase& c) { c.dropout = 0.3; });
  add([](FusedCase& c) { c.strided = true; });
  add([](FusedCase& c) {
    c.causal = Causal::bottom_right;
    c.window = {40, 0};
    c.padding = c.mask = c.bias = c.alibi = c.strided = true;
    c.softcap = 3.0;
    c.dropout = 0.2;
  });
  add([](FusedCase& c) {
    c.causal = Causal::top_left;
    c.window = {20, 8};
    c.padding = c.bias = c.alibi = true;
    c.softcap = 5.0;
    c.dropout = 0.1;
    c.Tq = 130;
    c.Tk = 97;
  });
  return cases;
}

// A head's K and V over 1 MiB (Tk (D + Dv) 4 bytes = 1.07 MiB in f32): the forward takes q-blocks
// of 128 rows instead of 64 (TileTraits::kForwardLargeKv); 300 queries end in a partial block.
std::vector<FusedCase> large_kv_cases() {
  std::vector<FusedCase> cases;
  for (const Causal causal : {Causal::none, Causal::bottom_right}) {
    FusedCase c;
    c.Tq = 300;
    c.Tk = 1100;
    c.Hq = 2;
    c.Hk = 1;
    c.D = c.Dv = 128;
    c.causal = causal;
    c.padding = causal == Causal::none;
    c.seed = 500 + cases.size();
    cases.push_back(c);
  }
  return cases;
}

// Decode shapes take the split-keys path (Tq <= 16, Tk > 1024): partial softmax states of key
// chunks merged exactly. Hq 8 over Hk 2 puts G Tq query rows on a k/v head: Tq 1 and 2 (4 and 8
// rows) take dot products, the others (9 rows and more: TileTraits::kDecodeGroupedRows) small
// products.
std::vector<FusedCase> decode_cases() {
  std::vector<FusedCase> cases;
  auto add = [&](std::int64_t tq, std::int64_t tk, auto edit) {
    FusedCase c;
    c.B = 2;
    c.Tq = tq;
    c.Tk = tk;
    c.Hq = 8;
    c.Hk = 2;
    c.D = 64;
    c.Dv = 48;
    edit(c);
    c.seed = 400 + cases.size();
    cases.push_back(c);
  };
  add(1, 1025, [](FusedCase&) {});
  add(1, 5000, [](FusedCase& c) { c.causal = Causal::bottom_right; });
  add(3, 4097, [](FusedCase& c) {
    c.causal = Causal::bottom_right;
    c.window = {1500, 0};  // the first chunks are empty for every row
  });
  add(16, 3000, [](FusedCase& c) {
    c.causal = Causal::top_left;  // only the first 16 keys: later chunks hold nothing
  });
  add(4, 2500, [](FusedCase& c) {
    c.B = 3;
    c.padding = c.bias = c.alibi = true;
    c.softcap = 4.0;
    c.dropout = 0.2;
  });
  add(2, 2049, [](FusedCase& c) {
    c.Hk = 1;
    c.mask = c.strided = true;
  });
  // Peaked rows whose scores (~1e4) f32 rounds to 1e-3: the backward must recompute the scores
  // the forward's lse came from bit for bit, or P = exp(s - lse) leaves [0, 1].
  add(3, 1100, [](FusedCase& c) { c.q_scale = 1000; });
  add(2, 1100, [](FusedCase& c) { c.q_scale = 1000; });  // 8 rows: the most dot products take
  add(5, 300, [](FusedCase& c) {
    c.q_scale = 1000;
    c.causal = Causal::bottom_right;
    c.strided = true;
  });
  // More queries against a long cache (TileTraits::kDecodeLongQueries), peaked, and causal.
  add(20, 4200, [](FusedCase& c) { c.q_scale = 1000; });
  add(24, 4096, [](FusedCase& c) { c.causal = Causal::bottom_right; });
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<FusedCase>& info) { return info.param.name(); }

INSTANTIATE_TEST_SUITE_P(HeadDims, FusedVsReference, ::testing::ValuesIn(head_dim_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Lengths, FusedVsReference, ::testing::ValuesIn(length_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Gqa, FusedVsReference, ::testing::ValuesIn(gqa_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(LargeKv, FusedVsReference, ::testing::ValuesIn(large_kv_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Decode, FusedVsReference, ::testing::ValuesIn(decode_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Options, FusedVsReference, ::testing::ValuesIn(option_cases()), case_name);

}  // namespace
}  // namespace qkv::testing
