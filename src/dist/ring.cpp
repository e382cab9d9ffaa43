// Ring attention over MPI, forward and backward (see include/sdpa/ring.h).
//
// Step s of P: rank r holds the K/V block of owner (r - s) mod P. Before the
// step's compute it posts the send of that block to r + 1 and the receive of
// the next one from r - 1; the compute attends each slice of the local
// queries to each chunk of the block (the library's fast path, with the
// block's global positions as position offsets and key lengths) and folds
// the partial (O, lse) into the running rows (cpu::LseMerge). Between slices
// MPI_Testall lets the transfers progress; what remains is waited for at the
// end of the step.
//
// Backward (ring-flash-attention's schedule): the blocks travel again; each
// step's dK/dV of the visiting block is added to the accumulator that
// arrives with it (sent by the rank that held the block in the step before),
// so block o's gradient is ((c_o + c_{o+1}) + c_{o+2}) + ... in a fixed
// order, and after the last step the accumulator goes back to its owner.
// dQ accumulates locally. The per-block backward reads the forward's global
// O and lse, so P = exp(s - lse) and D = rowsum(dO∘O) are those of the whole
// sequence.
#include "sdpa/ring.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cpu/merge.h"
#include "cpu/threads.h"
#include "params.h"
#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/error.h"

namespace sdpa::ring {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Query rows per attention call: between two calls MPI_Testall lets the
// blocks in flight progress. Two of the fast path's 192-row blocks.
constexpr std::int64_t kSliceRows = 384;
// Position offsets are shifted by block positions: kept well inside int64.
constexpr std::int64_t kMaxOffset = std::int64_t{1} << 62;
enum Tag : int { kTagKv = 1, kTagGrad = 2, kTagHome = 3 };

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::int64_t bound(std::int64_t n, std::int64_t chunks, std::int64_t c) {
  return static_cast<std::int64_t>(static_cast<__int128>(n) * c / chunks);
}

// The duplicated communicator, errors returned (never fatal) and thrown.
class Comm {
 public:
  explicit Comm(MPI_Comm user) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized)
      throw Error("comm", "MPI initialised (MPI_Init_thread) and not finalised", "MPI not initialised or finalised");
    if (user == MPI_COMM_NULL) throw Error("comm", "a communicator", "MPI_COMM_NULL");
    int provided = MPI_THREAD_SINGLE, is_main = 0;
    MPI_Query_thread(&provided);
    MPI_Is_thread_main(&is_main);
    if (provided < MPI_THREAD_FUNNELED)
      throw Error("comm", "MPI initialised with at least MPI_THREAD_FUNNELED (the library runs worker threads)",
                  "MPI_THREAD_SINGLE");
    if (provided == MPI_THREAD_FUNNELED && !is_main)
      throw Error("comm", "a call from the thread that initialised MPI (MPI_THREAD_FUNNELED)", "another thread");
    int inter = 0;
    MPI_Comm_test_inter(user, &inter);
    if (inter) throw Error("comm", "an intra-communicator", "an inter-communicator");
    check(MPI_Comm_dup(user, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~Comm() { MPI_Comm_free(&comm_); }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int left() const { return (rank_ + size_ - 1) % size_; }
  int right() const { return (rank_ + 1) % size_; }

  static void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error("comm", std::string(what) + " to succeed", std::string(text, static_cast<std::size_t>(len)));
  }

  void bcast(std::string& s, int root) const {
    int n = static_cast<int>(s.size());
    check(MPI_Bcast(&n, 1, MPI_INT, root, comm_), "MPI_Bcast");
    s.resize(static_cast<std::size_t>(n));
    check(MPI_Bcast(s.data(), n, MPI_CHAR, root, comm_), "MPI_Bcast");
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// Runs a check on every rank; when one (the lowest) throws, every rank
// throws its message, so no rank enters the ring alone.
template <class F>
void agree(const Comm& c, F&& check) {
  std::string arg, expected, got, message;
  bool failed = false;
  try {
    check();
  } catch (const Error& e) {
    failed = true;
    arg = e.arg();
    expected = e.expected();
    got = e.got();
    message = e.what();
  }
  int mine = failed ? c.rank() : c.size(), first = c.size();
  Comm::check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c.get()), "MPI_Allreduce");
  if (first == c.size()) return;
  for (std::string* s : {&arg, &expected, &got, &message}) c.bcast(*s, first);
  const std::string where = c.rank() == first ? "" : " (on rank " + std::to_string(first) + ")";
  if (arg.empty()) throw Error(message + where);
  throw Error(arg, expected, got + where);
}

// A view of rows [n0, n0 + n) of axis 2 (N) of a 3-D or 4-D view.
TensorView rows_of(const TensorView& t, std::int64_t n0, std::int64_t n) {
  TensorView r = t;
  r.data = static_cast<char*>(t.data) + n0 * t.stride[2] * static_cast<std::int64_t>(dtype_size(t.dtype));
  r.shape[2] = n;
  return r;
}

// Rows [n0, n0 + n) of a packed float32 [B, H, rows, width] buffer.
TensorView packed(float* data, std::int64_t b, std::int64_t h, std::int64_t rows, std::int64_t n0, std::int64_t n,
                  std::int64_t width) {
  TensorView t;
  t.data = data + n0 * width;
  t.dtype = DType::f32;
  t.rank = 4;
  t.shape = {b, h, n, width};
  t.stride = {h * rows * width, rows * width, width, 1};
  return t;
}

void require_f32(const char* name, const TensorView& t) {
  if (t.is_set() && t.dtype != DType::f32)
    throw Error(name, "float32 with ring attention", std::string(dtype_name(t.dtype)) + " " + t.shape_string());
}

// An int32/int64 [B] option read whole.
std::vector<std::int64_t> per_batch(const char* name, const TensorView& t, std::int64_t b) {
  std::vector<std::int64_t> out;
  if (!t.is_set()) return out;
  if (t.dtype != DType::i32 && t.dtype != DType::i64)
    throw Error(name, "int32 or int64", std::string(dtype_name(t.dtype)) + " " + t.shape_string());
  if (t.rank != 1 || t.shape[0] != b)
    throw Error(name, "shape [B] = [" + std::to_string(b) + "]", t.shape_string());
  for (std::int64_t i = 0; i < b; ++i) {
    const void* at = static_cast<const char*>(t.data) + i * t.stride[0] * static_cast<std::int64_t>(dtype_size(t.dtype));
    out.push_back(t.dtype == DType::i64 ? *static_cast<const std::int64_t*>(at)
                                        : *static_cast<const std::int32_t*>(at));
  }
  return out;
}

std::uint64_t hash_of(const std::vector<std::int64_t>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::int64_t x : v) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ull;
  return h ^ v.size();
}

