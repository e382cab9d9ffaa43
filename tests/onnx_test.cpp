// sdpa::onnx::attention (the ONNX Attention operator) against a plain float64
// computation of the operator written here from its definition, independently
// of the library: 3-D and 4-D inputs, GQA, bool / float / float16 / short
// masks, past and present, nonpad_kv_seqlen, causal offsets, softcap, windows,
// every qk_matmul_output_mode, float16 / bfloat16 / float64 types, strided
// views, the errors, and the `sdpa onnx` command.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "half.h"
#include "io/npy.h"
#include "sdpa/attention.h"
#include "sdpa/onnx.h"
#include "sdpa/options.h"

namespace {

using sdpa::DType;
using sdpa::TensorView;
namespace ox = sdpa::onnx;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------
// Arrays: exact values (double) and their bytes in some dtype

std::uint16_t bf16_bits(double x) {  // x must be exactly representable
  const float f = static_cast<float>(x);
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<std::uint16_t>(u >> 16);
}

double bf16_value(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Array {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
  std::vector<double> values;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  TensorView view() const {
    TensorView t;
    t.data = const_cast<std::byte*>(bytes.data());
    t.dtype = dtype;
    t.rank = static_cast<int>(shape.size());
    std::int64_t s = 1;
    for (int a = t.rank - 1; a >= 0; --a) {
      t.shape[a] = shape[a];
      t.stride[a] = s;
      s *= shape[a];
    }
    return t;
  }
  void set(std::int64_t i, double x) {
    const std::size_t es = sdpa::dtype_size(dtype);
    std::byte* p = bytes.data() + i * es;
    switch (dtype) {
      case DType::f32: {
        const float f = static_cast<float>(x);
        values[i] = f;
        std::memcpy(p, &f, es);
        break;
      }
      case DType::f64:
        values[i] = x;
        std::memcpy(p, &x, es);
        break;
      case DType::f16: {
        const std::uint16_t h = sdpa::float_to_half(static_cast<float>(x));
        values[i] = sdpa::half_to_float(h);
        std::memcpy(p, &h, es);
        break;
      }
      case DType::bf16: {
        const double r = x == -kInf ? x : std::round(x * 64) / 64;  // 8 significant bits: exact in bfloat16
        const std::uint16_t h = bf16_bits(r);
        values[i] = r;
        std::memcpy(p, &h, es);
        break;
      }
      case DType::boolean:
        values[i] = x != 0;
        *reinterpret_cast<unsigned char*>(p) = x != 0;
        break;
      case DType::i32: {
        const auto v = static_cast<std::int32_t>(x);
        values[i] = v;
        std::memcpy(p, &v, es);
        break;
      }
      case DType::i64: {
        const auto v = static_cast<std::int64_t>(x);
        values[i] = static_cast<double>(v);
        std::memcpy(p, &v, es);
        break;
      }
      case DType::i8: {
        const auto v = static_cast<std::int8_t>(x);
        values[i] = v;
        std::memcpy(p, &v, es);
        break;
      }
    }
  }
};

Array zeros(DType t, std::vector<std::int64_t> shape) {
  Array a;
  a.dtype = t;
  a.shape = std::move(shape);
  a.values.assign(a.numel(), 0.0);
  a.bytes.assign(a.numel() * sdpa::dtype_size(t), std::byte{0});
  return a;
}

Array random_array(DType t, std::vector<std::int64_t> shape, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  Array a = zeros(t, std::move(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, u(rng));
  return a;
}

Array from_values(DType t, std::vector<std::int64_t> shape, const std::vector<double>& v) {
  Array a = zeros(t, std::move(shape));
  for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, v[i]);
  return a;
}

std::vector<double> values_of(const ox::Tensor& t) {
  std::vector<double> r(t.numel());
  const std::size_t es = sdpa::dtype_size(t.dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const std::byte* p = t.data.data() + i * es;
    std::uint16_t h;
    float f;
    switch (t.dtype) {
      case DType::f32:
        std::memcpy(&f, p, 4);
        r[i] = f;
        break;
      case DType::f64: std::memcpy(&r[i], p, 8); break;
      case DType::f16:
        std::memcpy(&h, p, 2);
        r[i] = sdpa::half_to_float(h);
        break;
      case DType::bf16:
        std::memcpy(&h, p, 2);
        r[i] = bf16_value(h);
        break;
      default: ADD_FAILURE() << "unexpected output dtype"; break;
    }
  }
  return r;
}

// ---------------------------------------------------------------------------
// One operator call and its float64 re-computation

struct Problem {
  int rank = 4;
  std::int64_t b = 2, hq = 2, hkv = 2, sq = 3, skv = 5, past = 0, d = 8, dv = 8;
  DType t1 = DType::f32, t2 = DType::f32;
  std::optional<Array> mask, nonpad;
  bool with_past = false;
  ox::AttentionAttributes attr;
  std::uint64_t seed = 1;

  Array q, k, v, past_key, past_value;

  std::int64_t t() const { return past + skv; }

  // Draws Q, K, V (and the past) from `seed`.
  void fill() {
    std::mt19937_64 rng(seed);
    if (rank == 4) {
      q = random_array(t1, {b, hq, sq, d}, rng);
      k = random_array(t1, {b, hkv, skv, d}, rng);
      v = random_array(t2, {b, hkv, skv, dv}, rng);
    } else {
      q = random_array(t1, {b, sq, hq * d}, rng);
      k = random_array(t1, {b, skv, hkv * d}, rng);
      v = random_array(t2, {b, skv, hkv * dv}, rng);
      attr.q_num_heads = hq;
      attr.kv_num_heads = hkv;
    }
    if (with_past) {
      past_key = random_array(t1, {b, hkv, past, d}, rng);
      past_value = random_array(t2, {b, hkv, past, dv}, rng);
    }
  }

  ox::AttentionInputs inputs() const {
    ox::AttentionInputs in;
    in.Q = q.view();
    in.K = k.view();
    in.V = v.view();
    if (mask) in.attn_mask = mask->view();
    if (with_past) {
      in.past_key = past_key.view();
      in.past_value = past_value.view();
    }
    if (nonpad) in.nonpad_kv_seqlen = nonpad->view();
    return in;
  }

  // Element accessors in ONNX's terms.
  double Q(std::int64_t bi, std::int64_t h, std::int64_t i, std::int64_t c) const {
    return rank == 4 ? q.values[((bi * hq + h) * sq + i) * d + c] : q.values[(bi * sq + i) * hq * d + h * d + c];
  }
  // Key / value j of the present (past then new).
  double K(std::int64_t bi, std::int64_t h, std::int64_t j, std::int64_t c) const {
    if (j < past) return past_key.values[((bi * hkv + h) * past + j) * d + c];
    j -= past;
    return rank == 4 ? k.values[((bi * hkv + h) * skv + j) * d + c] : k.values[(bi * skv + j) * hkv * d + h * d + c];
  }
  double V(std::int64_t bi, std::int64_t h, std::int64_t j, std::int64_t c) const {
    if (j < past) return past_value.values[((bi * hkv + h) * past + j) * dv + c];
    j -= past;
    return rank == 4 ? v.values[((bi * hkv + h) * skv + j) * dv + c] : v.values[(bi * skv + j) * hkv * dv + h * dv + c];
  }
  // The mask's additive term at (b, h, i, j): broadcast from the right; a short
  // last axis (opset >= 24) is padded with -inf / false.
  double mask_bias(std::int64_t bi, std::int64_t h, std::int64_t i, std::int64_t j) const {
    if (!mask) return 0;
    const int r = static_cast<int>(mask->shape.size());
    const std::int64_t full[4] = {bi, h, i, j};
    const std::int64_t last = mask->shape.back();
    std::int64_t jj = j;
    if (last != t()) {
      if (attr.opset >= 24) {
        if (j >= last) return -kInf;
      } else {
        jj = 0;  // opset 23: a last axis of 1 broadcasts
      }
    }
    std::int64_t at = 0;
    for (int a = 0; a < r; ++a) {
      const std::int64_t idx = a == r - 1 ? jj : (mask->shape[a] == 1 ? 0 : full[4 - r + a]);
      at = at * mask->shape[a] + idx;
    }
    const double m = mask->values[at];
    if (mask->dtype == DType::boolean) return m != 0 ? 0.0 : -kInf;
    return m;
  }
  std::int64_t offset(std::int64_t bi) const {
    if (with_past) return past;
    if (nonpad) return static_cast<std::int64_t>(nonpad->values[bi]) - sq;
    return 0;
  }
};

struct Expected {
  std::vector<double> y, present_key, present_value, qk;
};

Expected recompute(const Problem& p) {
  Expected e;
  const std::int64_t T = p.t(), group = p.hq / p.hkv;
  const double scale = p.attr.scale ? static_cast<double>(*p.attr.scale) : 1.0 / std::sqrt(static_cast<double>(p.d));
  e.y.assign(p.b * p.hq * p.sq * p.dv, 0.0);
  e.qk.assign(p.b * p.hq * p.sq * T, 0.0);
  for (std::int64_t b = 0; b < p.b; ++b)
    for (std::int64_t h = 0; h < p.hq; ++h) {
      const std::int64_t hk = h / group;
      for (std::int64_t i = 0; i < p.sq; ++i) {
        std::vector<double> s0(T), s1(T), s2(T), bias(T), prob(T, 0.0);
        const std::int64_t pos = i + p.offset(b);
        bool any = false;
        for (std::int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < p.d; ++c) dot += p.Q(b, h, i, c) * p.K(b, hk, j, c);
          s0[j] = scale * dot;
          const double cap = p.attr.softcap;
          s1[j] = cap > 0 ? cap * std::tanh(s0[j] / cap) : s0[j];
          double bj = p.mask_bias(b, h, i, j);
          if (p.attr.is_causal && j > pos) bj = -kInf;
          if (p.nonpad && j >= static_cast<std::int64_t>(p.nonpad->values[b])) bj = -kInf;
          if (p.attr.left_window_size >= 0 && j < pos - p.attr.left_window_size) bj = -kInf;
          if (p.attr.right_window_size >= 0 && j > pos + p.attr.right_window_size) bj = -kInf;
          bias[j] = bj;
          s2[j] = bj == -kInf ? -kInf : s1[j] + bj;
          any |= bj != -kInf;
        }
        if (any) {
          const double m = *std::max_element(s2.begin(), s2.end());
          double l = 0;
          for (std::int64_t j = 0; j < T; ++j) l += prob[j] = std::exp(s2[j] - m);
          for (double& x : prob) x /= l;
        }
        for (std::int64_t c = 0; c < p.dv; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j < T; ++j)
            if (prob[j] != 0) acc += prob[j] * p.V(b, hk, j, c);
          const std::int64_t at =
              p.rank == 4 ? ((b * p.hq + h) * p.sq + i) * p.dv + c : (b * p.sq + i) * p.hq * p.dv + h * p.dv + c;
          e.y[at] = acc;
        }
        const std::vector<double>* stage[4] = {&s0, &s1, &s2, &prob};
        for (std::int64_t j = 0; j < T; ++j)
          e.qk[((b * p.hq + h) * p.sq + i) * T + j] = (*stage[p.attr.qk_matmul_output_mode])[j];
      }
    }
  for (std::int64_t b = 0; b < p.b; ++b)
    for (std::int64_t h = 0; h < p.hkv; ++h)
      for (std::int64_t j = 0; j < T; ++j) {
        for (std::int64_t c = 0; c < p.d; ++c) e.present_key.push_back(p.K(b, h, j, c));
        for (std::int64_t c = 0; c < p.dv; ++c) e.present_value.push_back(p.V(b, h, j, c));
      }
  return e;
}

