// `sdpa serve` and `sdpa stats` in a build that lacks their packages: the
// commands still exist and say how to get them, instead of being unknown.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"

namespace sdpa::cli {
namespace {

// Accepts (and ignores) whatever flags the real command would take, so the
// answer is the same however it was called.
Command missing(const char* name, const char* summary, const char* packages, int order) {
  return Command{
      name,
      std::string(summary) + " (not built)",
      [name, packages](CLI::App& sub) {
        sub.allow_extras();
        return [name, packages] {
          std::fprintf(stderr,
                       "sdpa %s: not built into this sdpa: its packages were missing at configure time "
                       "(Debian: apt-get install %s); install them, then configure and build again\n",
                       name, packages);
          return kExitFailure;
        };
      },
      order,
  };
}

#if !SDPA_HAVE_SERVE
const Registrar serve_registrar{missing("serve", "Serve the explorer page", "nlohmann-json3-dev libcpp-httplib-dev", 60)};
#endif
#if !SDPA_HAVE_STATS
const Registrar stats_registrar{missing("stats", "Score spread and softmax saturation against d_k",
                                        "nlohmann-json3-dev", 61)};
#endif

}  // namespace
}  // namespace sdpa::cli
