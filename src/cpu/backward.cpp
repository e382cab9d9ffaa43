// The backward pass: FlashAttention-2's, parallel over key tiles.
// ref: Dao, "FlashAttention-2", https://arxiv.org/abs/2307.08691 (Algorithm 2)
//
// With P = exp(S - lse) recomputed from the saved lse, dropout factors Z
// (0, or 1/(1-p) where a key is kept; 1 without dropout) and D = rowsum(dO ∘ O):
//   dV  = (P∘Z)ᵀ · dO
//   dP  = Z ∘ (dO · Vᵀ)
//   dS  = P ∘ (dP - D)            (∘ (1 - tanh²) through a softcap)
//   dK  = scale · dSᵀ · Q
//   dQ  = scale · dS · K
//   dsink_h = -Σ exp(sink_h - lse) · D   (the sink is a key whose value is 0)
//
// Work decomposition. The rows of (b, hk) are laid out as in the forward
// (src/cpu/tiles.h: every query head of the K/V group), so dK and dV of a key
// sum over the group inside one work item, in a fixed order. A work item is
// (b, hk, slice): slice s owns the key tiles s, s + S, s + 2S, ... (S slices,
// interleaved so that causal work spreads evenly); for each of its tiles it
// packs Kᵀ and Vᵀ once, sweeps every query block that sees the tile, and
// writes the tile's dK and dV, which no other item touches. dQ gets a
// contribution from every tile, so each slice adds into its own float32 dQ
// accumulator and the S accumulators are summed in slice order at the end:
// no atomics, and the same bits for every thread count. S depends on the
// shape alone (enough items for the threads of a large machine, bounded
// memory), never on the thread count.
//
// Memory: the accumulators, S x (rows of dQ) x d floats, plus per thread one
// key tile (Kᵀ, Vᵀ, dK, dV: 4 x BC x d) and one query block's tiles; no
// N x N buffer.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/driver.h"
#include "cpu/dropout_tile.h"
#include "cpu/kernels/denormals.h"
#include "cpu/spare.h"
#include "cpu/threads.h"
#include "cpu/tiles.h"
#include "sdpa/error.h"

