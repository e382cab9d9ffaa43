// Packed batches, KV cache and paged KV: each call is checked here and turned
// into the same Params as sdpa::attention (src/params.h), with per-sequence
// lengths (cu_q, cu_k), key lengths and positions, or a page table.
#include "sdpa/serving.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "cpu/driver.h"
#include "params.h"
#include "reference/attention_ref.h"
#include "sdpa/error.h"

namespace sdpa {
namespace {

std::string str(std::int64_t x) { return std::to_string(x); }

void run(const Params& p, bool reference) {
  if (reference)
    reference::run(p);
  else
    cpu::run(p);
}

// A 1-D int32/int64 view read into int64.
std::vector<std::int64_t> read_ints(const TensorView& t, const char* name, std::int64_t want_len, const char* what) {
  if (t.rank != 1) throw Error(name, std::string("a 1-D view ") + what, "rank " + str(t.rank));
  if (t.dtype != DType::i32 && t.dtype != DType::i64) throw Error(name, "int32 or int64", dtype_name(t.dtype));
  if (want_len >= 0 && t.shape[0] != want_len)
    throw Error(name, std::string(what) + " of length " + str(want_len), t.shape_string());
  if (t.shape[0] > 0 && !t.data) throw Error(name, "non-null data", "nullptr");
  std::vector<std::int64_t> out(static_cast<std::size_t>(t.shape[0]));
  for (std::int64_t i = 0; i < t.shape[0]; ++i)
    out[i] = t.dtype == DType::i64 ? static_cast<const std::int64_t*>(t.data)[i * t.stride[0]]
                                   : static_cast<const std::int32_t*>(t.data)[i * t.stride[0]];
  return out;
}

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

void reject_for_packed(const Options& opt) {
  const char* what = nullptr;
  if (opt.mask.is_set()) what = "mask";
  if (opt.probs.is_set()) what = "probs";
  if (opt.scores.is_set()) what = "scores";
  if (opt.position_offsets.is_set()) what = "position_offsets";
  if (opt.key_lengths.is_set()) what = "key_lengths";
  if (what) throw Error(what, "unset with packed sequences (the lengths come from cu_seqlens)", "a view");
}

// Shared by the KV-cache calls: checks the new keys/values, the lengths and
// the capacity; returns the key lengths after the append.
struct CacheCall {
  std::vector<std::int64_t> lens, total, offsets;  // before append, after append, query positions
  std::int64_t n_new = 0;
};

CacheCall check_cache(const TensorView& q, const TensorView& cache_seqlens, const TensorView& k_new,
                      const TensorView& v_new, std::int64_t b, std::int64_t h_kv, std::int64_t d, std::int64_t dv,
                      std::int64_t capacity, const Options& opt) {
  if (q.rank != 4) throw Error("q", "a 4-D view [B, H, Nq, d]", "rank " + str(q.rank));
  if (opt.key_lengths.is_set())
    throw Error("key_lengths", "unset with a KV cache (cache_seqlens gives the lengths)", "a view");
  CacheCall c;
  c.lens = read_ints(cache_seqlens, "cache_seqlens", b, "[B]");
  if (k_new.is_set() != v_new.is_set())
    throw Error(k_new.is_set() ? "v_new" : "k_new", "to be given together with " + std::string(k_new.is_set() ? "k_new" : "v_new"),
                "only one of them");
  if (k_new.is_set()) {
    for (auto [t, name, x] : {std::tuple{&k_new, "k_new", d}, std::tuple{&v_new, "v_new", dv}}) {
      if (t->rank != 4 || t->shape[0] != b || t->shape[1] != h_kv || t->shape[3] != x || t->dtype != DType::f32)
        throw Error(name, "float32 [B=" + str(b) + ", Hkv=" + str(h_kv) + ", n_new, " + str(x) + "]",
                    std::string(dtype_name(t->dtype)) + " " + t->shape_string());
      if (t->shape[3] > 1 && t->stride[3] != 1) throw Error(name, "a contiguous last axis", "stride " + str(t->stride[3]));
      if (t->numel() > 0 && !t->data) throw Error(name, "non-null data", "nullptr");
    }
    if (v_new.shape[2] != k_new.shape[2])
      throw Error("v_new", "n_new=" + str(k_new.shape[2]) + " (from k_new)", str(v_new.shape[2]));
    c.n_new = k_new.shape[2];
  }
  for (std::int64_t i = 0; i < b; ++i) {
    if (c.lens[i] < 0 || c.lens[i] + c.n_new > capacity)
      throw Error("cache_seqlens", "lengths with cache_seqlens + n_new <= capacity (" + str(capacity) + ")",
                  str(c.lens[i]) + " + " + str(c.n_new) + " at [" + str(i) + "]");
    c.total.push_back(c.lens[i] + c.n_new);
    c.offsets.push_back(c.total.back() - q.shape[2]);  // bottom-right per sequence
  }
  return c;
}

Options cache_options(const Options& opt, const CacheCall& c, std::int64_t b) {
  Options o = opt;
  o.key_lengths = TensorView::contiguous(c.total.data(), DType::i64, {b});
  if (!opt.position_offsets.is_set() && opt.align == Align::bottom_right)
    o.position_offsets = TensorView::contiguous(c.offsets.data(), DType::i64, {b});
  return o;
}

// After make_params: attend to the longest sequence, not the capacity, so the
// plan (and the bits) depend only on the lengths, whatever the storage.
void fit_lengths(Params& p, const CacheCall& c) {
  p.n_kv = 0;
  for (std::int64_t t : c.total) p.n_kv = std::max(p.n_kv, t);
}

}  // namespace

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                      const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k, const Options& opt,
                      std::int64_t max_seqlen_q, std::int64_t max_seqlen_k, bool reference) {
  reject_for_packed(opt);
  const TensorView q4 = packed_as_4d(q, "q", "[total_q, H, d]"), k4 = packed_as_4d(k, "k", "[total_k, Hkv, d]"),
                   v4 = packed_as_4d(v, "v", "[total_k, Hkv, dv]"), o4 = packed_as_4d(o, "o", "[total_q, H, dv]");
  std::vector<std::int64_t> cu_q = read_ints(cu_seqlens_q, "cu_seqlens_q", -1, "[n + 1]");
  std::vector<std::int64_t> cu_k = read_ints(cu_seqlens_k, "cu_seqlens_k", static_cast<std::int64_t>(cu_q.size()),
                                             "[n + 1] (as cu_seqlens_q)");
  check_prefix_sums(cu_q, "cu_seqlens_q", q4.shape[2], max_seqlen_q);
  check_prefix_sums(cu_k, "cu_seqlens_k", k4.shape[2], max_seqlen_k);
  Options o2 = opt;
  if (opt.lse.is_set()) {
    if (opt.lse.rank != 2) throw Error("lse", "a 2-D view [H, total_q]", "rank " + str(opt.lse.rank));
    TensorView l = opt.lse;
    l.rank = 3;
    l.shape = {1, opt.lse.shape[0], opt.lse.shape[1]};
    l.stride = {0, opt.lse.stride[0], opt.lse.stride[1]};
    o2.lse = l;
  }
  Params p = make_params(q4, k4, v4, o4, o2, reference ? Path::reference : Path::fast);
  p.b = static_cast<std::int64_t>(cu_q.size()) - 1;
  p.cu_q = cu_q.data();
  p.cu_k = cu_k.data();
  p.n_q = p.n_kv = 0;
  for (std::int64_t s = 0; s < p.b; ++s) {
    p.n_q = std::max(p.n_q, p.nq(s));
    p.n_kv = std::max(p.n_kv, p.nkv(s));
  }
  run(p, reference);
}

