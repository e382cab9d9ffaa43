// Ring attention's overlap of communication with compute, per rank:
//
//   mpirun -np P bench/ring_bench [--n N] [--h H] [--hkv HKV] [--d D] [--causal] [--zigzag] [--reps R] [--threads T]
//
// For the forward and the backward it reports, per rank, the median over R
// runs of: the compute time (the library's calls and the merges), the bytes
// one ring step sends, the time in MPI_Testall between attention calls (the
// calls that move the bytes when no NIC or progress thread does), the time
// blocked in MPI_Waitall once a step's compute is done, and the time the same
// transfers take alone (the blocks exchanged around the ring with nothing to
// compute). overlap = 1 - wait / alone: the share of the communication time
// not spent blocked after the compute (1 = fully hidden; a wait also holds
// any imbalance between ranks). hidden: the steps whose transfers were done
// when their compute was (the backward's last transfer, the dK/dV going
// home, has no compute to hide behind).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sdpa/ring.h"

namespace {

using sdpa::TensorView;
using sdpa::ring::Sharding;

struct Args {
  std::int64_t n = 4096, h = 8, h_kv = 8, d = 64;
  bool causal = false, zigzag = false;
  int reps = 5, threads = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const auto value = [&]() -> std::int64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ring_bench: %s: expected a value\n", f.c_str());
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (f == "--n") a.n = value();
    else if (f == "--h") a.h = value();
    else if (f == "--hkv") a.h_kv = value();
    else if (f == "--d") a.d = value();
    else if (f == "--reps") a.reps = static_cast<int>(value());
    else if (f == "--threads") a.threads = static_cast<int>(value());
    else if (f == "--causal") a.causal = true;
    else if (f == "--zigzag") a.zigzag = true;
    else {
      std::fprintf(stderr, "ring_bench: unknown flag %s\n", f.c_str());
      std::exit(2);
    }
  }
  return a;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// The transfers of `steps` ring steps alone: `bytes` to the right, as many from the left.
double exchange_alone(std::int64_t bytes, std::int64_t steps) {
  std::vector<char> out(static_cast<std::size_t>(bytes)), in(out.size());
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t s = 0; s < steps; ++s) {
    MPI_Request r[2];
    MPI_Irecv(in.data(), static_cast<int>(bytes), MPI_BYTE, (rank + ranks - 1) % ranks, 7, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(out.data(), static_cast<int>(bytes), MPI_BYTE, (rank + 1) % ranks, 7, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Row {
  double compute, test, wait, alone, total;
  double bytes_per_step, steps, hidden, transfer_steps;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Args a = parse(argc, argv);
  const Sharding sh = a.zigzag ? Sharding::zigzag : Sharding::contiguous;
  const std::int64_t nq = sdpa::ring::shard_rows(sh, a.n, ranks, rank);
  const std::int64_t B = 1, H = a.h, Hkv = a.h_kv, d = a.d;
  std::vector<float> q(B * H * nq * d), k(B * Hkv * nq * d), v(k.size()), o(q.size()), lse(B * H * nq), d_o(q.size());
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  std::uint64_t x = 0x9e3779b97f4a7c15ull + rank;
  for (auto* buf : {&q, &k, &v, &d_o})
    for (float& e : *buf) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      e = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5);
    }
  sdpa::Options opt;
  opt.causal = a.causal;
  opt.threads = a.threads;
  const TensorView qv = TensorView::contiguous(q.data(), {B, H, nq, d}), kv = TensorView::contiguous(k.data(), {B, Hkv, nq, d}),
                   vv = TensorView::contiguous(v.data(), {B, Hkv, nq, d}), ov = TensorView::contiguous(o.data(), {B, H, nq, d}),
                   lv = TensorView::contiguous(lse.data(), {B, H, nq}), dov = TensorView::contiguous(d_o.data(), {B, H, nq, d});
  const sdpa::Gradients g{.dq = TensorView::contiguous(dq.data(), {B, H, nq, d}),
                          .dk = TensorView::contiguous(dk.data(), {B, Hkv, nq, d}),
                          .dv = TensorView::contiguous(dv.data(), {B, Hkv, nq, d})};

  for (int pass = 0; pass < 2; ++pass) {
    const bool backward = pass == 1;
    std::vector<double> compute, test, wait, alone, total;
    sdpa::ring::Stats st;
    for (int r = -1; r < a.reps; ++r) {  // r = -1: a warm-up
      MPI_Barrier(MPI_COMM_WORLD);
      const sdpa::ring::Ring ring{.comm = MPI_COMM_WORLD, .sharding = sh, .stats = &st};
      if (!backward) {
        sdpa::Options fo = opt;
        fo.lse = lv;
        sdpa::ring::attention(ring, qv, kv, vv, ov, fo);
      } else {
        sdpa::ring::attention_backward(ring, qv, kv, vv, ov, lv, dov, g, opt);
      }
      // The same transfers alone: (steps - 1) ring steps of bytes_per_step.
      const double t_alone = exchange_alone(st.bytes_per_step, st.steps - 1);
      if (r < 0) continue;
      compute.push_back(st.compute_s);
      wait.push_back(st.wait_s);
      test.push_back(st.test_s);
      alone.push_back(t_alone);
      total.push_back(st.total_s);
    }
    Row mine{median(compute), median(test), median(wait), median(alone), median(total),
             static_cast<double>(st.bytes_per_step), static_cast<double>(st.steps),
             static_cast<double>(st.hidden_steps), static_cast<double>(st.transfer_steps)};
    std::vector<Row> all(static_cast<std::size_t>(ranks));
    MPI_Gather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("%s P=%d N=%lld H=%lld Hkv=%lld d=%lld%s%s threads/rank=%d, median of %d\n",
                  backward ? "backward" : "forward", ranks, static_cast<long long>(a.n), static_cast<long long>(H),
                  static_cast<long long>(Hkv), static_cast<long long>(d), a.causal ? " causal" : "",
                  a.zigzag ? " zigzag" : "", a.threads, a.reps);
      std::printf("  rank  steps  compute_s  bytes/step  mpi_test_s  mpi_wait_s  comm_alone_s  overlap  hidden  total_s\n");
      for (int r = 0; r < ranks; ++r) {
        const Row& w = all[r];
        const double overlap = w.alone > 0 ? std::clamp(1.0 - w.wait / w.alone, 0.0, 1.0) : 1.0;
        std::printf("  %4d  %5.0f  %9.4f  %10.0f  %10.4f  %10.4f  %12.4f  %7.2f  %3.0f/%-3.0f %7.4f\n", r, w.steps,
                    w.compute, w.bytes_per_step, w.test, w.wait, w.alone, overlap, w.hidden, w.transfer_steps, w.total);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