// The whole call, the same on every rank once checked.
struct Geometry {
  int ranks = 1, rank = 0;
  Sharding sharding = Sharding::contiguous;
  std::int64_t b = 0, h = 0, h_kv = 0, d = 0, dv = 0, n_q = 0, n_kv = 0;
  std::vector<std::int64_t> offset;      // [B]: query i of the sequence sits at i + offset[b]
  std::vector<std::int64_t> key_length;  // [B], or empty: every key is real
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  int threads = 1;
  std::vector<Chunk> q_chunks;  // this rank's
  std::int64_t nq_local = 0;

  std::int64_t kv_rows(int owner) const { return shard_rows(sharding, n_kv, ranks, owner); }
  // Floats of owner's K/V block (K then V), the same for its dK/dV.
  std::int64_t block_floats(int owner) const { return b * h_kv * kv_rows(owner) * (d + dv); }

  // Whether some query of [q0, q0 + rows) sees some key of [k0, k0 + keys) in some batch entry.
  bool sees(std::int64_t q0, std::int64_t rows, std::int64_t k0, std::int64_t keys) const {
    if (rows <= 0 || keys <= 0) return false;
    using Wide = __int128;
    for (std::int64_t bb = 0; bb < b; ++bb) {
      const Wide first = Wide{q0} + offset[bb], last = first + rows - 1;
      Wide lo = k0, hi = Wide{k0} + keys;
      if (!key_length.empty()) hi = std::min<Wide>(hi, key_length[bb]);
      if (causal) hi = std::min<Wide>(hi, last + 1);
      if (window_right >= 0) hi = std::min<Wide>(hi, last + window_right + 1);
      if (window_left >= 0) lo = std::max<Wide>(lo, first - window_left);
      if (lo < hi) return true;
    }
    return false;
  }
};

// One attention call of a step: query rows [q_local, q_local + rows) of this
// rank (global q_global) against the block's keys [k_local, k_local + keys)
// (global k_global).
struct Piece {
  std::int64_t q_local, q_global, rows, k_local, k_global, keys;
};

