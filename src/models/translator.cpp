// The translator: a pre-norm Transformer encoder-decoder, its teacher-forced forward, and the
// incremental decoder with a KV cache.
#include "qkv/models/translator.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_budget.hpp"
#include "qkv/error.hpp"
#include "qkv/nn/positional.hpp"
#include "qkv/ops.hpp"
#include "qkv/system.hpp"

namespace qkv::models {

namespace ag = autograd;

namespace {

std::string str(std::int64_t n) { return std::to_string(n); }

nn::TransformerLayerConfig layer_config(const TranslatorConfig& c) {
  nn::TransformerLayerConfig l;
  l.d_model = c.d_model;
  l.nhead = c.heads;
  l.dim_feedforward = c.dim_feedforward;
  l.dropout = c.dropout;
  l.norm_first = true;
  return l;
}

// The decoder's cross-attention: padded source words skipped by length, weights kept per head.
nn::AttentionCall memory_call(const std::vector<std::int64_t>& source_lengths) {
  nn::AttentionCall call;
  call.key_lengths = source_lengths;
  call.average_attn_weights = false;
  return call;
}

TranslatorConfig checked(const TranslatorConfig& c) {
  if (c.source_vocab <= 4)
    throw Error("source_vocab", "> 4 (the special tokens)", str(c.source_vocab));
  if (c.target_vocab <= 4)
    throw Error("target_vocab", "> 4 (the special tokens)", str(c.target_vocab));
  if (c.encoder_layers < 1) throw Error("encoder_layers", ">= 1", str(c.encoder_layers));
  if (c.decoder_layers < 1) throw Error("decoder_layers", ">= 1", str(c.decoder_layers));
  if (c.max_length < 2) throw Error("max_length", ">= 2", str(c.max_length));
  return c;
}

}  // namespace

void DecoderCache::select(const std::vector<std::int64_t>& rows) {
  const std::int64_t n = this->rows();
  for (const std::int64_t r : rows) {
    if (r < 0 || r >= n) throw Error("rows", "indices in [0, " + str(n) + ")", str(r));
  }
  bool identity = static_cast<std::int64_t>(rows.size()) == n;
  for (std::size_t i = 0; identity && i < rows.size(); ++i) {
    identity = rows[i] == static_cast<std::int64_t>(i);
  }
  if (identity) return;  // beam search keeping every hypothesis in place (always, at width 1)
  // t [N, T, ...] -> [rows, T, ...]; only positions [0, valid) hold anything (the self-attention
  // caches are filled up to length), the rest stays unwritten.
  const auto gather = [&](Tensor& t, std::int64_t valid) {
    Shape shape = t.shape();
    shape[0] = static_cast<std::int64_t>(rows.size());
    Tensor out = Tensor::empty(shape, t.dtype());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto r = static_cast<std::int64_t>(i);
      Tensor row = out.slice(0, r, r + 1).slice(1, 0, valid);
      row.copy_from(t.slice(0, rows[i], rows[i] + 1).slice(1, 0, valid));
    }
    t = out;
  };
  for (nn::DecoderLayerCache& layer : layers) {
    gather(layer.self_k, length);
    gather(layer.self_v, length);
    gather(layer.cross_k, layer.cross_k.size(1));
    gather(layer.cross_v, layer.cross_v.size(1));
  }
  std::vector<std::int64_t> lengths;
  for (const std::int64_t r : rows) lengths.push_back(source_lengths[static_cast<std::size_t>(r)]);
  source_lengths = std::move(lengths);
}

Translator::Translator(const TranslatorConfig& config)
    : config_(checked(config)),
      generator_(config.seed),
      source_embedding_(config.source_vocab, config.d_model, generator_),
      target_embedding_(config.target_vocab, config.d_model, generator_),
      positions_(nn::sinusoidal_positions(config.max_length, config.d_model)),
      encoder_norm_(config.d_model),
      decoder_norm_(config.d_model),
      output_(config.d_model, config.target_vocab, generator_) {
  register_module("source_embedding", source_embedding_);
  register_module("target_embedding", target_embedding_);
  for (std::int64_t l = 0; l < config_.encoder_layers; ++l) {
    encoder_.push_back(
        std::make_unique<nn::TransformerEncoderLayer>(layer_config(config_), generator_));
    register_module("encoder.layers." + str(l), *encoder_.back());
  }
  register_module("encoder.norm", encoder_norm_);
  for (std::int64_t l = 0; l < config_.decoder_layers; ++l) {
    decoder_.push_back(
        std::make_unique<nn::TransformerDecoderLayer>(layer_config(config_), generator_));
    register_module("decoder.layers." + str(l), *decoder_.back());
  }
  register_module("decoder.norm", decoder_norm_);
  register_module("output", output_);
}

