// The smallest tour of qkv: causal self-attention with GQA and a sliding window, its backward,
// and a look at the weights. Prints what it computed and checks one identity on the way.
#include <cmath>
#include <cstdio>
#include <qkv/qkv.hpp>

int main() {
  // q [B=1, Tq=6, Hq=4, D=16]; k, v [B=1, Tk=6, Hk=2, D=16]: two query heads share each k/v head.
  qkv::Generator generator(2026);
  const qkv::Tensor q = qkv::Tensor::randn({1, 6, 4, 16}, generator);
  const qkv::Tensor k = qkv::Tensor::randn({1, 6, 2, 16}, generator);
  const qkv::Tensor v = qkv::Tensor::randn({1, 6, 2, 16}, generator);

  qkv::AttentionOptions options;
  options.causal = qkv::Causal::bottom_right;
  options.window = {2, 0};  // each query sees itself and the two keys before it

  const qkv::AttentionOutput fwd = qkv::attention_forward(q, k, v, options);
  std::printf("out %s, lse %s\n", fwd.out.describe().c_str(), fwd.lse.describe().c_str());

  const qkv::Tensor p = qkv::attention_weights(q, k, options);
  std::printf("attention weights of head 0 (row i = query, column j = key):\n");
  for (std::int64_t i = 0; i < 6; ++i) {
    double row_sum = 0;
    for (std::int64_t j = 0; j < 6; ++j) {
      std::printf(" %5.3f", p.at({0, 0, i, j}));
      row_sum += p.at({0, 0, i, j});
    }
    std::printf("   sum %.6f\n", row_sum);
  }

  // Backward of loss = sum(out): dout is all ones.
  const qkv::Tensor dout = qkv::Tensor::full(fwd.out.shape(), 1.0);
  const qkv::AttentionGrads grads =
      qkv::attention_backward(dout, q, k, v, fwd.out, fwd.lse, options);
  // d(sum out)/dv_j[c] = sum over queries and heads of P_ij; every row of P sums to 1, so each
  // of the Dv = 16 columns of dv sums to Tq * Hq = 24.
  double dv_sum = 0;
  for (const double x : grads.dv.to_vector()) dv_sum += x;
  std::printf("dq %s, dk %s, dv %s; sum(dv) / Dv = %.4f (expected Tq * Hq = 24)\n",
              grads.dq.describe().c_str(), grads.dk.describe().c_str(), grads.dv.describe().c_str(),
              dv_sum / 16);
  return std::fabs(dv_sum / 16 - 24) < 1e-4 ? 0 : 1;
}
