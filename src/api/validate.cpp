// The one place where the inputs of an attention call are checked and the
// only code that builds Params.
//
// Everything a kernel relies on is established here and recorded in Params:
// ranks, matching sizes, dtypes, contiguous last axes, non-null data, prefix
// sums, cache capacity, page indices, outputs that do not overlap inputs or
// each other, a usable scale, a thread count and an ISA the CPU can run. A
// rejected call has written nothing.
//
// make_params runs in three steps: the storage (dense, packed, cache, paged)
// is checked and presented as 4-D views in attention's axes (a Layout); the
// checks every call shares run on those views; then one overlap check covers
// every output against every input, in the caller's real views.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu/dispatch.h"
#include "half.h"
#include "params.h"
#include "quantize.h"
#include "sdpa/error.h"

namespace sdpa {
namespace {

std::string str(std::int64_t x) { return std::to_string(x); }

std::string dims(const TensorView& t) { return t.shape_string(); }

// Byte range [lo, hi) that a view can touch; empty when the view has no element.
struct ByteRange {
  std::uintptr_t lo = 0, hi = 0;
  bool empty() const { return lo == hi; }
};

// From the real element size of the view's dtype; a negative stride extends
// the range below data, a zero stride not at all.
ByteRange byte_range(const TensorView& t, const std::string& name) {
  ByteRange r;
  if (t.numel() <= 0) return r;
  const auto base = reinterpret_cast<std::intptr_t>(t.data);
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(t.dtype));
  std::int64_t lo = 0, hi = 0;  // element offsets
  for (int a = 0; a < t.rank; ++a) {
    std::int64_t span = 0;
    if (__builtin_mul_overflow(t.shape[a] - 1, t.stride[a], &span) ||
        __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
      throw Error(name, "strides whose extent fits in 64 bits", "stride " + str(t.stride[a]) + " on axis " + str(a));
  }
  std::int64_t lo_b = 0, hi_b = 0;
  if (__builtin_mul_overflow(lo, es, &lo_b) || __builtin_mul_overflow(hi + 1, es, &hi_b))
    throw Error(name, "an extent that fits in 64 bits", dims(t));
  r.lo = static_cast<std::uintptr_t>(base + lo_b);
  r.hi = static_cast<std::uintptr_t>(base + hi_b);
  return r;
}

bool overlap(ByteRange a, ByteRange b) { return !a.empty() && !b.empty() && a.lo < b.hi && b.lo < a.hi; }

// Whether no two elements of an output share an address: with the axes of
// size > 1 sorted by |stride|, each stride must step over everything the
// inner axes span (true of every permuted dense layout; false with a zero stride).
bool distinct_elements(const TensorView& t) {
  if (t.numel() <= 0) return true;
  std::vector<std::pair<std::int64_t, std::int64_t>> axes;  // (|stride|, size)
  for (int a = 0; a < t.rank; ++a)
    if (t.shape[a] > 1) axes.emplace_back(t.stride[a] < 0 ? -t.stride[a] : t.stride[a], t.shape[a]);
  std::sort(axes.begin(), axes.end());
  std::int64_t inner = 1;  // elements' offsets spanned by the inner axes: [0, inner)
  for (const auto& [stride, size] : axes) {
    if (stride < inner) return false;
    // This axis's elements start `stride` apart and each spans the inner axes.
    std::int64_t span = 0;
    if (__builtin_mul_overflow(stride, size - 1, &span) || __builtin_add_overflow(span, inner, &inner))
      return true;  // the extent check in byte_range reports it
  }
  return true;
}

// Shape and storage checks common to every operand.
void check_view(const TensorView& t, const std::string& name, int rank, const char* axes) {
  if (t.rank != rank)
    throw Error(name, "a " + str(rank) + "-D view " + axes, "rank " + str(t.rank) + (t.rank ? " " + dims(t) : ""));
  std::int64_t n = 1;
  for (int a = 0; a < rank; ++a) {
    if (t.shape[a] < 0) throw Error(name, "non-negative sizes " + std::string(axes), dims(t));
    if (__builtin_mul_overflow(n, t.shape[a], &n))
      throw Error(name, "an element count that fits in 64 bits", dims(t));
  }
  if (n > 0 && t.data == nullptr) throw Error(name, "non-null data for " + str(n) + " elements", "nullptr");
  if (t.shape[rank - 1] > 1 && t.stride[rank - 1] != 1)
    throw Error(name, "a contiguous last axis (stride 1)", "stride " + str(t.stride[rank - 1]));
}

bool float_ok(DType t, Path path) { return t == DType::f32 || (path == Path::reference && t == DType::f64); }

// lse, probs, scores, dsinks: float32 (float64 too for the oracle).
void check_dtype(const TensorView& t, const std::string& name, Path path) {
  if (!float_ok(t.dtype, path))
    throw Error(name, path == Path::fast ? "float32" : "float32 or float64", dtype_name(t.dtype));
}

// Q, K, V, O (and the backward's d_o and gradients): stored in float32,
// float16 or bfloat16 (float64 too for the oracle); K and V also int8 (`kv`).
bool storage_ok(DType t, Path path, bool kv = false) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || (path == Path::reference && t == DType::f64) ||
         (kv && t == DType::i8);
}

void check_storage(const TensorView& t, const std::string& name, Path path, bool kv = false) {
  if (!storage_ok(t.dtype, path, kv)) {
    std::string want = path == Path::fast ? "float32, float16 or bfloat16" : "float32, float64, float16 or bfloat16";
    if (kv) want += " (or int8 with scales)";
    throw Error(name, want, dtype_name(t.dtype));
  }
}

// what: "batch B (from q)" -> message "expected batch B=2 (from q), got 1 in [1, 4, 5, 8]".
// `shown`: the caller's view when t is a reshaped one (pages), for the message.
void check_size(const TensorView& t, const std::string& name, int axis, std::int64_t want, const std::string& what,
                const TensorView* shown = nullptr) {
  const auto paren = what.find(" (");
  const std::string label = paren == std::string::npos ? what + "=" + str(want)
                                                       : what.substr(0, paren) + "=" + str(want) + what.substr(paren);
  if (t.shape[axis] != want) throw Error(name, label, str(t.shape[axis]) + " in " + dims(shown ? *shown : t));
}

Operand operand(const TensorView& t) {
  Operand op;
  op.data = t.data;
  op.dtype = t.dtype;
  op.stride_b = t.stride[0];
  op.stride_h = t.stride[1];
  op.stride_n = t.stride[2];
  return op;
}

// K or V from its 4-D view; stride_b is the page stride when paged (the view's
// own stride_b is 0 there, see paged_layout).
Operand kv_operand(const TensorView& t, std::int64_t stride_b) {
  Operand op = operand(t);
  op.stride_b = stride_b;
  return op;
}

// A 1-D int32/int64 view read into int64.
std::vector<std::int64_t> read_ints(const TensorView& t, const char* name, std::int64_t want_len, const char* what) {
  if (t.rank != 1) throw Error(name, std::string("a 1-D view ") + what, "rank " + str(t.rank));
  if (t.dtype != DType::i32 && t.dtype != DType::i64) throw Error(name, "int32 or int64", dtype_name(t.dtype));
  if (want_len >= 0 && t.shape[0] != want_len)
    throw Error(name, std::string(what) + " of length " + str(want_len), t.shape_string());
  if (t.shape[0] < 0) throw Error(name, std::string("a non-negative length ") + what, t.shape_string());
  if (t.shape[0] > 0 && !t.data) throw Error(name, "non-null data", "nullptr");
  std::vector<std::int64_t> out(static_cast<std::size_t>(t.shape[0]));
  for (std::int64_t i = 0; i < t.shape[0]; ++i)
    out[i] = t.dtype == DType::i64 ? static_cast<const std::int64_t*>(t.data)[i * t.stride[0]]
                                   : static_cast<const std::int32_t*>(t.data)[i * t.stride[0]];
  return out;
}

// A [B] vector of int32/int64 from Options (per-batch offsets, key lengths).
std::vector<std::int64_t> batch_ints(const TensorView& t, const char* name, std::int64_t b) {
  check_view(t, name, 1, "[B]");
  if (t.dtype != DType::i32 && t.dtype != DType::i64) throw Error(name, "int32 or int64", dtype_name(t.dtype));
  check_size(t, name, 0, b, "batch B (from q)");
  return read_ints(t, name, b, "[B]");
}

// A view broadcastable to `full` by NumPy rules (aligned from the right, each
// axis 1 or full size), as strides over the full axes (0 where broadcast).
Broadcast broadcast(const TensorView& t, const char* name, const std::int64_t (&full)[4], const char* axes) {
  if (t.rank < 1 || t.rank > 4)
    throw Error(name, std::string("rank 1..4, broadcastable to ") + axes, "rank " + str(t.rank));
  for (int a = 0; a < t.rank; ++a)
    if (t.shape[a] < 0) throw Error(name, "non-negative sizes", dims(t));
  if (t.numel() > 0 && t.data == nullptr) throw Error(name, "non-null data", "nullptr");
  std::int64_t st[4] = {0, 0, 0, 0};
  for (int a = 0; a < t.rank; ++a) {
    const int f = 4 - t.rank + a;  // the full axis this one lines up with
    if (t.shape[a] != 1 && t.shape[a] != full[f])
      throw Error(name, std::string("a shape broadcastable to ") + axes + " = [" + str(full[0]) + ", " + str(full[1]) +
                            ", " + str(full[2]) + ", " + str(full[3]) + "] (each axis 1 or full size)",
                  dims(t));
    st[f] = t.shape[a] == 1 ? 0 : t.stride[a];
  }
  Broadcast r;
  r.data = t.data;
  r.dtype = t.dtype;
  r.stride_b = st[0];
  r.stride_h = st[1];
  r.stride_i = st[2];
  r.stride_j = st[3];
  return r;
}

// ---- Storage: each kind checked and presented as 4-D views ----

// The call in attention's axes, for the checks every storage shares.
struct Layout {
  TensorView q, k, v, o;   // Q [B,H,Nq,d], K [B,Hkv,N,d], V [B,Hkv,N,dv], O [B,H,Nq,dv]
  TensorView lse;          // Options::lse as [B, H, Nq], or unset
  std::string k_name = "k", v_name = "v";
  const TensorView *k_shown = nullptr, *v_shown = nullptr;  // the caller's K and V, when k and v are reshaped
  std::int64_t b = 0;      // batch entries (sequences when packed)
  std::int64_t n_q = 0, n_kv = 0;  // Params::n_q, n_kv: the longest sequence when packed or cached
  std::int64_t k_stride_b = 0, v_stride_b = 0;  // of Params::k, v: the page strides when paged
  std::int64_t n_kv_views = 0;  // the Nkv axis of mask, probs, scores: K's keys, or the capacity
  std::string n_kv_from = "keys Nkv (from k)";
  std::vector<std::int64_t> cu_q, cu_k;  // packed
  std::vector<std::int64_t> totals;      // cache, paged: keys after the append
  std::int64_t n_new = 0;
  Broadcast page_table;                  // paged
  std::int64_t page_size = 0;
};

void check_prefix_sums(const std::vector<std::int64_t>& cu, const char* name, std::int64_t total, std::int64_t max_len) {
  if (cu.empty()) throw Error(name, "n + 1 >= 1 prefix sums", "an empty array");
  if (cu[0] != 0) throw Error(name, "prefix sums starting at 0", str(cu[0]) + " at [0]");
  for (std::size_t s = 1; s < cu.size(); ++s) {
    if (cu[s] < cu[s - 1])
      throw Error(name, "non-decreasing prefix sums", str(cu[s]) + " at [" + str(s) + "] after " + str(cu[s - 1]));
    if (max_len >= 0 && cu[s] - cu[s - 1] > max_len)
      throw Error(name, "sequences of at most max_seqlen=" + str(max_len),
                  "length " + str(cu[s] - cu[s - 1]) + " for sequence " + str(s - 1));
  }
  if (cu.back() != total) throw Error(name, "a last entry equal to the rows given (" + str(total) + ")", str(cu.back()));
}

// [N, heads, X] packed rows as the 4-D view [1, heads, N, X].
TensorView packed_as_4d(const TensorView& t, const char* name, const char* axes) {
  if (t.rank != 3) throw Error(name, std::string("a 3-D view ") + axes, "rank " + str(t.rank) + " " + t.shape_string());
  TensorView r = t;
  r.rank = 4;
  r.shape = {1, t.shape[1], t.shape[0], t.shape[2]};
  r.stride = {0, t.stride[1], t.stride[0], t.stride[2]};
  return r;
}

// The lse of the call: the forward's optional output, or the backward's input.
const TensorView& lse_of(const Call& c) { return c.backward ? c.lse : c.opt->lse; }

// The caller's 4-D views as they are, K and V strided by batch entry (dense
// K/V and dense caches).
void take_views(const Call& c, Layout& l) {
  l.q = c.q;
  l.k = c.k;
  l.v = c.v;
  l.o = c.o;
  l.lse = lse_of(c);
  l.n_kv_views = c.k.shape[2];
  l.k_stride_b = c.k.stride[0];
  l.v_stride_b = c.v.stride[0];
}

Layout dense_layout(const Call& c) {
  Layout l;
  take_views(c, l);
  l.b = c.q.shape[0];
  l.n_q = c.q.shape[2];
  l.n_kv = c.k.shape[2];
  return l;
}

Layout packed_layout(const Call& c) {
  const Options& opt = *c.opt;
  const char* what = nullptr;
  if (opt.mask.is_set()) what = "mask";
  if (!c.backward && opt.probs.is_set()) what = "probs";
  if (!c.backward && opt.scores.is_set()) what = "scores";
  if (!c.backward && opt.dropout_mask.is_set()) what = "dropout_mask";
  if (opt.position_offsets.is_set()) what = "position_offsets";
  if (opt.key_lengths.is_set()) what = "key_lengths";
  if (what) throw Error(what, "unset with packed sequences (the lengths come from cu_seqlens)", "a view");
  Layout l;
  l.q = packed_as_4d(c.q, "q", "[total_q, H, d]");
  l.k = packed_as_4d(c.k, "k", "[total_k, Hkv, d]");
  l.v = packed_as_4d(c.v, "v", "[total_k, Hkv, dv]");
  l.o = packed_as_4d(c.o, "o", "[total_q, H, dv]");
  // cu_seqlens_q is checked whole before cu_seqlens_k is measured against it,
  // so that a bad cu_seqlens_q (an empty one) is reported as itself.
  l.cu_q = read_ints(c.cu_seqlens_q, "cu_seqlens_q", -1, "[n + 1]");
  check_prefix_sums(l.cu_q, "cu_seqlens_q", l.q.shape[2], c.max_seqlen_q);
  l.cu_k = read_ints(c.cu_seqlens_k, "cu_seqlens_k", static_cast<std::int64_t>(l.cu_q.size()),
                     "[n + 1] (as cu_seqlens_q)");
  check_prefix_sums(l.cu_k, "cu_seqlens_k", l.k.shape[2], c.max_seqlen_k);
  if (const TensorView& lse = lse_of(c); lse.is_set()) {
    if (lse.rank != 2) throw Error("lse", "a 2-D view [H, total_q]", "rank " + str(lse.rank));
    l.lse = lse;
    l.lse.rank = 3;
    l.lse.shape = {1, lse.shape[0], lse.shape[1]};
    l.lse.stride = {0, lse.stride[0], lse.stride[1]};
  }
  l.b = static_cast<std::int64_t>(l.cu_q.size()) - 1;
  for (std::int64_t s = 0; s < l.b; ++s) {
    l.n_q = std::max(l.n_q, l.cu_q[s + 1] - l.cu_q[s]);
    l.n_kv = std::max(l.n_kv, l.cu_k[s + 1] - l.cu_k[s]);
  }
  l.n_kv_views = l.k.shape[2];
  return l;
}

// Shared by both caches: the new keys/values, the lengths and the capacity.
// k_dtype / v_dtype: the caches' element types, which k_new / v_new must share.
void check_cache(const Call& c, Layout& l, std::int64_t h_kv, std::int64_t d, std::int64_t dv, std::int64_t capacity,
                 DType k_dtype, DType v_dtype) {
  if (c.q.rank != 4) throw Error("q", "a 4-D view [B, H, Nq, d]", "rank " + str(c.q.rank));
  if (c.opt->key_lengths.is_set())
    throw Error("key_lengths", "unset with a KV cache (cache_seqlens gives the lengths)", "a view");
  const std::int64_t b = c.q.shape[0];
  l.b = b;
  const std::vector<std::int64_t> lens = read_ints(c.cache_seqlens, "cache_seqlens", b, "[B]");
  const TensorView &k_new = c.k_new, &v_new = c.v_new;
  if (k_new.is_set() != v_new.is_set())
    throw Error(k_new.is_set() ? "v_new" : "k_new",
                "to be given together with " + std::string(k_new.is_set() ? "k_new" : "v_new"), "only one of them");
  if (k_new.is_set()) {
    for (auto [t, name, x, dt] : {std::tuple{&k_new, "k_new", d, k_dtype}, std::tuple{&v_new, "v_new", dv, v_dtype}}) {
      // Any float dtype the path reads: appending converts (or quantises,
      // into an int8 cache) to the cache's dtype. A float64 cache (the
      // oracle's) takes float64 or float32, which convert exactly.
      const bool ok = dt == DType::f64 ? (t->dtype == DType::f64 || t->dtype == DType::f32) : storage_ok(t->dtype, c.path) && t->dtype != DType::f64;
      if (t->rank != 4 || t->shape[0] != b || t->shape[1] != h_kv || t->shape[2] < 0 || t->shape[3] != x || !ok)
        throw Error(name,
                    std::string(dt == DType::f64 ? "float64 or float32" : "float32, float16 or bfloat16") + " [B=" + str(b) +
                        ", Hkv=" + str(h_kv) + ", n_new, " + str(x) + "]",
                    std::string(dtype_name(t->dtype)) + " " + t->shape_string());
      if (t->shape[3] > 1 && t->stride[3] != 1) throw Error(name, "a contiguous last axis", "stride " + str(t->stride[3]));
      if (t->numel() > 0 && !t->data) throw Error(name, "non-null data", "nullptr");
    }
    if (v_new.shape[2] != k_new.shape[2])
      throw Error("v_new", "n_new=" + str(k_new.shape[2]) + " (from k_new)", str(v_new.shape[2]));
    l.n_new = k_new.shape[2];
  }
  for (std::int64_t i = 0; i < b; ++i) {
    if (lens[i] < 0 || lens[i] > capacity - l.n_new)
      throw Error("cache_seqlens", "lengths with cache_seqlens + n_new <= capacity (" + str(capacity) + ")",
                  str(lens[i]) + " + " + str(l.n_new) + " at [" + str(i) + "]");
    l.totals.push_back(lens[i] + l.n_new);
    // Attend to the longest sequence, not the capacity.
    l.n_kv = std::max(l.n_kv, l.totals.back());
  }
  l.n_q = c.q.shape[2];
}

Layout cache_layout(const Call& c) {
  if (c.k.rank != 4) throw Error("k_cache", "a 4-D view [B, Hkv, capacity, d]", "rank " + str(c.k.rank));
  if (c.v.rank != 4) throw Error("v_cache", "a 4-D view [B, Hkv, capacity, dv]", "rank " + str(c.v.rank));
  Layout l;
  l.k_name = "k_cache";
  l.v_name = "v_cache";
  const std::int64_t capacity = std::min(c.k.shape[2], c.v.shape[2]);
  check_cache(c, l, c.k.shape[1], c.k.shape[3], c.v.shape[3], capacity, c.k.dtype, c.v.dtype);
  take_views(c, l);
  l.n_kv_from = "keys Nkv (capacity, from k_cache)";
  return l;
}

Layout paged_layout(const Call& c) {
  for (auto [t, name, axes] : {std::tuple{&c.k, "k_pages", "[num_pages, page_size, Hkv, d]"},
                               std::tuple{&c.v, "v_pages", "[num_pages, page_size, Hkv, dv]"}}) {
    check_view(*t, name, 4, axes);
    if (t->shape[1] < 1) throw Error(name, "page_size >= 1", t->shape_string());
  }
  const TensorView &k_pages = c.k, &v_pages = c.v;
  if (v_pages.shape[0] != k_pages.shape[0] || v_pages.shape[1] != k_pages.shape[1] ||
      v_pages.shape[2] != k_pages.shape[2])
    throw Error("v_pages", "num_pages, page_size and Hkv as k_pages " + k_pages.shape_string(), v_pages.shape_string());
  if (c.q.rank != 4) throw Error("q", "a 4-D view [B, H, Nq, d]", "rank " + str(c.q.rank));
  // probs and scores would cover keys past a sequence's length, whose block
  // table entries are not checked.
  for (auto [t, name] : {std::pair{&c.opt->mask, "mask"}, std::pair{&c.opt->probs, "probs"},
                         std::pair{&c.opt->scores, "scores"}, std::pair{&c.opt->dropout_mask, "dropout_mask"}})
    if (t->is_set()) throw Error(name, "unset with a paged cache", "a view");
  const std::int64_t b = c.q.shape[0], num_pages = k_pages.shape[0], page_size = k_pages.shape[1];
  const TensorView& table = c.block_table;
  if (table.rank != 2 || table.shape[0] != b || table.shape[1] < 0)
    throw Error("block_table", "a 2-D view [B=" + str(b) + ", max_pages]", table.shape_string());
  if (table.dtype != DType::i32 && table.dtype != DType::i64)
    throw Error("block_table", "int32 or int64", dtype_name(table.dtype));
  if (table.numel() > 0 && !table.data) throw Error("block_table", "non-null data", "nullptr");
  const std::int64_t max_pages = table.shape[1];
  std::int64_t capacity = 0;
  if (__builtin_mul_overflow(max_pages, page_size, &capacity))
    throw Error("block_table", "max_pages * page_size that fits in 64 bits", table.shape_string());
  Layout l;
  l.k_name = "k_pages";
  l.v_name = "v_pages";
  check_cache(c, l, k_pages.shape[2], k_pages.shape[3], v_pages.shape[3], capacity, k_pages.dtype, v_pages.dtype);
  l.page_table.data = table.data;
  l.page_table.dtype = table.dtype;
  l.page_table.stride_b = table.stride[0];
  l.page_table.stride_j = table.stride[1];
  l.page_size = page_size;
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t pg = 0; pg < l.totals[i] / page_size + (l.totals[i] % page_size != 0); ++pg) {  // no overflow
      const std::int64_t e = Params::read_int(l.page_table, i, pg);
      if (e < 0 || e >= num_pages)
        throw Error("block_table", "page indices in [0, num_pages=" + str(num_pages) + ")",
                    str(e) + " at [" + str(i) + ", " + str(pg) + "]");
    }
  // The shared checks see the pages as [B, Hkv, page_size, d] views of page 0
  // (sizes, dtypes); the page table does the addressing.
  auto as_view = [&](const TensorView& t) {
    TensorView r = t;
    r.shape = {b, t.shape[2], t.shape[1], t.shape[3]};
    r.stride = {0, t.stride[2], t.stride[1], t.stride[3]};
    return r;
  };
  l.q = c.q;
  l.k = as_view(k_pages);
  l.v = as_view(v_pages);
  l.k_shown = &c.k;
  l.v_shown = &c.v;
  l.o = c.o;
  l.lse = lse_of(c);
  l.n_kv_views = capacity;
  l.k_stride_b = k_pages.stride[0];
  l.v_stride_b = v_pages.stride[0];
  l.n_kv_from = "keys Nkv (capacity max_pages * page_size, from block_table and k_pages)";
  return l;
}

