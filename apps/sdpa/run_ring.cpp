// `sdpa run --ring` over MPI: rank 0 has read the files (run.cpp); it sends
// every rank a header (the shapes, or the exit code to stop with) and its
// shard of Q, K, V and dO, every rank runs sdpa::ring on its shard, and rank
// 0 gathers O, lse and the gradients into its outputs, which run.cpp then
// writes all at once. Shards travel as float32 [B, H, rows, d] (the ring
// computes in float32 whatever the files hold).
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "commands.h"
#include "ring_run.h"
#include "sdpa/error.h"
#include "sdpa/ring.h"

namespace sdpa::cli {
namespace {

using ring::Sharding;
constexpr int kTagShard = 11;
// MPI counts are int: larger transfers go in pieces of this many floats.
constexpr std::int64_t kPieceFloats = std::int64_t{1} << 30;

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CliError(kExitFailure, fmt::format("--ring: {} failed: {}", what, std::string(text, static_cast<std::size_t>(len))));
}

// What rank 0 tells every rank before the shards.
struct Header {
  std::int64_t status = 0;  // 0: go on; otherwise the exit code + 1 to stop with
  std::int64_t q[4]{}, k[4]{}, v[4]{}, d_o[4]{};
  std::int64_t backward = 0, want_lse = 0, want_dsinks = 0;
  std::int64_t alibi_rank = 0, alibi[2]{};
  std::int64_t sinks = 0;  // H when Options::sinks is set
};

void send_floats(const std::vector<float>& x, int to) {
  for (std::int64_t at = 0; at < static_cast<std::int64_t>(x.size()); at += kPieceFloats) {
    const int n = static_cast<int>(std::min<std::int64_t>(kPieceFloats, static_cast<std::int64_t>(x.size()) - at));
    mpi_check(MPI_Send(x.data() + at, n, MPI_FLOAT, to, kTagShard, MPI_COMM_WORLD), "MPI_Send");
  }
}

std::vector<float> recv_floats(std::int64_t count, int from) {
  std::vector<float> x(static_cast<std::size_t>(count));
  for (std::int64_t at = 0; at < count; at += kPieceFloats) {
    const int n = static_cast<int>(std::min<std::int64_t>(kPieceFloats, count - at));
    mpi_check(MPI_Recv(x.data() + at, n, MPI_FLOAT, from, kTagShard, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  }
  return x;
}

// A 3-D [B, H, N] view (lse) as [B, H, N, 1], so shards of every array are cut alike.
TensorView as_4d(TensorView t) {
  if (t.rank == 3) {
    t.rank = 4;
    t.shape[3] = 1;
    t.stride[3] = 1;
  }
  return t;
}

TensorView rows_of(const TensorView& t, std::int64_t n0, std::int64_t n) {
  TensorView r = t;
  r.data = static_cast<char*>(t.data) + n0 * t.stride[2] * static_cast<std::int64_t>(dtype_size(t.dtype));
  r.shape[2] = n;
  return r;
}

// Rows [n0, n0 + n) of a float32 [d0, d1, rows, w] buffer.
TensorView packed(float* data, const std::int64_t* dims, std::int64_t rows, std::int64_t n0, std::int64_t n) {
  TensorView t;
  t.data = data + n0 * dims[3];
  t.dtype = DType::f32;
  t.rank = 4;
  t.shape = {dims[0], dims[1], n, dims[3]};
  t.stride = {dims[1] * rows * dims[3], rows * dims[3], dims[3], 1};
  return t;
}

std::int64_t shard_floats(const std::int64_t* dims, Sharding s, int ranks, int rank) {
  return dims[0] * dims[1] * ring::shard_rows(s, dims[2], ranks, rank) * dims[3];
}

// Rank `rank`'s rows of a full array, as float32.
std::vector<float> cut(const TensorView& full_in, Sharding s, int ranks, int rank) {
  const TensorView full = as_4d(full_in);
  const std::int64_t rows = ring::shard_rows(s, full.shape[2], ranks, rank);
  std::vector<float> out(static_cast<std::size_t>(shard_floats(full.shape.data(), s, ranks, rank)));
  std::int64_t at = 0;
  for (const ring::Chunk& c : ring::shard(s, full.shape[2], ranks, rank)) {
    if (c.size > 0) convert(rows_of(full, c.begin, c.size), packed(out.data(), full.shape.data(), rows, at, c.size));
    at += c.size;
  }
  return out;
}

// The inverse: rank `rank`'s rows put back into the full array.
void paste(std::vector<float>& part, const TensorView& full_in, Sharding s, int ranks, int rank) {
  const TensorView full = as_4d(full_in);
  const std::int64_t rows = ring::shard_rows(s, full.shape[2], ranks, rank);
  std::int64_t at = 0;
  for (const ring::Chunk& c : ring::shard(s, full.shape[2], ranks, rank)) {
    if (c.size > 0) convert(packed(part.data(), full.shape.data(), rows, at, c.size), rows_of(full, c.begin, c.size));
    at += c.size;
  }
}

// One rank's shards, in and out.
struct Shards {
  std::vector<float> q, k, v, d_o, o, lse, dq, dk, dv, dsinks;
};

TensorView view_of(std::vector<float>& x, const std::int64_t* dims, std::int64_t rows) {
  return TensorView::contiguous(x.data(), {dims[0], dims[1], rows, dims[3]});
}

// The ring on this rank's shards: forward, then the backward if asked.
void compute(const Header& h, Shards& s, Options opt, Sharding sharding, ring::Stats* fwd, ring::Stats* bwd) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::int64_t nq = ring::shard_rows(sharding, h.q[2], ranks, rank);
  const std::int64_t nk = ring::shard_rows(sharding, h.k[2], ranks, rank);
  const std::int64_t nv = ring::shard_rows(sharding, h.v[2], ranks, rank);
  const std::int64_t o_dims[4] = {h.q[0], h.q[1], h.q[2], h.v[3]};
  s.o.assign(static_cast<std::size_t>(h.q[0] * h.q[1] * nq * h.v[3]), 0.0f);
  s.lse.assign(static_cast<std::size_t>(h.q[0] * h.q[1] * nq), 0.0f);
  const TensorView q = view_of(s.q, h.q, nq), k = view_of(s.k, h.k, nk), v = view_of(s.v, h.v, nv);
  const TensorView o = view_of(s.o, o_dims, nq);
  const TensorView lse = TensorView::contiguous(s.lse.data(), {h.q[0], h.q[1], nq});
  opt.lse = lse;  // the backward needs it, and --lse may want it
  ring::attention({.comm = MPI_COMM_WORLD, .sharding = sharding, .stats = fwd}, q, k, v, o, opt);
  if (!h.backward) return;
  s.dq.assign(s.q.size(), 0.0f);
  s.dk.assign(s.k.size(), 0.0f);
  s.dv.assign(s.v.size(), 0.0f);
  Gradients g{.dq = view_of(s.dq, h.q, nq), .dk = view_of(s.dk, h.k, nk), .dv = view_of(s.dv, h.v, nv)};
  if (h.want_dsinks) {
    s.dsinks.assign(static_cast<std::size_t>(h.q[1]), 0.0f);
    g.dsinks = TensorView::contiguous(s.dsinks.data(), {h.q[1]});
  }
  opt.lse = {};
  ring::attention_backward({.comm = MPI_COMM_WORLD, .sharding = sharding, .stats = bwd}, q, k, v, o, lse,
                           view_of(s.d_o, h.d_o, ring::shard_rows(sharding, h.d_o[2], ranks, rank)), g, opt);
}

std::string describe(const ring::Stats& st) {
  return fmt::format("{} steps, compute {:.3f} s, in MPI {:.3f} s (blocked after the compute {:.3f} s), {:.1f} MiB sent",
                     st.steps, st.compute_s, st.test_s + st.wait_s, st.wait_s,
                     static_cast<double>(st.bytes_sent) / (1 << 20));
}

}  // namespace

struct RingSession::State {
  int rank = 0, ranks = 1;
  bool backward = false;
  bool started = false;  // the header went out: the other ranks are running
  Sharding sharding = Sharding::contiguous;
  ring::Stats fwd, bwd;
};

RingSession::RingSession() : state_(std::make_unique<State>()) {
  int provided = 0;
  mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &state_->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &state_->ranks);
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    throw CliError(kExitFailure, "--ring: expected an MPI with MPI_THREAD_FUNNELED, got one without it");
  }
}

