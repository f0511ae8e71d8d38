#pragma once

#include <filesystem>
#include <memory>

#include "qkv/models/corpus.hpp"
#include "qkv/models/translator.hpp"

namespace qkv::models {

// A translator with the vocabularies it was trained on.
struct TranslatorBundle {
  std::unique_ptr<Translator> model;
  Vocabulary source_vocabulary;
  Vocabulary target_vocabulary;
};

// One safetensors file: the parameters under their state_dict names, and in its metadata the
// config ("qkv.translator.config", JSON) and both vocabularies ("qkv.source_vocabulary",
// "qkv.target_vocabulary", one word per line), so that the file alone restores the model.
void save_translator(const Translator& model, const Vocabulary& source, const Vocabulary& target,
                     const std::filesystem::path& path);
// Throws qkv::Error naming what is missing or inconsistent: config sizes that are not integers
// >= 1 or disagree with the tensors that carry them (checked before the model is allocated), a
// max_length over 65536, vocabularies of other sizes, missing or unexpected tensors. The model is
// in eval mode.
TranslatorBundle load_translator(const std::filesystem::path& path);

}  // namespace qkv::models
