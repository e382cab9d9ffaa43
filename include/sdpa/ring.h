// Ring attention over MPI (context parallelism): attention over a sequence
// split along its rows across the ranks of a communicator.
//
// Each rank passes its shard of Q, K and V (and O, dO, the gradients) as
// ordinary [B, H, n, d] views; the Options are those of the whole sequence:
// causal, windows, ALiBi, key padding and position offsets all use global
// positions. K/V blocks (only the Hkv heads) travel around the ring with
// non-blocking sends and receives posted before each step's compute; each
// step attends the local queries to the visiting block with the library's
// fast path and merges the partial (O, lse) into the running result
// (src/cpu/merge.h, the merge of the split-KV decode).
//
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);   // enough: only the caller's thread calls MPI
//   sdpa::ring::Ring ring{.comm = MPI_COMM_WORLD, .sharding = sdpa::ring::Sharding::zigzag};
//   // rows of this rank: sdpa::ring::shard(ring.sharding, N, P, rank)
//   sdpa::ring::attention(ring, q_shard, k_shard, v_shard, o_shard, opt);
//
// Sharding of a sequence of N rows over P ranks:
//   contiguous  rank r holds rows [r·N/P, (r+1)·N/P)
//   zigzag      the sequence is cut into 2P chunks, c = [c·N/(2P), (c+1)·N/(2P));
//               rank r holds chunk r followed by chunk 2P-1-r, so with causal
//               masking every rank does the same work (an early chunk is cheap,
//               a late one dear)
// (integer division). Q and K/V are sharded the same way, each by its own N.
//
// A window skips the steps it cannot see: the ring stops after the last step
// in which any rank sees the visiting block, and a rank computes nothing in
// a step whose block it cannot see. Results are deterministic for a given P
// (and bitwise identical for any thread count).
//
// Not available with the ring (an Error names the option): an explicit mask,
// probs, scores, dropout, int8 K/V, storage other than float32.
// Inputs are checked on every rank before any block moves; when one rank
// rejects its inputs, every rank throws: that rank the library's message,
// the others the same message with " (on rank r)".
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "sdpa/backward.h"
#include "sdpa/options.h"
#include "sdpa/tensor_view.h"

namespace sdpa::ring {

enum class Sharding : std::uint8_t { contiguous, zigzag };

// Rows [begin, begin + size) of the global sequence.
struct Chunk {
  std::int64_t begin = 0, size = 0;
};

// The chunks rank `rank` of `ranks` holds of a sequence of n rows, in the
// order it stores them (one for contiguous, two for zigzag).
std::vector<Chunk> shard(Sharding sharding, std::int64_t n, int ranks, int rank);

// Rows rank `rank` holds in all.
std::int64_t shard_rows(Sharding sharding, std::int64_t n, int ranks, int rank);

// What one call did on this rank (optional, see Ring::stats).
struct Stats {
  int ranks = 0;
  std::int64_t steps = 0;           // ring steps run (fewer than P when a window cannot see the rest)
  std::int64_t blocks = 0;          // (query slice, key chunk) attention calls
  double compute_s = 0;             // in the library's attention calls and the merges
  double test_s = 0;                // in MPI_Testall between attention calls (letting transfers progress)
  double wait_s = 0;                // blocked in MPI_Waitall at the end of a step's compute
  double total_s = 0;               // the whole call
  std::int64_t transfer_steps = 0;  // steps that sent or received
  std::int64_t hidden_steps = 0;    // of those, the ones whose transfers were done when the compute was
  std::int64_t bytes_sent = 0;      // by this rank, every step
  std::int64_t bytes_per_step = 0;  // the largest a step sent
};

struct Ring {
  MPI_Comm comm = MPI_COMM_NULL;  // every rank of it takes part; it is duplicated, never changed
  Sharding sharding = Sharding::contiguous;
  Stats* stats = nullptr;         // optional: filled on return
};

// The forward pass: q [B, H, nq, d], k [B, Hkv, nkv, d], v [B, Hkv, nkv, dv],
// o [B, H, nq, dv] are this rank's shards (float32); Options::lse, if set,
// receives this rank's rows [B, H, nq].
void attention(const Ring& ring, const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
               const Options& opt = {});

// The backward pass (ring-flash-attention style): the K/V blocks travel
// again, now with float32 dK/dV accumulators that return to their owners
// after the last step; dQ accumulates locally. o and lse are this rank's rows
// of the forward's outputs; d_o like o; grads in the shapes of q, k, v
// (dsinks [H], the same on every rank, with Options::sinks).
void attention_backward(const Ring& ring, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& o, const TensorView& lse, const TensorView& d_o, const Gradients& grads,
                        const Options& opt = {});

}  // namespace sdpa::ring
