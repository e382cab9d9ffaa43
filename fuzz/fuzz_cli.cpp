// The command line's argument parsing: the real app (build_app(), as main()
// builds it, every subcommand and flag) parses an argv made of the input's
// NUL-separated pieces. Actions are never run, so nothing touches files. A
// parse either succeeds or throws CLI::ParseError, whose message (or help or
// version text) is then formatted as main() would print it.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"sdpa"};
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 40; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else if (cur.size() < 256) {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty() && args.size() < 40) args.push_back(cur);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());

  sdpa::cli::BuiltApp built = sdpa::cli::build_app();
  try {
    built.app->parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    (void)built.app->exit(e, out, err);
    return 0;
  }
  int parsed = 0;
  for (auto& [sub, action] : built.actions) parsed += sub->parsed();
  if (parsed != 1) {
    // require_subcommand(1): exactly one subcommand after a successful parse.
    std::abort();
  }
  return 0;
}
