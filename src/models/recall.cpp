// Associative recall over a long context (qkv/models/recall.hpp): the task's sequences, the model
// with each kind of attention, its training and its accuracy.
#include "qkv/models/recall.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/autograd/ops.hpp"
#include "qkv/error.hpp"
#include "qkv/masks.hpp"
#include "qkv/mod_values.hpp"
#include "qkv/nn/optim.hpp"

namespace qkv::models {

namespace ag = autograd;

namespace {

std::string str(std::int64_t n) { return std::to_string(n); }

// An integer in [0, n) from the generator.
std::int64_t below(Generator& g, std::int64_t n) {
  return std::min<std::int64_t>(n - 1, static_cast<std::int64_t>(g.next_uniform() * double(n)));
}

nn::TransformerLayerConfig layer_config(const RecallModelConfig& c) {
  nn::TransformerLayerConfig l;
  l.d_model = c.d_model;
  l.nhead = c.heads;
  l.dim_feedforward = c.dim_feedforward;
  l.dropout = 0;
  l.norm_first = true;
  switch (c.attention) {
    case RecallAttention::materialized:
      l.attention = nn::AttentionKind::materialized;
      break;
    case RecallAttention::elu:
      l.attention = nn::AttentionKind::linear;
      break;
    case RecallAttention::favor:
      l.attention = nn::AttentionKind::linear;
      l.feature_map = FeatureMap::favor;
      l.num_features = c.num_features;
      l.feature_seed = c.seed;
      break;
    default:
      break;
  }
  return l;
}

RecallModelConfig checked(const RecallModelConfig& c) {
  if (c.keys < 1) throw Error("keys", ">= 1", str(c.keys));
  if (c.values < 2) throw Error("values", ">= 2", str(c.values));
  if (c.fillers < 1) throw Error("fillers", ">= 1", str(c.fillers));
  if (c.layers < 1) throw Error("layers", ">= 1", str(c.layers));
  if (c.window < 0) throw Error("window", ">= 0", str(c.window));
  if (c.block < 1) throw Error("block", ">= 1", str(c.block));
  return c;
}

// The layers' attention call: the window's or BigBird's mask mod, nothing else.
nn::AttentionCall attention_call(const RecallModelConfig& c) {
  nn::AttentionCall call;
  if (c.attention == RecallAttention::window) {
    call.mask_mod = MaskMod(masks::sliding_window(c.window, c.window));
  } else if (c.attention == RecallAttention::bigbird) {
    const std::int64_t block = c.block;
    const std::uint64_t seed = c.seed;
    call.mask_mod = MaskMod::per_shape([block, seed](std::int64_t Tq, std::int64_t Tk) {
      return MaskMod(masks::bigbird(block, 3, 2, 3, seed, Tq, Tk));
    });
  }
  return call;
}

}  // namespace

RecallBatch recall_batch(const RecallTask& task, std::int64_t batch, Generator& generator) {
  for (const auto& [value, name] :
       {std::pair{task.keys, "keys"}, std::pair{task.values, "values"},
        std::pair{task.pairs, "pairs"}, std::pair{task.fillers, "fillers"},
        std::pair{batch, "batch"}}) {
    if (value < 1) throw Error(name, ">= 1", str(value));
  }
  if (task.pairs > task.keys) {
    throw Error("pairs", "<= keys (" + str(task.keys) + ", the keys are distinct)",
                str(task.pairs));
  }
  if (task.far < 0 || task.length - task.far - 1 < task.pairs) {
    throw Error("length", "> far + pairs (" + str(task.far) + " + " + str(task.pairs) + ")",
                str(task.length));
  }
  RecallBatch out;
  out.batch = batch;
  out.length = task.length;
  out.tokens.resize(static_cast<std::size_t>(batch * task.length));
  const std::int64_t slots = task.length - task.far - 1;  // where facts may lie: [0, slots)
  std::vector<std::int64_t> keys(static_cast<std::size_t>(task.keys));
  std::vector<std::int64_t> positions;
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int64_t* row = out.tokens.data() + b * task.length;
    for (std::int64_t t = 0; t < task.length; ++t) row[t] = below(generator, task.fillers);
    // The first `pairs` keys of a shuffle, at distinct positions; one of them is asked.
    for (std::int64_t k = 0; k < task.keys; ++k) keys[static_cast<std::size_t>(k)] = k;
    for (std::int64_t k = task.keys - 1; k > 0; --k) {
      std::swap(keys[static_cast<std::size_t>(k)],
                keys[static_cast<std::size_t>(below(generator, k + 1))]);
    }
    positions.clear();
    while (static_cast<std::int64_t>(positions.size()) < task.pairs) {
      const std::int64_t p = below(generator, slots);
      if (std::find(positions.begin(), positions.end(), p) == positions.end()) {
        positions.push_back(p);
      }
    }
    std::int64_t asked_value = 0;
    const std::int64_t asked = below(generator, task.pairs);
    for (std::int64_t n = 0; n < task.pairs; ++n) {
      const std::int64_t key = keys[static_cast<std::size_t>(n)];
      const std::int64_t value = below(generator, task.values);
      row[positions[static_cast<std::size_t>(n)]] = task.fillers + key * task.values + value;
      if (n == asked) asked_value = value;
    }
    row[task.length - 1] =
        task.fillers + task.keys * task.values + keys[static_cast<std::size_t>(asked)];
    out.answers.push_back(asked_value);
  }
  return out;
}