std::vector<Piece> pieces_of(const Geometry& g, int owner) {
  std::vector<Piece> out;
  const std::vector<Chunk> k_chunks = shard(g.sharding, g.n_kv, g.ranks, owner);
  std::int64_t q_local = 0;
  for (const Chunk& qc : g.q_chunks) {
    for (std::int64_t r0 = 0; r0 < qc.size; r0 += kSliceRows) {
      const std::int64_t rows = std::min(kSliceRows, qc.size - r0);
      std::int64_t k_local = 0;
      for (const Chunk& kc : k_chunks) {
        if (g.sees(qc.begin + r0, rows, kc.begin, kc.size))
          out.push_back({q_local + r0, qc.begin + r0, rows, k_local, kc.begin, kc.size});
        k_local += kc.size;
      }
    }
    q_local += qc.size;
  }
  return out;
}

// The per-call Options of a piece: global positions made local.
struct PieceOptions {
  Options opt;
  std::vector<std::int64_t> offsets, lengths;
  PieceOptions(const Options& user, const Geometry& g, const Piece& pc) : opt(user) {
    opt.lse = {};
    opt.probs = {};
    opt.scores = {};
    opt.dropout_mask = {};
    opt.sinks = {};  // folded into the merge (forward) and dsinks (backward) here
    opt.align = Align::top_left;
    offsets.resize(static_cast<std::size_t>(g.b));
    for (std::int64_t bb = 0; bb < g.b; ++bb) offsets[bb] = g.offset[bb] + pc.q_global - pc.k_global;
    opt.position_offsets = TensorView::contiguous(offsets.data(), DType::i64, {g.b});
    opt.key_lengths = {};
    if (!g.key_length.empty()) {
      lengths.resize(static_cast<std::size_t>(g.b));
      for (std::int64_t bb = 0; bb < g.b; ++bb)
        lengths[bb] = std::clamp<std::int64_t>(g.key_length[bb] - pc.k_global, 0, pc.keys);
      opt.key_lengths = TensorView::contiguous(lengths.data(), DType::i64, {g.b});
    }
  }
  PieceOptions(const PieceOptions&) = delete;
};

struct Views {
  TensorView q{}, k{}, v{}, o{}, lse{}, d_o{};
  Gradients grads{};
  bool backward = false;
};

