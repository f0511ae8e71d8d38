// The fused kernel on every SIMD target Highway can run on this CPU (e.g. AVX2 with 8 f32 lanes,
// SSE4 with 4, EMU128, and SCALAR with 1), each against the reference: the tile code must be
// right for any vector width, including widths this machine cannot run (AVX-512's 16).
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/fused_case.hpp"

namespace qkv::testing {
namespace {

TEST(SimdTargets, EveryTargetAgreesWithTheReference) {
  FusedCase c;
  c.B = 2;
  c.Tq = 70;
  c.Tk = 90;
  c.Hq = 4;
  c.Hk = 2;
  c.D = 37;
  c.Dv = 21;
  c.causal = Causal::bottom_right;
  c.padding = c.bias = true;
  c.softcap = 3.0;
  c.dropout = 0.1;
  FusedCase decode = c;  // the split-keys path
  decode.Tq = 2;
  decode.Tk = 2100;
  decode.padding = false;
  int tested = 0;
  // The targets this CPU runs that were compiled in (the asan preset compiles fewer).
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    for (const FusedCase& fc : {c, decode}) {
      SCOPED_TRACE(fc.name());
      const FusedInputs in = make_inputs(fc, DType::f64);
      AttentionOptions ref = in.options;
      ref.backend = Backend::reference;
      AttentionOptions cpu = in.options;
      cpu.backend = Backend::cpu;
      const AttentionOutput r = attention_forward(in.q, in.k, in.v, ref);
      const AttentionOutput f = attention_forward(in.q, in.k, in.v, cpu);
      EXPECT_LE(max_error(f.out, r.out), 1e-12);
      EXPECT_LE(max_error(f.lse, r.lse), 1e-12);
      const AttentionGrads gr = attention_backward(in.dout, in.q, in.k, in.v, r.out, r.lse, ref);
      const AttentionGrads gf = attention_backward(in.dout, in.q, in.k, in.v, r.out, r.lse, cpu);
      for (const auto& [name, x, y] :
           {std::tuple{"dq", &gf.dq, &gr.dq}, std::tuple{"dk", &gf.dk, &gr.dk},
            std::tuple{"dv", &gf.dv, &gr.dv}, std::tuple{"dbias", &gf.dbias, &gr.dbias}}) {
        EXPECT_LE(max_error(*x, *y), 1e-11) << name;
      }
      // f32 takes the custom exp on every target.
      const FusedInputs in32 = make_inputs(fc, DType::f32);
      AttentionOptions cpu32 = in32.options;
      cpu32.backend = Backend::cpu;
      const AttentionOutput f32 = attention_forward(in32.q, in32.k, in32.v, cpu32);
      EXPECT_LE(max_error(f32.out, r.out), 1e-4);
    }
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);  // back to what the CPU supports
  EXPECT_GE(tested, 2) << "expected at least a SIMD target and the scalar fallback";
}

// flex_attention's instantiation (mods through function pointers) on every target: a causal
// document mask and a nonlinear score mod, f64, against the reference; prefill and decode.
TEST(SimdTargets, FlexAgreesWithTheReferenceOnEveryTarget) {
  auto mod = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return 3.0 * qkv::tanh(s / 3.0) - 0.1 * static_cast<double>(h) * static_cast<double>(i - j);
  };
  int tested = 0;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    for (const auto& [Tq, Tk] : {std::tuple<std::int64_t, std::int64_t>{150, 150}, {3, 1500}}) {
      std::vector<std::int64_t> ids;
      for (std::int64_t t = 0; t < Tk; ++t) ids.push_back(t * 3 / Tk);
      const BlockMask blocks = create_block_mask(
          and_masks(masks::causal_lower_right(Tq, Tk), masks::document(ids)), 1, 1, Tq, Tk);
      Generator g(7);
      const Tensor q = Tensor::randn({1, Tq, 4, 24}, g, DType::f64);
      const Tensor k = Tensor::randn({1, Tk, 2, 24}, g, DType::f64);
      const Tensor v = Tensor::randn({1, Tk, 2, 24}, g, DType::f64);
      const Tensor dout = Tensor::randn({1, Tq, 4, 24}, g, DType::f64);
      FlexOptions ref, cpu;
      ref.backend = Backend::reference;
      cpu.backend = Backend::cpu;
      const AttentionOutput r = flex_attention(q, k, v, mod, blocks, ref);
      const AttentionOutput f = flex_attention(q, k, v, mod, blocks, cpu);
      EXPECT_LE(max_error(f.out, r.out), 1e-12);
      EXPECT_LE(max_error(f.lse, r.lse), 1e-12);
      const AttentionGrads gr =
          flex_attention_backward(dout, q, k, v, r.out, r.lse, mod, blocks, ref);
      const AttentionGrads gf =
          flex_attention_backward(dout, q, k, v, r.out, r.lse, mod, blocks, cpu);
      EXPECT_LE(max_error(gf.dq, gr.dq), 1e-11);
      EXPECT_LE(max_error(gf.dk, gr.dk), 1e-11);
      EXPECT_LE(max_error(gf.dv, gr.dv), 1e-11);
    }
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(tested, 2);
}

}  // namespace
}  // namespace qkv::testing