namespace sdpa::cpu {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// Query rows per block in the sweep over a key tile, and keys per tile: a
// multiple of every kernel set's NR (kernels.def), so a tile's columns pad
// to whole microkernel strips.
constexpr int kBlockRows = 96;
// Keys per tile: 64, or 128 where d and dv are at most 64 (kWideTileMaxD).
// A tile's state (Kᵀ, Vᵀ, K, dK, dV) and a block's S and dP then take the
// same memory at either size. Measured (Intel Xeon, 1 thread, N = 2048-4096,
// H = 8, medians): at d = 128, 64-key tiles 5-10% faster than 128; at d = 64,
// 128-key tiles 5% faster than 64 (as the forward's wide tiles at d <= 64).
constexpr int kTileKeys = 64;
constexpr int kWideTileKeys = 128;
constexpr std::int64_t kWideTileMaxD = 64;
int tile_keys(std::int64_t d_pad, std::int64_t dv_pad) {
  return std::max(d_pad, dv_pad) <= kWideTileMaxD ? kWideTileKeys : kTileKeys;
}
// Enough (b, hk, slice) items to keep a large machine busy; a constant, not
// the thread count: determinism.
constexpr std::int64_t kMinItems = 16;
// The dQ accumulators may take at most this much memory (beyond it, fewer slices).
constexpr std::int64_t kMaxAccumulatorBytes = std::int64_t{1} << 30;
// Per-thread working memory, as in the forward.
constexpr std::int64_t kMaxWorkspaceBytes = std::int64_t{256} << 20;
constexpr int kMaxTileKeys = 256;

// The per-thread arrays of one item, in floats (each rounded to 16).
struct Workspace {
  std::int64_t kt, vt, kp, dk, dv, s, dp, tc, z, rows;
  std::int64_t total() const { return kt + vt + kp + dk + dv + s + dp + tc + z + 3 * rows; }
};

Workspace workspace_of(std::int64_t bc, std::int64_t br, std::int64_t d_pad, std::int64_t dv_pad) {
  const auto r16 = [](std::int64_t x) { return (x + 15) / 16 * 16; };
  Workspace w;
  w.kt = r16(d_pad * bc);
  w.vt = r16(dv_pad * bc);
  w.kp = r16(bc * d_pad);
  w.dk = r16(bc * d_pad);
  w.dv = r16(bc * dv_pad);
  w.s = w.dp = w.tc = w.z = r16(br * bc);
  w.rows = r16(std::max(br, bc));
  return w;
}

Error memory_error(const Params& p, const std::string& what) {
  return Error("dq", "head sizes whose working memory fits (at most " + std::to_string(kMaxWorkspaceBytes) +
                         " bytes per thread, growing with d and dv)",
               "d=" + std::to_string(p.d) + ", dv=" + std::to_string(p.dv) + ": " + what);
}

class Backward : TileOps {
 public:
  Backward(const Params& p, const KernelSet& ks)
      : TileOps(p, ks),
        d_pad_(round_up(p.d, ks.w)),
        dv_pad_(round_up(p.dv, ks.w)),
        bc_(tile_keys(d_pad_, dv_pad_)),
        ws_(workspace_of(bc_, kBlockRows, d_pad_, dv_pad_)) {
    for (std::int64_t b = 0; b < p.b; ++b) q_rows_ += p.nq(b);
    const std::int64_t acc_floats = q_rows_ * p.h * d_pad_;  // one slice's dQ accumulator
    std::int64_t tiles = 0;
    for (std::int64_t b = 0; b < p.b; ++b) tiles = std::max(tiles, ceil_div(p.nkv(b), bc_));
    slices_ = std::clamp<std::int64_t>(ceil_div(kMinItems, std::max<std::int64_t>(p.b * p.h_kv, 1)), 1,
                                       std::max<std::int64_t>(tiles, 1));
    if (acc_floats > 0)
      slices_ = std::max<std::int64_t>(1, std::min(slices_, kMaxAccumulatorBytes / 4 / acc_floats));
    slice_floats_ = acc_floats;
    // From the pool of spare buffers (cpu/spare.h): the next call finds
    // their pages already mapped.
    dq_acc_ = SpareFloats(static_cast<std::size_t>(slices_ * acc_floats));
    qs_ = SpareFloats(static_cast<std::size_t>(q_rows_ * p.h * d_pad_));
    dos_ = SpareFloats(static_cast<std::size_t>(q_rows_ * p.h * dv_pad_));
    if (!dq_acc_ || !qs_ || !dos_) throw std::bad_alloc();
    stat_d_.resize(static_cast<std::size_t>(q_rows_ * p.h));
    stat_l_.resize(stat_d_.size());
    sink_part_.assign(static_cast<std::size_t>(p.b * p.h), 0.0);
  }

  std::int64_t items() const { return p_.b * p_.h_kv * slices_; }

  // D = rowsum(dO ∘ O) and the lse to subtract (+inf for a row that sees
  // nothing, so its P is 0) of every row of (b, h), its rows of Q·scale and
  // dO padded with zeros to d_pad and dv_pad; its part of dsinks.
  void row_stats(std::int64_t bh) {
    const std::int64_t b = bh / p_.h, h = bh % p_.h;
    const double sink = p_.sinks.data ? static_cast<const float*>(p_.sinks.data)[h * p_.sinks.stride_h] : 0.0;
    double dsink = 0;
    for (std::int64_t i = 0; i < p_.nq(b); ++i) {
      const std::int64_t row = p_.q_row(b, i);
      const std::int64_t at = row_of(b, h, i);
      float* qs = qs_.get() + at * d_pad_;
      float* dos = dos_.get() + at * dv_pad_;
      // O, dO and Q as float32 (converted from 16 bits where stored so): dO
      // straight into its packed row, Q times scale into its, O read in
      // place (float32) or converted into this thread's row.
      const float* o = static_cast<const float*>(p_.o.addr(b, h, row));
      if (p_.o.dtype != DType::f32) {
        thread_local std::vector<float> o_row;
        o_row.resize(static_cast<std::size_t>(p_.dv));
        load_row(p_.o, b, h, row, p_.dv, o_row.data());
        o = o_row.data();
      }
      load_row(p_.grad_o, b, h, row, p_.dv, dos);
      const float scale = static_cast<float>(p_.scale);
      load_scaled_row(p_.q, b, h, row, p_.d, scale, qs);
      const double dot = ks_.dot_f64(o, dos, p_.dv);
      const float lse = *p_.lse.at<const float>(b, h, row);
      for (std::int64_t c = p_.d; c < d_pad_; ++c) qs[c] = 0.0f;
      for (std::int64_t c = p_.dv; c < dv_pad_; ++c) dos[c] = 0.0f;
      stat_d_[at] = static_cast<float>(dot);
      stat_l_[at] = lse == kNegInf ? std::numeric_limits<float>::infinity() : lse;
      if (p_.grad_sinks.data && lse != kNegInf) dsink -= std::exp(sink - static_cast<double>(lse)) * dot;
    }
    sink_part_[static_cast<std::size_t>(bh)] = dsink;
  }