std::string_view recall_attention_name(RecallAttention attention) noexcept {
  switch (attention) {
    case RecallAttention::full:
      return "full";
    case RecallAttention::materialized:
      return "materialized";
    case RecallAttention::window:
      return "window";
    case RecallAttention::bigbird:
      return "bigbird";
    case RecallAttention::elu:
      return "elu";
    case RecallAttention::favor:
      return "favor";
  }
  return "?";
}

RecallAttention parse_recall_attention(std::string_view name, const char* argument) {
  for (const RecallAttention a :
       {RecallAttention::full, RecallAttention::materialized, RecallAttention::window,
        RecallAttention::bigbird, RecallAttention::elu, RecallAttention::favor}) {
    if (recall_attention_name(a) == name) return a;
  }
  throw Error(argument, "full, materialized, window, bigbird, elu or favor", std::string(name));
}

RecallModel::RecallModel(const RecallModelConfig& config)
    : config_(checked(config)),
      generator_(config.seed),
      keys_(config.keys + 1, config.d_model, generator_),
      values_(config.values + 1, config.d_model, generator_),
      kinds_(config.fillers + 2, config.d_model, generator_),
      norm_(config.d_model),
      head_(config.d_model, config.values, generator_) {
  register_module("keys", keys_);
  register_module("values", values_);
  register_module("kinds", kinds_);
  for (std::int64_t l = 0; l < config_.layers; ++l) {
    layers_.push_back(
        std::make_unique<nn::TransformerEncoderLayer>(layer_config(config_), generator_));
    register_module("layers." + str(l), *layers_.back());
  }
  register_module("norm", norm_);
  register_module("head", head_);
}

// tokens [B, T] -> logits [B, classes]
Var RecallModel::forward(const std::vector<std::int64_t>& tokens, std::int64_t batch,
                         std::int64_t length) {
  const RecallModelConfig& c = config_;
  if (batch < 1 || length < 1 || static_cast<std::int64_t>(tokens.size()) != batch * length) {
    throw Error("tokens", str(batch) + " x " + str(length) + " ids (batch, length >= 1)",
                str(static_cast<std::int64_t>(tokens.size())) + " ids");
  }
  // Each token's rows of the three tables: key (or the last row, none), value (or none), and kind
  // (its filler id, fillers for a fact, fillers + 1 for a question).
  std::vector<std::int64_t> key(tokens.size(), c.keys), value(tokens.size(), c.values),
      kind(tokens.size());
  const std::int64_t facts = c.fillers + c.keys * c.values, vocab = facts + c.keys;
  for (std::size_t n = 0; n < tokens.size(); ++n) {
    const std::int64_t t = tokens[n];
    if (t < 0 || t >= vocab) {
      throw Error("tokens", "ids in [0, " + str(vocab) + ")", str(t) + " at " + str(n));
    }
    if (t < c.fillers) {
      kind[n] = t;
    } else if (t < facts) {
      key[n] = (t - c.fillers) / c.values;
      value[n] = (t - c.fillers) % c.values;
      kind[n] = c.fillers;
    } else {
      key[n] = t - facts;
      kind[n] = c.fillers + 1;
    }
  }
  const Shape shape{batch, length};
  const nn::AttentionCall call = attention_call(config_);
  Var x = keys_.forward(key, shape) + values_.forward(value, shape) +
          kinds_.forward(kind, shape);  // [B, T, E]
  for (auto& layer : layers_) x = layer->forward(x, call);
  const Var last = ag::reshape(ag::slice(x, 1, length - 1, length), {batch, config_.d_model});
  return head_(norm_(last));
}

