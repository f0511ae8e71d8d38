// The bf16 peak's chains compute what they claim: the known sum of their products, and the FLOP
// count their instructions do, on every path this CPU runs (the others are printed as skipped).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "qkv/system.hpp"
#include "qkv_bench/bf16_peak.hpp"
#include "qkv_bench/measure.hpp"

namespace {

bool runs(const std::string& path) {
  const std::vector<std::string> paths = qkv::matrix_paths();
  return std::find(paths.begin(), paths.end(), path) != paths.end();
}

// Every product is 2^-10 x 2^-10 = 2^-20, and sums of them stay exact in f32 at these counts.
TEST(Bf16Peak, VdpbfChainsSumTheirProducts) {
  if (!runs("avx512-bf16")) {
    std::printf("skipped: this CPU has no avx512-bf16\n");
    return;
  }
  float sink = 0;
  const double flops = qkv::bench::vdpbf16ps_chains(1000, &sink);
  // 12 chains x 16 lanes, each 1000 steps of two products.
  EXPECT_EQ(sink, 12 * 16 * 1000 * 2 * 0x1p-20f);
  EXPECT_EQ(flops, 64.0 * 1000 * qkv::bench::kBf16Chains);
}

TEST(Bf16Peak, AmxChainsSumTheirProducts) {
  if (!runs("amx-bf16")) {
    std::printf("skipped: this CPU has no amx-bf16\n");
    return;
  }
  float sink = 0;
  const double flops = qkv::bench::tdpbf16ps_chains(100, &sink);
  // One element of each of the four tiles, each 100 steps of 32 products.
  EXPECT_EQ(sink, 4 * 100 * 32 * 0x1p-20f);
  EXPECT_EQ(flops, 4.0 * 16 * 16 * 32 * 2 * 100);
}

TEST(Bf16Peak, RunsOnTheKernelsPath) {
  const std::string path = qkv::bench::bf16_peak_path();
  EXPECT_EQ(path, qkv::matrix_paths().front());
  EXPECT_GT(qkv::bench::bf16_burst_gflops(1, 12), 0.0);
}

}  // namespace
