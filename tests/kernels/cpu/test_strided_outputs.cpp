// The kernel contract's strides (kernels/flash_params.hpp): q, k, v, dout read where they lie
// and out, lse, dq, dk, dv written into the caller's tensors at their strides give, on every
// backend, the very bits of the contiguous call. Layouts: [B, H, T, D] storage permuted to
// [B, T, H, D]; rows padded past D (a slice of a wider tensor); lse stored [B, Tq, H]; and
// outputs the kernels cannot write as they stand (last dimension strided, another dtype), which
// are staged and copied.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fused_case.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {
namespace {

enum class Layout { heads_first, padded_rows, strided_last };

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::heads_first:
      return "heads_first";
    case Layout::padded_rows:
      return "padded_rows";
    case Layout::strided_last:
      return "strided_last";
  }
  return "";
}

// A tensor of logical shape [B, T, H, x] in layout l, holding `values`' elements (any layout).
Tensor laid_out(const Tensor& values, Layout l) {
  const Shape& s = values.shape();
  Tensor t;
  switch (l) {
    case Layout::heads_first:
      t = Tensor::empty({s[0], s[2], s[1], s[3]}, values.dtype()).permute({0, 2, 1, 3});
      break;
    case Layout::padded_rows:
      t = Tensor::empty({s[0], s[1], s[2], s[3] + 5}, values.dtype()).slice(3, 0, s[3]);
      break;
    case Layout::strided_last:
      t = Tensor::empty({s[0], s[1], s[2], 2 * s[3]}, values.dtype()).slice(3, 0, 2 * s[3], 2);
      break;
  }
  t.copy_from(values);
  return t;
}

// lse [B, H, Tq] stored as [B, Tq, H].
Tensor lse_transposed(const Shape& s, DType dtype) {
  return Tensor::empty({s[0], s[2], s[1]}, dtype).permute({0, 2, 1});
}

struct StridedCase {
  FusedCase shape;
  DType dtype;
  Backend backend;
  Layout layout;
};

std::string describe(const StridedCase& c) {
  return c.shape.name() + "_" + std::string(dtype_name(c.dtype)) + "_" +
         (c.backend == Backend::reference ? "reference" : "cpu") + "_" + layout_name(c.layout);
}

class StridedOutputs : public ::testing::TestWithParam<StridedCase> {};

// The flex tests' options (the case's backend) and causal (bottom-right) block mask.
FlexOptions flex_options(const StridedCase& c) {
  FlexOptions options;
  options.backend = c.backend;
  return options;
}
BlockMask causal_blocks(const StridedCase& c) {
  return create_block_mask(masks::causal_lower_right(c.shape.Tq, c.shape.Tk), 1, 1, c.shape.Tq,
                           c.shape.Tk);
}

TEST_P(StridedOutputs, SameBitsAsTheContiguousCall) {
  const StridedCase& c = GetParam();
  FusedInputs in = make_inputs(c.shape, c.dtype);
  in.options.backend = c.backend;
  const AttentionOutput want = attention_forward(in.q, in.k, in.v, in.options);
  const AttentionGrads want_g =
      attention_backward(in.dout, in.q, in.k, in.v, want.out, want.lse, in.options);

  const Tensor q = laid_out(in.q, c.layout), k = laid_out(in.k, c.layout),
               v = laid_out(in.v, c.layout), dout = laid_out(in.dout, c.layout);
  Tensor out = laid_out(Tensor::zeros(want.out.shape(), c.dtype), c.layout);
  Tensor lse = lse_transposed(want.lse.shape(), want.lse.dtype());
  attention_forward(q, k, v, in.options, out, lse);
  EXPECT_TRUE(bitwise_equal({out.to_vector(), lse.to_vector()},
                            {want.out.to_vector(), want.lse.to_vector()}));

  AttentionGrads g;
  g.dq = laid_out(Tensor::zeros(in.q.shape(), c.dtype), c.layout);
  g.dk = laid_out(Tensor::zeros(in.k.shape(), c.dtype), c.layout);
  g.dv = laid_out(Tensor::zeros(in.v.shape(), c.dtype), c.layout);
  if (in.options.bias.defined()) g.dbias = Tensor::zeros(in.options.bias.shape(), c.dtype);
  attention_backward(dout, q, k, v, out, lse, in.options, g);
  std::vector<std::vector<double>> got = {g.dq.to_vector(), g.dk.to_vector(), g.dv.to_vector()};
  std::vector<std::vector<double>> expected = {want_g.dq.to_vector(), want_g.dk.to_vector(),
                                               want_g.dv.to_vector()};
  if (g.dbias.defined()) {
    got.push_back(g.dbias.to_vector());
    expected.push_back(want_g.dbias.to_vector());
  }
  EXPECT_TRUE(bitwise_equal(got, expected));
}

// attention_weights into a caller's tensor stored [B, Hq, Tk, Tq] (transposed): the same bits.
TEST_P(StridedOutputs, WeightsIntoATransposedTensor) {
  const StridedCase& c = GetParam();
  FusedInputs in = make_inputs(c.shape, c.dtype);
  in.options.backend = c.backend;
  const Tensor want = attention_weights(in.q, in.k, in.options);
  const Shape& s = want.shape();
  Tensor got = Tensor::zeros({s[0], s[1], s[3], s[2]}, c.dtype).transpose(2, 3);
  attention_weights(laid_out(in.q, c.layout), laid_out(in.k, c.layout), in.options, got);
  EXPECT_TRUE(bitwise_equal({got.to_vector()}, {want.to_vector()}));
}

