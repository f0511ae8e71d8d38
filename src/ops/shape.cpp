// concat: tensors joined along one dimension; pack_rows and unpack_rows: a padded batch's valid
// rows gathered and scattered back.
#include <string>
#include <vector>

#include "ops/parallel.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/ops.hpp"

namespace qkv::ops {

// xs[i] [..., n_i, ...] -> [..., sum n_i, ...]
Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim) {
  if (xs.empty()) throw Error("xs", "at least one tensor", "none");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::string name = "xs[" + std::to_string(i) + "]";
    expect_any_floating(xs[i], name.c_str());
    expect_same_dtype(xs[0], xs[i], name.c_str());
  }
  const std::int64_t d = wrap_dim(dim, xs[0].dim(), "dim");
  Shape shape = xs[0].shape();
  shape[d] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    Shape expected = xs[0].shape();
    expected[d] = xs[i].size(d);
    if (xs[i].shape() != expected) {
      throw Error(
          "xs[" + std::to_string(i) + "]",
          "shape " + shape_string(expected) + " (as xs[0] but along dim " + std::to_string(d) + ")",
          shape_string(xs[i].shape()));
    }
    shape[d] += xs[i].size(d);
  }
  // out[..., start_i : start_i + n_i, ...] = xs[i]
  Tensor out = Tensor::empty(shape, xs[0].dtype());
  std::int64_t start = 0;
  for (const Tensor& x : xs) {
    out.slice(d, start, start + x.size(d)).copy_from(x);
    start += x.size(d);
  }
  return out;
}

namespace {

// Each sequence's first packed row: starts[b] = lengths[0] + ... + lengths[b - 1], and their sum
// at starts[B]; each length checked to lie in [0, T].
std::vector<std::int64_t> starts_of(const std::vector<std::int64_t>& lengths, std::int64_t T) {
  std::vector<std::int64_t> starts(lengths.size() + 1, 0);
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    if (lengths[b] < 0 || lengths[b] > T) {
      throw Error("lengths", "each in [0, " + std::to_string(T) + "]", std::to_string(lengths[b]));
    }
    starts[b + 1] = starts[b] + lengths[b];
  }
  return starts;
}

// fn(b) for every sequence b in [0, B), spread over the threads where the batch holds more than
// kChunkElements elements: each sequence's rows are their own. On one thread, these copies left
// the other waiting in qkv demo's translator's packed encoder; spread, greedy decoding ran
// 1.010-1.040x faster (`qkv bench --training`, 5 alternated pairs, AMD EPYC Zen 4, 2026-11-29).
template <class Fn>
void each_sequence(std::int64_t B, std::int64_t elements, Fn&& fn) {
  for_range(B, elements <= kChunkElements ? B : 0, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) fn(b);
  });
}

}  // namespace

// x [B, T, ...] -> [n, ...]
Tensor pack_rows(const Tensor& x, const std::vector<std::int64_t>& lengths) {
  expect_any_floating(x, "x");
  if (x.dim() < 2) throw Error("x", "[B, T, ...]", shape_string(x.shape()));
  const std::int64_t B = x.size(0), T = x.size(1);
  if (static_cast<std::int64_t>(lengths.size()) != B) {
    throw Error("lengths", std::to_string(B) + " lengths (x's batch)",
                std::to_string(lengths.size()));
  }
  const std::vector<std::int64_t> starts = starts_of(lengths, T);
  Shape shape(x.shape().begin() + 1, x.shape().end());
  shape[0] = starts.back();
  Tensor out = Tensor::empty(shape, x.dtype());
  each_sequence(B, x.numel(), [&](std::int64_t b) {
    const std::int64_t at = starts[static_cast<std::size_t>(b)];
    const std::int64_t l = lengths[static_cast<std::size_t>(b)];
    // out[at : at + l] = x[b, :l]
    if (l > 0) out.slice(0, at, at + l).unsqueeze(0).copy_from(x.slice(0, b, b + 1).slice(1, 0, l));
  });
  return out;
}

// x [n, ...] -> [B, T, ...]
Tensor unpack_rows(const Tensor& x, const std::vector<std::int64_t>& lengths, std::int64_t T) {
  expect_any_floating(x, "x");
  if (T < 0) throw Error("T", ">= 0", std::to_string(T));
  const std::vector<std::int64_t> starts = starts_of(lengths, T);
  const std::int64_t n = starts.back();
  if (x.dim() < 1 || x.size(0) != n) {
    throw Error("x", "[" + std::to_string(n) + ", ...] (the sum of lengths)",
                shape_string(x.shape()));
  }
  const auto B = static_cast<std::int64_t>(lengths.size());
  Shape shape = {B, T};
  shape.insert(shape.end(), x.shape().begin() + 1, x.shape().end());
  Tensor out = Tensor::empty(shape, x.dtype());
  each_sequence(B, out.numel(), [&](std::int64_t b) {
    const std::int64_t at = starts[static_cast<std::size_t>(b)];
    const std::int64_t l = lengths[static_cast<std::size_t>(b)];
    const Tensor row = out.slice(0, b, b + 1);  // [1, T, ...]
    // out[b, :l] = x[at : at + l]; out[b, l:] = 0
    if (l > 0) row.slice(1, 0, l).copy_from(x.slice(0, at, at + l).unsqueeze(0));
    if (l < T) row.slice(1, l, T).fill(0.0);
  });
  return out;
}

}  // namespace qkv::ops
