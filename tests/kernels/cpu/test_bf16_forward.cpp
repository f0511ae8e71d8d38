// The tiled forward of bf16 q, k and v in bf16 products on the machine's matrix units
// (kernels/cpu/bf16_gemm.hpp: S = Q K^T and P V with P rounded to bf16, f32 accumulation, the
// softmax in f32), on every path this CPU runs and on the emulated AMX tiles everywhere: within
// FlashAttention's rule of the f64 reference (at most twice the error of the reference computed
// from the same bf16 inputs and rounded to bf16), with the options and mods of the f32 path;
// deterministic over thread counts; and really taken (its bits differ from the f32 path's).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/bf16_runs.hpp"
#include "kernels/cpu/fused_case.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

using kernels::cpu::ForcedFusedPath;
using kernels::cpu::MatrixPath;

std::vector<FusedCase> shapes() {
  std::vector<FusedCase> out;
  FusedCase tiled;  // q-blocks of 64 and 128 rows, a ragged last tile, D and Dv off the tiles
  tiled.B = 2;
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
  FusedCase wide;  // D = 128, a window, soft-capping, ALiBi, GQA
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
  // Runs of full tiles with plain scores take the wide softmax step (flash_fwd.cpp's
  // Bf16Products::wide): runs of 4 and 2 tiles and a ragged last tile, GQA, with P V added into
  // the accumulator by the product (Dv whole C tiles) or through a buffer (Dv 40).
  FusedCase plain;
  plain.B = 1;
  plain.Tq = 300;
  plain.Tk = 700;
  plain.Hq = 2;
  plain.Hk = 1;
  plain.D = 64;
  plain.Dv = 64;
  out.push_back(plain);
  FusedCase plain_dv = plain;
  plain_dv.Dv = 40;
  plain_dv.D = 96;
  out.push_back(plain_dv);
  // Under a causal mask with key lengths: wide runs left of the diagonal, partial tiles on it and
  // past a length.
  FusedCase plain_causal;
  plain_causal.B = 2;
  plain_causal.Tq = plain_causal.Tk = 520;
  plain_causal.Hq = plain_causal.Hk = 2;
  plain_causal.D = plain_causal.Dv = 128;
  plain_causal.causal = Causal::top_left;
  plain_causal.padding = true;
  out.push_back(plain_causal);
  // K and V of a head over 1 MiB: q-blocks of 128 rows, whose diagonal tiles skip the half of
  // the rows that keeps none of their keys; Dv 40 adds P V through the buffer.
  FusedCase large_causal;
  large_causal.Tq = 300;
  large_causal.Tk = 1700;
  large_causal.D = 128;
  large_causal.Dv = 40;
  large_causal.causal = Causal::bottom_right;
  out.push_back(large_causal);
  return out;
}

class Bf16Forward : public ::testing::TestWithParam<FusedCase> {};

TEST_P(Bf16Forward, WithinTwiceTheLowPrecisionReferencesErrorOnEveryPath) {
  const FusedInputs in = make_inputs(GetParam(), DType::bf16);
  AttentionOptions cpu = in.options, ref = in.options, ref64 = in.options;
  cpu.backend = Backend::cpu;
  ref.backend = ref64.backend = Backend::reference;
  if (ref64.bias.defined()) ref64.bias = ref64.bias.to(DType::f64);
  const AttentionOutput exact =
      attention_forward(in.q.to(DType::f64), in.k.to(DType::f64), in.v.to(DType::f64), ref64);
  const AttentionOutput low = attention_forward(in.q, in.k, in.v, ref);
  const double slack = 1e-6 * std::max(1.0, max_abs(exact.out));
  AttentionOutput f32;
  {
    const ForcedFusedPath none(std::nullopt);
    f32 = attention_forward(in.q, in.k, in.v, cpu);
  }
  for (const auto& [path, portable] : bf16_runs()) {
    SCOPED_TRACE(std::string(kernels::cpu::path_name(path)) +
                 (portable ? ", Highway's rounding" : ", the CPU's rounding"));
    const ForcedFusedPath forced(path);
    const PortableRounding rounding(portable);
    const AttentionOutput got = attention_forward(in.q, in.k, in.v, cpu);
    EXPECT_EQ(got.out.dtype(), DType::bf16);
    EXPECT_LE(max_error(got.out, exact.out), 2 * max_error(low.out, exact.out) + slack);
    EXPECT_LE(max_error(got.lse, exact.lse), 2 * max_error(low.lse, exact.lse) + 1e-5);
    // P rounded to bf16 moves some outputs by a bf16 unit: the path was taken.
    EXPECT_FALSE(bitwise_equal({got.out.to_vector()}, {f32.out.to_vector()}));
    // The same bits on one thread as on two.
    const int threads = num_threads();
    set_num_threads(1);
    const AttentionOutput one = attention_forward(in.q, in.k, in.v, cpu);
    set_num_threads(threads);
    EXPECT_TRUE(bitwise_equal({got.out.to_vector(), got.lse.to_vector()},
                              {one.out.to_vector(), one.lse.to_vector()}));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16Forward, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<FusedCase>& info) {
                           return info.param.name();
                         });

// f16 q, k and v: no bf16 products (AMX-FP16 is not used yet), the f32 path's bits whatever the
// path forced.
TEST(Bf16Forward, F16StaysOnTheF32Path) {
  FusedCase c;
  c.B = 1;
  c.Tq = 100;
  c.Tk = 130;
  c.D = c.Dv = 64;
  const FusedInputs in = make_inputs(c, DType::f16);
  AttentionOptions cpu = in.options;
  cpu.backend = Backend::cpu;
  AttentionOutput forced_run, f32;
  {
    const ForcedFusedPath forced(MatrixPath::amx_emulated);
    forced_run = attention_forward(in.q, in.k, in.v, cpu);
  }
  {
    const ForcedFusedPath none(std::nullopt);
    f32 = attention_forward(in.q, in.k, in.v, cpu);
  }
  EXPECT_TRUE(bitwise_equal({forced_run.out.to_vector(), forced_run.lse.to_vector()},
                            {f32.out.to_vector(), f32.lse.to_vector()}));
}

}  // namespace
}  // namespace qkv::testing