// Every check, on every rank, before any block moves: the local shard through
// make_params (the library's one validation), then what only the whole ring
// can tell (the ranks agree, the shards fit the sharding, lengths are global).
Geometry check_call(const Comm& c, const Ring& ring, const Views& x, const Options& opt) {
  Geometry g;
  g.ranks = c.size();
  g.rank = c.rank();
  g.sharding = ring.sharding;
  std::vector<std::int64_t> offsets, lengths;
  std::array<std::int64_t, 16> sig{};
  agree(c, [&] {
    if (ring.sharding != Sharding::contiguous && ring.sharding != Sharding::zigzag)
      throw Error("ring.sharding", "contiguous or zigzag", std::to_string(static_cast<int>(ring.sharding)));
    if (opt.mask.is_set())
      throw Error("mask", "no explicit mask with ring attention (causal, windows, key_lengths and ALiBi take global "
                          "positions)",
                  "a mask " + opt.mask.shape_string());
    if (opt.probs.is_set()) throw Error("probs", "unset with ring attention", "a view " + opt.probs.shape_string());
    if (opt.scores.is_set()) throw Error("scores", "unset with ring attention", "a view " + opt.scores.shape_string());
    if (opt.dropout_mask.is_set())
      throw Error("dropout_mask", "unset with ring attention", "a view " + opt.dropout_mask.shape_string());
    if (opt.dropout_p != 0)
      throw Error("dropout_p", "0 with ring attention", std::to_string(opt.dropout_p));
    // The local shard as one call: shapes, heads, strides, every option's
    // form (global positions and lengths are checked below, as such).
    Options local = opt;
    local.position_offsets = {};
    local.key_lengths = {};
    Call call{.q = x.q, .k = x.k, .v = x.v, .o = x.o, .opt = &local, .path = Path::fast};
    if (x.backward) {
      call.backward = true;
      call.lse = x.lse;
      call.d_o = x.d_o;
      call.dq = x.grads.dq;
      call.dk = x.grads.dk;
      call.dv = x.grads.dv;
      call.dsinks = x.grads.dsinks;
      local.lse = {};
    }
    const Params p = make_params(call);
    for (const auto& [name, t] : {std::pair{"q", &x.q}, std::pair{"k", &x.k}, std::pair{"v", &x.v},
                                  std::pair{"o", &x.o}, std::pair{"d_o", &x.d_o}, std::pair{"dq", &x.grads.dq},
                                  std::pair{"dk", &x.grads.dk}, std::pair{"dv", &x.grads.dv}})
      require_f32(name, *t);
    g.b = p.b, g.h = p.h, g.h_kv = p.h_kv, g.d = p.d, g.dv = p.dv;
    g.causal = p.causal, g.window_left = p.window_left, g.window_right = p.window_right;
    g.threads = p.threads;
    offsets = per_batch("position_offsets", opt.position_offsets, p.b);
    lengths = per_batch("key_lengths", opt.key_lengths, p.b);
    for (std::int64_t off : offsets)
      if (off < -kMaxOffset || off > kMaxOffset)
        throw Error("position_offsets", "values in [-2^62, 2^62] with ring attention", std::to_string(off));
    const double scale = p.scale, softcap = p.softcap;
    sig = {p.b, p.h, p.h_kv, p.d, p.dv, p.n_q, p.n_kv, static_cast<std::int64_t>(ring.sharding), p.causal,
           p.window_left, p.window_right, static_cast<std::int64_t>(hash_of(offsets)),
           static_cast<std::int64_t>(hash_of(lengths)), static_cast<std::int64_t>(opt.align),
           std::bit_cast<std::int64_t>(scale), std::bit_cast<std::int64_t>(softcap)};
  });
  std::vector<std::int64_t> all(sig.size() * static_cast<std::size_t>(c.size()));
  Comm::check(MPI_Allgather(sig.data(), static_cast<int>(sig.size()), MPI_INT64_T, all.data(),
                            static_cast<int>(sig.size()), MPI_INT64_T, c.get()),
              "MPI_Allgather");
  agree(c, [&] {
    static const char* const names[] = {"q (B)",       "q (H)",          "k (Hkv)",       "q (d)",
                                        "v (dv)",      "",               "",              "ring.sharding",
                                        "causal",      "window_left",    "window_right",  "position_offsets",
                                        "key_lengths", "align",          "scale",         "softcap"};
    for (std::size_t i = 0; i < sig.size(); ++i) {
      if (i == 5 || i == 6 || all[i] == sig[i]) continue;
      const bool values = i >= 11;
      throw Error(names[i], values ? "the same value on every rank as on rank 0" : "the same size on every rank",
                  values ? "a different one" : std::to_string(sig[i]) + " (rank 0: " + std::to_string(all[i]) + ")");
    }
    for (int r = 0; r < c.size(); ++r) {
      g.n_q += all[r * sig.size() + 5];
      g.n_kv += all[r * sig.size() + 6];
    }
    const char* how = g.sharding == Sharding::zigzag ? "zigzag" : "contiguous";
    const std::int64_t want_q = shard_rows(g.sharding, g.n_q, c.size(), c.rank());
    const std::int64_t want_kv = shard_rows(g.sharding, g.n_kv, c.size(), c.rank());
    if (sig[5] != want_q)
      throw Error("q", std::to_string(want_q) + " rows: rank " + std::to_string(c.rank()) + " of " +
                           std::to_string(c.size()) + " in " + how + " sharding of Nq=" + std::to_string(g.n_q),
                  std::to_string(sig[5]));
    if (sig[6] != want_kv)
      throw Error("k", std::to_string(want_kv) + " rows: rank " + std::to_string(c.rank()) + " of " +
                           std::to_string(c.size()) + " in " + how + " sharding of Nkv=" + std::to_string(g.n_kv),
                  std::to_string(sig[6]));
    for (std::int64_t len : lengths)
      if (len < 0 || len > g.n_kv)
        throw Error("key_lengths", "values in [0, Nkv=" + std::to_string(g.n_kv) + "] (the whole sequence)",
                    std::to_string(len));
    for (std::int64_t bb = 0; bb < g.b; ++bb) {
      if (!offsets.empty()) {
        g.offset.push_back(offsets[bb]);
      } else {
        g.offset.push_back(opt.align == Align::bottom_right ? g.n_kv - g.n_q : 0);
      }
    }
    g.key_length = lengths;
    for (int r = 0; r < c.size(); ++r)
      if (g.block_floats(r) > INT_MAX)
        throw Error("k", "a K/V block of at most 2^31-1 floats per rank (B*Hkv*rows*(d+dv))",
                    std::to_string(g.block_floats(r)) + " on rank " + std::to_string(r));
    g.q_chunks = shard(g.sharding, g.n_q, c.size(), c.rank());
    g.nq_local = sig[5];
  });
  return g;
}

