#include "kernels/cpu/scratch_pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/block_cache.hpp"
#include "qkv/system.hpp"

namespace qkv::kernels::cpu {
namespace {

// Under AddressSanitizer every buffer is freed at once, so that a kernel reading its scratch after
// the call that owned it is reported, as it would be without the pool.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPooling = false;
#else
constexpr bool kPooling = true;
#endif

struct Pooled {
  void* p;
  std::size_t capacity;
};

class Pool {
 public:
  ~Pool() { release(); }

  void* take(std::size_t bytes, std::size_t* capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t best = buffers_.size();
    for (std::size_t n = 0; n < buffers_.size(); ++n) {
      const std::size_t c = buffers_[n].capacity;
      if (c >= bytes && c / 2 <= bytes && (best == buffers_.size() || c < buffers_[best].capacity))
        best = n;
    }
    if (best == buffers_.size()) return nullptr;
    const Pooled found = buffers_[best];
    buffers_.erase(buffers_.begin() + static_cast<std::ptrdiff_t>(best));
    held_ -= found.capacity;
    out(found.capacity);
    *capacity = found.capacity;
    return found.p;
  }

  void fresh(std::size_t capacity) noexcept {
    std::vector<void*> to_free;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      out(capacity);
      trim(to_free);
    }
    for (void* q : to_free) std::free(q);
  }

  void give(void* p, std::size_t capacity) noexcept {
    std::vector<void*> to_free;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      in_use_ -= capacity;
      if (in_use_ == 0) {  // a busy period ends: the next may keep what this one used at once
        limit_ = std::max(kPoolBytes, peak_);
        peak_ = 0;
      }
      bool kept = false;
      if (kPooling && capacity <= limit()) {
        try {
          buffers_.push_back({p, capacity});
          held_ += capacity;
          kept = true;
        } catch (...) {  // no room to remember it: free it
        }
      }
      if (!kept) to_free.push_back(p);
      trim(to_free);
    }
    for (void* q : to_free) std::free(q);
  }

  void release() noexcept {
    std::vector<Pooled> all;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      all.swap(buffers_);
      held_ = 0;
    }
    for (const Pooled& b : all) std::free(b.p);
  }

 private:
  void out(std::size_t capacity) {
    in_use_ += capacity;
    peak_ = std::max(peak_, in_use_);
  }
  // The most kept and in use together: kPoolBytes, the last busy period's peak, or this one's.
  std::size_t limit() const { return std::max(limit_, peak_); }
  // Frees kept buffers, oldest first, until kept and in use fit the limit.
  void trim(std::vector<void*>& to_free) {
    while (!buffers_.empty() && held_ + in_use_ > limit()) {
      held_ -= buffers_.front().capacity;
      to_free.push_back(buffers_.front().p);
      buffers_.erase(buffers_.begin());
    }
  }

  std::mutex mutex_;
  std::vector<Pooled> buffers_;
  std::size_t held_ = 0;    // kept
  std::size_t in_use_ = 0;  // handed out (taken or noted fresh), not yet given back
  std::size_t peak_ = 0;    // the most in use at once in the current busy period
  std::size_t limit_ = kPoolBytes;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

void* take_pooled(std::size_t bytes, std::size_t* capacity) { return pool().take(bytes, capacity); }

void note_fresh(std::size_t capacity) noexcept { pool().fresh(capacity); }

void give_pooled(void* p, std::size_t capacity) noexcept { pool().give(p, capacity); }

}  // namespace qkv::kernels::cpu

namespace qkv {

void release_cached_memory() {
  kernels::cpu::pool().release();
  detail::release_blocks();
}

}  // namespace qkv
