#pragma once

// The attention diagnostics the demos print: qkv::viz::diagnose's verdict per head of a model's
// teacher-forced attention on held-out sentences, against the corpus's alignments.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/models/corpus.hpp"
#include "qkv/models/evaluate.hpp"
#include "qkv/viz/diagnostics.hpp"

namespace qkv::cli {

// One head's diagnostics as the commands write them to JSON (alignment_accuracy only where the
// alignments were known).
nlohmann::json head_json(const viz::HeadDiagnostics& d);

// Prints the verdict of every head of e.attention (kept for the first sentences of test) under a
// heading naming `what` attention it is, and returns them for the demo's JSON (an empty array when
// nothing was kept).
nlohmann::json print_diagnostics(const models::Evaluation& e,
                                 const std::vector<models::SentencePair>& test,
                                 const std::string& what);

}  // namespace qkv::cli
