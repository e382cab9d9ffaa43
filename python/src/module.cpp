// sdpa._sdpa: the nanobind extension behind the Python package.
//
// Thin by design: every array (NumPy, PyTorch or anything else that speaks
// DLPack or the buffer protocol) becomes a TensorView over the caller's own
// memory, keyword arguments become one sdpa::Options, and the C++ library
// checks everything, once, as it does for every other front end. The GIL is
// released while the library computes. Outputs are allocated by the Python
// layer (in the caller's framework) and passed in to be written.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sdpa/attention.h"
#include "sdpa/backward.h"
#include "sdpa/dropout.h"
#include "sdpa/error.h"
#include "sdpa/serving.h"
#include "sdpa/version.h"

namespace nb = nanobind;

namespace {

// Any array on the CPU, read-only or not, any dtype, shape and strides.
using Array = nb::ndarray<nb::ro, nb::device::cpu>;

// The data pointers of the views the last call handed to the library, by
// argument name: the no-copy test compares them with the callers' own.
std::vector<std::pair<std::string, std::uintptr_t>> g_last_views;

sdpa::DType dtype_of(const nb::dlpack::dtype& t, const char* name) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Float && t.bits == 32) return sdpa::DType::f32;
    if (code == Code::Float && t.bits == 64) return sdpa::DType::f64;
    if (code == Code::Float && t.bits == 16) return sdpa::DType::f16;
    if (code == Code::Bfloat && t.bits == 16) return sdpa::DType::bf16;
    if (code == Code::Bool && t.bits == 8) return sdpa::DType::boolean;
    if (code == Code::Int && t.bits == 32) return sdpa::DType::i32;
    if (code == Code::Int && t.bits == 64) return sdpa::DType::i64;
    if (code == Code::Int && t.bits == 8) return sdpa::DType::i8;
  }
  const char* kind = code == Code::Float   ? "float"
                     : code == Code::Int   ? "int"
                     : code == Code::UInt  ? "uint"
                     : code == Code::Bfloat ? "bfloat"
                     : code == Code::Bool  ? "bool"
                                           : "code ";
  std::string got = std::string(kind) + std::to_string(t.bits);
  if (code != Code::Float && code != Code::Int && code != Code::UInt && code != Code::Bfloat && code != Code::Bool)
    got = "dtype code " + std::to_string(t.code) + " with " + std::to_string(t.bits) + " bits";
  throw sdpa::Error(name, "float32, float64, float16, bfloat16, bool, int8, int32 or int64", got);
}

sdpa::TensorView view_of(const Array& a, const char* name) {
  sdpa::TensorView v;
  if (a.ndim() < 1 || a.ndim() > static_cast<size_t>(sdpa::kMaxRank))
    throw sdpa::Error(name, "an array of rank 1 to 4", "rank " + std::to_string(a.ndim()));
  v.data = const_cast<void*>(a.data());
  v.dtype = dtype_of(a.dtype(), name);
  v.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = static_cast<std::int64_t>(a.shape(i));
    v.stride[i] = a.stride(i);
  }
  g_last_views.emplace_back(name, reinterpret_cast<std::uintptr_t>(a.data()));
  return v;
}

// An optional array argument: None gives an unset view.
sdpa::TensorView optional_view(nb::handle h, const char* name, std::vector<Array>& keep) {
  if (h.is_none()) return {};
  Array a;
  if (!nb::try_cast<Array>(h, a, false))
    throw sdpa::Error(name, "an array on the CPU (NumPy, PyTorch or DLPack) or None",
                      nb::cast<std::string>(nb::str(h.type())));
  keep.push_back(a);
  return view_of(keep.back(), name);
}

template <class T>
T scalar(nb::handle h, const char* name, const char* expected) {
  T out{};
  if (!nb::try_cast<T>(h, out)) throw sdpa::Error(name, expected, nb::cast<std::string>(nb::str(h.type())));
  return out;
}

// Options from the keyword arguments every call shares. The arrays they name
// are kept in `keep` for the duration of the call.
struct CallOptions {
  sdpa::Options opt;
  bool reference = false;
  std::vector<Array> keep;
};

