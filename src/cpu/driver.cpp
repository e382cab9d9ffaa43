// The fast path: FlashAttention-2-style tiling with an online softmax.
// ref: Dao, "FlashAttention-2", https://arxiv.org/abs/2307.08691
//
// Work decomposition. For each batch b and K/V head hk, the H/Hkv query heads
// that read hk are laid out as one row space r = i*group + g (query i, head
// hk*group + g). A block is BR consecutive rows: in prefill it covers BR/group
// queries of every head of the group, in grouped decode (Nq*group <= BR) it is
// every query head of the group at once, so each K/V tile is read once for all
// the heads that share it. One work item = (b, hk, block, key chunk).
//
// Per block, per key tile of BC keys (the kernels are in kernels/):
//   Kt = pack(K tile)ᵀ               d*BC floats, transposed so S's columns are vectors
//   S  = Qs·Kt                       Qs: the block's Q rows times scale, packed once
//   mask S (causal, padding) to -inf
//   P  = exp(S - m_new), l, alpha    online softmax; m, l per row
//   acc = acc*alpha + P·V            V read in place (packed only when dv % W != 0)
// and O = acc / l, lse = m + log l at the end. Memory per worker thread:
// (BR*d + d*BC + BR*BC + BR*dv + BC*dv) floats, e.g. AVX2/AVX-512 (BR=192,
// BC=64) at d = dv = 128: 96 + 32 + 48 + 96 + 32 KiB = 304 KiB, inside a 1 MiB
// L2; the N x N score matrix is never formed.
//
// Why BR = 192, BC = 64: the S microkernel is 6 rows x NR columns (16 AVX2,
// 64 AVX-512); a 6 x d strip of Qs (3 KiB at d=128) stays in L1 while it
// sweeps Kt (32 KiB), and packing Kt costs d*BC moves per tile against
// BR*BC*d FMAs, 1/192 of the work. Measured at N=4096, d=128, 2 threads:
// BR = 96 -> 192 took AVX2 from 69.5% to 77.4% of the FMA peak and AVX-512
// from 63.5% to 71.7%. At d <= 64 the plan doubles BC (make_plan): the same
// memory as d = 128's, half the products per key.
//
// Masks. Causal frontier, sliding window and key padding each cut every row's
// keys to one interval, so a block visits only the union of its rows'
// intervals: tiles wholly outside are never computed, tiles every row sees
// wholly run unmasked, and only tiles that straddle an edge are masked, where
// each strip of MR rows computes S only in the column vectors its rows see
// (scores_ranged) and PV reads only the keys they may see. An explicit mask, ALiBi and
// the softcap are applied to each visited score tile (never stored N x N).
//
// Split-KV (flash-decoding): when the (b, hk, block) items are too few to keep
// threads busy (decode), keys are cut into chunks; each chunk yields (m, l,
// acc) per row and the chunks are merged in order by log-sum-exp (cpu/merge.h,
// the merge ring attention shares). The chunking
// depends on the shape only, never on the thread count, so results are
// bitwise identical for any number of threads.
#include "cpu/driver.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/dropout_tile.h"
#include "cpu/kernels/denormals.h"
#include "cpu/merge.h"
#include "cpu/spare.h"
#include "cpu/threads.h"
#include "cpu/tiles.h"
#include "half.h"
#include "sdpa/error.h"

namespace sdpa::cpu {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// Below this many (b, hk, block) items, keys are split into chunks so that
// about kMinItems items exist. A constant, not the thread count: determinism.
constexpr std::int64_t kMinItems = 64;
// Prefill (several row blocks per (b, hk)) is split only below this many
// items: its blocks already spread the work, and the partials and the merge
// cost more than they gain above it (measured at N = 512 and 1024, B = 1,
// H = 8, 2 threads: 10-25% faster unsplit).
constexpr std::int64_t kMinPrefillItems = 16;
constexpr std::int64_t kMinChunkKeys = 256;
// Blocks of at most direct_rows(ks) rows (decode: Nq * group small) compute
// scores straight from K rows: packing a transposed tile would cost more than
// using it. Where prefill runs on x3 parts (AMX), whose tiles cost more to
// pack, blocks of up to 16 rows do: at 16 rows (Emerald Rapids, d = 128, 2
// threads) MHA against 1024-16384 keys ran 1.16-1.59x and grouped (4 queries
// x 4 heads, 4096 and 16384 keys) 1.18-1.69x faster so; at 32 rows grouped
// ran 0.85x. The FMA sets keep 8: at 16 rows the AVX2 kernels measured
// 0.74-0.89x and the AVX-512 ones 0.91-1.10x.
constexpr int kDirectRows = 8;
constexpr int kDirectRowsX3 = 16;
int direct_rows(const KernelSet& ks) { return ks.scores_x3 ? kDirectRowsX3 : kDirectRows; }
// How far ahead decode blocks of several rows (GQA) request float32 K and V
// rows, through the tile's row pointers as the kernels reach them (so any
// layout). H = 32, Hkv = 8, d = 128, Nkv = 1024-16384, Zen 5: 8 KiB measured
// 1.2-1.5x faster than requesting each next tile at once before its scores
// and P·V, at 1 and 2 threads, from DRAM and from cache; 4 KiB less so, 12
// and 16 KiB the same. Only for sets of 16-float vectors: the AVX2 kernels,
// which sweep a V row in 64-byte pieces (one request per load), measured 10%
// slower so than with the tile requests (Runner::rows_ahead_bytes).
constexpr int kDecodeRowsAheadBytes = 8 << 10;
// How far ahead (keys) the decode kernels on stored K/V request rows: half a
// tile (8 KiB of bfloat16 rows at d = 128); a whole tile measured slower.
constexpr int kStreamAhead = 32;
// Keys per tile in decode blocks (a multiple of every set's NR).
constexpr int kDecodeTileKeys = 256;
// Prefill at d <= kWideTileMaxD takes tiles of twice the set's BC (see make_plan).
constexpr std::int64_t kWideTileMaxD = 64;
// Bytes of K (or V) per run of a Plan::all_heads tile, for all heads (see
// attend_heads), at least 16 keys: 16 keys at Hkv = 8, d = 128 in float16, and
// at any larger key. Runs of 64 or 128 keys (a 256 KiB budget at Hkv = 8)
// measured 1.3-2x slower in grouped decode, 1 and 2 threads, float16 and
// float32; at Hkv = 32 (16 keys either way) nothing changes.
constexpr std::int64_t kHeadRunBytes = std::int64_t{32} << 10;
// How far ahead (bytes of K or V for all heads) the all-heads kernels request
// rows, into L2: 16 KiB, alternated in one process with 8, 32 and 64 KiB
// (Intel Xeon, d = 128, Nkv = 1024 and 16384, 1 and 2 threads): float32 GQA
// 2-5% faster than 32 KiB, float16 GQA and MHA the same as 32 KiB and 2-5%
// faster than 8 KiB, 64 KiB slowest.
constexpr std::int64_t kHeadAheadBytes = std::int64_t{16} << 10;
// The most working memory one thread may use (qs, Kt, S, acc, V tile): 256 MiB,
// about 900 times what d = dv = 128 needs.
constexpr std::size_t kMaxWorkspaceBytes = std::size_t{256} << 20;
// The most per-head state an all-heads decode item may hold (Plan::all_heads).
constexpr std::int64_t kMaxHeadStateBytes = std::int64_t{16} << 20;
// The packed-key cache of a call (KtCache) is used while it needs at most
// this much memory; past it every block packs its own tiles.
constexpr std::int64_t kMaxKtCacheBytes = std::int64_t{64} << 20;

// A block's Q as the bf16 kernels take it: pack_q_bf16's (bfloat16 Q and K
// on bf16 products) or pack_q_x3's (float32 on three bf16 parts); neither
// for the float32 kernels.
struct PackedQ {
  const std::uint16_t* bf16 = nullptr;
  const std::uint16_t* x3 = nullptr;
};

// Whether blocks of nr rows compute Q·Kᵀ in float32 on three bf16 parts per
// value (kernel_set.h's x3 members, AMX): every float32 product of a block of
// more rows than decode, unless Q and K are bfloat16 on bf16 products already.
bool x3_scores(const KernelSet& ks, const Params& p, std::int64_t nr) {
  if (!ks.scores_x3 || nr <= direct_rows(ks)) return false;
  return !(ks.bf16_fast && ks.scores_bf16 && p.q.dtype == DType::bf16 && p.k.dtype == DType::bf16);
}
// And P·V, unless P is rounded to bf16 for bf16 V (pv_bf16).
bool x3_pv(const KernelSet& ks, const Params& p, std::int64_t nr) {
  if (!ks.pv_x3 || nr <= direct_rows(ks)) return false;
  return !(ks.bf16_fast && ks.pv_bf16 && p.round_p && p.v.dtype == DType::bf16);
}

struct Plan {
  int br = 0, bc = 0;
  std::int64_t rows = 0;    // rows per (b, hk): group * Nq
  std::int64_t blocks = 0;  // row blocks per (b, hk)
  std::int64_t splits = 1;  // key chunks per block
  std::int64_t chunk = 0;   // keys per chunk (a multiple of bc)
  std::int64_t dv_pad = 0;  // dv rounded up to the vector width
  bool pack_v = false;
  // Paged decode (blocks of a few rows): one work item covers every K/V head
  // of a batch entry, tile by tile, so the rows of all heads at the same keys,
  // Hkv·d floats apart within a page, are read together rather than 512-byte
  // pieces of every 4 KiB by one head at a time.
  bool all_heads = false;
  std::int64_t items() const { return blocks * splits; }
  // Work items per batch entry and block, for each key chunk.
  std::int64_t head_group = 1;  // all_heads: K/V heads per work item (the last may hold fewer)
  std::int64_t units(std::int64_t h_kv) const { return all_heads ? ceil_div(h_kv, head_group) : h_kv; }
  // Split-KV partial slots per block: its real rows, so a decode block of one
  // row does not hold (and zero) BR rows' worth.
  std::int64_t slot_rows() const { return std::min<std::int64_t>(br, rows); }
};

// The plan of `nb` batch entries that share n_q queries and n_kv keys: all of
// a uniform batch, or one sequence of a packed batch (so a packed batch runs
// each sequence exactly as a call of its own would: bit for bit the same).
Plan make_plan(const Params& p, const KernelSet& ks, std::int64_t nb, std::int64_t n_q, std::int64_t n_kv) {
  Plan pl;
  pl.br = ks.br;
  pl.bc = ks.bc;
  pl.rows = p.group * n_q;
  // Decode blocks (a few rows) stream K and V with little arithmetic per
  // key: longer tiles spread each tile's fixed costs (softmax step, masks,
  // row pointers) over more bytes.
  if (pl.rows <= direct_rows(ks)) pl.bc = std::max(ks.bc, kDecodeTileKeys / ks.nr * ks.nr);
  // Prefill at small d in float32 on the vector sets: the products of a
  // tile are half of d = 128's, and the per-tile costs (the softmax's row
  // reductions, alpha, the accumulator's reload) are not, so tiles of 2·BC
  // keys spread them over twice the work. Measured at d = 64, N = 512-4096,
  // 2 threads: 4-10% faster non-causal, causal about the same (AVX-512).
  // Masks do not change the tile, so a row that sees every key gets the
  // non-causal result bit for bit. The bf16 products keep BC (their scratch
  // is sized by it).
  const bool f32 = p.q.dtype == DType::f32 && p.k.dtype == DType::f32 && p.v.dtype == DType::f32;
  // On the x3 products (AMX) at d > kWideTileMaxD the tiles are 4·BC keys,
  // in any storage: alternated in one process (Emerald Rapids, H = 8, 2
  // threads) against BC, float32 N = 256-8192 at d = 128 ran 1.10-1.12x
  // faster (2·BC: 1.04-1.09x), d = 80, 96 and 256 1.08-1.09x, causal N =
  // 4096 1.11x, float16 N = 1024 and 4096 1.07-1.08x. At d <= 64, 4·BC
  // measured no faster than 2·BC.
  if (pl.rows > direct_rows(ks) && ks.w > 1) {
    if (p.d <= kWideTileMaxD) {
      if (f32) pl.bc = 2 * ks.bc;
    } else if (x3_scores(ks, p, pl.rows) && x3_pv(ks, p, pl.rows)) {
      pl.bc = 4 * ks.bc;
    }
  }
  pl.blocks = ceil_div(pl.rows, pl.br);
  // Prefill rows in equal blocks of at most BR: whole AMX tiles of rows on
  // the x3 products, whole MR-row strips and 16 rows otherwise (N = 512 at BR
  // = 384: two blocks of 256, not 384 and 128). The rows of a block do not
  // change one another's results, only the work items.
  if (pl.rows > direct_rows(ks) && pl.blocks > 1) {
    const int align = x3_scores(ks, p, pl.rows) ? 16 : std::lcm(ks.mr, 16);
    pl.br = static_cast<int>(std::min<std::int64_t>(ks.br, round_up(ceil_div(pl.rows, pl.blocks), align)));
    pl.blocks = ceil_div(pl.rows, pl.br);
  }
  pl.dv_pad = round_up(p.dv, ks.w);
  pl.pack_v = p.dv % ks.w != 0;  // otherwise V rows are read in place
  pl.chunk = round_up(std::max<std::int64_t>(n_kv, 1), pl.bc);
  // The per-head state of an all-heads item (Q rows, acc, m, l, alpha) must fit.
  const std::int64_t head_state = p.h_kv * (pl.rows * (p.d + pl.dv_pad) + 3 * 16);
  pl.all_heads = p.paged() && pl.rows <= direct_rows(ks) && p.h_kv > 1 && head_state * 4 <= kMaxHeadStateBytes;
  // The key chunks do not depend on all_heads, so a paged cache gives the
  // results of a contiguous one bit for bit.
  const std::int64_t base = nb * p.h_kv * pl.blocks;
  const std::int64_t min_items = pl.blocks == 1 ? kMinItems : kMinPrefillItems;
  if (!p.probs.data && !p.scores.data && base < min_items && n_kv >= 2 * kMinChunkKeys) {
    const std::int64_t want = std::min(ceil_div(kMinItems, base), n_kv / kMinChunkKeys);
    pl.chunk = round_up(ceil_div(n_kv, want), pl.bc);
    pl.splits = ceil_div(n_kv, pl.chunk);
  }
  if (pl.all_heads) {
    // All K/V heads in one item unless that leaves a thread without work
    // (B = 1, many threads): then the heads are shared out in groups. Fewer
    // heads per item read shorter stretches of each key (measured at H = Hkv
    // = 32, d = 128, 2 threads: groups of 4 KiB of a key 1.1-1.3x, of 1 KiB
    // 1.5-1.8x the time of all heads, float16 and float32). Each head's
    // results do not depend on which heads share its item.
    const std::int64_t groups = ceil_div(p.threads, nb * pl.blocks * pl.splits);
    pl.head_group = ceil_div(p.h_kv, std::clamp<std::int64_t>(groups, 1, p.h_kv));
  }
  return pl;
}

// Batch entries [b0, b0 + nb) under one plan; their work items are
// [item0, item0 + nb*Hkv*items) of the call, their merges [merge0, ...).
// Prefill blocks of one (b, hk) all read the same key tiles, each packed
// (transposed, K converted to float32) before its scores: without sharing,
// every tile is packed once per block, ~N/BR times, which measured 8% of a
// tile's time at d = 128. The cache holds each tile's packed form once per
// call, for every head or, where they would need more than kMaxKtCacheBytes,
// for as many heads at a time as fit: the first block to reach a tile packs
// it into its place (state 0 -> 1 -> 2); a block that finds it being packed
// packs its own copy, so no thread waits. Packing is a copy, so results do
// not depend on who packs, nor on where.
class KtCache {
 public:
  KtCache() = default;
  // Room for `slots` of the call's `heads` heads (1 <= slots <= heads), each
  // `tiles` tiles of tile_floats. With a slot per head, head h keeps slot h.
  // With fewer, head h takes slot h % slots while no block of the head that
  // held it still runs (claim); prefill takes the heads one after another,
  // so the threads share a slot per head as they go. The memory comes from
  // the pool of spare buffers (cpu/spare.h): the next call finds its pages
  // already mapped.
  KtCache(std::int64_t heads, std::int64_t slots, std::int64_t tiles, std::int64_t tile_floats)
      : mem_(static_cast<std::size_t>(slots * tiles * tile_floats)),
        slots_(slots),
        tiles_(tiles),
        tile_floats_(tile_floats) {
    if (!mem_) return;  // then every block packs its own tiles
    const std::int64_t n = slots * tiles;
    state_.reset(new std::atomic<std::uint8_t>[static_cast<std::size_t>(n)]);
    for (std::int64_t i = 0; i < n; ++i) state_[i].store(0, std::memory_order_relaxed);
    if (slots < heads) {
      owner_.reset(new std::atomic<std::uint64_t>[static_cast<std::size_t>(slots)]);
      for (std::int64_t i = 0; i < slots; ++i) owner_[i].store(0, std::memory_order_relaxed);
    }
  }
  KtCache(KtCache&&) = default;
  KtCache& operator=(KtCache&&) = default;
  bool enabled() const { return static_cast<bool>(mem_); }
  // How many heads' tiles it holds at once (0 without a cache).
  std::int64_t slots() const { return mem_ ? slots_ : 0; }

