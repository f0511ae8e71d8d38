// Forward + backward at Tq = Tk = 32768, D = 64 in O(T * D) extra memory: the peak resident set
// grows by a small multiple of one [T, D] tensor, far below the 4 GiB a Tq x Tk score matrix
// would take. Its own executable, so that the process's peak RSS is this test's alone.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <qkv/qkv.hpp>

namespace {

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

TEST(LongSequence, ForwardAndBackwardAt32kStayWithinLinearMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's quarantine and shadow memory distort the resident set";
#endif
  constexpr std::int64_t kT = 32768;
  constexpr std::int64_t kD = 64;
  qkv::Generator generator(32768);
  const qkv::Tensor q = qkv::Tensor::randn({1, kT, 1, kD}, generator);
  const qkv::Tensor k = qkv::Tensor::randn({1, kT, 1, kD}, generator);
  const qkv::Tensor v = qkv::Tensor::randn({1, kT, 1, kD}, generator);
  const qkv::Tensor dout = qkv::Tensor::randn({1, kT, 1, kD}, generator);
  qkv::AttentionOptions options;
  options.causal = qkv::Causal::top_left;  // half the work; the memory bound is the same
  options.backend = qkv::Backend::cpu;
  const double tensor_bytes = static_cast<double>(kT * kD * sizeof(float));
  const double before = peak_rss_bytes();
  const qkv::AttentionOutput fwd = qkv::attention_forward(q, k, v, options);
  const qkv::AttentionGrads grads =
      qkv::attention_backward(dout, q, k, v, fwd.out, fwd.lse, options);
  const double growth = peak_rss_bytes() - before;
  std::printf("peak RSS grew by %.1f MiB = %.1f x one [T, D] f32 tensor (%.1f MiB)\n",
              growth / (1 << 20), growth / tensor_bytes, tensor_bytes / (1 << 20));
  // Outputs (out, lse, dq, dk, dv: 4 tensors) plus packed K, V, the dQ partials of at most 8
  // chunks and temporaries: well under 32 tensors. A T x T f32 matrix would be 512 tensors.
  EXPECT_LT(growth, 32 * tensor_bytes);
  // The first query sees only the first key: its output is v_0 exactly, and the last row's
  // gradients are finite.
  for (std::int64_t c = 0; c < kD; ++c)
    EXPECT_FLOAT_EQ(fwd.out.at({0, 0, 0, c}), v.at({0, 0, 0, c}));
  for (std::int64_t c = 0; c < kD; ++c) ASSERT_TRUE(std::isfinite(grads.dq.at({0, kT - 1, 0, c})));
}

}  // namespace
