// sdpa: scaled dot-product attention from the command line.
#include <cstdio>
#include <exception>

#include "app.h"
#include "commands.h"
#include "sdpa/error.h"

int main(int argc, char** argv) {
  using namespace sdpa::cli;
  BuiltApp built = build_app();
  CLI::App& app = *built.app;
  auto& actions = built.actions;

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
