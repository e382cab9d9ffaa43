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
// Q, K, V and Y in float16, bfloat16 or float32 (float64 too on the
// reference path) are read and written in place, as the library stores them;
// float64 on the fast path is converted to float32 copies (and Y computed in
// float32, converted once at the end), and a strided last axis is copied in
// its own type. present_key / present_value are concatenated in the inputs'
// types. qk_matmul_output is computed in float32 (float64 on the reference
// path) and converted at the end when T1 is another type.
#include "sdpa/onnx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
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

double load(const std::byte* p, DType t) { return load_element(p, t, 0); }

void store(std::byte* p, DType t, double x) {
  switch (t) {
    case DType::boolean: *reinterpret_cast<unsigned char*>(p) = x != 0 ? 1 : 0; return;
    case DType::i32: *reinterpret_cast<std::int32_t*>(p) = static_cast<std::int32_t>(x); return;
    case DType::i64: *reinterpret_cast<std::int64_t*>(p) = static_cast<std::int64_t>(x); return;
    case DType::i8: *reinterpret_cast<std::int8_t*>(p) = static_cast<std::int8_t>(x); return;
    default: store_float(p, t, 0, x); return;
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

// Whether the library stores Q, K, V or O of this type on the path whose
// computation type is `compute` (float16, bfloat16 and float32 on both,
// float64 on the reference path only).
bool stored_natively(DType t, DType compute) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || (compute == DType::f64 && t == DType::f64);
}

// An operand the library can read: the caller's view when its type and last
// axis allow, else a contiguous copy (kept alive in `keep`), in its own type
// when the library stores that type, else converted to `compute`.
TensorView readable(const TensorView& v, DType compute, Owned& keep, const char* name) {
  const bool type_ok = stored_natively(v.dtype, compute);
  const bool last_ok = v.shape[v.rank - 1] <= 1 || v.stride[v.rank - 1] == 1;
  if (type_ok && last_ok) return v;
  keep = converted(v, type_ok ? v.dtype : compute, name);
  return keep.view;
}

Tensor make_tensor(DType dtype, std::vector<std::int64_t> shape, const char* name) {
  Tensor t;
  t.dtype = dtype;
  const std::int64_t n = count(shape, name);
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<std::int64_t>(dtype_size(dtype)), &bytes))
    throw Error(name, "a size in bytes that fits in 64 bits", dims(shape));
  try {
    t.data.resize(static_cast<std::size_t>(bytes));
  } catch (const std::bad_alloc&) {
    throw Error(name, "a tensor that fits in memory", dims(shape) + " (" + str(bytes) + " bytes)");
  }
  t.shape = std::move(shape);
  return t;
}

// The library names its arguments after its own API; the operator's are ONNX's.
constexpr std::pair<const char*, const char*> kOnnxNames[] = {
    {"q", "Q"},
    {"k", "K"},
    {"v", "V"},
    {"o", "Y"},
    {"mask", "attn_mask"},
    {"scores", "qk_matmul_output"},
    {"scores_stage", "qk_matmul_output_mode"},
    {"key_lengths", "nonpad_kv_seqlen"},
    {"position_offsets", "nonpad_kv_seqlen"},
    {"window_left", "left_window_size"},
    {"window_right", "right_window_size"},
    {"scale", "scale"},
    {"softcap", "softcap"},
};

// Rethrows a library error under the ONNX name of its argument; `note`, when
// given, says how the layer derived the view the library saw from the input.
[[noreturn]] void rethrow_onnx(const Error& e, const std::string& note = "") {
  for (const auto& [lib, name] : kOnnxNames)
    if (e.arg() == lib) throw Error(name, e.expected(), e.got() + note);
  throw e;
}

