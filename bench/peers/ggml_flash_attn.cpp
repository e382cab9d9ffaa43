// ggml_flash_attn: times ggml's CPU flash_attn_ext for `sdpa bench --ggml`,
// one shape per call, through ggml's public API only (ggml.h, ggml-cpu.h).
//
//   ggml_flash_attn --b 1 --h 32 --hkv 8 --nq 1 --nkv 16384 --d 128 --type f16
//                   [--causal] --threads 2 --repeats 5
//
// prints one JSON line {"peer": "ggml", "ms": median, "kernel": ..., "max_err": e}
// on success (the line scripts/peer_bench.py prints for torch), or
// {"peer": "ggml", "error": ...} and exit 2 on a bad argument. max_err is the
// largest |difference| between ggml's output and a float64 attention over the
// K/V as stored (read back through ggml's to_float), on the first and last
// query row of the first and last head: evidence that the call timed is
// attention on these shapes.
//
// Layouts are ggml's (innermost axis first): Q f32 [d, Nq, H, B], K and V
// [d, Nkv, Hkv, B] of --type (f32, f16, bf16 or q8_0: int8 values in blocks of
// 32 with one float16 scale each), the result f32 [d, H, Nq, B]. The memory
// order is sdpa's [B, H, N, d]. Causal is a float16 mask [Nkv, Nq] of 0 and
// -inf, aligned bottom-right as sdpa's causal. The graph is built once; each
// timed call is one ggml_graph_compute on a threadpool of --threads threads
// made once, so thread start-up is not timed.
#include <ggml-cpu.h>
#include <ggml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Args {
  std::int64_t b = 1, h = 1, hkv = 1, nq = 1, nkv = 1, d = 64;
  std::string type = "f16";
  bool causal = false;
  int threads = 1, repeats = 3;
};

[[noreturn]] void fail(const std::string& why) {
  std::printf("{\"peer\": \"ggml\", \"error\": \"%s\"}\n", why.c_str());
  std::exit(2);
}

std::int64_t parse_int(const std::string& flag, const char* text, std::int64_t min) {
  char* end = nullptr;
  const long long x = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || x < min)
    fail(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + text + "'");
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--causal") {
      a.causal = true;
      continue;
    }
    if (i + 1 >= argc) fail(f + ": expected a value");
    const char* v = argv[++i];
    if (f == "--b") a.b = parse_int(f, v, 1);
    else if (f == "--h") a.h = parse_int(f, v, 1);
    else if (f == "--hkv") a.hkv = parse_int(f, v, 1);
    else if (f == "--nq") a.nq = parse_int(f, v, 1);
    else if (f == "--nkv") a.nkv = parse_int(f, v, 1);
    else if (f == "--d") a.d = parse_int(f, v, 1);
    else if (f == "--threads") a.threads = static_cast<int>(parse_int(f, v, 1));
    else if (f == "--repeats") a.repeats = static_cast<int>(parse_int(f, v, 1));
    else if (f == "--type") a.type = v;
    else fail("unknown flag '" + f + "'");
  }
  if (a.h % a.hkv != 0) fail("--hkv: expected a divisor of --h");
  return a;
}