// ---- Checks every storage shares ----

void check_modifiers(Params& p, const Layout& l, const Options& opt, Path path) {
  if (opt.position_offsets.is_set()) p.position_offsets = batch_ints(opt.position_offsets, "position_offsets", p.b);
  if (opt.key_lengths.is_set()) {
    p.key_lengths = batch_ints(opt.key_lengths, "key_lengths", p.b);
    for (std::int64_t b = 0; b < p.b; ++b) {
      const std::int64_t n = p.key_lengths[b];
      if (n < 0 || n > l.n_kv_views)
        throw Error("key_lengths", "values in [0, Nkv=" + str(l.n_kv_views) + "]", str(n) + " at [" + str(b) + "]");
    }
  }
  if (opt.mask.is_set()) {
    const DType t = opt.mask.dtype;
    const bool ok = t == DType::boolean || t == DType::f32 || t == DType::f16 || (path == Path::reference && t == DType::f64);
    if (!ok) throw Error("mask", "bool, float32 or float16", dtype_name(t));
    const std::int64_t full[4] = {p.b, p.h, p.n_q, l.n_kv_views};
    p.mask = broadcast(opt.mask, "mask", full, "[B, H, Nq, Nkv]");
  }
  if (opt.alibi_slopes.is_set()) {
    const TensorView& t = opt.alibi_slopes;
    if (t.dtype != DType::f32) throw Error("alibi_slopes", "float32", dtype_name(t.dtype));
    if (t.rank == 1) {
      check_size(t, "alibi_slopes", 0, p.h, "heads H (from q)");
    } else if (t.rank == 2) {
      check_size(t, "alibi_slopes", 0, p.b, "batch B (from q)");
      check_size(t, "alibi_slopes", 1, p.h, "heads H (from q)");
    } else {
      throw Error("alibi_slopes", "shape [H] or [B, H]", dims(t));
    }
    if (t.numel() > 0 && !t.data) throw Error("alibi_slopes", "non-null data", "nullptr");
    p.alibi.data = t.data;
    p.alibi.dtype = t.dtype;
    p.alibi.stride_b = t.rank == 2 ? t.stride[0] : 0;
    p.alibi.stride_h = t.stride[t.rank - 1];
  }
  if (opt.sinks.is_set()) {
    const TensorView& t = opt.sinks;
    if (t.dtype != DType::f32) throw Error("sinks", "float32", dtype_name(t.dtype));
    if (t.rank != 1) throw Error("sinks", "shape [H]", dims(t));
    check_size(t, "sinks", 0, p.h, "heads H (from q)");
    if (t.numel() > 0 && !t.data) throw Error("sinks", "non-null data", "nullptr");
    p.sinks.data = t.data;
    p.sinks.dtype = t.dtype;
    p.sinks.stride_h = t.stride[0];
  }
}

