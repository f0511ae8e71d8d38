// The decode kernel's row-shared pieces (kernels/cpu/score_dot-inl.h, tile-inl.h), which load each
// key's K or V row once for all the query rows of a k/v head: score_dot_rows and score_dots_rows
// against score_dot row by row and key by key, axpy_rows and values_rows against axpy key by key
// and row by row, bitwise on every SIMD target this CPU runs (the backward recomputes the scores
// with score_dot, and a short cache gives one result in either layout), keys and values stored as
// f32, bf16 and f16. Then the decode paths they serve, against the f64 reference: a heads-first
// cache long enough for splits past kDecodeSplit, and a GQA group whose heads' tiles differ.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/test_decode_rows.cpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/score_dot-inl.h"
#include "kernels/cpu/stored_as.hpp"
#include "kernels/cpu/tile-inl.h"
#include "kernels/half_kv.hpp"
#include "qkv/half.hpp"
#include "qkv/qkv.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

// q [rows, dim] (rows dim apart), k [n, ldk]: joint [rows, n] from score_dots_rows (and, key by
// key, score_dot_rows into each_key), single [rows, n] from score_dot.
template <class T, class E>
void ScoresBothWays(const T* q, std::int64_t rows, const E* k, std::int64_t ldk, std::int64_t n,
                    std::int64_t dim, T* joint, T* each_key, T* single) {
  const T* q_rows[kDotRows];
  T* s[kDotRows];
  for (std::int64_t r = 0; r < rows; ++r) {
    q_rows[r] = q + r * dim;
    s[r] = joint + r * n;
  }
  score_dots_rows(q_rows, rows, k, ldk, n, dim, s);
  T out[kDotRows];
  for (std::int64_t c = 0; c < n; ++c) {
    score_dot_rows(q_rows, rows, k + c * ldk, dim, out);
    for (std::int64_t r = 0; r < rows; ++r) each_key[r * n + c] = out[r];
    for (std::int64_t r = 0; r < rows; ++r)
      single[r * n + c] = score_dot(q + r * dim, k + c * ldk, dim);
  }
}

// P [rows, keys], V [keys, ldv]: acc_rows [rows, count] += P V by values_rows, acc_each by
// axpy_rows key by key, acc_single by axpy per key and row.
template <class T, class E>
void ValuesBothWays(const T* P, std::int64_t rows, const E* v, std::int64_t ldv, std::int64_t keys,
                    std::int64_t count, T* acc_rows, T* acc_each, T* acc_single) {
  const T* a[kDotRows];
  T* y[kDotRows];
  T* y_each[kDotRows];
  for (std::int64_t r = 0; r < rows; ++r) {
    a[r] = P + r * keys;
    y[r] = acc_rows + r * count;
    y_each[r] = acc_each + r * count;
  }
  values_rows(a, v, ldv, keys, y, rows, count);
  T weights[kDotRows];
  for (std::int64_t c = 0; c < keys; ++c) {
    for (std::int64_t r = 0; r < rows; ++r) weights[r] = P[r * keys + c];
    axpy_rows(weights, v + c * ldv, y_each, rows, count);
    for (std::int64_t r = 0; r < rows; ++r) {
      axpy(P[r * keys + c], v + c * ldv, acc_single + r * count, count);
    }
  }
}

#define QKV_ROWS_BOTH_WAYS(Name, T, E)                                                           \
  void Scores##Name(const T* q, std::int64_t rows, const E* k, std::int64_t ldk, std::int64_t n, \
                    std::int64_t dim, T* joint, T* each_key, T* single) {                        \
    ScoresBothWays(q, rows, k, ldk, n, dim, joint, each_key, single);                            \
  }                                                                                              \
  void Values##Name(const T* P, std::int64_t rows, const E* v, std::int64_t ldv,                 \
                    std::int64_t keys, std::int64_t count, T* acc_rows, T* acc_each,             \
                    T* acc_single) {                                                             \
    ValuesBothWays(P, rows, v, ldv, keys, count, acc_rows, acc_each, acc_single);                \
  }
