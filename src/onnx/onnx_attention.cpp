// ONNX Attention (opsets 23-25) as a thin layer over sdpa::attention.
//
// What the operator's definition asks, and how it maps onto the library:
//   3-D Q/K/V (B, S, H·X)        a 4-D view [B, H, S, X] with strides (s0, X, s1, 1): no copy
//   GQA (head h reads h / group)  the library's own grouping (Hq / Hkv)
//   past_key / past_value         concatenated into present_key / present_value
//                                 (an output anyway), which the call then reads
//   attn_mask                     Options::mask, broadcast through strides; a
//                                 short last axis (opset >= 24) is padded into a
//                                 copy and also cuts Options::key_lengths
//   nonpad_kv_seqlen              Options::key_lengths, and the causal offset
//                                 nonpad_kv_seqlen[b] - Sq in Options::position_offsets
//   causal offset                 past length with a past, nonpad - Sq with
//                                 nonpad_kv_seqlen, else 0 (Align::top_left)
//   softcap, scale                the library's (softcap before the mask)
//   qk_matmul_output_mode 0..3    Options::scores at ScoresStage 0..3
//   left/right_window_size (25)   Options::window_left / window_right
// Inputs the fast path cannot read in place (float16, bfloat16, float64, a
// strided last axis) are converted to float32 copies; outputs of another
// type than the computation's are computed in float32 (float64 on the
// reference path) and converted once at the end.
#include "sdpa/onnx.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "half.h"
#include "sdpa/attention.h"
#include "sdpa/options.h"

