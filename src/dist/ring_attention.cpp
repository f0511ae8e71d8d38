// The ring of qkv::dist::ring_attention (qkv/dist.hpp): each rank's K and V, in one buffer, go
// round the ranks a step at a time, sent and received without blocking while the step's kernel
// runs on the block in hand; the forward merges each step's partial (out, lse) into a running
// one, the backward adds each step's dq into this rank's and each block's dk, dv into the
// gradients that travel with the block.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.hpp"
#include "qkv/dist.hpp"
#include "qkv/error.hpp"

namespace qkv::dist::detail {
namespace {

constexpr int kTagKv = 1;
constexpr int kTagGrads = 2;

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

// K then V of one block of keys, in one contiguous buffer that travels as one message.
struct KvBuffer {
  Tensor storage;  // [numel(k) + numel(v)]
  Tensor k, v;     // views of it, shaped as the shard's k and v, contiguous

  KvBuffer(const Shape& k_shape, const Shape& v_shape, DType dtype, bool zero) {
    std::int64_t nk = 1, nv = 1;
    for (const std::int64_t x : k_shape) nk *= x;
    for (const std::int64_t x : v_shape) nv *= x;
    storage = zero ? Tensor::zeros({nk + nv}, dtype) : Tensor::empty({nk + nv}, dtype);
    auto* base = static_cast<char*>(storage.data());
    k = Tensor::from_blob(base, k_shape, contiguous_strides(k_shape), dtype);
    v = Tensor::from_blob(base + nk * static_cast<std::int64_t>(dtype_size(dtype)), v_shape,
                          contiguous_strides(v_shape), dtype);
  }
  std::int64_t bytes() const {
    return storage.numel() * static_cast<std::int64_t>(dtype_size(storage.dtype()));
  }
};

// The checks every rank makes, then one collective so that either every rank goes on or every
// rank throws (a rank that threw alone would leave the others waiting in the ring).
void check_shards(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& options,
                  const Communicator& comm) {
  std::string problem;
  const auto expect = [&](bool ok, const std::string& what) {
    if (!ok && problem.empty()) problem = what;
  };
  expect(q.defined() && k.defined() && v.defined(), "q, k, v: expected defined tensors");
  if (problem.empty()) {
    expect(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
           "q, k, v: expected 4 dimensions [B, T, H, D]");
  }
  if (problem.empty()) {
    expect(q.dtype() == DType::f32 || q.dtype() == DType::f64,
           "q: expected dtype f32 or f64, got " + std::string(dtype_name(q.dtype())));
    expect(k.size(1) == q.size(1) && v.size(1) == q.size(1),
           "k: expected the shard length of q, " + std::to_string(q.size(1)) + ", got " +
               std::to_string(k.size(1)));
  }
  expect(options.dropout_p == 0.0,
         "options.dropout_p: expected 0 (ring attention's dropout is not keyed on global "
         "positions yet), got " +
             std::to_string(options.dropout_p));
  std::vector<std::int64_t> shape = {problem.empty() ? 1 : 0};
  if (problem.empty()) {
    shape.insert(shape.end(), {q.size(0), q.size(1), q.size(2), q.size(3), k.size(2), v.size(3),
                               static_cast<std::int64_t>(q.dtype())});
  } else {
    shape.resize(8, -1);
  }
  const bool same = same_on_every_rank(comm, shape);
  if (!problem.empty()) throw Error(problem);
  if (!same) {
    throw Error("q, k, v",
                "the same shard shape and dtype on every rank of the communicator (or a valid "
                "shard on every rank)",
                "shards that differ");
  }
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The time and bytes of one call, added to the caller's RingStats at the end.
struct StepClock {
  RingStats sum;
  template <class F>
  auto compute(F&& f) {
    const Clock::time_point start = Clock::now();
    auto result = f();
    sum.compute_seconds += seconds_since(start);
    ++sum.steps;
    return result;
  }
  void wait(Exchange& exchange) {
    const Clock::time_point start = Clock::now();
    exchange.wait();
    sum.wait_seconds += seconds_since(start);
  }
  void sent(std::int64_t bytes) { sum.bytes_sent += bytes; }
  void report(RingStats* stats) const {
    if (stats == nullptr) return;
    stats->steps += sum.steps;
    stats->compute_seconds += sum.compute_seconds;
    stats->wait_seconds += sum.wait_seconds;
    stats->bytes_sent += sum.bytes_sent;
  }
};

template <class T>
void add_into(const Tensor& dst, const Tensor& src) {
  const Tensor s = src.contiguous();
  T* d = dst.data_as<T>();
  const T* x = s.data_as<T>();
  for (std::int64_t n = 0; n < dst.numel(); ++n) d[n] += x[n];
}

// dst += src, dst contiguous, src of its shape and dtype.
void add_into(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == DType::f64) {
    add_into<double>(dst, src);
  } else {
    add_into<float>(dst, src);
  }
}

// (out, lse) <- the merge of (out, lse) and (part_out, part_lse): per row, lse' = log(exp(lse) +
// exp(part_lse)) and out' = exp(lse - lse') out + exp(part_lse - lse') part_out. A row that has
// kept no key yet has lse -inf and out 0, and takes the part as it is. out, part_out [B, T, H,
// Dv]; lse, part_lse [B, H, T]; all contiguous.
template <class T>
void merge(const Tensor& out, const Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const std::int64_t B = out.size(0), Tl = out.size(1), H = out.size(2), Dv = out.size(3);
  T* o = out.data_as<T>();
  T* l = lse.data_as<T>();
  const T* po = part_out.data_as<T>();
  const T* pl = part_lse.data_as<T>();
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t i = 0; i < Tl; ++i) {
        const std::int64_t row = (b * H + h) * Tl + i;
        T* orow = o + ((b * Tl + i) * H + h) * Dv;
        const T* prow = po + ((b * Tl + i) * H + h) * Dv;
        const T l1 = l[row], l2 = pl[row];
        if (l2 == kNegInf) continue;  // the part kept no key of this row
        if (l1 == kNegInf) {
          std::copy_n(prow, Dv, orow);
          l[row] = l2;
          continue;
        }
        const T high = std::max(l1, l2);
        const T merged = high + std::log1p(std::exp(-std::abs(l1 - l2)));
        const T w1 = std::exp(l1 - merged), w2 = std::exp(l2 - merged);
        for (std::int64_t c = 0; c < Dv; ++c) orow[c] = w1 * orow[c] + w2 * prow[c];
        l[row] = merged;
      }
    }
  }
}

}  // namespace