RecallTrainReport train_recall(RecallModel& model, const RecallTask& task,
                               const RecallTrainOptions& options,
                               const std::function<void(std::int64_t, double)>& on_step) {
  if (options.steps < 1) throw Error("steps", ">= 1", str(options.steps));
  model.train();
  const std::vector<Var> parameters = model.parameters();
  nn::AdamWOptions adam;
  adam.lr = options.lr;
  adam.weight_decay = options.weight_decay;
  nn::AdamW optimizer(parameters, adam);
  Generator generator(options.seed);
  RecallTrainReport report;
  const std::int64_t warmup = std::min(options.warmup_steps, options.steps / 10);
  // The length reaches the task's by the last step at the latest (a one-step run is all of it).
  const double ramp_steps = std::min(options.ramp * static_cast<double>(options.steps),
                                     static_cast<double>(options.steps - 1));
  for (std::int64_t step = 0; step < options.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    RecallTask at = task;
    if (options.min_length < task.length) {
      const double f =
          ramp_steps <= 0 ? 1.0 : std::min(1.0, static_cast<double>(step) / ramp_steps);
      const double length =
          static_cast<double>(options.min_length) *
          std::pow(static_cast<double>(task.length) / static_cast<double>(options.min_length), f);
      at.length = f >= 1 ? task.length
                         : std::clamp<std::int64_t>(static_cast<std::int64_t>(length) / 64 * 64,
                                                    options.min_length, task.length);
      at.far = task.far * at.length / task.length;
    }
    const RecallBatch b = recall_batch(at, options.batch_size, generator);
    optimizer.options().lr =
        nn::warmup_cosine_lr(step, options.lr, warmup, options.steps, options.lr / 100);
    optimizer.zero_grad();
    const Var loss = ag::cross_entropy(model.forward(b.tokens, b.batch, b.length), b.answers);
    loss.backward();
    if (options.clip_norm > 0) nn::clip_grad_norm(parameters, options.clip_norm);
    optimizer.step();
    const double value = loss.value().at({});
    report.losses.push_back(value);
    report.lengths.push_back(at.length);
    report.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (on_step) on_step(step + 1, value);
  }
  return report;
}

double recall_accuracy(RecallModel& model, const RecallTask& task, std::int64_t sequences,
                       std::uint64_t seed, std::int64_t batch_size) {
  if (sequences < 1) throw Error("sequences", ">= 1", str(sequences));
  if (batch_size < 1) throw Error("batch_size", ">= 1", str(batch_size));
  model.eval();
  ag::NoGrad no_grad;
  Generator generator(seed);
  std::int64_t right = 0;
  for (std::int64_t done = 0; done < sequences; done += batch_size) {
    const RecallBatch b = recall_batch(task, std::min(batch_size, sequences - done), generator);
    const Tensor logits = model.forward(b.tokens, b.batch, b.length).value();  // [B, classes]
    for (std::int64_t i = 0; i < b.batch; ++i) {
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < logits.size(1); ++c) {
        if (logits.at({i, c}) > logits.at({i, best})) best = c;
      }
      right += best == b.answers[static_cast<std::size_t>(i)] ? 1 : 0;
    }
  }
  model.train();
  return static_cast<double>(right) / static_cast<double>(sequences);
}

}  // namespace qkv::models
