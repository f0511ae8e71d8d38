// The tensors' block cache (core/block_cache.hpp): a tensor's memory from 64 KiB up serves the
// next tensor of its size class once the first is gone, never two live tensors at once, and
// release_cached_memory() empties it.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "core/block_cache.hpp"
#include "qkv/system.hpp"
#include "qkv/tensor.hpp"

namespace qkv::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;  // every block freed at once, so ASan sees a use after free
#else
constexpr bool kCaching = true;
#endif

TEST(BlockCache, AFreedTensorsMemoryServesTheNextOfItsClass) {
  if (!kCaching) GTEST_SKIP() << "nothing is kept under AddressSanitizer";
  release_cached_memory();
  const void* first = nullptr;
  {
    const Tensor t = Tensor::empty({100, 256}, DType::f32);  // 100 KiB
    first = t.data();
  }
  const Tensor same_class = Tensor::empty({99, 256}, DType::f32);  // 99 KiB: the same class
  EXPECT_EQ(same_class.data(), first);
  // While it lives, a tensor of the class gets other memory.
  const Tensor other = Tensor::empty({100, 256}, DType::f32);
  EXPECT_NE(other.data(), same_class.data());
}

TEST(BlockCache, LiveTensorsNeverShareMemory) {
  std::vector<Tensor> live;
  std::set<const void*> seen;
  for (int round = 0; round < 3; ++round) {
    for (std::int64_t kib = 64; kib <= 4096; kib = kib * 5 / 4) {
      Tensor t = Tensor::full({kib * 256}, static_cast<double>(kib), DType::f32);
      EXPECT_TRUE(seen.insert(t.data()).second) << kib << " KiB";
      live.push_back(t);
    }
    for (const Tensor& t : live) {  // each still holds what it was filled with
      const double kib = static_cast<double>(t.numel()) / 256;
      EXPECT_EQ(t.at({t.numel() - 1}), kib);
      EXPECT_EQ(t.at({0}), kib);
    }
    live.clear();  // back to the cache, for the next round to take
    seen.clear();
  }
}

TEST(BlockCache, SizeClassesServeEveryRequestWithRoomToSpare) {
  if (!kCaching) GTEST_SKIP() << "nothing is kept under AddressSanitizer";
  const std::size_t huge = std::size_t{2} << 20;  // from here on, whole huge pages
  for (std::size_t bytes : {std::size_t{65536}, std::size_t{65537}, std::size_t{100000},
                            std::size_t{1} << 20, huge + 1, std::size_t{7} << 20}) {
    release_cached_memory();  // a fresh block: exactly its class
    std::size_t capacity = 0;
    void* p = detail::take_block(bytes, &capacity);
    EXPECT_GE(capacity, bytes);
    EXPECT_LE(capacity, bytes < huge ? bytes + bytes / 8 : bytes + huge - 1) << bytes;
    detail::give_block(p, capacity);
    // A request up to a quarter smaller reuses it; one more than a quarter smaller does not.
    if (capacity * 4 / 5 + 1 >= std::size_t{64} << 10) {
      std::size_t again = 0;
      void* q = detail::take_block(capacity * 4 / 5 + 1, &again);
      EXPECT_EQ(q, p) << bytes;
      EXPECT_EQ(again, capacity);
      detail::give_block(q, again);
    }
    if (capacity / 2 >= std::size_t{64} << 10) {
      std::size_t other = 0;
      void* r = detail::take_block(capacity / 2, &other);
      EXPECT_NE(r, p) << bytes;
      detail::give_block(r, other);
    }
  }
  release_cached_memory();
}

}  // namespace
}  // namespace qkv::testing
