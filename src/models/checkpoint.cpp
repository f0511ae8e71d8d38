// The translator's file: parameters plus config and vocabularies in the safetensors metadata.
#include "qkv/models/checkpoint.hpp"

#include <cstdint>
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

// A size of the config: an integer in [1, 2^63).
std::int64_t size_field(const nlohmann::json& config, const char* key) {
  const nlohmann::json& value = config.at(key);
  if (!value.is_number_integer() || value.get<std::int64_t>() < 1) {
    throw Error(std::string(kConfigKey) + "." + key, "an integer >= 1", value.dump());
  }
  return value.get<std::int64_t>();
}

// The tensor `name` of the file, with the shape the config gives it.
void expect_tensor(const NamedTensors& tensors, const std::string& name, const Shape& shape) {
  const auto it = tensors.find(name);
  if (it == tensors.end() || it->second.shape() != shape) {
    throw Error("tensor '" + name + "'",
                "shape " + shape_string(shape) + " (from " + kConfigKey + ")",
                it == tensors.end() ? "none" : shape_string(it->second.shape()));
  }
}

// The config's sizes against the tensors that carry them, before a model of that config is
// allocated: a corrupt config (10^9 layers, a width of 2^40) must fail here, not in the
// allocator. max_length, which no tensor carries, sizes the position table [max_length, d_model]
// and a decoder's KV cache; more than kMaxLength tokens (512 times the demo's 128) is taken as
// corrupt.
constexpr std::int64_t kMaxLength = 65536;
void check_config(const TranslatorConfig& c, const NamedTensors& tensors) {
  expect_tensor(tensors, "source_embedding.weight", {c.source_vocab, c.d_model});
  expect_tensor(tensors, "target_embedding.weight", {c.target_vocab, c.d_model});
  expect_tensor(tensors,
                "encoder.layers." + std::to_string(c.encoder_layers - 1) + ".linear1.weight",
                {c.dim_feedforward, c.d_model});
  expect_tensor(tensors,
                "decoder.layers." + std::to_string(c.decoder_layers - 1) + ".linear1.weight",
                {c.dim_feedforward, c.d_model});
  if (c.max_length > kMaxLength) {
    throw Error(std::string(kConfigKey) + ".max_length", "at most " + std::to_string(kMaxLength),
                std::to_string(c.max_length));
  }
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
    c.source_vocab = size_field(j, "source_vocab");
    c.target_vocab = size_field(j, "target_vocab");
    c.d_model = size_field(j, "d_model");
    c.heads = size_field(j, "heads");
    c.encoder_layers = size_field(j, "encoder_layers");
    c.decoder_layers = size_field(j, "decoder_layers");
    c.dim_feedforward = size_field(j, "dim_feedforward");
    c.max_length = size_field(j, "max_length");
  } catch (const nlohmann::json::exception& e) {
    throw Error(kConfigKey, "the translator's config as JSON", e.what());
  }
  check_config(c, contents.tensors);
  TranslatorBundle bundle{nullptr, Vocabulary(words_of(entry(contents.metadata, kSourceKey, path))),
                          Vocabulary(words_of(entry(contents.metadata, kTargetKey, path)))};
  if (bundle.source_vocabulary.size() != c.source_vocab) {
    throw Error(kSourceKey, std::to_string(c.source_vocab) + " words (source_vocab of the config)",
                std::to_string(bundle.source_vocabulary.size()));
  }
  if (bundle.target_vocabulary.size() != c.target_vocab) {
    throw Error(kTargetKey, std::to_string(c.target_vocab) + " words (target_vocab of the config)",
                std::to_string(bundle.target_vocabulary.size()));
  }
  bundle.model = std::make_unique<Translator>(c);
  nn::load_state_dict(*bundle.model, contents.tensors);
  bundle.model->eval();
  return bundle;
}

}  // namespace qkv::models