// Tolerance of an output of type `t` computed in float32 (or float64 with reference).
struct Tol {
  double rtol, atol;
};
Tol tolerance(DType t, bool reference) {
  switch (t) {
    case DType::f16: return {1.0 / 1024, 1e-4};
    case DType::bf16: return {1.0 / 128, 1e-3};
    case DType::f64: return reference ? Tol{1e-12, 1e-12} : Tol{2e-5, 2e-5};
    default: return reference ? Tol{1e-7, 1e-7} : Tol{2e-5, 2e-5};
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size() && reported < 5; ++i) {
    const bool ok = std::isfinite(want[i]) ? std::abs(got[i] - want[i]) <= tol.atol + tol.rtol * std::abs(want[i])
                                           : got[i] == want[i];
    if (!ok) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
      ++reported;
    }
  }
}

std::vector<std::int64_t> y_shape(const Problem& p) {
  return p.rank == 4 ? std::vector<std::int64_t>{p.b, p.hq, p.sq, p.dv}
                     : std::vector<std::int64_t>{p.b, p.sq, p.hq * p.dv};
}

// Runs the operator with every output and checks each against recompute().
ox::AttentionOutputs check(const Problem& p, bool reference = false) {
  ox::AttentionOutputs out;
  out.want_present_key = out.want_present_value = out.want_qk_matmul_output = true;
  ox::attention(p.inputs(), p.attr, out, reference);
  const Expected e = recompute(p);
  EXPECT_EQ(out.Y.dtype, p.t1);
  EXPECT_EQ(out.Y.shape, y_shape(p));
  expect_close(values_of(out.Y), e.y, tolerance(p.t1, reference), "Y");
  EXPECT_EQ(out.present_key.dtype, p.t1);
  EXPECT_EQ(out.present_key.shape, (std::vector<std::int64_t>{p.b, p.hkv, p.t(), p.d}));
  EXPECT_EQ(values_of(out.present_key), e.present_key);  // a copy: exact
  EXPECT_EQ(out.present_value.dtype, p.t2);
  EXPECT_EQ(out.present_value.shape, (std::vector<std::int64_t>{p.b, p.hkv, p.t(), p.dv}));
  EXPECT_EQ(values_of(out.present_value), e.present_value);
  EXPECT_EQ(out.qk_matmul_output.dtype, p.t1);
  EXPECT_EQ(out.qk_matmul_output.shape, (std::vector<std::int64_t>{p.b, p.hq, p.sq, p.t()}));
  expect_close(values_of(out.qk_matmul_output), e.qk, tolerance(p.t1, reference),
               "qk_matmul_output (mode " + std::to_string(p.attr.qk_matmul_output_mode) + ")");
  return out;
}

