// Machine ceilings: the float32 FMA peak and the DRAM read bandwidth.
//
// FMA peak: every thread runs many independent accumulator chains
// (acc = acc * a + b) for a fixed number of steps. One chain would be bound by
// the FMA latency (4-5 cycles); with 12 independent chains both FMA pipes
// stay busy and the loop runs at the issue rate, which is the peak. a and b
// come from volatile globals and the accumulators are summed into a volatile
// sink, so the compiler can neither fold nor drop the loop. FLOPs are counted
// as 2 per lane per FMA. The chain is as wide as the kernels of the ISA asked
// for (kernels.def's W), and runs only where sdpa::isa_supported says the CPU
// and OS can run that ISA: the library's one detector (CPUID and XGETBV).
//
// Read bandwidth: each thread first writes its own slice of a 512 MiB buffer
// (so its pages are really allocated, and on the thread's own NUMA node),
// then streams it with a sum over eight independent 4-float vector
// accumulators, enough loads in flight that DRAM, not the add latency, is the
// limit. 512 MiB is far beyond any cache.
//
// Both use the same harness: all threads wait at a start barrier, the clock
// runs from the moment the last one arrives until the last one finishes, and
// the best of several rounds is reported (the first rounds also serve to
// bring the clocks up).
#include "support/machine.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sdpa/attention.h"

