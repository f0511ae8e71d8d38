#include "attention/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.hpp"

namespace qkv::attention {

std::string num(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", x);
  return buffer;
}

bool finite_in_compute(double x, DType inputs) {
  if (inputs == DType::f64) return std::isfinite(x);
  return std::abs(x) <= static_cast<double>(std::numeric_limits<float>::max());
}

std::string finite_for(DType inputs, const std::string& what) {
  if (inputs == DType::f64) return what;
  return what + " with magnitude <= 3.4028234663852886e+38 (f32's largest: " +
         std::string(dtype_name(inputs)) + " inputs compute in f32)";
}

namespace {

std::string str(std::int64_t x) { return std::to_string(x); }

void expect_qkv(const Tensor& t, const char* argument) {
  if (!t.defined()) throw Error(argument, "a tensor", "an undefined tensor");
  if (t.dim() != 4) {
    throw Error(argument, "4 dimensions [B, T, H, D]",
                str(t.dim()) + " dimensions " + shape_string(t.shape()));
  }
  if (!is_floating(t.dtype())) {
    throw Error(argument, "a floating dtype (f64, f32, bf16, f16)",
                std::string(dtype_name(t.dtype())));
  }
}

void expect_size(const Tensor& t, const char* argument, std::int64_t dim, const char* what,
                 std::int64_t expected, const char* from) {
  if (t.size(dim) != expected) {
    throw Error(argument, std::string(what) + " " + str(expected) + " (from " + from + ")",
                str(t.size(dim)));
  }
}

// A mask or bias must broadcast to [B, Hq, Tq, Tk]: at most 4 dimensions, each aligned from the
// right and either 1 or the full size.
void expect_broadcastable(const Tensor& t, const char* argument, const Shape& target) {
  if (t.dim() > 4) {
    throw Error(argument,
                "at most 4 dimensions broadcastable to [B, Hq, Tq, Tk] = " + shape_string(target),
                shape_string(t.shape()));
  }
  const std::int64_t lead = 4 - t.dim();
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    const std::int64_t size = t.size(d);
    if (size != 1 && size != target[lead + d]) {
      throw Error(argument, "a shape broadcastable to [B, Hq, Tq, Tk] = " + shape_string(target),
                  shape_string(t.shape()));
    }
  }
}

void expect_lengths(const std::vector<std::int64_t>& lengths, const char* argument,
                    std::int64_t batch, std::int64_t limit, const char* limit_name) {
  if (lengths.empty()) return;
  if (static_cast<std::int64_t>(lengths.size()) != batch) {
    throw Error(argument, str(batch) + " lengths (one per batch, B from q)", str(lengths.size()));
  }
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    if (lengths[b] < 0 || lengths[b] > limit) {
      throw Error(std::string(argument) + "[" + str(static_cast<std::int64_t>(b)) + "]",
                  "a length in [0, " + str(limit) + "] (" + limit_name + ")", str(lengths[b]));
    }
  }
}

// Whether two elements of t share memory (an output written through such a view, an expand's
// stride 0 say, would come out as whichever write came last). Strides that nest (sorted, each at
// least the span of the dimensions below it) cannot overlap; other layouts are checked exactly.
bool overlaps_itself(const Tensor& t) {
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (|stride|, size) of sizes > 1
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d) < 0 ? -t.stride(d) : t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t span = 1;  // elements spanned by the dimensions so far
  bool nested = true;
  for (const auto& [stride, size] : dims) {
    if (stride == 0) return true;
    nested = nested && stride >= span;
    span += stride * (size - 1);
  }
  if (nested) return false;
  std::vector<std::int64_t> offsets = {0};
  for (const auto& [stride, size] : dims) {
    const std::size_t before = offsets.size();
    for (std::int64_t n = 1; n < size; ++n) {
      for (std::size_t e = 0; e < before; ++e) offsets.push_back(offsets[e] + n * stride);
    }
  }
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

}  // namespace

DType lse_dtype(DType input) noexcept { return input == DType::f64 ? DType::f64 : DType::f32; }

void expect_tensor(const Tensor& tensor, const char* argument, const Shape& shape, DType dtype) {
  if (!tensor.defined()) throw Error(argument, "a tensor", "an undefined tensor");
  if (tensor.shape() != shape) {
    throw Error(argument, "shape " + shape_string(shape), shape_string(tensor.shape()));
  }
  if (tensor.dtype() != dtype) {
    throw Error(argument, "dtype " + std::string(dtype_name(dtype)),
                std::string(dtype_name(tensor.dtype())));
  }
}

void expect_output(const Tensor& tensor, const char* argument, const Shape& shape, DType dtype,
                   std::initializer_list<const Tensor*> inputs) {
  expect_tensor(tensor, argument, shape, dtype);
  if (overlaps_itself(tensor)) {
    throw Error(argument, "elements in memory of their own (not a view that repeats them)",
                tensor.describe());
  }
  for (const Tensor* input : inputs) {
    if (input != nullptr && input->defined() && tensor.overlaps(*input)) {
      throw Error(argument, "memory of its own (not shared with an input)",
                  "a tensor that overlaps an input");
    }
  }
}