void check_both_paths(const Problem& p) {
  {
    SCOPED_TRACE("fast path");
    check(p, false);
  }
  {
    SCOPED_TRACE("reference path");
    check(p, true);
  }
}

Problem problem(int rank, std::int64_t hq, std::int64_t hkv, std::int64_t sq, std::int64_t skv) {
  Problem p;
  p.rank = rank;
  p.hq = hq;
  p.hkv = hkv;
  p.sq = sq;
  p.skv = skv;
  return p;
}

// ---------------------------------------------------------------------------
// Shapes and heads

TEST(OnnxAttention, four_d_plain) {
  Problem p = problem(4, 3, 3, 4, 6);
  p.fill();
  check_both_paths(p);
}

TEST(OnnxAttention, three_d_gqa_with_different_value_head_size) {
  Problem p = problem(3, 6, 2, 5, 7);
  p.d = 8;
  p.dv = 6;
  p.fill();
  check_both_paths(p);
}

TEST(OnnxAttention, four_d_gqa_and_mqa) {
  for (std::int64_t hkv : {1, 3}) {
    Problem p = problem(4, 9, hkv, 4, 6);
    p.dv = 10;
    p.seed = 7 + hkv;
    p.fill();
    SCOPED_TRACE("kv_num_heads " + std::to_string(hkv));
    check_both_paths(p);
  }
}

TEST(OnnxAttention, three_d_heads_are_contiguous_blocks_of_the_hidden_axis) {
  // One batch, one query, two heads of size 1: head h reads column h of Q/K/V.
  Problem p = problem(3, 2, 2, 1, 2);
  p.b = 1;
  p.d = p.dv = 1;
  p.q = from_values(DType::f32, {1, 1, 2}, {0, 50});         // head 0: q = 0, head 1: q = 50
  p.k = from_values(DType::f32, {1, 2, 2}, {0, 1, 0, -1});   // head 1: keys +1, -1
  p.v = from_values(DType::f32, {1, 2, 2}, {1, 10, 3, 20});  // head 0: 1, 3; head 1: 10, 20
  p.attr.q_num_heads = 2;
  p.attr.kv_num_heads = 2;
  p.attr.scale = 1.0f;
  ox::AttentionOutputs out;
  ox::attention(p.inputs(), p.attr, out);
  const std::vector<double> y = values_of(out.Y);
  ASSERT_EQ(y.size(), 2u);
  EXPECT_NEAR(y[0], 2.0, 1e-6);   // head 0: uniform over values 1 and 3
  EXPECT_NEAR(y[1], 10.0, 1e-6);  // head 1: all weight on key 0
  check(p);
}

TEST(OnnxAttention, strided_input_views_are_honoured) {
  Problem p = problem(4, 2, 2, 3, 5);
  p.fill();
  // Q in [B, S, H, D] memory presented as a 4-D [B, H, S, D] view.
  Array qt = zeros(DType::f32, {p.b, p.sq, p.hq, p.d});
  for (std::int64_t b = 0; b < p.b; ++b)
    for (std::int64_t h = 0; h < p.hq; ++h)
      for (std::int64_t i = 0; i < p.sq; ++i)
        for (std::int64_t c = 0; c < p.d; ++c)
          qt.set(((b * p.sq + i) * p.hq + h) * p.d + c, p.q.values[((b * p.hq + h) * p.sq + i) * p.d + c]);
  ox::AttentionInputs in = p.inputs();
  in.Q = TensorView::bshd(qt.bytes.data(), DType::f32, p.b, p.sq, p.hq, p.d);
  // K with a non-contiguous last axis: every other float of a wider buffer.
  Array kw = zeros(DType::f32, {p.b, p.hkv, p.skv, 2 * p.d});
  for (std::int64_t i = 0; i < p.k.numel(); ++i) kw.set(2 * i, p.k.values[i]);
  in.K.data = kw.bytes.data();
  for (int a = 0; a < 4; ++a) in.K.stride[a] *= 2;
  ox::AttentionOutputs out;
  ox::attention(in, p.attr, out);
  expect_close(values_of(out.Y), recompute(p).y, tolerance(DType::f32, false), "Y");
}

TEST(OnnxAttention, docs_example) {
  // The example of docs/onnx.md, with buffers.
  const std::int64_t B = 2, Sq = 3, Skv = 2, P = 4, Hq = 4, Hkv = 2, D = 8, Dv = 6;
  std::vector<float> q(B * Sq * Hq * D, 0.25f), k(B * Skv * Hkv * D, 0.5f), v(B * Skv * Hkv * Dv, 1.0f);
  std::vector<float> pk(B * Hkv * P * D, -0.5f), pv(B * Hkv * P * Dv, 3.0f);

  sdpa::onnx::AttentionInputs in;                                  // TensorViews; unset = input absent
  in.Q = sdpa::TensorView::contiguous(q.data(), {B, Sq, Hq * D});  // 3-D: heads are blocks of the hidden axis
  in.K = sdpa::TensorView::contiguous(k.data(), {B, Skv, Hkv * D});
  in.V = sdpa::TensorView::contiguous(v.data(), {B, Skv, Hkv * Dv});
  in.past_key = sdpa::TensorView::contiguous(pk.data(), {B, Hkv, P, D});
  in.past_value = sdpa::TensorView::contiguous(pv.data(), {B, Hkv, P, Dv});
  sdpa::onnx::AttentionAttributes attr;  // opset 24 by default
  attr.q_num_heads = Hq;
  attr.kv_num_heads = Hkv;
  attr.is_causal = 1;  // offset = P: key j visible to query i iff j <= i + P
  sdpa::onnx::AttentionOutputs out;
  out.want_present_key = out.want_present_value = true;
  sdpa::onnx::attention(in, attr, out);

  EXPECT_EQ(out.Y.dtype, DType::f32);
  EXPECT_EQ(out.Y.shape, (std::vector<std::int64_t>{B, Sq, Hq * Dv}));
  EXPECT_EQ(out.present_key.shape, (std::vector<std::int64_t>{B, Hkv, P + Skv, D}));
  EXPECT_EQ(out.present_value.shape, (std::vector<std::int64_t>{B, Hkv, P + Skv, Dv}));
  EXPECT_FALSE(out.qk_matmul_output.produced());
  // Query 0 sees the 4 past keys and the first new one (scores 0.25·(-0.5)·8/√8 and 0.25·0.5·8/√8).
  const double s_past = -0.25 * 0.5 * 8 / std::sqrt(8.0), s_new = -s_past;
  const double w_past = std::exp(s_past), w_new = std::exp(s_new);
  const double y0 = (4 * w_past * 3.0 + w_new * 1.0) / (4 * w_past + w_new);
  EXPECT_NEAR(values_of(out.Y)[0], y0, 1e-5);
}

// ---------------------------------------------------------------------------
// Masks

