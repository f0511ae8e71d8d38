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

double max_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector();
  const std::vector<double> y = b.to_vector();
  double worst = 0;
  for (std::size_t n = 0; n < x.size(); ++n) {
    if (x[n] == y[n]) continue;
    const double e = std::fabs(x[n] - y[n]);
    worst = std::isfinite(e) ? std::max(worst, e) : INFINITY;
  }
  return worst;
}

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

}  // namespace
}  // namespace qkv::testing
