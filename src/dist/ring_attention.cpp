// The ring of qkv::dist::ring_attention (qkv/dist.hpp): each rank's K and V, in one buffer, go
// round the ranks a step at a time, sent and received without blocking while the step's kernel
// runs on the block in hand; the forward merges each step's partial (out, lse) into a running
// one, the backward adds each step's dq into this rank's and each block's dk, dv into the
// gradients that travel with the block.
#include <algorithm>
#include <bit>
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
    k = Tensor::from_blob(base, k_shape, dtype);
    v = Tensor::from_blob(base + nk * static_cast<std::int64_t>(dtype_size(dtype)), v_shape, dtype);
  }
  std::int64_t bytes() const {
    return storage.numel() * static_cast<std::int64_t>(dtype_size(storage.dtype()));
  }
};

// The checks every rank makes, then one collective so that either every rank goes on or every
// rank throws (a rank that threw alone would leave the others waiting in the ring).
void check_shards(const Tensor& q, const Tensor& k, const Tensor& v, const RingOptions& options,
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
    expect(is_floating(q.dtype()),
           "q: expected dtype f64, f32, bf16 or f16, got " + std::string(dtype_name(q.dtype())));
    expect(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
           "k, v: expected the dtype of q, " + std::string(dtype_name(q.dtype())) + ", got " +
               std::string(dtype_name(k.dtype())) + " and " + std::string(dtype_name(v.dtype())));
    expect(k.size(1) == q.size(1) && v.size(1) == q.size(1),
           "k: expected the shard length of q, " + std::to_string(q.size(1)) + ", got " +
               std::to_string(k.size(1)));
    expect(options.sharding != Sharding::zigzag || q.size(1) % 2 == 0,
           "q: expected an even shard length for zigzag sharding (two chunks), got " +
               std::to_string(q.size(1)));
  }
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
  // Options that differ would not hang the ring, but would give each rank a different problem.
  const FlexOptions& f = options.flex;
  if (!same_on_every_rank(
          comm,
          {std::bit_cast<std::int64_t>(f.dropout_p), static_cast<std::int64_t>(f.seed),
           static_cast<std::int64_t>(f.offset), static_cast<std::int64_t>(options.sharding)})) {
    throw Error("options", "the same sharding, dropout_p, seed and offset on every rank",
                "options that differ");
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

// A run of a shard's rows: local rows [local, local + length), global rows [global, ...).
struct Chunk {
  std::int64_t local = 0, global = 0, length = 0;
};

// The chunks of rank `rank`'s shard of T rows (RingOptions::sharding).
std::vector<Chunk> chunks_of(int rank, int ranks, std::int64_t T, Sharding sharding) {
  if (sharding == Sharding::contiguous) return {{0, rank * T, T}};
  const std::int64_t c = T / 2;
  return {{0, rank * c, c}, {c, (2 * ranks - 1 - rank) * c, c}};
}

// dst rows [row, row + src.size(1)) += src: dst [B, T, H, D] contiguous, src [B, rows, H, D].
template <class T>
void add_rows(const Tensor& dst, std::int64_t row, const Tensor& src) {
  const Tensor s = src.contiguous();
  const std::int64_t B = dst.size(0), Tl = dst.size(1), rows = s.size(1);
  const std::int64_t width = dst.size(2) * dst.size(3);
  T* d = dst.data_as<T>();
  const T* x = s.data_as<T>();
  for (std::int64_t b = 0; b < B; ++b) {
    T* to = d + (b * Tl + row) * width;
    const T* from = x + b * rows * width;
    for (std::int64_t n = 0; n < rows * width; ++n) to[n] += from[n];
  }
}

void add_rows(const Tensor& dst, std::int64_t row, const Tensor& src) {
  if (dst.dtype() == DType::f64) {
    add_rows<double>(dst, row, src);
  } else {
    add_rows<float>(dst, row, src);
  }
}

// Rows [row, row + part_out.size(1)) of (out, lse) <- their merge with (part_out, part_lse): per
// row, lse' = log(exp(lse) + exp(part_lse)) and out' = exp(lse - lse') out + exp(part_lse - lse')
// part_out. A row that has kept no key yet has lse -inf and out 0 and takes the part as it is.
// out [B, T, H, Dv] and lse [B, H, T] contiguous; part_out [B, rows, H, Dv], part_lse [B, H, rows].
template <class T>
void merge_rows(const Tensor& out, const Tensor& lse, std::int64_t row, const Tensor& part_out,
                const Tensor& part_lse) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const Tensor po_t = part_out.contiguous(), pl_t = part_lse.contiguous();
  const std::int64_t B = out.size(0), Tl = out.size(1), H = out.size(2), Dv = out.size(3);
  const std::int64_t rows = po_t.size(1);
  T* o = out.data_as<T>();
  T* l = lse.data_as<T>();
  const T* po = po_t.data_as<T>();
  const T* pl = pl_t.data_as<T>();
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t i = 0; i < rows; ++i) {
        T* orow = o + ((b * Tl + row + i) * H + h) * Dv;
        const T* prow = po + ((b * rows + i) * H + h) * Dv;
        T& l1 = l[(b * H + h) * Tl + row + i];
        const T l2 = pl[(b * H + h) * rows + i];
        if (l2 == kNegInf) continue;  // the part kept no key of this row
        if (l1 == kNegInf) {
          std::copy_n(prow, Dv, orow);
          l1 = l2;
          continue;
        }
        const T merged = std::max(l1, l2) + std::log1p(std::exp(-std::abs(l1 - l2)));
        const T w1 = std::exp(l1 - merged), w2 = std::exp(l2 - merged);
        for (std::int64_t c = 0; c < Dv; ++c) orow[c] = w1 * orow[c] + w2 * prow[c];
        l1 = merged;
      }
    }
  }
}