TEST(OnnxAttention, bool_and_float_masks_of_every_broadcast_rank) {
  const std::vector<std::vector<std::int64_t>> shapes = {{6},       {4, 6},       {1, 6},      {2, 1, 4, 6},
                                                         {3, 4, 6}, {2, 3, 4, 6}, {2, 1, 1, 6}};
  for (DType mt : {DType::boolean, DType::f32, DType::f16}) {
    for (const auto& shape : shapes) {
      Problem p = problem(4, 3, 3, 4, 6);
      p.seed = 3;
      p.fill();
      std::mt19937_64 rng(11);
      Array m = random_array(mt, shape, rng, mt == DType::boolean ? 0.0 : -2.0, mt == DType::boolean ? 2.0 : 2.0);
      if (mt == DType::boolean)
        for (std::int64_t i = 0; i < m.numel(); ++i) m.set(i, m.values[i] > 0.6 ? 1 : 0);
      else
        m.set(0, -kInf);  // a disabled key in a float mask
      p.mask = m;
      SCOPED_TRACE(std::string(sdpa::dtype_name(mt)) + " mask of rank " + std::to_string(shape.size()));
      check_both_paths(p);
    }
  }
}

TEST(OnnxAttention, numeric_masks_of_other_types_are_added) {
  for (DType mt : {DType::f64, DType::i64, DType::bf16}) {
    Problem p = problem(4, 2, 2, 3, 4);
    p.fill();
    p.mask = from_values(mt, {3, 4}, {0, -1, 2, 0, 1, 1, 0, -3, 0, 0, 0, 5});
    SCOPED_TRACE(sdpa::dtype_name(mt));
    check_both_paths(p);
  }
}

TEST(OnnxAttention, opset24_short_mask_is_padded_with_minus_infinity) {
  for (DType mt : {DType::boolean, DType::f32, DType::f16}) {
    for (std::int64_t m : {1, 3, 4}) {
      Problem p = problem(4, 2, 2, 3, 6);
      p.attr.opset = 24;
      p.fill();
      std::mt19937_64 rng(5);
      Array a = random_array(mt, {p.b, 1, p.sq, m}, rng, 0.0, 1.0);
      if (mt == DType::boolean)
        for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, 1);
      p.mask = a;
      SCOPED_TRACE(std::string(sdpa::dtype_name(mt)) + " mask with " + std::to_string(m) + " of 6 keys");
      const ox::AttentionOutputs out = check(p);
      // Keys beyond the mask carry no weight.
      p.attr.qk_matmul_output_mode = 3;
      ox::AttentionOutputs probs;
      probs.want_qk_matmul_output = true;
      ox::attention(p.inputs(), p.attr, probs);
      const std::vector<double> pr = values_of(probs.qk_matmul_output);
      for (std::size_t i = 0; i < pr.size(); ++i)
        if (static_cast<std::int64_t>(i % 6) >= m) {
          ASSERT_EQ(pr[i], 0.0) << i;
        }
    }
  }
}

TEST(OnnxAttention, opset23_mask_last_axis_of_one_broadcasts) {
  Problem p = problem(4, 2, 2, 3, 5);
  p.attr.opset = 23;
  p.fill();
  p.mask = from_values(DType::f32, {3, 1}, {0.5, -1, 2});
  check_both_paths(p);
}

TEST(OnnxAttention, fully_masked_rows_are_zero_in_y_and_in_mode_3) {
  Problem p = problem(4, 2, 2, 2, 2);
  p.b = 1;
  p.attr.qk_matmul_output_mode = 3;
  p.fill();
  p.mask = from_values(DType::boolean, {2, 2}, {0, 0, 1, 1});
  const ox::AttentionOutputs out = check(p);
  const std::vector<double> y = values_of(out.Y), qk = values_of(out.qk_matmul_output);
  for (std::int64_t h = 0; h < 2; ++h) {
    for (std::int64_t c = 0; c < p.dv; ++c) EXPECT_EQ(y[(h * 2 + 0) * p.dv + c], 0.0);
    EXPECT_EQ(qk[(h * 2 + 0) * 2 + 0], 0.0);
    EXPECT_EQ(qk[(h * 2 + 0) * 2 + 1], 0.0);
  }
  // Mode 2 shows -inf where disallowed.
  p.attr.qk_matmul_output_mode = 2;
  const ox::AttentionOutputs m2 = check(p);
  EXPECT_EQ(values_of(m2.qk_matmul_output)[0], -kInf);
}

// ---------------------------------------------------------------------------
// Caches and causal offsets

TEST(OnnxAttention, past_and_present_with_causal_offset_of_the_past_length) {
  // Skv != Sq: the offset is the past length (8), not T - Sq (6).
  for (int rank : {3, 4}) {
    Problem p = problem(rank, 4, 2, 4, 2);
    p.with_past = true;
    p.past = 8;
    p.attr.is_causal = 1;
    p.fill();
    SCOPED_TRACE("rank " + std::to_string(rank));
    check_both_paths(p);
  }
}

TEST(OnnxAttention, past_with_mask_and_every_qk_mode) {
  for (std::int64_t mode = 0; mode < 4; ++mode) {
    Problem p = problem(4, 3, 3, 4, 6);
    p.with_past = true;
    p.past = 12;
    p.attr.is_causal = 1;
    p.attr.softcap = 2.0f;
    p.attr.qk_matmul_output_mode = mode;
    p.fill();
    std::mt19937_64 rng(9);
    p.mask = random_array(DType::f32, {p.b, 1, p.sq, p.t()}, rng);
    SCOPED_TRACE("qk_matmul_output_mode " + std::to_string(mode));
    check_both_paths(p);
  }
}

TEST(OnnxAttention, nonpad_kv_seqlen_pads_keys_and_offsets_the_causal_frontier) {
  for (std::int64_t causal : {0, 1}) {
    Problem p = problem(4, 4, 2, 3, 8);
    p.b = 3;
    p.attr.opset = 24;
    p.attr.is_causal = causal;
    p.attr.qk_matmul_output_mode = 2;
    p.fill();
    // 8: decode-like offset 5; 4: offset 1; 1: offset -2 (rows 0 and 1 see nothing when causal).
    p.nonpad = from_values(DType::i64, {3}, {8, 4, 1});
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const ox::AttentionOutputs out = check(p);
    if (causal) {
      const std::vector<double> y = values_of(out.Y);
      for (std::int64_t c = 0; c < p.dv; ++c) EXPECT_EQ(y[((2 * p.hq + 0) * p.sq + 0) * p.dv + c], 0.0);
    }
    check(p, true);
  }
}

TEST(OnnxAttention, nonpad_with_short_mask_and_3d_inputs) {
  Problem p = problem(3, 2, 1, 2, 6);
  p.attr.opset = 24;
  p.attr.is_causal = 1;
  p.fill();
  p.nonpad = from_values(DType::i64, {2}, {5, 3});
  std::mt19937_64 rng(2);
  p.mask = random_array(DType::f32, {2, 1, 2, 4}, rng);
  check_both_paths(p);
}