// Q, K, V, O: ranks, sizes, dtypes; fills the shape members of p.
void check_operands(Params& p, const Layout& l, Path path) {
  const std::string &kn = l.k_name, &vn = l.v_name;
  check_view(l.q, "q", 4, "[B, H, Nq, d]");
  check_view(l.k, kn, 4, "[B, Hkv, Nkv, d]");
  check_view(l.v, vn, 4, "[B, Hkv, Nkv, dv]");
  check_view(l.o, "o", 4, "[B, H, Nq, dv]");
  check_storage(l.q, "q", path);
  check_storage(l.k, kn, path, true);
  check_storage(l.v, vn, path, true);
  check_storage(l.o, "o", path);

  const std::int64_t b = l.q.shape[0], h = l.q.shape[1], d = l.q.shape[3], h_kv = l.k.shape[1], dv = l.v.shape[3];
  if (d < 1) throw Error("q", "head size d >= 1", str(d) + " in " + dims(l.q));
  check_size(l.k, kn, 0, b, "batch B (from q)", l.k_shown);
  check_size(l.k, kn, 3, d, "head size d (from q)", l.k_shown);
  if (h_kv == 0 ? h != 0 : h % h_kv != 0)
    throw Error(kn, "heads Hkv dividing H=" + str(h) + " (from q)", str(h_kv) + " in " + dims(l.k_shown ? *l.k_shown : l.k));
  check_size(l.v, vn, 0, b, "batch B (from q)", l.v_shown);
  check_size(l.v, vn, 1, h_kv, "heads Hkv (from " + kn + ")", l.v_shown);
  check_size(l.v, vn, 2, l.k.shape[2], "keys Nkv (from " + kn + ")", l.v_shown);
  if (dv < 1) throw Error(vn, "value size dv >= 1", str(dv) + " in " + dims(l.v_shown ? *l.v_shown : l.v));
  check_size(l.o, "o", 0, b, "batch B (from q)");
  check_size(l.o, "o", 1, h, "heads H (from q)");
  check_size(l.o, "o", 2, l.q.shape[2], "queries Nq (from q)");
  check_size(l.o, "o", 3, dv, "value size dv (from " + vn + ")");

  p.b = l.b;
  p.h = h;
  p.h_kv = h_kv;
  p.d = d;
  p.dv = dv;
  p.group = h_kv > 0 ? h / h_kv : 1;
  p.n_q = l.n_q;
  p.n_kv = l.n_kv;
}