  void item(std::int64_t idx) {
    const std::int64_t slice = idx % slices_, bh = idx / slices_;
    const std::int64_t b = bh / p_.h_kv, hk = bh % p_.h_kv;
    const std::int64_t rows = p_.group * p_.nq(b), n_kv = p_.nkv(b);
    float* dq = accumulator(slice, b, hk);
    std::memset(dq, 0, static_cast<std::size_t>(rows * d_pad_) * sizeof(float));

    // Each query block's key range, once per item.
    const std::int64_t blocks = ceil_div(rows, kBlockRows);
    thread_local std::vector<BlockRange> ranges;
    ranges.resize(static_cast<std::size_t>(blocks));
    for (std::int64_t blk = 0; blk < blocks; ++blk) ranges[blk] = block_range(block(b, hk, blk, rows));

    thread_local std::vector<float> mem;
    mem.resize(static_cast<std::size_t>(ws_.total()));
    float* kt = mem.data();
    float* vt = kt + ws_.kt;
    float* kp = vt + ws_.vt;
    float* dk = kp + ws_.kp;
    float* dv = dk + ws_.dk;
    Tile tile{};
    tile.s = dv + ws_.dv;
    tile.dp = tile.s + ws_.s;
    tile.tc = tile.dp + ws_.dp;
    tile.z = tile.tc + ws_.tc;
    tile.ones = tile.z + ws_.z;
    tile.row_begin = reinterpret_cast<int*>(tile.ones + ws_.rows);
    tile.row_end = tile.row_begin + ws_.rows;
    for (std::int64_t j = 0; j < ws_.rows; ++j) tile.ones[j] = 1.0f;

    thread_local const float* k_rows[kMaxTileKeys];
    thread_local const float* v_rows[kMaxTileKeys];
    const Rows kv{b, hk, 0, 0};
    const int d = static_cast<int>(p_.d), dvn = static_cast<int>(p_.dv);
    for (std::int64_t t0 = slice * bc_; t0 < n_kv; t0 += slices_ * bc_) {
      const int n = static_cast<int>(std::min<std::int64_t>(bc_, n_kv - t0));
      const int bc_pad = static_cast<int>(round_up(n, ks_.nr));
      bool seen = false;
      for (const BlockRange& r : ranges) seen = seen || (r.lo < t0 + n && r.hi > t0);
      std::memset(dk, 0, static_cast<std::size_t>(n * d_pad_) * sizeof(float));
      std::memset(dv, 0, static_cast<std::size_t>(n * dv_pad_) * sizeof(float));
      if (seen) {
        // Kᵀ and Vᵀ of the tile with zero rows up to the padded head sizes
        // (the query block's Q and dO are zero-padded the same way).
        kv_rows(p_.k, kv, t0, n, k_rows);
        kv_rows(p_.v, kv, t0, n, v_rows);
        ks_.pack_kt(k_rows, n, d, kt, bc_pad);
        std::memset(kt + static_cast<std::int64_t>(d) * bc_pad, 0,
                    static_cast<std::size_t>((d_pad_ - d) * bc_pad) * sizeof(float));
        ks_.pack_kt(v_rows, n, dvn, vt, bc_pad);
        std::memset(vt + static_cast<std::int64_t>(dvn) * bc_pad, 0,
                    static_cast<std::size_t>((dv_pad_ - dvn) * bc_pad) * sizeof(float));
        // K rows as dQ's right-hand side: d_pad readable floats each.
        const float* const* k_in = k_rows;
        thread_local const float* k_packed[kMaxTileKeys];
        if (d != d_pad_) {
          for (int j = 0; j < n; ++j) {
            float* row = kp + static_cast<std::int64_t>(j) * d_pad_;
            std::memcpy(row, k_rows[j], static_cast<std::size_t>(d) * sizeof(float));
            std::memset(row + d, 0, static_cast<std::size_t>(d_pad_ - d) * sizeof(float));
            k_packed[j] = row;
          }
          k_in = k_packed;
        }
        tile.kt = kt;
        tile.vt = vt;
        tile.k = k_in;
        tile.dk = dk;
        tile.dv = dv;
        for (std::int64_t blk = 0; blk < blocks; ++blk) {
          const BlockRange& r = ranges[blk];
          if (!(r.lo < t0 + n && r.hi > t0)) continue;
          const Rows bl = block(b, hk, blk, rows);
          block_step(bl, r, t0, n, bc_pad, tile, dq + bl.r0 * d_pad_);
        }
      }
      for (int j = 0; j < n; ++j) {
        const float* dk_row = dk + static_cast<std::int64_t>(j) * d_pad_;
        const float* dv_row = dv + static_cast<std::int64_t>(j) * dv_pad_;
        note_finite(p_.grad_k, dk_row, d);
        note_finite(p_.grad_v, dv_row, dvn);
        store_row(p_.grad_k, const_cast<void*>(p_.kv_addr(p_.grad_k, b, hk, t0 + j)), d, dk_row);
        store_row(p_.grad_v, const_cast<void*>(p_.kv_addr(p_.grad_v, b, hk, t0 + j)), dvn, dv_row);
      }
    }
  }

