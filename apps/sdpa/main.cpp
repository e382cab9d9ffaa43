// sdpa: scaled dot-product attention from the command line.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>

#include "commands.h"
#include "sdpa/error.h"
#include "sdpa/version.h"

namespace sdpa::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

}  // namespace sdpa::cli

int main(int argc, char** argv) {
  using namespace sdpa::cli;
  CLI::App app{"sdpa: scaled dot-product attention, O = softmax(Q·Kᵀ·scale)·V, scale = 1/√d by default"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sdpa ") + sdpa::version());

  std::vector<Command> commands = registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.order != b.order ? a.order < b.order : a.name < b.name; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
  for (const Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    actions.emplace_back(sub, c.setup(*sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help/version (rc 0) or the error
    return rc == 0 ? kExitOk : kExitUsage;
  }
  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    try {
      return action();
    } catch (const CliError& e) {
      std::fprintf(stderr, "sdpa %s: %s\n", sub->get_name().c_str(), e.what());
      return e.exit_code();
    } catch (const sdpa::Error& e) {
      const CliError c = cli_error(e);
      std::fprintf(stderr, "sdpa %s: %s\n", sub->get_name().c_str(), c.what());
      return c.exit_code();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sdpa %s: %s\n", sub->get_name().c_str(), e.what());
      return kExitFailure;
    }
  }
  return kExitUsage;
}
