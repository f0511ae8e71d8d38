// qkv::Captured's checks (qkv/captured.hpp): the element reads are inline in the caller's mod.
#include "qkv/captured.hpp"

#include <string>
#include <utility>

#include "qkv/error.hpp"

namespace qkv {

Captured::Captured(Tensor t) {
  if (!t.defined()) throw Error("captured", "a defined tensor", "an undefined tensor");
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64) {
    throw Error("captured", "dtype f32 or f64", std::string(dtype_name(t.dtype())));
  }
  if (t.dim() < 1 || t.dim() > 4) {
    throw Error("captured", "1 to 4 dimensions", t.describe());
  }
  auto state = std::make_shared<State>();
  state->data = t.data();
  state->f64 = t.dtype() == DType::f64;
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    state->sizes[d] = t.size(d);
    state->strides[d] = t.stride(d);
  }
  state->tensor = std::move(t);
  state_ = std::move(state);
}

}  // namespace qkv