  // The slot of `head` for one block, until release(); -1 when there is no
  // cache, or the slot still serves another head's blocks (then the block
  // packs its own tiles, so no thread waits).
  std::int64_t claim(std::int64_t head) {
    if (!mem_) return -1;
    if (!owner_) return head;
    const std::int64_t slot = head % slots_;
    std::atomic<std::uint64_t>& w = owner_[slot];
    const std::uint64_t mine = static_cast<std::uint64_t>(head + 1) << 32;
    std::uint64_t cur = w.load(std::memory_order_acquire);
    for (;;) {
      const bool setting_up = (cur & kSettingUp) != 0;
      if ((cur & kOwner) == mine && !setting_up) {
        if (w.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) return slot;
        continue;
      }
      if ((cur & kUsers) != 0 || setting_up) return -1;
      // Unused: this head takes it, its tiles empty again.
      if (w.compare_exchange_weak(cur, mine | kSettingUp | 1, std::memory_order_acq_rel)) {
        for (std::int64_t t = 0; t < tiles_; ++t) state_[slot * tiles_ + t].store(kEmpty, std::memory_order_relaxed);
        w.fetch_and(~kSettingUp, std::memory_order_release);
        return slot;
      }
    }
  }
  void release(std::int64_t slot) {
    if (slot >= 0 && owner_) owner_[slot].fetch_sub(1, std::memory_order_release);
  }

  // The packed tile t of a claimed slot if it is ready, or after packing it
  // with `pack(dst)` when no one else is; nullptr when another thread is
  // packing it now.
  template <class Pack>
  const float* tile(std::int64_t slot, std::int64_t t, Pack pack) {
    const std::int64_t i = slot * tiles_ + t;
    float* dst = mem_.get() + i * tile_floats_;
    std::uint8_t st = state_[i].load(std::memory_order_acquire);
    if (st == kReady) return dst;
    if (st == kEmpty && state_[i].compare_exchange_strong(st, kPacking, std::memory_order_acq_rel)) {
      pack(dst);
      state_[i].store(kReady, std::memory_order_release);
      return dst;
    }
    return nullptr;
  }

 private:
  static constexpr std::uint8_t kEmpty = 0, kPacking = 1, kReady = 2;
  // An owner word: the head it serves + 1 (0: none) in the high half, then a
  // bit while its tiles are being emptied, then the blocks using it.
  static constexpr std::uint64_t kOwner = ~std::uint64_t{0} << 32;
  static constexpr std::uint64_t kSettingUp = std::uint64_t{1} << 31;
  static constexpr std::uint64_t kUsers = kSettingUp - 1;

  SpareFloats mem_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> state_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> owner_;  // only with fewer slots than heads
  std::int64_t slots_ = 0, tiles_ = 0, tile_floats_ = 0;
};

// A block's claim on its head's slot of a cache, released when it ends.
class CacheClaim {
 public:
  CacheClaim(KtCache& cache, std::int64_t head) : cache_(cache), slot_(cache.claim(head)) {}
  ~CacheClaim() { cache_.release(slot_); }
  CacheClaim(const CacheClaim&) = delete;
  CacheClaim& operator=(const CacheClaim&) = delete;
  std::int64_t slot() const { return slot_; }