void merge_rows(const AttentionOutput& acc, std::int64_t row, const AttentionOutput& part) {
  if (acc.out.dtype() == DType::f64) {
    merge_rows<double>(acc.out, acc.lse, row, part.out, part.lse);
  } else {
    merge_rows<float>(acc.out, acc.lse, row, part.out, part.lse);
  }
}

// x as an owned tensor of dtype: a copy, also where the dtype is x's (x may be a view of a
// buffer about to go).
Tensor owned(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x.clone() : x.to(dtype); }

// What both passes keep: the K/V block in hand and the one arriving (in the shards' dtype, as they
// travel), the dtype of the partial results (compute_dtype), where this rank sits in the ring, and
// the clock.
struct Ring {
  const Communicator& comm;
  int n, r;
  std::int64_t Tl;
  DType compute;
  StepClock clock;
  KvBuffer cur, next;

  Ring(const Communicator& c, const Tensor& q, const Tensor& k, const Tensor& v)
      : comm(c),
        n(c.size()),
        r(c.rank()),
        Tl(q.size(1)),
        compute(compute_dtype(q)),
        cur(k.shape(), v.shape(), k.dtype(), false),
        next(k.shape(), v.shape(), k.dtype(), false) {
    cur.k.copy_from(k);
    cur.v.copy_from(v);
  }
  int source(int step) const { return (r - step + n) % n; }  // the rank whose keys are in hand
  // Sends `from` on to the next rank while `into` receives the previous rank's.
  Exchange send_on(const KvBuffer& from, KvBuffer& into, int tag) {
    clock.sent(from.bytes());
    return Exchange(comm, from.storage.data(), into.storage.data(), from.bytes(), (r + 1) % n,
                    (r - 1 + n) % n, tag);
  }
  // The block in hand passed on and the next received, but after the last step.
  Exchange pass(int step) { return step + 1 < n ? send_on(cur, next, kTagKv) : Exchange(); }
  // After the step's kernels: the next block in hand.
  void advance(Exchange& pass) {
    clock.wait(pass);
    std::swap(cur, next);
  }
};

}  // namespace

