// Google Benchmark programs: sdpa's forward pass per kernel set, with FLOP/s
// and the fraction of that ISA's FMA peak measured by bench/support in the same
// run, and the OpenBLAS baseline (when built; see bench/support/CMakeLists.txt).
// The tile kernels alone (one BR x BC tile, against the one-thread FMA peak) are
// benchmarked too: the float32 scores and PV of every set, and the bf16 ones of
// sets that have them.
// Run: build/bench/attention_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/dispatch.h"
#include "sdpa/attention.h"
#include "support/machine.h"
#if SDPA_HAVE_BLAS_BASELINE
#include "support/blas_baseline.h"
#endif

namespace {

int threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// GFLOP/s of `isa`'s vector width on `n_threads` threads, measured once per ISA,
// thread count and run.
double measured_fma_peak(sdpa::Isa isa, int n_threads = threads()) {
  static std::map<std::pair<sdpa::Isa, int>, double> peaks;
  const auto key = std::make_pair(isa, n_threads);
  auto it = peaks.find(key);
  if (it == peaks.end()) it = peaks.emplace(key, sdpa::bench::fma_peak_gflops(isa, n_threads)).first;
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
void set_flop_counters(benchmark::State& st, double flop, sdpa::Isa isa, int n_threads = threads()) {
  st.counters["flop/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["%peak"] = benchmark::Counter(sdpa::bench::percent_of_peak(flop, measured_fma_peak(isa, n_threads) * 1e9),
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

// ---- One tile through one kernel: rows = BR queries against n = BC keys ----

// Kernel operands 64-byte aligned, as the driver's workspace is: a vector
// from plain operator new is 16-byte aligned, and a 64-byte load that
// straddles two cache lines costs two.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{64}); }
  friend bool operator==(const CacheLineAllocator&, const CacheLineAllocator&) { return true; }
};
template <typename T>
using Aligned = std::vector<T, CacheLineAllocator<T>>;

Aligned<float> normal_floats(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Aligned<float> x(count);
  for (float& e : x) e = normal(rng);
  return x;
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// float32 -> bf16 bits, to nearest even (the benchmarks' inputs only).
Aligned<std::uint16_t> to_bf16(const Aligned<float>& x) {
  Aligned<std::uint16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &x[i], 4);
    out[i] = static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  return out;
}

template <typename T>
std::vector<const T*> rows_of(const Aligned<T>& x, int rows, int cols) {
  std::vector<const T*> p(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) p[r] = x.data() + static_cast<std::size_t>(r) * cols;
  return p;
}

// A tile's sizes for `isa`'s set at head size d (st.range(0)).
struct TileShape {
  const sdpa::cpu::KernelSet& ks;
  int rows, n, d, bc_pad, dv_pad;
  TileShape(sdpa::Isa isa, int d_)
      : ks(sdpa::cpu::kernels_for(isa)),
        rows(ks.br),
        n(ks.bc),
        d(d_),
        bc_pad(ks.bc),
        dv_pad((d_ + ks.w - 1) / ks.w * ks.w) {}
  double flop() const { return 2.0 * rows * n * d; }
};

bool skip_unsupported(benchmark::State& st, sdpa::Isa isa) {
  if (sdpa::isa_supported(isa)) return false;
  st.SkipWithError("CPU lacks this ISA");
  return true;
}

// S = Qs·Kt (float32): FLOPs 2·BR·BC·d.
void BM_kernel_scores(benchmark::State& st, sdpa::Isa isa) {
  if (skip_unsupported(st, isa)) return;
  const TileShape t(isa, static_cast<int>(st.range(0)));
  measured_fma_peak(isa, 1);
  const auto q = normal_floats(static_cast<std::size_t>(t.rows) * t.d, 1),
             k = normal_floats(static_cast<std::size_t>(t.n) * t.d, 2);
  const auto kp = rows_of(k, t.n, t.d);
  Aligned<float> kt(static_cast<std::size_t>(t.d) * t.bc_pad), s(static_cast<std::size_t>(t.rows) * t.bc_pad);
  t.ks.pack_kt(kp.data(), t.n, t.d, kt.data(), t.bc_pad);
  for (auto _ : st) {
    t.ks.scores(q.data(), t.rows, t.d, kt.data(), t.bc_pad, s.data());
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
  set_flop_counters(st, t.flop(), isa, 1);
}

// S = scale·Q·Kᵀ from bf16 Q and K (float32 sums).
void BM_kernel_scores_bf16(benchmark::State& st, sdpa::Isa isa) {
  if (skip_unsupported(st, isa)) return;
  const TileShape t(isa, static_cast<int>(st.range(0)));
  measured_fma_peak(isa, 1);
  // The set's padding: d2 and the rows of q2 and S (kernel_set.h).
  const int d2 = round_up(t.d, t.ks.bf16_kpad), rows_pad = round_up(t.rows, t.ks.bf16_rpad);
  const auto q = to_bf16(normal_floats(static_cast<std::size_t>(t.rows) * t.d, 1));
  const auto k = to_bf16(normal_floats(static_cast<std::size_t>(t.n) * t.d, 2));
  const auto qp = rows_of(q, t.rows, t.d), kp = rows_of(k, t.n, t.d);
  Aligned<std::uint16_t> q2(static_cast<std::size_t>(rows_pad) * d2), kt2(static_cast<std::size_t>(d2) * t.bc_pad);
  Aligned<float> s(static_cast<std::size_t>(rows_pad) * t.bc_pad);
  t.ks.pack_q_bf16(qp.data(), t.rows, t.d, q2.data());
  t.ks.pack_kt_bf16(kp.data(), t.n, t.d, kt2.data(), t.bc_pad);
  const float scale = static_cast<float>(1 / std::sqrt(double(t.d)));
  for (auto _ : st) {
    t.ks.scores_bf16(q2.data(), t.rows, t.d, kt2.data(), t.bc_pad, scale, s.data());
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
  set_flop_counters(st, t.flop(), isa, 1);
}

// acc = acc·alpha + P·V (float32), dv = d: FLOPs 2·BR·BC·d.
void BM_kernel_pv(benchmark::State& st, sdpa::Isa isa) {
  if (skip_unsupported(st, isa)) return;
  const TileShape t(isa, static_cast<int>(st.range(0)));
  measured_fma_peak(isa, 1);
  const auto v = normal_floats(static_cast<std::size_t>(t.n) * t.dv_pad, 3);
  const auto vp = rows_of(v, t.n, t.dv_pad);
  Aligned<float> p(static_cast<std::size_t>(t.rows) * t.bc_pad, 1.0f / t.n),
      acc(static_cast<std::size_t>(t.rows) * t.dv_pad), alpha(static_cast<std::size_t>(t.rows), 1.0f);
  for (auto _ : st) {
    t.ks.pv(p.data(), t.rows, t.n, t.bc_pad, vp.data(), t.dv_pad, acc.data(), alpha.data(), nullptr, nullptr, 0);
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  set_flop_counters(st, t.flop(), isa, 1);
}

// The same with bf16 V and P rounded to bf16.
void BM_kernel_pv_bf16(benchmark::State& st, sdpa::Isa isa) {
  if (skip_unsupported(st, isa)) return;
  const TileShape t(isa, static_cast<int>(st.range(0)));
  measured_fma_peak(isa, 1);
  const auto v = to_bf16(normal_floats(static_cast<std::size_t>(t.n) * t.d, 3));
  const auto vp = rows_of(v, t.n, t.d);
  Aligned<std::uint16_t> v2(static_cast<std::size_t>(round_up(t.n, t.ks.bf16_kpad)) * t.dv_pad);
  t.ks.pack_v_bf16(vp.data(), t.n, t.d, v2.data(), t.dv_pad);
  Aligned<float> p(static_cast<std::size_t>(t.rows) * t.bc_pad, 1.0f / t.n),
      acc(static_cast<std::size_t>(t.rows) * t.dv_pad), alpha(static_cast<std::size_t>(t.rows), 1.0f);
  for (auto _ : st) {
    t.ks.pv_bf16(p.data(), t.rows, t.n, t.bc_pad, v2.data(), t.dv_pad, acc.data(), alpha.data());
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  set_flop_counters(st, t.flop(), isa, 1);
}

void kernel_args(benchmark::internal::Benchmark* b) { b->ArgName("d")->Arg(64)->Arg(128); }

// The bf16 kernel benchmarks, registered only for sets that have the kernels.
const bool kBf16KernelBenchmarks = [] {
#define SDPA_KERNEL(isa, name, ns, w, mr, nv, br, bc)                                                           \
  if (sdpa::cpu::kernels_for(sdpa::isa).scores_bf16) {                                                          \
    benchmark::RegisterBenchmark("BM_kernel_scores_bf16/" #name, BM_kernel_scores_bf16, sdpa::isa)              \
        ->Apply(kernel_args);                                                                                   \
    benchmark::RegisterBenchmark("BM_kernel_pv_bf16/" #name, BM_kernel_pv_bf16, sdpa::isa)->Apply(kernel_args); \
  }
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
  return true;
}();

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
      ->UseRealTime();                                                 \
  BENCHMARK_CAPTURE(BM_kernel_scores, name, sdpa::isa)->Apply(kernel_args); \
  BENCHMARK_CAPTURE(BM_kernel_pv, name, sdpa::isa)->Apply(kernel_args);
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
BENCHMARK(BM_blas_baseline)->Apply(prefill_args);

BENCHMARK_MAIN();
