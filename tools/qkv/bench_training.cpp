// qkv bench --training: the demo's translator (qkv demo's model, corpus and batches) trained and
// decoded, timed step by step; with --batches-json it also writes the batches it used, so that
// bench/compare_training.py can train PyTorch's twin of the model on the same ones.
#include "qkv/bench_training.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/models/train.hpp"
#include "qkv/models/translator.hpp"
#include "qkv/system.hpp"
#include "qkv/version.hpp"

namespace qkv::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Ids = std::vector<std::int64_t>;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median_of(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// The decode half: sentences in batches of kDecodeBatch, each batch run for (its longest
// reference + 1) greedy steps with the KV cache, whatever the model emits, so that a trained and
// an untrained model (and PyTorch's twin) do the same work. Tokens: each sentence's reference
// length + 1 (its <eos>).
constexpr std::int64_t kDecodeBatch = 64;

struct DecodeTiming {
  std::int64_t tokens = 0;
  double seconds = 0;
};

DecodeTiming time_decoding(models::Translator& model, const std::vector<Ids>& sources,
                           const std::vector<Ids>& references) {
  autograd::NoGrad no_grad;
  DecodeTiming timing;
  const auto start = Clock::now();
  for (std::size_t first = 0; first < sources.size(); first += kDecodeBatch) {
    const std::size_t last = std::min(sources.size(), first + kDecodeBatch);
    const std::vector<Ids> rows(sources.begin() + static_cast<std::ptrdiff_t>(first),
                                sources.begin() + static_cast<std::ptrdiff_t>(last));
    std::int64_t steps = 0;
    for (std::size_t i = first; i < last; ++i) {
      const auto n = static_cast<std::int64_t>(references[i].size()) + 1;
      steps = std::max(steps, n);
      timing.tokens += n;
    }
    const models::Batch batch = models::make_batch(rows);
    const autograd::Var memory = model.encode(batch);
    models::DecoderCache cache = model.start_decoding(memory, batch.lengths, steps);
    Ids tokens(rows.size(), models::Vocabulary::kBos);
    for (std::int64_t s = 0; s < steps; ++s) {
      const Tensor logits = model.step(cache, tokens);  // [N, V]
      const std::vector<double> values = logits.to_vector();
      const std::int64_t vocab = logits.size(1);
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const double* row = values.data() + static_cast<std::int64_t>(r) * vocab;
        tokens[r] = std::max_element(row, row + vocab) - row;
      }
    }
  }
  timing.seconds = seconds_since(start);
  return timing;
}

nlohmann::ordered_json ids_json(const std::vector<Ids>& rows) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Ids& r : rows) out.push_back(r);
  return out;
}

}  // namespace

