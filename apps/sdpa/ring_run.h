// `sdpa run --ring`: the MPI side of the run (run_ring.cpp when MPI is found,
// ring_missing.cpp otherwise). run.cpp reads the files on rank 0 and writes
// the outputs there; this part scatters the shards, runs sdpa::ring on every
// rank and gathers the results into rank 0's outputs.
#pragma once

#include <memory>
#include <string>

#include "sdpa/backward.h"
#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa::cli {

// The whole problem as rank 0 has it: full-size [B, H, N, d] views.
struct RingProblem {
  TensorView q, k, v, d_o;  // d_o unset: forward only
  TensorView o, lse;        // lse unset when neither --lse nor the backward wants it
  Gradients grads;          // with d_o
  Options opt;              // slopes and sinks point into rank 0's files
};

class RingSession {
 public:
  // MPI_Init_thread with MPI_THREAD_FUNNELED (only this thread calls MPI;
  // the library's workers never do). Throws UsageError in a build without MPI.
  RingSession();
  // Every rank waits here for the others, then MPI_Finalize: a rank that
  // stops early (a refused file, a rejected shard) does not exit before rank
  // 0 has reported why, since mpirun ends the whole job, rank 0's message
  // unwritten, as soon as one rank exits with a failure.
  ~RingSession();
  RingSession(const RingSession&) = delete;
  RingSession& operator=(const RingSession&) = delete;

  int rank() const;
  int ranks() const;

  // Rank 0: runs the problem on the ring (`zigzag`: zigzag sharding) and
  // fills its outputs. Throws sdpa::Error when a rank rejects its shard
  // (every rank then stops).
  void run_root(const RingProblem& p, bool zigzag);
  // Rank 0, when it cannot start (a file it could not read): the other ranks
  // stop with `exit_code`. Nothing once run_root has started them.
  void abandon(int exit_code);
  // The other ranks: their part of the run rank 0 starts; `base` holds the
  // options from the command line (the same on every rank). Returns the exit code.
  int run_worker(const Options& base, bool zigzag);
  // What the last run did on rank 0 (steps, compute and MPI wait times).
  std::string summary() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sdpa::cli