void check_scalars(Params& p, const Options& opt) {
  if (opt.scale) {
    const double s = *opt.scale;
    if (!std::isfinite(s) || !(s > 0)) throw Error("scale", "a finite number > 0", std::to_string(s));
    if (!std::isfinite(static_cast<float>(s)) || static_cast<float>(s) == 0.0f)
      throw Error("scale", "a number representable in float32", std::to_string(s));
    p.scale = s;
  } else {
    p.scale = 1.0 / std::sqrt(static_cast<double>(p.d));
  }
  p.causal = opt.causal;
  p.bottom_right = opt.align == Align::bottom_right;
  if (opt.window_left < -1) throw Error("window_left", "-1 (unbounded) or a key count >= 0", str(opt.window_left));
  if (opt.window_right < -1) throw Error("window_right", "-1 (unbounded) or a key count >= 0", str(opt.window_right));
  p.window_left = opt.window_left;
  p.window_right = opt.window_right;
  if (!(opt.softcap >= 0) || !std::isfinite(opt.softcap))
    throw Error("softcap", "0 (off) or a finite number > 0", std::to_string(opt.softcap));
  p.softcap = opt.softcap;
  if (!(opt.dropout_p >= 0 && opt.dropout_p < 1))
    throw Error("dropout_p", "a probability in [0, 1)", std::to_string(opt.dropout_p));
  if (opt.dropout_p > 0) {
    constexpr std::int64_t k32 = std::int64_t{1} << 32;
    if (opt.dropout_offset >= std::uint64_t{1} << 32)
      throw Error("dropout_offset", "an offset below 2^32", std::to_string(opt.dropout_offset));
    // The counter words of sdpa::dropout_keep: each coordinate must fit its word.
    std::int64_t slices = 0;
    if (__builtin_mul_overflow(p.b, p.h, &slices) || slices > k32)
      throw Error("dropout_p", "B*H <= 2^32 with dropout (a counter word per slice)",
                  "B=" + str(p.b) + ", H=" + str(p.h));
    if (p.n_q > k32) throw Error("dropout_p", "Nq <= 2^32 with dropout", "Nq=" + str(p.n_q));
    if (p.n_kv > 4 * k32) throw Error("dropout_p", "Nkv <= 2^34 with dropout", "Nkv=" + str(p.n_kv));
    p.dropout = true;
    p.dropout_p = opt.dropout_p;
    p.dropout_scale = 1.0 / (1.0 - opt.dropout_p);
    p.dropout_seed = opt.dropout_seed;
    p.dropout_offset = opt.dropout_offset;
  }
}

