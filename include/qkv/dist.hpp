#pragma once

// Attention beyond one process, over MPI (Open MPI): exact ring attention, the sequence sharded
// across the ranks of a communicator (Liu et al. 2023, "Ring Attention with Blockwise
// Transformers"). Built where CMake finds MPI (the qkv::dist target); this header names no MPI
// type.
//
//   auto world = qkv::dist::Communicator::world();  // initializes MPI if the caller has not
//   // rank r holds rows [r T, (r + 1) T) of the sequence (or Sharding::zigzag's two chunks):
//   // q [B, T, Hq, D], k, v [B, T, Hk, D]
//   auto [out, lse] = qkv::dist::ring_attention(q, k, v, qkv::masks::causal(), world);
//   auto grads = qkv::dist::ring_attention_backward(dout, q, k, v, out, lse,
//                                                   qkv::masks::causal(), world);
//
// Each rank's K and V travel around the ring, one rank a step, sent and received without
// blocking while the fused kernel works on the block in hand; the partial outputs merge exactly
// through their lse (the online softmax's merge), so the result is the single-process one up to
// the order of the sums. The backward sends K and V around again, with the gradients of each
// block accumulating as it travels, sent on while the next step's kernels run and home after the
// last step. The mask and score mods are written
// in global positions (the whole sequence's row and key indices); each step sees them shifted to
// its pair of shards (masks::Shifted).

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include "qkv/attention.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/dist/gradient_sync.hpp"
#include "qkv/flex.hpp"
#include "qkv/masks.hpp"
#include "qkv/tensor.hpp"

namespace qkv::dist {

// An MPI communicator: world() is MPI_COMM_WORLD; from_mpi(&comm) wraps a communicator of the
// caller's (given by the address of its MPI_Comm, whose handle is copied: the communicator must
// not be freed while this is used). Copies share it.
class Communicator {
 public:
  // MPI_COMM_WORLD, initializing MPI (MPI_THREAD_FUNNELED) if it is not yet; MPI is then finalized
  // at exit. The caller's own MPI_Init is kept, and its MPI_Finalize left to it.
  static Communicator world();
  static Communicator from_mpi(const void* mpi_comm);

  int rank() const;
  int size() const;

  struct Impl;  // src/dist/communicator.hpp
  const Impl& impl() const { return *impl_; }

