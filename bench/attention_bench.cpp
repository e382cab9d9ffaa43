// Google Benchmark programs: sdpa's forward pass per kernel set, with FLOP/s
// and the fraction of that ISA's FMA peak measured by bench/support in the same
// run, and the OpenBLAS baseline (when built; see bench/support/CMakeLists.txt).
// Run: build/bench/attention_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "sdpa/attention.h"
#include "support/machine.h"
#if SDPA_HAVE_BLAS_BASELINE
#include "support/blas_baseline.h"
#endif

namespace {

int threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// GFLOP/s of `isa`'s vector width, measured once per ISA and run.
double measured_fma_peak(sdpa::Isa isa) {
  static std::map<sdpa::Isa, double> peaks;
  auto it = peaks.find(isa);
  if (it == peaks.end()) it = peaks.emplace(isa, sdpa::bench::fma_peak_gflops(isa, threads())).first;
  return it->second;
}

double measured_bandwidth() {
  static const double bw = sdpa::bench::measure_read_bandwidth_gbs(threads()) * 1e9;
  return bw;
}

struct Buffers {
  std::int64_t h, h_kv, n_q, n_kv, d;
  std::vector<float> q, k, v, o;
  Buffers(std::int64_t h_, std::int64_t h_kv_, std::int64_t n_q_, std::int64_t n_kv_, std::int64_t d_)
      : h(h_), h_kv(h_kv_), n_q(n_q_), n_kv(n_kv_), d(d_), q(h * n_q * d), k(h_kv * n_kv * d), v(k.size()), o(q.size()) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (auto* x : {&q, &k, &v})
      for (float& e : *x) e = normal(rng);
  }
  void run(sdpa::Isa isa, bool causal) {
    sdpa::Options opt;
    opt.isa = isa;
    opt.causal = causal;
    sdpa::attention(sdpa::TensorView::contiguous(q.data(), {1, h, n_q, d}),
                    sdpa::TensorView::contiguous(k.data(), {1, h_kv, n_kv, d}),
                    sdpa::TensorView::contiguous(v.data(), {1, h_kv, n_kv, d}),
                    sdpa::TensorView::contiguous(o.data(), {1, h, n_q, d}), opt);
  }
};

// %peak against the FMA peak of `isa`: the ISA whose kernels ran (for the
// BLAS baseline, the best this CPU has, which OpenBLAS uses too). The rate
// counter divides flop * iterations by the time, so percent_of_peak's
// 100 / peak is applied to the FLOPs per iteration.
void set_flop_counters(benchmark::State& st, double flop, sdpa::Isa isa) {
  st.counters["flop/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["%peak"] = benchmark::Counter(sdpa::bench::percent_of_peak(flop, measured_fma_peak(isa) * 1e9),
                                            benchmark::Counter::kIsIterationInvariantRate);
}

// Args: N, d, causal. FLOPs = 4·H·N²·d, halved when causal.
void BM_prefill(benchmark::State& st, sdpa::Isa isa) {
  if (!sdpa::isa_supported(isa)) {
    st.SkipWithError("CPU lacks this ISA");
    return;
  }
  const std::int64_t n = st.range(0), d = st.range(1);
  const bool causal = st.range(2) != 0;
  Buffers buf(8, 8, n, n, d);
  measured_fma_peak(isa);
  for (auto _ : st) buf.run(isa, causal);
  set_flop_counters(st, 4.0 * 8 * n * n * d * (causal ? 0.5 : 1.0), isa);
}

// Args: Nkv. Decode: Hq = 32, Hkv = 8, Nq = 1, d = 128: bytes of K and V read per second.
void BM_decode(benchmark::State& st, sdpa::Isa isa) {
  if (!sdpa::isa_supported(isa)) {
    st.SkipWithError("CPU lacks this ISA");
    return;
  }
  Buffers buf(32, 8, 1, st.range(0), 128);
  measured_bandwidth();
  for (auto _ : st) buf.run(isa, false);
  const double bytes = 2.0 * 8 * st.range(0) * 128 * 4;
  st.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["%bw"] = benchmark::Counter(bytes * 100 / measured_bandwidth(), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_blas_baseline(benchmark::State& st) {
#if SDPA_HAVE_BLAS_BASELINE
  const std::int64_t n = st.range(0), d = st.range(1);
  const bool causal = st.range(2) != 0;
  Buffers buf(8, 8, n, n, d);
  std::vector<float> scratch;
  const sdpa::Isa best = sdpa::resolve_isa(sdpa::Isa::automatic);
  measured_fma_peak(best);
  for (auto _ : st)
    sdpa::bench::blas_attention(buf.q.data(), buf.k.data(), buf.v.data(), buf.o.data(), 1, 8, 8, n, n, d, d,
                                static_cast<float>(1 / std::sqrt(double(d))), causal, threads(), scratch);
  set_flop_counters(st, 4.0 * 8 * n * n * d * (causal ? 0.5 : 1.0), best);
#else
  st.SkipWithError("OpenBLAS baseline not built: apt-get install libopenblas-dev, then re-run cmake");
#endif
}

void prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "d", "causal"})->ArgsProduct({{512, 2048, 4096}, {64, 128}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

#define SDPA_KERNEL(isa, name, ns, w, mr, nv, br, bc)                \
  BENCHMARK_CAPTURE(BM_prefill, name, sdpa::isa)->Apply(prefill_args); \
  BENCHMARK_CAPTURE(BM_decode, name, sdpa::isa)                        \
      ->ArgName("Nkv")                                                 \
      ->Arg(1024)                                                      \
      ->Arg(4096)                                                      \
      ->Arg(16384)                                                     \
      ->Unit(benchmark::kMillisecond)                                  \
      ->UseRealTime();
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
BENCHMARK(BM_blas_baseline)->Apply(prefill_args);

BENCHMARK_MAIN();
