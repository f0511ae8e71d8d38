#pragma once

#include <CLI/CLI.hpp>

namespace qkv::cli {

// Each subcommand registers itself on the app and runs when parsed.
void add_info(CLI::App& app);
void add_demo(CLI::App& app);  // the main job: train, evaluate, draw
// demo's subcommand "variants": the seeds' trade-off measured (demo_variants.cpp)
CLI::App* add_demo_variants(CLI::App& demo);
// demo's subcommand "bottleneck": the seeds' first claim measured (demo_bottleneck.cpp)
CLI::App* add_demo_bottleneck(CLI::App& demo);
void add_translate(CLI::App& app);  // a model saved by demo, on new sentences
// qkv heatmap FILE.safetensors: attention weights drawn as PNG or SVG (qkv::viz).
void add_heatmap(CLI::App& app);
// qkv inspect FILE.safetensors: per-head diagnostics and verdicts (qkv::viz::diagnose).
void add_inspect(CLI::App& app);
// Built with QKV_BUILD_BENCH (it needs bench/qkv_bench); main.cpp registers it when present.
void add_bench(CLI::App& app);

}  // namespace qkv::cli
