#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/dist/gradient_sync.hpp"
#include "qkv/models/seq2seq.hpp"
#include "qkv/philox.hpp"

namespace qkv::models {

// One training pair as token ids, without <bos> or <eos> (training adds them).
struct Example {
  std::vector<std::int64_t> source;
  std::vector<std::int64_t> target;
};

struct TrainOptions {
  std::int64_t steps = 1000;  // with a time budget, the most steps
  // Seconds; > 0 trains until they are spent (or steps are done), the cosine decay following the
  // elapsed fraction of the budget, or of the steps where they run out first: a run fits its time
  // whatever the machine's speed, and ends its decay where it ends.
  double time_budget = 0;
  std::int64_t batch_size = 64;  // sentence pairs per step
  double lr = 1e-3;              // peak, after the warm-up
  std::int64_t warmup_steps = 100;
  double min_lr = 1e-5;  // at the end of the cosine decay
  double weight_decay = 0.01;
  double label_smoothing = 0.1;
  double clip_norm = 1.0;  // global gradient norm; 0 turns clipping off
  std::uint64_t seed = 0;  // the order of the examples
  // The dtype matmul and attention compute in: f32, or bf16 / f16 under an autograd::Autocast
  // with the parameters (the optimizer's master weights) kept in f32; f16 with dynamic loss
  // scaling (nn::GradScaler), its steps with an inf or NaN gradient skipped.
  DType dtype = DType::f32;
  // Data parallel: with a sync of N ranks, batch_size is the global batch (at least N), each
  // rank takes rows [r B / N, (r + 1) B / N) of every batch, and the gradients are summed across
  // the ranks weighted by their target tokens before clipping and the update, so that every rank
  // makes the update one process would make on the whole batch (to the rounding of the sums). The
  // model must start equal on every rank (the same config and seed), and the options equal; the
  // time budget follows rank 0's clock. Losses and token counts reported are the whole batch's.
  const dist::GradientSync* sync = nullptr;
};

struct TrainProgress {
  std::int64_t step = 0;  // steps done
  std::int64_t steps = 0;
  double loss = 0;  // of the last step
  double lr = 0;
  std::int64_t tokens = 0;       // target tokens of the last step (<eos> included)
  double tokens_per_second = 0;  // target tokens, since the start
  double elapsed_seconds = 0;
  double eta_seconds = 0;
};

struct TrainReport {
  std::int64_t steps = 0;
  std::int64_t target_tokens = 0;
  double seconds = 0;
  std::vector<double> losses;      // one per step
  std::int64_t skipped_steps = 0;  // f16: steps whose gradient overflowed (no update)
};

// One epoch's batches of example indices, as train() draws them from g: the examples shuffled,
// sorted by source length inside pools of 32 batches, the batches in shuffled order. train() with
// TrainOptions::seed s begins with epoch_batches(examples, batch_size, Generator(s)).
std::vector<std::vector<std::size_t>> epoch_batches(const std::vector<Example>& examples,
                                                    std::int64_t batch_size, Generator& g);

// Teacher forcing: the decoder reads <bos> y1 .. yn and is scored (cross-entropy with label
// smoothing) on y1 .. yn <eos>; AdamW with linear warm-up and cosine decay, gradients clipped.
// Batches hold sentences of similar length (examples are shuffled, then sorted by length within
// pools of 32 batches) so that little of each batch is padding. on_step is called after every step.
TrainReport train(Seq2Seq& model, const std::vector<Example>& examples, const TrainOptions& options,
                  const std::function<void(const TrainProgress&)>& on_step = {});

}  // namespace qkv::models
