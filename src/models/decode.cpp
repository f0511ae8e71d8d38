// Greedy decoding (batched, with or without the KV cache) and beam search.
#include "qkv/models/decode.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "qkv/error.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/ops.hpp"

namespace qkv::models {

namespace ag = autograd;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// logits [V] -> log softmax [V], in f64
std::vector<double> log_softmax(const float* logits, std::int64_t V) {
  std::vector<double> out(static_cast<std::size_t>(V));
  const double max = *std::max_element(logits, logits + V);
  double sum = 0;
  for (std::int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[v]) - max);
  const double log_sum = max + std::log(sum);
  for (std::int64_t v = 0; v < V; ++v) out[static_cast<std::size_t>(v)] = logits[v] - log_sum;
  return out;
}

// Per-step tensors [H, S] (or [V]) of one row -> stacked along a new time axis [H, T, S] ([T, V])
Tensor stack_steps(const std::vector<Tensor>& steps, std::int64_t axis) {
  if (steps.empty()) return Tensor();
  std::vector<Tensor> parts;
  for (const Tensor& step : steps) parts.push_back(step.unsqueeze(axis));
  return ops::concat(parts, axis);
}

// options.max_length, or the model's when 0
std::int64_t max_length_of(const DecodeOptions& options, const Seq2Seq& model) {
  const std::int64_t limit = model.max_length();
  if (options.max_length < 0 || options.max_length > limit) {
    throw Error("max_length", "in [0, " + std::to_string(limit) + "] (0: the model's)",
                std::to_string(options.max_length));
  }
  if (options.keep_weights && !model.attends()) {
    throw Error("keep_weights", "false for a model without attention", "true");
  }
  return options.max_length == 0 ? limit : options.max_length;
}

// One decoder step for every row: logits [N, V] and, with weights, cross-attention [N, H, S].
// Cached: one token through the cache. Uncached: the whole prefix [N, t + 1] through decode(),
// keeping the last position.
struct Stepper {
  Seq2Seq& model;
  const Batch& source;
  Var memory;
  std::unique_ptr<DecoderState> state;
  bool use_cache;
  std::vector<std::vector<std::int64_t>> prefixes;  // uncached: the inputs so far, per row

  Tensor step(const std::vector<std::int64_t>& tokens, Tensor* weights) {
    if (use_cache) return model.step(*state, tokens, weights);
    for (std::size_t b = 0; b < tokens.size(); ++b) prefixes[b].push_back(tokens[b]);
    const Batch target_in = make_batch(prefixes);
    Tensor all_weights;
    const Tensor logits =
        model.decode(memory, source, target_in, weights ? &all_weights : nullptr).value();
    const std::int64_t t = target_in.length - 1;
    if (weights != nullptr)
      *weights = all_weights.slice(2, t, t + 1).reshape({source.batch, -1, source.length});
    return logits.slice(1, t, t + 1).reshape({source.batch, -1});
  }
};

}  // namespace

std::vector<Translation> greedy_decode(Seq2Seq& model, const Batch& source,
                                       const DecodeOptions& options) {
  const std::int64_t max_length = max_length_of(options, model);
  ag::NoGrad no_grad;
  const std::int64_t B = source.batch, V = model.target_vocab();
  Stepper stepper{model, source, model.encode(source), nullptr, options.use_cache, {}};
  if (options.use_cache) {
    stepper.state = model.begin_decoding(stepper.memory, source.lengths, max_length);
  } else {
    stepper.prefixes.resize(static_cast<std::size_t>(B));
  }
  std::vector<Translation> out(static_cast<std::size_t>(B));
  std::vector<std::vector<Tensor>> weights(out.size()), logits(out.size());
  std::vector<bool> done(out.size(), false);
  std::vector<std::int64_t> tokens(out.size(), Vocabulary::kBos);
  for (std::int64_t t = 0; t < max_length; ++t) {
    const auto start = Clock::now();
    Tensor w;
    const Tensor step_logits =
        stepper.step(tokens, options.keep_weights ? &w : nullptr).contiguous();
    const double elapsed = seconds_since(start);
    const float* data = step_logits.data_as<float>();
    bool all_done = true;
    for (std::size_t b = 0; b < out.size(); ++b) {
      if (done[b]) continue;
      const float* row = data + static_cast<std::int64_t>(b) * V;
      const std::int64_t next = std::max_element(row, row + V) - row;
      Translation& tr = out[b];
      tr.log_probability += log_softmax(row, V)[static_cast<std::size_t>(next)];
      tr.step_seconds.push_back(elapsed);
      logits[b].push_back(step_logits.slice(0, static_cast<std::int64_t>(b), b + 1).reshape({V}));
      if (options.keep_weights) {
        const std::int64_t S = source.lengths[b];
        weights[b].push_back(
            w.slice(0, static_cast<std::int64_t>(b), b + 1).slice(2, 0, S).reshape({-1, S}));
      }
      if (next == Vocabulary::kEos) {
        done[b] = true;
      } else {
        tr.tokens.push_back(next);
        all_done = false;
      }
      tokens[b] = next;
    }
    if (all_done) break;
  }
  for (std::size_t b = 0; b < out.size(); ++b) {
    out[b].score = out[b].log_probability;
    out[b].logits = stack_steps(logits[b], 0);
    if (options.keep_weights) out[b].cross_weights = stack_steps(weights[b], 1);
  }
  return out;
}