namespace sdpa::bench {

namespace detail {
#if defined(__x86_64__) || defined(__i386__)
// Defined in fma_peak_avx2.cpp (built with -mavx2 -mfma).
float fma_chains_avx2(std::int64_t iters, float a, float b);
// Defined in fma_peak_avx512.cpp (built with -mavx512f).
float fma_chains_avx512(std::int64_t iters, float a, float b);
#endif
}  // namespace detail

namespace {

// Steps per thread and round: about 0.07 s for the AVX2 chain at ~3 GHz
// (12 FMAs per step, two per cycle), so three rounds take about 0.2 s.
constexpr std::int64_t kAvx2Steps = 35'000'000;
constexpr std::int64_t kScalarSteps = 10'000'000;
constexpr int kChains = 12;
constexpr int kFmaRounds = 3;

constexpr std::size_t kBandwidthBytes = std::size_t{512} << 20;
constexpr int kBandwidthRounds = 5;

// Chain operands: a < 1 keeps every chain bounded (it converges to
// b / (1 - a)), and volatile stops the compiler from treating them as constants.
volatile float g_chain_a = 0.999999f;
volatile float g_chain_b = 1.0e-6f;
volatile float g_sink = 0.0f;

// Runs setup(t) once on every thread t, then `rounds` rounds of work(t); each
// round starts when all threads have reached the start barrier and ends when
// the last thread finishes. Returns the shortest round in seconds.
template <class Setup, class Work>
double best_round_seconds(int threads, int rounds, Setup setup, Work work) {
  using clock = std::chrono::steady_clock;
  struct Timer {
    bool at_start = true;
    clock::time_point start{};
    double best = std::numeric_limits<double>::infinity();
  } timer;
  auto on_phase = [&timer]() noexcept {
    const clock::time_point now = clock::now();
    if (timer.at_start) {
      timer.start = now;
    } else {
      timer.best = std::min(timer.best, std::chrono::duration<double>(now - timer.start).count());
    }
    timer.at_start = !timer.at_start;
  };
  std::barrier sync(threads, on_phase);
  auto body = [&](int t) {
    setup(t);
    for (int r = 0; r < rounds; ++r) {
      sync.arrive_and_wait();
      work(t);
      sync.arrive_and_wait();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (std::thread& th : pool) th.join();
  return timer.best;
}

// Portable version of the chain: kChains independent scalar chains.
float fma_chains_scalar(std::int64_t iters, float a, float b) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 0.1f * static_cast<float>(c);
  for (std::int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  }
  float s = 0.0f;
  for (int c = 0; c < kChains; ++c) s += acc[c];
  return s;
}

// Sum of n floats (n a multiple of kLanes) over eight 4-float vector
// accumulators. The GCC/Clang vector extension keeps them in registers at any
// optimisation level (SSE2 on x86-64, generic code elsewhere); 16-byte loads
// at up to two per cycle are far above what DRAM can deliver to one core.
using f32x4 = float __attribute__((vector_size(16)));
constexpr std::size_t kLanes = 32;

inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float sum_slice(const float* p, std::size_t n) {
  f32x4 a0{}, a1{}, a2{}, a3{}, a4{}, a5{}, a6{}, a7{};
  for (std::size_t i = 0; i < n; i += kLanes) {
    a0 += load4(p + i);
    a1 += load4(p + i + 4);
    a2 += load4(p + i + 8);
    a3 += load4(p + i + 12);
    a4 += load4(p + i + 16);
    a5 += load4(p + i + 20);
    a6 += load4(p + i + 24);
    a7 += load4(p + i + 28);
  }
  const f32x4 s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
  return (s[0] + s[1]) + (s[2] + s[3]);
}

}  // namespace

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int fma_lanes(Isa isa) {
#define SDPA_KERNEL(isa_, name, ns, w, mr, nv, br, bc) \
  if (isa == isa_) return w;
#include "cpu/kernels/kernels.def"
#undef SDPA_KERNEL
  throw std::invalid_argument(std::string("fma_lanes: no kernels for ") + isa_name(isa) + " in this build");
}

double percent_of_peak(double achieved, double peak) { return peak > 0 ? 100.0 * achieved / peak : 0.0; }

double fma_peak_gflops(Isa isa, int threads) {
  threads = resolve_threads(threads);
  const int lanes = fma_lanes(isa);
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("fma_peak_gflops: the CPU lacks ") + isa_name(isa));
  const bool avx2 = lanes == 8, avx512 = lanes == 16;
  if (lanes != 1 && !avx2 && !avx512)
    throw std::invalid_argument("fma_peak_gflops: no FMA chain of " + std::to_string(lanes) + " lanes");
  // Same number of FMA instructions at every width: the loop's time is what is compared.
  const std::int64_t steps = lanes == 1 ? kScalarSteps : kAvx2Steps;
  const double flops_per_step = 2.0 * lanes * kChains;
  std::vector<float> results(static_cast<std::size_t>(threads), 0.0f);
  const double seconds = best_round_seconds(
      threads, kFmaRounds, [](int) {},
      [&](int t) {
        const float a = g_chain_a;
        const float b = g_chain_b;
        float r = 0.0f;
#if defined(__x86_64__) || defined(__i386__)
        if (avx2) r = detail::fma_chains_avx2(steps, a, b);
        if (avx512) r = detail::fma_chains_avx512(steps, a, b);
#endif
        if (lanes == 1) r = fma_chains_scalar(steps, a, b);
        results[static_cast<std::size_t>(t)] += r;
      });
  float sink = 0.0f;
  for (float r : results) sink += r;
  g_sink = sink;
  const double flops = flops_per_step * static_cast<double>(steps) * threads;
  return flops / seconds * 1e-9;
}

double measure_read_bandwidth_gbs(int threads) {
  threads = resolve_threads(threads);
  const std::size_t total = kBandwidthBytes / sizeof(float);
  // Slices are whole multiples of 16 accumulator blocks (2 KiB) so every
  // thread starts on a cache-line boundary relative to the buffer start.
  const std::size_t block = kLanes * 16;
  const std::size_t slice = total / static_cast<std::size_t>(threads) / block * block;
  if (slice == 0) throw std::invalid_argument("measure_read_bandwidth_gbs: too many threads");
  // Deliberately uninitialised: each thread touches its own slice first.
  std::unique_ptr<float[]> buffer(new float[slice * static_cast<std::size_t>(threads)]);
  std::vector<float> results(static_cast<std::size_t>(threads), 0.0f);
  float* base = buffer.get();
  const double seconds = best_round_seconds(
      threads, kBandwidthRounds,
      [&](int t) {
        float* p = base + static_cast<std::size_t>(t) * slice;
        std::fill(p, p + slice, 1.0f);
      },
      [&](int t) {
        const float* p = base + static_cast<std::size_t>(t) * slice;
        results[static_cast<std::size_t>(t)] += sum_slice(p, slice);
      });
  float sink = 0.0f;
  for (float r : results) sink += r;
  g_sink = sink;
  const double bytes = static_cast<double>(slice) * threads * sizeof(float);
  return bytes / seconds * 1e-9;
}

}  // namespace sdpa::bench
