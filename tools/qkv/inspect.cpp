// qkv inspect: the per-head diagnostics of attention weights stored in a safetensors file
// (qkv::viz::diagnose), with the seeds' verdict per head.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/checks.hpp"
#include "qkv/commands.hpp"
#include "qkv/diagnostics.hpp"
#include "qkv/error.hpp"
#include "qkv/files.hpp"
#include "qkv/safetensors.hpp"
#include "qkv/viz/diagnostics.hpp"

namespace qkv::cli {
namespace {

struct InspectArgs {
  std::string file;
  std::vector<std::string> tensors;
  std::string alignment;
  std::string json;
  bool causal = false;
};

using Alignments = std::vector<std::vector<std::vector<std::int64_t>>>;

// alignment [B, Tq] or [Tq] (integers; -1: unknown) -> [B][Tq] lists of one key each.
Alignments alignment_lists(const Tensor& alignment, const std::string& name) {
  const std::string argument = "--alignment " + name;
  if (alignment.dim() != 1 && alignment.dim() != 2) {
    throw Error(argument, "a tensor [Tq] or [B, Tq]", alignment.describe());
  }
  const Tensor rows = alignment.dim() == 1 ? alignment.reshape({1, alignment.size(0)}) : alignment;
  const std::vector<double> values = rows.to_vector();
  Alignments out(static_cast<std::size_t>(rows.size(0)));
  for (std::int64_t b = 0; b < rows.size(0); ++b) {
    for (std::int64_t i = 0; i < rows.size(1); ++i) {
      const double j = values[static_cast<std::size_t>(b * rows.size(1) + i)];
      if (j != static_cast<double>(static_cast<std::int64_t>(j)) || j < -1) {
        throw Error(argument, "key positions (integers, -1 where unknown)", std::to_string(j));
      }
      out[b].push_back(j < 0 ? std::vector<std::int64_t>{}
                             : std::vector<std::int64_t>{static_cast<std::int64_t>(j)});
    }
  }
  return out;
}

void run_inspect(const InspectArgs& args) {
  if (!args.json.empty()) expect_output_folder("--json", args.json);
  const NamedTensors tensors = load_named(args.file, [](const std::filesystem::path& path) {
                                 return load_safetensors(path);
                               }).tensors;
  for (const std::string& name : args.tensors) {
    if (tensors.find(name) == tensors.end()) {
      throw Error("--tensor", "a tensor of " + args.file, "'" + name + "'");
    }
  }
  Alignments alignments;
  if (!args.alignment.empty()) {
    const auto found = tensors.find(args.alignment);
    if (found == tensors.end()) {
      throw Error("--alignment", "a tensor of " + args.file, "'" + args.alignment + "'");
    }
    alignments = alignment_lists(found->second, args.alignment);
  }
  viz::DiagnosticsOptions options;
  options.causal = args.causal;
  nlohmann::json report = nlohmann::json::object();
  for (const auto& [name, weights] : tensors) {
    const bool named =
        std::find(args.tensors.begin(), args.tensors.end(), name) != args.tensors.end();
    if (!args.tensors.empty() && !named) continue;
    const bool eligible = (weights.dim() == 3 || weights.dim() == 4) &&
                          is_floating(weights.dtype()) && name != args.alignment;
    if (!eligible) {
      if (named)
        throw Error("--tensor " + name, "weights [H, Tq, Tk] or [B, H, Tq, Tk]",
                    weights.describe());
      continue;
    }
    std::printf("%s %s:\n", name.c_str(), weights.describe().c_str());
    const std::vector<viz::HeadDiagnostics> heads = load_named(
        args.file,
        [&](const std::filesystem::path&) { return viz::diagnose(weights, alignments, options); });
    nlohmann::json rows = nlohmann::json::array();
    for (const viz::HeadDiagnostics& d : heads) {
      std::printf("  %s\n", viz::verdict_line(d).c_str());
      rows.push_back(head_json(d));
    }
    report[name] = rows;
  }
  if (report.empty()) {
    throw Error(args.file, "attention weights [H, Tq, Tk] or [B, H, Tq, Tk] (floating)",
                "no such tensor");
  }
  if (!args.json.empty()) {
    std::ofstream file(args.json);
    file << report.dump(2) << "\n";
    file.close();
    if (!file) throw Error("--json", "a file that can be written", args.json);
    std::printf("%s\n", args.json.c_str());
  }
}

}  // namespace

void add_inspect(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "inspect",
      "Diagnose attention weights [H, Tq, Tk] or [B, H, Tq, Tk] of a safetensors file per head: "
      "entropy against uniform, peak weight, attended distance, argmax against an alignment, and "
      "a verdict (uniform: not learned; sharp and wrong: the representations need work)");
  auto args = std::make_shared<InspectArgs>();
  command->add_option("file", args->file, "The .safetensors file")->required();
  command->add_option("--tensor", args->tensors,
                      "Only these tensors (default: every [H, Tq, Tk] or [B, H, Tq, Tk] one)");
  command->add_option(
      "--alignment", args->alignment,
      "A tensor of the file, [Tq] or [B, Tq], floating: the key each row should attend, -1 "
      "where unknown");
  command->add_flag("--causal", args->causal,
                    "Row i may attend keys 0 .. i only (a decoder's self-attention)");
  command->add_option("--json", args->json, "Also write the figures to this JSON file");
  command->callback([args] { run_inspect(*args); });
}

}  // namespace qkv::cli
