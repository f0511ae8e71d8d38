// qkv._qkv's linear attention: qkv::linear_attention and its backward on arrays viewed in place
// (arrays.hpp), the keyword options of qkv.linear_attention turned into qkv::LinearOptions, and
// qkv::LinearState for decoding.
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

// The feature map's options (qkv.linear_attention's feature_map, num_features, seed, scale) and
// eps; checked by qkv::LinearOptions' users.
struct FeatureOptions {
  std::string feature_map;
  std::int64_t num_features;
  std::uint64_t seed;
  std::optional<double> scale;
  double eps;

  qkv::LinearOptions options() const {
    qkv::LinearOptions o;
    if (feature_map == "elu") {
      o.feature_map = qkv::FeatureMap::elu;
    } else if (feature_map == "favor") {
      o.feature_map = qkv::FeatureMap::favor;
    } else {
      throw qkv::Error("feature_map", "'elu' or 'favor'", "'" + feature_map + "'");
    }
    o.num_features = num_features;
    o.seed = seed;
    o.scale = scale;
    o.eps = eps;
    return o;
  }
};

qkv::LinearOptions linear_options(const FeatureOptions& features,
                                  const std::optional<std::string>& causal,
                                  const std::vector<std::int64_t>& key_lengths,
                                  const std::string& backend) {
  qkv::LinearOptions o = features.options();
  o.causal = causal_of(causal);
  o.key_lengths = key_lengths;
  o.backend = backend_of(backend);
  return o;
}

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]
nb::object linear_forward(const Array& q, const Array& k, const Array& v,
                          const std::string& feature_map, std::int64_t num_features,
                          std::uint64_t seed, std::optional<double> scale,
                          const std::optional<std::string>& causal,
                          const std::vector<std::int64_t>& key_lengths, double eps,
                          const std::string& backend, bool torch) {
  const qkv::LinearOptions o =
      linear_options({feature_map, num_features, seed, scale, eps}, causal, key_lengths, backend);
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
                          const std::string& feature_map, std::int64_t num_features,
                          std::uint64_t seed, std::optional<double> scale,
                          const std::optional<std::string>& causal,
                          const std::vector<std::int64_t>& key_lengths, double eps,
                          const std::string& backend, bool torch) {
  const qkv::LinearOptions o =
      linear_options({feature_map, num_features, seed, scale, eps}, causal, key_lengths, backend);
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
  m.def("linear_forward", &linear_forward, "q"_a, "k"_a, "v"_a, "feature_map"_a, "num_features"_a,
        "seed"_a, "scale"_a.none(), "causal"_a.none(), "key_lengths"_a, "eps"_a, "backend"_a,
        "torch"_a);
  m.def("linear_backward", &linear_backward, "dout"_a, "q"_a, "k"_a, "v"_a, "feature_map"_a,
        "num_features"_a, "seed"_a, "scale"_a.none(), "causal"_a.none(), "key_lengths"_a, "eps"_a,
        "backend"_a, "torch"_a);
  m.def(
      "favor_features",
      [](std::int64_t D, std::int64_t F, std::uint64_t seed) {
        return wrap(qkv::favor_features(D, F, seed), false);
      },
      "D"_a, "F"_a, "seed"_a);
  nb::class_<qkv::LinearState>(m, "LinearState")
      .def(
          "__init__",
          [](qkv::LinearState* self, std::int64_t B, std::int64_t Hk, std::int64_t D,
             std::int64_t Dv, const std::string& feature_map, std::int64_t num_features,
             std::uint64_t seed, std::optional<double> scale, double eps) {
            new (self) qkv::LinearState(
                B, Hk, D, Dv,
                FeatureOptions{feature_map, num_features, seed, scale, eps}.options());
          },
          "B"_a, "Hk"_a, "D"_a, "Dv"_a, "feature_map"_a, "num_features"_a, "seed"_a,
          "scale"_a.none(), "eps"_a)
      .def(
          "step",
          [](qkv::LinearState& state, const Array& q, const Array& k, const Array& v, bool torch) {
            const qkv::Tensor tq = view_of(q, "q"), tk = view_of(k, "k"), tv = view_of(v, "v");
            qkv::Tensor out;
            {
              nb::gil_scoped_release release;
              out = state.step(tq, tk, tv);
            }
            return wrap(out, torch);
          },
          "q"_a, "k"_a, "v"_a, "torch"_a)
      .def(
          "append",
          [](qkv::LinearState& state, const Array& k, const Array& v) {
            const qkv::Tensor tk = view_of(k, "k"), tv = view_of(v, "v");
            nb::gil_scoped_release release;
            state.append(tk, tv);
          },
          "k"_a, "v"_a)
      .def_prop_ro("length", &qkv::LinearState::length);
}

}  // namespace qkv_python
