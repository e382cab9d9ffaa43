#include "app.h"

#include <algorithm>
#include <string>

#include "commands.h"
#include "sdpa/version.h"

namespace sdpa::cli {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

BuiltApp build_app() {
  BuiltApp built;
  built.app = std::make_unique<CLI::App>(
      "sdpa: scaled dot-product attention, O = softmax(Q·Kᵀ·scale)·V, scale = 1/√d by default");
  CLI::App& app = *built.app;
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sdpa ") + sdpa::version());

  std::vector<Command> commands = registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.order != b.order ? a.order < b.order : a.name < b.name; });
  for (const Command& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    built.actions.emplace_back(sub, c.setup(*sub));
  }
  return built;
}

}  // namespace sdpa::cli