TEST(OnnxAttention, no_cache_causal_is_top_left) {
  Problem p = problem(4, 2, 2, 4, 6);
  p.attr.is_causal = 1;
  p.attr.qk_matmul_output_mode = 3;
  p.fill();
  const ox::AttentionOutputs out = check(p);
  // Query 0 sees key 0 only.
  const std::vector<double> pr = values_of(out.qk_matmul_output);
  EXPECT_NEAR(pr[0], 1.0, 1e-6);
  for (int j = 1; j < 6; ++j) EXPECT_EQ(pr[j], 0.0);
}

TEST(OnnxAttention, opset25_windows_use_the_same_offsets) {
  Problem p = problem(4, 2, 2, 4, 2);
  p.attr.opset = 25;
  p.attr.is_causal = 1;
  p.attr.left_window_size = 2;
  p.with_past = true;
  p.past = 8;
  p.fill();
  check_both_paths(p);
  Problem w = problem(4, 1, 1, 5, 5);
  w.attr.opset = 25;
  w.attr.left_window_size = 1;
  w.attr.right_window_size = 2;
  w.fill();
  check_both_paths(w);
}

// ---------------------------------------------------------------------------
// Attributes

TEST(OnnxAttention, scale_and_softcap) {
  Problem p = problem(4, 2, 2, 3, 5);
  p.attr.scale = 0.75f;
  p.attr.softcap = 0.5f;
  p.attr.qk_matmul_output_mode = 1;
  p.fill();
  std::mt19937_64 rng(4);
  p.mask = random_array(DType::f32, {3, 5}, rng);
  p.mask->set(1, -kInf);  // softcap comes first, so -inf stays -inf
  check_both_paths(p);
  p.attr.qk_matmul_output_mode = 0;  // mode 0 is before the softcap
  check_both_paths(p);
}

TEST(OnnxAttention, softmax_precision_is_accepted) {
  for (std::int64_t prec : {1, 10, 11, 16}) {
    Problem p = problem(4, 2, 2, 3, 5);
    p.attr.softmax_precision = prec;
    p.fill();
    check(p);
  }
}

// ---------------------------------------------------------------------------
// Types

TEST(OnnxAttention, float16_round_trip) {
  Problem p = problem(4, 4, 2, 3, 4);
  p.t1 = p.t2 = DType::f16;
  p.with_past = true;
  p.past = 3;
  p.attr.is_causal = 1;
  p.attr.qk_matmul_output_mode = 2;
  p.fill();
  std::mt19937_64 rng(6);
  p.mask = random_array(DType::f16, {p.sq, p.t()}, rng);
  const ox::AttentionOutputs out = check(p);
  // present_key is the bit-exact concatenation of past_key and K.
  const std::size_t past_bytes = static_cast<std::size_t>(p.past * p.d * 2);
  EXPECT_EQ(std::memcmp(out.present_key.data.data(), p.past_key.bytes.data(), past_bytes), 0);
  EXPECT_EQ(std::memcmp(out.present_key.data.data() + past_bytes, p.k.bytes.data(), p.skv * p.d * 2), 0);
  check(p, true);
}

TEST(OnnxAttention, float16_three_d_and_mixed_types) {
  Problem p = problem(3, 2, 2, 3, 4);
  p.t1 = DType::f16;
  p.t2 = DType::f32;
  p.fill();
  check_both_paths(p);
}

TEST(OnnxAttention, bfloat16_and_float64) {
  for (DType t : {DType::bf16, DType::f64}) {
    Problem p = problem(4, 2, 1, 3, 4);
    p.t1 = p.t2 = t;
    p.attr.is_causal = 1;
    p.fill();
    SCOPED_TRACE(sdpa::dtype_name(t));
    check_both_paths(p);
  }
}

TEST(OnnxAttention, bfloat16_past_is_concatenated_in_bfloat16) {
  Problem p = problem(3, 4, 2, 2, 3);
  p.t1 = DType::bf16;
  p.t2 = DType::f16;
  p.with_past = true;
  p.past = 4;
  p.attr.is_causal = 1;
  p.fill();
  check_both_paths(p);  // present_key bfloat16 and present_value float16, exact
}

TEST(OnnxAttention, float16_with_a_strided_last_axis_is_copied_in_float16) {
  Problem p = problem(4, 2, 2, 3, 5);
  p.t1 = p.t2 = DType::f16;
  p.fill();
  Array kw = zeros(DType::f16, {p.b, p.hkv, p.skv, 2 * p.d});
  for (std::int64_t i = 0; i < p.k.numel(); ++i) kw.set(2 * i, p.k.values[i]);
  ox::AttentionInputs in = p.inputs();
  in.K.data = kw.bytes.data();
  for (int a = 0; a < 4; ++a) in.K.stride[a] *= 2;
  ox::AttentionOutputs out;
  ox::attention(in, p.attr, out);
  EXPECT_EQ(out.Y.dtype, DType::f16);
  expect_close(values_of(out.Y), recompute(p).y, tolerance(DType::f16, false), "Y");
}

