// Force-included into src/cpu/dispatch.cpp by fuzz/CMakeLists.txt, only when
// the compiler's __builtin_cpu_supports does not know "f16c" (clang < 16, so
// Debian 12's clang 14): the same answers, "f16c" read from CPUID leaf 1.
#pragma once
#include <cpuid.h>
#include <cstring>

static inline bool sdpa_fuzz_cpu_supports(const char* f) {
  if (std::strcmp(f, "f16c") == 0) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }
  if (std::strcmp(f, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
  if (std::strcmp(f, "avx2") == 0) return __builtin_cpu_supports("avx2");
  if (std::strcmp(f, "fma") == 0) return __builtin_cpu_supports("fma");
  if (std::strcmp(f, "avx") == 0) return __builtin_cpu_supports("avx");
  return false;
}
#define __builtin_cpu_supports(f) sdpa_fuzz_cpu_supports(f)
