// The one place where the inputs of an attention call are checked.
//
// Everything a kernel relies on is established here and recorded in Params:
// ranks, matching sizes, dtypes, contiguous last axes, non-null data, outputs
// that do not overlap inputs, a usable scale, a thread count and an ISA the
// CPU can run. A rejected call has written nothing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/dispatch.h"
#include "params.h"
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

ByteRange byte_range(const TensorView& t, const char* name) {
  ByteRange r;
  if (t.numel() == 0) return r;
  const auto base = reinterpret_cast<std::intptr_t>(t.data);
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(t.dtype));
  std::int64_t lo = 0, hi = 0;  // element offsets
  for (int a = 0; a < t.rank; ++a) {
    std::int64_t span = 0;
    if (__builtin_mul_overflow(t.shape[a] - 1, t.stride[a], &span))
      throw Error(name, "strides whose extent fits in 64 bits", "stride " + str(t.stride[a]) + " on axis " +
                                                                     str(a));
    (span < 0 ? lo : hi) += span;
  }
  std::int64_t lo_b = 0, hi_b = 0;
  if (__builtin_mul_overflow(lo, es, &lo_b) || __builtin_mul_overflow(hi + 1, es, &hi_b))
    throw Error(name, "an extent that fits in 64 bits", dims(t));
  r.lo = static_cast<std::uintptr_t>(base + lo_b);
  r.hi = static_cast<std::uintptr_t>(base + hi_b);
  return r;
}

bool overlap(ByteRange a, ByteRange b) { return !a.empty() && !b.empty() && a.lo < b.hi && b.lo < a.hi; }