 private:
  explicit Communicator(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Where a ring call's time went on this rank, added to by every call given it: the steps'
// kernels, the waits for a block or its gradients still on the wire after the kernel was done
// (communication the kernels did not hide, and the load they did not balance), and the bytes
// this rank sent.
struct RingStats {
  int steps = 0;
  double compute_seconds = 0.0;
  double wait_seconds = 0.0;
  std::int64_t bytes_sent = 0;
};

// Which rows of the sequence a rank holds. With N ranks and T rows a rank: contiguous, rows [r T,
// (r + 1) T); zigzag, the sequence cut into 2N chunks of T / 2 rows, rank r holding chunks r and
// 2N - 1 - r (its first T / 2 rows, then its last), so that under a causal mask every rank has the
// same work (the layout of Megatron-LM's and Llama 3's context parallelism; Striped Attention,
// Brandon et al. 2023, balances it with rows dealt round-robin instead).
enum class Sharding : std::uint8_t { contiguous, zigzag };

struct RingOptions {
  FlexOptions flex;  // scale and dropout, keyed on global positions (the starts are set per step)
  Sharding sharding = Sharding::contiguous;
  RingStats* stats = nullptr;  // added to where given
};

// Data-parallel training over a communicator: models::TrainOptions::sync = &data_parallel, the
// same model, data and options on every rank, and each rank trains on its share of every batch
// with the update of the whole batch. Sums go in buckets of 2^20 elements, reduced to rank 0 and
// broadcast from it, so that every rank gets the same bits and the parameters stay equal.
class DataParallel final : public GradientSync {
 public:
  explicit DataParallel(Communicator comm) : comm_(std::move(comm)) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void sum(float* x, std::int64_t n) const override;
  void sum(double* x, std::int64_t n) const override;
  double broadcast(double x) const override;

 private:
  Communicator comm_;
};

namespace detail {

// One pair of chunks of a ring step, on tensors in the shards' dtype: the partial result, in the
// compute dtype (chunk_output, chunk_grads), of query rows q [B, rows, Hq, D], whose first is
// global row q0, against keys k [B, Tc, Hk, D], v [B, Tc, Hk, Dv], whose first is global key k0;
// the backward's with those rows' dout, out and lse besides.
using RingForwardStep = std::function<AttentionOutput(
    const Tensor& q, std::int64_t q0, const Tensor& k, const Tensor& v, std::int64_t k0)>;
using RingBackwardStep = std::function<AttentionGrads(
    const Tensor& dout, const Tensor& q, const Tensor& out, const Tensor& lse, std::int64_t q0,
    const Tensor& k, const Tensor& v, std::int64_t k0)>;

// The ring around the steps (src/dist/ring_attention.cpp): q, k, v this rank's shards.
AttentionOutput ring_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const RingOptions& options, const Communicator& comm,
                             const RingForwardStep& step);
AttentionGrads ring_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const RingOptions& options,
                             const Communicator& comm, const RingBackwardStep& step);

// A score mod in global positions seen from a pair of chunks.
template <class S>
struct ShiftedScore {
  S mod;
  std::int64_t q0 = 0, k0 = 0;
  template <class V>
  V operator()(V s, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return mod(s, b, h, i + q0, j + k0);
  }
};

// options for a pair of chunks: dropout drawn at their global positions.
inline FlexOptions chunk_options(FlexOptions options, std::int64_t q0, std::int64_t k0) {
  options.dropout_q_start = q0;
  options.dropout_k_start = k0;
  return options;
}

// A pair's results in the ring's compute dtype: f64 for f64 shards, else f32 (16-bit shards' are
// not rounded before the merge). q [B, rows, Hq, D], k [B, Tc, Hk, D], v [B, Tc, Hk, Dv].
inline DType compute_dtype(const Tensor& q) {
  return q.dtype() == DType::f64 ? DType::f64 : DType::f32;
}
inline AttentionOutput chunk_output(const Tensor& q, const Tensor& v) {
  return {Tensor::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, compute_dtype(q)),
          Tensor::empty({q.size(0), q.size(2), q.size(1)}, compute_dtype(q))};
}
inline AttentionGrads chunk_grads(const Tensor& q, const Tensor& k, const Tensor& v) {
  AttentionGrads g;
  g.dq = Tensor::empty(q.shape(), compute_dtype(q));
  g.dk = Tensor::empty(k.shape(), compute_dtype(q));
  g.dv = Tensor::empty(v.shape(), compute_dtype(q));
  return g;
}

template <class MaskMod>
BlockMask chunk_mask(const MaskMod& mask_mod, const Tensor& q, const Tensor& k, std::int64_t q0,
                     std::int64_t k0) {
  return create_block_mask(masks::shifted(mask_mod, q0, k0), q.size(0), q.size(2), q.size(1),
                           k.size(1));
}

// The ring's passes with a score mod, or with NoScore (flex_attention without one).
struct NoScore {};

template <class MaskMod, class ScoreMod>
AttentionOutput ring_forward_mods(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const MaskMod& mask_mod, const ScoreMod& score_mod,
                                  const Communicator& comm, const RingOptions& options) {
  return ring_forward(
      q, k, v, options, comm,
      [&](const Tensor& qc, std::int64_t q0, const Tensor& kc, const Tensor& vc, std::int64_t k0) {
        AttentionOutput part = chunk_output(qc, vc);
        const BlockMask blocks = chunk_mask(mask_mod, qc, kc, q0, k0);
        const FlexOptions at = chunk_options(options.flex, q0, k0);
        if constexpr (std::is_same_v<ScoreMod, NoScore>) {
          flex_attention(qc, kc, vc, blocks, at, part.out, part.lse);
        } else {
          flex_attention(qc, kc, vc, ShiftedScore<ScoreMod>{score_mod, q0, k0}, blocks, at,
                         part.out, part.lse);
        }
        return part;
      });
}

template <class MaskMod, class ScoreMod>
AttentionGrads ring_backward_mods(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const MaskMod& mask_mod, const ScoreMod& score_mod,
                                  const Communicator& comm, const RingOptions& options) {
  return ring_backward(dout, q, k, v, out, lse, options, comm,
                       [&](const Tensor& dc, const Tensor& qc, const Tensor& oc, const Tensor& lc,
                           std::int64_t q0, const Tensor& kc, const Tensor& vc, std::int64_t k0) {
                         AttentionGrads grads = chunk_grads(qc, kc, vc);
                         const BlockMask blocks = chunk_mask(mask_mod, qc, kc, q0, k0);
                         const FlexOptions at = chunk_options(options.flex, q0, k0);
                         if constexpr (std::is_same_v<ScoreMod, NoScore>) {
                           flex_attention_backward(dc, qc, kc, vc, oc, lc, blocks, at, grads);
                         } else {
                           flex_attention_backward(dc, qc, kc, vc, oc, lc,
                                                   ShiftedScore<ScoreMod>{score_mod, q0, k0},
                                                   blocks, at, {}, grads);
                         }
                         return grads;
                       });
}

}  // namespace detail

