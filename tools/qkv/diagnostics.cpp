// The demos' attention diagnostics (qkv/diagnostics.hpp).
#include "qkv/diagnostics.hpp"

#include <cstdio>

namespace qkv::cli {

nlohmann::json head_json(const viz::HeadDiagnostics& d) {
  nlohmann::json row = {{"head", d.head},
                        {"verdict", viz::verdict_name(d.verdict)},
                        {"rows", d.rows},
                        {"entropy", d.entropy},
                        {"uniform_entropy", d.uniform_entropy},
                        {"normalized_entropy", d.normalized_entropy},
                        {"max_weight", d.max_weight},
                        {"mean_distance", d.mean_distance},
                        {"aligned_rows", d.aligned_rows}};
  if (d.alignment_accuracy) row["alignment_accuracy"] = *d.alignment_accuracy;
  return row;
}

nlohmann::json print_diagnostics(const models::Evaluation& e,
                                 const std::vector<models::SentencePair>& test,
                                 const std::string& what) {
  const models::KeptAttention& kept = e.attention;
  std::vector<std::vector<std::vector<std::int64_t>>> alignments;
  for (std::size_t i = 0; i < kept.query_lengths.size(); ++i) {
    alignments.push_back(test[i].alignment);
  }
  viz::DiagnosticsOptions options;
  options.query_lengths = kept.query_lengths;
  options.key_lengths = kept.key_lengths;
  nlohmann::json heads = nlohmann::json::array();
  if (!kept.weights.defined()) return heads;
  std::printf("\nattention diagnostics (%s, %zu held-out sentences read teacher-forced):\n",
              what.c_str(), kept.query_lengths.size());
  for (const viz::HeadDiagnostics& d : viz::diagnose(kept.weights, alignments, options)) {
    std::printf("  %s\n", viz::verdict_line(d).c_str());
    heads.push_back(head_json(d));
  }
  return heads;
}

}  // namespace qkv::cli