// lse [B, H, Nq]; probs and scores [B, H, Nq, Nkv]: shape and dtype.
Operand extra_output(const TensorView& t, const char* name, bool matrix, const Params& p, const Layout& l, Path path,
                     bool boolean = false) {
  if (matrix) {
    check_view(t, name, 4, "[B, H, Nq, Nkv]");
  } else {
    check_view(t, name, 3, "[B, H, Nq]");
  }
  if (boolean) {
    if (t.dtype != DType::boolean) throw Error(name, "bool", dtype_name(t.dtype));
  } else {
    check_dtype(t, name, path);
  }
  check_size(t, name, 0, l.q.shape[0], "batch B (from q)");  // 1 when packed
  check_size(t, name, 1, p.h, "heads H (from q)");
  check_size(t, name, 2, l.q.shape[2], "queries Nq (from q)");
  if (matrix) {
    check_size(t, name, 3, l.n_kv_views, l.n_kv_from);
    if (t.numel() > kMaxProbsElements)
      throw Error(name, "at most " + str(kMaxProbsElements) + " elements (B*H*Nq*Nkv)", str(t.numel()));
  }
  return operand(t);
}

// The backward's views: lse (required), d_o as o, dq/dk/dv as q/k/v in the
// caller's layout (packed rows presented as 4-D like the inputs), dsinks [H].
void check_backward(Params& p, const Layout& l, const Call& c) {
  if (c.storage != KvStorage::dense && c.storage != KvStorage::packed)
    throw Error("k", "dense or packed K/V for the backward", "a KV cache");
  for (auto [t, name] : {std::pair{&c.k, "k"}, std::pair{&c.v, "v"}})
    if (t->dtype == DType::i8) throw Error(name, "float32, float16 or bfloat16 for the backward", "int8");
  if (!l.lse.is_set())
    throw Error("lse", "the forward's lse " + std::string(c.storage == KvStorage::packed ? "[H, total_q]" : "[B, H, Nq]"),
                "an unset view");
  p.lse = extra_output(l.lse, "lse", false, p, l, c.path);
  const bool packed = c.storage == KvStorage::packed;
  // Each gradient (and d_o) has the caller's shape of its input, in the
  // caller's own rank (3-D packed rows or 4-D), with a layout of its own.
  auto like = [&](const TensorView& t, const char* name, const TensorView& as, const char* as_name) {
    const char* axes = packed ? "[rows, heads, X]" : "[B, heads, N, X]";
    if (t.rank != as.rank)
      throw Error(name, "a " + str(as.rank) + "-D view " + axes + " as " + as_name, "rank " + str(t.rank));
    for (int a = 0; a < as.rank; ++a)
      if (t.shape[a] != as.shape[a])
        throw Error(name, std::string("the shape of ") + as_name + " " + dims(as), dims(t));
    const TensorView v = packed ? packed_as_4d(t, name, axes) : t;
    check_view(v, name, 4, axes);
    check_storage(v, name, c.path);
    return operand(v);
  };
  p.grad_o = like(c.d_o, "d_o", c.o, "o");
  p.grad_q = like(c.dq, "dq", c.q, "q");
  p.grad_k = like(c.dk, "dk", c.k, "k");
  p.grad_v = like(c.dv, "dv", c.v, "v");
  if (c.dsinks.is_set()) {
    // Options::sinks itself: with H = 0 its data may be null (p.sinks.data unset).
    if (!c.opt->sinks.is_set()) throw Error("dsinks", "unset when sinks is unset", "a view");
    const TensorView& t = c.dsinks;
    check_dtype(t, "dsinks", c.path);
    if (t.rank != 1) throw Error("dsinks", "shape [H]", dims(t));
    check_size(t, "dsinks", 0, p.h, "heads H (from q)");
    if (t.numel() > 0 && !t.data) throw Error("dsinks", "non-null data", "nullptr");
    p.grad_sinks.data = t.data;
    p.grad_sinks.dtype = t.dtype;
    p.grad_sinks.stride_h = t.stride[0];
  }
  p.backward = true;
}