// ids [B, T] -> [B, T, E]
Var Translator::embed(const nn::Embedding& table, const std::vector<std::int64_t>& ids,
                      std::int64_t batch, std::int64_t length, std::int64_t start) const {
  if (start + length > config_.max_length) {
    throw Error("length", "at most max_length " + str(config_.max_length), str(start + length));
  }
  const Var x = table.forward(ids, {batch, length});
  return x + Var(positions_.slice(0, start, start + length));
}

// Where no backward follows, the encoder computes the source's words alone (packed, ops::pack_rows)
// once padding is at least this fraction of the batch: rows past a length then cost no products,
// layer norms or feed-forward, and the memory there is 0. qkv demo's translator encoding 64
// sentences of up to 27 words, packed time over padded (medians of 120 alternated calls, AMD EPYC
// Zen 4, 2026-11-29), for 6 / 8 / 18 / 26 / 51% padding: 2 threads 1.06 / 1.02 / 0.92 / 0.90 /
// 0.72, 1 thread 1.00 / 0.97 / 0.88 / 0.82 / 0.58.
constexpr double kPackPadding = 0.1;

// source ids [B, S] -> memory [B, S, E]
Var Translator::encode(const Batch& source) {
  Var x = embed(source_embedding_, source.ids, source.batch, source.length, 0);
  std::int64_t words = 0;
  for (const std::int64_t l : source.lengths) words += l;
  const std::int64_t slots = source.batch * source.length;
  if (!ag::grad_enabled() && static_cast<double>(slots - words) >= kPackPadding * slots) {
    Var rows = ag::pack_rows(x, source.lengths);  // [words, E]
    for (auto& layer : encoder_) rows = layer->forward_packed(rows, source.lengths, source.length);
    return ag::unpack_rows(encoder_norm_(rows), source.lengths, source.length);
  }
  nn::AttentionCall call;
  call.key_lengths = source.lengths;
  for (auto& layer : encoder_) x = layer->forward(x, call);
  return encoder_norm_(x);
}

// memory [B, S, E], target_in [B, T] -> logits [B, T, V]
Var Translator::decode(const Var& memory, const Batch& source, const Batch& target_in,
                       Tensor* cross_weights) {
  if (target_in.batch != source.batch) {
    throw Error("target_in", "batch " + str(source.batch) + " (from source)", str(target_in.batch));
  }
  Var x = embed(target_embedding_, target_in.ids, target_in.batch, target_in.length, 0);
  nn::AttentionCall self_call;
  self_call.is_causal = true;
  const nn::AttentionCall cross_call = memory_call(source.lengths);
  for (std::size_t l = 0; l < decoder_.size(); ++l) {
    const bool last = l + 1 == decoder_.size();
    x = decoder_[l]->forward(x, memory, self_call, cross_call, last ? cross_weights : nullptr);
  }
  return output_(decoder_norm_(x));
}

DecoderCache Translator::start_decoding(const Var& memory,
                                        const std::vector<std::int64_t>& source_lengths,
                                        std::int64_t max_length) const {
  if (memory.dim() != 3 || memory.size(2) != config_.d_model) {
    throw Error("memory", "[N, S, " + str(config_.d_model) + "]", shape_string(memory.shape()));
  }
  const std::int64_t N = memory.size(0);
  if (static_cast<std::int64_t>(source_lengths.size()) != N) {
    throw Error("source_lengths", str(N) + " lengths (from memory)", str(source_lengths.size()));
  }
  if (max_length < 1 || max_length > config_.max_length) {
    throw Error("max_length", "in [1, " + str(config_.max_length) + "]", str(max_length));
  }
  DecoderCache cache;
  cache.source_lengths = source_lengths;
  for (const auto& layer : decoder_) {
    cache.layers.push_back(layer->start(memory, max_length, source_lengths));
  }
  return cache;
}

// The fewest rows a group of a decoding step takes (so a step of fewer than twice as many stays
// whole): a guess, not measured; 64 rows in 2 groups measured above.
constexpr std::int64_t kStepRowsPerGroup = 16;

