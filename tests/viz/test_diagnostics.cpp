// The per-head diagnostics on planted heads, whose entropies, distances and verdicts are known in
// closed form: a uniform head, a diagonal head (sharp and right against the identity
// alignment), a shifted head (sharp and wrong), a diffuse head, a sharp head with no alignment;
// the keys a row may attend (causal, key lengths) and padding rows; and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/viz/diagnostics.hpp"

namespace qkv::viz {
namespace {

constexpr std::int64_t kT = 12;

// [H = 5, T, T] f64 weights: head 0 uniform, 1 diagonal (0.97 on i, the rest spread), 2 the
// diagonal shifted by 3, 3 half on i and half spread, 4 the diagonal again.
Tensor planted() {
  std::vector<double> w(5 * kT * kT, 0.0);
  const auto at = [&](std::int64_t h, std::int64_t i, std::int64_t j) -> double& {
    return w[(h * kT + i) * kT + j];
  };
  for (std::int64_t i = 0; i < kT; ++i) {
    for (std::int64_t j = 0; j < kT; ++j) {
      at(0, i, j) = 1.0 / kT;
      at(1, i, j) = at(4, i, j) = j == i ? 0.97 : 0.03 / (kT - 1);
      at(2, i, j) = j == (i + 3) % kT ? 0.97 : 0.03 / (kT - 1);
      at(3, i, j) = (j == i ? 0.5 : 0.0) + 0.5 / kT;
    }
  }
  return Tensor::from_values({5, kT, kT}, w, DType::f64);
}

std::vector<std::vector<std::vector<std::int64_t>>> identity_alignment() {
  std::vector<std::vector<std::int64_t>> rows;
  for (std::int64_t i = 0; i < kT; ++i) rows.push_back({i});
  return {rows};
}

TEST(Diagnostics, PlantedHeadsGetTheirVerdicts) {
  auto alignment = identity_alignment();
  alignment[0][5].clear();  // one row with no known alignment
  const std::vector<HeadDiagnostics> d = diagnose(planted(), alignment);
  ASSERT_EQ(d.size(), 5u);
  const double log_t = std::log(static_cast<double>(kT));
  // Uniform: entropy log T, normalized 1, max weight 1/T, distance the mean |i - j|.
  EXPECT_NEAR(d[0].entropy, log_t, 1e-12);
  EXPECT_NEAR(d[0].uniform_entropy, log_t, 1e-12);
  EXPECT_NEAR(d[0].normalized_entropy, 1.0, 1e-12);
  EXPECT_NEAR(d[0].max_weight, 1.0 / kT, 1e-12);
  double mean_gap = 0;
  for (std::int64_t i = 0; i < kT; ++i) {
    for (std::int64_t j = 0; j < kT; ++j) mean_gap += std::abs(static_cast<double>(i - j));
  }
  mean_gap /= kT * kT;
  EXPECT_NEAR(d[0].mean_distance, mean_gap, 1e-12);
  EXPECT_EQ(d[0].verdict, Verdict::uniform);
  // Diagonal: -0.97 ln 0.97 - 0.03 ln(0.03 / 11), argmax always aligned.
  const double sharp_entropy = -0.97 * std::log(0.97) - 0.03 * std::log(0.03 / (kT - 1));
  EXPECT_NEAR(d[1].entropy, sharp_entropy, 1e-12);
  EXPECT_NEAR(d[1].normalized_entropy, sharp_entropy / log_t, 1e-12);
  EXPECT_NEAR(d[1].max_weight, 0.97, 1e-12);
  EXPECT_EQ(d[1].aligned_rows, kT - 1);
  ASSERT_TRUE(d[1].alignment_accuracy.has_value());
  EXPECT_DOUBLE_EQ(*d[1].alignment_accuracy, 1.0);
  EXPECT_EQ(d[1].verdict, Verdict::sharp_right);
  // Shifted: as sharp, never aligned, and it looks 3 (or 9, wrapping) positions away.
  EXPECT_NEAR(d[2].entropy, sharp_entropy, 1e-12);
  EXPECT_DOUBLE_EQ(*d[2].alignment_accuracy, 0.0);
  EXPECT_EQ(d[2].verdict, Verdict::sharp_wrong);
  EXPECT_GT(d[2].mean_distance, 3.0);
  EXPECT_LT(d[1].mean_distance, 0.2 * d[2].mean_distance);
  // Half on the diagonal: between the thresholds.
  EXPECT_GT(d[3].normalized_entropy, 0.5);
  EXPECT_LT(d[3].normalized_entropy, 0.9);
  EXPECT_EQ(d[3].verdict, Verdict::diffuse);
  EXPECT_EQ(d[0].rows, kT);
  // Without an alignment, a sharp head is only sharp.
  const std::vector<HeadDiagnostics> plain = diagnose(planted());
  EXPECT_EQ(plain[4].verdict, Verdict::sharp);
  EXPECT_FALSE(plain[4].alignment_accuracy.has_value());
  EXPECT_NE(verdict_line(d[2]).find("sharp and wrong"), std::string::npos) << verdict_line(d[2]);
  EXPECT_NE(verdict_line(d[1]).find("100.0% of 11 rows"), std::string::npos) << verdict_line(d[1]);
}

// Under a causal mask row i may attend i + 1 keys: a row spread evenly over them is uniform, and
// what lies past them (here garbage, even NaN) is never read. Padding rows and a batch with no
// keys are left out; a [B, H, Tq, Tk] tensor sums its batches per head.
TEST(Diagnostics, OnlyTheKeysARowMayAttendCount) {
  std::vector<double> w(2 * 1 * kT * kT, std::nan(""));
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t i = 0; i < kT; ++i) {
      for (std::int64_t j = 0; j <= i; ++j) w[(b * kT + i) * kT + j] = 1.0 / (i + 1);
    }
  }
  const Tensor weights = Tensor::from_values({2, 1, kT, kT}, w, DType::f64).to(DType::f32);
  DiagnosticsOptions o;
  o.causal = true;
  o.query_lengths = {kT, 4};
  o.key_lengths = {kT, kT};
  const HeadDiagnostics d = diagnose(weights, {}, o)[0];
  EXPECT_EQ(d.rows, kT + 4);
  EXPECT_NEAR(d.normalized_entropy, static_cast<double>(kT + 4 - 2) / (kT + 4), 1e-6);
  EXPECT_NEAR(d.entropy, d.uniform_entropy, 1e-6);
  o.key_lengths = {kT, 0};  // batch 1 has no key: none of its rows counts
  EXPECT_EQ(diagnose(weights, {}, o)[0].rows, kT);
  o.query_lengths = {0, 0};
  const HeadDiagnostics none = diagnose(weights, {}, o)[0];
  EXPECT_EQ(none.verdict, Verdict::empty);
  EXPECT_NE(verdict_line(none).find("empty"), std::string::npos);
  // Without the causal option the NaN past each row's keys is read, and refused.
  EXPECT_THROW(diagnose(weights), Error);
}