void attention_kvcache(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                       const TensorView& cache_seqlens, const TensorView& k_new, const TensorView& v_new,
                       const TensorView& o, const Options& opt, bool reference) {
  if (k_cache.rank != 4) throw Error("k_cache", "a 4-D view [B, Hkv, capacity, d]", "rank " + str(k_cache.rank));
  if (v_cache.rank != 4) throw Error("v_cache", "a 4-D view [B, Hkv, capacity, dv]", "rank " + str(v_cache.rank));
  const CacheCall c = check_cache(q, cache_seqlens, k_new, v_new, q.shape[0], k_cache.shape[1], k_cache.shape[3],
                                  v_cache.shape[3], std::min(k_cache.shape[2], v_cache.shape[2]), opt);
  Params p = make_params(q, k_cache, v_cache, o, cache_options(opt, c, q.shape[0]),
                         reference ? Path::reference : Path::fast);
  fit_lengths(p, c);
  // Everything is checked: append, then attend.
  for (auto [t, cache, x] : {std::tuple{&k_new, &k_cache, p.d}, std::tuple{&v_new, &v_cache, p.dv}}) {
    if (!t->is_set()) continue;
    for (std::int64_t b = 0; b < p.b; ++b)
      for (std::int64_t hk = 0; hk < p.h_kv; ++hk)
        for (std::int64_t j = 0; j < c.n_new; ++j)
          std::memcpy(static_cast<float*>(cache->data) + b * cache->stride[0] + hk * cache->stride[1] +
                          (c.lens[b] + j) * cache->stride[2],
                      static_cast<const float*>(t->data) + b * t->stride[0] + hk * t->stride[1] + j * t->stride[2],
                      x * sizeof(float));
  }
  run(p, reference);
}

