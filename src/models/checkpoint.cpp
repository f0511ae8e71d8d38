// The translator's file: parameters plus config and vocabularies in the safetensors metadata.
#include "qkv/models/checkpoint.hpp"

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/safetensors.hpp"

namespace qkv::models {

namespace {

constexpr const char* kConfigKey = "qkv.translator.config";
constexpr const char* kSourceKey = "qkv.source_vocabulary";
constexpr const char* kTargetKey = "qkv.target_vocabulary";

// The words after the four special tokens, one per line.
std::string lines(const Vocabulary& v) {
  std::string text;
  for (std::size_t i = 4; i < v.words().size(); ++i) text += v.words()[i] + "\n";
  return text;
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) words.push_back(line);
  }
  return words;
}

const std::string& entry(const SafetensorsMetadata& metadata, const char* key,
                         const std::filesystem::path& path) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) {
    throw Error("path", std::string("a translator file with metadata \"") + key + "\"",
                path.string() + " without it");
  }
  return it->second;
}

}  // namespace

void save_translator(const Translator& model, const Vocabulary& source, const Vocabulary& target,
                     const std::filesystem::path& path) {
  const TranslatorConfig& c = model.config();
  if (source.size() != c.source_vocab) {
    throw Error("source", "a vocabulary of " + std::to_string(c.source_vocab) + " (the model's)",
                std::to_string(source.size()));
  }
  if (target.size() != c.target_vocab) {
    throw Error("target", "a vocabulary of " + std::to_string(c.target_vocab) + " (the model's)",
                std::to_string(target.size()));
  }
  const nlohmann::json config = {
      {"source_vocab", c.source_vocab},
      {"target_vocab", c.target_vocab},
      {"d_model", c.d_model},
      {"heads", c.heads},
      {"encoder_layers", c.encoder_layers},
      {"decoder_layers", c.decoder_layers},
      {"dim_feedforward", c.dim_feedforward},
      {"max_length", c.max_length},
  };
  save_safetensors(
      path, nn::state_dict(model),
      {{kConfigKey, config.dump()}, {kSourceKey, lines(source)}, {kTargetKey, lines(target)}});
}

TranslatorBundle load_translator(const std::filesystem::path& path) {
  const SafetensorsContents contents = load_safetensors(path);
  TranslatorConfig c;
  try {
    const nlohmann::json j = nlohmann::json::parse(entry(contents.metadata, kConfigKey, path));
    c.source_vocab = j.at("source_vocab").get<std::int64_t>();
    c.target_vocab = j.at("target_vocab").get<std::int64_t>();
    c.d_model = j.at("d_model").get<std::int64_t>();
    c.heads = j.at("heads").get<std::int64_t>();
    c.encoder_layers = j.at("encoder_layers").get<std::int64_t>();
    c.decoder_layers = j.at("decoder_layers").get<std::int64_t>();
    c.dim_feedforward = j.at("dim_feedforward").get<std::int64_t>();
    c.max_length = j.at("max_length").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(kConfigKey, "the translator's config as JSON", e.what());
  }
  TranslatorBundle bundle{nullptr, Vocabulary(words_of(entry(contents.metadata, kSourceKey, path))),
                          Vocabulary(words_of(entry(contents.metadata, kTargetKey, path)))};
  if (bundle.source_vocabulary.size() != c.source_vocab ||
      bundle.target_vocabulary.size() != c.target_vocab) {
    throw Error("path", "vocabularies of the config's sizes",
                std::to_string(bundle.source_vocabulary.size()) + " and " +
                    std::to_string(bundle.target_vocabulary.size()) + " words");
  }
  bundle.model = std::make_unique<Translator>(c);
  nn::load_state_dict(*bundle.model, contents.tensors);
  bundle.model->eval();
  return bundle;
}

}  // namespace qkv::models