void expect_error(const std::string& argument, const auto& call) {
  try {
    call();
    ADD_FAILURE() << "no error for " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

TEST(Diagnostics, BadInputNamesItsArgument) {
  const Tensor w = planted();
  expect_error("weights", [] { diagnose(Tensor()); });
  expect_error("weights", [] { diagnose(Tensor::zeros({3, 4}, DType::f32)); });
  expect_error("weights", [] { diagnose(Tensor::zeros({1, 3, 4}, DType::boolean)); });
  expect_error("weights", [] { diagnose(Tensor::full({1, 2, 2}, -0.5, DType::f32)); });
  expect_error("alignments", [&] { diagnose(w, {{}, {}}); });
  expect_error("alignments[0]", [&] { diagnose(w, {{{kT}}}); });
  expect_error("alignments[0]",
               [&] { diagnose(w, {std::vector<std::vector<std::int64_t>>(kT + 1)}); });
  DiagnosticsOptions o;
  o.key_lengths = {kT + 1};
  expect_error("options.key_lengths", [&] { diagnose(w, {}, o); });
  o = {};
  o.query_lengths = {1, 2};
  expect_error("options.query_lengths", [&] { diagnose(w, {}, o); });
  o = {};
  o.sharp = 0.95;
  expect_error("options.sharp, options.uniform", [&] { diagnose(w, {}, o); });
  o = {};
  o.right = 2;
  expect_error("options.right", [&] { diagnose(w, {}, o); });
}

}  // namespace
}  // namespace qkv::viz
