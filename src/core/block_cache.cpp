// The tensors' block cache (block_cache.hpp).
#include "core/block_cache.hpp"

#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <vector>

#include "core/pages.hpp"

namespace qkv::detail {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;
#else
constexpr bool kCaching = true;
#endif

constexpr std::size_t kMinCached = std::size_t{64} << 10;

// The smallest size of bytes' class: eight classes per power of two, so a block serves requests
// down to 8/9 of its size and wastes at most 12.5%; from a huge page up (where allocate_pages
// rounds to whole huge pages anyway), whole huge pages.
std::size_t class_size(std::size_t bytes) {
  if (bytes >= kHugePage) return (bytes + kHugePage - 1) / kHugePage * kHugePage;
  std::size_t power = kMinCached;
  while (power * 2 <= bytes) power *= 2;
  const std::size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

class BlockCache {
 public:
  void* take(std::size_t bytes, std::size_t* capacity) {
    if (!kCaching || bytes < kMinCached) return allocate_pages(bytes, capacity);
    const std::size_t size = class_size(bytes);
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      // The class asked for, or the next that holds a block, up to a quarter larger (batches of
      // varying lengths ask for neighbouring classes from step to step).
      auto found = free_.lower_bound(size);
      while (found != free_.end() && found->second.empty() && found->first <= size + size / 4) {
        ++found;
      }
      if (found != free_.end() && !found->second.empty() && found->first <= size + size / 4) {
        const std::list<Block>::iterator block = found->second.back();
        found->second.pop_back();
        void* p = block->p;
        *capacity = block->capacity;
        held_ -= block->capacity;
        order_.erase(block);
        return p;
      }
    }
    void* p = allocate_pages(size, capacity);
    *capacity = size;  // the class, even where the allocation was rounded further up
    return p;
  }

  void give(void* p, std::size_t capacity) noexcept {
    if (!kCaching || capacity < kMinCached || capacity > kCacheBytes) {
      std::free(p);
      return;
    }
    std::vector<void*> to_free;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      try {
        std::vector<std::list<Block>::iterator>& same = free_[capacity];
        order_.push_back({p, capacity});
        try {
          same.push_back(std::prev(order_.end()));
        } catch (...) {
          order_.pop_back();
          throw;
        }
        held_ += capacity;
      } catch (...) {  // no room to remember it: free it
        to_free.push_back(p);
      }
      while (held_ > kCacheBytes) {  // the block freed longest ago goes first
        Block& oldest = order_.front();
        std::vector<std::list<Block>::iterator>& same = free_[oldest.capacity];
        same.erase(same.begin());  // the class's oldest, since classes keep the order too
        held_ -= oldest.capacity;
        to_free.push_back(oldest.p);
        order_.pop_front();
      }
    }
    for (void* q : to_free) std::free(q);
  }

  void release() noexcept {
    std::list<Block> all;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      all.swap(order_);
      free_.clear();
      held_ = 0;
    }
    for (const Block& b : all) std::free(b.p);
  }

 private:
  struct Block {
    void* p;
    std::size_t capacity;
  };
  std::mutex mutex_;
  std::list<Block> order_;  // kept blocks, the one freed longest ago first
  // Per class, the kept blocks, oldest first; a take reuses the newest (warmest in cache).
  std::map<std::size_t, std::vector<std::list<Block>::iterator>> free_;
  std::size_t held_ = 0;
};

// Never destroyed: a tensor that outlives the other statics still gives its block back.
BlockCache& cache() {
  static BlockCache* const instance = new BlockCache;
  return *instance;
}

}  // namespace

void* take_block(std::size_t bytes, std::size_t* capacity) { return cache().take(bytes, capacity); }

void give_block(void* p, std::size_t capacity) noexcept { cache().give(p, capacity); }

void release_blocks() noexcept { cache().release(); }

}  // namespace qkv::detail