void parse_options(const nb::kwargs& kw, CallOptions& c) {
  sdpa::Options& o = c.opt;
  c.keep.reserve(16);
  for (auto [key_h, value] : kw) {
    const std::string key = nb::cast<std::string>(key_h);
    const char* k = key.c_str();
    if (key == "scale") {
      if (!value.is_none()) o.scale = scalar<double>(value, k, "a float or None");
    } else if (key == "causal") {
      o.causal = scalar<bool>(value, k, "a bool");
    } else if (key == "align") {
      const std::string a = scalar<std::string>(value, k, "'bottom_right' or 'top_left'");
      if (a == "bottom_right") o.align = sdpa::Align::bottom_right;
      else if (a == "top_left") o.align = sdpa::Align::top_left;
      else throw sdpa::Error("align", "'bottom_right' or 'top_left'", "'" + a + "'");
    } else if (key == "window_left") {
      o.window_left = scalar<std::int64_t>(value, k, "an int");
    } else if (key == "window_right") {
      o.window_right = scalar<std::int64_t>(value, k, "an int");
    } else if (key == "softcap") {
      o.softcap = scalar<double>(value, k, "a float");
    } else if (key == "dropout_p") {
      o.dropout_p = scalar<double>(value, k, "a float");
    } else if (key == "dropout_seed") {
      o.dropout_seed = scalar<std::uint64_t>(value, k, "an int in [0, 2^64)");
    } else if (key == "dropout_offset") {
      o.dropout_offset = scalar<std::uint64_t>(value, k, "an int in [0, 2^32)");
    } else if (key == "round_p") {
      o.round_p = scalar<bool>(value, k, "a bool");
    } else if (key == "threads") {
      o.threads = scalar<int>(value, k, "an int");
    } else if (key == "isa") {
      o.isa = sdpa::parse_isa(scalar<std::string>(value, k, "an ISA name"));
    } else if (key == "reference") {
      c.reference = scalar<bool>(value, k, "a bool");
    } else if (key == "scores_stage") {
      const int s = scalar<int>(value, k, "an int in [0, 3]");
      if (s < 0 || s > 3) throw sdpa::Error("scores_stage", "an int in [0, 3]", std::to_string(s));
      o.scores_stage = static_cast<sdpa::ScoresStage>(s);
    } else if (key == "mask") {
      o.mask = optional_view(value, k, c.keep);
    } else if (key == "alibi_slopes") {
      o.alibi_slopes = optional_view(value, k, c.keep);
    } else if (key == "sinks") {
      o.sinks = optional_view(value, k, c.keep);
    } else if (key == "position_offsets") {
      o.position_offsets = optional_view(value, k, c.keep);
    } else if (key == "key_lengths") {
      o.key_lengths = optional_view(value, k, c.keep);
    } else if (key == "k_scales") {
      o.k_scales = optional_view(value, k, c.keep);
    } else if (key == "v_scales") {
      o.v_scales = optional_view(value, k, c.keep);
    } else if (key == "lse") {
      o.lse = optional_view(value, k, c.keep);
    } else if (key == "probs") {
      o.probs = optional_view(value, k, c.keep);
    } else if (key == "scores") {
      o.scores = optional_view(value, k, c.keep);
    } else if (key == "dropout_mask") {
      o.dropout_mask = optional_view(value, k, c.keep);
    } else {
      throw nb::type_error(("unexpected keyword argument '" + key + "'").c_str());
    }
  }
}

sdpa::TensorView required(const Array& a, const char* name) { return view_of(a, name); }

void attention(const Array& q, const Array& k, const Array& v, const Array& o, const nb::kwargs& kw) {
  g_last_views.clear();
  CallOptions c;
  const sdpa::TensorView qv = required(q, "q"), kv = required(k, "k"), vv = required(v, "v"), ov = required(o, "o");
  parse_options(kw, c);
  nb::gil_scoped_release unlocked;
  if (c.reference)
    sdpa::reference_attention(qv, kv, vv, ov, c.opt);
  else
    sdpa::attention(qv, kv, vv, ov, c.opt);
}