// This rank's shard of the sequence (options.sharding: which rows): q [B, T, Hq, D], k [B, T, Hk,
// D], v [B, T, Hk, Dv], the same T and dtype on every rank (T even for zigzag); mask_mod and
// score_mod (qkv/flex.hpp) in global positions. Returns this shard's out [B, T, Hq, Dv] and lse
// [B, Hq, T], those rows of flex_attention over the whole sequence. Every rank of comm calls it.
// With options.flex.dropout_p, each entry is dropped exactly where flex_attention over the whole
// sequence, with the same seed and offset, drops it.
//
// bf16 and f16 shards travel the ring as they are, half the bytes of f32, and each step runs the
// 16-bit kernel on them (bf16 products where the CPU has them), writing its partial results in
// f32: the merge, dq and the gradients that travel with a block stay f32 until the end. out, dq,
// dk and dv come back in the shards' dtype, lse in f32.
template <class MaskMod, class ScoreMod>
AttentionOutput ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, MaskMod mask_mod,
                               ScoreMod score_mod, const Communicator& comm,
                               const RingOptions& options = {}) {
  return detail::ring_forward_mods(q, k, v, mask_mod, score_mod, comm, options);
}
// Without a score mod.
template <class MaskMod>
AttentionOutput ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, MaskMod mask_mod,
                               const Communicator& comm, const RingOptions& options = {}) {
  return detail::ring_forward_mods(q, k, v, mask_mod, detail::NoScore{}, comm, options);
}

// dout [B, T, Hq, Dv] and this rank's q, k, v, out, lse as ring_attention took and returned them,
// with the same mods and options -> this shard's dq, dk, dv (in the shards' dtype).
template <class MaskMod, class ScoreMod>
AttentionGrads ring_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       MaskMod mask_mod, ScoreMod score_mod,
                                       const Communicator& comm, const RingOptions& options = {}) {
  return detail::ring_backward_mods(dout, q, k, v, out, lse, mask_mod, score_mod, comm, options);
}
// Without a score mod.
template <class MaskMod>
AttentionGrads ring_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       MaskMod mask_mod, const Communicator& comm,
                                       const RingOptions& options = {}) {
  return detail::ring_backward_mods(dout, q, k, v, out, lse, mask_mod, detail::NoScore{}, comm,
                                    options);
}

}  // namespace qkv::dist