// flex_attention reads strided q, k, v and dout where they lie as well.
TEST_P(StridedOutputs, FlexReadsStridedInputs) {
  const StridedCase& c = GetParam();
  const FusedInputs in = make_inputs(c.shape, c.dtype);
  const FlexOptions options = flex_options(c);
  const BlockMask blocks = causal_blocks(c);
  const AttentionOutput want = flex_attention(in.q, in.k, in.v, blocks, options);
  const AttentionGrads want_g =
      flex_attention_backward(in.dout, in.q, in.k, in.v, want.out, want.lse, blocks, options);
  const Tensor q = laid_out(in.q, c.layout), k = laid_out(in.k, c.layout),
               v = laid_out(in.v, c.layout), dout = laid_out(in.dout, c.layout);
  const AttentionOutput got = flex_attention(q, k, v, blocks, options);
  const Tensor out = laid_out(got.out, c.layout);
  const AttentionGrads got_g =
      flex_attention_backward(dout, q, k, v, out, got.lse, blocks, options);
  EXPECT_TRUE(bitwise_equal({got.out.to_vector(), got.lse.to_vector(), got_g.dq.to_vector(),
                             got_g.dk.to_vector(), got_g.dv.to_vector()},
                            {want.out.to_vector(), want.lse.to_vector(), want_g.dq.to_vector(),
                             want_g.dk.to_vector(), want_g.dv.to_vector()}));
}

// flex_attention and its backward into the caller's tensors (permuted, padded or strided outputs,
// lse stored transposed): the very bits of the calls that allocate, with a score mod.
TEST_P(StridedOutputs, FlexWritesIntoTheCallersTensors) {
  const StridedCase& c = GetParam();
  const FusedInputs in = make_inputs(c.shape, c.dtype);
  const FlexOptions options = flex_options(c);
  const BlockMask blocks = causal_blocks(c);
  const auto tilt = [](auto s, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
    return s - 0.25 * static_cast<double>(h + 1) * static_cast<double>(i - j);
  };
  const AttentionOutput want = flex_attention(in.q, in.k, in.v, tilt, blocks, options);
  const AttentionGrads want_g =
      flex_attention_backward(in.dout, in.q, in.k, in.v, want.out, want.lse, tilt, blocks, options);
  // Every output starts as NaN: an element the calls leave unwritten cannot match.
  const auto nan_filled = [&](Tensor t) {
    t.fill(std::numeric_limits<double>::quiet_NaN());
    return t;
  };
  Tensor out = nan_filled(laid_out(Tensor::zeros(want.out.shape(), c.dtype), c.layout));
  Tensor lse = nan_filled(lse_transposed(want.lse.shape(), want.lse.dtype()));
  flex_attention(in.q, in.k, in.v, tilt, blocks, options, out, lse);
  AttentionGrads g;
  g.dq = nan_filled(laid_out(Tensor::zeros(in.q.shape(), c.dtype), c.layout));
  g.dk = nan_filled(laid_out(Tensor::zeros(in.k.shape(), c.dtype), c.layout));
  g.dv = nan_filled(laid_out(Tensor::zeros(in.v.shape(), c.dtype), c.layout));
  flex_attention_backward(in.dout, in.q, in.k, in.v, out, lse, tilt, blocks, options, {}, g);
  EXPECT_TRUE(bitwise_equal(
      {out.to_vector(), lse.to_vector(), g.dq.to_vector(), g.dk.to_vector(), g.dv.to_vector()},
      {want.out.to_vector(), want.lse.to_vector(), want_g.dq.to_vector(), want_g.dk.to_vector(),
       want_g.dv.to_vector()}));
  for (const Tensor* t : {&out, &g.dq, &g.dk, &g.dv}) {
    const std::vector<double> values = t->to_vector();
    EXPECT_TRUE(
        std::all_of(values.begin(), values.end(), [](double x) { return std::isfinite(x); }));
  }
}

std::vector<StridedCase> cases() {
  std::vector<FusedCase> shapes;
  // Tiled forward, GQA, Tq != Tk, a causal mask, a bias broadcast over B, dropout.
  FusedCase tiled;
  tiled.B = 2;
  tiled.Tq = 70;
  tiled.Tk = 135;
  tiled.Hq = 4;
  tiled.Hk = 2;
  tiled.D = 16;
  tiled.Dv = 24;
  tiled.causal = Causal::bottom_right;
  tiled.bias = true;
  tiled.dropout = 0.1;
  shapes.push_back(tiled);
  // The split-keys forward (decode: Tq of a few rows), padding, soft-capping.
  FusedCase decode;
  decode.B = 2;
  decode.Tq = 2;
  decode.Tk = 300;
  decode.Hq = 4;
  decode.Hk = 1;
  decode.D = 32;
  decode.Dv = 32;
  decode.padding = true;
  decode.softcap = 20;
  shapes.push_back(decode);
  // Decode over several key splits with k/v heads: heads first, each item reads one k/v head
  // (flash_decode.cpp); with 8 query rows a k/v head, the most the dot products take; with 9,
  // the fewest the grouped products take.
  FusedCase splits;
  splits.B = 1;
  splits.Tq = 1;
  splits.Tk = 2100;
  splits.Hq = 4;
  splits.Hk = 2;
  splits.D = 32;
  splits.Dv = 32;
  splits.padding = true;
  shapes.push_back(splits);
  splits.Hq = 16;
  shapes.push_back(splits);
  splits.Hq = 18;
  shapes.push_back(splits);
  std::vector<StridedCase> all;
  for (const FusedCase& shape : shapes) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (Backend backend : {Backend::reference, Backend::cpu}) {
        for (Layout layout : {Layout::heads_first, Layout::padded_rows, Layout::strided_last}) {
          all.push_back({shape, dtype, backend, layout});
        }
      }
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Layouts, StridedOutputs, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<StridedCase>& info) {
                           return describe(info.param);
                         });

}  // namespace
}  // namespace qkv::testing
