// qkv's Python extension, qkv._qkv: the attention entry points of <qkv/attention.hpp> on arrays
// that arrive through nanobind's ndarray (numpy through the buffer protocol, torch through
// DLPack). An input is never copied: its data pointer, shape and element strides become a
// qkv::Tensor view (Tensor::from_blob), whatever the strides. Outputs are qkv's own tensors,
// handed to numpy or torch without a copy; a capsule keeps their storage alive (arrays.hpp). The
// Python layer (qkv/__init__.py) turns keyword options into the arguments below and picks the
// output kind; qkv::Error becomes ValueError with its message. flex_attention and its mods:
// flex_python.cpp; linear attention: linear_python.cpp; diagnostics of weights: inspect_python.cpp.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "flex_python.hpp"
#include "inspect_python.hpp"
#include "linear_python.hpp"
#include "qkv/attention.hpp"
#include "qkv/error.hpp"
#include "qkv/system.hpp"
#include "qkv/tensor.hpp"
#include "qkv/version.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using qkv_python::Array;
using qkv_python::view_of;
using qkv_python::wrap;

// The keyword options of qkv.attention, turned into qkv::AttentionOptions for each call. mask and
// bias hold references to the caller's arrays, which to_qkv() views in place.
struct Options {
  std::optional<std::string> causal;
  std::optional<std::pair<std::int64_t, std::int64_t>> window;
  std::vector<std::int64_t> key_lengths;
  std::vector<std::int64_t> query_lengths;
  std::optional<Array> mask;
  std::optional<Array> bias;
  std::vector<double> alibi_slopes;
  double softcap = 0.0;
  std::optional<double> scale;
  double dropout_p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  std::string backend = "auto";

  qkv::AttentionOptions to_qkv() const {
    qkv::AttentionOptions o;
    o.causal = qkv_python::causal_of(causal);
    if (window) o.window = {window->first, window->second};
    o.key_lengths = key_lengths;
    o.query_lengths = query_lengths;
    if (mask) o.mask = view_of(*mask, "mask", /*boolean=*/true);
    if (bias) o.bias = view_of(*bias, "bias");
    o.alibi_slopes = alibi_slopes;
    o.softcap = softcap;
    o.scale = scale;
    o.dropout_p = dropout_p;
    o.seed = seed;
    o.offset = offset;
    o.backend = qkv_python::backend_of(backend);
    return o;
  }
};

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> (out [B, Tq, Hq, Dv], lse [B, Hq, Tq])
nb::tuple forward(const Array& q, const Array& k, const Array& v, const Options& options,
                  bool torch) {
  const qkv::AttentionOptions o = options.to_qkv();
  const qkv::Tensor tq = view_of(q, "q"), tk = view_of(k, "k"), tv = view_of(v, "v");
  qkv::AttentionOutput result;
  {
    nb::gil_scoped_release release;
    result = qkv::attention_forward(tq, tk, tv, o);
  }
  return nb::make_tuple(wrap(result.out, torch), wrap(result.lse, torch));
}

// dout [B, Tq, Hq, Dv], q, k, v as in the forward, out [B, Tq, Hq, Dv], lse [B, Hq, Tq]
// -> (dq, dk, dv) in the shapes of q, k, v, and dbias in the bias's shape when a bias is given.
nb::tuple backward(const Array& dout, const Array& q, const Array& k, const Array& v,
                   const Array& out, const Array& lse, const Options& options, bool torch) {
  const qkv::AttentionOptions o = options.to_qkv();
  const qkv::Tensor tdout = view_of(dout, "dout"), tq = view_of(q, "q"), tk = view_of(k, "k"),
                    tv = view_of(v, "v"), tout = view_of(out, "out"), tlse = view_of(lse, "lse");
  qkv::AttentionGrads g;
  {
    nb::gil_scoped_release release;
    g = qkv::attention_backward(tdout, tq, tk, tv, tout, tlse, o);
  }
  if (g.dbias.defined()) {
    return nb::make_tuple(wrap(g.dq, torch), wrap(g.dk, torch), wrap(g.dv, torch),
                          wrap(g.dbias, torch));
  }
  return nb::make_tuple(wrap(g.dq, torch), wrap(g.dk, torch), wrap(g.dv, torch));
}

// q [B, Tq, Hq, D], k [B, Tk, Hk, D] -> P [B, Hq, Tq, Tk]
nb::object weights(const Array& q, const Array& k, const Options& options, bool torch) {
  const qkv::AttentionOptions o = options.to_qkv();
  const qkv::Tensor tq = view_of(q, "q"), tk = view_of(k, "k");
  qkv::Tensor p;
  {
    nb::gil_scoped_release release;
    p = qkv::attention_weights(tq, tk, o);
  }
  return wrap(p, torch);
}

}  // namespace

NB_MODULE(_qkv, m) {
  m.doc() = "qkv's C++ attention kernels; use the qkv package, not this module.";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const qkv::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<Options>(m, "Options")
      .def(nb::init<>())
      .def_rw("causal", &Options::causal)
      .def_rw("window", &Options::window)
      .def_rw("key_lengths", &Options::key_lengths)
      .def_rw("query_lengths", &Options::query_lengths)
      .def_rw("mask", &Options::mask)
      .def_rw("bias", &Options::bias)
      .def_rw("alibi_slopes", &Options::alibi_slopes)
      .def_rw("softcap", &Options::softcap)
      .def_rw("scale", &Options::scale)
      .def_rw("dropout_p", &Options::dropout_p)
      .def_rw("seed", &Options::seed)
      .def_rw("offset", &Options::offset)
      .def_rw("backend", &Options::backend);

  m.def("bf16_view", &qkv_python::bf16_view, "bits"_a);
  m.def("forward", &forward, "q"_a, "k"_a, "v"_a, "options"_a, "torch"_a);
  m.def("backward", &backward, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "options"_a,
        "torch"_a);
  m.def("weights", &weights, "q"_a, "k"_a, "options"_a, "torch"_a);
  qkv_python::bind_flex(m);
  qkv_python::bind_linear(m);
  qkv_python::bind_inspect(m);

  // What the extension sees of an array it receives: (address, element strides). Tests compare
  // the address with the caller's to show that no copy was made.
  m.def("array_view", [](const Array& a) {
    std::vector<std::int64_t> strides(a.ndim());
    for (std::size_t d = 0; d < a.ndim(); ++d) strides[d] = a.stride(d);
    return nb::make_tuple(reinterpret_cast<std::uintptr_t>(a.data()), strides);
  });

  m.def("set_num_threads", &qkv::set_num_threads, "n"_a,
        "Sets qkv's thread budget (qkv::set_num_threads): the OpenMP threads its kernels share.");
  m.def("matrix_paths", &qkv::matrix_paths,
        "The paths of bf16 matrix products this CPU runs, best first (qkv::matrix_paths): "
        "'amx-bf16', 'avx512-bf16', then 'f32-fma'.");
  m.def("cpu_features", &qkv::cpu_features,
        "The CPU features qkv's kernels can use here (qkv::cpu_features), as /proc/cpuinfo "
        "names them.");
  m.def("get_num_threads", &qkv::num_threads,
        "qkv's thread budget (qkv::num_threads): the OpenMP threads its kernels share.");
  m.def(
      "release_cached_memory",
      [] {
        nb::gil_scoped_release release;
        qkv::release_cached_memory();
      },
      "Frees the kernels' pooled scratch (qkv::release_cached_memory): up to 256 MiB of large "
      "buffers kept between calls for reuse.");
  m.attr("__version__") = std::string(qkv::version());
}
