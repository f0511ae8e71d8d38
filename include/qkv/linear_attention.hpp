#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/tensor.hpp"

namespace qkv {

// Linear attention ("Transformers are RNNs", Katharopoulos et al. 2020): softmax's exp(q . k)
// replaced by phi(q) . phi(k) with a positive feature map phi, so that sum_j phi(k_j) v_j^T is
// formed once (or as a running prefix under a causal mask) and attention costs O(T F Dv) time
// instead of O(Tq Tk D). For query i of batch b and head h and key j, with tk the key length of
// batch b:
//   w_ij = phi(q_i) . phi_i(k_j) when key j is kept (j < tk and the causal rule of attention.hpp:
//          top_left keeps j <= i, bottom_right j <= i + tk - Tq), else 0
//   out_i = sum_j w_ij v_j / (sum_j w_ij + eps)
// with the k/v head of query head h being h / (Hq / Hk). A row that keeps no key gives out 0 and
// zero gradients.
enum class FeatureMap : std::uint8_t {
  // phi(x) = elu(x) + 1 = x + 1 for x > 0, exp(x) else, element by element: F = D. No scale is
  // applied (phi sees q and k as given).
  elu,
  // Performer's FAVOR+ (Choromanski et al. 2021): F positive orthogonal random features whose
  // products estimate the softmax kernel, E[phi(q) . phi(k)] = exp(s q . k), without bias. With
  // the rows w_f of favor_features(D, F, seed) and x = sqrt(s) q, y = sqrt(s) k:
  //   phi(q_i)_f = exp(w_f . x_i - max_f' w_f' . x_i) / sqrt(F)
  //   phi_i(k_j)_f = exp(w_f . y_j - |y_j|^2 / 2 - m_i) / sqrt(F)
  // where m_i is the largest w_f . y_j - |y_j|^2 / 2 over the features and the keys row i keeps.
  // These are Performer's stabilizers: every feature is at most 1 / sqrt(F), so nothing
  // overflows; the shifts cancel between num and den and reach out only through eps (m_i depends
  // on no key row i does not keep, so the causal form stays causal and the recurrent form gives
  // the same rows). The backward holds both shifts constant, as Performer's implementation does.
  favor,
};

struct LinearOptions {
  FeatureMap feature_map = FeatureMap::elu;
  // favor: F, the number of random features (>= 1); 0 = Performer's default D ln D (at least 1).
  // Must be 0 for elu.
  std::int64_t num_features = 0;
  // favor: the draw of the features (favor_features); another seed redraws them.
  std::uint64_t seed = 0;
  // favor: the softmax scale s whose kernel exp(s q . k) the features estimate (> 0, finite);
  // unset = 1 / sqrt(D). Must be unset for elu.
  std::optional<double> scale;
  Causal causal = Causal::none;
  std::vector<std::int64_t> key_lengths;  // [B] valid keys per batch; empty = Tk for all
  // Added to each row's normalizer sum_j w_ij (> 0, finite): it bounds out where the weights are
  // tiny, and makes a row with no kept key 0 / eps = 0.
  double eps = 1e-6;
  // automatic and cpu: the chunked kernel (prefix state of [F, Dv] per k/v head, O(T F Dv));
  // reference: the direct O(Tq Tk F) evaluation of the formula above, in f64.
  Backend backend = Backend::automatic;
};

struct LinearGrads {
  Tensor dq;  // [B, Tq, Hq, D], dtype of q
  Tensor dk;  // [B, Tk, Hk, D]
  Tensor dv;  // [B, Tk, Hk, Dv]
};

// FAVOR+'s random features for head size D >= 1: F >= 1 rows [F, D] in f64, drawn from the seed.
// Rows come in blocks of D that are orthonormal within a block (Gram-Schmidt on a Gaussian
// matrix, the last block cut short), each row then scaled to the length of an independent
// Gaussian vector in D dimensions, so that each row is distributed as N(0, I_D) ("positive
// orthogonal random features"). The same (D, F, seed) gives the same bits everywhere.
Tensor favor_features(std::int64_t D, std::int64_t F, std::uint64_t seed);

// F for these options and head size D: num_features, or the default when it is 0 (elu: D).
std::int64_t linear_feature_count(const LinearOptions& options, std::int64_t D);

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv]; any strides; one floating dtype; Hq a
// multiple of Hk -> out [B, Tq, Hq, Dv] in that dtype. Keys past a batch's length are never read.
// bf16 and f16 are storage only: the inputs are widened to f32, the kernel computes in f32, and
// the results are rounded back (no 16-bit products yet).
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const LinearOptions& options = {});

// dout [B, Tq, Hq, Dv] and the forward's q, k, v and options -> dq, dk, dv (the forward is
// recomputed; nothing of it is saved). Deterministic: the same bits on any thread count.
LinearGrads linear_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const LinearOptions& options = {});

// The recurrent form of causal linear attention, for decoding one token at a time ("Transformers
// are RNNs"): per (batch, k/v head) the state S = sum_j phi(k_j) v_j^T [F, Dv] and z = sum_j
// phi(k_j) [F] over the keys so far, O(F Dv) memory and time per step whatever the length. step()
// gives what linear_attention with Causal::top_left gives the same row of the whole sequence.
// Kept in f64 (the running sums over long sequences); under favor the state is kept relative to
// the largest key logit so far (m_i above) and rescaled when a key raises it.
class LinearState {
 public:
  // B >= 0 sequences, Hk >= 1 k/v heads, D >= 1 and Dv >= 1 (else qkv::Error). From options: the
  // feature map, num_features, seed, scale and eps, checked as linear_attention checks them;
  // causal, key_lengths and backend must keep their defaults (the state is causal by nature).
  LinearState(std::int64_t B, std::int64_t Hk, std::int64_t D, std::int64_t Dv,
              const LinearOptions& options = {});
  // q [B, 1, Hq, D], k [B, 1, Hk, D], v [B, 1, Hk, Dv] (one floating dtype, any strides; Hq a
  // multiple of Hk) -> out [B, 1, Hq, Dv] in q's dtype: adds the key to the state, then attends
  // q to every key so far. On error the state is unchanged.
  Tensor step(const Tensor& q, const Tensor& k, const Tensor& v);
  // k [B, T, Hk, D], v [B, T, Hk, Dv] (one floating dtype, any strides): adds T keys to the
  // state without attending (a prompt before decoding). On error the state is unchanged.
  void append(const Tensor& k, const Tensor& v);
  std::int64_t length() const noexcept { return length_; }  // keys taken so far

 private:
  std::int64_t B_, Hk_, D_, Dv_, F_;
  LinearOptions options_;
  std::vector<double> omega_;  // favor: the features times sqrt(scale) [F, D]
  std::int64_t length_ = 0;
  std::vector<double> S_, z_;     // [B, Hk, F, Dv], [B, Hk, F]
  std::vector<double> unit_;      // favor: [B, Hk] the shift S and z are kept relative to
  std::vector<double> features_;  // [F] one key's or query's features (take, attend)

  std::pair<Tensor, Tensor> keys_of(const Tensor& k, const Tensor& v, std::int64_t T) const;
  void take(std::int64_t b, std::int64_t hk, const double* k, const double* v);
  void attend(std::int64_t b, std::int64_t hk, const double* q, double* out);
};

}  // namespace qkv
