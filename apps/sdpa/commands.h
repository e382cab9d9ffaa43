// The `sdpa` command line: each subcommand lives in its own file and registers
// itself here with a static Registrar, so adding a command edits no other file.
//
// Exit codes: 0 success, 2 usage error (bad flags or flag values, reported by
// CLI11 or thrown as UsageError), 1 failure (anything else: unreadable or
// malformed files, shapes that do not fit, sdpa::Error from the library).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sdpa::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// A bad flag value found after parsing (exit code 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Command {
  std::string name;
  std::string summary;
  // Declares the subcommand's flags on `sub` and returns the action run when
  // the subcommand is chosen; the action returns the exit code.
  std::function<std::function<int()>(CLI::App& sub)> setup;
  int order = 100;  // position in `sdpa --help`
};

std::vector<Command>& registry();

struct Registrar {
  explicit Registrar(Command c) { registry().push_back(std::move(c)); }
};

}  // namespace sdpa::cli