  // dQ of (b, hk) = scale x the sum of the slices' accumulators, in slice order.
  void finish(std::int64_t bh) {
    const std::int64_t b = bh / p_.h_kv, hk = bh % p_.h_kv;
    const std::int64_t rows = p_.group * p_.nq(b);
    const float scale = static_cast<float>(p_.scale);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r / p_.group, h = hk * p_.group + r % p_.group;
      thread_local std::vector<float> sum;
      sum.resize(static_cast<std::size_t>(p_.d));
      float* out = sum.data();
      const float* first = accumulator(0, b, hk) + r * d_pad_;
      for (std::int64_t c = 0; c < p_.d; ++c) out[c] = first[c];
      for (std::int64_t s = 1; s < slices_; ++s) {
        const float* part = accumulator(s, b, hk) + r * d_pad_;
        for (std::int64_t c = 0; c < p_.d; ++c) out[c] += part[c];
      }
      for (std::int64_t c = 0; c < p_.d; ++c) out[c] *= scale;
      note_finite(p_.grad_q, out, p_.d);
      store_row(p_.grad_q, p_.grad_q.addr(b, h, p_.q_row(b, i)), p_.d, out);
    }
  }

  // dsinks[h]: the (b, h) parts summed over b in order.
  void finish_sinks() const {
    if (!p_.grad_sinks.data) return;
    for (std::int64_t h = 0; h < p_.h; ++h) {
      double sum = 0;
      for (std::int64_t b = 0; b < p_.b; ++b) sum += sink_part_[static_cast<std::size_t>(b * p_.h + h)];
      static_cast<float*>(p_.grad_sinks.data)[h * p_.grad_sinks.stride_h] = static_cast<float>(sum);
    }
  }

  // Whether every gradient written is finite: float32 rows as they were
  // written (note_finite), 16-bit ones read back, rounded as stored.
  bool finite() const {
    if (nonfinite_.load(std::memory_order_relaxed)) return false;
    auto rows_ok = [&](const Operand& t, std::int64_t heads, std::int64_t width, bool keys) {
      if (t.dtype == DType::f32) return true;  // checked as written
      for (std::int64_t b = 0; b < p_.b; ++b)
        for (std::int64_t h = 0; h < heads; ++h) {
          const std::int64_t n = keys ? p_.nkv(b) : p_.nq(b);
          for (std::int64_t j = 0; j < n; ++j) {
            const void* row = keys ? p_.kv_addr(t, b, h, j) : t.addr(b, h, p_.q_row(b, j));
            for (std::int64_t c = 0; c < width; ++c)  // a value past the 16-bit type's range is ±inf
              if (!std::isfinite(load_element(row, t.dtype, c))) return false;
          }
        }
      return true;
    };
    if (!rows_ok(p_.grad_q, p_.h, p_.d, false)) return false;
    if (!rows_ok(p_.grad_k, p_.h_kv, p_.d, true)) return false;
    if (!rows_ok(p_.grad_v, p_.h_kv, p_.dv, true)) return false;
    if (p_.grad_sinks.data)
      for (std::int64_t h = 0; h < p_.h; ++h)
        if (!std::isfinite(static_cast<const float*>(p_.grad_sinks.data)[h * p_.grad_sinks.stride_h])) return false;
    return true;
  }