QKV_ROWS_BOTH_WAYS(F32, float, float)
QKV_ROWS_BOTH_WAYS(Bf16, float, Bf16)
QKV_ROWS_BOTH_WAYS(F16, float, F16)
QKV_ROWS_BOTH_WAYS(F64, double, double)
#undef QKV_ROWS_BOTH_WAYS

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {
HWY_EXPORT(ScoresF32);
HWY_EXPORT(ScoresBf16);
HWY_EXPORT(ScoresF16);
HWY_EXPORT(ScoresF64);
HWY_EXPORT(ValuesF32);
HWY_EXPORT(ValuesBf16);
HWY_EXPORT(ValuesF16);
HWY_EXPORT(ValuesF64);

namespace {

template <class T, class E>
struct Dispatch;
#define QKV_DISPATCH(Name, T, E)                   \
  template <>                                      \
  struct Dispatch<T, E> {                          \
    template <class... Args>                       \
    static void scores(Args... args) {             \
      HWY_DYNAMIC_DISPATCH(Scores##Name)(args...); \
    }                                              \
    template <class... Args>                       \
    static void values(Args... args) {             \
      HWY_DYNAMIC_DISPATCH(Values##Name)(args...); \
    }                                              \
  };
QKV_DISPATCH(F32, float, float)
QKV_DISPATCH(Bf16, float, Bf16)
QKV_DISPATCH(F16, float, F16)
QKV_DISPATCH(F64, double, double)
#undef QKV_DISPATCH

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Every row count to kDotRows, runs of 1 to kScoreRun keys, dims with and without a tail of every
// vector width, on every target.
template <class T, class E>
void check_scores() {
  constexpr std::int64_t kRun = HWY_NAMESPACE::kScoreRun, kRows = HWY_NAMESPACE::kDotRows;
  for (const std::int64_t dim : {1, 7, 16, 17, 33, 64, 100, 128}) {
    const std::int64_t ldk = dim + 5;
    Generator g(static_cast<std::uint64_t>(dim) * 131 + sizeof(E));
    std::vector<T> q(static_cast<std::size_t>(kRows * dim));
    std::vector<E> k(static_cast<std::size_t>(kRun * ldk), stored<E>(0.0));
    for (T& x : q) x = static_cast<T>(g.next_normal());
    for (E& x : k) x = stored<E>(3 * g.next_normal());
    // Values past the finite normal draws, in keys every row count and run length reaches (a run
    // of n keys reads keys [0, n)): -0, a NaN, an infinity and the largest finite magnitudes E
    // holds, each where it enters one vector lane of the dot products.
    const double big = std::is_same_v<E, F16> ? 6e4 : 1e30;
    k[static_cast<std::size_t>(0 * ldk + dim / 2)] = stored<E>(-0.0);
    k[static_cast<std::size_t>(2 * ldk + dim - 1)] = stored<E>(big);
    k[static_cast<std::size_t>(3 * ldk + dim / 3)] = stored<E>(-big);
    k[static_cast<std::size_t>(5 * ldk + dim / 2)] =
        stored<E>(std::numeric_limits<double>::quiet_NaN());
    k[static_cast<std::size_t>(9 * ldk)] = stored<E>(std::numeric_limits<double>::infinity());
    for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      for (std::int64_t rows = 1; rows <= kRows; ++rows) {
        for (std::int64_t n = 1; n <= kRun; ++n) {
          const auto size = static_cast<std::size_t>(rows * n);
          std::vector<T> joint(size), each_key(size), single(size);
          Dispatch<T, E>::scores(q.data(), rows, k.data(), ldk, n, dim, joint.data(),
                                 each_key.data(), single.data());
          EXPECT_TRUE(same_bits(joint, single) && same_bits(each_key, single))
              << hwy::TargetName(target) << " dim " << dim << " rows " << rows << " keys " << n;
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

// Every row count to kDotRows, 1 to 64 keys (a tile), value widths with and without tails.
template <class T, class E>
void check_values() {
  constexpr std::int64_t kRows = HWY_NAMESPACE::kDotRows, kKeys = 64;
  for (const std::int64_t count : {1, 5, 16, 24, 48, 65, 128}) {
    const std::int64_t ldv = count + 3;
    Generator g(static_cast<std::uint64_t>(count) * 71 + sizeof(E));
    std::vector<T> P(static_cast<std::size_t>(kRows * kKeys)), acc(kRows * count);
    std::vector<E> v(static_cast<std::size_t>(kKeys * ldv), stored<E>(0.0));
    for (T& x : P) x = static_cast<T>(std::fabs(g.next_normal()));
    for (T& x : acc) x = static_cast<T>(g.next_normal());
    for (E& x : v) x = stored<E>(g.next_normal());
    // A NaN in key 2's row and an infinity in key 3's (in every key count but 1), and -0.
    v[static_cast<std::size_t>(2 * ldv + count / 2)] =
        stored<E>(std::numeric_limits<double>::quiet_NaN());
    v[static_cast<std::size_t>(3 * ldv)] = stored<E>(-std::numeric_limits<double>::infinity());
    v[static_cast<std::size_t>(ldv + count - 1)] = stored<E>(-0.0);
    for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      for (std::int64_t rows = 1; rows <= kRows; ++rows) {
        for (const std::int64_t keys : {1, 3, 4, 15, 64}) {
          std::vector<T> by_rows(acc), each(acc), single(acc);
          Dispatch<T, E>::values(P.data(), rows, v.data(), ldv, keys, count, by_rows.data(),
                                 each.data(), single.data());
          EXPECT_TRUE(same_bits(by_rows, single) && same_bits(each, single))
              << hwy::TargetName(target) << " count " << count << " rows " << rows << " keys "
              << keys;
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

TEST(DecodeRows, ScoresEqualScoreDotBitwiseOnEveryTarget) {
  check_scores<float, float>();
  check_scores<float, Bf16>();
  check_scores<float, F16>();
  check_scores<double, double>();
}

TEST(DecodeRows, ValuesEqualAxpyKeyByKeyBitwiseOnEveryTarget) {
  check_values<float, float>();
  check_values<float, Bf16>();
  check_values<float, F16>();
  check_values<double, double>();
}

double max_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) e = std::max(e, std::fabs(x[i] - y[i]));
  return e;
}

// [B, T, H, D] values stored heads first ([B, H, T, D] memory, permuted).
Tensor heads_first(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor h = Tensor::empty({s[0], s[2], s[1], s[3]}, t.dtype()).permute({0, 2, 1, 3});
  h.copy_from(t);
  return h;
}

// The fused decode of q, k, v (f32, k and v also heads first) against the f64 reference: out
// within twice the f32 reference's error (FlashAttention's rule), lse within 1e-5.
void expect_decode_within_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                               AttentionOptions options) {
  options.backend = Backend::reference;
  const AttentionOutput exact =
      attention_forward(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), options);
  const AttentionOutput low = attention_forward(q, k, v, options);
  const double slack = 2.0 * max_error(low.out, exact.out) + 1e-6;
  options.backend = Backend::cpu;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    for (const bool first : {false, true}) {
      SCOPED_TRACE(first ? "heads first" : "[B, T, H, D]");
      const AttentionOutput got =
          first ? attention_forward(q, heads_first(k), heads_first(v), options)
                : attention_forward(q, k, v, options);
      EXPECT_LE(max_error(got.out, exact.out), slack);
      EXPECT_LE(max_error(got.lse, exact.lse), 1e-5);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// One k/v head of a heads-first cache: 16 splits (flash_decode.cpp, split_keys) of 1280 keys,
// longer than kDecodeSplit, the last one short; GQA's 4 query rows share each key's rows.
TEST(DecodeRows, HeadsFirstCacheInLongSplitsMatchesTheReference) {
  Generator g(5);
  const Tensor q = Tensor::randn({1, 1, 4, 32}, g, DType::f32);
  const Tensor k = Tensor::randn({1, 20011, 1, 32}, g, DType::f32);
  const Tensor v = Tensor::randn({1, 20011, 1, 32}, g, DType::f32);
  expect_decode_within_rule(q, k, v, {});
}

// Query heads on one k/v head where head 1 drops a few keys: its tiles there are partial, the
// others' full, so the full heads' rows go through values_rows apart from head 1's. 16 heads of
// one and two queries (16 and 32 rows: the grouped products, values_rows kDotRows rows at a time)
// and 4 heads of one (dot products).
TEST(DecodeRows, GroupWhoseHeadsTilesDifferMatchesTheReference) {
  for (const auto& [Hq, tq] : {std::pair<std::int64_t, std::int64_t>{16, 1}, {16, 2}, {4, 1}}) {
    SCOPED_TRACE("Hq " + std::to_string(Hq) + " Tq " + std::to_string(tq));
    Generator g(static_cast<std::uint64_t>(9 + Hq + tq));
    const std::int64_t Tk = 3000;
    const Tensor q = Tensor::randn({1, tq, Hq, 48}, g, DType::f32);
    const Tensor k = Tensor::randn({1, Tk, 1, 48}, g, DType::f32);
    const Tensor v = Tensor::randn({1, Tk, 1, 40}, g, DType::f32);
    AttentionOptions options;
    options.mask = Tensor::full({1, Hq, 1, Tk}, 1.0, DType::boolean);
    for (std::int64_t j = 1000; j < 1100; j += 7) options.mask.set({0, 1, 0, j}, 0.0);
    expect_decode_within_rule(q, k, v, options);
  }
}

}  // namespace
}  // namespace qkv::kernels::cpu
#endif  // HWY_ONCE
