#pragma once

#include <cstdint>

namespace qkv::kernels {

// Sizes of one attention problem, in DESIGN.md's notation.
struct Dims {
  std::int64_t B = 0, Tq = 0, Tk = 0, Hq = 0, Hk = 0, D = 0, Dv = 0;
  std::int64_t group() const noexcept { return Hq / Hk; }  // query heads per k/v head
};

// A read-only view of a tensor broadcast to [B, Hq, Tq, Tk]: a stride of 0 repeats a dimension.
// An empty view (data == nullptr) stands for "not given".
template <class T>
struct Broadcast4 {
  const T* data = nullptr;
  std::int64_t stride[4] = {0, 0, 0, 0};

  explicit operator bool() const noexcept { return data != nullptr; }
  std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t i,
                      std::int64_t j) const noexcept {
    return b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3];
  }
  T operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const noexcept {
    return data[offset(b, h, i, j)];
  }
};

// Dropout as the kernels see it: probability p of dropping, and the Philox key material.
struct DropoutParams {
  double p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  bool enabled() const noexcept { return p > 0.0; }
};

}  // namespace qkv::kernels
