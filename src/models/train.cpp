// The translator's training loop: length-bucketed batches, teacher forcing, AdamW.
#include "qkv/models/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/nn/optim.hpp"
#include "qkv/philox.hpp"

namespace qkv::models {

namespace ag = autograd;

namespace {

// How many elements the gradients of `parameters` in `dtype` hold.
std::int64_t gradient_elements(const std::vector<Var>& parameters, DType dtype) {
  std::int64_t size = 0;
  for (const Var& p : parameters) {
    if (p.grad().defined() && p.grad().dtype() == dtype) size += p.grad().numel();
  }
  return size;
}

// The gradients of `parameters` in `dtype` summed across sync's ranks, each rank's weighted by
// `weight` (its share of the batch's target tokens): one flat buffer (`flat`, kept from step to
// step, `size` elements), summed in one call (which DataParallel splits into buckets).
template <class T>
void sum_gradients(const std::vector<Var>& parameters, DType dtype, std::int64_t size,
                   double weight, const dist::GradientSync& sync, std::vector<T>& flat) {
  flat.resize(static_cast<std::size_t>(size));
  const T w = static_cast<T>(weight);
  std::size_t at = 0;
  for (const Var& p : parameters) {
    if (!p.grad().defined() || p.grad().dtype() != dtype) continue;
    const Tensor g = p.grad().contiguous();
    const T* x = g.data_as<T>();
    for (std::int64_t n = 0; n < g.numel(); ++n) flat[at + n] = x[n] * w;
    at += static_cast<std::size_t>(g.numel());
  }
  sync.sum(flat.data(), size);
  at = 0;
  for (const Var& p : parameters) {
    if (!p.grad().defined() || p.grad().dtype() != dtype) continue;
    Tensor grad = p.grad();  // shares the gradient's storage
    const Tensor summed = Tensor::from_blob(flat.data() + at, grad.shape(), dtype);
    grad.copy_from(summed);
    at += static_cast<std::size_t>(grad.numel());
  }
}

}  // namespace

std::vector<std::vector<std::size_t>> epoch_batches(const std::vector<Example>& examples,
                                                    std::int64_t batch_size, Generator& g) {
  if (batch_size < 1) throw Error("batch_size", ">= 1", std::to_string(batch_size));
  std::vector<std::size_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[g.next_u32() % i]);
  const std::size_t batch = static_cast<std::size_t>(batch_size), pool = 32 * batch;
  std::vector<std::vector<std::size_t>> batches;
  for (std::size_t start = 0; start < order.size(); start += pool) {
    const auto begin = order.begin() + static_cast<std::ptrdiff_t>(start);
    const auto end =
        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), start + pool));
    std::stable_sort(begin, end, [&](std::size_t a, std::size_t b) {
      return examples[a].source.size() < examples[b].source.size();
    });
    for (auto it = begin; it < end; it += std::min<std::ptrdiff_t>(batch, end - it)) {
      batches.emplace_back(it, it + std::min<std::ptrdiff_t>(batch, end - it));
    }
  }
  for (std::size_t i = batches.size(); i > 1; --i) {
    std::swap(batches[i - 1], batches[g.next_u32() % i]);
  }
  return batches;
}