namespace sdpa::onnx {
namespace {

std::string str(std::int64_t x) { return std::to_string(x); }

std::string dims(const TensorView& t) {
  if (t.rank < 1 || t.rank > kMaxRank) return t.rank == 0 ? "none" : "an invalid view";
  return t.shape_string();
}

std::string dims(const std::vector<std::int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + str(s[i]);
  return r + "]";
}

bool is_float(DType t) { return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64; }

constexpr const char* kFloatTypes = "float16, bfloat16, float32 or float64";

// ---------------------------------------------------------------------------
// Elements

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays a (quiet) NaN, overflow gives ±inf.
std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

double load(const std::byte* p, DType t) {
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
    case DType::f64: {
      double d;
      std::memcpy(&d, p, sizeof d);
      return d;
    }
    case DType::f16:
    case DType::bf16: {
      std::uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return t == DType::f16 ? half_to_float(h) : bf16_to_float(h);
    }
    case DType::boolean: return *reinterpret_cast<const unsigned char*>(p) != 0 ? 1.0 : 0.0;
    case DType::i32: {
      std::int32_t i;
      std::memcpy(&i, p, sizeof i);
      return i;
    }
    case DType::i64: {
      std::int64_t i;
      std::memcpy(&i, p, sizeof i);
      return static_cast<double>(i);
    }
  }
  return 0;
}

void store(std::byte* p, DType t, double x) {
  switch (t) {
    case DType::f32: {
      const float f = static_cast<float>(x);
      std::memcpy(p, &f, sizeof f);
      return;
    }
    case DType::f64: std::memcpy(p, &x, sizeof x); return;
    case DType::f16:
    case DType::bf16: {
      const float f = static_cast<float>(x);
      const std::uint16_t h = t == DType::f16 ? float_to_half(f) : float_to_bf16(f);
      std::memcpy(p, &h, sizeof h);
      return;
    }
    case DType::boolean: *reinterpret_cast<unsigned char*>(p) = x != 0 ? 1 : 0; return;
    case DType::i32: {
      const auto i = static_cast<std::int32_t>(x);
      std::memcpy(p, &i, sizeof i);
      return;
    }
    case DType::i64: {
      const auto i = static_cast<std::int64_t>(x);
      std::memcpy(p, &i, sizeof i);
      return;
    }
  }
}

// ---------------------------------------------------------------------------
// Views and copies

std::int64_t count(const std::vector<std::int64_t>& shape, const char* name) {
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw Error(name, "an element count that fits in 64 bits", dims(shape));
  return n;
}

// Copies src into dst (same shape, any strides, rank <= 4), converting the element type.
void copy_view(const TensorView& src, const TensorView& dst) {
  std::int64_t n[4] = {1, 1, 1, 1}, ss[4] = {0, 0, 0, 0}, ds[4] = {0, 0, 0, 0};
  for (int a = 0; a < src.rank; ++a) {
    const int f = 4 - src.rank + a;
    n[f] = src.shape[a];
    ss[f] = src.stride[a];
    ds[f] = dst.stride[a];
  }
  if (n[0] * n[1] * n[2] * n[3] == 0) return;
  const std::int64_t se = static_cast<std::int64_t>(dtype_size(src.dtype));
  const std::int64_t de = static_cast<std::int64_t>(dtype_size(dst.dtype));
  const bool rows = src.dtype == dst.dtype && (n[3] == 1 || (ss[3] == 1 && ds[3] == 1));
  const auto* s0 = static_cast<const std::byte*>(src.data);
  auto* d0 = static_cast<std::byte*>(dst.data);
  for (std::int64_t i0 = 0; i0 < n[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < n[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < n[2]; ++i2) {
        const std::byte* s = s0 + (i0 * ss[0] + i1 * ss[1] + i2 * ss[2]) * se;
        std::byte* d = d0 + (i0 * ds[0] + i1 * ds[1] + i2 * ds[2]) * de;
        if (rows) {
          std::memcpy(d, s, static_cast<std::size_t>(n[3] * se));
          continue;
        }
        for (std::int64_t j = 0; j < n[3]; ++j)
          store(d + j * ds[3] * de, dst.dtype, load(s + j * ss[3] * se, src.dtype));
      }
}

std::vector<std::int64_t> shape_of(const TensorView& t) { return {t.shape.begin(), t.shape.begin() + t.rank}; }

// Memory owned by the call (conversions, padded masks, offsets), with a view over it.
struct Owned {
  std::vector<std::byte> bytes;
  TensorView view;
};

// A C-order copy of `src` with element type `dtype`.
Owned converted(const TensorView& src, DType dtype, const char* name) {
  Owned o;
  const std::vector<std::int64_t> shape = shape_of(src);
  o.bytes.resize(static_cast<std::size_t>(count(shape, name)) * dtype_size(dtype));
  o.view = TensorView::contiguous(o.bytes.data(), dtype, shape);
  copy_view(src, o.view);
  return o;
}

// A 3-D (B, S, H·X) input as the 4-D view [B, H, S, X]; a 4-D input as it is.
TensorView heads_first(const TensorView& t, std::int64_t heads) {
  if (t.rank == 4) return t;
  TensorView v;
  v.data = t.data;
  v.dtype = t.dtype;
  v.rank = 4;
  const std::int64_t x = t.shape[2] / heads;
  v.shape = {t.shape[0], heads, t.shape[1], x};
  v.stride = {t.stride[0], x * t.stride[2], t.stride[1], t.stride[2]};
  return v;
}

// An operand the library can read: the caller's view when its type and last
// axis allow, else a converted contiguous copy (kept alive in `keep`).
TensorView readable(const TensorView& v, DType compute, Owned& keep, const char* name) {
  const bool type_ok = v.dtype == DType::f32 || (compute == DType::f64 && v.dtype == DType::f64);
  const bool last_ok = v.shape[v.rank - 1] <= 1 || v.stride[v.rank - 1] == 1;
  if (type_ok && last_ok) return v;
  keep = converted(v, compute, name);
  return keep.view;
}

Tensor make_tensor(DType dtype, std::vector<std::int64_t> shape, const char* name) {
  Tensor t;
  t.dtype = dtype;
  t.data.resize(static_cast<std::size_t>(count(shape, name)) * dtype_size(dtype));
  t.shape = std::move(shape);
  return t;
}

// The library names its arguments after its own API; say which ONNX input,
// output or attribute that is.
[[noreturn]] void rethrow_onnx(const Error& e) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"q", "Q"},
      {"k", "K"},
      {"v", "V"},
      {"o", "Y"},
      {"mask", "attn_mask"},
      {"scores", "qk_matmul_output"},
      {"key_lengths", "nonpad_kv_seqlen"},
      {"position_offsets", "nonpad_kv_seqlen"},
      {"window_left", "left_window_size"},
      {"window_right", "right_window_size"},
  };
  if (e.arg().empty()) throw e;
  for (const auto& [lib, name] : kNames)
    if (e.arg() == lib) throw Error(name, e.expected(), e.got());
  throw e;
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// ---------------------------------------------------------------------------
// Checks

void check_attributes(const AttentionAttributes& a) {
  if (a.opset < 23 || a.opset > 25) throw Error("opset", "23, 24 or 25", str(a.opset));
  if (a.is_causal != 0 && a.is_causal != 1) throw Error("is_causal", "0 or 1", str(a.is_causal));
  if (a.qk_matmul_output_mode < 0 || a.qk_matmul_output_mode > 3)
    throw Error("qk_matmul_output_mode", "0, 1, 2 or 3", str(a.qk_matmul_output_mode));
  if (a.softmax_precision) {
    const std::int64_t p = *a.softmax_precision;
    if (p != 1 && p != 10 && p != 11 && p != 16)
      throw Error("softmax_precision", "1 (FLOAT), 10 (FLOAT16), 11 (DOUBLE) or 16 (BFLOAT16)", str(p));
  }
  if (a.scale && !(std::isfinite(*a.scale) && *a.scale > 0)) throw Error("scale", "a finite number > 0", num(*a.scale));
  if (!(std::isfinite(a.softcap) && a.softcap >= 0))
    throw Error("softcap", "0 (off) or a finite number > 0", num(a.softcap));
  if (a.q_num_heads && *a.q_num_heads < 1) throw Error("q_num_heads", "a head count >= 1", str(*a.q_num_heads));
  if (a.kv_num_heads && *a.kv_num_heads < 1) throw Error("kv_num_heads", "a head count >= 1", str(*a.kv_num_heads));
  for (const auto& [name, w] :
       {std::pair{"left_window_size", a.left_window_size}, std::pair{"right_window_size", a.right_window_size}}) {
    if (w < -1) throw Error(name, "-1 (unbounded) or a key count >= 0", str(w));
    if (a.opset < 25 && w != -1)
      throw Error(name, "-1 at opset " + str(a.opset) + " (the attribute exists from opset 25)", str(w));
  }
}

struct Shape {
  std::int64_t b = 0, hq = 0, hkv = 0, sq = 0, skv = 0, past = 0, t = 0, d = 0, dv = 0;
  bool short_mask = false;  // attn_mask's last axis is shorter than T (padded with -inf)
  std::int64_t mask_keys = 0;
};

// what: "batch B (from Q)" -> "expected batch B=2 (from Q), got 3 in [3, 4, 5, 8]".
void check_size(const TensorView& t, const char* name, int axis, std::int64_t want, const std::string& what) {
  if (t.shape[axis] == want) return;
  const auto paren = what.find(" (");
  const std::string label = paren == std::string::npos ? what + "=" + str(want)
                                                       : what.substr(0, paren) + "=" + str(want) + what.substr(paren);
  throw Error(name, label, str(t.shape[axis]) + " in " + dims(t));
}

// Splits a 3-D input's hidden axis into `heads` heads; returns the head size.
std::int64_t split_hidden(const TensorView& t, const char* name, std::int64_t heads, const char* attr) {
  if (t.shape[2] % heads != 0)
    throw Error(name, std::string("a hidden size divisible by ") + attr + "=" + str(heads),
                str(t.shape[2]) + " in " + dims(t));
  return t.shape[2] / heads;
}

Shape check_inputs(const AttentionInputs& in, const AttentionAttributes& a) {
  for (const auto& [name, t] : {std::pair{"Q", &in.Q}, std::pair{"K", &in.K}, std::pair{"V", &in.V}})
    if (!t->is_set()) throw Error(name, "a tensor", "none");
  if (!is_float(in.Q.dtype)) throw Error("Q", std::string(kFloatTypes) + " (T1)", dtype_name(in.Q.dtype));
  if (in.K.dtype != in.Q.dtype)
    throw Error("K", std::string("the type of Q (T1) ") + dtype_name(in.Q.dtype), dtype_name(in.K.dtype));
  if (!is_float(in.V.dtype)) throw Error("V", std::string(kFloatTypes) + " (T2)", dtype_name(in.V.dtype));

  const TensorView &q = in.Q, &k = in.K, &v = in.V;
  if (q.rank != 3 && q.rank != 4)
    throw Error("Q", "a 4-D (B, q_num_heads, Sq, D) or 3-D (B, Sq, q_num_heads·D) tensor",
                "rank " + str(q.rank) + " " + dims(q));
  if (k.rank != q.rank) throw Error("K", "rank " + str(q.rank) + " (from Q)", "rank " + str(k.rank) + " " + dims(k));
  if (v.rank != q.rank) throw Error("V", "rank " + str(q.rank) + " (from Q)", "rank " + str(v.rank) + " " + dims(v));
  for (const auto& [name, t] : {std::pair{"Q", &q}, std::pair{"K", &k}, std::pair{"V", &v}})
    for (int ax = 0; ax < t->rank; ++ax)
      if (t->shape[ax] < 0) throw Error(name, "non-negative sizes", dims(*t));

  Shape s;
  s.b = q.shape[0];
  std::int64_t dk = 0;
  if (q.rank == 3) {
    if (!a.q_num_heads) throw Error("q_num_heads", "a value for 3-D inputs", "none");
    if (!a.kv_num_heads) throw Error("kv_num_heads", "a value for 3-D inputs", "none");
    s.hq = *a.q_num_heads;
    s.hkv = *a.kv_num_heads;
    s.sq = q.shape[1];
    s.d = split_hidden(q, "Q", s.hq, "q_num_heads");
    check_size(k, "K", 0, s.b, "batch B (from Q)");
    s.skv = k.shape[1];
    dk = split_hidden(k, "K", s.hkv, "kv_num_heads");
    check_size(v, "V", 0, s.b, "batch B (from Q)");
    check_size(v, "V", 1, s.skv, "kv_sequence_length (from K)");
    s.dv = split_hidden(v, "V", s.hkv, "kv_num_heads");
    if (s.hq % s.hkv != 0) throw Error("kv_num_heads", "a divisor of q_num_heads=" + str(s.hq), str(s.hkv));
  } else {
    if (a.opset >= 25 && (a.q_num_heads || a.kv_num_heads)) {
      const char* name = a.q_num_heads ? "q_num_heads" : "kv_num_heads";
      throw Error(name, "no value for 4-D inputs at opset 25", str(a.q_num_heads ? *a.q_num_heads : *a.kv_num_heads));
    }
    s.hq = q.shape[1];
    s.sq = q.shape[2];
    s.d = q.shape[3];
    check_size(k, "K", 0, s.b, "batch B (from Q)");
    s.hkv = k.shape[1];
    s.skv = k.shape[2];
    dk = k.shape[3];
    check_size(v, "V", 0, s.b, "batch B (from Q)");
    check_size(v, "V", 1, s.hkv, "kv_num_heads (from K)");
    check_size(v, "V", 2, s.skv, "kv_sequence_length (from K)");
    s.dv = v.shape[3];
    if (a.q_num_heads && *a.q_num_heads != s.hq)
      throw Error("q_num_heads", str(s.hq) + " (the heads of Q " + dims(q) + ") or no value", str(*a.q_num_heads));
    if (a.kv_num_heads && *a.kv_num_heads != s.hkv)
      throw Error("kv_num_heads", str(s.hkv) + " (the heads of K " + dims(k) + ") or no value", str(*a.kv_num_heads));
    if (s.hq < 1) throw Error("Q", "q_num_heads >= 1", str(s.hq) + " in " + dims(q));
    if (s.hkv < 1 || s.hq % s.hkv != 0)
      throw Error("K", "kv_num_heads dividing q_num_heads=" + str(s.hq) + " (from Q)", str(s.hkv) + " in " + dims(k));
  }
  if (s.d < 1) throw Error("Q", "head size D >= 1", str(s.d) + " in " + dims(q));
  if (dk != s.d) throw Error("K", "head size D=" + str(s.d) + " (from Q)", str(dk) + " in " + dims(k));
  if (s.dv < 1) throw Error("V", "head size Dv >= 1", str(s.dv) + " in " + dims(v));

  // The KV cache inside the operator: past_key and past_value, together.
  const TensorView &pk = in.past_key, &pv = in.past_value;
  if (pk.is_set() != pv.is_set()) {
    if (pk.is_set()) throw Error("past_value", "a tensor (past_key and past_value go together)", "none");
    throw Error("past_key", "a tensor (past_key and past_value go together)", "none");
  }
  if (pk.is_set()) {
    if (pk.dtype != q.dtype)
      throw Error("past_key", std::string("the type of Q (T1) ") + dtype_name(q.dtype), dtype_name(pk.dtype));
    if (pv.dtype != v.dtype)
      throw Error("past_value", std::string("the type of V (T2) ") + dtype_name(v.dtype), dtype_name(pv.dtype));
    if (pk.rank != 4)
      throw Error("past_key", "a 4-D tensor (B, kv_num_heads, past_sequence_length, D)",
                  "rank " + str(pk.rank) + " " + dims(pk));
    if (pv.rank != 4)
      throw Error("past_value", "a 4-D tensor (B, kv_num_heads, past_sequence_length, Dv)",
                  "rank " + str(pv.rank) + " " + dims(pv));
    check_size(pk, "past_key", 0, s.b, "batch B (from Q)");
    check_size(pk, "past_key", 1, s.hkv, "kv_num_heads (from K)");
    check_size(pk, "past_key", 3, s.d, "head size D (from Q)");
    s.past = pk.shape[2];
    if (s.past < 0) throw Error("past_key", "non-negative sizes", dims(pk));
    check_size(pv, "past_value", 0, s.b, "batch B (from Q)");
    check_size(pv, "past_value", 1, s.hkv, "kv_num_heads (from K)");
    check_size(pv, "past_value", 2, s.past, "past_sequence_length (from past_key)");
    check_size(pv, "past_value", 3, s.dv, "head size Dv (from V)");
  }
  if (__builtin_add_overflow(s.past, s.skv, &s.t))
    throw Error("past_key", "a total sequence length that fits in 64 bits", dims(pk));

  // The KV cache outside the operator: nonpad_kv_seqlen.
  const TensorView& np = in.nonpad_kv_seqlen;
  if (np.is_set()) {
    if (a.opset < 24)
      throw Error("nonpad_kv_seqlen", "no such input at opset 23 (it exists from opset 24)", "a tensor " + dims(np));
    if (pk.is_set())
      throw Error("nonpad_kv_seqlen", "no past_key/past_value alongside (the two KV cache modes exclude each other)",
                  "past_key " + dims(pk));
    if (np.dtype != DType::i64) throw Error("nonpad_kv_seqlen", "int64", dtype_name(np.dtype));
    if (np.rank != 1 || np.shape[0] != s.b) throw Error("nonpad_kv_seqlen", "shape (B) = [" + str(s.b) + "]", dims(np));
    if (s.b > 0 && np.data == nullptr) throw Error("nonpad_kv_seqlen", "non-null data", "nullptr");
    for (std::int64_t bi = 0; bi < s.b; ++bi) {
      const std::int64_t n = static_cast<const std::int64_t*>(np.data)[bi * np.stride[0]];
      if (n < 0 || n > s.t)
        throw Error("nonpad_kv_seqlen", "values in [0, T=" + str(s.t) + "]", str(n) + " at [" + str(bi) + "]");
    }
  }

  // attn_mask: broadcast from the right against (B, q_num_heads, Sq, T).
  const TensorView& m = in.attn_mask;
  if (m.is_set()) {
    const std::int64_t full[4] = {s.b, s.hq, s.sq, s.t};
    const std::string target =
        "(B, q_num_heads, Sq, T) = [" + str(s.b) + ", " + str(s.hq) + ", " + str(s.sq) + ", " + str(s.t) + "]";
    if (m.rank > 4)
      throw Error("attn_mask", "rank 1 to 4, broadcastable to " + target, "rank " + str(m.rank) + " " + dims(m));
    for (int ax = 0; ax < m.rank; ++ax)
      if (m.shape[ax] < 0) throw Error("attn_mask", "non-negative sizes", dims(m));
    bool ok = true;
    for (int ax = 0; ax + 1 < m.rank; ++ax) {
      const std::int64_t want = full[4 - m.rank + ax];
      ok &= m.shape[ax] == 1 || m.shape[ax] == want;
    }
    const std::int64_t last = m.shape[m.rank - 1];
    s.mask_keys = last;
    if (last != s.t) {
      if (a.opset >= 24 && last < s.t) {
        s.short_mask = true;  // as in the reference implementation, a last axis of 1 < T is short, not broadcast
      } else if (a.opset == 23 && last == 1) {
        s.mask_keys = s.t;  // broadcast
      } else {
        ok = false;
      }
    }
    if (!ok)
      throw Error("attn_mask",
                  "a shape broadcastable to " + target + " (each axis 1 or full size" +
                      (a.opset >= 24 ? std::string(", the last one at most T)") : std::string(")")),
                  dims(m));
    if (m.numel() > 0 && m.data == nullptr) throw Error("attn_mask", "non-null data", "nullptr");
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

TensorView Tensor::view() const { return TensorView::contiguous(data.data(), dtype, shape); }

void attention(const AttentionInputs& in, const AttentionAttributes& attr, AttentionOutputs& out, bool reference) {
  check_attributes(attr);
  const Shape s = check_inputs(in, attr);
  const DType compute = reference ? DType::f64 : DType::f32;
  const DType t1 = in.Q.dtype, t2 = in.V.dtype;

  if (out.want_qk_matmul_output) {
    std::int64_t n = 0;
    if (__builtin_mul_overflow(s.b, s.hq, &n) || __builtin_mul_overflow(n, s.sq, &n) ||
        __builtin_mul_overflow(n, s.t, &n) || n > kMaxProbsElements)
      throw Error("qk_matmul_output", "at most " + str(kMaxProbsElements) + " elements (B·q_num_heads·Sq·T)",
                  "[" + str(s.b) + ", " + str(s.hq) + ", " + str(s.sq) + ", " + str(s.t) + "]");
  }

  // Q as [B, Hq, Sq, D].
  Owned q_keep, k_keep, v_keep;
  const TensorView q = readable(heads_first(in.Q, s.hq), compute, q_keep, "Q");

  // K and V as [B, Hkv, T, X]: the new keys alone, or past + new in the present buffers.
  auto kv = [&](const TensorView& x, const TensorView& past, DType type, std::int64_t width, bool want,
                const char* name, const char* present_name, Tensor& present, Owned& keep) -> TensorView {
    const TensorView x4 = heads_first(x, s.hkv);
    if (!past.is_set() && !want) return readable(x4, compute, keep, name);
    present = make_tensor(type, {s.b, s.hkv, s.t, width}, present_name);
    TensorView dst = present.view();
    if (past.is_set()) {
      dst.shape[2] = s.past;
      copy_view(past, dst);
      dst.data = present.data.data() + static_cast<std::size_t>(s.past * width) * dtype_size(type);
    }
    dst.shape[2] = s.skv;
    copy_view(x4, dst);
    return readable(present.view(), compute, keep, present_name);
  };
  // With a past the concatenation is built (and read) even when the caller does not want it.
  Tensor present_key, present_value;
  const TensorView k = kv(in.K, in.past_key, t1, s.d, out.want_present_key, "K", "present_key", present_key, k_keep);
  const TensorView v =
      kv(in.V, in.past_value, t2, s.dv, out.want_present_value, "V", "present_value", present_value, v_keep);

  Options opt;
  opt.scale = attr.scale ? std::optional<double>(*attr.scale) : std::nullopt;
  opt.causal = attr.is_causal == 1;
  opt.softcap = attr.softcap;
  opt.window_left = attr.left_window_size;
  opt.window_right = attr.right_window_size;

  // Where query i sits among the keys: i + past length, i + nonpad_kv_seqlen[b] - Sq, or i.
  std::vector<std::int64_t> offsets, key_lengths;
  const TensorView& np = in.nonpad_kv_seqlen;
  auto nonpad = [&](std::int64_t b) { return static_cast<const std::int64_t*>(np.data)[b * np.stride[0]]; };
  if (in.past_key.is_set()) {
    offsets.assign(static_cast<std::size_t>(s.b), s.past);
  } else if (np.is_set()) {
    for (std::int64_t b = 0; b < s.b; ++b) offsets.push_back(nonpad(b) - s.sq);
  } else {
    opt.align = Align::top_left;
  }
  if (!offsets.empty()) opt.position_offsets = TensorView::contiguous(offsets.data(), DType::i64, {s.b});

  // Keys at j >= nonpad_kv_seqlen[b], and beyond a short mask, are padding.
  if (np.is_set() || s.short_mask) {
    for (std::int64_t b = 0; b < s.b; ++b)
      key_lengths.push_back(std::min(np.is_set() ? nonpad(b) : s.t, s.short_mask ? s.mask_keys : s.t));
    opt.key_lengths = TensorView::contiguous(key_lengths.data(), DType::i64, {s.b});
  }

  // The mask, read in place unless its type needs converting or its last axis padding.
  Owned mask_keep;
  if (in.attn_mask.is_set()) {
    const TensorView& m = in.attn_mask;
    const bool native = m.dtype == DType::boolean || m.dtype == DType::f32 || m.dtype == DType::f16 ||
                        (reference && m.dtype == DType::f64);
    const DType type = native ? m.dtype : DType::f32;
    if (s.short_mask) {
      std::vector<std::int64_t> shape = shape_of(m);
      shape.back() = s.t;
      mask_keep.bytes.resize(static_cast<std::size_t>(count(shape, "attn_mask")) * dtype_size(type));
      mask_keep.view = TensorView::contiguous(mask_keep.bytes.data(), type, shape);
      const double pad = type == DType::boolean ? 0.0 : -std::numeric_limits<double>::infinity();
      const std::size_t es = dtype_size(type);
      std::byte pad_bytes[8];
      store(pad_bytes, type, pad);
      for (std::size_t i = 0; i < mask_keep.bytes.size(); i += es)
        std::memcpy(mask_keep.bytes.data() + i, pad_bytes, es);
      TensorView head = mask_keep.view;
      head.shape[head.rank - 1] = s.mask_keys;
      copy_view(m, head);
      opt.mask = mask_keep.view;
    } else if (!native) {
      mask_keep = converted(m, type, "attn_mask");
      opt.mask = mask_keep.view;
    } else {
      opt.mask = m;
    }
  }

  // Y: computed in place when its type is the computation's, else converted at the end.
  const std::vector<std::int64_t> y_shape = in.Q.rank == 3 ? std::vector<std::int64_t>{s.b, s.sq, s.hq * s.dv}
                                                           : std::vector<std::int64_t>{s.b, s.hq, s.sq, s.dv};
  Tensor y = make_tensor(t1, y_shape, "Y"), y_compute;
  Tensor& y_buf = t1 == compute ? y : (y_compute = make_tensor(compute, y_shape, "Y"));
  TensorView o;
  if (in.Q.rank == 3) {
    o = TensorView::bshd(y_buf.data.data(), compute, s.b, s.sq, s.hq, s.dv);
  } else {
    o = y_buf.view();
  }

  Tensor qk, qk_compute;
  if (out.want_qk_matmul_output) {
    const std::vector<std::int64_t> qk_shape = {s.b, s.hq, s.sq, s.t};
    qk = make_tensor(t1, qk_shape, "qk_matmul_output");
    Tensor& qk_buf = t1 == compute ? qk : (qk_compute = make_tensor(compute, qk_shape, "qk_matmul_output"));
    opt.scores = qk_buf.view();
    opt.scores_stage = static_cast<ScoresStage>(attr.qk_matmul_output_mode);
  }

  try {
    if (reference) {
      reference_attention(q, k, v, o, opt);
    } else {
      sdpa::attention(q, k, v, o, opt);
    }
  } catch (const Error& e) {
    rethrow_onnx(e);
  }

  if (t1 != compute) {
    copy_view(y_compute.view(), y.view());
    if (out.want_qk_matmul_output) copy_view(qk_compute.view(), qk.view());
  }
  out.Y = std::move(y);
  out.present_key = out.want_present_key ? std::move(present_key) : Tensor{};
  out.present_value = out.want_present_value ? std::move(present_value) : Tensor{};
  out.qk_matmul_output = std::move(qk);
}

}  // namespace sdpa::onnx
