// cast: a Var in another floating dtype, the gradient cast back.
#include <string>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// x [...] -> [...] in dtype
Var cast(const Var& x, DType dtype) {
  ops::expect_any_floating(x.value(), "x");
  if (!is_floating(dtype)) {
    throw Error("dtype", "f64, f32, bf16 or f16", std::string(dtype_name(dtype)));
  }
  if (x.dtype() == dtype) return x;
  const DType from = x.dtype();
  // y = x.to(dtype): the gradient goes back to x's dtype (rounded when that is the narrower one)
  return detail::record(x.value().to(dtype), {&x},
                        [from](const Tensor& dy) { return std::vector<Tensor>{dy.to(from)}; });
}

}  // namespace qkv::autograd
