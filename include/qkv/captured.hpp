#pragma once

// Tensors a score mod reads, with gradients: a learned relative-position table, per-head biases.
//
//   const qkv::Captured table(rel_table);  // [H, buckets], f32 or f64, kept alive by the handle
//   auto rel = [table](auto s, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
//     return s + table.at(s, h, bucket(i - j));
//   };
//   auto grads = qkv::flex_attention_backward(dout, q, k, v, out, lse, rel, blocks, {}, {table});
//   grads.captured[0];  // d loss / d rel_table, shaped like it
//
// at(s, index...) reads an element as s's scalar type, so the mod stays generic. The forward
// reads plain values; for the captured tensors' gradients the backward evaluates the mod once per
// read on dual numbers whose tangent is seeded on that read alone (the tape below records which
// element it was), and adds dS_ij times the derivative into that element's gradient, in an order
// that does not depend on the thread count. A mod may read any number of elements of any number
// of captured tensors; reads of a tensor not passed to the backward get no gradient. Indices must
// lie inside the tensor (a mod must not throw).

#include <cstdint>
#include <memory>
#include <type_traits>

#include "qkv/dtype.hpp"
#include "qkv/dual.hpp"
#include "qkv/tensor.hpp"

namespace qkv {

namespace detail {

// One evaluation of a score mod for captured gradients: the read numbered `seed` (reads counted
// from 0 in the order the mod makes them) gets tangent 1; `tensor` and `index` say what it read
// (index row-major in the tensor's shape); `reads` counts them all.
struct CaptureTape {
  int seed = 0;
  int reads = 0;
  const void* tensor = nullptr;
  std::int64_t index = -1;
};

// The tape of the evaluation running on this thread; null outside the backward's captured pass.
inline thread_local CaptureTape* capture_tape = nullptr;

template <class S>
struct IsDual : std::false_type {};
template <class T>
struct IsDual<Dual<T>> : std::true_type {};

}  // namespace detail

class Captured {
 public:
  // t: f32 or f64, 1 to 4 dimensions, any strides; the handle keeps it alive (a view of the
  // caller's memory: changes to it are seen). Throws qkv::Error naming "captured" otherwise.
  explicit Captured(Tensor t);

  // Element (index...) as s's scalar type: a plain value for float or double, a dual number
  // with tangent 0 (ds'/ds does not see it) or, under the backward's tape, 1 on the seeded read.
  template <class S, class... I>
  S at(const S& s, I... index) const {
    static_assert(sizeof...(I) >= 1 && sizeof...(I) <= 4, "one index per dimension (1 to 4)");
    const std::int64_t idx[] = {static_cast<std::int64_t>(index)...};
    std::int64_t offset = 0, flat = 0;
    for (std::size_t d = 0; d < sizeof...(I); ++d) {
      offset += idx[d] * state_->strides[d];
      flat = flat * state_->sizes[d] + idx[d];
    }
    const double value = state_->f64 ? static_cast<const double*>(state_->data)[offset]
                                     : static_cast<const float*>(state_->data)[offset];
    if constexpr (detail::IsDual<S>::value) {
      using T = decltype(s.v);
      T tangent = 0;
      if (detail::CaptureTape* tape = detail::capture_tape; tape != nullptr) {
        if (tape->reads++ == tape->seed) {
          tape->tensor = state_.get();
          tape->index = flat;
          tangent = 1;
        }
      }
      return S{static_cast<T>(value), tangent};
    } else {
      (void)s;
      return static_cast<S>(value);
    }
  }

  const Tensor& tensor() const noexcept { return state_->tensor; }
  // What the tape records as `tensor` for reads of this handle (and of its copies).
  const void* id() const noexcept { return state_.get(); }

 private:
  struct State {
    Tensor tensor;
    const void* data = nullptr;
    bool f64 = false;
    std::int64_t sizes[4] = {1, 1, 1, 1};
    std::int64_t strides[4] = {0, 0, 0, 0};
  };
  std::shared_ptr<const State> state_;
};

}  // namespace qkv