void attention_backward(const Array& q, const Array& k, const Array& v, const Array& o, const Array& lse,
                        const Array& d_o, const Array& dq, const Array& dk, const Array& dv, nb::handle dsinks,
                        const nb::kwargs& kw) {
  g_last_views.clear();
  CallOptions c;
  sdpa::Gradients g;
  const sdpa::TensorView qv = required(q, "q"), kv = required(k, "k"), vv = required(v, "v"), ov = required(o, "o"),
                         lv = required(lse, "lse"), dov = required(d_o, "d_o");
  g.dq = required(dq, "dq");
  g.dk = required(dk, "dk");
  g.dv = required(dv, "dv");
  g.dsinks = optional_view(dsinks, "dsinks", c.keep);
  parse_options(kw, c);
  nb::gil_scoped_release unlocked;
  if (c.reference)
    sdpa::reference_attention_backward(qv, kv, vv, ov, lv, dov, g, c.opt);
  else
    sdpa::attention_backward(qv, kv, vv, ov, lv, dov, g, c.opt);
}

void attention_varlen(const Array& q, const Array& k, const Array& v, const Array& o, const Array& cu_q,
                      const Array& cu_k, std::int64_t max_q, std::int64_t max_k, const nb::kwargs& kw) {
  g_last_views.clear();
  CallOptions c;
  const sdpa::TensorView qv = required(q, "q"), kv = required(k, "k"), vv = required(v, "v"), ov = required(o, "o"),
                         cq = required(cu_q, "cu_seqlens_q"), ck = required(cu_k, "cu_seqlens_k");
  parse_options(kw, c);
  nb::gil_scoped_release unlocked;
  sdpa::attention_varlen(qv, kv, vv, ov, cq, ck, c.opt, max_q, max_k, c.reference);
}

void attention_varlen_backward(const Array& q, const Array& k, const Array& v, const Array& o, const Array& lse,
                               const Array& d_o, const Array& dq, const Array& dk, const Array& dv, const Array& cu_q,
                               const Array& cu_k, std::int64_t max_q, std::int64_t max_k, const nb::kwargs& kw) {
  g_last_views.clear();
  CallOptions c;
  sdpa::Gradients g;
  const sdpa::TensorView qv = required(q, "q"), kv = required(k, "k"), vv = required(v, "v"), ov = required(o, "o"),
                         lv = required(lse, "lse"), dov = required(d_o, "d_o"),
                         cq = required(cu_q, "cu_seqlens_q"), ck = required(cu_k, "cu_seqlens_k");
  g.dq = required(dq, "dq");
  g.dk = required(dk, "dk");
  g.dv = required(dv, "dv");
  parse_options(kw, c);
  nb::gil_scoped_release unlocked;
  sdpa::attention_varlen_backward(qv, kv, vv, ov, lv, dov, g, cq, ck, c.opt, max_q, max_k, c.reference);
}

void attention_kvcache(const Array& q, const Array& k_cache, const Array& v_cache, const Array& cache_seqlens,
                       nb::handle k_new, nb::handle v_new, const Array& o, const nb::kwargs& kw) {
  g_last_views.clear();
  CallOptions c;
  const sdpa::TensorView qv = required(q, "q"), kc = required(k_cache, "k_cache"),
                         vc = required(v_cache, "v_cache"), sl = required(cache_seqlens, "cache_seqlens");
  const sdpa::TensorView kn = optional_view(k_new, "k_new", c.keep), vn = optional_view(v_new, "v_new", c.keep);
  const sdpa::TensorView ov = required(o, "o");
  parse_options(kw, c);
  nb::gil_scoped_release unlocked;
  sdpa::attention_kvcache(qv, kc, vc, sl, kn, vn, ov, c.opt, c.reference);
}

