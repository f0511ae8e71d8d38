// cross_entropy: log_softmax and the negative log-likelihood fused, with ignore_index and label
// smoothing, as PyTorch's F.cross_entropy(reduction="mean").
#include "kernels/cpu/cross_entropy.hpp"

#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "ops/parallel.hpp"
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
  const Tensor lv = logits.value().contiguous();
  // p [N, C] (softmax of each row, in double), saved for the backward; loss_n per row, the rows
  // split over the threads, and the losses summed in row order, so the result does not depend on
  // the thread count.
  Tensor p = Tensor::empty({N, C}, DType::f64);
  std::vector<double> losses(static_cast<std::size_t>(N));
  ops::dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    ops::for_range(N, ops::rows_per_chunk(C), 1, [&](std::int64_t begin, std::int64_t end) {
      kernels::cpu::cross_entropy_rows(lv.data_as<T>() + begin * C, end - begin, C,
                                       targets.data() + begin, options.ignore_index, eps,
                                       p.data_as<double>() + begin * C, losses.data() + begin);
    });
  });
  double total = 0;
  std::int64_t counted = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    if (targets[n] == options.ignore_index) continue;
    total += losses[static_cast<std::size_t>(n)];
    ++counted;
  }
  // loss = sum_n loss_n / counted (0 / 0 = NaN when every target is ignored, as PyTorch)
  Tensor out = Tensor::full({}, total / static_cast<double>(counted), dtype);
  const std::int64_t ignore = options.ignore_index;
  return detail::record(std::move(out), {&logits}, [=](const Tensor& dout) {
    // loss = sum_n loss_n / counted, loss_n = -(1 - eps) log p[n, t_n] - (eps / C) sum_c log
    // p[n, c]: dloss_n/dlogit_c = p_c - ((1 - eps) [c == t_n] + eps / C), over counted rows
    const double scale = counted > 0 ? dout.to_vector()[0] / static_cast<double>(counted) : 0.0;
    Tensor dx = Tensor::empty({N, C}, dtype);
    ops::dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      ops::for_range(N, ops::rows_per_chunk(C), 1, [&](std::int64_t begin, std::int64_t end) {
        kernels::cpu::cross_entropy_backward_rows(p.data_as<double>() + begin * C, end - begin, C,
                                                  targets.data() + begin, ignore, eps, scale,
                                                  dx.data_as<T>() + begin * C);
      });
    });
    return std::vector<Tensor>{dx};
  });
}

}  // namespace qkv::autograd
