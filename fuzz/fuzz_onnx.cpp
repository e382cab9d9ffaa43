// The ONNX Attention operator (sdpa::onnx::attention) with shapes, dtypes,
// attributes, masks, past_key/past_value and nonpad_kv_seqlen decoded from the
// input. Dimensions are small so each run is fast. A call either succeeds with
// outputs of the documented shapes or throws sdpa::Error; where the fast path
// and the reference path both succeed, their Y agree.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "fuzz_util.h"
#include "sdpa/onnx.h"

namespace {

using namespace sdpa;
using fuzz::Buffer;
using fuzz::Layout;

DType float_type(FuzzedDataProvider& fdp) {
  const DType t[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::f32, DType::i32};
  return t[fdp.ConsumeIntegralInRange<int>(0, 5)];
}

std::int64_t maybe_off(FuzzedDataProvider& fdp, std::int64_t v) {
  // Now and then a dimension that does not fit.
  return fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? fdp.ConsumeIntegralInRange<std::int64_t>(0, 5) : v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider fdp(data, size);
  const std::int64_t opsets[] = {23, 24, 25, 22, 26};
  onnx::AttentionAttributes attr;
  attr.opset = opsets[fdp.ConsumeIntegralInRange<int>(0, fdp.ConsumeBool() ? 2 : 4)];
  const bool rank3 = fdp.ConsumeBool();
  const std::int64_t B = fdp.ConsumeIntegralInRange<int>(0, 2);
  const std::int64_t Hkv = fdp.ConsumeIntegralInRange<int>(1, 3);
  const std::int64_t Hq = fdp.ConsumeBool() ? Hkv * fdp.ConsumeIntegralInRange<int>(1, 3)
                                            : fdp.ConsumeIntegralInRange<int>(1, 4);
  const std::int64_t Sq = fdp.ConsumeIntegralInRange<int>(0, 4);
  const std::int64_t Skv = fdp.ConsumeIntegralInRange<int>(0, 5);
  const std::int64_t D = fdp.ConsumeIntegralInRange<int>(1, 8);
  const std::int64_t Dv = fdp.ConsumeBool() ? D : fdp.ConsumeIntegralInRange<int>(1, 8);
  const bool past = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  const std::int64_t P = past ? fdp.ConsumeIntegralInRange<int>(0, 3) : 0;
  const std::int64_t T = P + Skv;

  const DType t1 = float_type(fdp), t2 = fdp.ConsumeBool() ? t1 : float_type(fdp);
  const DType tk = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? float_type(fdp) : t1;
  const Layout layout = static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 4));
  const bool specials = fdp.ConsumeIntegralInRange<int>(0, 7) == 0;

  auto qkv_shape = [&](std::int64_t heads, std::int64_t s, std::int64_t d) {
    if (rank3) return std::vector<std::int64_t>{maybe_off(fdp, B), maybe_off(fdp, s), maybe_off(fdp, heads * d)};
    return std::vector<std::int64_t>{maybe_off(fdp, B), maybe_off(fdp, heads), maybe_off(fdp, s), maybe_off(fdp, d)};
  };
  Buffer q = fuzz::make_buffer(fdp, t1, qkv_shape(Hq, Sq, D), layout, specials);
  Buffer k = fuzz::make_buffer(fdp, tk, qkv_shape(Hkv, Skv, D), layout, specials);
  Buffer v = fuzz::make_buffer(fdp, t2, qkv_shape(Hkv, Skv, Dv), layout, specials);
  onnx::AttentionInputs in;
  in.Q = q.view;
  in.K = k.view;
  in.V = v.view;

  Buffer pk, pv, mask, nonpad;
  if (past) {
    pk = fuzz::make_buffer(fdp, t1, {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, P), maybe_off(fdp, D)},
                           layout, specials);
    pv = fuzz::make_buffer(fdp, t2, {maybe_off(fdp, B), maybe_off(fdp, Hkv), maybe_off(fdp, P), maybe_off(fdp, Dv)},
                           layout, specials);
    if (fdp.ConsumeIntegralInRange<int>(0, 7) != 0) in.past_key = pk.view;
    if (fdp.ConsumeIntegralInRange<int>(0, 7) != 0) in.past_value = pv.view;
  }
  if (fdp.ConsumeBool()) {
    const DType mt[] = {DType::boolean, DType::f32, DType::f16, DType::f64, DType::bf16, DType::i32, DType::i64};
    const DType mdt = mt[fdp.ConsumeIntegralInRange<int>(0, 6)];
    const int mrank = fdp.ConsumeIntegralInRange<int>(1, 4);
    const std::int64_t full[4] = {B, Hq, Sq, T};
    std::vector<std::int64_t> ms;
    for (int a = 4 - mrank; a < 4; ++a) {
      const int c = fdp.ConsumeIntegralInRange<int>(0, 5);
      ms.push_back(c <= 2 ? full[a] : c == 3 ? 1 : fdp.ConsumeIntegralInRange<std::int64_t>(0, T + 1));
    }
    mask = fuzz::make_buffer(fdp, mdt, ms, Layout::any, false);
    if (mdt != DType::boolean) {
      // Mostly 0 or -inf, as masks are.
      const std::size_t es = dtype_size(mdt);
      for (std::size_t e = 0; e * es < mask.bytes.size(); ++e) {
        const int c = fdp.ConsumeIntegralInRange<int>(0, 3);
        fuzz::store(mask.bytes.data() + e * es, mdt,
                    c == 0 ? -std::numeric_limits<double>::infinity() : c == 1 ? 0.0 : fuzz::fuzz_value(fdp, false));
      }
    }
    in.attn_mask = mask.view;
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const DType nt = fdp.ConsumeIntegralInRange<int>(0, 5) == 0 ? DType::i32 : DType::i64;
    nonpad = fuzz::make_int_buffer(fdp, nt, {maybe_off(fdp, B)}, -1, T + 1);
    in.nonpad_kv_seqlen = nonpad.view;
  }

  attr.is_causal = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? fdp.ConsumeIntegralInRange<int>(-1, 2)
                                                               : fdp.ConsumeBool();
  if (fdp.ConsumeBool()) {
    const float sc[] = {0.5f, 1.0f, 0.125f, 0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(), 1e-30f, 1e30f};
    attr.scale = sc[fdp.ConsumeIntegralInRange<int>(0, 8)];
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const float cap[] = {1.0f, 5.0f, 0.01f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity()};
    attr.softcap = cap[fdp.ConsumeIntegralInRange<int>(0, 5)];
  }
  if (rank3 || fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    if (fdp.ConsumeIntegralInRange<int>(0, 15) != 0) attr.q_num_heads = maybe_off(fdp, Hq);
    if (fdp.ConsumeIntegralInRange<int>(0, 15) != 0) attr.kv_num_heads = maybe_off(fdp, Hkv);
  }
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const std::int64_t sp[] = {1, 10, 11, 16, 0, 7, -1};
    attr.softmax_precision = sp[fdp.ConsumeIntegralInRange<int>(0, 6)];
  }
  attr.qk_matmul_output_mode = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? fdp.ConsumeIntegralInRange<int>(-1, 5)
                                                                           : fdp.ConsumeIntegralInRange<int>(0, 3);
  if (fdp.ConsumeBool()) {
    attr.left_window_size = fdp.ConsumeIntegralInRange<int>(-2, 6);
    attr.right_window_size = fdp.ConsumeIntegralInRange<int>(-2, 6);
  }
  onnx::AttentionOutputs out, ref;
  out.want_present_key = ref.want_present_key = fdp.ConsumeBool();
  out.want_present_value = ref.want_present_value = fdp.ConsumeBool();
  out.want_qk_matmul_output = ref.want_qk_matmul_output = fdp.ConsumeBool();

  bool fast_ok = true, ref_ok = true;
  try {
    onnx::attention(in, attr, out, false);
  } catch (const Error&) {
    fast_ok = false;
  }
  try {
    onnx::attention(in, attr, ref, true);
  } catch (const Error&) {
    ref_ok = false;
  }
  if (fast_ok != ref_ok) fuzz::fail(fast_ok ? "reference path refused a call the fast path ran"
                                             : "fast path refused a call the reference path ran");
  if (!fast_ok) {
    if (out.Y.produced()) fuzz::fail("a refused call left Y produced");
    return 0;
  }
  auto check = [](const char* what, const onnx::Tensor& t, bool want) {
    if (t.produced() != want) fuzz::fail(what);
    if (t.produced() && t.data.size() != static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype))
      fuzz::fail("output data size != numel * dtype size");
  };
  check("Y not produced", out.Y, true);
  check("present_key produced != wanted", out.present_key, out.want_present_key);
  check("present_value produced != wanted", out.present_value, out.want_present_value);
  check("qk_matmul_output produced != wanted", out.qk_matmul_output, out.want_qk_matmul_output);
  if (out.Y.shape != ref.Y.shape || out.Y.dtype != ref.Y.dtype) fuzz::fail("fast and reference Y shapes differ");
  // A scale far from 1 (1e30) makes the float32 scores ill-conditioned: the
  // rounding of q·scale, amplified by cancellation in q·k, is then of the
  // order of the scores themselves, and float32 and float64 may rightly differ
  // (fuzz_attention treats such scales the same way).
  const bool well_conditioned = !attr.scale || (*attr.scale > 0 && *attr.scale < 10);
  if (!specials && well_conditioned && (out.Y.dtype == DType::f32 || out.Y.dtype == DType::f64)) {
    // float16/bfloat16 outputs are rounded; compare the wide types only.
    fuzz::compare("Y", out.Y.view(), ref.Y.view(), out.Y.dtype == DType::f32 ? 2e-3 : 1e-3);
  }
  return 0;
}