void expect_apart(const char* argument, const char* expected,
                  std::initializer_list<const Tensor*> outputs) {
  for (auto a = outputs.begin(); a != outputs.end(); ++a) {
    for (auto b = a + 1; b != outputs.end(); ++b) {
      if ((*a)->defined() && (*b)->defined() && (*a)->overlaps(**b)) {
        throw Error(argument, expected, "overlapping tensors");
      }
    }
  }
}

kernels::Dims validate_inputs(const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionOptions& options) {
  expect_qkv(q, "q");
  expect_qkv(k, "k");
  expect_qkv(v, "v");
  for (const auto& [t, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    if (t->dtype() != q.dtype()) {
      throw Error(name, "dtype " + std::string(dtype_name(q.dtype())) + " (from q)",
                  std::string(dtype_name(t->dtype())));
    }
  }
  kernels::Dims d;
  d.B = q.size(0);
  d.Tq = q.size(1);
  d.Hq = q.size(2);
  d.D = q.size(3);
  d.Tk = k.size(1);
  d.Hk = k.size(2);
  d.Dv = v.size(3);
  expect_size(k, "k", 0, "batch", d.B, "q");
  expect_size(v, "v", 0, "batch", d.B, "q");
  expect_size(k, "k", 3, "head dim", d.D, "q");
  expect_size(v, "v", 1, "length", d.Tk, "k");
  expect_size(v, "v", 2, "heads", d.Hk, "k");
  if (d.Hq < 1) throw Error("q", "at least 1 head", str(d.Hq));
  if (d.D < 1) throw Error("q", "head dim at least 1", str(d.D));
  if (d.Dv < 1) throw Error("v", "head dim at least 1", str(d.Dv));
  if (d.Hk < 1 || d.Hq % d.Hk != 0) {
    throw Error("k", "a number of heads that divides Hq = " + str(d.Hq) + " (from q)", str(d.Hk));
  }
  // Philox counters hold b * Hq + h, i and j in 32 bits each.
  constexpr std::int64_t kMax32 = std::numeric_limits<std::uint32_t>::max();
  if (d.B * d.Hq > kMax32) throw Error("q", "B * Hq below 2^32", str(d.B * d.Hq));
  if (d.Tq > kMax32) throw Error("q", "a length below 2^32", str(d.Tq));
  if (d.Tk > kMax32) throw Error("k", "a length below 2^32", str(d.Tk));

  const DType inputs = q.dtype();
  if (options.scale && !finite_in_compute(*options.scale, inputs)) {
    throw Error("options.scale", finite_for(inputs, "a finite number"), num(*options.scale));
  }
  if (options.window.left < -1) {
    throw Error("options.window.left", "-1 (unbounded) or a width >= 0", str(options.window.left));
  }
  if (options.window.right < -1) {
    throw Error("options.window.right", "-1 (unbounded) or a width >= 0",
                str(options.window.right));
  }
  expect_lengths(options.key_lengths, "options.key_lengths", d.B, d.Tk, "Tk from k");
  expect_lengths(options.query_lengths, "options.query_lengths", d.B, d.Tq, "Tq from q");
  const Shape scores = {d.B, d.Hq, d.Tq, d.Tk};
  if (options.mask.defined()) {
    if (options.mask.dtype() != DType::boolean) {
      throw Error("options.mask", "dtype bool (true keeps a key)",
                  std::string(dtype_name(options.mask.dtype())));
    }
    expect_broadcastable(options.mask, "options.mask", scores);
  }
  if (options.bias.defined()) {
    if (!is_floating(options.bias.dtype())) {
      throw Error("options.bias", "a floating dtype",
                  std::string(dtype_name(options.bias.dtype())));
    }
    expect_broadcastable(options.bias, "options.bias", scores);
  }
  if (!options.alibi_slopes.empty()) {
    if (static_cast<std::int64_t>(options.alibi_slopes.size()) != d.Hq) {
      throw Error("options.alibi_slopes", str(d.Hq) + " slopes (one per query head)",
                  str(static_cast<std::int64_t>(options.alibi_slopes.size())));
    }
    for (const double slope : options.alibi_slopes) {
      if (!finite_in_compute(slope, inputs)) {
        throw Error("options.alibi_slopes", finite_for(inputs, "finite slopes"), num(slope));
      }
    }
  }
  if (!(options.softcap >= 0.0) || !finite_in_compute(options.softcap, inputs)) {
    throw Error("options.softcap", finite_for(inputs, "0 (off) or a finite cap > 0"),
                num(options.softcap));
  }
  if (!(options.dropout_p >= 0.0 && options.dropout_p < 1.0)) {
    throw Error("options.dropout_p", "a probability in [0, 1)", num(options.dropout_p));
  }
  return d;
}

}  // namespace qkv::attention
