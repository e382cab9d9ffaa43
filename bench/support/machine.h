// Machine ceilings for roofline-style reporting: the float32 FMA peak and the
// DRAM read bandwidth, both measured (not looked up), so benchmark figures can
// be shown as a fraction of what this machine can actually do.
#pragma once

namespace sdpa::bench {

// Measured limits for a given number of threads.
struct MachineCeilings {
  int threads;
  double fma_peak_gflops;  // float32, 2 FLOPs per lane per FMA
  double read_bw_gbs;      // DRAM read bandwidth, 1e9 bytes per second
};

// threads <= 0 means one per hardware thread (at least 1) in every function below.

// True when the CPU supports AVX2 and FMA (always false off x86).
bool cpu_has_avx2_fma();

// Float32 FMA peak in GFLOP/s, measured with independent FMA chains on each
// thread; uses AVX2+FMA when the CPU has them, else a portable scalar chain.
double measure_fma_peak_gflops(int threads);

// As above with the code path chosen by the caller: avx2 = false measures the
// portable chain (plain float code at the baseline ISA, which the compiler may
// vectorise, so its figure depends on the optimisation level); avx2 = true
// throws std::invalid_argument when cpu_has_avx2_fma() is false.
double measure_fma_peak_gflops_isa(int threads, bool avx2);
// The same with vectors of `lanes` floats: 1 (scalar), 8 (AVX2+FMA) or 16
// (AVX-512F); throws std::invalid_argument when the CPU lacks the ISA.
double measure_fma_peak_gflops_lanes(int threads, int lanes);
bool cpu_has_avx512f();

// DRAM read bandwidth in GB/s: each thread streams its own slice of a 512 MiB
// buffer (far larger than the caches).
double measure_read_bandwidth_gbs(int threads);

// Both measurements for `threads` threads (threads is reported resolved).
MachineCeilings measure_machine(int threads);

}  // namespace sdpa::bench
