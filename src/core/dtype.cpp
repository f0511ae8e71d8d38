#include "qkv/dtype.hpp"

namespace qkv {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f64:
      return 8;
    case DType::f32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::boolean:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

bool is_floating(DType dtype) noexcept { return dtype != DType::boolean; }

}  // namespace qkv