// ---------------------------------------------------------------------------
// Checks. Only what the operator defines beyond the library is checked here:
// opsets, ONNX-only attributes, the 3-D and 4-D input forms, the types T1/T2,
// the past_key/past_value cache and what the layer itself must read to build
// the library's call (conversions, concatenations, mask padding, offsets).
// Shapes, scale, softcap, windows, mask broadcasting and key lengths are the
// library's to check; its errors are renamed to ONNX's names (see kOnnxNames).

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
  if (a.q_num_heads && *a.q_num_heads < 1) throw Error("q_num_heads", "a head count >= 1", str(*a.q_num_heads));
  if (a.kv_num_heads && *a.kv_num_heads < 1) throw Error("kv_num_heads", "a head count >= 1", str(*a.kv_num_heads));
  for (const auto& [name, w] :
       {std::pair{"left_window_size", a.left_window_size}, std::pair{"right_window_size", a.right_window_size}})
    if (a.opset < 25 && w != -1)
      throw Error(name, "-1 at opset " + str(a.opset) + " (the attribute exists from opset 25)", str(w));
}

struct Shape {
  std::int64_t b = 0, hq = 0, hkv = 0, sq = 0, skv = 0, past = 0, t = 0, dv = 0;
  bool short_mask = false;  // attn_mask's last axis is shorter than T (padded with -inf)
  std::int64_t mask_keys = 0;
};

// The layer reads, converts and copies these inputs itself, and sizes its
// outputs from them, before the library sees them: they must be views it can
// walk (the library checks them again as its own arguments, after renaming).
void check_readable(const TensorView& t, const char* name) {
  if (t.rank < 1 || t.rank > kMaxRank) throw Error(name, "a tensor of rank 1 to 4", "rank " + str(t.rank));
  for (int ax = 0; ax < t.rank; ++ax)
    if (t.shape[ax] < 0) throw Error(name, "non-negative sizes", dims(t));
  if (t.numel() > 0 && t.data == nullptr) throw Error(name, "non-null data", "nullptr");
}

// Splits a 3-D input's hidden axis into `heads` heads.
void check_hidden(const TensorView& t, const char* name, std::int64_t heads, const char* attr) {
  if (t.shape[2] % heads != 0)
    throw Error(name, std::string("a hidden size divisible by ") + attr + "=" + str(heads),
                str(t.shape[2]) + " in " + dims(t));
}

