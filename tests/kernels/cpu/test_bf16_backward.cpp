// The fused backward of bf16 q, k, v and dout in bf16 products on the machine's matrix units
// (kernels/cpu/bf16_grads-inl.h: S and dP from the bf16 values, dV, dQ and dK with P Z and dS
// rounded to bf16, f32 accumulation), on every path this CPU runs and on the emulated AMX tiles
// everywhere: within FlashAttention's rule of the f64 reference (dq, dk, dv at most 3x the error
// of the reference computed from the same bf16 inputs and rounded to bf16), with the options and
// mods of the f32 path; deterministic over thread counts; and really taken (its bits differ from
// the f32 products').
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/bf16_runs.hpp"
#include "kernels/cpu/fused_case.hpp"
#include "kernels/cpu/fused_pass.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

using kernels::cpu::ForcedFusedPath;
using kernels::cpu::MatrixPath;

std::vector<FusedCase> shapes() {
  std::vector<FusedCase> out;
  FusedCase tiled;  // ragged q- and k-blocks, D and Dv off the tiles, GQA, lengths, bias, dropout
  tiled.B = 3;
  tiled.Tq = 150;
  tiled.Tk = 333;
  tiled.Hq = 4;
  tiled.Hk = 2;
  tiled.D = 40;
  tiled.Dv = 24;
  tiled.causal = Causal::top_left;
  tiled.padding = true;
  tiled.bias = true;
  tiled.dropout = 0.2;
  out.push_back(tiled);
  FusedCase wide;  // D = 128, a window, soft-capping, ALiBi, MQA
  wide.B = 1;
  wide.Tq = 200;
  wide.Tk = 700;
  wide.Hq = 4;
  wide.Hk = 1;
  wide.D = wide.Dv = 128;
  wide.window = {300, 40};
  wide.softcap = 30.0;
  wide.alibi = true;
  out.push_back(wide);
  FusedCase views;  // heads-first views, a keep-mask, bottom-right causal, Dv wider than D
  views.B = 2;
  views.Tq = 70;
  views.Tk = 260;
  views.Hq = views.Hk = 3;
  views.D = 64;
  views.Dv = 80;
  views.causal = Causal::bottom_right;
  views.mask = true;
  views.strided = true;
  views.q_scale = 4.0;
  out.push_back(views);
  return out;
}

class Bf16Backward : public ::testing::TestWithParam<FusedCase> {};

TEST_P(Bf16Backward, WithinThriceTheLowPrecisionReferencesErrorOnEveryPath) {
  const FusedInputs in = make_inputs(GetParam(), DType::bf16);
  AttentionOptions cpu = in.options, ref = in.options, ref64 = in.options;
  cpu.backend = Backend::cpu;
  ref.backend = ref64.backend = Backend::reference;
  if (ref64.bias.defined()) ref64.bias = ref64.bias.to(DType::f64);
  FusedInputs in64 = in;
  for (Tensor* t : {&in64.q, &in64.k, &in64.v, &in64.dout}) *t = t->to(DType::f64);
  const Pass exact = run(in64, ref64);
  const Pass low = run(in, ref);
  const Pass f32 = run_forced(std::nullopt, in, cpu);
  for (const auto& [path, portable] : bf16_runs()) {
    SCOPED_TRACE(std::string(kernels::cpu::path_name(path)) +
                 (portable ? ", Highway's rounding" : ", the CPU's rounding"));
    const ForcedFusedPath forced(path);
    const PortableRounding rounding(portable);
    const Pass got = run(in, cpu);
    EXPECT_EQ(got.grads.dq.dtype(), DType::bf16);
    const std::vector<std::pair<const char*, const Tensor AttentionGrads::*>> grads = {
        {"dq", &AttentionGrads::dq}, {"dk", &AttentionGrads::dk}, {"dv", &AttentionGrads::dv}};
    for (const auto& [name, member] : grads) {
      SCOPED_TRACE(name);
      const Tensor& want = exact.grads.*member;
      const double slack = 1e-6 * std::max(1.0, max_abs(want));
      const double low_error = max_error(low.grads.*member, want);
      const double error = max_error(got.grads.*member, want);
      EXPECT_LE(error, 3 * low_error + slack);
      std::printf("[ INFO     ] %s %s: error %.3g, low-precision reference's %.3g (%.2fx)\n",
                  kernels::cpu::path_name(path), name, error, low_error, error / low_error);
    }
    if (in.options.bias.defined()) {
      EXPECT_LE(max_error(got.grads.dbias, exact.grads.dbias),
                3 * max_error(low.grads.dbias, exact.grads.dbias) + 1e-6);
    }
    // dS and P Z rounded to bf16 move some gradients by a bf16 unit: the path was taken.
    EXPECT_FALSE(bitwise_equal(grads_of(got), grads_of(f32)));
    // The same bits on one thread as on two.
    const Pass one = run_on_one_thread(in, cpu);
    EXPECT_TRUE(bitwise_equal(grads_of(got), grads_of(one)));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16Backward, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<FusedCase>& info) {
                           return info.param.name();
                         });

// f16 inputs: no bf16 products, the bits of the f32 products whatever the path forced.
TEST(Bf16Backward, F16StaysOnTheF32Products) {
  FusedCase c;
  c.B = 1;
  c.Tq = 100;
  c.Tk = 130;
  c.D = c.Dv = 64;
  const FusedInputs in = make_inputs(c, DType::f16);
  AttentionOptions cpu = in.options;
  cpu.backend = Backend::cpu;
  const Pass forced_run = run_forced(MatrixPath::amx_emulated, in, cpu);
  const Pass f32 = run_forced(std::nullopt, in, cpu);
  EXPECT_TRUE(bitwise_equal(grads_of(forced_run), grads_of(f32)));
}

}  // namespace
}  // namespace qkv::testing
