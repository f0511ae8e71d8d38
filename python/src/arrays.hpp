#pragma once

// The arrays of qkv's Python extension: an input array (numpy through the buffer protocol, torch
// through DLPack) seen as a qkv::Tensor view without a copy, and qkv's own tensors handed back to
// numpy or torch without a copy.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/error.hpp"
#include "qkv/tensor.hpp"

namespace qkv_python {

namespace nb = nanobind;

// Any dtype, any strides, read-only, on the CPU: nanobind accepts it as it is, without a copy.
using Array = nb::ndarray<nb::ro, nb::device::cpu>;

// "float16", "int64", "bool": how a rejected dtype is named in an error.
inline std::string dlpack_dtype_name(nb::dlpack::dtype d) {
  using Code = nb::dlpack::dtype_code;
  const std::string bits = std::to_string(d.bits);
  switch (static_cast<Code>(d.code)) {
    case Code::Int:
      return "int" + bits;
    case Code::UInt:
      return "uint" + bits;
    case Code::Float:
      return "float" + bits;
    case Code::Bfloat:
      return "bfloat" + bits;
    case Code::Complex:
      return "complex" + bits;
    case Code::Bool:
      return "bool";
    default:
      return "dtype code " + std::to_string(d.code) + " of " + bits + " bits";
  }
}

// The DLPack types of 16-bit floats: IEEE half (torch.float16, numpy.float16) and bfloat16
// (torch.bfloat16).
inline nb::dlpack::dtype float16_type() {
  return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
}
inline nb::dlpack::dtype bfloat16_type() {
  return {static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
}

// float32, float64, bfloat16 and float16 (and bool where a mask is expected) map onto qkv's
// dtypes; the 16-bit ones compute in float32.
inline qkv::DType dtype_of(const Array& a, const char* argument, bool boolean) {
  const nb::dlpack::dtype d = a.dtype();
  if (boolean) {
    if (d == nb::dtype<bool>()) return qkv::DType::boolean;
    throw qkv::Error(argument, "bool", dlpack_dtype_name(d));
  }
  if (d == nb::dtype<float>()) return qkv::DType::f32;
  if (d == nb::dtype<double>()) return qkv::DType::f64;
  if (d == bfloat16_type()) return qkv::DType::bf16;
  if (d == float16_type()) return qkv::DType::f16;
  throw qkv::Error(argument, "float32, float64, bfloat16 or float16", dlpack_dtype_name(d));
}

// A view of the array's memory with its shape and element strides.
inline qkv::Tensor view_of(const Array& a, const char* argument, bool boolean = false) {
  const qkv::DType dtype = dtype_of(a, argument, boolean);
  qkv::Shape shape(a.ndim()), strides(a.ndim());
  for (std::size_t d = 0; d < a.ndim(); ++d) {
    shape[d] = static_cast<std::int64_t>(a.shape(d));
    strides[d] = a.stride(d);
  }
  return qkv::Tensor::from_blob(const_cast<void*>(a.data()), std::move(shape), std::move(strides),
                                dtype);
}

inline nb::dlpack::dtype dlpack_dtype(qkv::DType dtype) {
  switch (dtype) {
    case qkv::DType::f64:
      return nb::dtype<double>();
    case qkv::DType::f32:
      return nb::dtype<float>();
    case qkv::DType::bf16:
      return bfloat16_type();
    case qkv::DType::f16:
      return float16_type();
    default:
      throw qkv::Error("output", "a floating dtype", std::string(qkv::dtype_name(dtype)));
  }
}

// Hands an owning qkv tensor to numpy or torch without a copy; the capsule owns a handle on its
// storage until the array is collected.
// numpy has no bfloat16 of its own (ml_dtypes adds one, which neither its buffer protocol nor its
// DLPack export carries), so a bf16 tensor goes to numpy as its uint16 bits, which the package
// views as ml_dtypes.bfloat16.
template <class Framework>
nb::object wrap_as(const qkv::Tensor& t) {
  auto* handle = new qkv::Tensor(t);
  nb::capsule owner(handle, [](void* p) noexcept { delete static_cast<qkv::Tensor*>(p); });
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  std::vector<std::int64_t> strides(t.strides().begin(), t.strides().end());
  const bool bits = std::is_same_v<Framework, nb::numpy> && t.dtype() == qkv::DType::bf16;
  nb::ndarray<Framework> array(t.data(), shape.size(), shape.data(), owner, strides.data(),
                               bits ? nb::dtype<std::uint16_t>() : dlpack_dtype(t.dtype()));
  return array.cast();
}

// The bits of a numpy bfloat16 array given as its uint16 view (`bits`, a Python object), seen as
// bfloat16 without a copy; the view keeps `bits` alive.
inline nb::ndarray<nb::ro> bf16_view(nb::object bits) {
  const auto array = nb::cast<nb::ndarray<std::uint16_t, nb::device::cpu, nb::ro>>(bits);
  std::vector<std::size_t> shape(array.ndim());
  std::vector<std::int64_t> strides(array.ndim());
  for (std::size_t d = 0; d < array.ndim(); ++d) {
    shape[d] = array.shape(d);
    strides[d] = array.stride(d);
  }
  return nb::ndarray<nb::ro>(array.data(), array.ndim(), shape.data(), bits, strides.data(),
                             bfloat16_type());
}

inline nb::object wrap(const qkv::Tensor& t, bool torch) {
  return torch ? wrap_as<nb::pytorch>(t) : wrap_as<nb::numpy>(t);
}

// None, "top_left" or "bottom_right".
inline qkv::Causal causal_of(const std::optional<std::string>& name) {
  if (!name) return qkv::Causal::none;
  if (*name == "top_left") return qkv::Causal::top_left;
  if (*name == "bottom_right") return qkv::Causal::bottom_right;
  throw qkv::Error("causal", "None, 'top_left' or 'bottom_right'", "'" + *name + "'");
}

// "auto", "cpu" or "reference".
inline qkv::Backend backend_of(const std::string& name) {
  if (name == "auto") return qkv::Backend::automatic;
  if (name == "cpu") return qkv::Backend::cpu;
  if (name == "reference") return qkv::Backend::reference;
  throw qkv::Error("backend", "'auto', 'cpu' or 'reference'", "'" + name + "'");
}

}  // namespace qkv_python
