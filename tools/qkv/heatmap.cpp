// qkv heatmap: attention weights stored in a safetensors file, drawn as PNG or SVG.
#include "qkv/viz/heatmap.hpp"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/checks.hpp"
#include "qkv/commands.hpp"
#include "qkv/error.hpp"
#include "qkv/files.hpp"
#include "qkv/safetensors.hpp"

namespace qkv::cli {
namespace {

struct HeatmapArgs {
  std::string file;
  std::string tensor;
  std::string out;
  std::string x_labels;
  std::string y_labels;
  std::string title;
  std::int64_t head = 0;
  std::int64_t batch = 0;
  int cell_size = 0;
  double vmax = 0.0;
};

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// The tensor named `name`, or the file's only tensor when no name is given; any shape.
Tensor pick_tensor(const NamedTensors& tensors, const std::string& name, const std::string& file) {
  if (!name.empty()) {
    const auto found = tensors.find(name);
    if (found == tensors.end()) throw Error("--tensor", "a tensor of " + file, "'" + name + "'");
    return found->second;
  }
  if (tensors.size() == 1) return tensors.begin()->second;
  std::string names;
  for (const auto& entry : tensors) {
    names += (names.empty() ? "" : ", ") + entry.first;
  }
  throw Error("--tensor",
              "a name, as " + file + " holds " + std::to_string(tensors.size()) + " tensors",
              names.empty() ? "none" : names);
}

// The tensor drawn is [R, C], [H, R, C] or [B, H, R, C] (one batch entry), or one head of it.
void run(const HeatmapArgs& args, bool head_given, bool batch_given) {
  const std::filesystem::path out =
      args.out.empty() ? std::filesystem::path(args.file).stem().string() + ".png" : args.out;
  expect_output_folder("--out", out);
  Tensor weights = pick_tensor(
      load_named(args.file,
                 [](const std::filesystem::path& path) { return load_safetensors(path); })
          .tensors,
      args.tensor, args.file);
  const std::string shape = weights.describe();
  const std::string argument = "the tensor of " + args.file;
  if (weights.numel() == 0) throw Error(argument, "attention weights, not an empty tensor", shape);
  // [B, H, R, C] -> [H, R, C] of one batch entry
  if (weights.dim() == 4) {
    if (args.batch < 0 || args.batch >= weights.size(0)) {
      throw Error("--batch", "0 .. " + std::to_string(weights.size(0) - 1),
                  std::to_string(args.batch));
    }
    weights = weights.slice(0, args.batch, args.batch + 1)
                  .reshape({weights.size(1), weights.size(2), weights.size(3)});
  } else if (batch_given) {
    throw Error("--batch", "a tensor [B, H, R, C]", shape);
  }
  viz::HeatmapOptions options;
  // [H, R, C] -> [1, R, C] of one head
  if (head_given) {
    if (weights.dim() != 3) throw Error("--head", "a tensor [H, R, C] or [B, H, R, C]", shape);
    if (args.head < 0 || args.head >= weights.size(0)) {
      throw Error("--head", "0 .. " + std::to_string(weights.size(0) - 1),
                  std::to_string(args.head));
    }
    weights = weights.slice(0, args.head, args.head + 1);
    options.panel_titles = {"head " + std::to_string(args.head)};
  }
  if (weights.dim() != 2 && weights.dim() != 3) {
    throw Error(argument, "attention weights [R, C], [H, R, C] or [B, H, R, C]", shape);
  }
  options.x_labels = split_words(args.x_labels);
  options.y_labels = split_words(args.y_labels);
  options.title = args.title;
  options.cell_size = args.cell_size;
  options.vmax = args.vmax;
  const viz::HeatmapLayout layout = viz::heatmap_layout(
      weights.size(-2), weights.size(-1), weights.dim() == 3 ? weights.size(0) : 1, options);
  viz::write_heatmap(weights, options, out);
  std::printf("%s: %d x %d pixels\n", out.string().c_str(), layout.width, layout.height);
}

}  // namespace

void add_heatmap(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "heatmap", "Draw attention weights [R, C], [H, R, C] or [B, H, R, C] of a safetensors file");
  auto args = std::make_shared<HeatmapArgs>();
  command->add_option("file", args->file, "The .safetensors file")->required();
  command->add_option("--tensor", args->tensor, "The tensor to draw (default: the only one)");
  command->add_option("--out", args->out, "OUT.png or OUT.svg (default: FILE's stem + .png)")
      ->check(image_file());
  command->add_option("--x-labels", args->x_labels, "Column (key) labels, separated by spaces");
  command->add_option("--y-labels", args->y_labels, "Row (query) labels, separated by spaces");
  command->add_option("--title", args->title, "Title over the figure");
  CLI::Option* head = command->add_option("--head", args->head, "Draw only this head")
                          ->transform(integer<std::int64_t>(0));
  CLI::Option* batch =
      command
          ->add_option("--batch", args->batch, "Batch entry of a [B, H, R, C] tensor (default 0)")
          ->transform(integer<std::int64_t>(0));
  command->add_option("--cell-size", args->cell_size, "Pixels per cell (default: from the size)")
      ->transform(integer<int>(0));
  command->add_option("--vmax", args->vmax, "Top of the color scale (default: the largest weight)")
      ->check(finite_number(/*allow_zero=*/true));
  command->callback([args, head, batch] { run(*args, head->count() > 0, batch->count() > 0); });
}

}  // namespace qkv::cli
