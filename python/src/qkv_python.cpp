// qkv's Python extension, qkv._qkv: the attention entry points of <qkv/attention.hpp> on arrays
// that arrive through nanobind's ndarray (numpy through the buffer protocol, torch through
// DLPack). An input is never copied: its data pointer, shape and element strides become a
// qkv::Tensor view (Tensor::from_blob), whatever the strides. Outputs are qkv's own tensors,
// handed to numpy or torch without a copy; a capsule keeps their storage alive. The Python
// layer (qkv/__init__.py) turns keyword options into the arguments below and picks the output
// kind; qkv::Error becomes ValueError with its message.

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

#include "qkv/attention.hpp"
#include "qkv/error.hpp"
#include "qkv/system.hpp"
#include "qkv/tensor.hpp"
#include "qkv/version.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Any dtype, any strides, read-only, on the CPU: nanobind accepts it as it is, without a copy.
using Array = nb::ndarray<nb::ro, nb::device::cpu>;

// "float16", "int64", "bool": how a rejected dtype is named in an error.
std::string dlpack_dtype_name(nb::dlpack::dtype d) {
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

// float32 and float64 (and bool where a mask is expected) map onto qkv's dtypes.
qkv::DType dtype_of(const Array& a, const char* argument, bool boolean) {
  const nb::dlpack::dtype d = a.dtype();
  if (boolean) {
    if (d == nb::dtype<bool>()) return qkv::DType::boolean;
    throw qkv::Error(argument, "bool", dlpack_dtype_name(d));
  }
  if (d == nb::dtype<float>()) return qkv::DType::f32;
  if (d == nb::dtype<double>()) return qkv::DType::f64;
  throw qkv::Error(argument, "float32 or float64", dlpack_dtype_name(d));
}

// A view of the array's memory with its shape and element strides.
qkv::Tensor view_of(const Array& a, const char* argument, bool boolean = false) {
  const qkv::DType dtype = dtype_of(a, argument, boolean);
  qkv::Shape shape(a.ndim()), strides(a.ndim());
  for (std::size_t d = 0; d < a.ndim(); ++d) {
    shape[d] = static_cast<std::int64_t>(a.shape(d));
    strides[d] = a.stride(d);
  }
  return qkv::Tensor::from_blob(const_cast<void*>(a.data()), std::move(shape), std::move(strides),
                                dtype);
}

nb::dlpack::dtype dlpack_dtype(qkv::DType dtype) {
  switch (dtype) {
    case qkv::DType::f64:
      return nb::dtype<double>();
    case qkv::DType::f32:
      return nb::dtype<float>();
    default:
      throw qkv::Error("output", "float32 or float64", std::string(qkv::dtype_name(dtype)));
  }
}

// Hands an owning qkv tensor to numpy or torch without a copy; the capsule owns a handle on its
// storage until the array is collected.
template <class Framework>
nb::object wrap_as(const qkv::Tensor& t) {
  auto* handle = new qkv::Tensor(t);
  nb::capsule owner(handle, [](void* p) noexcept { delete static_cast<qkv::Tensor*>(p); });
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  std::vector<std::int64_t> strides(t.strides().begin(), t.strides().end());
  nb::ndarray<Framework> array(t.data(), shape.size(), shape.data(), owner, strides.data(),
                               dlpack_dtype(t.dtype()));
  return array.cast();
}

nb::object wrap(const qkv::Tensor& t, bool torch) {
  return torch ? wrap_as<nb::pytorch>(t) : wrap_as<nb::numpy>(t);
}

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
    if (causal) {
      if (*causal == "top_left") {
        o.causal = qkv::Causal::top_left;
      } else if (*causal == "bottom_right") {
        o.causal = qkv::Causal::bottom_right;
      } else {
        throw qkv::Error("causal", "None, 'top_left' or 'bottom_right'", "'" + *causal + "'");
      }
    }
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
    if (backend == "auto") {
      o.backend = qkv::Backend::automatic;
    } else if (backend == "cpu") {
      o.backend = qkv::Backend::cpu;
    } else if (backend == "reference") {
      o.backend = qkv::Backend::reference;
    } else {
      throw qkv::Error("backend", "'auto', 'cpu' or 'reference'", "'" + backend + "'");
    }
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

  m.def("forward", &forward, "q"_a, "k"_a, "v"_a, "options"_a, "torch"_a);
  m.def("backward", &backward, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "options"_a,
        "torch"_a);
  m.def("weights", &weights, "q"_a, "k"_a, "options"_a, "torch"_a);

  // What the extension sees of an array it receives: (address, element strides). Tests compare
  // the address with the caller's to show that no copy was made.
  m.def("array_view", [](const Array& a) {
    std::vector<std::int64_t> strides(a.ndim());
    for (std::size_t d = 0; d < a.ndim(); ++d) strides[d] = a.stride(d);
    return nb::make_tuple(reinterpret_cast<std::uintptr_t>(a.data()), strides);
  });

  m.def("set_num_threads", &qkv::set_num_threads, "n"_a,
        "Sets qkv's thread budget (qkv::set_num_threads): the OpenMP threads its kernels share.");
  m.def("get_num_threads", &qkv::num_threads,
        "qkv's thread budget (qkv::num_threads): the OpenMP threads its kernels share.");
  m.attr("__version__") = std::string(qkv::version());
}
