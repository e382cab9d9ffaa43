// `sdpa run --ring` in a build without MPI: the flag exists and says how to get it.
#include <string>

#include "commands.h"
#include "ring_run.h"

namespace sdpa::cli {

struct RingSession::State {};

RingSession::RingSession() {
  throw UsageError("--ring: expected an sdpa built with MPI, got one without it (apt-get install libopenmpi-dev "
                   "openmpi-bin, then configure and build again)");
}
RingSession::~RingSession() = default;
int RingSession::rank() const { return 0; }
int RingSession::ranks() const { return 1; }
void RingSession::run_root(const RingProblem&, bool) {}
void RingSession::abandon(int) {}
int RingSession::run_worker(const Options&, bool) { return kExitUsage; }
std::string RingSession::summary() const { return {}; }

}  // namespace sdpa::cli
