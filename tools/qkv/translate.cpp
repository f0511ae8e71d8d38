// qkv translate: loads a translator saved by qkv demo, translates sentences with greedy or beam
// search on the KV cache, prints per-token latency, and optionally draws the cross-attention.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qkv/checks.hpp"
#include "qkv/commands.hpp"
#include "qkv/error.hpp"
#include "qkv/files.hpp"
#include "qkv/labels.hpp"
#include "qkv/models/checkpoint.hpp"
#include "qkv/models/corpus.hpp"
#include "qkv/models/decode.hpp"
#include "qkv/viz/heatmap.hpp"

namespace qkv::cli {
namespace {

struct TranslateOptions {
  std::string model;
  std::vector<std::string> sentences;
  std::int64_t beam = 1;
  double length_alpha = 0.6;
  std::string heatmap;  // path; with several sentences, "-N" is inserted before the extension
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string numbered(const std::string& path, std::size_t i, std::size_t count) {
  if (count == 1) return path;
  const std::size_t dot = path.rfind('.');
  const std::string suffix = "-" + std::to_string(i + 1);
  return dot == std::string::npos ? path + suffix : path.substr(0, dot) + suffix + path.substr(dot);
}

void run_translate(const TranslateOptions& o) {
  if (!o.heatmap.empty()) expect_output_folder("--heatmap", o.heatmap);
  const models::TranslatorBundle bundle = load_named(
      o.model, [](const std::filesystem::path& path) { return models::load_translator(path); });
  models::Translator& model = *bundle.model;
  for (std::size_t i = 0; i < o.sentences.size(); ++i) {
    const std::vector<std::string> words = models::tokenize(o.sentences[i]);
    if (words.empty()) throw Error("sentence", "at least one word", "\"" + o.sentences[i] + "\"");
    std::vector<std::string> unknown;
    for (const std::string& w : words) {
      if (bundle.source_vocabulary.id(w) == models::Vocabulary::kUnk) unknown.push_back(w);
    }
    if (!unknown.empty()) {
      std::fprintf(stderr, "qkv translate: not in the vocabulary (read as <unk>): %s\n",
                   models::join_words(unknown).c_str());
    }
    models::BeamOptions b;
    b.beam = o.beam;
    b.length_alpha = o.length_alpha;
    b.decode.keep_weights = !o.heatmap.empty();
    b.decode.max_length = model.config().max_length;
    const auto start = std::chrono::steady_clock::now();
    const models::Translation t =
        models::beam_search(model, bundle.source_vocabulary.encode(words), b);
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::vector<std::string> out = bundle.target_vocabulary.decode(t.tokens);
    std::printf("%s\n", models::join_words(out).c_str());
    std::printf(
        "  %s, %zu tokens: %.3f ms per token (median decoder step, KV cache), %.2f ms "
        "in all; log p %.3f\n",
        o.beam == 1 ? "greedy" : ("beam " + std::to_string(o.beam)).c_str(), t.step_seconds.size(),
        1e3 * median(t.step_seconds), 1e3 * total, t.log_probability);
    if (!o.heatmap.empty()) {
      viz::HeatmapOptions h;
      h.x_labels = words;
      h.y_labels = row_labels(t, bundle.target_vocabulary);
      h.title = models::join_words(words) + "  ->  " + models::join_words(out);
      const std::string path = numbered(o.heatmap, i, o.sentences.size());
      viz::write_heatmap(t.cross_weights, h, path);
      std::printf("  cross-attention of the last layer: %s\n", path.c_str());
    }
  }
}

}  // namespace

void add_translate(CLI::App& app) {
  auto options = std::make_shared<TranslateOptions>();
  CLI::App* translate =
      app.add_subcommand("translate", "Translate sentences with a model saved by qkv demo");
  translate->add_option("--model", options->model, "The model.safetensors qkv demo wrote")
      ->required();
  translate->add_option("sentences", options->sentences, "Sentences to translate")
      ->required()
      ->check(not_blank());
  translate->add_option("--beam", options->beam, "Beam width (1: greedy)")
      ->capture_default_str()
      ->transform(integer<std::int64_t>(1));
  translate
      ->add_option("--length-alpha", options->length_alpha,
                   "Beam search's length normalization exponent")
      ->capture_default_str()
      ->check(finite_number(/*allow_zero=*/true));
  translate
      ->add_option("--heatmap", options->heatmap, "Draw the cross-attention to this .png or .svg")
      ->check(image_file());
  translate->callback([options] { run_translate(*options); });
}

}  // namespace qkv::cli