 private:
  // A float32 gradient row about to be written: whether it is finite, noted
  // while the row is in cache rather than read back afterwards.
  void note_finite(const Operand& t, const float* row, std::int64_t width) {
    if (t.dtype == DType::f32 && !ks_.all_finite(row, width)) nonfinite_.store(true, std::memory_order_relaxed);
  }

  // The working arrays of one key tile and one query block.
  struct Tile {
    const float* kt;        // Kᵀ [d_pad x bc_pad]
    const float* vt;        // Vᵀ [dv_pad x bc_pad]
    const float* const* k;  // K rows, d_pad readable floats each
    float* dk;              // [n x d_pad]
    float* dv;              // [n x dv_pad]
    const float *qs, *dos;  // the block's Q·scale [nr x d_pad] and dO [nr x dv_pad]
    float *s, *dp, *tc;     // [nr x bc_pad]: S then P; dP then dS; the softcapped scores
    float* z;               // [nr x bc_pad]: the dropout factors
    float* ones;            // per row: 1
    const float *lse, *dd;  // per row: lse, D
    int *row_begin, *row_end;
  };

  Rows block(std::int64_t b, std::int64_t hk, std::int64_t blk, std::int64_t rows) const {
    return Rows{b, hk, blk * kBlockRows, static_cast<int>(std::min<std::int64_t>(kBlockRows, rows - blk * kBlockRows))};
  }

  // Rows of the call in the order of the work: (b, hk) after (b, hk) and, in
  // each, the row space r = i*group + g. row_base is (b, hk)'s first.
  std::int64_t row_base(std::int64_t b, std::int64_t hk) const {
    const std::int64_t q0 = p_.packed() ? p_.cu_q[b] : b * p_.n_q;
    return q0 * p_.h + hk * p_.group * p_.nq(b);
  }
  std::int64_t row_of(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return row_base(b, h / p_.group) + i * p_.group + h % p_.group;
  }

  // The dQ accumulator of (b, hk) in slice s: its rows [group * Nq_b x d_pad].
  float* accumulator(std::int64_t s, std::int64_t b, std::int64_t hk) const {
    return dq_acc_.get() + s * slice_floats_ + row_base(b, hk) * d_pad_;
  }