// Shape and storage checks common to every operand.
void check_view(const TensorView& t, const char* name, int rank, const char* axes) {
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

void check_dtype(const TensorView& t, const char* name, Path path) {
  const bool ok = t.dtype == DType::f32 || (path == Path::reference && t.dtype == DType::f64);
  if (!ok)
    throw Error(name, path == Path::fast ? "float32" : "float32 or float64", dtype_name(t.dtype));
}

// what: "batch B (from q)" -> message "expected batch B=2 (from q), got 1 in [1, 4, 5, 8]".
void check_size(const TensorView& t, const char* name, int axis, std::int64_t want, const std::string& what) {
  const auto paren = what.find(" (");
  const std::string label = paren == std::string::npos ? what + "=" + str(want)
                                                       : what.substr(0, paren) + "=" + str(want) + what.substr(paren);
  if (t.shape[axis] != want) throw Error(name, label, str(t.shape[axis]) + " in " + dims(t));
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

// A [B] vector of int32/int64 (per-batch offsets, key lengths).
Broadcast batch_ints(const TensorView& t, const char* name, std::int64_t b) {
  check_view(t, name, 1, "[B]");
  if (t.dtype != DType::i32 && t.dtype != DType::i64)
    throw Error(name, "int32 or int64", dtype_name(t.dtype));
  check_size(t, name, 0, b, "batch B (from q)");
  Broadcast r;
  r.data = t.data;
  r.dtype = t.dtype;
  r.stride_b = t.stride[0];
  return r;
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

void check_modifiers(Params& p, const Options& opt, Path path) {
  if (opt.position_offsets.is_set()) p.position_offsets = batch_ints(opt.position_offsets, "position_offsets", p.b);
  if (opt.key_lengths.is_set()) {
    p.key_lengths = batch_ints(opt.key_lengths, "key_lengths", p.b);
    for (std::int64_t b = 0; b < p.b; ++b) {
      const std::int64_t n = Params::read_int(p.key_lengths, b);
      if (n < 0 || n > p.n_kv)
        throw Error("key_lengths", "values in [0, Nkv=" + str(p.n_kv) + "]", str(n) + " at [" + str(b) + "]");
    }
  }
  if (opt.mask.is_set()) {
    const DType t = opt.mask.dtype;
    const bool ok = t == DType::boolean || t == DType::f32 || t == DType::f16 || (path == Path::reference && t == DType::f64);
    if (!ok) throw Error("mask", "bool, float32 or float16", dtype_name(t));
    const std::int64_t full[4] = {p.b, p.h, p.n_q, p.n_kv};
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

}  // namespace

Params make_params(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                   const Options& opt, Path path) {
  check_view(q, "q", 4, "[B, H, Nq, d]");
  check_view(k, "k", 4, "[B, Hkv, Nkv, d]");
  check_view(v, "v", 4, "[B, Hkv, Nkv, dv]");
  check_view(o, "o", 4, "[B, H, Nq, dv]");
  check_dtype(q, "q", path);
  check_dtype(k, "k", path);
  check_dtype(v, "v", path);
  check_dtype(o, "o", path);

  Params p;
  p.b = q.shape[0];
  p.h = q.shape[1];
  p.n_q = q.shape[2];
  p.d = q.shape[3];
  p.h_kv = k.shape[1];
  p.n_kv = k.shape[2];
  p.dv = v.shape[3];

  if (p.d < 1) throw Error("q", "head size d >= 1", str(p.d) + " in " + dims(q));
  check_size(k, "k", 0, p.b, "batch B (from q)");
  check_size(k, "k", 3, p.d, "head size d (from q)");
  if (p.h_kv == 0 ? p.h != 0 : p.h % p.h_kv != 0)
    throw Error("k", "heads Hkv dividing H=" + str(p.h) + " (from q)", str(p.h_kv) + " in " + dims(k));
  check_size(v, "v", 0, p.b, "batch B (from q)");
  check_size(v, "v", 1, p.h_kv, "heads Hkv (from k)");
  check_size(v, "v", 2, p.n_kv, "keys Nkv (from k)");
  if (p.dv < 1) throw Error("v", "value size dv >= 1", str(p.dv) + " in " + dims(v));
  check_size(o, "o", 0, p.b, "batch B (from q)");
  check_size(o, "o", 1, p.h, "heads H (from q)");
  check_size(o, "o", 2, p.n_q, "queries Nq (from q)");
  check_size(o, "o", 3, p.dv, "value size dv (from v)");
  p.group = p.h_kv > 0 ? p.h / p.h_kv : 1;

  if (opt.scale) {
    const double s = *opt.scale;
    if (!std::isfinite(s) || !(s > 0))
      throw Error("scale", "a finite number > 0", std::to_string(s));
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
  check_modifiers(p, opt, path);

  if (opt.threads < 0 || opt.threads > 1024)
    throw Error("threads", "0 (all hardware threads) or 1..1024", str(opt.threads));
  p.threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.isa = cpu::select_isa(opt.isa);

  p.q = operand(q);
  p.k = operand(k);
  p.v = operand(v);
  p.o = operand(o);

  // Outputs must not overlap any input or each other: the kernels read inputs
  // after writing outputs.
  const ByteRange in[3] = {byte_range(q, "q"), byte_range(k, "k"), byte_range(v, "v")};
  const char* in_names[3] = {"q", "k", "v"};
  auto check_output = [&](const TensorView& t, const char* name) {
    const ByteRange r = byte_range(t, name);
    for (int i = 0; i < 3; ++i)
      if (overlap(r, in[i]))
        throw Error(name, std::string("memory disjoint from input ") + in_names[i], "overlapping views");
    return r;
  };
  // Every optional output: its shape, dtype, and memory disjoint from the
  // inputs and from each output checked before it.
  std::vector<std::pair<ByteRange, const char*>> outputs = {{check_output(o, "o"), "o"}};
  auto check_extra_output = [&](const TensorView& t, const char* name, bool matrix) {
    if (matrix) {
      check_view(t, name, 4, "[B, H, Nq, Nkv]");
    } else {
      check_view(t, name, 3, "[B, H, Nq]");
    }
    check_dtype(t, name, path);
    check_size(t, name, 0, p.b, "batch B (from q)");
    check_size(t, name, 1, p.h, "heads H (from q)");
    check_size(t, name, 2, p.n_q, "queries Nq (from q)");
    if (matrix) {
      check_size(t, name, 3, p.n_kv, "keys Nkv (from k)");
      if (t.numel() > kMaxProbsElements)
        throw Error(name, "at most " + str(kMaxProbsElements) + " elements (B*H*Nq*Nkv)", str(t.numel()));
    }
    const ByteRange r = check_output(t, name);
    for (const auto& [other, other_name] : outputs)
      if (overlap(r, other))
        throw Error(name, std::string("memory disjoint from output ") + other_name, "overlapping views");
    outputs.emplace_back(r, name);
    Operand op = operand(t);
    op.stride_n = t.stride[2];
    return op;
  };
  if (opt.lse.is_set()) p.lse = check_extra_output(opt.lse, "lse", false);
  if (opt.probs.is_set()) p.probs = check_extra_output(opt.probs, "probs", true);
  if (opt.scores.is_set()) {
    const int stage = static_cast<int>(opt.scores_stage);
    if (stage < 0 || stage > 3) throw Error("scores_stage", "0..3", str(stage));
    p.scores = check_extra_output(opt.scores, "scores", true);
    p.scores_stage = opt.scores_stage;
  }
  return p;
}

}  // namespace sdpa