ggml_type parse_type(const std::string& t) {
  if (t == "f32") return GGML_TYPE_F32;
  if (t == "f16") return GGML_TYPE_F16;
  if (t == "bf16") return GGML_TYPE_BF16;
  if (t == "q8_0") return GGML_TYPE_Q8_0;
  fail("--type: expected f32, f16, bf16 or q8_0, got '" + t + "'");
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Row `row` (of [Nkv, Hkv, B] rows) of K or V as float32.
std::vector<float> row_f32(const ggml_tensor* x, std::int64_t row) {
  std::vector<float> out(static_cast<std::size_t>(x->ne[0]));
  const char* at = static_cast<const char*>(x->data) + row * x->nb[1];
  if (x->type == GGML_TYPE_F32)
    std::memcpy(out.data(), at, out.size() * sizeof(float));
  else
    ggml_get_type_traits(x->type)->to_float(at, out.data(), x->ne[0]);
  return out;
}

// max |ggml - float64 attention| over the first and last query row of the
// first and last head of batch entry 0 (NaN when ggml's output is not finite).
double check(const Args& a, const ggml_tensor* q, const ggml_tensor* k, const ggml_tensor* v, const ggml_tensor* out) {
  const double scale = 1 / std::sqrt(static_cast<double>(a.d));
  double err = 0;
  for (const std::int64_t h : {std::int64_t{0}, a.h - 1}) {
    const std::int64_t hk = h / (a.h / a.hkv);
    for (const std::int64_t i : {std::int64_t{0}, a.nq - 1}) {
      const float* qi = static_cast<const float*>(q->data) + (h * a.nq + i) * a.d;
      const std::int64_t last = a.causal ? std::min(a.nkv - 1, i + (a.nkv - a.nq)) : a.nkv - 1;
      if (last < 0) continue;
      std::vector<double> s(static_cast<std::size_t>(last + 1)), o(static_cast<std::size_t>(a.d), 0.0);
      double m = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j <= last; ++j) {
        const std::vector<float> kj = row_f32(k, hk * a.nkv + j);
        double dot = 0;
        for (std::int64_t c = 0; c < a.d; ++c) dot += static_cast<double>(qi[c]) * kj[c];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (std::int64_t j = 0; j <= last; ++j) {
        const double p = std::exp(s[j] - m);
        sum += p;
        const std::vector<float> vj = row_f32(v, hk * a.nkv + j);
        for (std::int64_t c = 0; c < a.d; ++c) o[c] += p * vj[c];
      }
      // The result is [d, H, Nq, B]: element (c, h, i) at (i * H + h) * d + c.
      const float* oi = static_cast<const float*>(out->data) + (i * a.h + h) * a.d;
      for (std::int64_t c = 0; c < a.d; ++c) {
        const double e = std::abs(oi[c] - o[c] / sum);
        if (!std::isfinite(oi[c])) return NAN;
        err = std::max(err, e);
      }
    }
  }
  return err;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const ggml_type kv_type = parse_type(a.type);
  if (a.d % ggml_blck_size(kv_type) != 0)
    fail("--d: expected a multiple of " + std::to_string(ggml_blck_size(kv_type)) + " for " + a.type);
  ggml_cpu_init();

  const std::int64_t mask_rows = (a.nq + 63) / 64 * 64;  // padded, as llama.cpp pads its KQ mask
  const std::size_t kv_bytes = ggml_row_size(kv_type, a.d) * a.nkv * a.hkv * a.b;
  const std::size_t bytes = 4 * a.d * a.nq * a.h * a.b * 2 + 2 * kv_bytes +
                            (a.causal ? 2 * a.nkv * mask_rows : 0) + 16 * ggml_tensor_overhead() +
                            ggml_graph_overhead() + (1 << 20);
  ggml_init_params ip{bytes, nullptr, false};
  ggml_context* ctx = ggml_init(ip);
  if (!ctx) fail("could not allocate " + std::to_string(bytes) + " bytes");

  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a.d, a.nq, a.h, a.b);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, kv_type, a.d, a.nkv, a.hkv, a.b);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, kv_type, a.d, a.nkv, a.hkv, a.b);
  ggml_tensor* mask = nullptr;

  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  {
    float* qd = static_cast<float*>(q->data);
    for (std::int64_t i = 0; i < ggml_nelements(q); ++i) qd[i] = normal(rng);
    // K and V from float32 rows, converted or quantised by ggml itself.
    const std::int64_t rows = a.nkv * a.hkv * a.b;
    std::vector<float> x(static_cast<std::size_t>(rows * a.d));
    for (ggml_tensor* t : {k, v}) {
      for (float& e : x) e = normal(rng);
      ggml_quantize_chunk(kv_type, x.data(), t->data, 0, rows, a.d, nullptr);
    }
  }
  if (a.causal) {
    mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, a.nkv, mask_rows);
    ggml_fp16_t* m = static_cast<ggml_fp16_t*>(mask->data);
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), minus_inf = ggml_fp32_to_fp16(-INFINITY);
    for (std::int64_t i = 0; i < mask_rows; ++i)
      for (std::int64_t j = 0; j < a.nkv; ++j)
        m[i * a.nkv + j] = i < a.nq && j <= i + (a.nkv - a.nq) ? zero : minus_inf;
  }

  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(a.d)), 0.0f, 0.0f);
  ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);

  ggml_threadpool_params tpp = ggml_threadpool_params_default(a.threads);
  ggml_threadpool* pool = ggml_threadpool_new(&tpp);
  ggml_cplan plan = ggml_graph_plan(graph, a.threads, pool);
  std::vector<std::uint8_t> work(plan.work_size);
  plan.work_data = work.data();

  auto call = [&] {
    if (ggml_graph_compute(graph, &plan) != GGML_STATUS_SUCCESS) fail("ggml_graph_compute failed");
  };
  call();  // warm-up: page faults, thread start-up, caches
  std::vector<double> t;
  for (int r = 0; r < a.repeats; ++r) {
    const double t0 = now_ms();
    call();
    t.push_back(now_ms() - t0);
  }
  std::sort(t.begin(), t.end());
  const double err = check(a, q, k, v, out);
  if (!std::isfinite(err)) fail("ggml's result is not finite");

  std::printf("{\"peer\": \"ggml\", \"ms\": %.6g, \"kernel\": \"ggml %s flash_attn_ext K/V %s\", \"max_err\": %.3g}\n",
              t[t.size() / 2], ggml_version(), ggml_type_name(kv_type), err);
  ggml_threadpool_free(pool);
  ggml_free(ctx);
  return 0;
}
