// score_dots (kernels/cpu/score_dot-inl.h), the decode scores of a run of keys, against score_dot
// key by key on every SIMD target this CPU runs: bitwise, since the backward recomputes with one
// what the forward computed with the other. Runs of 1 to 16 keys, dims with and without a tail of
// every vector width, keys stored as f32, bf16 and f16, values from 1e-30 to 1e30 and signed zeros;
// and both against a long double dot product.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/test_score_dots.cpp"
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/score_dot-inl.h"
#include "kernels/cpu/stored_as.hpp"
#include "kernels/half_kv.hpp"
#include "qkv/half.hpp"
#include "qkv/philox.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::kernels::cpu::HWY_NAMESPACE {

// joint [n] <- score_dots over the n keys of k (rows ldk apart), single [n] <- score_dot of each.
template <class T, class E>
void ScoresBothWays(const T* q, const E* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
                    T* joint, T* single) {
  score_dots(q, k, ldk, n, dim, joint);
  for (std::int64_t c = 0; c < n; ++c) single[c] = score_dot(q, k + c * ldk, dim);
}

void ScoresF32(const float* q, const float* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
               float* joint, float* single) {
  ScoresBothWays(q, k, ldk, n, dim, joint, single);
}
void ScoresBf16(const float* q, const Bf16* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
                float* joint, float* single) {
  ScoresBothWays(q, k, ldk, n, dim, joint, single);
}
void ScoresF16(const float* q, const F16* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
               float* joint, float* single) {
  ScoresBothWays(q, k, ldk, n, dim, joint, single);
}
void ScoresF64(const double* q, const double* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
               double* joint, double* single) {
  ScoresBothWays(q, k, ldk, n, dim, joint, single);
}

}  // namespace qkv::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::kernels::cpu {
HWY_EXPORT(ScoresF32);
HWY_EXPORT(ScoresBf16);
HWY_EXPORT(ScoresF16);
HWY_EXPORT(ScoresF64);

namespace {

template <class T>
void both_ways(const T* q, const T* k, std::int64_t ldk, std::int64_t n, std::int64_t dim, T* joint,
               T* single) {
  if constexpr (sizeof(T) == 4) {
    HWY_DYNAMIC_DISPATCH(ScoresF32)(q, k, ldk, n, dim, joint, single);
  } else {
    HWY_DYNAMIC_DISPATCH(ScoresF64)(q, k, ldk, n, dim, joint, single);
  }
}
void both_ways(const float* q, const Bf16* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
               float* joint, float* single) {
  HWY_DYNAMIC_DISPATCH(ScoresBf16)(q, k, ldk, n, dim, joint, single);
}
void both_ways(const float* q, const F16* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
               float* joint, float* single) {
  HWY_DYNAMIC_DISPATCH(ScoresF16)(q, k, ldk, n, dim, joint, single);
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Every run length and dim on every target; `magnitude` scales q (keys stay within f16's range).
template <class T, class E>
void check(double magnitude) {
  constexpr std::int64_t kRun = HWY_NAMESPACE::kScoreRun;
  for (const std::int64_t dim : {1, 3, 8, 15, 16, 17, 31, 32, 33, 48, 64, 65, 100, 128, 256}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const std::int64_t ldk = dim + 3;  // keys' rows apart, as in a [B, T, H, D] cache
    Generator g(static_cast<std::uint64_t>(dim) * 977 + sizeof(E));
    std::vector<T> q(static_cast<std::size_t>(dim));
    std::vector<E> k(static_cast<std::size_t>(kRun * ldk), stored<E>(0.0));
    for (T& x : q) x = static_cast<T>(magnitude * g.next_normal());
    for (std::int64_t c = 0; c < kRun; ++c) {
      for (std::int64_t x = 0; x < dim; ++x) k[c * ldk + x] = stored<E>(4 * g.next_normal());
    }
    q[0] = T(-0.0);  // a signed zero in the sum
    for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
      SCOPED_TRACE(hwy::TargetName(target));
      hwy::SetSupportedTargetsForTest(target);
      for (std::int64_t n = 1; n <= kRun; ++n) {
        std::vector<T> joint(kRun + 1, T(7)), single(kRun, T(-7));
        both_ways(q.data(), k.data(), ldk, n, dim, joint.data(), single.data());
        EXPECT_EQ(joint[static_cast<std::size_t>(n)], T(7)) << "n " << n << ": wrote past s[n)";
        for (std::int64_t c = 0; c < n; ++c) {
          const auto at = static_cast<std::size_t>(c);
          EXPECT_TRUE(same_bits(joint[at], single[at]))
              << "n " << n << " key " << c << ": " << joint[at] << " against " << single[at];
          long double exact = 0, size = 0;
          for (std::int64_t x = 0; x < dim; ++x) {
            const long double term = static_cast<long double>(q[static_cast<std::size_t>(x)]) *
                                     as_double(k[static_cast<std::size_t>(c * ldk + x)]);
            exact += term;
            size += std::fabs(term);
          }
          const double eps = sizeof(T) == 4 ? 6e-8 : 1.2e-16;
          EXPECT_LE(std::fabs(static_cast<double>(joint[at] - exact)),
                    static_cast<double>(size) * eps * static_cast<double>(dim + 4))
              << "n " << n << " key " << c;
        }
      }
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

TEST(ScoreDots, EqualScoreDotBitwiseOnEveryTarget) {
  for (const double magnitude : {1e-30, 1.0, 1e30}) {
    SCOPED_TRACE(::testing::Message() << "magnitude " << magnitude);
    check<float, float>(magnitude);
    check<float, Bf16>(magnitude);
    check<float, F16>(magnitude);
    check<double, double>(magnitude);
  }
}

}  // namespace
}  // namespace qkv::kernels::cpu
#endif  // HWY_ONCE