void attention_paged(const Array& q, const Array& k_pages, const Array& v_pages, const Array& block_table,
                     const Array& cache_seqlens, nb::handle k_new, nb::handle v_new, const Array& o,
                     const nb::kwargs& kw) {
  g_last_views.clear();
  CallOptions c;
  const sdpa::TensorView qv = required(q, "q"), kp = required(k_pages, "k_pages"),
                         vp = required(v_pages, "v_pages"), bt = required(block_table, "block_table"),
                         sl = required(cache_seqlens, "cache_seqlens");
  const sdpa::TensorView kn = optional_view(k_new, "k_new", c.keep), vn = optional_view(v_new, "v_new", c.keep);
  const sdpa::TensorView ov = required(o, "o");
  parse_options(kw, c);
  nb::gil_scoped_release unlocked;
  sdpa::attention_paged(qv, kp, vp, bt, sl, kn, vn, ov, c.opt, c.reference);
}

void convert(const Array& from, const Array& to) {
  g_last_views.clear();
  const sdpa::TensorView f = required(from, "from"), t = required(to, "to");
  nb::gil_scoped_release unlocked;
  sdpa::convert(f, t);
}

void quantize_int8(const Array& x, const Array& values, const Array& scales) {
  g_last_views.clear();
  const sdpa::TensorView xv = required(x, "x"), vv = required(values, "values"), sv = required(scales, "scales");
  nb::gil_scoped_release unlocked;
  sdpa::quantize_int8(xv, vv, sv);
}

std::vector<std::string> compiled_isas() {
  std::vector<std::string> out;
  for (sdpa::Isa i : sdpa::compiled_isas()) out.emplace_back(sdpa::isa_name(i));
  return out;
}

}  // namespace

NB_MODULE(_sdpa, m) {
  m.doc() = "The sdpa C++ library (scaled dot-product attention); use the `sdpa` package, not this module.";

  static nb::exception<sdpa::Error> error(m, "Error", PyExc_RuntimeError);

  m.def("attention", &attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"), nb::arg("kwargs"),
        "The forward pass: writes o (and lse, probs, scores, dropout_mask when given).");
  m.def("attention_backward", &attention_backward, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
        nb::arg("lse"), nb::arg("d_o"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"), nb::arg("dsinks").none(),
        nb::arg("kwargs"), "The backward pass: writes dq, dk, dv (and dsinks).");
  m.def("attention_varlen", &attention_varlen, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("o"),
        nb::arg("cu_seqlens_q"), nb::arg("cu_seqlens_k"), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"),
        nb::arg("kwargs"));
  m.def("attention_varlen_backward", &attention_varlen_backward, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("o"), nb::arg("lse"), nb::arg("d_o"), nb::arg("dq"), nb::arg("dk"), nb::arg("dv"),
        nb::arg("cu_seqlens_q"), nb::arg("cu_seqlens_k"), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"),
        nb::arg("kwargs"));
  m.def("attention_kvcache", &attention_kvcache, nb::arg("q"), nb::arg("k_cache"), nb::arg("v_cache"),
        nb::arg("cache_seqlens"), nb::arg("k_new").none(), nb::arg("v_new").none(), nb::arg("o"), nb::arg("kwargs"));
  m.def("attention_paged", &attention_paged, nb::arg("q"), nb::arg("k_pages"), nb::arg("v_pages"),
        nb::arg("block_table"), nb::arg("cache_seqlens"), nb::arg("k_new").none(), nb::arg("v_new").none(),
        nb::arg("o"), nb::arg("kwargs"));
  m.def("convert", &convert, nb::arg("from_"), nb::arg("to"));
  m.def("quantize_int8", &quantize_int8, nb::arg("x"), nb::arg("values"), nb::arg("scales"));
  m.def("dropout_keep", &sdpa::dropout_keep, nb::arg("p"), nb::arg("seed"), nb::arg("offset"), nb::arg("heads"),
        nb::arg("b"), nb::arg("h"), nb::arg("i"), nb::arg("j"));
  m.def("isa", []() { return std::string(sdpa::isa_name(sdpa::resolve_isa(sdpa::Isa::automatic))); },
        "The instruction set the fast path runs on this CPU.");
  m.def("isa_supported", [](const std::string& name) { return sdpa::isa_supported(sdpa::parse_isa(name)); });
  m.def("compiled_isas", &compiled_isas);
  m.def("version", []() { return std::string(sdpa::version()); });
  m.def("_last_views", []() { return g_last_views; },
        "(name, data address) of every array the last call handed to the library.");
}
