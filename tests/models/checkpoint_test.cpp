// load_translator on files whose metadata was tampered with: each is a qkv::Error naming the
// field or the tensor, thrown before a model of the claimed size is allocated (a config of 10^9
// layers or a width of 2^40 must not reach the allocator).
#include "qkv/models/checkpoint.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/safetensors.hpp"

namespace qkv::models {
namespace {

constexpr const char* kConfigKey = "qkv.translator.config";

class TamperedCheckpoint : public ::testing::Test {
 protected:
  // A model of vocabularies of 4 + 12 words (a .. l), d_model 8, 2 heads, 1 + 1 layers, saved once.
  static void SetUpTestSuite() {
    TranslatorConfig c;
    c.source_vocab = c.target_vocab = 16;
    c.d_model = 8;
    c.heads = 2;
    c.encoder_layers = c.decoder_layers = 1;
    c.dim_feedforward = 16;
    c.max_length = 16;
    std::vector<std::string> words;
    for (char c = 'a'; c < 'a' + 12; ++c) words.emplace_back(1, c);
    save_translator(Translator(c), Vocabulary(words), Vocabulary(words), original());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove(original());
    std::filesystem::remove(tampered());
  }
  static std::filesystem::path original() {
    return std::filesystem::temp_directory_path() / "qkv_checkpoint_test.safetensors";
  }
  static std::filesystem::path tampered() {
    return std::filesystem::temp_directory_path() / "qkv_checkpoint_test_tampered.safetensors";
  }

  // The message load_translator gives for the original file with metadata `key` edited, or
  // "loaded" when it loads.
  static std::string load_with(const std::string& key, std::string (*edit)(std::string)) {
    SafetensorsContents contents = load_safetensors(original());
    contents.metadata.at(key) = edit(contents.metadata.at(key));
    save_safetensors(tampered(), contents.tensors, contents.metadata);
    try {
      load_translator(tampered());
    } catch (const Error& e) {
      return e.what();
    }
    return "loaded";
  }
};

// The compact JSON of the config with the value of `field` replaced by `value`.
std::string with_field(std::string config, const std::string& field, const std::string& value) {
  const std::string key = "\"" + field + "\":";
  const std::size_t start = config.find(key) + key.size();
  return config.replace(start, config.find_first_of(",}", start) - start, value);
}

TEST_F(TamperedCheckpoint, LoadsWhenUntouched) {
  EXPECT_EQ(load_with(kConfigKey, [](std::string c) { return c; }), "loaded");
}

TEST_F(TamperedCheckpoint, SizesMustBeIntegersOfAtLeastOne) {
  EXPECT_EQ(load_with(kConfigKey, [](std::string c) { return with_field(c, "heads", "1.5"); }),
            "qkv.translator.config.heads: expected an integer >= 1, got 1.5");
  EXPECT_EQ(load_with(kConfigKey, [](std::string c) { return with_field(c, "heads", "0"); }),
            "qkv.translator.config.heads: expected an integer >= 1, got 0");
  EXPECT_EQ(load_with(kConfigKey, [](std::string c) { return with_field(c, "d_model", "-8"); }),
            "qkv.translator.config.d_model: expected an integer >= 1, got -8");
  EXPECT_EQ(
      load_with(kConfigKey, [](std::string c) { return with_field(c, "decoder_layers", "\"1\""); }),
      "qkv.translator.config.decoder_layers: expected an integer >= 1, got \"1\"");
}

TEST_F(TamperedCheckpoint, SizesMustMatchTheTensorsBeforeAnyAllocation) {
  EXPECT_EQ(load_with(kConfigKey,
                      [](std::string c) { return with_field(c, "d_model", "1099511627776"); }),
            "tensor 'source_embedding.weight': expected shape [16, 1099511627776] (from "
            "qkv.translator.config), got [16, 8]");
  EXPECT_EQ(load_with(kConfigKey,
                      [](std::string c) { return with_field(c, "encoder_layers", "1000000000"); }),
            "tensor 'encoder.layers.999999999.linear1.weight': expected shape [16, 8] (from "
            "qkv.translator.config), got none");
  EXPECT_EQ(load_with(kConfigKey,
                      [](std::string c) {
                        return with_field(c, "dim_feedforward", "4611686018427387904");
                      }),
            "tensor 'encoder.layers.0.linear1.weight': expected shape [4611686018427387904, 8] "
            "(from qkv.translator.config), got [16, 8]");
  EXPECT_EQ(
      load_with(kConfigKey, [](std::string c) { return with_field(c, "target_vocab", "17"); }),
      "tensor 'target_embedding.weight': expected shape [17, 8] (from "
      "qkv.translator.config), got [16, 8]");
  EXPECT_EQ(load_with(kConfigKey,
                      [](std::string c) { return with_field(c, "max_length", "1000000000000"); }),
            "qkv.translator.config.max_length: expected at most 65536, got 1000000000000");
}

TEST_F(TamperedCheckpoint, VocabulariesMustHaveTheConfigsSizes) {
  EXPECT_EQ(load_with("qkv.source_vocabulary", [](std::string words) { return words + "extra\n"; }),
            "qkv.source_vocabulary: expected 16 words (source_vocab of the config), got 17");
  EXPECT_EQ(load_with("qkv.target_vocabulary",
                      [](std::string words) { return words.substr(words.find('\n') + 1); }),
            "qkv.target_vocabulary: expected 16 words (target_vocab of the config), got 15");
}

}  // namespace
}  // namespace qkv::models
