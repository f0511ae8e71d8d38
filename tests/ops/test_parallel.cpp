// ops::for_range and ops::for_chunks (src/ops/parallel.hpp): every index is visited exactly once,
// in pieces whose bounds fall on multiples of `align` (for_range) or of the chunk (for_chunks),
// on any thread count; a range no longer than `serial` runs whole on the calling thread.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <qkv/qkv.hpp>
#include <vector>

#include "ops/parallel.hpp"

namespace qkv::testing {
namespace {

TEST(ForRange, VisitsEveryIndexOnceInAlignedPiecesOnAnyThreadCount) {
  const int saved = num_threads();
  for (const int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    for (const std::int64_t n : {1, 15, 16, 17, 1000, 4096, 57344, 100003}) {
      for (const std::int64_t align : {1, 16}) {
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
        std::atomic<int> pieces{0}, misaligned{0};
        ops::for_range(n, 64, align, [&](std::int64_t begin, std::int64_t end) {
          ++pieces;
          if (begin % align != 0) ++misaligned;
          for (std::int64_t i = begin; i < end; ++i) ++seen[static_cast<std::size_t>(i)];
        });
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(seen[static_cast<std::size_t>(i)].load(), 1)
              << "index " << i << " of " << n << " on " << threads << " threads";
        }
        EXPECT_EQ(misaligned.load(), 0) << n << " align " << align;
        EXPECT_LE(pieces.load(), n <= 64 ? 1 : threads) << n;
        if (n > 64 * 4 && threads > 1) EXPECT_EQ(pieces.load(), threads) << n;
      }
    }
  }
  set_num_threads(saved);
}

TEST(ForRange, ShortRangesRunOnTheCallingThread) {
  const int saved = num_threads();
  set_num_threads(2);
  int calls = 0;
  bool nested = true;
  ops::for_range(64, 64, 1, [&](std::int64_t begin, std::int64_t end) {
    ++calls;
    nested = omp_in_parallel() != 0;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 64);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(nested);
  ops::for_range(0, 64, 1, [&](std::int64_t, std::int64_t) { ++calls; });
  EXPECT_EQ(calls, 1);
  set_num_threads(saved);
}

TEST(ForChunks, ChunkBoundsFollowFromTheSizesAlone) {
  const int saved = num_threads();
  for (const int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> starts(1000);
    ops::for_chunks(1000, 96, [&](std::int64_t begin, std::int64_t end) {
      EXPECT_EQ(begin % 96, 0);
      EXPECT_EQ(end, std::min<std::int64_t>(1000, begin + 96));
      ++starts[static_cast<std::size_t>(begin)];
    });
    for (std::int64_t i = 0; i < 1000; ++i) {
      EXPECT_EQ(starts[static_cast<std::size_t>(i)].load(), i % 96 == 0 ? 1 : 0) << i;
    }
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace qkv::testing