// Memory whose tail pages can be made unreadable (PROT_NONE): a read there
// kills the process.
class GuardedBytes {
 public:
  explicit GuardedBytes(const std::vector<std::byte>& data) : size_(round_up(std::max<std::size_t>(data.size(), 1))) {
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<std::byte*>(p);
    std::memcpy(base_, data.data(), data.size());
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  ~GuardedBytes() { ::munmap(base_, size_); }

  std::byte* data() const { return base_; }
  // Makes the whole pages inside [begin, end) (byte offsets) unreadable; returns how many bytes.
  std::size_t protect(std::size_t begin, std::size_t end) {
    const std::size_t b = round_up(begin), e = end / page() * page();
    if (e <= b) return 0;
    if (::mprotect(base_ + b, e - b, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
    return e - b;
  }

 private:
  static std::size_t page() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }
  static std::size_t round_up(std::size_t n) { return (n + page() - 1) / page() * page(); }
  std::size_t size_;
  std::byte* base_ = nullptr;
};

// Float16 and bfloat16 Q, K, V are read where they lie, not converted by
// copy: the keys a causal query cannot see sit on unreadable pages, which
// any copy of K or V would read (and die) while the library, which skips
// tiles wholly past the causal frontier, never touches them. The result is
// the library's own on the same views, bit for bit, within the float64
// oracle's tolerance for the type, and Y comes back in that type.
TEST(OnnxAttention, float16_and_bfloat16_inputs_are_read_in_place) {
  // The child runs the call alone in a fresh process (the library's threads are not forked).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const DType t : {DType::f16, DType::bf16})
    for (const int rank : {4, 3}) {
      SCOPED_TRACE(std::string(sdpa::dtype_name(t)) + ", rank " + std::to_string(rank));
      // Sq = 4 queries aligned top-left: query i sees keys 0..i of Skv = 2048.
      Problem p = problem(rank, 4, 2, 4, 2048);
      p.b = 1;
      p.d = 64;
      p.dv = 32;
      p.t1 = p.t2 = t;
      p.attr.is_causal = 1;
      p.fill();
      GuardedBytes k(p.k.bytes), v(p.v.bytes);
      // Readable: the first kRows keys of each head (more than any tile).
      constexpr std::int64_t kRows = 256;
      const std::size_t es = sdpa::dtype_size(t);
      std::size_t guarded = 0;
      for (auto [g, x] : {std::pair{&k, p.d}, std::pair{&v, p.dv}}) {
        if (rank == 3) {  // (B, S, H·X): one tail after row kRows for all heads
          const std::size_t row = static_cast<std::size_t>(p.hkv * x) * es;
          guarded += g->protect(kRows * row, p.skv * row);
        } else {  // (B, H, S, X): a tail per head
          const std::size_t row = static_cast<std::size_t>(x) * es, head = p.skv * row;
          for (std::int64_t h = 0; h < p.hkv; ++h) guarded += g->protect(h * head + kRows * row, (h + 1) * head);
        }
      }
      ASSERT_GT(guarded, 0u);
      ox::AttentionInputs in = p.inputs();
      in.K.data = k.data();
      in.V.data = v.data();

      EXPECT_EXIT(
          {
            ox::AttentionOutputs out;
            ox::attention(in, p.attr, out);
            std::_Exit(0);
          },
          ::testing::ExitedWithCode(0), "")
          << "the call read keys or values past the causal frontier";
      if (::testing::Test::HasFailure()) return;

      ox::AttentionOutputs out;
      ox::attention(in, p.attr, out);
      EXPECT_EQ(out.Y.dtype, t);
      expect_close(values_of(out.Y), recompute(p).y, tolerance(t, false), "Y");

      // The library on the same views, writing O in the same type.
      const auto four_d = [&](const TensorView& x, std::int64_t heads) {
        if (x.rank == 4) return x;
        const std::int64_t w = x.shape[2] / heads;
        TensorView r = x;
        r.rank = 4;
        r.shape = {x.shape[0], heads, x.shape[1], w};
        r.stride = {x.stride[0], w * x.stride[2], x.stride[1], x.stride[2]};
        return r;
      };
      std::vector<std::byte> o_bytes(out.Y.data.size());
      const TensorView o = rank == 4 ? TensorView::contiguous(o_bytes.data(), t, {p.b, p.hq, p.sq, p.dv})
                                     : TensorView::bshd(o_bytes.data(), t, p.b, p.sq, p.hq, p.dv);
      sdpa::Options opt;
      opt.causal = true;
      opt.align = sdpa::Align::top_left;
      sdpa::attention(four_d(in.Q, p.hq), four_d(in.K, p.hkv), four_d(in.V, p.hkv), o, opt);
      EXPECT_EQ(o_bytes, out.Y.data) << "Y differs from sdpa::attention on the same views";
    }
}

// ---------------------------------------------------------------------------
// Errors: sdpa::Error names the ONNX input or attribute, and `out` is untouched

void expect_error(const Problem& p, const ox::AttentionInputs& in, const std::string& arg,
                  const std::string& fragment = "") {
  ox::AttentionOutputs out;
  out.want_qk_matmul_output = true;
  out.Y.shape = {42};
  try {
    ox::attention(in, p.attr, out);
    ADD_FAILURE() << "no error, expected one about " << arg;
  } catch (const sdpa::Error& e) {
    EXPECT_EQ(e.arg(), arg) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(fragment));
    EXPECT_THAT(std::string(e.what()), HasSubstr(": expected "));
  }
  EXPECT_EQ(out.Y.shape, std::vector<std::int64_t>{42});
  EXPECT_FALSE(out.qk_matmul_output.produced());
}

Problem base() {
  Problem p = problem(4, 4, 2, 3, 5);
  p.fill();
  return p;
}

TEST(OnnxAttentionErrors, inputs) {
  {
    Problem p = base();
    ox::AttentionInputs in = p.inputs();
    in.V = TensorView{};
    expect_error(p, in, "V", "a tensor");
  }
  {
    Problem p = base();
    Array qi = zeros(DType::i32, {2, 4, 3, 8});
    ox::AttentionInputs in = p.inputs();
    in.Q = qi.view();
    expect_error(p, in, "Q", "float16, bfloat16, float32 or float64");
  }
  {
    Problem p = base();
    Array kd = zeros(DType::f64, {2, 2, 5, 8});
    ox::AttentionInputs in = p.inputs();
    in.K = kd.view();
    expect_error(p, in, "K", "the type of Q");
  }
  {
    Problem p = base();
    Array k3 = zeros(DType::f32, {2, 5, 16});
    ox::AttentionInputs in = p.inputs();
    in.K = k3.view();
    expect_error(p, in, "K", "rank 4");
  }
  {
    Problem p = base();
    Array k = zeros(DType::f32, {2, 3, 5, 8});  // 3 KV heads do not divide 4
    ox::AttentionInputs in = p.inputs();
    in.K = k.view();
    Array v = zeros(DType::f32, {2, 3, 5, 8});
    in.V = v.view();
    expect_error(p, in, "K", "dividing H=4");
  }
  {
    Problem p = base();
    Array k = zeros(DType::f32, {2, 2, 5, 6});
    ox::AttentionInputs in = p.inputs();
    in.K = k.view();
    expect_error(p, in, "K", "head size d=8");
  }
  {
    Problem p = base();
    Array v = zeros(DType::f32, {2, 2, 4, 8});
    ox::AttentionInputs in = p.inputs();
    in.V = v.view();
    expect_error(p, in, "V", "keys Nkv=5");
  }
}

TEST(OnnxAttentionErrors, three_d_heads) {
  Problem p = problem(3, 4, 2, 3, 5);
  p.fill();
  {
    Problem q = p;
    q.attr.q_num_heads.reset();
    expect_error(q, q.inputs(), "q_num_heads", "a value for 3-D inputs");
  }
  {
    Problem q = p;
    q.attr.q_num_heads = 3;  // 32 is not divisible by 3
    expect_error(q, q.inputs(), "Q", "divisible by q_num_heads=3");
  }
  {
    Problem q = p;
    q.attr.q_num_heads = 8;  // head size 4 against K's 8
    expect_error(q, q.inputs(), "K", "head size d=4");
  }
  {
    Problem q = p;
    q.attr.kv_num_heads = 8;  // K's hidden 16 as 8 heads of 2, against Q's head size 8
    expect_error(q, q.inputs(), "K", "head size d=8");
  }
  {
    Problem q = p;
    q.attr.kv_num_heads = 1;  // K's head size 16 against Q's 8
    expect_error(q, q.inputs(), "K", "head size d=8");
  }
}

TEST(OnnxAttentionErrors, caches) {
  Problem p = base();
  p.with_past = true;
  p.past = 2;
  p.fill();
  {
    ox::AttentionInputs in = p.inputs();
    in.past_value = TensorView{};
    expect_error(p, in, "past_value", "go together");
  }
  {
    Array pk = zeros(DType::f32, {2, 4, 2, 8});
    ox::AttentionInputs in = p.inputs();
    in.past_key = pk.view();
    expect_error(p, in, "past_key", "kv_num_heads=2");
  }
  {
    Array pv = zeros(DType::f32, {2, 2, 3, 8});
    ox::AttentionInputs in = p.inputs();
    in.past_value = pv.view();
    expect_error(p, in, "past_value", "past_sequence_length=2");
  }
  {
    Problem q = p;
    q.attr.opset = 24;
    Array n = from_values(DType::i64, {2}, {3, 3});
    ox::AttentionInputs in = q.inputs();
    in.nonpad_kv_seqlen = n.view();
    expect_error(q, in, "nonpad_kv_seqlen", "exclude each other");
  }
  Problem n = base();
  {
    n.attr.opset = 23;
    Array v = from_values(DType::i64, {2}, {3, 3});
    ox::AttentionInputs in = n.inputs();
    in.nonpad_kv_seqlen = v.view();
    expect_error(n, in, "nonpad_kv_seqlen", "from opset 24");
  }
  n.attr.opset = 24;
  for (const auto& [array, fragment] : {std::pair{from_values(DType::i32, {2}, {3, 3}), std::string("int64")},
                                        std::pair{from_values(DType::i64, {3}, {3, 3, 3}), std::string("batch B=2")},
                                        std::pair{from_values(DType::i64, {2}, {3, 6}), std::string("[0, Nkv=5]")},
                                        std::pair{from_values(DType::i64, {2}, {-1, 2}), std::string("[0, Nkv=5]")}}) {
    ox::AttentionInputs in = n.inputs();
    in.nonpad_kv_seqlen = array.view();
    expect_error(n, in, "nonpad_kv_seqlen", fragment);
  }
}

TEST(OnnxAttentionErrors, masks) {
  Problem p = base();
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{2, 3, 5}, {3, 3, 5}, {3, 6}, {2, 4, 2, 5}}) {
    Array m = zeros(DType::f32, shape);
    ox::AttentionInputs in = p.inputs();
    in.attn_mask = m.view();
    expect_error(p, in, "attn_mask", "broadcastable to [B, H, Nq, Nkv] = [2, 4, 3, 5]");
  }
  // Opset 23 has no short masks; opset 24 has.
  Array short_mask = zeros(DType::f32, {3, 4});
  p.attr.opset = 23;
  ox::AttentionInputs in = p.inputs();
  in.attn_mask = short_mask.view();
  expect_error(p, in, "attn_mask", "broadcastable");
  p.attr.opset = 24;
  ox::AttentionOutputs out;
  EXPECT_NO_THROW(ox::attention(in, p.attr, out));
}