// int8 K or V: its scales (Options::k_scales / v_scales) in the caller's
// layout of K (V), with the last axis width / G; presented like K (V) itself.
// Returns the scales' operand (stride_b the page stride when paged) and G.
std::pair<Operand, std::int64_t> check_scales(const Call& c, const TensorView& kv, const TensorView& sc,
                                              const std::string& kv_name, const char* name, std::int64_t width) {
  if (kv.dtype != DType::i8) {
    if (sc.is_set()) throw Error(name, std::string("unset unless ") + kv_name + " is int8", "a view");
    return {Operand{}, 0};
  }
  if (!sc.is_set()) throw Error(name, std::string("scales for the int8 ") + kv_name, "an unset view");
  if (sc.dtype != DType::f32 && sc.dtype != DType::f16) throw Error(name, "float32 or float16", dtype_name(sc.dtype));
  const int last = kv.rank - 1;
  bool same = sc.rank == kv.rank;
  for (int a = 0; a < last && same; ++a) same = sc.shape[a] == kv.shape[a];
  const std::int64_t ng = same ? sc.shape[last] : -1;
  if (!same || ng < 1 || width % ng != 0)
    throw Error(name, "the shape of " + kv_name + " " + dims(kv) + " with a last axis dividing " + str(width) +
                          " (groups of width / G values)",
                dims(sc));
  check_view(sc, name, sc.rank, ("(as " + kv_name + ")").c_str());
  TensorView v = sc;
  std::int64_t stride_b = sc.stride[0];
  if (c.storage == KvStorage::packed) {
    v = packed_as_4d(sc, name, "[total_k, Hkv, d / G]");
    stride_b = 0;
  } else if (c.storage == KvStorage::paged) {
    v.shape = {sc.shape[0], sc.shape[2], sc.shape[1], sc.shape[3]};
    v.stride = {sc.stride[0], sc.stride[2], sc.stride[1], sc.stride[3]};
  }
  Operand op = operand(v);
  op.stride_b = stride_b;
  return {op, width / ng};
}