// The last step any rank computes in: the ring stops there.
std::int64_t last_step(const Comm& c, const Geometry& g) {
  std::int64_t mine = 0;
  for (int s = 0; s < g.ranks; ++s)
    if (!pieces_of(g, (g.rank - s + g.ranks) % g.ranks).empty()) mine = s;
  std::int64_t last = 0;
  Comm::check(MPI_Allreduce(&mine, &last, 1, MPI_INT64_T, MPI_MAX, c.get()), "MPI_Allreduce");
  return last;
}

// The requests of one step, timed while waited for.
class Requests {
 public:
  explicit Requests(Stats& st) : st_(st) {}
  ~Requests() {
    // Only on an exception: complete what is in flight before the buffers go.
    if (!list_.empty()) MPI_Waitall(static_cast<int>(list_.size()), list_.data(), MPI_STATUSES_IGNORE);
  }
  void send(const float* data, std::int64_t n, int to, int tag, MPI_Comm comm) {
    list_.emplace_back();
    transfers_ = true;
    Comm::check(MPI_Isend(data, static_cast<int>(n), MPI_FLOAT, to, tag, comm, &list_.back()), "MPI_Isend");
    step_bytes_ += n * static_cast<std::int64_t>(sizeof(float));
  }
  void recv(float* data, std::int64_t n, int from, int tag, MPI_Comm comm) {
    list_.emplace_back();
    Comm::check(MPI_Irecv(data, static_cast<int>(n), MPI_FLOAT, from, tag, comm, &list_.back()), "MPI_Irecv");
  }
  // Lets the transfers progress (MPI makes progress inside its calls).
  void poke() {
    if (list_.empty()) return;
    const Clock::time_point t0 = Clock::now();
    int done = 0;
    Comm::check(MPI_Testall(static_cast<int>(list_.size()), list_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) list_.clear();
    st_.test_s += since(t0);
  }
  // The end of a step's compute: what is still in flight is waited for.
  void wait() {
    if (transfers_) {
      poke();
      if (list_.empty()) ++st_.hidden_steps;
      ++st_.transfer_steps;
    }
    const Clock::time_point t0 = Clock::now();
    if (!list_.empty())
      Comm::check(MPI_Waitall(static_cast<int>(list_.size()), list_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    list_.clear();
    st_.wait_s += since(t0);
    st_.bytes_sent += step_bytes_;
    st_.bytes_per_step = std::max(st_.bytes_per_step, step_bytes_);
    step_bytes_ = 0;
  }

 private:
  Stats& st_;
  std::vector<MPI_Request> list_;
  std::int64_t step_bytes_ = 0;
  bool transfers_ = false;
};

// This rank's K and V, packed into a block (K [B, Hkv, rows, d] then V).
void pack_block(const Geometry& g, const TensorView& k, const TensorView& v, float* block) {
  const std::int64_t rows = g.kv_rows(g.rank);
  if (rows == 0) return;
  convert(k, packed(block, g.b, g.h_kv, rows, 0, rows, g.d));
  convert(v, packed(block + g.b * g.h_kv * rows * g.d, g.b, g.h_kv, rows, 0, rows, g.dv));
}

TensorView block_k(const Geometry& g, float* block, int owner, const Piece& pc) {
  return packed(block, g.b, g.h_kv, g.kv_rows(owner), pc.k_local, pc.keys, g.d);
}
TensorView block_v(const Geometry& g, float* block, int owner, const Piece& pc) {
  const std::int64_t rows = g.kv_rows(owner);
  return packed(block + g.b * g.h_kv * rows * g.d, g.b, g.h_kv, rows, pc.k_local, pc.keys, g.dv);
}

float sink_of(const Options& opt, std::int64_t h) {
  const TensorView& s = opt.sinks;
  return *reinterpret_cast<const float*>(static_cast<const char*>(s.data) + h * s.stride[0] * sizeof(float));
}

}  // namespace

std::vector<Chunk> shard(Sharding sharding, std::int64_t n, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error("rank", "in [0, ranks=" + std::to_string(ranks) + ")", std::to_string(rank));
  if (n < 0) throw Error("n", "a sequence length >= 0", std::to_string(n));
  const auto chunk = [&](std::int64_t chunks, std::int64_t c) {
    return Chunk{bound(n, chunks, c), bound(n, chunks, c + 1) - bound(n, chunks, c)};
  };
  if (sharding == Sharding::zigzag) return {chunk(2 * ranks, rank), chunk(2 * ranks, 2 * ranks - 1 - rank)};
  return {chunk(ranks, rank)};
}

std::int64_t shard_rows(Sharding sharding, std::int64_t n, int ranks, int rank) {
  std::int64_t rows = 0;
  for (const Chunk& c : shard(sharding, n, ranks, rank)) rows += c.size;
  return rows;
}

void attention(const Ring& ring, const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
               const Options& opt) {
  const Clock::time_point t_start = Clock::now();
  Stats st;
  const Comm c(ring.comm);
  st.ranks = c.size();
  const Geometry g = check_call(c, ring, Views{.q = q, .k = k, .v = v, .o = o}, opt);
  const std::int64_t steps = last_step(c, g) + 1;
  const std::int64_t bh = g.b * g.h, nq = g.nq_local;

  // The running rows: state and Σ weight·O per (b, h, i), the sink folded in first.
  std::vector<cpu::LseMerge> rows(static_cast<std::size_t>(bh * nq));
  std::vector<double> acc(static_cast<std::size_t>(bh * nq * g.dv), 0.0);
  if (opt.sinks.is_set()) {
    const std::vector<float> zeros(static_cast<std::size_t>(g.dv), 0.0f);
    for (std::int64_t x = 0; x < bh * nq; ++x)
      rows[x].fold(sink_of(opt, (x / nq) % g.h), 1.0, zeros.data(), &acc[x * g.dv], g.dv);
  }
  std::int64_t max_block = 0;
  for (int r = 0; r < g.ranks; ++r) max_block = std::max(max_block, g.block_floats(r));
  std::vector<float> cur(static_cast<std::size_t>(max_block)), next(static_cast<std::size_t>(max_block));
  std::vector<float> part_o(static_cast<std::size_t>(bh * kSliceRows * g.dv));
  std::vector<float> part_lse(static_cast<std::size_t>(bh * kSliceRows));
  pack_block(g, k, v, cur.data());

  for (std::int64_t s = 0; s < steps; ++s) {
    const int owner = static_cast<int>((g.rank - s + g.ranks * steps) % g.ranks);
    Requests reqs(st);
    if (s + 1 < steps) {
      const int next_owner = (owner + g.ranks - 1) % g.ranks;
      reqs.recv(next.data(), g.block_floats(next_owner), c.left(), kTagKv, c.get());
      reqs.send(cur.data(), g.block_floats(owner), c.right(), kTagKv, c.get());
    }
    for (const Piece& pc : pieces_of(g, owner)) {
      const Clock::time_point t0 = Clock::now();
      const PieceOptions po(opt, g, pc);
      Options popt = po.opt;
      popt.lse = TensorView::contiguous(part_lse.data(), {g.b, g.h, pc.rows});
      sdpa::attention(rows_of(q, pc.q_local, pc.rows), block_k(g, cur.data(), owner, pc),
                      block_v(g, cur.data(), owner, pc),
                      TensorView::contiguous(part_o.data(), {g.b, g.h, pc.rows, g.dv}), popt);
      cpu::parallel_for(bh, g.threads, [&](std::int64_t x, int) {
        for (std::int64_t i = 0; i < pc.rows; ++i) {
          const std::int64_t row = x * nq + pc.q_local + i, part = x * pc.rows + i;
          rows[row].fold(part_lse[part], 1.0, &part_o[part * g.dv], &acc[row * g.dv], g.dv);
        }
      });
      st.compute_s += since(t0);
      ++st.blocks;
      reqs.poke();
    }
    reqs.wait();
    std::swap(cur, next);
  }

  // O = acc / l (0 where nothing is visible), lse = m + log l.
  std::vector<float> out(static_cast<std::size_t>(bh * nq * g.dv)), lse(static_cast<std::size_t>(bh * nq));
  for (std::int64_t x = 0; x < bh * nq; ++x) {
    const cpu::LseMerge& m = rows[x];
    const bool empty = m.m == kNegInf;
    const double inv = empty ? 0.0 : 1.0 / m.l;
    for (std::int64_t col = 0; col < g.dv; ++col)
      out[x * g.dv + col] = empty ? 0.0f : static_cast<float>(acc[x * g.dv + col] * inv);
    lse[x] = static_cast<float>(m.lse());
  }
  if (nq > 0) {
    convert(TensorView::contiguous(out.data(), {g.b, g.h, nq, g.dv}), o);
    if (opt.lse.is_set()) convert(TensorView::contiguous(lse.data(), {g.b, g.h, nq}), opt.lse);
  }
  st.steps = steps;
  st.total_s = since(t_start);
  if (ring.stats) *ring.stats = st;
}

void attention_backward(const Ring& ring, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& o, const TensorView& lse, const TensorView& d_o, const Gradients& grads,
                        const Options& opt) {
  const Clock::time_point t_start = Clock::now();
  Stats st;
  const Comm c(ring.comm);
  st.ranks = c.size();
  const Geometry g = check_call(
      c, ring, Views{.q = q, .k = k, .v = v, .o = o, .lse = lse, .d_o = d_o, .grads = grads, .backward = true}, opt);
  const std::int64_t steps = last_step(c, g) + 1;
  const std::int64_t nq = g.nq_local;

  std::int64_t max_block = 0;
  for (int r = 0; r < g.ranks; ++r) max_block = std::max(max_block, g.block_floats(r));
  const auto buffer = [&] { return std::vector<float>(static_cast<std::size_t>(max_block), 0.0f); };
  std::vector<float> cur = buffer(), next = buffer();          // K/V blocks
  std::vector<float> local = buffer(), out = buffer(), in = buffer();  // dK/dV: this step's, to send, arriving
  std::vector<float> dq(static_cast<std::size_t>(g.b * g.h * nq * g.d), 0.0f);
  std::vector<float> part_dq(static_cast<std::size_t>(g.b * g.h * kSliceRows * g.d));
  std::vector<float> part_dkv(static_cast<std::size_t>(max_block));
  pack_block(g, k, v, cur.data());

  for (std::int64_t s = 0; s < steps; ++s) {
    const int owner = static_cast<int>((g.rank - s + g.ranks * steps) % g.ranks);
    const std::int64_t floats = g.block_floats(owner), rows = g.kv_rows(owner);
    Requests reqs(st);
    if (s + 1 < steps) {
      reqs.recv(next.data(), g.block_floats((owner + g.ranks - 1) % g.ranks), c.left(), kTagKv, c.get());
      reqs.send(cur.data(), floats, c.right(), kTagKv, c.get());
    }
    if (s > 0) {
      // The accumulator of the block this rank held last step goes on with
      // it; the one of the block it holds now arrives from the left.
      reqs.recv(in.data(), floats, c.left(), kTagGrad, c.get());
      reqs.send(out.data(), g.block_floats((owner + 1) % g.ranks), c.right(), kTagGrad, c.get());
    }
    std::fill(local.begin(), local.begin() + floats, 0.0f);
    for (const Piece& pc : pieces_of(g, owner)) {
      const Clock::time_point t0 = Clock::now();
      const PieceOptions po(opt, g, pc);
      float* pdk = part_dkv.data();
      float* pdv = pdk + g.b * g.h_kv * pc.keys * g.d;
      Gradients pg{.dq = TensorView::contiguous(part_dq.data(), {g.b, g.h, pc.rows, g.d}),
                   .dk = TensorView::contiguous(pdk, {g.b, g.h_kv, pc.keys, g.d}),
                   .dv = TensorView::contiguous(pdv, {g.b, g.h_kv, pc.keys, g.dv})};
      sdpa::attention_backward(rows_of(q, pc.q_local, pc.rows), block_k(g, cur.data(), owner, pc),
                               block_v(g, cur.data(), owner, pc), rows_of(o, pc.q_local, pc.rows),
                               rows_of(lse, pc.q_local, pc.rows), rows_of(d_o, pc.q_local, pc.rows), pg, po.opt);
      cpu::parallel_for(g.b * g.h, g.threads, [&](std::int64_t x, int) {
        float* to = &dq[(x * nq + pc.q_local) * g.d];
        const float* from = &part_dq[x * pc.rows * g.d];
        for (std::int64_t e = 0; e < pc.rows * g.d; ++e) to[e] += from[e];
      });
      float* lk = local.data();
      float* lv = lk + g.b * g.h_kv * rows * g.d;
      for (std::int64_t x = 0; x < g.b * g.h_kv; ++x) {
        for (std::int64_t e = 0; e < pc.keys * g.d; ++e) lk[(x * rows + pc.k_local) * g.d + e] += pdk[x * pc.keys * g.d + e];
        for (std::int64_t e = 0; e < pc.keys * g.dv; ++e)
          lv[(x * rows + pc.k_local) * g.dv + e] += pdv[x * pc.keys * g.dv + e];
      }
      st.compute_s += since(t0);
      ++st.blocks;
      reqs.poke();
    }
    reqs.wait();
    if (s > 0)
      for (std::int64_t e = 0; e < floats; ++e) local[e] = in[e] + local[e];
    std::swap(local, out);  // out: the accumulator of this step's block, sent at the next
    std::swap(cur, next);
  }
  // The accumulators go home: this rank holds block (rank - last)'s and
  // receives its own from rank + last (its right neighbour after a full ring).
  std::vector<float>* mine = &out;
  if (steps > 1) {
    const int last = static_cast<int>(steps - 1);
    const int holder = (g.rank + last) % g.ranks, owner = (g.rank + g.ranks - last) % g.ranks;
    Requests reqs(st);
    reqs.recv(in.data(), g.block_floats(g.rank), holder, kTagHome, c.get());
    reqs.send(out.data(), g.block_floats(owner), owner, kTagHome, c.get());
    reqs.wait();
    mine = &in;
  }
  const std::int64_t own_rows = g.kv_rows(g.rank);
  if (own_rows > 0) {
    convert(packed(mine->data(), g.b, g.h_kv, own_rows, 0, own_rows, g.d), grads.dk);
    convert(packed(mine->data() + g.b * g.h_kv * own_rows * g.d, g.b, g.h_kv, own_rows, 0, own_rows, g.dv),
            grads.dv);
  }
  if (nq > 0) convert(TensorView::contiguous(dq.data(), {g.b, g.h, nq, g.d}), grads.dq);

  // dsinks[h] = -Σ exp(sink_h - lse) · rowsum(dO∘O) over every row of every
  // rank, summed per rank and then over the ranks in order.
  if (grads.dsinks.is_set()) {
    std::vector<double> part(static_cast<std::size_t>(g.h), 0.0), all(static_cast<std::size_t>(g.h * g.ranks));
    std::vector<float> o_rows(static_cast<std::size_t>(g.b * g.h * nq * g.dv)),
        do_rows(o_rows.size()), lse_rows(static_cast<std::size_t>(g.b * g.h * nq));
    if (nq > 0) {
      convert(o, TensorView::contiguous(o_rows.data(), {g.b, g.h, nq, g.dv}));
      convert(d_o, TensorView::contiguous(do_rows.data(), {g.b, g.h, nq, g.dv}));
      convert(lse, TensorView::contiguous(lse_rows.data(), {g.b, g.h, nq}));
    }
    for (std::int64_t hh = 0; hh < g.h; ++hh) {
      const double sink = sink_of(opt, hh);
      for (std::int64_t bb = 0; bb < g.b; ++bb)
        for (std::int64_t i = 0; i < nq; ++i) {
          const std::int64_t x = (bb * g.h + hh) * nq + i;
          if (lse_rows[x] == -std::numeric_limits<float>::infinity()) continue;
          double dot = 0;
          for (std::int64_t col = 0; col < g.dv; ++col) dot += double{o_rows[x * g.dv + col]} * do_rows[x * g.dv + col];
          part[hh] -= std::exp(sink - double{lse_rows[x]}) * dot;
        }
    }
    Comm::check(MPI_Allgather(part.data(), static_cast<int>(g.h), MPI_DOUBLE, all.data(), static_cast<int>(g.h),
                              MPI_DOUBLE, c.get()),
                "MPI_Allgather");
    std::vector<float> dsinks(static_cast<std::size_t>(g.h), 0.0f);
    for (std::int64_t hh = 0; hh < g.h; ++hh) {
      double sum = 0;
      for (int r = 0; r < g.ranks; ++r) sum += all[r * g.h + hh];
      dsinks[hh] = static_cast<float>(sum);
    }
    convert(TensorView::contiguous(dsinks.data(), {g.h}), grads.dsinks);
  }
  st.steps = steps;
  st.total_s = since(t_start);
  if (ring.stats) *ring.stats = st;
}

}  // namespace sdpa::ring
