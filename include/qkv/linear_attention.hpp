#pragma once

#include <cstdint>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/tensor.hpp"

namespace qkv {

// Linear attention ("Transformers are RNNs", Katharopoulos et al. 2020): softmax's exp(q . k)
// replaced by phi(q) . phi(k) with a positive feature map phi, so that sum_j phi(k_j) v_j^T is
// formed once (or as a running prefix under a causal mask) and attention costs O(T F Dv) time
// instead of O(Tq Tk D). For query i of batch b and head h and key j, with tk the key length of
// batch b:
//   w_ij = phi(q_i) . phi(k_j) when key j is kept (j < tk and the causal rule of attention.hpp:
//          top_left keeps j <= i, bottom_right j <= i + tk - Tq), else 0
//   out_i = sum_j w_ij v_j / (sum_j w_ij + eps)
// with the k/v head of query head h being h / (Hq / Hk). A row that keeps no key gives out 0 and
// zero gradients. No scale is applied (phi sees q and k as given).
enum class FeatureMap : std::uint8_t {
  elu,  // phi(x) = elu(x) + 1 = x + 1 for x > 0, exp(x) else, element by element: F = D
};

struct LinearOptions {
  FeatureMap feature_map = FeatureMap::elu;
  Causal causal = Causal::none;
  std::vector<std::int64_t> key_lengths;  // [B] valid keys per batch; empty = Tk for all
  // Added to each row's normalizer sum_j w_ij (> 0, finite): it bounds out where the weights are
  // tiny, and makes a row with no kept key 0 / eps = 0.
  double eps = 1e-6;
  // automatic and cpu: the chunked kernel (prefix state of [D, Dv] per k/v head, O(T D Dv));
  // reference: the direct O(Tq Tk D) evaluation of the formula above, in f64.
  Backend backend = Backend::automatic;
};

struct LinearGrads {
  Tensor dq;  // [B, Tq, Hq, D], dtype of q
  Tensor dk;  // [B, Tk, Hk, D]
  Tensor dv;  // [B, Tk, Hk, Dv]
};

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv]; any strides; f32 or f64, one dtype;
// Hq a multiple of Hk -> out [B, Tq, Hq, Dv]. Keys past a batch's length are never read.
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const LinearOptions& options = {});

// dout [B, Tq, Hq, Dv] and the forward's q, k, v and options -> dq, dk, dv (the forward is
// recomputed; nothing of it is saved). Deterministic: the same bits on any thread count.
LinearGrads linear_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const LinearOptions& options = {});

// The recurrent form of causal linear attention, for decoding one token at a time ("Transformers
// are RNNs"): per (batch, k/v head) the state S = sum_j phi(k_j) v_j^T [D, Dv] and z = sum_j
// phi(k_j) [D] over the keys so far, O(D Dv) memory and time per step whatever the length. step()
// gives what linear_attention with Causal::top_left gives the same row of the whole sequence.
// Kept in f64 (the running sums over long sequences).
class LinearState {
 public:
  // B >= 0 sequences, Hk >= 1 k/v heads, D >= 1 and Dv >= 1 (else qkv::Error); eps as
  // LinearOptions::eps.
  LinearState(std::int64_t B, std::int64_t Hk, std::int64_t D, std::int64_t Dv, double eps = 1e-6);
  // q [B, 1, Hq, D], k [B, 1, Hk, D], v [B, 1, Hk, Dv] (f32 or f64, one dtype, any strides; Hq a
  // multiple of Hk) -> out [B, 1, Hq, Dv] in q's dtype: adds the key to the state, then attends
  // q to every key so far. On error the state is unchanged.
  Tensor step(const Tensor& q, const Tensor& k, const Tensor& v);
  std::int64_t length() const noexcept { return length_; }  // keys taken so far

 private:
  std::int64_t B_, Hk_, D_, Dv_;
  double eps_;
  std::int64_t length_ = 0;
  std::vector<double> S_, z_;  // [B, Hk, D, Dv], [B, Hk, D]
};

}  // namespace qkv
