// cross_entropy: log_softmax and the negative log-likelihood fused, with ignore_index and label
// smoothing, as PyTorch's F.cross_entropy(reduction="mean").
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "ops/tensor_math.hpp"
#include "qkv/autograd/ops.hpp"

namespace qkv::autograd {

// logits [N, C], targets [N] -> []
Var cross_entropy(const Var& logits, const std::vector<std::int64_t>& targets,
                  const CrossEntropyOptions& options) {
  ops::expect_floating(logits.value(), "logits");
  if (logits.dim() != 2) throw Error("logits", "2 dimensions [N, C]", logits.value().describe());
  const std::int64_t N = logits.size(0), C = logits.size(1);
  if (static_cast<std::int64_t>(targets.size()) != N) {
    throw Error("targets", std::to_string(N) + " targets (the rows of logits)",
                std::to_string(targets.size()));
  }
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t t = targets[n];
    if (t != options.ignore_index && (t < 0 || t >= C)) {
      throw Error("targets[" + std::to_string(n) + "]",
                  "a class in [0, " + std::to_string(C) + ") or ignore_index " +
                      std::to_string(options.ignore_index),
                  std::to_string(t));
    }
  }
  const double eps = options.label_smoothing;
  if (!(eps >= 0 && eps <= 1)) {
    throw Error("label_smoothing", "a number in [0, 1]", std::to_string(eps));
  }
  const DType dtype = logits.dtype();
  // log p, saved for the backward (whose softmax is exp of it).
  Tensor log_p = Tensor::empty({N, C}, DType::f64);
  double total = 0;
  std::int64_t counted = 0;
  const Tensor lv = logits.value().to(DType::f64).contiguous();
  {
    const double* x = lv.data_as<double>();
    double* lp = log_p.data_as<double>();
    for (std::int64_t n = 0; n < N; ++n) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t c = 0; c < C; ++c) m = std::fmax(m, x[n * C + c]);
      double sum = 0;
      for (std::int64_t c = 0; c < C; ++c) sum += std::exp(x[n * C + c] - m);
      double sum_log_p = 0;
      for (std::int64_t c = 0; c < C; ++c) {
        lp[n * C + c] = x[n * C + c] - m - std::log(sum);
        sum_log_p += lp[n * C + c];
      }
      if (targets[n] == options.ignore_index) continue;
      // loss_n = -(1 - eps) log p[n, t_n] - (eps / C) sum_c log p[n, c]
      total += -(1 - eps) * lp[n * C + targets[n]] - eps / C * sum_log_p;
      ++counted;
    }
  }
  // loss = sum_n loss_n / counted (0 / 0 = NaN when every target is ignored, as PyTorch)
  Tensor out = Tensor::full({}, total / static_cast<double>(counted), dtype);
  const std::int64_t ignore = options.ignore_index;
  return detail::record(std::move(out), {&logits}, [=](const Tensor& dout) {
    const double g = dout.to_vector()[0];
    Tensor dx = Tensor::zeros({N, C}, DType::f64);
    const double* lp = log_p.data_as<double>();
    double* d = dx.data_as<double>();
    for (std::int64_t n = 0; n < N && counted > 0; ++n) {
      if (targets[n] == ignore) continue;
      // dloss_n/dlogit_c = p_c - ((1 - eps) [c == t_n] + eps / C), over counted rows
      for (std::int64_t c = 0; c < C; ++c) {
        const double target = (c == targets[n] ? 1 - eps : 0.0) + eps / C;
        d[n * C + c] = g * (std::exp(lp[n * C + c]) - target) / static_cast<double>(counted);
      }
    }
    return std::vector<Tensor>{dx.to(dtype)};
  });
}

}  // namespace qkv::autograd