// One overlap check for the whole call, in the caller's own views: outputs
// (o, lse, probs, scores, and the caches when k_new/v_new are appended) must
// be disjoint from every input and from each other, since the kernels read
// inputs after writing outputs and the append runs before the attention.
void check_overlaps(const Call& c, const Layout& l) {
  const Options& opt = *c.opt;
  const bool append = c.k_new.is_set();
  struct Named {
    const TensorView* t;
    std::string name;
  };
  std::vector<Named> inputs = {{&c.q, "q"}};
  std::vector<Named> outputs;
  if (c.backward) {
    for (const Named& in : {Named{&c.o, "o"}, Named{&c.lse, "lse"}, Named{&c.d_o, "d_o"}}) inputs.push_back(in);
    outputs = {{&c.dq, "dq"}, {&c.dk, "dk"}, {&c.dv, "dv"}, {&c.dsinks, "dsinks"}};
  } else {
    outputs = {{&c.o, "o"}, {&opt.lse, "lse"}, {&opt.probs, "probs"}, {&opt.scores, "scores"},
               {&opt.dropout_mask, "dropout_mask"}};
  }
  for (const Named& kv : {Named{&c.k, l.k_name}, Named{&c.v, l.v_name}, Named{&opt.k_scales, "k_scales"},
                          Named{&opt.v_scales, "v_scales"}})
    (append ? outputs : inputs).push_back(kv);
  for (const Named& in : {Named{&c.k_new, "k_new"}, Named{&c.v_new, "v_new"}, Named{&opt.mask, "mask"},
                          Named{&opt.alibi_slopes, "alibi_slopes"}, Named{&opt.sinks, "sinks"},
                          Named{&opt.position_offsets, "position_offsets"}, Named{&opt.key_lengths, "key_lengths"},
                          Named{&c.cu_seqlens_q, "cu_seqlens_q"}, Named{&c.cu_seqlens_k, "cu_seqlens_k"},
                          Named{&c.cache_seqlens, "cache_seqlens"}, Named{&c.block_table, "block_table"}})
    inputs.push_back(in);

  std::vector<std::pair<ByteRange, const Named*>> in_ranges, out_ranges;
  for (const Named& in : inputs)
    if (in.t->is_set()) in_ranges.emplace_back(byte_range(*in.t, in.name), &in);
  for (const Named& out : outputs) {
    if (!out.t->is_set()) continue;
    if (!distinct_elements(*out.t))
      throw Error(out.name, "elements at distinct addresses (no stride that maps two elements to one place)",
                  "strides in " + dims(*out.t));
    const ByteRange r = byte_range(*out.t, out.name);
    for (const auto& [in_r, in] : in_ranges)
      if (overlap(r, in_r)) throw Error(out.name, "memory disjoint from input " + in->name, "overlapping views");
    for (const auto& [out_r, other] : out_ranges) {
      // K and V caches may share one interleaved buffer ([..., 2, Hkv, d]): their
      // byte ranges overlap without any element doing so.
      if (other->t == &c.k && out.t == &c.v) continue;
      if (other->t == &opt.k_scales && out.t == &opt.v_scales) continue;
      if (overlap(r, out_r)) throw Error(out.name, "memory disjoint from output " + other->name, "overlapping views");
    }
    out_ranges.emplace_back(r, &out);
  }
}

}  // namespace