AttentionOutput ring_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const RingOptions& options, const Communicator& comm,
                             const RingForwardStep& step) {
  check_shards(q, k, v, options, comm);
  Ring ring(comm, q, k, v);
  AttentionOutput acc;
  acc.out = Tensor::zeros({q.size(0), ring.Tl, q.size(2), v.size(3)}, ring.compute);
  acc.lse = Tensor::full({q.size(0), q.size(2), ring.Tl}, -std::numeric_limits<double>::infinity(),
                         ring.compute);
  const std::vector<Chunk> rows = chunks_of(ring.r, ring.n, ring.Tl, options.sharding);
  for (int s = 0; s < ring.n; ++s) {
    Exchange pass = ring.pass(s);
    for (const Chunk& kc : chunks_of(ring.source(s), ring.n, ring.Tl, options.sharding)) {
      const Tensor kb = ring.cur.k.slice(1, kc.local, kc.local + kc.length);
      const Tensor vb = ring.cur.v.slice(1, kc.local, kc.local + kc.length);
      for (const Chunk& qc : rows) {
        const AttentionOutput part = ring.clock.compute([&] {
          return step(q.slice(1, qc.local, qc.local + qc.length), qc.global, kb, vb, kc.global);
        });
        merge_rows(acc, qc.local, part);
      }
    }
    ring.advance(pass);
  }
  ring.clock.report(options.stats);
  acc.out = acc.out.to(q.dtype());  // itself where the dtypes match
  return acc;
}

AttentionGrads ring_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const RingOptions& options,
                             const Communicator& comm, const RingBackwardStep& step) {
  check_shards(q, k, v, options, comm);
  Ring ring(comm, q, k, v);
  KvBuffer grads(k.shape(), v.shape(), ring.compute, true),
      arriving(k.shape(), v.shape(), ring.compute, false);
  Tensor dq = Tensor::zeros(q.shape(), ring.compute);
  const std::vector<Chunk> rows = chunks_of(ring.r, ring.n, ring.Tl, options.sharding);
  // The gradients of the block in hand travel on to the next rank at the end of each step, and
  // reach their owner after the last; the next step's kernels run while they are on the wire,
  // and only then is the next block's arrival awaited.
  Exchange home;
  // This step's dk, dv of the block in hand, added into its travelling gradients once they are
  // here (a step's pairs write theirs one at a time, so no more than one pair's are kept beside).
  KvBuffer local(k.shape(), v.shape(), ring.compute, false);
  for (int s = 0; s < ring.n; ++s) {
    Exchange pass = ring.pass(s);
    local.storage.fill(0.0);
    for (const Chunk& kc : chunks_of(ring.source(s), ring.n, ring.Tl, options.sharding)) {
      const Tensor kb = ring.cur.k.slice(1, kc.local, kc.local + kc.length);
      const Tensor vb = ring.cur.v.slice(1, kc.local, kc.local + kc.length);
      for (const Chunk& qc : rows) {
        const auto rows_of = [&](const Tensor& x, std::int64_t dim) {
          return x.slice(dim, qc.local, qc.local + qc.length);
        };
        const AttentionGrads part = ring.clock.compute([&] {
          return step(rows_of(dout, 1), rows_of(q, 1), rows_of(out, 1), rows_of(lse, 2), qc.global,
                      kb, vb, kc.global);
        });
        add_rows(dq, qc.local, part.dq);
        add_rows(local.k, kc.local, part.dk);
        add_rows(local.v, kc.local, part.dv);
      }
    }
    if (s > 0) {
      ring.clock.wait(home);  // this block's gradients from the ranks before this one
      std::swap(grads, arriving);
    }
    add_rows(grads.k, 0, local.k);
    add_rows(grads.v, 0, local.v);
    if (ring.n > 1) home = ring.send_on(grads, arriving, kTagGrads);
    ring.advance(pass);
  }
  if (ring.n > 1) {
    ring.clock.wait(home);  // this rank's own block, home from the last rank it visited
    std::swap(grads, arriving);
  }
  AttentionGrads result;
  result.dq = dq.to(q.dtype());
  result.dk = owned(grads.k, k.dtype());
  result.dv = owned(grads.v, v.dtype());
  ring.clock.report(options.stats);
  return result;
}

}  // namespace qkv::dist::detail