void attention_paged(const TensorView& q, const TensorView& k_pages, const TensorView& v_pages,
                     const TensorView& block_table, const TensorView& cache_seqlens, const TensorView& k_new,
                     const TensorView& v_new, const TensorView& o, const Options& opt, bool reference) {
  for (auto [t, name, axes] : {std::tuple{&k_pages, "k_pages", "[num_pages, page_size, Hkv, d]"},
                               std::tuple{&v_pages, "v_pages", "[num_pages, page_size, Hkv, dv]"}}) {
    if (t->rank != 4) throw Error(name, std::string("a 4-D view ") + axes, "rank " + str(t->rank));
    if (t->shape[1] < 1) throw Error(name, "page_size >= 1", t->shape_string());
  }
  if (v_pages.shape[0] != k_pages.shape[0] || v_pages.shape[1] != k_pages.shape[1] ||
      v_pages.shape[2] != k_pages.shape[2])
    throw Error("v_pages", "num_pages, page_size and Hkv as k_pages " + k_pages.shape_string(), v_pages.shape_string());
  if (q.rank != 4) throw Error("q", "a 4-D view [B, H, Nq, d]", "rank " + str(q.rank));
  if (opt.mask.is_set()) throw Error("mask", "unset with a paged cache", "a view");
  const std::int64_t b = q.shape[0], num_pages = k_pages.shape[0], page_size = k_pages.shape[1];
  if (block_table.rank != 2 || block_table.shape[0] != b)
    throw Error("block_table", "a 2-D view [B=" + str(b) + ", max_pages]", block_table.shape_string());
  if (block_table.dtype != DType::i32 && block_table.dtype != DType::i64)
    throw Error("block_table", "int32 or int64", dtype_name(block_table.dtype));
  const std::int64_t max_pages = block_table.shape[1];
  const CacheCall c = check_cache(q, cache_seqlens, k_new, v_new, b, k_pages.shape[2], k_pages.shape[3],
                                  v_pages.shape[3], max_pages * page_size, opt);
  Broadcast table;
  table.data = block_table.data;
  table.dtype = block_table.dtype;
  table.stride_b = block_table.stride[0];
  table.stride_j = block_table.stride[1];
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t pg = 0; pg * page_size < c.total[i]; ++pg) {
      const std::int64_t e = Params::read_int(table, i, pg);
      if (e < 0 || e >= num_pages)
        throw Error("block_table", "page indices in [0, num_pages=" + str(num_pages) + ")",
                    str(e) + " at [" + str(i) + ", " + str(pg) + "]");
    }
  // make_params sees the pages as [B, Hkv, page_size, d] views of page 0 (for
  // the checks on sizes and dtypes); the page table then takes over the addressing.
  auto as_view = [&](const TensorView& t) {
    TensorView r = t;
    r.shape = {b, t.shape[2], t.shape[1], t.shape[3]};
    r.stride = {0, t.stride[2], t.stride[1], t.stride[3]};
    return r;
  };
  Options o2 = cache_options(opt, c, b);
  // Key lengths are checked against the page-0 view's size; check them against the capacity here instead.
  std::vector<std::int64_t> small(static_cast<std::size_t>(b), 0);
  o2.key_lengths = TensorView::contiguous(small.data(), DType::i64, {b});
  Params p = make_params(q, as_view(k_pages), as_view(v_pages), o, o2, reference ? Path::reference : Path::fast);
  p.key_lengths.data = c.total.data();
  fit_lengths(p, c);
  p.page_table = table;
  p.page_size = page_size;
  p.k.stride_b = k_pages.stride[0];
  p.v.stride_b = v_pages.stride[0];
  // The outputs must not overlap the page pools either (make_params saw page 0 only).
  auto range_of = [](const TensorView& t) {
    const auto lo = reinterpret_cast<std::uintptr_t>(t.data);
    std::int64_t hi = 1;
    for (int a = 0; a < t.rank; ++a) hi += (t.shape[a] - 1) * t.stride[a];
    return std::pair{lo, lo + static_cast<std::uintptr_t>(hi * 4)};
  };
  const auto orng = range_of(o);
  for (auto [t, name] : {std::pair{&k_pages, "k_pages"}, std::pair{&v_pages, "v_pages"}}) {
    const auto r = range_of(*t);
    if (o.numel() > 0 && t->numel() > 0 && orng.first < r.second && r.first < orng.second)
      throw Error("o", std::string("memory disjoint from input ") + name, "overlapping views");
  }
  for (auto [t, pages, x] : {std::tuple{&k_new, &k_pages, p.d}, std::tuple{&v_new, &v_pages, p.dv}}) {
    if (!t->is_set()) continue;
    for (std::int64_t i = 0; i < b; ++i)
      for (std::int64_t hk = 0; hk < p.h_kv; ++hk)
        for (std::int64_t j = 0; j < c.n_new; ++j) {
          const std::int64_t pos = c.lens[i] + j, page = Params::read_int(table, i, pos / page_size);
          std::memcpy(static_cast<float*>(pages->data) + page * pages->stride[0] + (pos % page_size) * pages->stride[1] +
                          hk * pages->stride[2],
                      static_cast<const float*>(t->data) + i * t->stride[0] + hk * t->stride[1] + j * t->stride[2],
                      x * sizeof(float));
        }
  }
  run(p, reference);
}

}  // namespace sdpa
