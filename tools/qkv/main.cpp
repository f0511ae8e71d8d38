// qkv: the command-line front end. Subcommands live one per file (info.cpp, ...).
// Exit status: 0 done (and --help), 1 a runtime error (a file missing, unreadable, corrupt or
// unwritable; a value the input file rules out), 2 a usage error (an unknown command or option,
// a missing argument, a value that does not parse or is out of range). A runtime error is one
// line on stderr, "qkv: <message>"; a usage error is "qkv <command>: <message>" followed by that
// command's usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "qkv/commands.hpp"

namespace {

constexpr int kRuntimeError = 1;
constexpr int kUsageError = 2;

// Messages quote file contents (a tensor name, JSON): control characters become spaces so that
// the message stays one line.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return text;
}

int runtime_error(const char* message) {
  std::fprintf(stderr, "qkv: %s\n", one_line(message).c_str());
  return kRuntimeError;
}

// The message, then the usage of the subcommand the error is about (of qkv itself when none
// was recognized).
int usage_error(const CLI::App& app, const CLI::ParseError& e) {
  std::string name = app.get_name();
  for (const CLI::App* command = &app; !command->get_subcommands().empty();) {
    command = command->get_subcommands().front();
    name += " " + command->get_name();
  }
  std::string message = e.what();
  if (app.get_subcommands().empty() && !app.remaining().empty()) {
    std::string names;
    for (const CLI::App* command : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + command->get_name();
    }
    message = "command: expected " + names + ", got " + app.remaining().front();
  }
  std::fprintf(stderr, "%s: %s\n\n%s", name.c_str(), one_line(message).c_str(), app.help().c_str());
  return kUsageError;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qkv: attention mechanisms, from the formula to the fused kernel", "qkv"};
  app.require_subcommand(1);
  qkv::cli::add_demo(app);
  qkv::cli::add_translate(app);
  qkv::cli::add_info(app);
  qkv::cli::add_heatmap(app);
  qkv::cli::add_inspect(app);
#ifdef QKV_WITH_BENCH
  qkv::cli::add_bench(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    return usage_error(app, e);
  } catch (const std::bad_alloc&) {
    return runtime_error("out of memory");
  } catch (const std::exception& e) {  // qkv::Error, files that cannot be written
    return runtime_error(e.what());
  }
  return 0;
}
