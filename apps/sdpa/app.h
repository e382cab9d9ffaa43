// The `sdpa` command line's CLI11 app, built in one place so that main() and
// the CLI fuzzer (fuzz/fuzz_cli.cpp) parse exactly the same flags.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace sdpa::cli {

struct BuiltApp {
  std::unique_ptr<CLI::App> app;
  // Each registered subcommand and the action to run when it was parsed.
  std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
};

// The app with every registered subcommand (in `sdpa --help` order). Building
// it runs each command's setup, never its action.
BuiltApp build_app();

}  // namespace sdpa::cli
