// Bad arguments throw qkv::Error naming the argument, the expected and the actual value.
#include <string>
#include <vector>

#include "autograd/check.hpp"

namespace qkv::testing {
namespace {

namespace ag = autograd;

// Runs fn, which must throw qkv::Error about `argument` with `text` in its message.
template <class Fn>
void expect_error(Fn&& fn, const std::string& argument, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one about " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Errors, NameArgumentExpectedAndActual) {
  const Var a(random({2, 3}, 1)), b4(random({4}, 2));
  expect_error([&] { ag::add(a, b4); }, "b",
               "b: expected shape broadcastable with [2, 3], got [4]");
  expect_error(
      [&] {
        ag::mul(a, Var(random({2, 3}, 3).to(DType::f32)));
      },
      "b", "expected dtype f64, got f32");
  expect_error([&] { Var(Tensor::zeros({2}, DType::boolean)); }, "value",
               "f32, f64, bf16 or f16, got bool");
  expect_error(
      [&] {
        ag::matmul(a, Var(random({2, 5}, 4)));
      },
      "b", "expected 3 rows (the columns of a [2, 3]), got [2, 5]");
  expect_error([&] { ag::matmul(a, b4); }, "b", "at least 2 dimensions");
  expect_error(
      [&] {
        ag::matmul(Var(random({2, 2, 3}, 5)), Var(random({3, 3, 1}, 6)));
      },
      "b", "broadcastable");
  expect_error([&] { ag::sum(a, 2); }, "dim", "a dimension in [-2, 2), got 2");
  expect_error([&] { ag::softmax(a, -3); }, "dim", "got -3");
  expect_error(
      [&] {
        ag::split_heads(Var(random({2, 3, 8}, 7)), 3);
      },
      "heads", "a positive divisor of 8");
  expect_error([&] { ag::merge_heads(a); }, "x", "4 dimensions");
  expect_error(
      [&] {
        ag::concat({a, Var(random({2, 4}, 8))}, 0);
      },
      "xs[1]", "expected shape [2, 3] (as xs[0] but along dim 0), got [2, 4]");
  expect_error([&] { ag::concat({}, 0); }, "xs", "at least one");
  expect_error([&] { ag::slice(a, 0, 0, 1, 0); }, "step", "positive");
  expect_error([&] { ag::masked_fill(a, Tensor::zeros({2, 3}), 0.0); }, "mask", "boolean");
  expect_error(
      [&] {
        ag::masked_fill(a, Tensor::zeros({2, 1, 3}, DType::boolean), 0.0);
      },
      "mask", "broadcastable to [2, 3], got [2, 1, 3]");
  expect_error([&] { ag::layer_norm(a, {2}); }, "normalized_shape", "trailing sizes");
  expect_error([&] { ag::layer_norm(a, {3}, Var(random({4}, 9))); }, "weight",
               "expected shape [3], got [4]");
  expect_error([&] { ag::embedding(a, {0, 2}, {2}); }, "indices[1]", "in [0, 2), got 2");
  expect_error([&] { ag::embedding(a, {0, 1}, {3}); }, "indices", "3 indices");
  expect_error([&] { ag::dropout(a, 1.0, 0); }, "p", "[0, 1)");
  expect_error([&] { ag::cross_entropy(a, {0, 3}); }, "targets[1]", "a class in [0, 3)");
  expect_error([&] { ag::cross_entropy(a, {0}); }, "targets", "2 targets");
  ag::CrossEntropyOptions smoothing;
  smoothing.label_smoothing = 1.5;
  expect_error([&] { ag::cross_entropy(a, {0, 1}, smoothing); }, "label_smoothing", "[0, 1]");
  expect_error([&] { ag::additive_scores(a, a, a, a, a); }, "v", "1 dimension");
  expect_error([&] { ag::dot_scores(a, Var(random({2, 4}, 10))); }, "k", "last size 3");
  expect_error([&] { Var().value(); }, "Var", "undefined");
}

}  // namespace
}  // namespace qkv::testing
