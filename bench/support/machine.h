// Machine ceilings for roofline-style reporting: the float32 FMA peak and the
// DRAM read bandwidth, both measured (not looked up), so benchmark figures can
// be shown as a fraction of what this machine can actually do. CPU features
// come from the library's own detector (sdpa::isa_supported: CPUID and XGETBV).
#pragma once

#include "sdpa/options.h"

namespace sdpa::bench {

// threads <= 0 means one per hardware thread (at least 1) in every function below.
int resolve_threads(int threads);

// Float lanes per vector of `isa`'s kernels (kernels.def's W): 1, 8 or 16.
// Throws std::invalid_argument for an ISA that has no kernels in this build.
int fma_lanes(Isa isa);

// Float32 FMA peak in GFLOP/s of `isa`'s vector width: independent FMA
// chains of fma_lanes(isa) floats on each thread, 2 FLOPs per lane per FMA.
// Kernels are held to the peak of their own ISA, so AVX-512 kernels are not
// credited with the 8-lane peak. Throws std::invalid_argument when the CPU
// cannot run `isa` (sdpa::isa_supported). The scalar chain is plain float code
// at the baseline ISA, which the compiler may vectorise.
double fma_peak_gflops(Isa isa, int threads);

// The one definition of %peak: 100 * achieved / peak (both GFLOP/s, or both
// FLOP/s), 0 when the peak is not positive.
double percent_of_peak(double achieved, double peak);

// DRAM read bandwidth in GB/s: each thread streams its own slice of a 512 MiB
// buffer (far larger than the caches).
double measure_read_bandwidth_gbs(int threads);

}  // namespace sdpa::bench