// tokens [N] -> logits [N, V]
Tensor Translator::step(DecoderCache& cache, const std::vector<std::int64_t>& tokens,
                        Tensor* cross_weights) {
  const std::int64_t N = cache.rows();
  if (static_cast<std::int64_t>(tokens.size()) != N) {
    throw Error("tokens", str(N) + " tokens (the cache's rows)", str(tokens.size()));
  }
  if (cache.layers.empty() || cache.length >= cache.layers[0].self_k.size(1)) {
    throw Error("cache", "room for another token", "full at " + str(cache.length) + " tokens");
  }
  for (const std::int64_t t : tokens) {
    if (t < 0 || t >= config_.target_vocab) {
      throw Error("tokens", "ids in [0, " + str(config_.target_vocab) + ")", str(t));
    }
  }
  ++cache.length;
  const std::int64_t position = cache.length - 1;
  // The rows in groups, one per thread, each through the whole decoder on its thread: a step's
  // products and attention calls are too small to share well op by op. A decoding step of qkv
  // demo's translator, 64 rows, 2 threads of an Intel Xeon (AVX-512, AMX; 2026-11-28): 740 us in
  // two groups against 850 whole; `qkv bench --training` decoding 26223-27085 tokens/s against
  // 24969-25654 (3 alternated pairs). Every op computes a row the same way whatever rows lie
  // beside it (the products' tiles, the attention rows, layer norm's rows), so the logits are
  // bitwise those of one group (Translator.StepLogitsDoNotDependOnTheThreadCount). Under autocast
  // the half products are left whole.
  const std::int64_t wanted =
      std::min<std::int64_t>(N / kStepRowsPerGroup, std::int64_t{num_threads()});
  if (wanted < 2 || ag::autocast_dtype()) {
    ag::NoGrad no_grad;
    return step_rows(cache, tokens, position, cross_weights);
  }
  const detail::ThreadShare share(static_cast<int>(wanted));
  const int groups = share.threads();  // 1 where concurrent calls hold the budget
  const std::int64_t per_group = (N + groups - 1) / groups;
  std::vector<Tensor> logits(static_cast<std::size_t>(groups)), weights(logits.size());
  std::vector<std::exception_ptr> errors(logits.size());
#pragma omp parallel for schedule(static, 1) num_threads(groups)
  for (int g = 0; g < groups; ++g) {
    try {
      ag::NoGrad no_grad;  // per thread
      const std::int64_t r0 = g * per_group, r1 = std::min(N, r0 + per_group);
      DecoderCache part;
      part.length = cache.length;
      part.source_lengths.assign(cache.source_lengths.begin() + r0,
                                 cache.source_lengths.begin() + r1);
      for (const nn::DecoderLayerCache& layer : cache.layers) {
        part.layers.push_back({layer.self_k.slice(0, r0, r1), layer.self_v.slice(0, r0, r1),
                               layer.cross_k.slice(0, r0, r1), layer.cross_v.slice(0, r0, r1)});
      }
      const std::vector<std::int64_t> rows(tokens.begin() + r0, tokens.begin() + r1);
      logits[g] = step_rows(part, rows, position, cross_weights != nullptr ? &weights[g] : nullptr);
    } catch (...) {
      errors[g] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  if (cross_weights != nullptr) *cross_weights = ops::concat(weights, 0);
  return ops::concat(logits, 0);
}

// tokens [n] -> logits [n, V]
Tensor Translator::step_rows(DecoderCache& cache, const std::vector<std::int64_t>& tokens,
                             std::int64_t position, Tensor* cross_weights) {
  const auto N = static_cast<std::int64_t>(tokens.size());
  Var x = embed(target_embedding_, tokens, N, 1, position);
  const nn::AttentionCall cross_call = memory_call(cache.source_lengths);
  for (std::size_t l = 0; l < decoder_.size(); ++l) {
    const bool last = l + 1 == decoder_.size();
    x = decoder_[l]->step(x, cache.layers[l], position, cross_call, last ? cross_weights : nullptr);
  }
  const Tensor logits = output_(decoder_norm_(x)).value();  // [N, 1, V]
  if (cross_weights != nullptr) *cross_weights = cross_weights->reshape({N, config_.heads, -1});
  return logits.reshape({N, config_.target_vocab});
}

namespace {

// A DecoderCache as Seq2Seq's DecoderState.
class CacheState final : public DecoderState {
 public:
  explicit CacheState(DecoderCache cache) : cache(std::move(cache)) {}
  std::int64_t rows() const override { return cache.rows(); }
  void select(const std::vector<std::int64_t>& rows) override { cache.select(rows); }
  DecoderCache cache;
};

}  // namespace

std::unique_ptr<DecoderState> Translator::begin_decoding(
    const Var& memory, const std::vector<std::int64_t>& source_lengths, std::int64_t max_length) {
  return std::make_unique<CacheState>(start_decoding(memory, source_lengths, max_length));
}

Tensor Translator::step(DecoderState& state, const std::vector<std::int64_t>& tokens,
                        Tensor* cross_weights) {
  auto* cache = dynamic_cast<CacheState*>(&state);
  if (cache == nullptr) throw Error("state", "one begun by this Translator", "another model's");
  return step(cache->cache, tokens, cross_weights);
}

}  // namespace qkv::models