 private:
  KtCache& cache_;
  std::int64_t slot_;
};

struct Group {
  std::int64_t b0, nb;
  Plan pl;
  std::int64_t item0, merge0;
  std::vector<float> partials;  // split-KV partials (m, l, acc[dv]) per row, per chunk
  KtCache kt;                   // prefill: packed key tiles shared by the blocks
  KtCache v3;                   // prefill on x3 parts: packed value tiles likewise,
  std::int64_t v3_flag = 0;     // each followed at this float by 1 (its values finite) or 0
  std::int64_t lanes = 1;       // heads whose blocks are handed out in turn (Runner::item)
};

// The working memory one attend() needs (floats): qs[br*d] kt[d*bc] s[br*bc]
// acc[br*dv_pad] vp[bc*dv_pad] m,l,alpha,inv[br] + 2 int[br], each array
// rounded up to 16 floats (64 bytes). 0 when it does not fit in size_t.
std::size_t workspace_floats(std::int64_t br, std::int64_t bc, std::int64_t d, std::int64_t dv_pad) {
  const auto r16 = [](unsigned __int128 x) { return (x + 15) / 16 * 16; };
  using U = unsigned __int128;
  const U n = r16(U(br) * U(d)) + r16(U(d) * U(bc)) + r16(U(br) * U(bc)) + r16(U(br) * U(dv_pad)) +
              r16(U(bc) * U(dv_pad)) + 6 * r16(U(br));
  return n * 4 > U(std::numeric_limits<std::ptrdiff_t>::max()) ? 0 : static_cast<std::size_t>(n);
}

// The error for working memory that cannot be had: named after o, whose rows
// it accumulates (its size follows from d and dv, not from the key count).
Error workspace_error(const Params& p, const std::string& what) {
  return Error("o", "head sizes whose working memory fits (at most " + std::to_string(kMaxWorkspaceBytes) +
                        " bytes per thread, growing with d and dv)",
               "d=" + std::to_string(p.d) + ", dv=" + std::to_string(p.dv) + ": " + what);
}

// Per-thread scratch, grown on demand and reused across calls.
class Workspace {
 public:
  // nullptr when the memory cannot be allocated (the caller reports it).
  float* floats(std::size_t n) {
    if (n > cap_) {
      mem_.reset();
      cap_ = 0;
      mem_.reset(static_cast<float*>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64)));
      if (!mem_) return nullptr;
      cap_ = n;
    }
    return mem_.get();
  }

 private:
  struct Free {
    void operator()(float* f) const { std::free(f); }
  };
  std::unique_ptr<float, Free> mem_;
  std::size_t cap_ = 0;
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// Per-thread row pointers of the current K or V tile: n <= BC keys, so every
// kernel set's BC must fit.
constexpr int kMaxTileKeys = 256;
// Rows per block, for the per-thread row pointers of a block's Q.
constexpr int kMaxBlockRows = 384;
#define SDPA_KERNEL(isa, name, ns, w, mr, nv, br, bc) \
  static_assert((bc) <= kMaxTileKeys, #name ": BC exceeds kMaxTileKeys (tile_rows)"); \
  static_assert((br) <= kMaxBlockRows, #name ": BR exceeds kMaxBlockRows");
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
const float** tile_rows() {
  thread_local const float* rows[kMaxTileKeys];
  return rows;
}

// A ranged tile's columns, per row of the block (float32 prefill): ub and
// ue, the union of the keys its MR-row strip sees; sb and se, that union
// rounded out to whole vectors, the columns scores_ranged computes for the
// strip. Masking, the softmax step and P·V then touch only those.
struct Spans {
  int ub[kMaxBlockRows], ue[kMaxBlockRows], sb[kMaxBlockRows], se[kMaxBlockRows];
  bool set = false;
};

// A block of rows of one (b, hk) and the group whose plan it follows.
struct Block : Rows {
  Group* g;
  // Its head's slots of g->kt and g->v3 while attend() runs it (-1: none).
  std::int64_t kt_slot = -1, v3_slot = -1;
};

// Keys [t0, t0 + n) of K or V (t), head hk of batch entry b: rows the
// decode kernels request ahead of their use (Runner::stored_rows).
struct RowsAhead {
  const Operand* t = nullptr;
  std::int64_t b = 0, hk = 0, t0 = 0, n = 0;
};

class Runner : TileOps {
 public:
  Runner(const Params& p, const KernelSet& ks) : TileOps(p, ks) {
    std::int64_t items = 0, merges = 0;
    auto add = [&](std::int64_t b0, std::int64_t nb, std::int64_t n_q, std::int64_t n_kv) {
      Group g{b0, nb, make_plan(p, ks, nb, n_q, n_kv), items, merges, {}, {}, {}, 0};
      // Worth it when several prefill blocks read each tile (and not for
      // bf16 products, which pack their own bf16 tiles).
      const bool bf16_products = ks.bf16_fast && ks.scores_bf16 && p.q.dtype == DType::bf16 && p.k.dtype == DType::bf16;
      const std::int64_t tiles = ceil_div(n_kv, g.pl.bc), heads = nb * p.h_kv;
      // A tile of three bf16 parts (x3_scores, x3_pv) takes 6 bytes a value, d
      // rounded up to whole AMX rows.
      const std::int64_t tile_floats =
          x3_scores(ks, p, g.pl.rows) ? round_up(3 * round_up(p.d, ks.bf16_kpad) * g.pl.bc / 2, 16) : p.d * g.pl.bc;
      // Slots for as many heads as kMaxKtCacheBytes holds (KtCache).
      auto slots = [&](std::int64_t floats) {
        return std::min(heads, kMaxKtCacheBytes / std::max<std::int64_t>(tiles * floats * 4, 1));
      };
      if (g.pl.rows > direct_rows(ks) && g.pl.blocks >= 2 && !bf16_products && n_kv > 0 && slots(tile_floats) >= 1)
        g.kt = KtCache(heads, slots(tile_floats), tiles, tile_floats);
      // Value tiles in parts likewise (pack_v_x3's layout, 6 bytes a value).
      const std::int64_t v_floats = round_up(3 * round_up(g.pl.bc, ks.bf16_kpad) * g.pl.dv_pad / 2, 16) + 16;
      if (x3_pv(ks, p, g.pl.rows) && g.pl.blocks >= 2 && n_kv > 0 && !p.mask.data && slots(v_floats) >= 1) {
        g.v3 = KtCache(heads, slots(v_floats), tiles, v_floats);
        g.v3_flag = v_floats - 16;
      }
      // Prefill hands out the blocks of `lanes` heads in turn, one head per
      // thread (see item()), as many as the caches hold at once.
      if (g.pl.blocks >= 2 && !g.pl.all_heads) {
        g.lanes = std::min<std::int64_t>(p.threads, heads);
        if (g.kt.enabled()) g.lanes = std::min(g.lanes, g.kt.slots());
        if (g.v3.enabled()) g.lanes = std::min(g.lanes, g.v3.slots());
      }
      if (g.pl.splits > 1) {
        g.partials.resize(static_cast<std::size_t>(nb * p.h_kv * g.pl.items() * g.pl.slot_rows() * part_stride()));
        merges += nb * p.h_kv * g.pl.blocks;
      }
      items += nb * g.pl.units(p.h_kv) * g.pl.items();
      groups_.push_back(std::move(g));
    };
    if (p.packed()) {
      for (std::int64_t b = 0; b < p.b; ++b) add(b, 1, p.nq(b), p.nkv(b));
    } else {
      add(0, p.b, p.n_q, p.n_kv);
    }
    items_ = items;
    merges_ = merges;
  }

  std::int64_t items() const { return items_; }
  std::int64_t merges() const { return merges_; }

  void item(std::int64_t idx) {
    Group& g = group_of(idx, &Group::item0);
    idx -= g.item0;
    // Heaviest blocks first (with causal, later queries see more keys), so the
    // shared counter hands out the long items before the short ones.
    //
    // Prefill takes the heads `lanes` (the thread count) at a time and hands
    // out their blocks in turn: h0 b0, h1 b0, h0 b1, h1 b1, ... So each thread
    // starts on a head of its own, packs that head's tiles into the cache once
    // and mostly reads them back from its own L2. Taking one head's blocks
    // after another instead had both threads reach each tile of a head at
    // once, each pack its own copy (KtCache never waits) and read the other's
    // from the far cache: measured alternated in one process, H = 8, 2
    // threads, AMX: N = 256-1024 7-11% slower at d = 128 and 10% at N = 512,
    // d = 64; N = 2048 2-6%; N = 4096 and 8192 the same; the AVX-512 and AVX2
    // kernels 2-10% at N = 256-1024. The lanes are no more than the caches'
    // slots, so every head in flight keeps its tiles; taking every head of a
    // block index in turn would have each thread stream a different head's K
    // and V for each block index (at N = 8192, H = 8, d = 128: 64 MiB of K/V
    // per block index, beyond the caches). The order of the items does not
    // change any result.
    const std::int64_t per_head = g.pl.blocks * g.pl.splits;
    std::int64_t rest = idx / per_head, r = idx % per_head;
    if (g.lanes > 1) {
      const std::int64_t first = idx / (g.lanes * per_head) * g.lanes;
      const std::int64_t in_turn = std::min(g.lanes, g.nb * p_.h_kv - first), i = idx - first * per_head;
      rest = first + i % in_turn;
      r = i / in_turn;
    }
    const std::int64_t blk = g.pl.blocks - 1 - r / g.pl.splits, split = r % g.pl.splits;
    if (g.pl.all_heads)
      attend_heads(g, rest / g.pl.units(p_.h_kv), rest % g.pl.units(p_.h_kv), blk, split);
    else
      attend(block(g, rest, blk), split);
  }

  void merge(std::int64_t idx) {
    Group& g = group_of(idx, &Group::merge0);
    idx -= g.merge0;
    const Block bl = block(g, idx / g.pl.blocks, idx % g.pl.blocks);
    std::vector<double> acc(static_cast<std::size_t>(p_.dv));
    for (int rr = 0; rr < bl.nr; ++rr) {
      LseMerge merged;
      bool seen = false;
      for (double& a : acc) a = 0;
      for (std::int64_t s = 0; s < g.pl.splits; ++s) {
        const float* part = partial(bl, s, rr);
        const Partial ps = read_partial(part);
        seen = seen || ps.seen;
        merged.fold(ps.m, ps.l, part + kPartHead, acc.data(), p_.dv);
      }
      const double m = merged.m, l = merged.l;
      finish_row(bl, rr, m, l, seen, [&](std::int64_t c) { return acc[c]; });
    }
  }

 private:
  // The group whose range of items (or merges) holds idx.
  Group& group_of(std::int64_t idx, std::int64_t Group::*first) {
    std::size_t lo = 0, hi = groups_.size();
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      (groups_[mid].*first <= idx ? lo : hi) = mid;
    }
    return groups_[lo];
  }

  // bh = (b - b0) * Hkv + hk within the group.
  Block block(Group& g, std::int64_t bh, std::int64_t blk) const {
    return Block{{g.b0 + bh / p_.h_kv, bh % p_.h_kv, blk * g.pl.br,
                  static_cast<int>(std::min<std::int64_t>(g.pl.br, g.pl.rows - blk * g.pl.br))},
                 &g};
  }

  // A split-KV partial, per row per chunk: m (a double, in two floats: the
  // exact path's m may exceed float's range), l, whether the row sees a key of
  // the chunk, then O = acc / l of the chunk (normalised, so it cannot
  // overflow where the chunk's result is finite).
  static constexpr int kPartHead = 4;
  std::int64_t part_stride() const { return p_.dv + kPartHead; }
  struct Partial {
    double m, l;
    bool seen;
  };
  static Partial read_partial(const float* part) {
    Partial ps;
    std::memcpy(&ps.m, part, sizeof ps.m);
    ps.l = part[2];
    ps.seen = part[3] != 0.0f;
    return ps;
  }
  // acc(c) gives the row's accumulator in double; acc_row, when given, holds
  // the same values as float32 (the kernels then scale the row). Returns
  // false when acc_row held a value that is not finite (the partial written
  // is then to be replaced).
  template <class Acc>
  bool write_partial(float* part, double m, double l, bool seen, Acc acc, const float* acc_row = nullptr) const {
    std::memcpy(part, &m, sizeof m);
    part[2] = static_cast<float>(l);
    part[3] = seen ? 1.0f : 0.0f;
    const double inv = l > 0 ? 1.0 / l : 0.0;
    if (acc_row) return ks_.scale_row(acc_row, p_.dv, inv, part + kPartHead);
    for (std::int64_t c = 0; c < p_.dv; ++c) part[kPartHead + c] = static_cast<float>(acc(c) * inv);
    return true;
  }

  float* partial(const Block& bl, std::int64_t split, int rr) {
    const Plan& pl = bl.g->pl;
    const std::int64_t blk = bl.r0 / pl.br;
    const std::int64_t slot = (((bl.b - bl.g->b0) * p_.h_kv + bl.hk) * pl.blocks + blk) * pl.splits + split;
    return bl.g->partials.data() + (slot * pl.slot_rows() + rr) * part_stride();
  }

  // Final m (natural units) and l of one row with the attention sink folded
  // in: the sink is one more key whose value is zero.
  struct Final {
    double m, l, acc_scale;
  };
  Final with_sink(const Block& bl, int rr, double m, double l) const {
    if (!p_.sinks.data) return {m, l, 1.0};
    const double sink = static_cast<const float*>(p_.sinks.data)[head(bl, rr) * p_.sinks.stride_h];
    if (std::isnan(m) || !(sink > m)) return {m, l + std::exp(sink - m), 1.0};
    const double a = std::exp(m - sink);  // 0 when m = -inf (an empty row)
    return {sink, l * a + 1.0, a};
  }

  // Writes O (and lse) of one row from its m, l and unnormalised acc. `seen`:
  // the row sees at least one key. Only structural masking may leave a row
  // empty (O = 0, lse = -inf); a row that sees keys whose scores are all -inf
  // (from Inf in the data) is NaN, as softmax over those scores is. Returns
  // false, with the lse left unwritten, when acc_row (given for a row that is
  // not empty) held a value that is not finite: the row is then to be
  // written again (finish_rows' float64 path).
  template <class Acc>
  bool finish_row(const Block& bl, int rr, double m, double l, bool seen, Acc acc, const float* acc_row = nullptr) {
    const std::int64_t i = query(bl, rr), h = head(bl, rr);
    Final f = with_sink(bl, rr, m, l);
    void* o = p_.o.addr(bl.b, h, p_.q_row(bl.b, i));
    if (seen && f.m == -std::numeric_limits<double>::infinity()) f = {std::nan(""), std::nan(""), 1.0};
    const bool empty = f.m == -std::numeric_limits<double>::infinity();  // nothing visible (NaN is not empty)
    const double inv = empty ? 0.0 : f.acc_scale / f.l;
    if (p_.o.dtype == DType::f32) {
      float* of = static_cast<float*>(o);
      if (acc_row && !empty) {
        if (!ks_.scale_row(acc_row, p_.dv, inv, of)) return false;
      } else {
        for (std::int64_t c = 0; c < p_.dv; ++c) of[c] = empty ? 0.0f : static_cast<float>(acc(c) * inv);
      }
    } else {
      if (acc_row && !empty && !ks_.all_finite(acc_row, p_.dv)) return false;
      // 16-bit O: rounded from the float32 result, as a float32 computation
      // stored to 16 bits would be.
      for (std::int64_t c = 0; c < p_.dv; ++c) store_float(o, p_.o.dtype, c, empty ? 0.0f : static_cast<float>(acc(c) * inv));
    }
    if (p_.lse.data) *p_.lse.at<float>(bl.b, h, p_.q_row(bl.b, i)) = empty ? kNegInf : static_cast<float>(f.m + std::log(f.l));
    return true;
  }

  // Decode streams K and V from DRAM with little arithmetic per byte: the
  // hardware prefetchers alone leave a core waiting on memory (measured: 10
  // GB/s of one core's 33 GB/s), so the next tile's rows are requested while
  // this one is computed: its keys before the scores, its values before PV
  // (two half-size bursts keep fewer misses queued at once than one).
  void prefetch_tile(const Block& bl, std::int64_t t0, std::int64_t n, const Operand* only = nullptr) const {
    if (n <= 0) return;
    for (const Operand* t : {&p_.k, &p_.v}) {
      if (only && t != only) continue;
      if (stored_ok(*t)) continue;  // the stored-row kernels prefetch as they stream
      // So do the float32 kernels of 16-float sets: K always, V when read in place.
      if (rows_ahead_bytes() > 0 && t->dtype == DType::f32 && (t == &p_.k || !bl.g->pl.pack_v)) continue;
      const std::int64_t row_bytes = p_.row_width(*t) * t->elem_bytes;
      p_.for_each_kv_run(*t, bl.b, bl.hk, t0, n, [&](std::int64_t, std::int64_t count, const char* first, std::int64_t step) {
        if (step == row_bytes) {
          // The run is one contiguous stretch of bytes.
          for (std::int64_t off = 0; off < count * row_bytes; off += 64) __builtin_prefetch(first + off, 0, 3);
          return;
        }
        for (std::int64_t j = 0; j < count; ++j)
          for (std::int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(first + j * step + off, 0, 3);
      });
    }
  }

  // How far ahead the float32 decode kernels request K and V rows (0: the
  // driver requests each next tile instead; see kDecodeRowsAheadBytes).
  int rows_ahead_bytes() const { return ks_.w >= 16 ? kDecodeRowsAheadBytes : 0; }

  // Whether decode blocks read K or V (t) through the stored-row kernels:
  // float16, bfloat16, and int8 whose groups are whole vectors and a power of
  // two (32, 64, ...); other groups are converted row by row first.
  bool stored_ok(const Operand& t) const {
    if (t.dtype == DType::f16 || t.dtype == DType::bf16) return true;
    const std::int64_t g = p_.group_of(t);
    return t.dtype == DType::i8 && g % ks_.w == 0 && (g & (g - 1)) == 0;
  }

  // out[j] = the row of key t0 + j of operand o (K, V or their scales), head hk of batch entry b, j < n.
  void row_addrs(const Operand& o, std::int64_t b, std::int64_t hk, std::int64_t t0, std::int64_t n,
                 const void** out) const {
    p_.for_each_kv_run(o, b, hk, t0, n, [&](std::int64_t i, std::int64_t count, const char* first, std::int64_t step) {
      for (std::int64_t j = 0; j < count; ++j) out[i + j] = first + j * step;
    });
  }

  // Keys [t0, t0 + n) of K or V (t) as stored, for the decode kernels.
  StoredRows stored_rows(const Operand& t, const Block& bl, std::int64_t t0, int n, const void** rows,
                         const void** scales, const RowsAhead* ahead = nullptr) const {
    StoredRows r{};
    r.rows = rows;
    r.dtype = t.dtype;
    const std::int64_t width = p_.row_width(t);
    const std::int64_t es = t.elem_bytes;
    r.row_bytes = static_cast<int>(width * es);
    const Operand* sc = p_.scales_of(t);
    row_addrs(t, bl.b, bl.hk, t0, n, rows);
    if (sc) {
      row_addrs(*sc, bl.b, bl.hk, t0, n, scales);
      r.scales = scales;
      r.sdt = sc->dtype;
      r.group = static_cast<int>(p_.group_of(t));
      r.scale_bytes = static_cast<int>(width / r.group * sc->elem_bytes);
    }
    // The row kStreamAhead keys ahead in the same stream (none across
    // pages), when the scales are strided like the values.
    if (!p_.paged() && (!sc || sc->stride_n * sc->elem_bytes * r.row_bytes ==
                                   t.stride_n * es * r.scale_bytes))
      r.prefetch = std::int64_t{kStreamAhead} * t.stride_n * es;
    if (ahead) set_ahead(*ahead, n, r);
    return r;
  }

  // r.ahead: the rows of `a` for keys j < min(n, a.n), none for the rest.
  void set_ahead(const RowsAhead& a, int n, StoredRows& r) const {
    thread_local const void* rows[kMaxTileKeys];
    thread_local const void* scales[kMaxTileKeys];
    const std::int64_t m = std::clamp<std::int64_t>(a.n, 0, n);
    auto runs = [&](const Operand& o, const void** out) {
      row_addrs(o, a.b, a.hk, a.t0, m, out);
      for (std::int64_t j = m; j < n; ++j) out[j] = nullptr;
    };
    runs(*a.t, rows);
    r.ahead = rows;
    r.ahead_bytes = static_cast<int>(p_.row_width(*a.t) * a.t->elem_bytes);
    r.ahead_scales = nullptr;
    if (const Operand* sc = p_.scales_of(*a.t)) {
      runs(*sc, scales);
      r.ahead_scales = scales;
    }
  }

  // Whether row rr sees any key of [kb, ke) (ranges and explicit mask).
  bool sees_key(const Block& bl, int rr, std::int64_t kb, std::int64_t ke) const {
    const Params::Range v = p_.visible(bl.b, query(bl, rr));
    const std::int64_t lo = std::max(kb, v.lo), hi = std::min(ke, v.hi);
    if (!p_.mask.data) return lo < hi;
    for (std::int64_t t = lo; t < hi; ++t)
      if (visible(bl, rr, t)) return true;
    return false;
  }

  // Key t's score for row rr in float64, stage by stage: scale·q·k, after the
  // softcap, and with ALiBi and the float mask added (the last only for keys
  // the row sees).
  struct ExactScore {
    double scaled, softcapped, biased;
  };
  ExactScore exact_score(const Block& bl, int rr, const float* q, std::int64_t t) const {
    const std::int64_t i = query(bl, rr), h = head(bl, rr);
    thread_local std::vector<float> k_tmp;
    k_tmp.resize(static_cast<std::size_t>(p_.d));
    const float* k = kv_row_f32(p_.k, bl.b, bl.hk, t, k_tmp.data());
    double dot = 0;
    for (std::int64_t c = 0; c < p_.d; ++c) dot += static_cast<double>(q[c]) * k[c];
    ExactScore e;
    e.scaled = p_.scale * dot;
    e.softcapped = p_.softcap > 0 ? p_.softcap * std::tanh(e.scaled / p_.softcap) : e.scaled;
    e.biased = e.softcapped;
    if (p_.alibi.data) {
      const double slope = static_cast<const float*>(p_.alibi.data)[bl.b * p_.alibi.stride_b + h * p_.alibi.stride_h];
      e.biased -= slope * std::abs(static_cast<double>(p_.position(bl.b, i) - t));
    }
    if (p_.mask.data && p_.mask.dtype != DType::boolean) {
      const Broadcast& mk = p_.mask;
      const std::int64_t at = bl.b * mk.stride_b + h * mk.stride_h + i * mk.stride_i + t * mk.stride_j;
      e.biased += mk.dtype == DType::f16 ? half_to_float(static_cast<const std::uint16_t*>(mk.data)[at])
                                         : static_cast<const float*>(mk.data)[at];
    }
    return e;
  }

  // Options::round_p: P rounded to V's 16-bit type before P·V (l has summed
  // the unrounded values, as FlashAttention's does).
  void round_p_tile(float* s, int rows, int bc_pad) const {
    const std::int64_t n = static_cast<std::int64_t>(rows) * bc_pad;
    if (p_.v.dtype == DType::bf16) {
      for (std::int64_t e = 0; e < n; ++e) s[e] = bf16_to_float(float_to_bf16(s[e]));
    } else {
      for (std::int64_t e = 0; e < n; ++e) s[e] = half_to_float(float_to_half(s[e]));
    }
  }

  // Dropout on a tile of unnormalised probabilities (after l has summed them:
  // lse is the softmax's before dropout).
  void drop_tile(const Block& bl, std::int64_t t0, int n, int bc_pad, float* s) const {
    const float scale = static_cast<float>(p_.dropout_scale);
    for (int rr = 0; rr < bl.nr; ++rr)
      dropout_row(ks_, dropout_stream(p_, bl.b, head(bl, rr)), query(bl, rr), t0, n, scale,
                  s + static_cast<std::int64_t>(rr) * bc_pad, true);
  }

  // One row over keys [kb, ke) in float64, as the oracle computes it: the
  // fallback for a row whose float32 result is not finite. Finite inputs can
  // overflow float32 in the scores (|q|, |k| ~ 1e38) or in P·V (|v| ~ 3e38);
  // float64 holds both. Inf and NaN in the data come out as the oracle's.
  struct ExactRow {
    double m, l;
    bool seen;
  };
  // Query row rr of a block as float32 (unscaled).
  const float* q_row_f32(const Block& bl, int rr) const {
    thread_local std::vector<float> q;
    q.resize(static_cast<std::size_t>(p_.d));
    load_row(p_.q, bl.b, head(bl, rr), p_.q_row(bl.b, query(bl, rr)), p_.d, q.data());
    return q.data();
  }

  ExactRow exact_row(const Block& bl, int rr, std::int64_t kb, std::int64_t ke, std::vector<double>& acc) const {
    const std::int64_t i = query(bl, rr), h = head(bl, rr);
    const float* q = q_row_f32(bl, rr);
    thread_local std::vector<double> sc;
    sc.assign(static_cast<std::size_t>(std::max<std::int64_t>(ke - kb, 0)), 0.0);
    const double kInfD = std::numeric_limits<double>::infinity();
    ExactRow r{-kInfD, 0.0, false};
    std::vector<char> vis(sc.size());
    for (std::int64_t t = kb; t < ke; ++t) {
      if (!(vis[t - kb] = visible(bl, rr, t))) continue;
      r.seen = true;
      const double x = exact_score(bl, rr, q, t).biased;
      sc[t - kb] = x;
      if (std::isnan(x) || std::isnan(r.m))
        r.m = std::nan("");
      else if (x > r.m)
        r.m = x;
    }
    acc.assign(static_cast<std::size_t>(p_.dv), 0.0);
    if (r.m == -kInfD) return r;
    const philox::Stream drop = dropout_stream(p_, bl.b, h);
    for (std::int64_t t = kb; t < ke; ++t) {
      if (!vis[t - kb]) continue;
      double e = std::exp(sc[t - kb] - r.m);
      r.l += e;
      if (p_.dropout) e *= drop.keep(i, t) ? p_.dropout_scale : 0.0;
      thread_local std::vector<float> v_tmp;
      v_tmp.resize(static_cast<std::size_t>(p_.dv));
      const float* v = kv_row_f32(p_.v, bl.b, bl.hk, t, v_tmp.data());
      for (std::int64_t c = 0; c < p_.dv; ++c) acc[c] += e * v[c];
    }
    return r;
  }

  // Scores of keys [t0, t0+n) up to `stage`, invisible entries -inf (from
  // `masked` on). Returns whether rows see different key ranges in this tile
  // (then row_begin/row_end hold them).
  // With `spans`, a ranged float32 tile without an explicit mask or ALiBi
  // fills them and is masked within them only (spans->set).
  bool score_tile(const Block& bl, const float* qs, const PackedQ& pq, std::int64_t t0, int n, int bc_pad,
                  float* kt, float* s, int* row_begin, int* row_end, const BlockRange& br,
                  ScoresStage stage = ScoresStage::masked, Spans* spans = nullptr) {
    if (pq.bf16) {
      // bfloat16 Q and K on bf16 products (pq.bf16: the block's packed Q).
      const std::uint16_t** k = bf16_rows(p_.k, bl, t0, n);
      std::uint16_t* kt2 = bf16_scratch().kt2;
      ks_.pack_kt_bf16(k, n, static_cast<int>(p_.d), kt2, bc_pad);
      ks_.scores_bf16(pq.bf16, bl.nr, static_cast<int>(p_.d), kt2, bc_pad, static_cast<float>(p_.scale), s);
      return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage);
    }
    if (pq.x3) {
      // float32 on the parts (pq.x3: the block's Qs in parts). A ranged tile
      // computes the tiles of columns its strips' rows see, as below.
      const float** k = tile_rows();
      const int d = static_cast<int>(p_.d);
      auto pack = [&](float* dst) {
        kv_rows(p_.k, bl, t0, n, k);
        ks_.pack_kt_x3(k, n, d, reinterpret_cast<std::uint16_t*>(dst), bc_pad);
      };
      const std::uint16_t* packed = nullptr;
      Group& g = *bl.g;
      if (bl.kt_slot >= 0 && t0 % g.pl.bc == 0 && n == std::min<std::int64_t>(g.pl.bc, p_.nkv(bl.b) - t0))
        packed = reinterpret_cast<const std::uint16_t*>(g.kt.tile(bl.kt_slot, t0 / g.pl.bc, pack));
      if (!packed) {
        std::uint16_t* kt3 = x3_scratch().kt3;
        pack(reinterpret_cast<float*>(kt3));
        packed = kt3;
      }
      if (stage == ScoresStage::masked && ranged_tile(t0, n, br)) {
        tile_ranges(bl, t0, n, row_begin, row_end);
        ks_.scores_x3(pq.x3, bl.nr, d, packed, bc_pad, s, row_begin, row_end);
        if (spans && !p_.mask.data && !p_.alibi.data) {
          strip_spans(bl.nr, bc_pad, row_begin, row_end, *spans);
          return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage, true, spans);
        }
        return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage, true);
      }
      ks_.scores_x3(pq.x3, bl.nr, d, packed, bc_pad, s, nullptr, nullptr);
      return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage);
    }
    if (bl.nr <= direct_rows(ks_)) {
      direct_scores(bl, qs, t0, n, s, bc_pad);
      return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage);
    }
    const float** k = tile_rows();
    const int d = static_cast<int>(p_.d);
    auto pack = [&](float* dst) {
      kv_rows(p_.k, bl, t0, n, k);
      ks_.pack_kt(k, n, d, dst, bc_pad);
    };
    const float* packed = nullptr;
    Group& g = *bl.g;
    // The cache holds whole tiles from multiples of BC (a window or chunk
    // that starts elsewhere, or a tile cut short, packs its own).
    if (bl.kt_slot >= 0 && t0 % g.pl.bc == 0 && n == std::min<std::int64_t>(g.pl.bc, p_.nkv(bl.b) - t0))
      packed = g.kt.tile(bl.kt_slot, t0 / g.pl.bc, pack);
    if (!packed) {
      pack(kt);
      packed = kt;
    }
    if (stage == ScoresStage::masked && ranged_tile(t0, n, br)) {
      // Only the columns rows see are computed; mask_tile sets the rest.
      tile_ranges(bl, t0, n, row_begin, row_end);
      ks_.scores_ranged(qs, bl.nr, d, packed, bc_pad, s, row_begin, row_end);
      if (spans && !p_.mask.data && !p_.alibi.data) {
        strip_spans(bl.nr, bc_pad, row_begin, row_end, *spans);
        return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage, true, spans);
      }
      return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage, true);
    }
    ks_.scores(qs, bl.nr, d, packed, bc_pad, s);
    return finish_scores(bl, t0, n, bc_pad, s, row_begin, row_end, br, stage);
  }

  // Scale·q·k of a decode block's rows for keys [t0, t0 + n), straight from
  // K's rows (as stored, or converted), into s (rows s_stride apart).
  void direct_scores(const Block& bl, const float* qs, std::int64_t t0, int n, float* s, int s_stride) {
    const int d = static_cast<int>(p_.d);
    if (stored_ok(p_.k)) {
      thread_local const void* rows[kMaxTileKeys];
      thread_local const void* scales[kMaxTileKeys];
      ks_.scores_direct_st(qs, bl.nr, d, stored_rows(p_.k, bl, t0, n, rows, scales), n, s, s_stride);
      return;
    }
    const float** k = tile_rows();
    kv_rows(p_.k, bl, t0, n, k);
    ks_.scores_direct(qs, bl.nr, d, k, n, s, s_stride, rows_ahead_bytes());
  }

  // bf16 row pointers of keys [t0, t0 + n) of a bfloat16 K or V.
  const std::uint16_t** bf16_rows(const Operand& t, const Block& bl, std::int64_t t0, int n) const {
    thread_local const std::uint16_t* rows[kMaxTileKeys];
    p_.for_each_kv_run(t, bl.b, bl.hk, t0, n, [&](std::int64_t i, std::int64_t count, const char* first, std::int64_t step) {
      for (std::int64_t j = 0; j < count; ++j) rows[i + j] = reinterpret_cast<const std::uint16_t*>(first + j * step);
    });
    return rows;
  }

  // Per-thread packed bf16 operands: q2 for a block, kt2 and v2 for a tile,
  // sized by the kernel set's padding.
  struct Bf16Scratch {
    std::uint16_t *q2, *kt2, *v2;
  };
  Bf16Scratch bf16_scratch() const {
    thread_local std::vector<std::uint16_t> mem;
    const std::int64_t d2 = round_up(p_.d, ks_.bf16_kpad), rows = round_up(ks_.br, ks_.bf16_rpad);
    const std::int64_t nq2 = rows * d2, nkt2 = d2 * ks_.bc, nv2 = round_up(ks_.bc, ks_.bf16_kpad) * round_up(p_.dv, ks_.w);
    std::uint16_t* a[3];
    arrays16(mem, {nq2, nkt2, nv2}, a);
    return {a[0], a[1], a[2]};
  }

  // Arrays of 16-bit values, of sizes[i] elements, in mem (grown as
  // needed), each 64-byte aligned.
  template <std::size_t N>
  static void arrays16(std::vector<std::uint16_t>& mem, const std::int64_t (&sizes)[N], std::uint16_t** out) {
    const std::int64_t pad = 32;
    std::int64_t total = pad;
    for (std::int64_t x : sizes) total += round_up(x, pad);
    if (mem.size() < static_cast<std::size_t>(total)) mem.resize(static_cast<std::size_t>(total));
    std::uint16_t* at = mem.data();
    at += (pad - (reinterpret_cast<std::uintptr_t>(at) / 2) % pad) % pad;
    for (std::size_t i = 0; i < N; ++i) {
      out[i] = at;
      at += round_up(sizes[i], pad);
    }
  }

  // Whether a block of nr rows takes bf16 Q·Kᵀ: bfloat16 Q and K, a kernel
  // set whose bf16 products beat its float32 ones, more rows than decode.
  bool bf16_scores(int nr) const {
    return ks_.bf16_fast && ks_.scores_bf16 && nr > direct_rows(ks_) && p_.q.dtype == DType::bf16 &&
           p_.k.dtype == DType::bf16;
  }
  // And P·V: round_p with bfloat16 V (P is then rounded to bf16 anyway).
  bool bf16_pv(int nr) const {
    return ks_.bf16_fast && ks_.pv_bf16 && p_.round_p && nr > direct_rows(ks_) && p_.v.dtype == DType::bf16;
  }

  // Per-thread packed parts (x3_scores, x3_pv): q3 for a block, kt3 and v3 for a
  // tile of up to twice the set's BC keys, and pv_x3's scratch.
  struct X3Scratch {
    std::uint16_t *q3, *kt3, *v3, *pv_work;
  };
  X3Scratch x3_scratch() const {
    thread_local std::vector<std::uint16_t> mem;
    const std::int64_t d2 = round_up(p_.d, ks_.bf16_kpad), rows = round_up(ks_.br, ks_.bf16_rpad),
                       keys = round_up(4 * ks_.bc, ks_.bf16_kpad);
    std::uint16_t* a[4];
    arrays16(mem, {3 * rows * d2, 3 * d2 * keys, 3 * keys * round_up(p_.dv, ks_.w), ks_.x3_pv_work}, a);
    return {a[0], a[1], a[2], a[3]};
  }

  // The stages after scale·q·k: softcap, then masks. ranges_set: row_begin
  // and row_end already hold the tile's ranges (tile_ranges).
  bool finish_scores(const Block& bl, std::int64_t t0, int n, int bc_pad, float* s, int* row_begin, int* row_end,
                     const BlockRange& br, ScoresStage stage, bool ranges_set = false, const Spans* spans = nullptr) const {
    if (stage == ScoresStage::scaled) return false;
    if (p_.softcap > 0) ks_.softcap(s, bl.nr, bc_pad, static_cast<float>(p_.softcap));
    if (stage == ScoresStage::softcapped) return false;
    return mask_tile(bl, t0, n, bc_pad, s, row_begin, row_end, br, ranges_set, spans ? spans->sb : nullptr,
                     spans ? spans->se : nullptr);
  }

  // The strips of a ranged tile (see Spans): per MR-row strip, the union of
  // its rows' ranges, and that union rounded out to whole vectors.
  void strip_spans(int nr, int bc_pad, const int* row_begin, const int* row_end, Spans& sp) const {
    const int w = ks_.w;
    for (int r0 = 0; r0 < nr; r0 += ks_.mr) {
      const int r1 = std::min(nr, r0 + ks_.mr);
      int b = bc_pad, e = 0;  // rows that see none of these keys add nothing
      for (int rr = r0; rr < r1; ++rr)
        if (row_begin[rr] < row_end[rr]) {
          b = std::min(b, row_begin[rr]);
          e = std::max(e, row_end[rr]);
        }
      if (b > e) b = e = 0;
      const int vb = b / w * w, ve = std::min(bc_pad, (e + w - 1) / w * w);
      for (int rr = r0; rr < r1; ++rr) {
        sp.ub[rr] = b;
        sp.ue[rr] = e;
        sp.sb[rr] = vb;
        sp.se[rr] = ve;
      }
    }
    sp.set = true;
  }

  // acc += P·V for one tile. With an explicit mask, a non-finite value at a
  // key some row may not see must not reach that row through 0·NaN: such a
  // tile runs on a copy of V with those values zeroed, and each is then added
  // by hand to exactly the rows that see its key.
  void pv_tile(const Block& bl, std::int64_t t0, int n, int bc_pad, const float* s, float* vp, float* acc,
               const float* alpha, const int* row_begin, const int* row_end, const Spans* spans = nullptr) {
    const std::int64_t dv_pad = bl.g->pl.dv_pad;
    if (bl.nr <= direct_rows(ks_) && stored_ok(p_.v) && !row_end && !p_.mask.data) {
      // Decode with V as stored. (An explicit mask or per-row key ranges take
      // the float32 path below, which keeps masked values out of every row.)
      thread_local const void* rows[kMaxTileKeys];
      thread_local const void* scales[kMaxTileKeys];
      ks_.pv_direct_st(s, bl.nr, n, bc_pad, stored_rows(p_.v, bl, t0, n, rows, scales), static_cast<int>(p_.dv), acc,
                       static_cast<int>(dv_pad), alpha);
      return;
    }
    if (bf16_pv(bl.nr) && !row_end && !p_.mask.data) {
      std::uint16_t* v2 = bf16_scratch().v2;
      ks_.pack_v_bf16(bf16_rows(p_.v, bl, t0, n), n, static_cast<int>(p_.dv), v2, static_cast<int>(dv_pad));
      ks_.pv_bf16(s, bl.nr, n, bc_pad, v2, static_cast<int>(dv_pad), acc, alpha);
      return;
    }
    // V's rows as float32: in place, or converted from 16 bits or int8 (then
    // already zero padded to a multiple of 16 floats).
    thread_local const float* v_src[kMaxTileKeys];
    const bool x3 = x3_pv(ks_, p_, bl.nr);
    Group& g = *bl.g;
    if (x3 && bl.v3_slot >= 0 && t0 % g.pl.bc == 0 && n == std::min<std::int64_t>(g.pl.bc, p_.nkv(bl.b) - t0)) {
      // A whole tile: its parts packed once per call, with whether its
      // values are finite. Where rows see different keys, a tile that is not
      // takes the sanitised path below.
      auto pack = [&](float* dst) {
        kv_rows(p_.v, bl, t0, n, v_src);
        dst[g.v3_flag] = tile_finite(v_src, n) ? 1.0f : 0.0f;
        ks_.pack_v_x3(v_src, n, static_cast<int>(p_.dv), reinterpret_cast<std::uint16_t*>(dst), static_cast<int>(dv_pad));
      };
      const float* packed = g.v3.tile(bl.v3_slot, t0 / g.pl.bc, pack);
      if (packed && (!row_end || packed[g.v3_flag] != 0.0f)) {
        const bool cols = row_end && spans && spans->set;
        ks_.pv_x3(s, bl.nr, n, bc_pad, reinterpret_cast<const std::uint16_t*>(packed), static_cast<int>(dv_pad), acc,
                  alpha, cols ? spans->sb : nullptr, cols ? spans->se : nullptr, x3_scratch().pv_work);
        return;
      }
    }
    kv_rows(p_.v, bl, t0, n, v_src);
    // On the parts (x3), every row reads all of the tile's keys: a key a row
    // does not see adds exactly 0 (its P is 0) as long as its value is finite,
    // so a tile whose rows see different keys is sanitised as one with an
    // explicit mask is.
    const bool sanitize = (p_.mask.data || (x3 && row_end)) && !tile_finite(v_src, n);
    // V is read as it is unless its float32 rows need padding (dv % W) or sanitising.
    const float** v = tile_rows();
    if ((bl.g->pl.pack_v && p_.v.dtype == DType::f32 && !x3) || sanitize) {
      for (int j = 0; j < n; ++j) {
        float* dst = vp + j * dv_pad;
        const float* src = v_src[j];
        for (std::int64_t c = 0; c < p_.dv; ++c) dst[c] = sanitize && !std::isfinite(src[c]) ? 0.0f : src[c];
        for (std::int64_t c = p_.dv; c < dv_pad; ++c) dst[c] = 0.0f;
        v[j] = dst;
      }
    } else if (ks_.w == 8 && !x3 && bl.nr > direct_rows(ks_) && p_.v.dtype == DType::f32 && !rows_aligned(v_src, n)) {
      // Prefill blocks read each V row once per strip of MR rows. Rows that
      // do not start on a 32-byte boundary (malloc's 16-byte alignment, say)
      // split every other AVX2 load across two cache lines, so they are
      // copied to the aligned tile first: H = 8, 1 thread, Zen 4, rows 16
      // bytes off, N = 2048 at d = 128 and N = 1024 at d = 64 ran 1.07x
      // faster so. The AVX-512 kernels measured no slower from such rows and
      // 1-2% slower with the copy, so they read them in place.
      for (int j = 0; j < n; ++j) {
        float* dst = vp + j * dv_pad;
        std::memcpy(dst, v_src[j], static_cast<std::size_t>(p_.dv) * sizeof(float));
        v[j] = dst;
      }
    } else {
      for (int j = 0; j < n; ++j) v[j] = v_src[j];
    }
    if (x3) {
      const X3Scratch x3s = x3_scratch();
      std::uint16_t* v3 = x3s.v3;
      ks_.pack_v_x3(v, n, static_cast<int>(p_.dv), v3, static_cast<int>(dv_pad));
      // A ranged tile's softmax wrote only its spans' columns (the rest may
      // hold -inf): P is read there only.
      const bool cols = row_end && spans && spans->set;
      ks_.pv_x3(s, bl.nr, n, bc_pad, v3, static_cast<int>(dv_pad), acc, alpha, cols ? spans->sb : nullptr,
                cols ? spans->se : nullptr, x3s.pv_work);
    } else {
      if (row_end && bl.nr > direct_rows(ks_) && (sanitize || tile_finite(v, n))) {
        // Rows that see different keys (a causal diagonal, a window's edge):
        // with V finite, a masked key adds exactly 0 (its P is 0), so each
        // microkernel strip of MR rows runs over the union of its rows' keys,
        // rather than the keys all of them see plus one-row strips for the
        // rest (a fraction of the FMA rate). The sums are the same: the same
        // keys in the same order, plus zeros.
        thread_local Spans wide;
        if (!spans || !spans->set) {
          strip_spans(bl.nr, n, row_begin, row_end, wide);
          spans = &wide;
        }
        row_begin = spans->ub;
        row_end = spans->ue;
      }
      ks_.pv(s, bl.nr, n, bc_pad, v, static_cast<int>(dv_pad), acc, alpha, row_begin, row_end,
             bl.nr <= direct_rows(ks_) ? rows_ahead_bytes() : 0);
    }
    if (!sanitize) return;
    for (int j = 0; j < n; ++j)
      for (std::int64_t c = 0; c < p_.dv; ++c) {
        const float x = v_src[j][c];
        if (std::isfinite(x)) continue;
        for (int rr = 0; rr < bl.nr; ++rr)
          if (visible(bl, rr, t0 + j)) acc[rr * dv_pad + c] += s[static_cast<std::int64_t>(rr) * bc_pad + j] * x;
      }
  }

  // Whether rows v[0, n) of a V tile each start on a vector's boundary.
  bool rows_aligned(const float* const* v, int n) const {
    const auto bytes = static_cast<std::uintptr_t>(ks_.w) * sizeof(float);
    for (int j = 0; j < n; ++j)
      if (reinterpret_cast<std::uintptr_t>(v[j]) % bytes != 0) return false;
    return true;
  }

  // Whether rows v[0, n) of a V tile hold only finite values (dv of each).
  bool tile_finite(const float* const* v, int n) const {
    for (int j = 0; j < n; ++j)
      if (!ks_.all_finite(v[j], p_.dv)) return false;
    return true;
  }

  // A block whose rows see no key of this chunk: empty rows (or partials).
  void finish_empty(const Block& bl, std::int64_t split) {
    for (int rr = 0; rr < bl.nr; ++rr) {
      const double none = -std::numeric_limits<double>::infinity();
      if (bl.g->pl.splits > 1) {
        write_partial(partial(bl, split, rr), none, 0.0, false, [](std::int64_t) { return 0.0; });
      } else {
        finish_row(bl, rr, none, 0.0, false, [](std::int64_t) { return 0.0; });
      }
    }
  }

  // Writes a block's rows (or its split's partials) from m, l and acc over
  // keys [kb, ke). A row whose float32 result is not finite (an overflow from
  // finite inputs, or Inf/NaN in its data) is recomputed in float64; a row
  // that ends with m = -inf is empty only if it sees no key. Returns whether
  // any row was recomputed (exact_rows says which, with their m and l).
  bool finish_rows(const Block& bl, std::int64_t split, std::int64_t kb, std::int64_t ke, const float* m,
                   const float* l, const float* acc, std::int64_t dv_pad, std::vector<ExactRow>& exact_rows) {
    thread_local std::vector<double> exact;
    exact_rows.assign(static_cast<std::size_t>(bl.nr), ExactRow{0.0, 0.0, false});
    bool any_exact = false;
    for (int rr = 0; rr < bl.nr; ++rr) {
      const float* a = acc + rr * dv_pad;
      const bool empty = m[rr] == kNegInf && !sees_key(bl, rr, kb, ke);
      if (empty || (std::isfinite(m[rr]) && std::isfinite(l[rr]))) {
        // The row from float32, its acc checked as it is scaled (an empty
        // row's acc is 0, so the check passes).
        auto acc_f = [&](std::int64_t c) { return static_cast<double>(a[c]); };
        const bool written = bl.g->pl.splits > 1 ? write_partial(partial(bl, split, rr), m[rr], l[rr], !empty, acc_f, a)
                                                 : finish_row(bl, rr, m[rr], l[rr], !empty, acc_f, a);
        if (written || empty) continue;
      }
      const ExactRow x = exact_row(bl, rr, kb, ke, exact);
      exact_rows[rr] = {x.m, x.l, true};
      any_exact = true;
      auto acc_d = [&](std::int64_t c) { return exact[c]; };
      if (bl.g->pl.splits > 1)
        write_partial(partial(bl, split, rr), x.m, x.l, x.seen, acc_d);
      else
        finish_row(bl, rr, x.m, x.l, x.seen, acc_d);
    }
    return any_exact;
  }

  // Where row rr of a block's Q is stored.
  const void* q_row_addr(const Block& bl, int rr) const {
    return p_.q.addr(bl.b, head(bl, rr), p_.q_row(bl.b, query(bl, rr)));
  }

  // Qs: a block's query rows with the scale folded in. Folding scale into Q
  // (not into S) keeps scale*q·k finite whenever it is representable, even
  // when q·k alone is not (q·k = 1e39, scale = 1/8).
  void load_scaled_q(const Block& bl, float* qs) const {
    const int d = static_cast<int>(p_.d);
    const float scale = static_cast<float>(p_.scale);
    for (int rr = 0; rr < bl.nr; ++rr)
      load_scaled_row(p_.q, bl.b, head(bl, rr), p_.q_row(bl.b, query(bl, rr)), d, scale, qs + rr * d);
  }

  // One key tile [t0, t0 + n) of a block: the scores, the online softmax
  // step, dropout and P's rounding, then P·V into acc. `ahead` (decode only)
  // names the rows requested meanwhile, keys [ahead_t0, ahead_t0 + ahead_n)
  // of that block: its K before the scores, its V before P·V.
  void step_tile(const Block& bl, const float* qs, const PackedQ& pq, std::int64_t t0, int n, int bc_pad,
                 float* kt, float* s, float* vp, float* acc, float* m, float* l, float* alpha, int* row_begin,
                 int* row_end, const BlockRange& range, const Block* ahead, std::int64_t ahead_t0,
                 std::int64_t ahead_n) {
    if (ahead) prefetch_tile(*ahead, ahead_t0, ahead_n, &p_.k);
    thread_local Spans spans;
    spans.set = false;
    const bool ranged =
        score_tile(bl, qs, pq, t0, n, bc_pad, kt, s, row_begin, row_end, range, ScoresStage::masked, &spans);
    ks_.softmax_step(s, bl.nr, bc_pad, m, l, alpha, spans.set ? spans.sb : nullptr, spans.set ? spans.se : nullptr);
    if (p_.dropout) drop_tile(bl, t0, n, bc_pad, s);
    if (p_.round_p && !bf16_pv(bl.nr)) round_p_tile(s, bl.nr, bc_pad);  // pv_bf16 rounds P itself
    if (ahead) prefetch_tile(*ahead, ahead_t0, ahead_n, &p_.v);
    pv_tile(bl, t0, n, bc_pad, s, vp, acc, alpha, ranged ? row_begin : nullptr, ranged ? row_end : nullptr, &spans);
  }

  // Plan::all_heads: the decode blocks of every K/V head of batch entry
  // b0 + bi (rows [blk*br, ...), key chunk `split`), advanced tile by tile
  // in step, each head with its own Q rows, S, m, l and acc. Per head, the
  // same kernels in the same order as attend(), so the results are those of
  // attend() on that head, bit for bit.
  //
  // Within a page the rows of one key for every head lie together (Hkv·d
  // values), one head's rows Hkv·d apart. Most K and V (see heads_kernels)
  // go through the all-heads kernels: a few keys at a time, head after head,
  // so each key's rows are read as one stream and requested a stretch ahead
  // (measured at H = Hkv = 32, d = 128, Nkv = 16384, 1 thread: float16 2-2.4x
  // and float32 1.5x faster than the runs below, as fast as a contiguous
  // cache). The others take a tile's keys in runs
  // (about kHeadRunBytes for all heads): the scores of a run for every head,
  // then the next run, while the next run's rows for every head, a stretch
  // of memory per page, are requested; after the softmax step of every head,
  // P·V the same way. A run's sums continue the tile's (alpha applied by the first
  // run only), so splitting the keys into runs changes no bit. Tiles where
  // rows see different keys, and explicit masks, take each head's whole
  // tile at once (step_tile).
  void attend_heads(Group& g, std::int64_t bi, std::int64_t gi, std::int64_t blk, std::int64_t split) {
    // This item's K/V heads: [h0, h0 + nh).
    const std::int64_t h0 = gi * g.pl.head_group, nh = std::min(g.pl.head_group, p_.h_kv - h0);
    thread_local std::vector<Block> blocks;
    blocks.clear();
    for (std::int64_t hk = 0; hk < nh; ++hk) blocks.push_back(block(g, bi * p_.h_kv + h0 + hk, blk));
    const Block& first = blocks[0];
    const int d = static_cast<int>(p_.d), bc = g.pl.bc, nr = first.nr;
    const std::int64_t dv_pad = g.pl.dv_pad;
    const BlockRange range = block_range(first);  // positions and lengths: the same for every head
    const std::int64_t kb = std::max(split * g.pl.chunk, range.lo);
    const std::int64_t ke = std::min({p_.nkv(first.b), (split + 1) * g.pl.chunk, range.hi});
    if (kb >= ke) {
      for (const Block& bl : blocks) finish_empty(bl, split);
      return;
    }

    // Workspace (floats): vp[bc*dv_pad] ones[nr] 2 int[nr], then per head
    // qs[nr*d] s[nr*bc] acc[nr*dv_pad] m, l, alpha[nr].
    auto r16 = [](std::int64_t x) { return (x + 15) / 16 * 16; };
    const std::int64_t per_head = r16(nr * d) + r16(std::int64_t{nr} * bc) + r16(nr * dv_pad) + 3 * r16(nr);
    const std::int64_t shared = r16(bc * dv_pad) + 3 * r16(nr);
    float* vp = workspace().floats(static_cast<std::size_t>(shared + nh * per_head));
    if (!vp) throw workspace_error(p_, "out of memory");
    float* ones = vp + r16(bc * dv_pad);
    int* row_begin = reinterpret_cast<int*>(ones + r16(nr));
    int* row_end = row_begin + r16(nr);
    float* state = reinterpret_cast<float*>(row_end + r16(nr));
    for (int rr = 0; rr < nr; ++rr) ones[rr] = 1.0f;
    auto qs_of = [&](std::int64_t hk) { return state + hk * per_head; };
    auto s_of = [&](std::int64_t hk) { return qs_of(hk) + r16(nr * d); };
    auto acc_of = [&](std::int64_t hk) { return s_of(hk) + r16(std::int64_t{nr} * bc); };
    auto m_of = [&](std::int64_t hk) { return acc_of(hk) + r16(nr * dv_pad); };
    auto l_of = [&](std::int64_t hk) { return m_of(hk) + r16(nr); };
    auto alpha_of = [&](std::int64_t hk) { return l_of(hk) + r16(nr); };

    for (std::int64_t hk = 0; hk < nh; ++hk) {
      load_scaled_q(blocks[hk], qs_of(hk));
      for (int rr = 0; rr < nr; ++rr) {
        m_of(hk)[rr] = kNegInf;
        l_of(hk)[rr] = 0.0f;
      }
      std::memset(acc_of(hk), 0, static_cast<std::size_t>(nr * dv_pad) * sizeof(float));
    }

    // Runs of keys [t, t + count): about kHeadRunBytes of K (or V) for all
    // heads, a multiple of 16 keys.
    const std::int64_t key_bytes = nh * std::max(p_.d * p_.k.elem_bytes, p_.dv * p_.v.elem_bytes);
    const std::int64_t run_keys = std::clamp<std::int64_t>(kHeadRunBytes / key_bytes / 16 * 16, 16, bc);
    auto run_length = [&](std::int64_t t, std::int64_t end) { return std::min(run_keys, end - t); };
    // Part `part` of `parts` of the rows of keys [t, t + count) of every
    // head, K or V: of each page's stretch of memory when a key's rows for
    // all heads lie together, else the rows of some of the heads. Requested a
    // part per head computed, the misses stay spread over the run's work
    // rather than queued at once.
    auto request_run = [&](const Operand& t, std::int64_t t_first, std::int64_t count, std::int64_t part,
                           std::int64_t parts) {
      if (count <= 0) return;
      const std::int64_t row_bytes = p_.row_width(t) * t.elem_bytes;
      if (t.stride_h * t.elem_bytes == row_bytes) {
        // Each key's rows of these heads: one stretch of span_lines lines.
        const std::int64_t span_lines = ceil_div(nh * row_bytes, 64);
        p_.for_each_kv_run(t, first.b, h0, t_first, count, [&](std::int64_t, std::int64_t c, const char* base, std::int64_t step) {
          const std::int64_t lines = c * span_lines;
          for (std::int64_t i = lines * part / parts; i < lines * (part + 1) / parts; ++i)
            __builtin_prefetch(base + i / span_lines * step + i % span_lines * 64, 0, 2);
        });
        return;
      }
      for (std::int64_t hk = h0 + nh * part / parts; hk < h0 + nh * (part + 1) / parts; ++hk)
        p_.for_each_kv_run(t, first.b, hk, t_first, count, [&](std::int64_t, std::int64_t c, const char* row, std::int64_t step) {
          for (std::int64_t j = 0; j < c; ++j)
            for (std::int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(row + j * step + off, 0, 2);
        });
    };

    // K and V as stored (16 bits, int8, float32; float32 V only in rows of
    // whole vectors, which pv reads in place) go through the all-heads
    // kernels, which request the rows of the keys ahead_keys on
    // (kHeadAheadBytes of every head's rows) as they read each key.
    const bool heads_kernels = (stored_ok(p_.k) || p_.k.dtype == DType::f32) &&
                               (stored_ok(p_.v) || (p_.v.dtype == DType::f32 && !g.pl.pack_v));
    const std::int64_t ahead_keys = std::max<std::int64_t>(4, kHeadAheadBytes / key_bytes);
    auto heads_of = [&](const Operand& t) {
      HeadSteps hs{};
      hs.heads = static_cast<int>(nh);
      hs.row_bytes = t.stride_h * t.elem_bytes;
      if (const Operand* sc = p_.scales_of(t)) hs.scale_bytes = sc->stride_h * sc->elem_bytes;
      hs.q = hs.s = hs.acc = hs.alpha = per_head;
      return hs;
    };
    // Whether the previous tile's last whole-tile step requested this tile's
    // first head already.
    bool requested = false;
    for (std::int64_t t0 = kb; t0 < ke; t0 += bc) {
      const int n = static_cast<int>(std::min<std::int64_t>(bc, ke - t0));
      const int bc_pad = static_cast<int>(round_up(n, ks_.nr));
      const bool ranged = t0 < range.full_lo || t0 + n > range.full_hi;
      if (ranged || p_.mask.data) {
        // One (head, tile) ahead is requested while the current one is
        // computed: the next head's rows of the same keys, after the last
        // head the first head's next tile.
        if (!requested) prefetch_tile(first, t0, n);
        requested = true;
        for (std::int64_t hk = 0; hk < nh; ++hk) {
          const Block& bl = blocks[hk];
          const bool last = hk + 1 == nh;
          const Block& ahead = blocks[last ? 0 : hk + 1];
          const std::int64_t ahead_t0 = last ? t0 + bc : t0;
          const std::int64_t ahead_n = std::min<std::int64_t>(bc, ke - ahead_t0);
          step_tile(bl, qs_of(hk), PackedQ{}, t0, n, bc_pad, nullptr, s_of(hk), vp, acc_of(hk), m_of(hk), l_of(hk),
                    alpha_of(hk), row_begin, row_end, range, &ahead, ahead_t0, ahead_n);
        }
        continue;
      }
      requested = false;
      const std::int64_t t1 = t0 + n;
      // Each key's rows for all heads read as one stream (the all-heads
      // kernels), or runs of keys head after head.
      thread_local const void* rows[kMaxTileKeys];
      thread_local const void* scales[kMaxTileKeys];
      if (heads_kernels) {
        const RowsAhead ka{&p_.k, first.b, h0, t0 + ahead_keys, ke - t0 - ahead_keys};
        ks_.scores_heads_st(qs_of(0), nr, d, stored_rows(p_.k, first, t0, n, rows, scales, &ka), n, s_of(0), bc_pad,
                            heads_of(p_.k));
      } else {
        if (t0 == kb) request_run(p_.k, t0, run_length(t0, t1), 0, 1);
        for (std::int64_t t = t0; t < t1;) {
          const std::int64_t count = run_length(t, t1);
          for (std::int64_t hk = 0; hk < nh; ++hk) {
            request_run(p_.k, t + count, run_length(t + count, t1), hk, nh);
            direct_scores(blocks[hk], qs_of(hk), t, static_cast<int>(count), s_of(hk) + (t - t0), bc_pad);
          }
          t += count;
        }
      }
      for (std::int64_t hk = 0; hk < nh; ++hk) {
        float* s = s_of(hk);
        finish_scores(blocks[hk], t0, n, bc_pad, s, row_begin, row_end, range, ScoresStage::masked);
        ks_.softmax_step(s, nr, bc_pad, m_of(hk), l_of(hk), alpha_of(hk), nullptr, nullptr);
        if (p_.dropout) drop_tile(blocks[hk], t0, n, bc_pad, s);
        if (p_.round_p) round_p_tile(s, nr, bc_pad);
      }
      if (heads_kernels) {
        const RowsAhead va{&p_.v, first.b, h0, t0 + ahead_keys, ke - t0 - ahead_keys};
        ks_.pv_heads_st(s_of(0), nr, n, bc_pad, stored_rows(p_.v, first, t0, n, rows, scales, &va),
                        static_cast<int>(p_.dv), acc_of(0), static_cast<int>(dv_pad), alpha_of(0), heads_of(p_.v));
        continue;
      }
      request_run(p_.v, t0, run_length(t0, t1), 0, 1);
      for (std::int64_t t = t0; t < t1;) {
        const std::int64_t count = run_length(t, t1);
        // After the last run of V, the next tile's first run of K.
        const bool last = t + count >= t1;
        const Operand& ahead = last ? p_.k : p_.v;
        const std::int64_t ahead_n = last ? run_length(t1, ke) : run_length(t + count, t1);
        for (std::int64_t hk = 0; hk < nh; ++hk) {
          request_run(ahead, t + count, ahead_n, hk, nh);
          pv_tile(blocks[hk], t, static_cast<int>(count), bc_pad, s_of(hk) + (t - t0), vp, acc_of(hk),
                  t == t0 ? alpha_of(hk) : ones, nullptr, nullptr);
        }
        t += count;
      }
    }
    thread_local std::vector<ExactRow> exact_rows;
    for (std::int64_t hk = 0; hk < nh; ++hk)
      finish_rows(blocks[hk], split, kb, ke, m_of(hk), l_of(hk), acc_of(hk), dv_pad, exact_rows);
  }

  void attend(const Block& given, std::int64_t split) {
    // The block's claims on its head's slots of the packed-tile caches.
    Group& g = *given.g;
    const std::int64_t head_slot = (given.b - g.b0) * p_.h_kv + given.hk;
    const CacheClaim kt_claim(g.kt, head_slot), v3_claim(g.v3, head_slot);
    Block bl = given;
    bl.kt_slot = kt_claim.slot();
    bl.v3_slot = v3_claim.slot();
    const int d = static_cast<int>(p_.d), br = bl.g->pl.br, bc = bl.g->pl.bc;
    const std::int64_t dv_pad = bl.g->pl.dv_pad;

    // Tiles wholly outside every row's range (causal frontier, window, key
    // padding) are skipped: only [lo, hi) of this chunk is visited.
    const BlockRange range = block_range(bl);
    const std::int64_t kb = std::max(split * bl.g->pl.chunk, range.lo);
    const std::int64_t ke = std::min({p_.nkv(bl.b), (split + 1) * bl.g->pl.chunk, range.hi});
    if (kb >= ke && !((p_.probs.data || p_.scores.data) && p_.nkv(bl.b) > 0)) {
      // No key to visit and no matrix to write: the rows are empty, with no
      // working memory (however large d and dv are).
      finish_empty(bl, split);
      return;
    }

    // Workspace (floats): qs[br*d] kt[d*bc] s[br*bc] acc[br*dv_pad] vp[bc*dv_pad] m,l,alpha,inv[br] + 2 int[br]
    const std::size_t n_qs = static_cast<std::size_t>(br) * d, n_kt = static_cast<std::size_t>(d) * bc,
                      n_s = static_cast<std::size_t>(br) * bc, n_acc = static_cast<std::size_t>(br * dv_pad),
                      n_vp = static_cast<std::size_t>(bc * dv_pad);
    auto round16 = [](std::size_t x) { return (x + 15) / 16 * 16; };  // keep every array 64-byte aligned
    float* qs = workspace().floats(workspace_floats(br, bc, d, dv_pad));
    if (!qs) throw workspace_error(p_, "out of memory");
    float* kt = qs + round16(n_qs);
    float* s = kt + round16(n_kt);
    float* acc = s + round16(n_s);
    float* vp = acc + round16(n_acc);
    float* m = vp + round16(n_vp);
    float* l = m + round16(br);
    float* alpha = l + round16(br);
    float* inv = alpha + round16(br);
    int* row_begin = reinterpret_cast<int*>(inv + round16(br));
    int* row_end = row_begin + round16(br);

    // Qs: the block's query rows with the scale folded in. Folding scale into
    // Q (not into S) keeps scale*q·k finite whenever it is representable, even
    // when q·k alone is not (q·k = 1e39, scale = 1/8).
    // On the x3 products a float32 Q is scaled and split in one pass (Qs is
    // not read then).
    const bool x3_q = !bf16_scores(bl.nr) && x3_scores(ks_, p_, bl.nr);
    if (!x3_q || p_.q.dtype != DType::f32) load_scaled_q(bl, qs);
    // bf16 products take Q unscaled, as stored (the kernel scales S): the
    // products stay exact.
    PackedQ pq;
    if (bf16_scores(bl.nr)) {
      thread_local const std::uint16_t* q_rows[kMaxBlockRows];
      for (int rr = 0; rr < bl.nr; ++rr)
        q_rows[rr] = static_cast<const std::uint16_t*>(q_row_addr(bl, rr));
      std::uint16_t* packed = bf16_scratch().q2;
      ks_.pack_q_bf16(q_rows, bl.nr, d, packed);
      pq.bf16 = packed;
    } else if (x3_q) {
      thread_local const float* q_rows[kMaxBlockRows];
      const bool stored = p_.q.dtype == DType::f32;
      for (int rr = 0; rr < bl.nr; ++rr)
        q_rows[rr] = stored ? static_cast<const float*>(q_row_addr(bl, rr)) : qs + static_cast<std::int64_t>(rr) * d;
      std::uint16_t* packed = x3_scratch().q3;
      ks_.pack_q_x3(q_rows, bl.nr, d, stored ? static_cast<float>(p_.scale) : 1.0f, packed);
      pq.x3 = packed;
    }

    for (int rr = 0; rr < bl.nr; ++rr) {
      m[rr] = kNegInf;
      l[rr] = 0.0f;
    }
    std::memset(acc, 0, static_cast<std::size_t>(bl.nr * dv_pad) * sizeof(float));  // the block's rows only

    // Blocks of one row (MHA decode) do not request tiles ahead: their
    // kernels request each row a short distance ahead as they stream
    // (kRowAheadK, kRowAheadV), and bursts of a tile's requests measured
    // 10-25% slower (Xeon, H = Hkv = 32, d = 128, Nkv = 1024 from cache and
    // 16384 from DRAM); blocks of several rows compute more per byte, and the
    // requests keep memory busy meanwhile.
    const bool ahead_ok = bl.nr > 1 && bl.nr <= direct_rows(ks_);
    if (ahead_ok) prefetch_tile(bl, kb, std::min<std::int64_t>(bc, ke - kb));
    for (std::int64_t t0 = kb; t0 < ke; t0 += bc) {
      const int n = static_cast<int>(std::min<std::int64_t>(bc, ke - t0));
      const int bc_pad = static_cast<int>(round_up(n, ks_.nr));
      step_tile(bl, qs, pq, t0, n, bc_pad, kt, s, vp, acc, m, l, alpha, row_begin, row_end, range,
                ahead_ok ? &bl : nullptr, t0 + bc, std::min<std::int64_t>(bc, ke - t0 - bc));
    }

    thread_local std::vector<ExactRow> exact_rows;  // per row; seen is false for rows kept in float32
    const bool any_exact = finish_rows(bl, split, kb, ke, m, l, acc, dv_pad, exact_rows);
    if (bl.g->pl.splits > 1) return;
    if (p_.probs.data || p_.scores.data) {
      // Rows recomputed in float64 get their matrices in float64 too; the
      // float32 pass leaves them 0 (m = +inf makes exp(s - m) vanish).
      for (int rr = 0; rr < bl.nr; ++rr)
        if (exact_rows[rr].seen) m[rr] = std::numeric_limits<float>::infinity();
      write_matrices(bl, qs, pq, kt, s, m, l, inv, row_begin, row_end, range);
      if (any_exact)
        for (int rr = 0; rr < bl.nr; ++rr)
          if (exact_rows[rr].seen) exact_matrix_row(bl, rr, exact_rows[rr]);
    }
  }

  // The probabilities and scores of one row in float64, over every key, for a
  // row whose O came from exact_row (m and l are its float64 results).
  void exact_matrix_row(const Block& bl, int rr, const ExactRow& x) const {
    const std::int64_t i = query(bl, rr), h = head(bl, rr);
    const float* q = q_row_f32(bl, rr);
    const Final f = with_sink(bl, rr, x.m, x.l);
    const bool empty = f.m == -std::numeric_limits<double>::infinity();
    float* probs = p_.probs.data ? p_.probs.at<float>(bl.b, h, i) : nullptr;
    float* scores = p_.scores.data ? p_.scores.at<float>(bl.b, h, i) : nullptr;
    for (std::int64_t t = 0; t < p_.nkv(bl.b); ++t) {
      const bool vis = visible(bl, rr, t);
      double sc = -std::numeric_limits<double>::infinity(), prob = 0.0;
      // Keys outside the row's range are read only for the scaled and
      // softcapped stages, as the float32 pass reads them.
      const bool need_dot = vis || (scores && (p_.scores_stage == ScoresStage::scaled ||
                                               p_.scores_stage == ScoresStage::softcapped));
      if (need_dot) {
        const ExactScore e = exact_score(bl, rr, q, t);
        if (p_.scores_stage == ScoresStage::scaled) sc = e.scaled;
        if (p_.scores_stage == ScoresStage::softcapped) sc = e.softcapped;
        if (vis) {
          if (p_.scores_stage == ScoresStage::masked) sc = e.biased;
          prob = empty ? 0.0 : std::exp(e.biased - f.m) / f.l;
        }
      }
      if (scores && p_.scores_stage == ScoresStage::probabilities) sc = prob;
      if (probs) probs[t] = static_cast<float>(prob);
      if (scores) scores[t] = static_cast<float>(sc);
    }
  }

  // The Nq x Nkv outputs: probabilities P = exp(S - m) / l (0 at invisible
  // keys) and the scores at the stage asked for, tile by tile over every key.
  void write_matrices(const Block& bl, const float* qs, const PackedQ& pq, float* kt, float* s, float* m, const float* l, float* inv,
                      int* row_begin, int* row_end, const BlockRange& range) {
    for (int rr = 0; rr < bl.nr; ++rr) {
      const Final f = with_sink(bl, rr, m[rr], l[rr]);
      const bool empty = f.m == -std::numeric_limits<double>::infinity();
      inv[rr] = empty ? 0.0f : static_cast<float>(1.0 / f.l);
      m[rr] = empty ? 0.0f : static_cast<float>(f.m);  // an empty row's scores are all -inf: exp gives 0
    }
    const bool probs_stage = p_.scores.data && p_.scores_stage == ScoresStage::probabilities;
    for (std::int64_t t0 = 0; t0 < p_.nkv(bl.b); t0 += bl.g->pl.bc) {
      const int n = static_cast<int>(std::min<std::int64_t>(bl.g->pl.bc, p_.nkv(bl.b) - t0));
      const int bc_pad = static_cast<int>(round_up(n, ks_.nr));
      auto copy_out = [&](const Operand& out) {
        for (int rr = 0; rr < bl.nr; ++rr)
          std::memcpy(out.at<float>(bl.b, head(bl, rr), query(bl, rr)) + t0, s + rr * bc_pad, n * sizeof(float));
      };
      if (p_.scores.data && !probs_stage) {
        score_tile(bl, qs, pq, t0, n, bc_pad, kt, s, row_begin, row_end, range, p_.scores_stage);
        copy_out(p_.scores);
      }
      if (p_.probs.data || probs_stage) {
        score_tile(bl, qs, pq, t0, n, bc_pad, kt, s, row_begin, row_end, range);
        ks_.probs(s, bl.nr, bc_pad, m, inv);
        if (p_.probs.data) copy_out(p_.probs);
        if (probs_stage) copy_out(p_.scores);
      }
    }
  }

  std::vector<Group> groups_;
  std::int64_t items_ = 0, merges_ = 0;
};

}  // namespace