  // One query block against one key tile: P, dP, dS, and their products into
  // dV, dK (the tile's) and dQ (the block's rows).
  void block_step(const Rows& bl, const BlockRange& range, std::int64_t t0, int n, int bc_pad, Tile& t, float* dq) {
    const int nr = bl.nr;
    const int d_pad = static_cast<int>(d_pad_), dv_pad = static_cast<int>(dv_pad_);
    // The block's dQ rows were last touched a whole sweep ago (from L3 or
    // memory): requested now, they arrive while S, dP and dS are computed.
    for (std::int64_t off = 0; off < static_cast<std::int64_t>(nr) * d_pad; off += 16) __builtin_prefetch(dq + off, 1, 3);
    // The block's rows, packed once for the whole call (row_stats).
    const std::int64_t r0 = row_base(bl.b, bl.hk) + bl.r0;
    t.qs = qs_.get() + r0 * d_pad;
    t.dos = dos_.get() + r0 * dv_pad;
    t.lse = stat_l_.data() + r0;
    t.dd = stat_d_.data() + r0;
    thread_local const float* q_rows[kBlockRows];
    thread_local const float* do_rows[kBlockRows];
    for (int rr = 0; rr < nr; ++rr) {
      q_rows[rr] = t.qs + static_cast<std::int64_t>(rr) * d_pad;
      do_rows[rr] = t.dos + static_cast<std::int64_t>(rr) * dv_pad;
    }

    // S = Q·scale·Kᵀ, softcapped and masked; P = exp(S - lse); dP = dO·Vᵀ.
    ks_.scores(t.qs, nr, d_pad, t.kt, bc_pad, t.s);
    const bool capped = p_.softcap > 0;
    if (capped) {
      ks_.softcap(t.s, nr, bc_pad, static_cast<float>(p_.softcap));
      std::memcpy(t.tc, t.s, static_cast<std::size_t>(nr) * bc_pad * sizeof(float));
    }
    mask_tile(bl, t0, n, bc_pad, t.s, t.row_begin, t.row_end, range);
    ks_.probs(t.s, nr, bc_pad, t.lse, t.ones);
    ks_.scores(t.dos, nr, dv_pad, t.vt, bc_pad, t.dp);

    // dS = P ∘ (Z∘dP - D), 0 where P is (masked keys stay out whatever their
    // values); P <- P∘Z. The dropout factors are regenerated key by key.
    float* z = nullptr;
    if (p_.dropout) {
      z = t.z;
      const float keep_scale = static_cast<float>(p_.dropout_scale);
      for (int rr = 0; rr < nr; ++rr) {
        float* zr = z + static_cast<std::int64_t>(rr) * bc_pad;
        dropout_row(ks_, dropout_stream(p_, bl.b, head(bl, rr)), query(bl, rr), t0, n, keep_scale, zr, false);
        for (int j = n; j < bc_pad; ++j) zr[j] = 0.0f;
      }
    }
    ks_.grad_scores(t.s, t.dp, nr, bc_pad, t.dd, z, capped ? t.tc : nullptr,
                    capped ? static_cast<float>(1.0 / p_.softcap) : 0.0f);

    // dV += (P∘Z)ᵀ·dO, dK += dSᵀ·(Q·scale), dQ += dS·K (scaled at the end).
    ks_.pvt(t.s, n, nr, bc_pad, do_rows, dv_pad, t.dv);
    ks_.pvt(t.dp, n, nr, bc_pad, q_rows, d_pad, t.dk);
    ks_.pv(t.dp, nr, n, bc_pad, t.k, d_pad, dq, t.ones, nullptr, nullptr, 0);
  }

  std::int64_t d_pad_, dv_pad_, bc_;
  Workspace ws_;
  std::int64_t q_rows_ = 0;  // query rows of the call: B * Nq, or total_q when packed
  std::int64_t slices_ = 1, slice_floats_ = 0;
  std::atomic<bool> nonfinite_{false};  // a float32 gradient row written was not finite
  SpareFloats dq_acc_, qs_, dos_;  // dQ accumulators; Q·scale and dO in row order
  std::vector<float> stat_d_, stat_l_;
  std::vector<double> sink_part_;
};

}  // namespace

bool backward(const Params& p) {
  const KernelSet& ks = kernels_for(p.isa);
  const std::int64_t d_pad = round_up(p.d, ks.w), dv_pad = round_up(p.dv, ks.w);
  // d and dv are below 2^31 for any view that fits in memory; the product is checked in 128 bits.
  const unsigned __int128 ws =
      static_cast<unsigned __int128>(workspace_of(tile_keys(d_pad, dv_pad), kBlockRows, d_pad, dv_pad).total()) * 4;
  if (p.d > (1 << 24) || p.dv > (1 << 24) || ws > kMaxWorkspaceBytes)
    throw memory_error(p, "about " + std::to_string(static_cast<unsigned long long>(ws)) + " bytes");
  try {
    Backward bw(p, ks);
    parallel_for(p.b * p.h, p.threads, [&](std::int64_t bh, int) { bw.row_stats(bh); });
    parallel_for(bw.items(), p.threads, [&](std::int64_t i, int) {
      FlushDenormals ftz;
      bw.item(i);
    });
    parallel_for(p.b * p.h_kv, p.threads, [&](std::int64_t bh, int) { bw.finish(bh); });
    bw.finish_sinks();
    return bw.finite();
  } catch (const std::bad_alloc&) {
    throw memory_error(p, "out of memory");
  }
}

}  // namespace sdpa::cpu
