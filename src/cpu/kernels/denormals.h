// Flush-to-zero / denormals-are-zero for the duration of a scope. Denormal
// operands slow x86 FP units by ~100x; attention never needs values below
// 2^-126 (they are at most that far from 0), so kernels run with both modes on
// and the caller's MXCSR is restored afterwards.
#pragma once

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace sdpa::cpu {

class FlushDenormals {
 public:
#if defined(__SSE__) || defined(__x86_64__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ (bit 15) | DAZ (bit 6)
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#else
  FlushDenormals() = default;
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;
};

}  // namespace sdpa::cpu