AttentionOutput ring_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const FlexOptions& options, const Communicator& comm,
                             const RingForwardStep& step, RingStats* stats) {
  check_shards(q, k, v, options, comm);
  StepClock clock;
  const int n = comm.size(), r = comm.rank();
  const std::int64_t Tl = q.size(1);
  KvBuffer cur(k.shape(), v.shape(), k.dtype(), false),
      next(k.shape(), v.shape(), k.dtype(), false);
  cur.k.copy_from(k);
  cur.v.copy_from(v);
  AttentionOutput acc;
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;  // the rank whose keys are in hand
    Exchange pass;
    if (s + 1 < n) {
      pass = Exchange(comm, cur.storage.data(), next.storage.data(), cur.bytes(), (r + 1) % n,
                      (r - 1 + n) % n, kTagKv);
      clock.sent(cur.bytes());
    }
    AttentionOutput part = clock.compute([&] { return step(cur.k, cur.v, src * Tl); });
    if (s == 0) {
      acc.out = part.out.contiguous();
      acc.lse = part.lse.contiguous();
    } else if (acc.out.dtype() == DType::f64) {
      merge<double>(acc.out, acc.lse, part.out.contiguous(), part.lse.contiguous());
    } else {
      merge<float>(acc.out, acc.lse, part.out.contiguous(), part.lse.contiguous());
    }
    clock.wait(pass);
    std::swap(cur, next);
  }
  clock.report(stats);
  return acc;
}

AttentionGrads ring_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const FlexOptions& options, const Communicator& comm,
                             const RingBackwardStep& step, RingStats* stats) {
  check_shards(q, k, v, options, comm);
  StepClock clock;
  const int n = comm.size(), r = comm.rank();
  const std::int64_t Tl = q.size(1);
  KvBuffer cur(k.shape(), v.shape(), k.dtype(), false),
      next(k.shape(), v.shape(), k.dtype(), false);
  KvBuffer grads(k.shape(), v.shape(), k.dtype(), true),
      arriving(k.shape(), v.shape(), k.dtype(), false);
  cur.k.copy_from(k);
  cur.v.copy_from(v);
  AttentionGrads result;
  result.dq = Tensor::zeros(q.shape(), q.dtype());
  // The gradients of the block in hand travel on to the next rank at the end of each step, and
  // reach their owner after the last; the next step's kernel runs while they are on the wire,
  // and only then is the next block's arrival awaited.
  Exchange home;
  for (int s = 0; s < n; ++s) {
    const int src = (r - s + n) % n;
    Exchange pass;
    if (s + 1 < n) {
      pass = Exchange(comm, cur.storage.data(), next.storage.data(), cur.bytes(), (r + 1) % n,
                      (r - 1 + n) % n, kTagKv);
      clock.sent(cur.bytes());
    }
    const AttentionGrads part = clock.compute([&] { return step(cur.k, cur.v, src * Tl); });
    if (s > 0) {
      clock.wait(home);  // block src's gradients from the ranks before this one
      std::swap(grads, arriving);
    }
    add_into(result.dq, part.dq);
    add_into(grads.k, part.dk);
    add_into(grads.v, part.dv);
    if (n > 1) {
      home = Exchange(comm, grads.storage.data(), arriving.storage.data(), grads.bytes(),
                      (r + 1) % n, (r - 1 + n) % n, kTagGrads);
      clock.sent(grads.bytes());
    }
    clock.wait(pass);
    std::swap(cur, next);
  }
  if (n > 1) {
    clock.wait(home);  // this rank's own block, home from the last rank it visited
    std::swap(grads, arriving);
  }
  result.dk = grads.k.clone();
  result.dv = grads.v.clone();
  clock.report(stats);
  return result;
}

}  // namespace qkv::dist::detail