TrainReport train(Seq2Seq& model, const std::vector<Example>& examples, const TrainOptions& options,
                  const std::function<void(const TrainProgress&)>& on_step) {
  if (examples.empty()) throw Error("examples", "at least one", "none");
  if (options.steps < 1) throw Error("options.steps", ">= 1", std::to_string(options.steps));
  if (options.batch_size < 1) {
    throw Error("options.batch_size", ">= 1", std::to_string(options.batch_size));
  }
  for (std::size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].source.empty() || examples[i].target.empty()) {
      throw Error("examples[" + std::to_string(i) + "]", "a source and a target", "an empty side");
    }
  }
  if (options.dtype != DType::f32 && options.dtype != DType::bf16 && options.dtype != DType::f16) {
    throw Error("options.dtype", "f32, bf16 or f16", std::string(dtype_name(options.dtype)));
  }
  const dist::GradientSync* sync = options.sync;
  const int ranks = sync != nullptr ? sync->size() : 1, rank = sync != nullptr ? sync->rank() : 0;
  if (options.batch_size < ranks) {
    throw Error("options.batch_size",
                "at least the ranks of options.sync, " + std::to_string(ranks),
                std::to_string(options.batch_size));
  }
  std::optional<ag::Autocast> autocast;
  if (options.dtype != DType::f32) autocast.emplace(options.dtype);
  const bool scaled = options.dtype == DType::f16;
  nn::GradScaler scaler;
  model.train();
  const std::vector<Var> parameters = model.parameters();
  nn::AdamWOptions adam;
  adam.lr = options.lr;
  adam.weight_decay = options.weight_decay;
  adam.beta2 = 0.98;  // "Attention Is All You Need"; steadier than 0.999 over short runs
  nn::AdamW optimizer(parameters, adam);
  ag::CrossEntropyOptions loss_options;
  loss_options.label_smoothing = options.label_smoothing;

  Generator g(options.seed);
  std::vector<std::vector<std::size_t>> batches;
  std::size_t next = 0;
  TrainReport report;
  std::vector<float> flat_f32;  // data parallel: the gradients, flat (sum_gradients)
  std::vector<double> flat_f64;
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < options.steps; ++step) {
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (sync != nullptr) elapsed = sync->broadcast(elapsed);  // every rank stops at one step
    if (options.time_budget > 0 && elapsed >= options.time_budget) break;
    if (next == batches.size()) {
      batches = epoch_batches(examples, options.batch_size, g);
      next = 0;
    }
    const std::vector<std::size_t>& batch = batches[next++];
    // This rank's rows of the batch (all of them without a sync).
    const std::vector<std::size_t> rows(
        batch.begin() + static_cast<std::ptrdiff_t>(batch.size() * rank / ranks),
        batch.begin() + static_cast<std::ptrdiff_t>(batch.size() * (rank + 1) / ranks));
    std::vector<std::vector<std::int64_t>> sources, inputs, outputs;
    for (const std::size_t r : rows) {
      const Example& e = examples[r];
      sources.push_back(e.source);
      std::vector<std::int64_t> in = {Vocabulary::kBos}, out = e.target;
      in.insert(in.end(), e.target.begin(), e.target.end());
      out.push_back(Vocabulary::kEos);
      inputs.push_back(std::move(in));
      outputs.push_back(std::move(out));
    }
    const Batch source = make_batch(sources), target_in = make_batch(inputs);
    // Targets [B * T]: the next token, or ignore_index on padding.
    std::vector<std::int64_t> targets(static_cast<std::size_t>(target_in.batch * target_in.length),
                                      loss_options.ignore_index);
    std::int64_t tokens = 0;
    for (std::size_t b = 0; b < outputs.size(); ++b) {
      std::copy(outputs[b].begin(), outputs[b].end(),
                targets.begin() + static_cast<std::ptrdiff_t>(b) * target_in.length);
      tokens += static_cast<std::int64_t>(outputs[b].size());
    }
    // With a time budget the cosine follows the elapsed fraction of it, or of the steps where
    // those run out first, so the decay ends when the run does however fast the steps turn out
    // (following the time alone, a run that reached its last step at 55% of the budget stopped
    // at 3/4 of the peak rate: the demo's exact match 98.8% instead of 99.8%).
    const double step_fraction = options.steps > options.warmup_steps
                                     ? static_cast<double>(step - options.warmup_steps) /
                                           static_cast<double>(options.steps - options.warmup_steps)
                                     : 1.0;
    const double lr =
        options.time_budget > 0 && step >= options.warmup_steps
            ? options.min_lr +
                  (options.lr - options.min_lr) *
                      (1 + std::cos(std::numbers::pi *
                                    std::min(1.0, std::max(elapsed / options.time_budget,
                                                           step_fraction)))) /
                      2
            : nn::warmup_cosine_lr(step, options.lr, options.warmup_steps, options.steps,
                                   options.min_lr);
    optimizer.options().lr = lr;
    optimizer.zero_grad();
    const Var memory = model.encode(source);
    const Var logits = model.decode(memory, source, target_in);  // [B, T, V]
    const Var loss =
        ag::cross_entropy(ag::reshape(logits, {-1, logits.size(2)}), targets, loss_options);
    (scaled ? scaler.scale(loss) : loss).backward();
    double loss_value = loss.value().to_vector()[0];
    if (sync != nullptr) {
      // The batch's loss is the mean over all its target tokens: each rank's gradient (of the mean
      // over its own tokens) weighted by its share of them, then summed.
      // One sum for the step's counts: its tokens and loss, and the sizes of the gradients, which
      // must be the same on every rank.
      const std::int64_t n32 = gradient_elements(parameters, DType::f32);
      const std::int64_t n64 = gradient_elements(parameters, DType::f64);
      double counts[4] = {static_cast<double>(tokens), loss_value * static_cast<double>(tokens),
                          static_cast<double>(n32), static_cast<double>(n64)};
      sync->sum(counts, 4);
      if (counts[2] != static_cast<double>(n32) * ranks ||
          counts[3] != static_cast<double>(n64) * ranks) {
        throw Error("options.sync", "gradients of the same parameters on every rank",
                    "ranks whose gradients differ in size");
      }
      const double weight = static_cast<double>(tokens) / counts[0];
      if (n32 > 0) sum_gradients<float>(parameters, DType::f32, n32, weight, *sync, flat_f32);
      if (n64 > 0) sum_gradients<double>(parameters, DType::f64, n64, weight, *sync, flat_f64);
      tokens = static_cast<std::int64_t>(counts[0]);
      loss_value = counts[1] / counts[0];
    }
    const bool finite = !scaled || scaler.unscale(parameters);
    if (finite) {
      if (options.clip_norm > 0) nn::clip_grad_norm(parameters, options.clip_norm);
      optimizer.step();
    } else {
      ++report.skipped_steps;
    }
    if (scaled) scaler.update(!finite);

    report.losses.push_back(loss_value);
    report.target_tokens += tokens;
    report.steps = step + 1;
    report.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (on_step) {
      TrainProgress p;
      p.step = step + 1;
      p.steps = options.steps;
      p.loss = report.losses.back();
      p.lr = lr;
      p.elapsed_seconds = report.seconds;
      p.tokens = tokens;
      p.tokens_per_second = static_cast<double>(report.target_tokens) / report.seconds;
      const double by_steps = report.seconds / static_cast<double>(p.step) *
                              static_cast<double>(options.steps - p.step);
      p.eta_seconds = options.time_budget > 0
                          ? std::min(by_steps, std::max(0.0, options.time_budget - report.seconds))
                          : by_steps;
      on_step(p);
    }
  }
  model.eval();
  return report;
}

}  // namespace qkv::models
