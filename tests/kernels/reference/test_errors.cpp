// Bad input at every public entry point: each mistake must throw qkv::Error whose argument()
// names the culprit and whose message says what was expected and what came, and no output the
// caller passed in (pre-filled with a sentinel) may be written.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/reference/oracle.hpp"

namespace qkv::testing {
namespace {

constexpr double kSentinel = 12345.0;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Everything the entry points take. The valid base: B 2, Tq 3, Tk 4, Hq 4, Hk 2, D 3, Dv 2, f64,
// a [Tq, Tk] mask and a [1, Hq, 1, Tk] bias.
constexpr std::int64_t B = 2, Tq = 3, Tk = 4, Hq = 4, Hk = 2, D = 3, Dv = 2;

struct Call {
  Tensor q, k, v;
  AttentionOptions options;
  Tensor out, lse;  // forward outputs, for the writing overload
  Tensor dout, fwd_out, fwd_lse;
  AttentionGrads grads;  // backward outputs, for the writing overload
};

Call valid_call() {
  Generator g(3);
  Call c;
  c.q = Tensor::randn({B, Tq, Hq, D}, g, DType::f64);
  c.k = Tensor::randn({B, Tk, Hk, D}, g, DType::f64);
  c.v = Tensor::randn({B, Tk, Hk, Dv}, g, DType::f64);
  c.options.backend = Backend::reference;
  c.options.mask = Tensor::full({Tq, Tk}, 1.0, DType::boolean);
  c.options.mask.set({0, 1}, 0.0);
  c.options.bias = Tensor::randn({1, Hq, 1, Tk}, g, DType::f64);
  c.options.dropout_p = 0.1;
  c.out = Tensor::full({B, Tq, Hq, Dv}, kSentinel, DType::f64);
  c.lse = Tensor::full({B, Hq, Tq}, kSentinel, DType::f64);
  c.dout = Tensor::randn({B, Tq, Hq, Dv}, g, DType::f64);
  const AttentionOutput f = attention_forward(c.q, c.k, c.v, c.options);
  c.fwd_out = f.out;
  c.fwd_lse = f.lse;
  c.grads.dq = Tensor::full({B, Tq, Hq, D}, kSentinel, DType::f64);
  c.grads.dk = Tensor::full({B, Tk, Hk, D}, kSentinel, DType::f64);
  c.grads.dv = Tensor::full({B, Tk, Hk, Dv}, kSentinel, DType::f64);
  c.grads.dbias = Tensor::full({1, Hq, 1, Tk}, kSentinel, DType::f64);
  return c;
}

// The valid call with every tensor in f32 (the mask stays bool).
void to_f32(Call& c) {
  for (Tensor* t : {&c.q, &c.k, &c.v, &c.options.bias, &c.out, &c.lse, &c.dout, &c.fwd_out,
                    &c.fwd_lse, &c.grads.dq, &c.grads.dk, &c.grads.dv, &c.grads.dbias}) {
    *t = t->to(DType::f32);
  }
}

// Finite as doubles, past f32's largest (3.4028234663852886e38).
constexpr double kPastF32 = 1e39;

enum Entry : unsigned {
  kForward = 1,
  kForwardInto = 2,
  kBackward = 4,
  kBackwardInto = 8,
  kWeights = 16,
  kQkv = kForward | kForwardInto | kBackward | kBackwardInto,  // everything that reads v
  kAll = kQkv | kWeights,
};

struct ErrorCase {
  std::string name;
  unsigned entries;
  std::string argument;  // what argument() must be (or start with, for "options.key_lengths[")
  std::function<void(Call&)> mutate;
};

void PrintTo(const ErrorCase& e, std::ostream* os) {
  *os << e.name << " (expects argument " << e.argument << ")";
}

std::vector<ErrorCase> error_cases() {
  std::vector<ErrorCase> cases;
  auto add = [&](std::string name, unsigned entries, std::string argument,
                 std::function<void(Call&)> mutate) {
    cases.push_back({std::move(name), entries, std::move(argument), std::move(mutate)});
  };
  Generator g(17);
  auto randn = [g](Shape shape, DType dtype = DType::f64) mutable {
    return Tensor::randn(std::move(shape), g, DType::f64).to(dtype);
  };
  // Shapes of q, k, v.
  add("k_batch", kAll, "k", [=](Call& c) mutable { c.k = randn({B + 1, Tk, Hk, D}); });
  add("v_batch", kQkv, "v", [=](Call& c) mutable { c.v = randn({B + 1, Tk, Hk, Dv}); });
  add("v_length", kQkv, "v", [=](Call& c) mutable { c.v = randn({B, Tk + 1, Hk, Dv}); });
  add("v_heads", kQkv, "v", [=](Call& c) mutable { c.v = randn({B, Tk, Hk + 1, Dv}); });
  add("k_head_dim", kAll, "k", [=](Call& c) mutable { c.k = randn({B, Tk, Hk, D + 1}); });
  add("hq_not_multiple_of_hk", kAll, "k", [=](Call& c) mutable {
    c.k = randn({B, Tk, 3, D});
    c.v = randn({B, Tk, 3, Dv});
  });
  add("q_rank3", kAll, "q", [=](Call& c) mutable { c.q = randn({B, Tq, Hq * D}); });
  add("k_rank5", kAll, "k", [=](Call& c) mutable { c.k = randn({B, Tk, Hk, D, 1}); });
  add("v_rank3", kQkv, "v", [=](Call& c) mutable { c.v = randn({B, Tk, Hk * Dv}); });
  add("q_undefined", kAll, "q", [](Call& c) { c.q = Tensor(); });
  add("q_zero_heads", kAll, "q", [=](Call& c) mutable { c.q = randn({B, Tq, 0, D}); });
  add("q_zero_head_dim", kAll, "q", [=](Call& c) mutable {
    c.q = randn({B, Tq, Hq, 0});
    c.k = randn({B, Tk, Hk, 0});
  });
  add("v_zero_head_dim", kQkv, "v", [=](Call& c) mutable { c.v = randn({B, Tk, Hk, 0}); });
  // Dtypes.
  add("k_f32_with_q_f64", kAll, "k", [](Call& c) { c.k = c.k.to(DType::f32); });
  add("v_f32_with_q_f64", kQkv, "v", [](Call& c) { c.v = c.v.to(DType::f32); });
  add("q_boolean", kAll, "q", [](Call& c) {
    c.q = c.q.to(DType::boolean);
    c.k = c.k.to(DType::boolean);
    c.v = c.v.to(DType::boolean);
  });
  add("mask_not_boolean", kAll, "options.mask",
      [](Call& c) { c.options.mask = c.options.mask.to(DType::f64); });
  add("bias_boolean", kAll, "options.bias", [](Call& c) {
    c.options.bias = Tensor::full({Tq, Tk}, 1.0, DType::boolean);
  });
  // Options.
  add("window_left_below_minus_1", kAll, "options.window.left",
      [](Call& c) { c.options.window.left = -2; });
  add("window_right_below_minus_1", kAll, "options.window.right",
      [](Call& c) { c.options.window.right = -7; });
  for (const auto& [label, p] : {std::pair{"negative", -0.1}, std::pair{"one", 1.0},
                                 std::pair{"above_one", 1.5}, std::pair{"nan", std::nan("")}}) {
    add(std::string("dropout_") + label, kAll, "options.dropout_p",
        [p = p](Call& c) { c.options.dropout_p = p; });
  }
  for (const auto& [label, cap] :
       {std::pair{"negative", -1.0}, std::pair{"nan", std::nan("")}, std::pair{"inf", kInf}}) {
    add(std::string("softcap_") + label, kAll, "options.softcap",
        [cap = cap](Call& c) { c.options.softcap = cap; });
  }
  add("scale_nan", kAll, "options.scale", [](Call& c) { c.options.scale = std::nan(""); });
  add("scale_inf", kAll, "options.scale", [](Call& c) { c.options.scale = -kInf; });
  // Finite doubles that f32 inputs, computed in f32, would turn into inf.
  add("scale_past_f32", kAll, "options.scale", [](Call& c) {
    to_f32(c);
    c.options.scale = -kPastF32;
  });
  add("softcap_past_f32", kAll, "options.softcap", [](Call& c) {
    to_f32(c);
    c.options.softcap = kPastF32;
  });
  add("alibi_slopes_past_f32", kAll, "options.alibi_slopes", [](Call& c) {
    to_f32(c);
    c.options.alibi_slopes = {0.5, 0.25, kPastF32, 0.1};
  });
  add("key_lengths_size", kAll, "options.key_lengths",
      [](Call& c) { c.options.key_lengths = {Tk}; });
  add("key_lengths_above_tk", kAll, "options.key_lengths[1]", [](Call& c) {
    c.options.key_lengths = {Tk, Tk + 1};
  });
  add("key_lengths_negative", kAll, "options.key_lengths[0]", [](Call& c) {
    c.options.key_lengths = {-1, 2};
  });
  add("query_lengths_size", kAll, "options.query_lengths", [](Call& c) {
    c.options.query_lengths = {1, 2, 3};
  });
  add("query_lengths_above_tq", kAll, "options.query_lengths[0]", [](Call& c) {
    c.options.query_lengths = {Tq + 1, 1};
  });
  add("alibi_slopes_size", kAll, "options.alibi_slopes", [](Call& c) {
    c.options.alibi_slopes = {0.5, 0.25, 0.125};
  });
  add("alibi_slopes_nan", kAll, "options.alibi_slopes", [](Call& c) {
    c.options.alibi_slopes = {0.5, std::nan(""), 0.125, 0.1};
  });
  // Masks and biases that do not broadcast to [B, Hq, Tq, Tk].
  add("mask_wrong_tq", kAll, "options.mask", [](Call& c) {
    c.options.mask = Tensor::full({Tq + 1, Tk}, 1.0, DType::boolean);
  });
  add("mask_hk_heads", kAll, "options.mask", [](Call& c) {
    c.options.mask = Tensor::full({B, Hk, Tq, Tk}, 1.0, DType::boolean);
  });
  add("mask_rank5", kAll, "options.mask", [](Call& c) {
    c.options.mask = Tensor::full({1, B, Hq, Tq, Tk}, 1.0, DType::boolean);
  });
  add("bias_transposed", kAll, "options.bias", [=](Call& c) mutable {
    c.options.bias = randn({Tk, Tq});
  });
  add("bias_wrong_batch", kAll, "options.bias", [=](Call& c) mutable {
    c.options.bias = randn({B + 1, 1, 1, Tk});
  });
  add("bias_rank5", kAll, "options.bias", [=](Call& c) mutable {
    c.options.bias = randn({1, 1, 1, 1, Tk});
  });
  // Outputs of the forward's writing overload.
  add("out_shape", kForwardInto, "out", [](Call& c) {
    c.out = Tensor::full({B, Tq, Hq, Dv + 1}, kSentinel, DType::f64);
  });
  add("out_dtype", kForwardInto, "out", [](Call& c) {
    c.out = Tensor::full({B, Tq, Hq, Dv}, kSentinel, DType::f32);
  });
  add("out_undefined", kForwardInto, "out", [](Call& c) { c.out = Tensor(); });
  add("lse_shape", kForwardInto, "lse", [](Call& c) {
    c.lse = Tensor::full({B, Tq, Hq}, kSentinel, DType::f64);
  });
  add("lse_dtype_f32_for_f64", kForwardInto, "lse", [](Call& c) {
    c.lse = Tensor::full({B, Hq, Tq}, kSentinel, DType::f32);
  });
  add("out_overlaps_q", kForwardInto, "out", [](Call& c) { c.out = c.q.slice(3, 0, Dv); });
  add("out_overlaps_bias", kForwardInto, "out", [](Call& c) {
    Tensor storage = Tensor::full({B * Tq * Hq * Dv}, kSentinel, DType::f64);
    c.out = storage.view({B, Tq, Hq, Dv});
    c.options.bias = storage.slice(0, 0, Tk).view({1, 1, 1, Tk});
  });
  add("lse_overlaps_out", kForwardInto, "lse", [](Call& c) {
    Tensor storage = Tensor::full({B * Tq * Hq * Dv + 8}, kSentinel, DType::f64);
    c.out = storage.slice(0, 0, B * Tq * Hq * Dv).view({B, Tq, Hq, Dv});
    c.lse = storage.slice(0, 8, 8 + B * Hq * Tq).view({B, Hq, Tq});
  });
  // An output whose own elements share memory: the writes would land on each other.
  add("out_repeats_its_elements", kForwardInto, "out", [](Call& c) {
    c.out = Tensor::full({B, 1, Hq, Dv}, kSentinel, DType::f64).expand({B, Tq, Hq, Dv});
  });
  add("lse_strides_meet", kForwardInto, "lse", [](Call& c) {
    // Strides that do not nest and do meet: (b, h, i) and (b, h + 1, i - 2) share an element.
    static const Tensor storage = Tensor::full({64}, kSentinel, DType::f64);  // outlives c.lse
    c.lse = Tensor::from_blob(storage.data(), {B, Hq, Tq}, {32, 2, 1}, DType::f64);
  });
  // Inputs only the backward reads.
  add("dout_shape", kBackward | kBackwardInto, "dout", [=](Call& c) mutable {
    c.dout = randn({B, Tq, Hq, Dv + 1});
  });
  add("dout_dtype", kBackward | kBackwardInto, "dout",
      [](Call& c) { c.dout = c.dout.to(DType::f32); });
  add("backward_out_shape", kBackward | kBackwardInto, "out", [=](Call& c) mutable {
    c.fwd_out = randn({B, Tq + 1, Hq, Dv});
  });
  add("backward_lse_dtype", kBackward | kBackwardInto, "lse",
      [](Call& c) { c.fwd_lse = c.fwd_lse.to(DType::f32); });
  add("backward_lse_undefined", kBackward | kBackwardInto, "lse",
      [](Call& c) { c.fwd_lse = Tensor(); });
  // Outputs of the backward's writing overload.
  add("dq_shape", kBackwardInto, "grads.dq", [](Call& c) {
    c.grads.dq = Tensor::full({B, Tq, Hq, D + 1}, kSentinel, DType::f64);
  });
  add("dk_dtype", kBackwardInto, "grads.dk", [](Call& c) {
    c.grads.dk = Tensor::full({B, Tk, Hk, D}, kSentinel, DType::f32);
  });
  add("dv_undefined", kBackwardInto, "grads.dv", [](Call& c) { c.grads.dv = Tensor(); });
  add("dbias_full_shape_for_broadcast_bias", kBackwardInto, "grads.dbias", [](Call& c) {
    c.grads.dbias = Tensor::full({B, Hq, Tq, Tk}, kSentinel, DType::f64);
  });
  add("dbias_undefined_with_bias", kBackwardInto, "grads.dbias",
      [](Call& c) { c.grads.dbias = Tensor(); });
  add("dq_overlaps_q", kBackwardInto, "grads.dq", [](Call& c) { c.grads.dq = c.q; });
  add("dv_overlaps_dout", kBackwardInto, "grads.dv", [](Call& c) {
    c.grads.dv = c.dout.slice(1, 0, Tk / Hk).view({B, Tk, Hk, Dv});
  });
  add("dk_overlaps_lse", kBackwardInto, "grads.dk", [](Call& c) {
    Tensor storage = Tensor::full({B * Tk * Hk * D + B * Hq * Tq}, kSentinel, DType::f64);
    c.grads.dk = storage.slice(0, 0, B * Tk * Hk * D).view({B, Tk, Hk, D});
    c.fwd_lse =
        storage.slice(0, B * Tk * Hk * D - 1, B * Tk * Hk * D - 1 + B * Hq * Tq).view({B, Hq, Tq});
  });
  add("dv_repeats_its_elements", kBackwardInto, "grads.dv", [](Call& c) {
    c.grads.dv = Tensor::full({B, Tk, 1, Dv}, kSentinel, DType::f64).expand({B, Tk, Hk, Dv});
  });
  add("dk_overlaps_dq", kBackwardInto, "grads", [](Call& c) {
    Tensor storage = Tensor::full({B * Tq * Hq * D + 4}, kSentinel, DType::f64);
    c.grads.dq = storage.slice(0, 0, B * Tq * Hq * D).view({B, Tq, Hq, D});
    c.grads.dk = storage.slice(0, 4, 4 + B * Tk * Hk * D).view({B, Tk, Hk, D});
  });
  return cases;
}

// Every value the entry points could write, read back as numbers (inputs included, since an
// output may alias one).
std::vector<std::vector<double>> snapshot(const Call& c) {
  std::vector<std::vector<double>> all;
  for (const Tensor* t :
       {&c.q, &c.k, &c.v, &c.options.mask, &c.options.bias, &c.out, &c.lse, &c.dout, &c.fwd_out,
        &c.fwd_lse, &c.grads.dq, &c.grads.dk, &c.grads.dv, &c.grads.dbias}) {
    all.push_back(t->defined() ? t->to_vector() : std::vector<double>{});
  }
  return all;
}

void expect_error(const std::function<void()>& call, const std::string& argument) {
  try {
    call();
    ADD_FAILURE() << "no qkv::Error thrown; expected one about " << argument;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.argument(), argument) << message;
    EXPECT_EQ(message.rfind(argument + ": ", 0), 0u) << message;
    EXPECT_NE(message.find("expected "), std::string::npos) << message;
    EXPECT_NE(message.find(", got "), std::string::npos) << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-qkv exception: " << e.what();
  }
}

class BadInput : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(BadInput, ThrowsNamingTheArgumentAndWritesNothing) {
  const ErrorCase& e = GetParam();
  const struct {
    Entry entry;
    const char* name;
  } entries[] = {{kForward, "attention_forward"},
                 {kForwardInto, "attention_forward(into out, lse)"},
                 {kBackward, "attention_backward"},
                 {kBackwardInto, "attention_backward(into grads)"},
                 {kWeights, "attention_weights"}};
  int checked = 0;
  for (const auto& [entry, name] : entries) {
    if ((e.entries & entry) == 0) continue;
    ++checked;
    Call c = valid_call();
    e.mutate(c);
    SCOPED_TRACE(std::string(name) + " q=" + (c.q.defined() ? c.q.describe() : "undefined") +
                 " k=" + c.k.describe() + " v=" + c.v.describe() + " " + describe(c.options));
    const std::vector<std::vector<double>> before = snapshot(c);
    expect_error(
        [&] {
          switch (entry) {
            case kForward:
              attention_forward(c.q, c.k, c.v, c.options);
              break;
            case kForwardInto:
              attention_forward(c.q, c.k, c.v, c.options, c.out, c.lse);
              break;
            case kBackward:
              attention_backward(c.dout, c.q, c.k, c.v, c.fwd_out, c.fwd_lse, c.options);
              break;
            case kBackwardInto:
              attention_backward(c.dout, c.q, c.k, c.v, c.fwd_out, c.fwd_lse, c.options, c.grads);
              break;
            default:
              attention_weights(c.q, c.k, c.options);
              break;
          }
        },
        e.argument);
    EXPECT_EQ(snapshot(c), before) << "an output or input was written before the error";
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, BadInput, ::testing::ValuesIn(error_cases()),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                           return info.param.name;
                         });

// The valid base call succeeds at every entry point and overwrites the sentinels, so the errors
// above come from the one thing each case changed.
TEST(BadInputBase, ValidCallSucceedsEverywhere) {
  Call c = valid_call();
  SCOPED_TRACE(describe(c.options));
  EXPECT_NO_THROW(attention_forward(c.q, c.k, c.v, c.options));
  EXPECT_NO_THROW(attention_weights(c.q, c.k, c.options));
  EXPECT_NO_THROW(attention_backward(c.dout, c.q, c.k, c.v, c.fwd_out, c.fwd_lse, c.options));
  attention_forward(c.q, c.k, c.v, c.options, c.out, c.lse);
  attention_backward(c.dout, c.q, c.k, c.v, c.fwd_out, c.fwd_lse, c.options, c.grads);
  for (const Tensor* t : {&c.out, &c.lse, &c.grads.dq, &c.grads.dk, &c.grads.dv, &c.grads.dbias}) {
    for (const double x : t->to_vector()) EXPECT_NE(x, kSentinel);
  }
  EXPECT_EQ(c.out.to_vector(), c.fwd_out.to_vector());
}

// The bound on scale, softcap and slopes is f32's, for f32 inputs only: f32 takes its largest
// finite value, f64 inputs take numbers past it (the cases above refuse them in f32).
TEST(BadInputBase, NumbersPastF32AreValidForF64Inputs) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    Call c = valid_call();
    if (dtype == DType::f32) to_f32(c);
    const double big =
        dtype == DType::f32 ? static_cast<double>(std::numeric_limits<float>::max()) : kPastF32;
    c.options.scale = big;
    c.options.softcap = big;
    c.options.alibi_slopes = {0.5, 0.25, big, 0.1};
    SCOPED_TRACE(describe(c.options) + " " + c.q.describe());
    EXPECT_NO_THROW(attention_forward(c.q, c.k, c.v, c.options));
    EXPECT_NO_THROW(attention_weights(c.q, c.k, c.options));
    EXPECT_NO_THROW(attention_backward(c.dout, c.q, c.k, c.v, c.fwd_out, c.fwd_lse, c.options));
  }
}

}  // namespace
}  // namespace qkv::testing
