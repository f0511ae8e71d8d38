#pragma once

// What the attention entry points (attention.cpp, flex.cpp) share: the backend choice, the
// compute type, empty problems and the output shapes.

#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/mods.hpp"
#include "kernels/params.hpp"
#include "qkv/attention.hpp"
#include "qkv/error.hpp"

namespace qkv::attention {

// QKV_BACKEND (reference or cpu) overrides the option, like ggml's forced reference mode.
inline bool use_reference(Backend requested) {
  if (const char* forced = std::getenv("QKV_BACKEND")) {
    const std::string_view name(forced);
    if (name == "reference") return true;
    if (name == "cpu") return false;
    if (!name.empty()) throw Error("QKV_BACKEND", "reference, cpu or unset", std::string(name));
  }
  return requested == Backend::reference;
}

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, double> ? DType::f64 : DType::f32;
}

// B = 0, Tq = 0 or Tk = 0: an empty problem, answered by the entry points so that every backend
// agrees and the kernels only ever see B, Tq, Tk >= 1. Without keys every row is fully masked.
inline bool empty_problem(const kernels::Dims& dims) {
  return dims.B == 0 || dims.Tq == 0 || dims.Tk == 0;  // not B * Tq * Tk: it can pass 2^63
}

// View of `t` (at most 4 dimensions, right-aligned) broadcast to [B, Hq, Tq, Tk].
template <class E>
kernels::Broadcast4<E> broadcast4(const Tensor& t) {
  kernels::Broadcast4<E> view;
  view.data = static_cast<const E*>(t.data());
  const std::int64_t lead = 4 - t.dim();
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    view.stride[lead + d] = t.size(d) == 1 ? 0 : t.stride(d);
  }
  return view;
}

// The built-in mask options as one mask mod; mask: options.mask made contiguous (or undefined),
// which must outlive the mod, as must options' lengths.
inline kernels::BuiltinMask builtin_mask(const kernels::Dims& dims, const AttentionOptions& options,
                                         const Tensor& mask) {
  kernels::BuiltinMask m;
  m.lengths = {dims.Tq, dims.Tk,
               options.query_lengths.empty() ? nullptr : options.query_lengths.data(),
               options.key_lengths.empty() ? nullptr : options.key_lengths.data()};
  m.causal = options.causal;
  m.window_left = options.window.left;
  m.window_right = options.window.right;
  if (mask.defined()) m.keep = broadcast4<std::uint8_t>(mask);
  return m;
}

// P does not depend on v: for the weights entry points a one-column v of zeros [B, Tk, Hk, 1]
// stands in for it, so that validation and the params are the forward's.
inline Tensor weights_stand_in_v(const Tensor& q, const Tensor& k) {
  const bool k_ok = k.defined() && k.dim() == 4;
  return Tensor::zeros({k_ok ? k.size(0) : 0, k_ok ? k.size(1) : 0, k_ok ? k.size(2) : 0, 1},
                       q.defined() && is_floating(q.dtype()) ? q.dtype() : DType::f32);
}

inline Shape out_shape(const kernels::Dims& d) { return {d.B, d.Tq, d.Hq, d.Dv}; }
inline Shape lse_shape(const kernels::Dims& d) { return {d.B, d.Hq, d.Tq}; }

}  // namespace qkv::attention
