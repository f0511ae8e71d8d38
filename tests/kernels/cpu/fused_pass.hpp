#pragma once

// One forward and backward of a fused case's inputs, for the tests of the bf16 paths: the results,
// as values, and the same pass with the fused path forced (kernels/cpu/bf16_gemm.hpp).

#include <optional>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/fused_case.hpp"
#include "qkv/qkv.hpp"

namespace qkv::testing {

struct Pass {
  AttentionOutput fwd;
  AttentionGrads grads;
};

inline Pass run(const FusedInputs& in, const AttentionOptions& options) {
  Pass r;
  r.fwd = attention_forward(in.q, in.k, in.v, options);
  r.grads = attention_backward(in.dout, in.q, in.k, in.v, r.fwd.out, r.fwd.lse, options);
  return r;
}

// run with the fused path forced to path (nullopt: none, the f32 products) for its duration.
inline Pass run_forced(std::optional<kernels::cpu::MatrixPath> path, const FusedInputs& in,
                       const AttentionOptions& options) {
  const kernels::cpu::ForcedFusedPath forced(path);
  return run(in, options);
}

// run on one thread, then the thread count back as it was (also where run throws).
inline Pass run_on_one_thread(const FusedInputs& in, const AttentionOptions& options) {
  struct OneThread {
    int threads = num_threads();
    OneThread() { set_num_threads(1); }
    ~OneThread() { set_num_threads(threads); }
  } one;
  return run(in, options);
}

inline std::vector<std::vector<double>> grads_of(const Pass& r) {
  return {r.grads.dq.to_vector(), r.grads.dk.to_vector(), r.grads.dv.to_vector()};
}

}  // namespace qkv::testing