Params make_params(const Call& c) {
  if (!c.opt) throw Error("opt", "Options", "nullptr");
  const Options& opt = *c.opt;
  Layout l;
  switch (c.storage) {
    case KvStorage::dense: l = dense_layout(c); break;
    case KvStorage::packed: l = packed_layout(c); break;
    case KvStorage::cache: l = cache_layout(c); break;
    case KvStorage::paged: l = paged_layout(c); break;
  }

  Params p;
  check_operands(p, l, c.path);
  p.storage = c.storage;
  check_scalars(p, opt);
  check_modifiers(p, l, opt, c.path);
  std::tie(p.k_scale, p.k_group) = check_scales(c, c.k, opt.k_scales, l.k_name, "k_scales", p.d);
  std::tie(p.v_scale, p.v_group) = check_scales(c, c.v, opt.v_scales, l.v_name, "v_scales", p.dv);
  p.round_p = opt.round_p && (l.v.dtype == DType::f16 || l.v.dtype == DType::bf16);

  if (opt.threads < 0 || opt.threads > 1024)
    throw Error("threads", "0 (all hardware threads) or 1..1024", str(opt.threads));
  p.threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.isa = cpu::select_isa(opt.isa);

  if (c.backward) {
    check_backward(p, l, c);
  } else {
    if (l.lse.is_set()) p.lse = extra_output(l.lse, "lse", false, p, l, c.path);
    if (opt.probs.is_set()) p.probs = extra_output(opt.probs, "probs", true, p, l, c.path);
    if (opt.dropout_mask.is_set())
      p.dropout_mask = extra_output(opt.dropout_mask, "dropout_mask", true, p, l, c.path, true);
  }
  if (!c.backward && opt.scores.is_set()) {
    const int stage = static_cast<int>(opt.scores_stage);
    if (stage < 0 || stage > 3) throw Error("scores_stage", "0..3", str(stage));
    p.scores = extra_output(opt.scores, "scores", true, p, l, c.path);
    p.scores_stage = opt.scores_stage;
  }
  check_overlaps(c, l);

  p.q = operand(l.q);
  p.k = kv_operand(l.k, l.k_stride_b);
  p.v = kv_operand(l.v, l.v_stride_b);
  p.o = operand(l.o);
  p.cu_q = std::move(l.cu_q);
  p.cu_k = std::move(l.cu_k);
  if (c.storage == KvStorage::cache || c.storage == KvStorage::paged) p.key_lengths = std::move(l.totals);
  p.page_table = l.page_table;
  p.page_size = l.page_size;
  return p;
}

void append_kv(const Params& p, const Call& c) {
  if (!c.k_new.is_set()) return;
  const std::int64_t n_new = c.k_new.shape[2];
  std::vector<float> row;
  for (auto [src, dst, x] : {std::tuple{&c.k_new, &p.k, p.d}, std::tuple{&c.v_new, &p.v, p.dv}}) {
    const std::size_t es = dtype_size(src->dtype);
    const Operand* scales = p.scales_of(*dst);
    row.resize(static_cast<std::size_t>(x));
    for (std::int64_t b = 0; b < p.b; ++b)
      for (std::int64_t hk = 0; hk < p.h_kv; ++hk)
        for (std::int64_t j = 0; j < n_new; ++j) {
          const char* from = static_cast<const char*>(src->data) +
                             (b * src->stride[0] + hk * src->stride[1] + j * src->stride[2]) * static_cast<std::int64_t>(es);
          const std::int64_t pos = p.key_lengths[b] - n_new + j;
          void* to = const_cast<void*>(p.kv_addr(*dst, b, hk, pos));
          if (src->dtype == dst->dtype) {
            std::memcpy(to, from, static_cast<std::size_t>(x) * es);
          } else if (scales) {
            for (std::int64_t e = 0; e < x; ++e) row[e] = static_cast<float>(load_element(from, src->dtype, e));
            quantize_row_i8(row.data(), x, p.group_of(*dst), static_cast<std::int8_t*>(to),
                            const_cast<void*>(p.kv_addr(*scales, b, hk, pos)), scales->dtype, 1);
          } else {
            for (std::int64_t e = 0; e < x; ++e) store_float(to, dst->dtype, e, load_element(from, src->dtype, e));
          }
        }
  }
}

}  // namespace sdpa