// Options::dropout_mask: the keep bit of every (b, h, i, j), visible or not
// (keys past the longest sequence of a cache are left as they are).
void write_dropout_mask(const Params& p) {
  parallel_for(p.b * p.h, p.threads, [&](std::int64_t bh, int) {
    const std::int64_t b = bh / p.h, h = bh % p.h;
    const philox::Stream st = dropout_stream(p, b, h);
    for (std::int64_t i = 0; i < p.n_q; ++i) dropout_bits(st, i, p.n_kv, p.dropout_mask.at<bool>(b, h, i));
  });
}

void run(const Params& p) {
  if (p.b == 0 || p.h == 0 || (!p.packed() && p.n_q == 0)) return;
  if (p.dropout_mask.data) write_dropout_mask(p);
  const KernelSet& ks = kernels_for(p.isa);
  // Checked before any work: rows that see keys need the per-thread working
  // memory, whose size follows from d and dv alone.
  const std::size_t ws = workspace_floats(ks.br, std::max(ks.bc, kDecodeTileKeys), p.d, round_up(p.dv, ks.w));
  if (ws == 0 || ws > kMaxWorkspaceBytes / 4)
    if (p.n_kv > 0) throw workspace_error(p, "about " + std::to_string(ws ? ws * 4 : SIZE_MAX) + " bytes");
  try {
    Runner runner(p, ks);
    parallel_for(runner.items(), p.threads, [&](std::int64_t i, int) {
      FlushDenormals ftz;
      runner.item(i);
    });
    parallel_for(runner.merges(), p.threads, [&](std::int64_t i, int) { runner.merge(i); });
  } catch (const std::bad_alloc&) {
    throw workspace_error(p, "out of memory");
  }
}

}  // namespace sdpa::cpu
