// qkv demo: the main job. Generates the synthetic parallel corpus, trains the translator with a
// progress bar, evaluates it on held-out sentences (exact match, BLEU by length, alignment),
// draws cross-attention heatmaps, saves the model, and writes summary.json.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "qkv/autograd/ops.hpp"
#include "qkv/checks.hpp"
#include "qkv/commands.hpp"
#include "qkv/diagnostics.hpp"
#include "qkv/error.hpp"
#include "qkv/labels.hpp"
#include "qkv/models/checkpoint.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/models/decode.hpp"
#include "qkv/models/evaluate.hpp"
#include "qkv/models/train.hpp"
#include "qkv/ops.hpp"
#include "qkv/progress.hpp"
#include "qkv/safetensors.hpp"
#include "qkv/system.hpp"
#ifdef QKV_WITH_DIST
#include "qkv/dist.hpp"
#endif
#include "qkv/viz/diagnostics.hpp"
#include "qkv/viz/heatmap.hpp"

namespace qkv::cli {
namespace {

namespace fs = std::filesystem;
using models::SentencePair;

struct DemoOptions {
  std::string out = "qkv-demo";
  std::uint64_t seed = 1;
  std::int64_t train_sentences = 40000;
  std::int64_t eval_sentences = 500;
  std::int64_t steps = 0;  // 0: train for time_budget seconds
  // Training time when steps is 0: with the rest of the job (~15 s) the demo takes at most about
  // 4 minutes, inside the 5 on 2 cores even when a step turns out slower than timed.
  double time_budget = 230;
  // The most steps of a time-budget run: on the Zen 5 VM (2 threads, 2026-11-25) 4000 of them
  // ended at 2m11s-2m20s, at 99.8-100% exact match; on the Intel Xeon VM (2 threads, 2026-11-28,
  // qkv's own product tiles) 8000 ended at 3m17s, 100.0%; on the Zen 5 VM (2026-11-28, the
  // products' transposes) 12000 ended at 3m04s, 100.0%. 16000 lets the budget end the run there;
  // where steps are slower it does anyway.
  std::int64_t max_steps = 16000;
  // Batch and learning rate, from runs of 200 s of training on the 2-core VM (2026-11-23, held-out
  // exact match, greedy): batch 64 at lr 2e-3 87.2%, at 3e-3 90.6%; batch 32 at 3e-3 96.0%;
  // batch 24 at 3e-3 93.0%. Smaller batches make more updates in the same time.
  std::int64_t batch = 32;
  double lr = 3e-3;
  // Data parallel over MPI (`mpirun -np N qkv demo --distributed`): each rank trains on its share
  // of every batch of `batch` pairs, with the update of the whole batch; rank 0 alone prints,
  // evaluates and writes.
  bool distributed = false;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t layers = 2;  // encoder and decoder each
  std::int64_t feedforward = 512;
  std::int64_t beam = 4;
  std::int64_t beam_sentences = 100;  // held-out sentences also decoded with beam search
  std::int64_t heatmaps = 4;
  std::string dtype = "f32";  // what matmul and attention compute in: f32, bf16 or f16
};

// Held-out pairs: drawn from another seed, without any source sentence the training set has.
std::vector<SentencePair> held_out(const std::vector<SentencePair>& train, std::int64_t count,
                                   std::uint64_t seed) {
  std::set<std::vector<std::string>> seen;
  for (const SentencePair& p : train) seen.insert(p.source);
  std::vector<SentencePair> out;
  std::int64_t drawn = 0;
  while (static_cast<std::int64_t>(out.size()) < count) {
    const std::int64_t want = 2 * (count - static_cast<std::int64_t>(out.size()));
    for (SentencePair& p : models::generate_corpus(want, seed + 0x9e3779b9ULL + drawn)) {
      if (static_cast<std::int64_t>(out.size()) < count && seen.insert(p.source).second) {
        out.push_back(std::move(p));
      }
    }
    ++drawn;
  }
  return out;
}

// The held-out sentences whose teacher-forced cross-attention the diagnostics read.
constexpr std::int64_t kDiagnosedSentences = 200;

std::string alignment_string(const SentencePair& p) {
  std::string s;
  for (std::size_t t = 0; t < p.target.size(); ++t) {
    s += (t == 0 ? "" : " ") + p.target[t] + "<-";
    for (std::size_t k = 0; k < p.alignment[t].size(); ++k) {
      s += (k == 0 ? "" : "+") + p.source[static_cast<std::size_t>(p.alignment[t][k])];
    }
  }
  return s;
}

// weights [H, T, S] -> [H + 1, T, S], the head average last
Tensor with_average(const Tensor& weights) {
  return ops::concat({weights, ops::mean(weights, 0, /*keepdim=*/true)}, 0);
}

void run_demo(const DemoOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
#ifdef QKV_WITH_DIST
  std::optional<dist::DataParallel> group;
  if (o.distributed) {
    group.emplace(dist::Communicator::world());
    // Only rank 0 speaks: the others' output would repeat its own.
    if (group->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) {
      throw Error("stdout", "/dev/null for ranks other than 0", "no such file");
    }
  }
#else
  if (o.distributed) {
    throw Error("--distributed", "a qkv built with MPI (qkv::dist)",
                "a build without it: install openmpi-bin libopenmpi-dev and configure again");
  }
#endif
  const DType dtype = o.dtype == "bf16" ? DType::bf16 : o.dtype == "f16" ? DType::f16 : DType::f32;
  // Training, evaluation and the heatmaps all compute in dtype; the weights stay f32.
  std::optional<autograd::Autocast> autocast;
  if (dtype != DType::f32) autocast.emplace(dtype);
  const fs::path out(o.out);
  std::error_code error;
  fs::create_directories(out / "heatmaps", error);
  if (error) {
    throw Error("--out", "a folder that can be created", o.out + " (" + error.message() + ")");
  }
  std::printf(
      "qkv demo: a Transformer learns to translate a synthetic English into a French-like\n"
      "language, on %d threads, computing in %s; everything goes to %s/\n\n",
      num_threads(), std::string(dtype_name(dtype)).c_str(), out.string().c_str());

  // 1. Data
  const std::vector<SentencePair> train = models::generate_corpus(o.train_sentences, o.seed);
  const std::vector<SentencePair> test = held_out(train, o.eval_sentences, o.seed);
  const models::Vocabulary source(models::source_words()), target(models::target_words());
  std::int64_t source_words = 0, target_words = 0;
  for (const SentencePair& p : train) {
    source_words += static_cast<std::int64_t>(p.source.size());
    target_words += static_cast<std::int64_t>(p.target.size());
  }
  std::printf(
      "data: %lld training pairs (%.1f source, %.1f target words on average), %lld "
      "held out; vocabularies of %lld and %lld words\n",
      static_cast<long long>(train.size()),
      static_cast<double>(source_words) / static_cast<double>(train.size()),
      static_cast<double>(target_words) / static_cast<double>(train.size()),
      static_cast<long long>(test.size()), static_cast<long long>(source.size()),
      static_cast<long long>(target.size()));
  std::printf("  example: %s\n        ->  %s\n  aligned:  %s\n\n",
              models::join_words(train[0].source).c_str(),
              models::join_words(train[0].target).c_str(), alignment_string(train[0]).c_str());

  // 2. Model and training
  models::TranslatorConfig config;
  config.source_vocab = source.size();
  config.target_vocab = target.size();
  config.d_model = o.d_model;
  config.heads = o.heads;
  config.encoder_layers = o.layers;
  config.decoder_layers = o.layers;
  config.dim_feedforward = o.feedforward;
  config.seed = o.seed;
  models::Translator model(config);
  std::int64_t parameters = 0;
  for (const auto& p : model.parameters()) parameters += p.numel();
  std::printf("model: %lld + %lld layers, d_model %lld, %lld heads, %.2fM parameters\n",
              static_cast<long long>(o.layers), static_cast<long long>(o.layers),
              static_cast<long long>(o.d_model), static_cast<long long>(o.heads),
              static_cast<double>(parameters) / 1e6);
  std::vector<models::Example> examples;
  for (const SentencePair& p : train) {
    examples.push_back({source.encode(p.source), target.encode(p.target)});
  }
  models::TrainOptions train_options;
#ifdef QKV_WITH_DIST
  if (group) {
    train_options.sync = &*group;
    std::printf("data parallel: %d ranks, %lld pairs of each batch a rank\n", group->size(),
                static_cast<long long>(o.batch / group->size()));
  }
#endif
  train_options.batch_size = o.batch;
  train_options.lr = o.lr;
  train_options.seed = o.seed;
  train_options.dtype = dtype;
  train_options.steps = o.steps == 0 ? o.max_steps : o.steps;
  if (o.steps == 0) {
    train_options.time_budget = o.time_budget;
    train_options.warmup_steps = std::min<std::int64_t>(150, o.max_steps / 10);
    std::printf("training: %.0f s of steps of %lld sentence pairs\n", o.time_budget,
                static_cast<long long>(o.batch));
  } else {
    train_options.warmup_steps = std::min<std::int64_t>(200, train_options.steps / 10);
    std::printf("training: %lld steps of %lld sentence pairs\n",
                static_cast<long long>(train_options.steps), static_cast<long long>(o.batch));
  }
  // The bar counts seconds of the budget, or steps.
  ProgressBar bar(o.steps == 0 ? static_cast<std::int64_t>(o.time_budget) : train_options.steps,
                  o.steps == 0 ? " s" : "");
  const models::TrainReport report =
      models::train(model, examples, train_options, [&](const models::TrainProgress& p) {
        bar.update(o.steps == 0 ? static_cast<std::int64_t>(p.elapsed_seconds) : p.step,
                   "step " + std::to_string(p.step) + "  loss " + format_fixed(p.loss, 3) + "  " +
                       format_fixed(p.tokens_per_second, 0) + " tok/s  ETA " +
                       format_duration(p.eta_seconds));
      });
  bar.finish(std::to_string(report.steps) + " steps, loss " +
             format_fixed(report.losses.back(), 3) + " in " + format_duration(report.seconds));
  int ranks = 1;
#ifdef QKV_WITH_DIST
  if (group) {
    if (group->rank() != 0) return;  // every rank holds the same model: rank 0 goes on
    ranks = group->size();
  }
#endif

  // 3. Evaluation
  models::EvaluationOptions greedy;
  greedy.keep_attention = kDiagnosedSentences;
  const models::Evaluation e = models::evaluate(model, source, target, test, greedy);
  std::printf(
      "\nheld out, greedy (%lld sentences, %.1f s): exact match %.1f%%, BLEU %.1f, "
      "alignment accuracy %.1f%%\n",
      static_cast<long long>(e.sentences), e.seconds, 100 * e.exact_match, e.bleu,
      100 * e.alignment_accuracy);
  std::printf("  %-14s %9s %12s %6s\n", "source words", "sentences", "exact match", "BLEU");
  for (const models::BucketScore& b : e.buckets) {
    std::printf("  %3lld to %-7lld %9lld %11.1f%% %6.1f\n", static_cast<long long>(b.min_length),
                static_cast<long long>(b.max_length), static_cast<long long>(b.sentences),
                100 * b.exact_match, b.bleu);
  }
  int shown = 0;
  for (std::size_t i = 0; i < test.size() && shown < 3; ++i) {
    if (e.hypotheses[i] == test[i].target) continue;
    if (shown++ == 0) std::printf("  mistakes, for example:\n");
    std::printf("    %s\n      expected %s\n      got      %s\n",
                models::join_words(test[i].source).c_str(),
                models::join_words(test[i].target).c_str(),
                models::join_words(e.hypotheses[i]).c_str());
  }
  const nlohmann::json diagnostics =
      print_diagnostics(e, test, "the last decoder layer's cross-attention");
  const std::vector<SentencePair> beam_test(
      test.begin(), test.begin() + std::min<std::int64_t>(o.beam_sentences, e.sentences));
  models::EvaluationOptions beam_options;
  beam_options.beam = o.beam;
  const models::Evaluation beam = models::evaluate(model, source, target, beam_test, beam_options);
  std::printf("held out, beam %lld (first %lld sentences, %.1f s): exact match %.1f%%, BLEU %.1f\n",
              static_cast<long long>(o.beam), static_cast<long long>(beam.sentences), beam.seconds,
              100 * beam.exact_match, beam.bleu);

  // 4. Heatmaps: the model's own translation, the last layer's cross-attention per head and
  // averaged, with the beam's choice of words.
  nlohmann::json heatmaps = nlohmann::json::array();
  std::vector<std::vector<std::string>> sentences = {
      models::tokenize("the black cat sat on the mat")};
  for (std::int64_t i = 0; i + 1 < o.heatmaps && i < e.sentences; ++i) {
    sentences.push_back(test[static_cast<std::size_t>(i)].source);
  }
  std::printf("\nwhere it looks (the last decoder layer's cross-attention):\n");
  for (std::size_t i = 0; i < sentences.size(); ++i) {
    models::BeamOptions b;
    b.beam = o.beam;
    b.decode.keep_weights = true;
    b.decode.max_length = config.max_length;
    const models::Translation t = models::beam_search(model, source.encode(sentences[i]), b);
    const std::vector<std::string> rows = row_labels(t, target);
    const Tensor weights = with_average(t.cross_weights);
    viz::HeatmapOptions h;
    h.x_labels = sentences[i];
    h.y_labels = rows;
    for (std::int64_t head = 0; head < config.heads; ++head) {
      h.panel_titles.push_back("head " + std::to_string(head));
    }
    h.panel_titles.emplace_back("average");
    h.title =
        models::join_words(sentences[i]) + "  ->  " + models::join_words(target.decode(t.tokens));
    const std::string stem = "sentence-" + std::to_string(i + 1);
    const fs::path png = out / "heatmaps" / (stem + ".png"),
                   svg = out / "heatmaps" / (stem + ".svg");
    const fs::path tensors = out / "heatmaps" / (stem + ".safetensors");
    viz::write_heatmap(weights, h, png);
    viz::write_heatmap(weights, h, svg);
    save_safetensors(
        tensors, {{"cross_attention", weights}},
        {{"source", models::join_words(sentences[i])}, {"translation", models::join_words(rows)}});
    std::printf("  %s\n    -> %s\n    %s\n", models::join_words(sentences[i]).c_str(),
                models::join_words(target.decode(t.tokens)).c_str(), png.string().c_str());
    heatmaps.push_back({{"source", models::join_words(sentences[i])},
                        {"translation", models::join_words(target.decode(t.tokens))},
                        {"png", png.string()},
                        {"svg", svg.string()},
                        {"weights", tensors.string()}});
  }

  // 5. The model and the summary
  const fs::path model_path = out / "model.safetensors";
  models::save_translator(model, source, target, model_path);
  nlohmann::json buckets = nlohmann::json::array();
  for (const models::BucketScore& b : e.buckets) {
    buckets.push_back({{"min_source_words", b.min_length},
                       {"max_source_words", b.max_length},
                       {"sentences", b.sentences},
                       {"exact_match", b.exact_match},
                       {"bleu", b.bleu}});
  }
  const double total = std::chrono::duration<double>(Clock::now() - begin).count();
  const nlohmann::json summary = {
      {"exact_match", e.exact_match},
      {"bleu", e.bleu},
      {"alignment_accuracy", e.alignment_accuracy},
      {"train_seconds", report.seconds},
      {"total_seconds", total},
      {"eval_sentences", e.sentences},
      {"train_sentences", static_cast<std::int64_t>(train.size())},
      {"train_steps", report.steps},
      {"batch_size", o.batch},
      {"final_loss", report.losses.back()},
      {"threads", num_threads()},
      {"ranks", ranks},
      {"dtype", dtype_name(dtype)},
      {"skipped_steps", report.skipped_steps},
      {"seed", o.seed},
      {"parameters", parameters},
      {"buckets", buckets},
      {"beam",
       {{"width", o.beam},
        {"sentences", beam.sentences},
        {"exact_match", beam.exact_match},
        {"bleu", beam.bleu}}},
      {"model", model_path.string()},
      {"heatmaps", heatmaps},
      {"diagnostics", diagnostics},
  };
  std::ofstream summary_file(out / "summary.json");
  summary_file << summary.dump(2) << "\n";
  summary_file.close();
  if (!summary_file) {
    throw Error("--out", "a folder summary.json can be written to",
                (out / "summary.json").string());
  }
  std::printf(
      "\nwritten to %s/: model.safetensors (try: qkv translate --model %s \"the black "
      "cat sat on the mat\"), heatmaps/*.png|svg|safetensors, summary.json\n"
      "total %s\n",
      out.string().c_str(), model_path.string().c_str(), format_duration(total).c_str());
}

}  // namespace

void add_demo(CLI::App& app) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* demo = app.add_subcommand(
      "demo", "Train a small translator, evaluate it, and draw where it looks (the main job)");
  demo->add_option("--out", options->out, "Output folder")->capture_default_str();
  demo->add_option("--seed", options->seed, "Seed of the corpus, the model and the batches")
      ->capture_default_str()
      ->transform(integer<std::uint64_t>(0));
  demo->add_option("--train-sentences", options->train_sentences, "Training pairs")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--eval-sentences", options->eval_sentences, "Held-out pairs")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--steps", options->steps,
                   "Training steps; 0 trains for --time-budget seconds, the learning rate decaying "
                   "with the time (steps then depend on the machine)")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(0));
  demo->add_option("--time-budget", options->time_budget, "Seconds of training when --steps is 0")
      ->capture_default_str()
      ->check(finite_number(/*allow_zero=*/false));
  demo->add_option("--max-steps", options->max_steps, "Most steps of a --time-budget run")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--batch", options->batch, "Sentence pairs per step")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--lr", options->lr, "Peak learning rate")
      ->capture_default_str()
      ->check(finite_number(/*allow_zero=*/false));
  demo->add_option("--d-model", options->d_model, "Model width (a multiple of --heads)")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--heads", options->heads, "Attention heads")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--feedforward", options->feedforward, "Feed-forward width")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--layers", options->layers, "Encoder and decoder layers (each)")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--beam", options->beam, "Beam width")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  demo->add_option("--beam-sentences", options->beam_sentences,
                   "Held-out sentences also decoded with beam search")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(0));
  demo->add_option("--dtype", options->dtype,
                   "What matmul and attention compute in (mixed precision, f32 weights)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  demo->add_flag("--distributed", options->distributed,
                 "Data parallel over MPI, under mpirun: each rank trains on its share of every "
                 "batch");
  demo->add_option("--heatmaps", options->heatmaps, "Sentences to draw")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  const CLI::App* variants = add_demo_variants(*demo);
  const CLI::App* bottleneck = add_demo_bottleneck(*demo);
  demo->callback([options, variants, bottleneck] {
    if (variants->parsed() || bottleneck->parsed()) return;  // a subcommand ran instead
    if (options->d_model % options->heads != 0) {
      throw CLI::ValidationError("--heads", "expected a divisor of --d-model " +
                                                std::to_string(options->d_model) + ", got " +
                                                std::to_string(options->heads));
    }
    run_demo(*options);
  });
}

}  // namespace qkv::cli
