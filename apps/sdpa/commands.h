// The `sdpa` command line: each subcommand lives in its own file and registers
// itself here with a static Registrar, so adding a command edits no other file.
//
// Exit codes: 0 success, 2 usage error (bad flags or flag values, reported by
// CLI11 or thrown as UsageError, and inputs whose shapes or types do not fit),
// 1 failure (unreadable or malformed files, outputs that cannot be held or
// written). An sdpa::Error gets its flag and exit code from the one table in
// cli_util.cpp (route_of), wherever it is caught.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sdpa/error.h"

namespace sdpa::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// An error in the command line's words, with the exit code it ends the run with.
class CliError : public std::runtime_error {
 public:
  CliError(int exit_code, const std::string& message) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Where an sdpa::Error lands on the command line: the flag its argument came
// from (the argument itself when no flag names it) and the exit code.
struct ErrorRoute {
  std::string flag;
  int exit_code;
};
ErrorRoute route_of(std::string_view arg);

// e as the command line reports it: "FLAG[ FILE]: expected ..., got ...[NOTE]",
// with FLAG and the exit code from route_of(e.arg()). `file` is the file the flag
// named, `note` what the subcommand adds (how it read the file).
CliError cli_error(const Error& e, std::string_view file = {}, std::string_view note = {});

// A bad flag value found after parsing (exit code 2).
class UsageError : public CliError {
 public:
  explicit UsageError(const std::string& message) : CliError(kExitUsage, message) {}
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