RingSession::~RingSession() {
  MPI_Barrier(MPI_COMM_WORLD);  // errors return (MPI_ERRORS_RETURN): nothing to do but finalize
  MPI_Finalize();
}

int RingSession::rank() const { return state_->rank; }
int RingSession::ranks() const { return state_->ranks; }

void RingSession::abandon(int exit_code) {
  if (state_->started) return;
  state_->started = true;
  Header h;
  h.status = exit_code + 1;
  MPI_Bcast(&h, sizeof h, MPI_BYTE, 0, MPI_COMM_WORLD);
}

void RingSession::run_root(const RingProblem& p, bool zigzag) {
  const Sharding sharding = zigzag ? Sharding::zigzag : Sharding::contiguous;
  const int ranks = state_->ranks;
  Header h;
  for (int a = 0; a < 4; ++a) {
    h.q[a] = p.q.shape[a];
    h.k[a] = p.k.shape[a];
    h.v[a] = p.v.shape[a];
    h.d_o[a] = p.d_o.is_set() ? p.d_o.shape[a] : 0;
  }
  h.backward = p.d_o.is_set();
  h.want_lse = p.lse.is_set();
  h.want_dsinks = p.grads.dsinks.is_set();
  std::vector<float> alibi, sinks;
  if (p.opt.alibi_slopes.is_set()) {
    if (p.opt.alibi_slopes.rank > 2) {
      abandon(kExitUsage);
      throw Error("alibi_slopes", "shape [H] or [B, H]", p.opt.alibi_slopes.shape_string());
    }
    h.alibi_rank = p.opt.alibi_slopes.rank;
    for (int a = 0; a < h.alibi_rank; ++a) h.alibi[a] = p.opt.alibi_slopes.shape[a];
  }
  if (p.opt.sinks.is_set()) h.sinks = p.opt.sinks.numel();
  state_->started = true;
  mpi_check(MPI_Bcast(&h, sizeof h, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  // The slopes and sinks every rank needs, as float32 (run.cpp loads them so).
  Options opt = p.opt;
  if (h.alibi_rank) {
    alibi.resize(static_cast<std::size_t>(p.opt.alibi_slopes.numel()));
    convert(p.opt.alibi_slopes,
            h.alibi_rank == 1 ? TensorView::contiguous(alibi.data(), {h.alibi[0]})
                              : TensorView::contiguous(alibi.data(), {h.alibi[0], h.alibi[1]}));
  }
  if (h.sinks) {
    sinks.resize(static_cast<std::size_t>(h.sinks));
    convert(p.opt.sinks, TensorView::contiguous(sinks.data(), {h.sinks}));
  }
  std::vector<float> extra = alibi;
  extra.insert(extra.end(), sinks.begin(), sinks.end());
  mpi_check(MPI_Bcast(extra.data(), static_cast<int>(extra.size()), MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast");

  for (int r = 1; r < ranks; ++r) {
    send_floats(cut(p.q, sharding, ranks, r), r);
    send_floats(cut(p.k, sharding, ranks, r), r);
    send_floats(cut(p.v, sharding, ranks, r), r);
    if (h.backward) send_floats(cut(p.d_o, sharding, ranks, r), r);
  }
  Shards s;
  s.q = cut(p.q, sharding, ranks, 0);
  s.k = cut(p.k, sharding, ranks, 0);
  s.v = cut(p.v, sharding, ranks, 0);
  if (h.backward) s.d_o = cut(p.d_o, sharding, ranks, 0);
  compute(h, s, opt, sharding, &state_->fwd, &state_->bwd);
  state_->backward = h.backward;
  state_->sharding = sharding;

  // Gather, rank by rank, into the outputs.
  const std::int64_t o_dims[4] = {h.q[0], h.q[1], h.q[2], h.v[3]}, lse_dims[4] = {h.q[0], h.q[1], h.q[2], 1};
  for (int r = 0; r < ranks; ++r) {
    Shards got;
    Shards& x = r == 0 ? s : got;
    if (r > 0) {
      x.o = recv_floats(shard_floats(o_dims, sharding, ranks, r), r);
      if (h.want_lse) x.lse = recv_floats(shard_floats(lse_dims, sharding, ranks, r), r);
      if (h.backward) {
        x.dq = recv_floats(shard_floats(h.q, sharding, ranks, r), r);
        x.dk = recv_floats(shard_floats(h.k, sharding, ranks, r), r);
        x.dv = recv_floats(shard_floats(h.v, sharding, ranks, r), r);
      }
    }
    paste(x.o, p.o, sharding, ranks, r);
    if (h.want_lse) paste(x.lse, p.lse, sharding, ranks, r);
    if (h.backward) {
      paste(x.dq, p.grads.dq, sharding, ranks, r);
      paste(x.dk, p.grads.dk, sharding, ranks, r);
      paste(x.dv, p.grads.dv, sharding, ranks, r);
    }
  }
  // dsinks is the same on every rank.
  if (h.want_dsinks) convert(TensorView::contiguous(s.dsinks.data(), {h.q[1]}), p.grads.dsinks);
}

int RingSession::run_worker(const Options& base, bool zigzag) {
  const Sharding sharding = zigzag ? Sharding::zigzag : Sharding::contiguous;
  const int ranks = state_->ranks, rank = state_->rank;
  Header h;
  mpi_check(MPI_Bcast(&h, sizeof h, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  if (h.status != 0) return static_cast<int>(h.status - 1);
  std::int64_t alibi_n = h.alibi_rank == 0 ? 0 : h.alibi_rank == 1 ? h.alibi[0] : h.alibi[0] * h.alibi[1];
  std::vector<float> extra(static_cast<std::size_t>(alibi_n + h.sinks));
  mpi_check(MPI_Bcast(extra.data(), static_cast<int>(extra.size()), MPI_FLOAT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  Options opt = base;
  if (h.alibi_rank == 1) opt.alibi_slopes = TensorView::contiguous(extra.data(), {h.alibi[0]});
  if (h.alibi_rank == 2) opt.alibi_slopes = TensorView::contiguous(extra.data(), {h.alibi[0], h.alibi[1]});
  if (h.sinks) opt.sinks = TensorView::contiguous(extra.data() + alibi_n, {h.sinks});

  Shards s;
  s.q = recv_floats(shard_floats(h.q, sharding, ranks, rank), 0);
  s.k = recv_floats(shard_floats(h.k, sharding, ranks, rank), 0);
  s.v = recv_floats(shard_floats(h.v, sharding, ranks, rank), 0);
  if (h.backward) s.d_o = recv_floats(shard_floats(h.d_o, sharding, ranks, rank), 0);
  try {
    compute(h, s, opt, sharding, &state_->fwd, &state_->bwd);
  } catch (const Error& e) {
    // Every rank threw (the ring agrees before it starts); rank 0 reports it.
    return e.arg().empty() ? kExitFailure : route_of(e.arg()).exit_code;
  }
  send_floats(s.o, 0);
  if (h.want_lse) send_floats(s.lse, 0);
  if (h.backward) {
    send_floats(s.dq, 0);
    send_floats(s.dk, 0);
    send_floats(s.dv, 0);
  }
  return kExitOk;
}

std::string RingSession::summary() const {
  const State& st = *state_;
  std::string s = fmt::format("ring of {} ranks, {} sharding; rank 0: forward {}", st.ranks,
                              st.sharding == Sharding::zigzag ? "zigzag" : "contiguous", describe(st.fwd));
  if (st.backward) s += "; backward " + describe(st.bwd);
  return s;
}

}  // namespace sdpa::cli