void run_training_bench(const TrainingBenchOptions& o) {
  std::ofstream json_file, batches_file;
  if (!o.json_path.empty()) {
    json_file.open(o.json_path);
    if (!json_file) throw Error("--json", "a writable file", o.json_path);
  }
  if (!o.batches_path.empty()) {
    batches_file.open(o.batches_path);
    if (!batches_file) throw Error("--batches-json", "a writable file", o.batches_path);
  }
  const std::vector<models::SentencePair> train = models::generate_corpus(o.sentences, o.seed);
  // Decoded sentences: another draw of the corpus (for speed alone, overlap with training is
  // harmless).
  const std::vector<models::SentencePair> test =
      models::generate_corpus(o.decode_sentences, o.seed + 0x9e3779b9ULL);
  const models::Vocabulary source(models::source_words()), target(models::target_words());
  std::vector<models::Example> examples;
  for (const models::SentencePair& p : train) {
    examples.push_back({source.encode(p.source), target.encode(p.target)});
  }
  std::vector<Ids> decode_sources, decode_references;
  for (const models::SentencePair& p : test) {
    decode_sources.push_back(source.encode(p.source));
    decode_references.push_back(target.encode(p.target));
  }

  models::TranslatorConfig config;  // qkv demo's model
  config.source_vocab = source.size();
  config.target_vocab = target.size();
  config.d_model = 128;
  config.heads = 4;
  config.encoder_layers = 2;
  config.decoder_layers = 2;
  config.dim_feedforward = 512;
  config.seed = o.seed;
  models::Translator model(config);

  models::TrainOptions train_options;  // qkv demo's, but for the step count
  train_options.batch_size = o.batch;
  train_options.lr = 3e-3;
  train_options.seed = o.seed;
  train_options.steps = o.warmup + o.steps;
  train_options.warmup_steps = std::min<std::int64_t>(200, train_options.steps / 10);

  std::printf(
      "qkv %s, %s, %d threads: qkv demo's translator (2 + 2 layers, d_model 128, 4 heads, "
      "feed-forward 512), batches of %lld pairs\n",
      std::string(version()).c_str(), cpu_model().c_str(), num_threads(),
      static_cast<long long>(o.batch));
  std::vector<double> step_seconds;
  std::vector<std::int64_t> step_tokens;
  double last = 0;
  models::train(model, examples, train_options, [&](const models::TrainProgress& p) {
    step_seconds.push_back(p.elapsed_seconds - last);
    step_tokens.push_back(p.tokens);
    last = p.elapsed_seconds;
  });
  double timed_seconds = 0;
  std::int64_t timed_tokens = 0;
  const std::vector<double> timed(step_seconds.begin() + o.warmup, step_seconds.end());
  for (std::size_t s = static_cast<std::size_t>(o.warmup); s < step_seconds.size(); ++s) {
    timed_seconds += step_seconds[s];
    timed_tokens += step_tokens[s];
  }
  const double train_tps = static_cast<double>(timed_tokens) / timed_seconds;
  std::vector<double> step_tps;  // each timed step's target tokens per second
  for (std::size_t s = static_cast<std::size_t>(o.warmup); s < step_seconds.size(); ++s) {
    step_tps.push_back(static_cast<double>(step_tokens[s]) / step_seconds[s]);
  }
  std::printf(
      "training: %lld steps after %lld untimed, median %.2f ms a step, the median step %.0f "
      "target tokens/s (all tokens over all time %.0f)\n",
      static_cast<long long>(o.steps), static_cast<long long>(o.warmup), 1e3 * median_of(timed),
      median_of(step_tps), train_tps);
  const DecodeTiming decoding = time_decoding(model, decode_sources, decode_references);
  const double decode_tps = static_cast<double>(decoding.tokens) / decoding.seconds;
  std::printf(
      "greedy decoding with the KV cache: %zu sentences in batches of %lld, %lld tokens in "
      "%.3f s, %.0f tokens/s\n",
      decode_sources.size(), static_cast<long long>(kDecodeBatch),
      static_cast<long long>(decoding.tokens), decoding.seconds, decode_tps);

  if (json_file.is_open()) {
    nlohmann::ordered_json doc;
    doc["machine"] = {{"cpu", cpu_model()},
                      {"threads", num_threads()},
                      {"qkv_version", std::string(version())},
                      {"date", utc_date()}};
    doc["train"] = {{"steps", o.steps},
                    {"untimed_steps", o.warmup},
                    {"batch", o.batch},
                    {"step_seconds", timed},
                    {"step_tokens",
                     std::vector<std::int64_t>(step_tokens.begin() + o.warmup, step_tokens.end())},
                    {"median_step_ms", 1e3 * median_of(timed)},
                    {"median_step_tokens_per_second", median_of(step_tps)},
                    {"tokens_per_second", train_tps}};
    doc["decode"] = {{"sentences", decode_sources.size()},
                     {"batch", kDecodeBatch},
                     {"tokens", decoding.tokens},
                     {"seconds", decoding.seconds},
                     {"tokens_per_second", decode_tps}};
    json_file << doc.dump(2) << '\n';
    if (!json_file) throw Error("--json", "a writable file", o.json_path);
  }
  if (batches_file.is_open()) {
    // The batches train() drew, in order (source ids; target ids without <bos> or <eos>), and the
    // decoded sentences with their references.
    Generator g(o.seed);
    const std::vector<std::vector<std::size_t>> batches =
        models::epoch_batches(examples, o.batch, g);
    nlohmann::ordered_json doc;
    doc["source_vocab"] = config.source_vocab;
    doc["target_vocab"] = config.target_vocab;
    doc["pad"] = models::Vocabulary::kPad;
    doc["bos"] = models::Vocabulary::kBos;
    doc["eos"] = models::Vocabulary::kEos;
    doc["model"] = {{"d_model", config.d_model},
                    {"heads", config.heads},
                    {"encoder_layers", config.encoder_layers},
                    {"decoder_layers", config.decoder_layers},
                    {"dim_feedforward", config.dim_feedforward},
                    {"max_length", config.max_length}};
    doc["train"] = {{"lr", train_options.lr},
                    {"weight_decay", train_options.weight_decay},
                    {"betas", {0.9, 0.98}},
                    {"label_smoothing", train_options.label_smoothing},
                    {"clip_norm", train_options.clip_norm}};
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::int64_t s = 0; s < train_options.steps; ++s) {
      std::vector<Ids> sources, targets;
      for (const std::size_t r : batches[static_cast<std::size_t>(s) % batches.size()]) {
        sources.push_back(examples[r].source);
        targets.push_back(examples[r].target);
      }
      out.push_back({{"source", ids_json(sources)}, {"target", ids_json(targets)}});
    }
    doc["batches"] = out;
    doc["decode"] = {{"batch", kDecodeBatch},
                     {"source", ids_json(decode_sources)},
                     {"reference", ids_json(decode_references)}};
    batches_file << doc.dump() << '\n';
    if (!batches_file) throw Error("--batches-json", "a writable file", o.batches_path);
  }
}

}  // namespace qkv::cli
