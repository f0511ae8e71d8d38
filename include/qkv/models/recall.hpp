#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/autograd/var.hpp"
#include "qkv/nn/layers.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/philox.hpp"

namespace qkv::models {

using autograd::Var;

// Associative recall over a long context, the task of `qkv demo variants`: each sequence of
// `length` tokens holds `pairs` key-value facts, each one token (key, value) with distinct keys,
// at random positions before length - far, among random filler tokens; the last token asks for one
// of those keys, and the answer is its value. Token ids: filler [0, fillers); the fact (key, value)
// fillers + key * values + value; the question for key fillers + keys * values + key.
//
// Attention that reaches every position answers from the question's row at once; attention that
// cannot see `far` tokens back (a window narrower than far over all layers) can only guess (1 /
// values); the rest fall in between, which is what the experiment measures.
struct RecallTask {
  std::int64_t length = 1024;
  std::int64_t keys = 16;
  std::int64_t values = 16;
  std::int64_t pairs = 8;
  std::int64_t fillers = 16;
  std::int64_t far = 256;  // every fact lies at a position < length - far

  std::int64_t vocab() const noexcept { return fillers + keys * values + keys; }
};

struct RecallBatch {
  std::int64_t batch = 0, length = 0;
  std::vector<std::int64_t> tokens;   // [batch, length] row-major
  std::vector<std::int64_t> answers;  // [batch] values in [0, values)
};

// Draws `batch` sequences from the generator. qkv::Error when the task cannot hold its facts
// (pairs > keys, or fewer than pairs positions before length - far) or a size is < 1.
RecallBatch recall_batch(const RecallTask& task, std::int64_t batch, Generator& generator);

// The attention a recall model uses: full (the fused softmax kernel), materialized (the same
// function with its scores materialized, AttentionKind::materialized), window (|i - j| <=
// window), bigbird (BigBird on blocks of `block`: 3 window, 2 global, 3 random), elu (linear,
// elu + 1), favor (linear, FAVOR+ with num_features).
enum class RecallAttention : std::uint8_t { full, materialized, window, bigbird, elu, favor };
std::string_view recall_attention_name(RecallAttention attention) noexcept;
// "full", "materialized", ... -> the value; qkv::Error naming `argument` otherwise.
RecallAttention parse_recall_attention(std::string_view name, const char* argument);

struct RecallModelConfig {
  std::int64_t keys = 16, values = 16, fillers = 16;  // the task's (RecallTask)
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t layers = 2;
  std::int64_t dim_feedforward = 128;
  RecallAttention attention = RecallAttention::full;
  std::int64_t window = 64;
  std::int64_t block = 64;
  std::int64_t num_features = 64;
  std::uint64_t seed = 0;  // the weights, BigBird's random blocks and FAVOR+'s features
};

// Embeddings that know the task's tokens: a fact (key, value) is its key's vector plus its value's
// plus a "fact" vector, a question its key's vector plus a "question" vector, a filler its own
// vector, so that what the facts share is learned once (with one table row per fact token, 256 of
// them, full attention had not learned the task at T 512 after 600 steps: 69%). No positions: the
// task is one of content, and a window's failure is then one of reach. Then pre-norm Transformer
// encoder layers with the chosen attention (bidirectional), a final layer norm, and a linear head
// read at the last position. Parameters "keys.weight", "values.weight", "kinds.weight",
// "layers.N.*", "norm.*", "head.*".
class RecallModel : public nn::Module {
 public:
  explicit RecallModel(const RecallModelConfig& config);
  const RecallModelConfig& config() const noexcept { return config_; }
  // tokens [batch, length] row-major (ids as RecallTask numbers them) -> logits [batch, values]
  Var forward(const std::vector<std::int64_t>& tokens, std::int64_t batch, std::int64_t length);

 private:
  RecallModelConfig config_;
  Generator generator_;
  nn::Embedding keys_, values_, kinds_;
  std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> layers_;
  nn::LayerNorm norm_;
  nn::Linear head_;
};

struct RecallTrainOptions {
  std::int64_t steps = 400;
  std::int64_t batch_size = 16;
  double lr = 1e-3;                // peak, after warmup_steps; cosine decay to lr / 100
  std::int64_t warmup_steps = 40;  // at most steps / 10
  double weight_decay = 0.01;
  double clip_norm = 1.0;
  std::uint64_t seed = 0;  // the training sequences
  // A curriculum of lengths: the sequences of step s are min_length * (length / min_length)^(s /
  // r) tokens with r = min(ramp * steps, steps - 1) (rounded down to a multiple of 64 before step
  // r, the task's far scaled alike), the task's length from step r on. Without one (min_length >=
  // length), a fact among T tokens starts with 1 / T of the question's attention and of the
  // gradient that would find it: on the Zen 5 VM (with one embedding row per fact token, 8 keys
  // and values, 4 facts), full attention learned the task in 600 steps at T 64 (99.6%) but not
  // in 300 at T 256 (14.5%, chance 12.5%).
  std::int64_t min_length = 64;
  double ramp = 0.5;
};

struct RecallTrainReport {
  std::vector<double> losses;         // one per step
  std::vector<double> step_seconds;   // one per step
  std::vector<std::int64_t> lengths;  // one per step (the curriculum)
};

// AdamW on cross-entropy of the answer, fresh sequences every step; on_step(step, loss) after
// each.
RecallTrainReport train_recall(RecallModel& model, const RecallTask& task,
                               const RecallTrainOptions& options,
                               const std::function<void(std::int64_t, double)>& on_step = {});

// The share of `sequences` fresh sequences (drawn from seed, in batches of batch_size) whose
// answer the model's argmax gets right.
double recall_accuracy(RecallModel& model, const RecallTask& task, std::int64_t sequences,
                       std::uint64_t seed, std::int64_t batch_size = 32);

}  // namespace qkv::models