// The library checks what it shares with the operator; its errors come back
// under the operator's names.
TEST(OnnxAttentionErrors, library_checks_under_onnx_names) {
  Problem p = base();  // B=2, q_num_heads=4, Sq=3, T=5
  {
    // A short mask (opset 24) is padded before the library sees it; the message says so.
    Array m = zeros(DType::f32, {3, 3, 4});
    ox::AttentionInputs in = p.inputs();
    in.attn_mask = m.view();
    expect_error(p, in, "attn_mask", "got [3, 3, 5] (attn_mask [3, 3, 4] padded to T=5 keys)");
  }
  {
    // nonpad_kv_seqlen is checked as it is, even where a short mask cuts the keys further.
    Array m = zeros(DType::f32, {3, 4});
    Array n = from_values(DType::i64, {2}, {3, 6});
    ox::AttentionInputs in = p.inputs();
    in.attn_mask = m.view();
    in.nonpad_kv_seqlen = n.view();
    expect_error(p, in, "nonpad_kv_seqlen", "values in [0, Nkv=5], got 6 at [1]");
  }
  {
    Problem q = p;
    q.attr.opset = 25;
    q.attr.left_window_size = -3;
    expect_error(q, q.inputs(), "left_window_size", "-1 (unbounded) or a key count >= 0, got -3");
  }
  {
    Problem q = p;
    q.attr.softcap = std::numeric_limits<float>::infinity();
    expect_error(q, q.inputs(), "softcap", "0 (off) or a finite number > 0");
  }
  {
    // The past must continue K (the concatenation is the layer's); K against Q is the library's.
    Problem q = base();
    q.with_past = true;
    q.past = 2;
    q.fill();
    Array pk = zeros(DType::f32, {2, 2, 2, 6});
    ox::AttentionInputs in = q.inputs();
    in.past_key = pk.view();
    expect_error(q, in, "past_key", "D=8 (from K), got 6 in [2, 2, 2, 6]");
  }
}

TEST(OnnxAttentionErrors, attributes) {
  struct Bad {
    std::string arg, fragment;
    void (*set)(ox::AttentionAttributes&);
  };
  const Bad bad[] = {
      {"opset", "23, 24 or 25", [](ox::AttentionAttributes& a) { a.opset = 22; }},
      {"is_causal", "0 or 1", [](ox::AttentionAttributes& a) { a.is_causal = 2; }},
      {"qk_matmul_output_mode", "0, 1, 2 or 3", [](ox::AttentionAttributes& a) { a.qk_matmul_output_mode = 4; }},
      {"softmax_precision", "1 (FLOAT)", [](ox::AttentionAttributes& a) { a.softmax_precision = 7; }},
      {"scale", "finite number > 0", [](ox::AttentionAttributes& a) { a.scale = 0.0f; }},
      {"scale", "finite number > 0", [](ox::AttentionAttributes& a) { a.scale = -1.0f; }},
      {"scale", "finite number > 0", [](ox::AttentionAttributes& a) { a.scale = std::nanf(""); }},
      {"softcap", "0 (off)", [](ox::AttentionAttributes& a) { a.softcap = -1.0f; }},
      {"q_num_heads", "4 (the heads of Q", [](ox::AttentionAttributes& a) { a.q_num_heads = 2; }},
      {"kv_num_heads", ">= 1", [](ox::AttentionAttributes& a) { a.kv_num_heads = 0; }},
      {"left_window_size", "from opset 25", [](ox::AttentionAttributes& a) { a.left_window_size = 2; }},
      {"right_window_size", "-1 (unbounded)",
       [](ox::AttentionAttributes& a) {
         a.opset = 25;
         a.right_window_size = -2;
       }},
      {"q_num_heads", "no value for 4-D inputs at opset 25",
       [](ox::AttentionAttributes& a) {
         a.opset = 25;
         a.q_num_heads = 4;
       }},
  };
  for (const Bad& b : bad) {
    Problem p = base();
    b.set(p.attr);
    SCOPED_TRACE(b.arg + " " + b.fragment);
    expect_error(p, p.inputs(), b.arg, b.fragment);
  }
}

TEST(OnnxAttentionErrors, qk_matmul_output_too_large) {
  Problem p = problem(4, 1, 1, 1 << 15, 1 << 14);
  p.b = 1;
  p.d = p.dv = 1;
  p.fill();
  expect_error(p, p.inputs(), "qk_matmul_output", "at most");
}

// ---------------------------------------------------------------------------
// The command line

namespace fs = std::filesystem;

class OnnxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / ("sdpa_onnx_test_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const Array& a) const {
    sdpa::io::write_npy(path(name), a.dtype, a.shape, a.bytes.data());
    return path(name);
  }
  int cli(const std::vector<std::string>& args) const {
    std::string cmd = "'" + std::string(SDPA_CLI) + "' onnx";
    for (const std::string& a : args) {
      cmd += " '";
      cmd += a;
      cmd += "'";
    }
    cmd += " >'" + path("stdout") + "' 2>'" + path("stderr") + "' </dev/null";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string stderr_text() const {
    std::ifstream in(path("stderr"));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::vector<std::string> npy_files() const {
    std::vector<std::string> r;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with("out")) r.push_back(n);
    }
    return r;
  }
  fs::path dir_;
};

TEST_F(OnnxCli, float16_three_d_with_past_writes_every_output) {
  Problem p = problem(3, 4, 2, 3, 2);
  p.t1 = p.t2 = DType::f16;
  p.with_past = true;
  p.past = 4;
  p.attr.is_causal = 1;
  p.attr.softcap = 1.5f;
  p.attr.qk_matmul_output_mode = 2;
  p.fill();
  std::mt19937_64 rng(8);
  p.mask = random_array(DType::boolean, {p.sq, p.t()}, rng, 0, 1);
  for (std::int64_t i = 0; i < p.mask->numel(); ++i) p.mask->set(i, (i % 3) != 1);
  const int code = cli({"--Q",
                        write("q.npy", p.q),
                        "--K",
                        write("k.npy", p.k),
                        "--V",
                        write("v.npy", p.v),
                        "--attn-mask",
                        write("m.npy", *p.mask),
                        "--past-key",
                        write("pk.npy", p.past_key),
                        "--past-value",
                        write("pv.npy", p.past_value),
                        "--is-causal",
                        "1",
                        "--softcap",
                        "1.5",
                        "--q-num-heads",
                        "4",
                        "--kv-num-heads",
                        "2",
                        "--qk-matmul-output-mode",
                        "2",
                        "--opset",
                        "23",
                        "--Y",
                        path("out_y.npy"),
                        "--present-key",
                        path("out_pk.npy"),
                        "--present-value",
                        path("out_pv.npy"),
                        "--qk-matmul-output",
                        path("out_qk.npy")});
  ASSERT_EQ(code, 0) << stderr_text();
  const Expected e = recompute(p);
  auto load = [&](const std::string& name) {
    const sdpa::io::NpyArray a = sdpa::io::read_npy(path(name));
    ox::Tensor t;
    t.dtype = a.dtype;
    t.shape = a.shape;
    t.data = a.data;
    return t;
  };
  const ox::Tensor y = load("out_y.npy"), pk = load("out_pk.npy"), pv = load("out_pv.npy"), qk = load("out_qk.npy");
  EXPECT_EQ(y.dtype, DType::f16);
  EXPECT_EQ(y.shape, y_shape(p));
  expect_close(values_of(y), e.y, tolerance(DType::f16, false), "Y");
  EXPECT_EQ(values_of(pk), e.present_key);
  EXPECT_EQ(values_of(pv), e.present_value);
  expect_close(values_of(qk), e.qk, tolerance(DType::f16, false), "qk_matmul_output");
}

TEST_F(OnnxCli, usage_errors_exit_2_and_write_nothing) {
  Problem p = base();
  const std::string q = write("q.npy", p.q), k = write("k.npy", p.k), v = write("v.npy", p.v);
  const std::string n = write("n.npy", from_values(DType::i64, {2}, {3, 4}));
  const std::vector<std::string> common = {"--Q", q, "--K", k, "--V", v, "--Y", path("out_y.npy")};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_EQ(cli(with({"--opset", "23", "--nonpad-kv-seqlen", n})), 2);
  EXPECT_THAT(stderr_text(), HasSubstr("--nonpad-kv-seqlen"));
  EXPECT_EQ(cli(with({"--is-causal", "2"})), 2);
  EXPECT_EQ(cli(with({"--opset", "22"})), 2);
  EXPECT_EQ(cli(with({"--qk-matmul-output-mode", "5"})), 2);
  EXPECT_EQ(cli(with({"--softmax-precision", "3"})), 2);
  EXPECT_EQ(cli(with({"--scale", "-1"})), 2);
  EXPECT_EQ(cli(with({"--past-key", k})), 2);
  EXPECT_EQ(cli(with({"--left-window-size", "2"})), 2);
  EXPECT_EQ(cli(with({"--present-key", path("out_y.npy")})), 2);
  EXPECT_TRUE(npy_files().empty());
}

TEST_F(OnnxCli, failures_name_the_flag_and_write_nothing) {
  Problem p = base();
  const std::string q = write("q.npy", p.q), k = write("k.npy", p.k), v = write("v.npy", p.v);
  const std::string bad_v = write("bad_v.npy", zeros(DType::f32, {2, 2, 4, 8}));
  // Inputs that do not fit are usage errors (2), a file that cannot be read a failure (1).
  EXPECT_EQ(cli({"--Q", q, "--K", k, "--V", bad_v, "--Y", path("out_y.npy"), "--present-key", path("out_pk.npy")}), 2);
  EXPECT_THAT(stderr_text(), HasSubstr("--V " + bad_v + ": expected keys Nkv=5 (from k), got 4"));
  const std::string m = write("m.npy", zeros(DType::f32, {3, 4}));
  EXPECT_EQ(cli({"--Q", q, "--K", k, "--V", v, "--attn-mask", m, "--opset", "23", "--Y", path("out_y.npy")}), 2);
  EXPECT_THAT(stderr_text(), HasSubstr("--attn-mask " + m));
  EXPECT_EQ(cli({"--Q", path("missing.npy"), "--K", k, "--V", v, "--Y", path("out_y.npy")}), 1);
  EXPECT_THAT(stderr_text(), HasSubstr("--Q"));
  EXPECT_TRUE(npy_files().empty());
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(OnnxCli, three_d_without_head_counts_is_a_usage_error) {
  Problem p = problem(3, 2, 2, 3, 4);
  p.fill();
  EXPECT_EQ(cli({"--Q", write("q.npy", p.q), "--K", write("k.npy", p.k), "--V", write("v.npy", p.v), "--Y",
                 path("out_y.npy")}),
            2);
  EXPECT_THAT(stderr_text(), HasSubstr("--q-num-heads"));
}

TEST_F(OnnxCli, reference_path_writes_onnx_types) {
  Problem p = problem(4, 2, 1, 3, 4);
  p.attr.opset = 24;
  p.attr.is_causal = 1;
  p.fill();
  const Array n = from_values(DType::i64, {2}, {4, 2});
  p.nonpad = n;
  ASSERT_EQ(cli({"--Q", write("q.npy", p.q), "--K", write("k.npy", p.k), "--V", write("v.npy", p.v),
                 "--nonpad-kv-seqlen", write("n.npy", n), "--is-causal", "1", "--reference", "--Y", path("out_y.npy")}),
            0)
      << stderr_text();
  const sdpa::io::NpyArray y = sdpa::io::read_npy(path("out_y.npy"));
  EXPECT_EQ(y.dtype, DType::f32);
  ox::Tensor t;
  t.dtype = y.dtype;
  t.shape = y.shape;
  t.data = y.data;
  expect_close(values_of(t), recompute(p).y, tolerance(DType::f32, true), "Y");
}

}  // namespace