Translation beam_search(Seq2Seq& model, const std::vector<std::int64_t>& source,
                        const BeamOptions& options) {
  const std::int64_t max_length = max_length_of(options.decode, model);
  if (options.beam < 1) throw Error("beam", ">= 1", std::to_string(options.beam));
  if (!options.decode.use_cache) throw Error("decode.use_cache", "true for beam search", "false");
  ag::NoGrad no_grad;
  const Batch batch = make_batch({source});
  const std::int64_t V = model.target_vocab(), S = batch.length;
  const std::unique_ptr<DecoderState> state =
      model.begin_decoding(model.encode(batch), batch.lengths, max_length);
  const auto penalty = [&](std::size_t length) {
    return std::pow((5.0 + static_cast<double>(length)) / 6.0, options.length_alpha);
  };
  struct Hypothesis {
    Translation translation;
    std::vector<Tensor> weights;  // per step [H, S]
  };
  std::vector<Hypothesis> alive(1), finished;
  std::vector<std::int64_t> tokens = {Vocabulary::kBos};
  for (std::int64_t t = 0; t < max_length && !alive.empty(); ++t) {
    const auto start = Clock::now();
    Tensor w;
    const Tensor logits =
        model.step(*state, tokens, options.decode.keep_weights ? &w : nullptr).contiguous();
    const double elapsed = seconds_since(start);
    const float* data = logits.data_as<float>();
    struct Candidate {
      std::size_t parent;
      std::int64_t token;
      double log_probability;
    };
    std::vector<Candidate> candidates;
    for (std::size_t i = 0; i < alive.size(); ++i) {
      const std::vector<double> lp = log_softmax(data + static_cast<std::int64_t>(i) * V, V);
      std::vector<std::int64_t> order(static_cast<std::size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      const auto k = static_cast<std::ptrdiff_t>(std::min(options.beam, V));
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](std::int64_t a, std::int64_t b) { return lp[a] > lp[b]; });
      for (std::ptrdiff_t j = 0; j < k; ++j) {
        const std::int64_t v = order[static_cast<std::size_t>(j)];
        candidates.push_back({i, v, alive[i].translation.log_probability + lp[v]});
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) {
                       return a.log_probability > b.log_probability;
                     });
    std::vector<Hypothesis> next;
    std::vector<std::int64_t> rows;
    tokens.clear();
    for (const Candidate& c : candidates) {
      if (static_cast<std::int64_t>(next.size()) == options.beam) break;
      Hypothesis h = alive[c.parent];
      h.translation.log_probability = c.log_probability;
      h.translation.step_seconds.push_back(elapsed);
      if (options.decode.keep_weights) {
        h.weights.push_back(
            w.slice(0, static_cast<std::int64_t>(c.parent), c.parent + 1).reshape({-1, S}));
      }
      if (c.token == Vocabulary::kEos) {
        h.translation.score = c.log_probability / penalty(h.translation.tokens.size() + 1);
        finished.push_back(std::move(h));
        continue;
      }
      h.translation.tokens.push_back(c.token);
      next.push_back(std::move(h));
      rows.push_back(static_cast<std::int64_t>(c.parent));
      tokens.push_back(c.token);
    }
    alive = std::move(next);
    // Stop once `beam` hypotheses have ended, as fairseq and OpenNMT do.
    if (static_cast<std::int64_t>(finished.size()) >= options.beam) {
      alive.clear();
      break;
    }
    if (!alive.empty()) state->select(rows);
  }
  for (Hypothesis& h : alive) {  // reached max_length: rank the unfinished too
    h.translation.score = h.translation.log_probability / penalty(h.translation.tokens.size());
    finished.push_back(std::move(h));
  }
  const auto best = std::max_element(finished.begin(), finished.end(),
                                     [](const Hypothesis& a, const Hypothesis& b) {
                                       return a.translation.score < b.translation.score;
                                     });
  Translation result = std::move(best->translation);
  if (options.decode.keep_weights) result.cross_weights = stack_steps(best->weights, 1);
  return result;
}

}  // namespace qkv::models
