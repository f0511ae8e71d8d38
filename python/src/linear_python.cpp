// qkv._qkv's linear attention: qkv::linear_attention and its backward on arrays viewed in place
// (arrays.hpp), the keyword options of qkv.linear_attention turned into qkv::LinearOptions.
#include "linear_python.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "qkv/error.hpp"
#include "qkv/linear_attention.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace qkv_python {
namespace {

qkv::LinearOptions linear_options(const std::string& feature_map,
                                  const std::optional<std::string>& causal,
                                  const std::vector<std::int64_t>& key_lengths, double eps,
                                  const std::string& backend) {
  qkv::LinearOptions o;
  if (feature_map != "elu") throw qkv::Error("feature_map", "'elu'", "'" + feature_map + "'");
  o.causal = causal_of(causal);
  o.key_lengths = key_lengths;
  o.eps = eps;
  o.backend = backend_of(backend);
  return o;
}

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]
nb::object linear_forward(const Array& q, const Array& k, const Array& v,
                          const std::string& feature_map, const std::optional<std::string>& causal,
                          const std::vector<std::int64_t>& key_lengths, double eps,
                          const std::string& backend, bool torch) {
  const qkv::LinearOptions o = linear_options(feature_map, causal, key_lengths, eps, backend);
  const qkv::Tensor tq = view_of(q, "q"), tk = view_of(k, "k"), tv = view_of(v, "v");
  qkv::Tensor out;
  {
    nb::gil_scoped_release release;
    out = qkv::linear_attention(tq, tk, tv, o);
  }
  return wrap(out, torch);
}

// dout [B, Tq, Hq, Dv] and the forward's q, k, v -> (dq, dk, dv)
nb::tuple linear_backward(const Array& dout, const Array& q, const Array& k, const Array& v,
                          const std::string& feature_map, const std::optional<std::string>& causal,
                          const std::vector<std::int64_t>& key_lengths, double eps,
                          const std::string& backend, bool torch) {
  const qkv::LinearOptions o = linear_options(feature_map, causal, key_lengths, eps, backend);
  const qkv::Tensor td = view_of(dout, "dout"), tq = view_of(q, "q"), tk = view_of(k, "k"),
                    tv = view_of(v, "v");
  qkv::LinearGrads g;
  {
    nb::gil_scoped_release release;
    g = qkv::linear_attention_backward(td, tq, tk, tv, o);
  }
  return nb::make_tuple(wrap(g.dq, torch), wrap(g.dk, torch), wrap(g.dv, torch));
}

}  // namespace

void bind_linear(nb::module_& m) {
  m.def("linear_forward", &linear_forward, "q"_a, "k"_a, "v"_a, "feature_map"_a, "causal"_a.none(),
        "key_lengths"_a, "eps"_a, "backend"_a, "torch"_a);
  m.def("linear_backward", &linear_backward, "dout"_a, "q"_a, "k"_a, "v"_a, "feature_map"_a,
        "causal"_a.none(), "key_lengths"_a, "eps"_a, "backend"_a, "torch"_a);
}

}  // namespace qkv_python
