// qkv: the command-line front end. Subcommands live one per file (info.cpp, ...).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "qkv/commands.hpp"
#include "qkv/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"qkv: attention mechanisms, from the formula to the fused kernel"};
  app.require_subcommand(1);
  qkv::cli::add_demo(app);
  qkv::cli::add_translate(app);
  qkv::cli::add_info(app);
  qkv::cli::add_heatmap(app);
#ifdef QKV_WITH_BENCH
  qkv::cli::add_bench(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // files that cannot be written, memory
    std::fprintf(stderr, "qkv: %s\n", e.what());
    return 1;
  }
  return 0;
}