// past (B, kv_num_heads, P, X) is concatenated with `now` (the same, with the
// new sequence length) into a present output: every axis but the sequence must
// match `now`, and the sequence `length` when one is given.
void check_past(const TensorView& past, const char* name, const TensorView& now, const char* now_name, const char* x,
                std::optional<std::int64_t> length) {
  const std::string axes = std::string("(B, kv_num_heads, past_sequence_length, ") + x + ")";
  if (past.rank != 4) throw Error(name, "a 4-D tensor " + axes, "rank " + str(past.rank) + " " + dims(past));
  const char* names[4] = {"B", "kv_num_heads", "past_sequence_length", x};
  for (int ax = 0; ax < 4; ++ax) {
    const bool from_past = ax == 2;
    if (from_past && !length) continue;
    const std::int64_t want = from_past ? *length : now.shape[ax];
    if (past.shape[ax] != want)
      throw Error(name, std::string(names[ax]) + "=" + str(want) + " (from " + (from_past ? "past_key" : now_name) + ")",
                  str(past.shape[ax]) + " in " + dims(past));
  }
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
  check_readable(q, "Q");
  check_readable(k, "K");
  check_readable(v, "V");

  Shape s;
  s.b = q.shape[0];
  if (q.rank == 3) {
    if (!a.q_num_heads) throw Error("q_num_heads", "a value for 3-D inputs", "none");
    if (!a.kv_num_heads) throw Error("kv_num_heads", "a value for 3-D inputs", "none");
    s.hq = *a.q_num_heads;
    s.hkv = *a.kv_num_heads;
    check_hidden(q, "Q", s.hq, "q_num_heads");
    check_hidden(k, "K", s.hkv, "kv_num_heads");
    check_hidden(v, "V", s.hkv, "kv_num_heads");
    s.sq = q.shape[1];
    s.skv = k.shape[1];
    s.dv = v.shape[2] / s.hkv;
  } else {
    if (a.opset >= 25 && (a.q_num_heads || a.kv_num_heads)) {
      const char* name = a.q_num_heads ? "q_num_heads" : "kv_num_heads";
      throw Error(name, "no value for 4-D inputs at opset 25", str(a.q_num_heads ? *a.q_num_heads : *a.kv_num_heads));
    }
    s.hq = q.shape[1];
    s.sq = q.shape[2];
    s.hkv = k.shape[1];
    s.skv = k.shape[2];
    s.dv = v.shape[3];
    if (a.q_num_heads && *a.q_num_heads != s.hq)
      throw Error("q_num_heads", str(s.hq) + " (the heads of Q " + dims(q) + ") or no value", str(*a.q_num_heads));
    if (a.kv_num_heads && *a.kv_num_heads != s.hkv)
      throw Error("kv_num_heads", str(s.hkv) + " (the heads of K " + dims(k) + ") or no value", str(*a.kv_num_heads));
  }

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
    check_readable(pk, "past_key");
    check_readable(pv, "past_value");
    check_past(pk, "past_key", heads_first(k, s.hkv), "K", "D", std::nullopt);
    s.past = pk.shape[2];
    check_past(pv, "past_value", heads_first(v, s.hkv), "V", "Dv", s.past);
  }
  if (__builtin_add_overflow(s.past, s.skv, &s.t))
    throw Error("past_key", "a total sequence length that fits in 64 bits", dims(pk));

  // The KV cache outside the operator: nonpad_kv_seqlen (its shape and values are the library's key_lengths).
  const TensorView& np = in.nonpad_kv_seqlen;
  if (np.is_set()) {
    if (a.opset < 24)
      throw Error("nonpad_kv_seqlen", "no such input at opset 23 (it exists from opset 24)", "a tensor " + dims(np));
    if (pk.is_set())
      throw Error("nonpad_kv_seqlen", "no past_key/past_value alongside (the two KV cache modes exclude each other)",
                  "past_key " + dims(pk));
    if (np.dtype != DType::i64) throw Error("nonpad_kv_seqlen", "int64", dtype_name(np.dtype));
    check_readable(np, "nonpad_kv_seqlen");
  }

  // attn_mask: whether its last axis is short (ONNX's rule from opset 24; the
  // library broadcasts the rest).
  const TensorView& m = in.attn_mask;
  if (m.is_set()) {
    check_readable(m, "attn_mask");
    s.mask_keys = m.shape[m.rank - 1];
    // As in the reference implementation, a last axis of 1 < T is short, not broadcast.
    s.short_mask = a.opset >= 24 && s.mask_keys < s.t;
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
  const TensorView& np = in.nonpad_kv_seqlen;
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
  // The present buffers take the new keys' own sizes (the past matches them);
  // the library then checks K and V against Q and each other.
  auto kv = [&](const TensorView& x, const TensorView& past, DType type, bool want, const char* name,
                const char* present_name, Tensor& present, Owned& keep) -> TensorView {
    const TensorView x4 = heads_first(x, s.hkv);
    if (!past.is_set() && !want) return readable(x4, compute, keep, name);
    const std::int64_t width = x4.shape[3];
    std::int64_t total = 0;
    if (__builtin_add_overflow(s.past, x4.shape[2], &total))
      throw Error(present_name, "a total sequence length that fits in 64 bits", str(s.past) + " + " + str(x4.shape[2]));
    present = make_tensor(type, {x4.shape[0], x4.shape[1], total, width}, present_name);
    // An empty present (B, heads or width 0) has nothing to copy and no
    // memory to address.
    if (present.data.empty()) return readable(present.view(), compute, keep, present_name);
    TensorView dst = present.view();
    if (past.is_set()) {
      dst.shape[2] = s.past;
      copy_view(past, dst);
      dst.data = present.data.data() + static_cast<std::size_t>(s.past) * static_cast<std::size_t>(width) * dtype_size(type);
    }
    dst.shape[2] = x4.shape[2];
    copy_view(x4, dst);
    return readable(present.view(), compute, keep, present_name);
  };
  // With a past the concatenation is built (and read) even when the caller does not want it.
  Tensor present_key, present_value;
  const TensorView k = kv(in.K, in.past_key, t1, out.want_present_key, "K", "present_key", present_key, k_keep);
  const TensorView v =
      kv(in.V, in.past_value, t2, out.want_present_value, "V", "present_value", present_value, v_keep);

  Options opt;
  opt.scale = attr.scale ? std::optional<double>(*attr.scale) : std::nullopt;
  opt.causal = attr.is_causal == 1;
  opt.softcap = attr.softcap;
  opt.window_left = attr.left_window_size;
  opt.window_right = attr.right_window_size;

  // Where query i sits among the keys: i + past length, i + nonpad_kv_seqlen[b] - Sq, or i.
  // nonpad_kv_seqlen is read only as far as it goes: the library checks its shape and values.
  std::vector<std::int64_t> offsets, key_lengths;
  if (in.past_key.is_set()) {
    offsets.assign(static_cast<std::size_t>(s.b), s.past);
  } else if (np.is_set()) {
    const std::int64_t given = np.rank == 1 ? std::min(np.shape[0], s.b) : 0;
    for (std::int64_t b = 0; b < s.b; ++b) {
      const std::int64_t n = b < given ? static_cast<const std::int64_t*>(np.data)[b * np.stride[0]] : 0;
      // A length below -2^63 + Sq is refused as a key length by the library;
      // until then its offset just must not overflow.
      std::int64_t off = 0;
      if (__builtin_sub_overflow(n, s.sq, &off)) off = std::numeric_limits<std::int64_t>::min();
      offsets.push_back(off);
    }
  } else {
    opt.align = Align::top_left;
  }
  if (!offsets.empty()) opt.position_offsets = TensorView::contiguous(offsets.data(), DType::i64, {s.b});

  // Keys at j >= nonpad_kv_seqlen[b] are padding; so are the keys beyond a
  // short mask, which its padding disables too.
  if (np.is_set()) {
    opt.key_lengths = np;
  } else if (s.short_mask) {
    key_lengths.assign(static_cast<std::size_t>(s.b), s.mask_keys);
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

  // Y: written in place when the library stores T1, else computed in
  // `compute` and converted at the end.
  const std::vector<std::int64_t> y_shape = in.Q.rank == 3 ? std::vector<std::int64_t>{s.b, s.sq, s.hq * s.dv}
                                                           : std::vector<std::int64_t>{s.b, s.hq, s.sq, s.dv};
  const bool y_direct = stored_natively(t1, compute);
  Tensor y = make_tensor(t1, y_shape, "Y"), y_compute;
  Tensor& y_buf = y_direct ? y : (y_compute = make_tensor(compute, y_shape, "Y"));
  TensorView o;
  if (in.Q.rank == 3) {
    o = TensorView::bshd(y_buf.data.data(), y_buf.dtype, s.b, s.sq, s.hq, s.dv);
  } else {
    o = y_buf.view();
  }

  // qk_matmul_output: the library's scores are float32 (float64 too on the reference path).
  const bool qk_direct = t1 == DType::f32 || t1 == compute;
  Tensor qk, qk_compute;
  if (out.want_qk_matmul_output) {
    const std::vector<std::int64_t> qk_shape = {s.b, s.hq, s.sq, s.t};
    qk = make_tensor(t1, qk_shape, "qk_matmul_output");
    Tensor& qk_buf = qk_direct ? qk : (qk_compute = make_tensor(compute, qk_shape, "qk_matmul_output"));
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
    rethrow_onnx(e, e.arg() == "mask" && s.short_mask
                        ? " (attn_mask " + dims(in.attn_mask) + " padded to T=" + str(s.t) + " keys)"
                        : "");
  }

  if (!y_direct) copy_view(y_compute.view(), y.view());
  if (out.want_qk_matmul_output && !qk_direct) copy_view(qk_compute.view(), qk.view());
  out.Y = std::move(y);
  out.present_key = out.want_present_key ? std::move(present_key) : Tensor{};
  out.present_value = out.want_present_value ? std::move(present_value) : Tensor{};
  out.qk_matmul_output = std::move(qk);
}

}  // namespace sdpa::onnx
