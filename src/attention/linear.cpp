// qkv::linear_attention and its backward: validation, the caller's tensors handed to the kernels
// in place where they can read them (run.hpp's readable; bf16 and f16 widened to f32), and the
// backend choice.
#include "kernels/cpu/linear.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "attention/common.hpp"
#include "attention/linear_features.hpp"
#include "attention/run.hpp"
#include "attention/validate.hpp"
#include "core/thread_budget.hpp"
#include "kernels/reference/linear_ref.hpp"
#include "qkv/linear_attention.hpp"
#include "qkv/system.hpp"

namespace qkv {
namespace {

// Checks q, k, v and the options (the shapes, heads and key lengths as attention checks them);
// returns the sizes.
kernels::Dims validate_linear(const Tensor& q, const Tensor& k, const Tensor& v,
                              const LinearOptions& options) {
  AttentionOptions as_attention;
  as_attention.causal = options.causal;
  as_attention.key_lengths = options.key_lengths;
  const kernels::Dims d = attention::validate_inputs(q, k, v, as_attention);
  attention::validate_feature_options(options, q.dtype());
  return d;
}

// The feature map's tables in the kernels' dtype: favor's scaled features [F, D].
template <class T>
struct FeatureTable {
  std::vector<T> omega;
  FeatureTable(const kernels::Dims& d, const LinearOptions& options) {
    if (options.feature_map != FeatureMap::favor) return;
    const std::vector<double> w = attention::scaled_favor_features(options, d.D);
    omega.assign(w.begin(), w.end());
  }
};

// The kernels' params over the readable tensors and the feature table (kept alive by the
// caller).
template <class T>
kernels::LinearParams<T> params_of(const kernels::Dims& d, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const LinearOptions& options,
                                   const FeatureTable<T>& table) {
  kernels::LinearParams<T> p;
  p.dims = d;
  p.feature_map = options.feature_map;
  p.F = linear_feature_count(options, d.D);
  p.omega = table.omega.data();
  p.scale = static_cast<T>(attention::favor_scale(options, d.D));
  p.q = attention::rows_of<const T>(q);
  p.k = attention::rows_of<const T>(k);
  p.v = attention::rows_of<const T>(v);
  p.key_lengths = options.key_lengths.empty() ? nullptr : options.key_lengths.data();
  p.causal = options.causal;
  p.eps = static_cast<T>(options.eps);
  return p;
}

// T: the dtype the backend computes in (double for the reference, whatever the inputs).
template <class T>
Tensor forward_in(const kernels::Dims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                  const LinearOptions& options, bool reference) {
  attention::Staging staging;
  const Tensor qr = attention::readable<T>(q, staging), kr = attention::readable<T>(k, staging),
               vr = attention::readable<T>(v, staging);
  Tensor out = Tensor::empty({d.B, d.Tq, d.Hq, d.Dv}, attention::dtype_of<T>());
  const FeatureTable<T> table(d, options);
  kernels::LinearParams<T> p = params_of<T>(d, qr, kr, vr, options, table);
  p.out = attention::rows_of<T>(out);
  const detail::ThreadShare threads(num_threads());  // this call's share (qkv/system.hpp)
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      kernels::reference::linear_forward(p);
      return out;
    }
  }
  kernels::cpu::linear_forward(p);
  return out;
}

template <class T>
LinearGrads backward_in(const kernels::Dims& d, const Tensor& dout, const Tensor& q,
                        const Tensor& k, const Tensor& v, const LinearOptions& options,
                        bool reference) {
  attention::Staging staging;
  const Tensor qr = attention::readable<T>(q, staging), kr = attention::readable<T>(k, staging),
               vr = attention::readable<T>(v, staging), dr = attention::readable<T>(dout, staging);
  const DType dtype = attention::dtype_of<T>();
  LinearGrads g{Tensor::empty({d.B, d.Tq, d.Hq, d.D}, dtype),
                Tensor::empty({d.B, d.Tk, d.Hk, d.D}, dtype),
                Tensor::empty({d.B, d.Tk, d.Hk, d.Dv}, dtype)};
  const FeatureTable<T> table(d, options);
  kernels::LinearParams<T> p = params_of<T>(d, qr, kr, vr, options, table);
  p.dout = attention::rows_of<const T>(dr);
  p.dq = attention::rows_of<T>(g.dq);
  p.dk = attention::rows_of<T>(g.dk);
  p.dv = attention::rows_of<T>(g.dv);
  const detail::ThreadShare threads(num_threads());
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      kernels::reference::linear_backward(p);
      return g;
    }
  }
  kernels::cpu::linear_backward(p);
  return g;
}

}  // namespace

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv]
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const LinearOptions& options) {
  const kernels::Dims d = validate_linear(q, k, v, options);
  const bool reference = attention::use_reference(options.backend);
  if (d.B == 0 || d.Tq == 0) return Tensor::zeros({d.B, d.Tq, d.Hq, d.Dv}, q.dtype());
  const Tensor out = reference || q.dtype() == DType::f64
                         ? forward_in<double>(d, q, k, v, options, reference)
                         : forward_in<float>(d, q, k, v, options, false);
  return out.to(q.dtype());
}

// dout [B, Tq, Hq, Dv], q, k, v as in the forward -> dq, dk, dv
LinearGrads linear_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const LinearOptions& options) {
  const kernels::Dims d = validate_linear(q, k, v, options);
  attention::expect_tensor(dout, "dout", {d.B, d.Tq, d.Hq, d.Dv}, q.dtype());
  const bool reference = attention::use_reference(options.backend);
  if (d.B == 0 || d.Tq == 0) {
    return {Tensor::zeros({d.B, d.Tq, d.Hq, d.D}, q.dtype()),
            Tensor::zeros({d.B, d.Tk, d.Hk, d.D}, q.dtype()),
            Tensor::zeros({d.B, d.Tk, d.Hk, d.Dv}, q.dtype())};
  }
  const LinearGrads g = reference || q.dtype() == DType::f64
                            ? backward_in<double>(d, dout, q, k, v, options, reference)
                            : backward_in<float>(d, dout, q, k, v, options, false);
  return {g.dq.to(q.dtype()), g.dk.to(q.dtype()), g.dv.to(q.dtype())};
}

}  // namespace qkv
