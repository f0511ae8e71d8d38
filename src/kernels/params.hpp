#pragma once

#include <cstdint>

namespace qkv::kernels {

// Sizes of one attention problem, in DESIGN.md's notation.
struct Dims {
  std::int64_t B = 0, Tq = 0, Tk = 0, Hq = 0, Hk = 0, D = 0, Dv = 0;
  std::int64_t group() const noexcept { return Hq / Hk; }  // query heads per k/v head
};

// q, k, v, out and their gradients as the kernels see them, indexed [B, T, H, x]: element
// (b, t, h, x) at data[b * batch + t * row + h * head + x]. The last dimension is contiguous,
// the others may have any strides (a [B, H, T, D] tensor permuted to [B, T, H, D] is such a
// view as it stands). E = T (written) or const T (read).
template <class E>
struct Rows {
  E* data = nullptr;
  std::int64_t batch = 0, row = 0, head = 0;

  E* at(std::int64_t b, std::int64_t t, std::int64_t h) const noexcept {
    return data + b * batch + t * row + h * head;
  }
};

// lse [B, H, Tq] as the kernels see it: element (b, h, i) at data[b * batch + h * head + i * row].
template <class E>
struct RowStats {
  E* data = nullptr;
  std::int64_t batch = 0, head = 0, row = 0;

  E& operator()(std::int64_t b, std::int64_t h, std::int64_t i) const noexcept {
    return data[b * batch + h * head + i * row];
  }
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

// Dropout as the kernels see it: probability p of dropping, the Philox key material, and the
// positions the counters take for row 0 and key 0 (a shard of a longer sequence keys its mask on
// global positions: entry (i, j) draws as (row0 + i, col0 + j)).
struct DropoutParams {
  double p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  std::int64_t row0 = 0;
  std::int64_t col0 = 0;
  bool enabled() const noexcept { return p > 0.0; }
};

}  // namespace qkv::kernels
