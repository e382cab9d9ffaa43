// Helpers shared by the fuzz targets: views with fuzzed strides over buffers
// of exactly the bytes they span (so AddressSanitizer sees every stray read or
// write), filled from the fuzz input.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "half.h"
#include "sdpa/tensor_view.h"

namespace sdpa::fuzz {

// Aborts with a message: libFuzzer reports it as a crash with the reproducer.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz: %s\n", what);
  std::abort();
}

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

// One buffer and a view into it. `bytes` is the whole allocation (the view's
// span, lowest to highest address), data points at element 0 of the view.
struct Buffer {
  std::vector<std::byte> bytes;
  TensorView view;
};

// Writes value v as `dtype` at p.
inline void store(std::byte* p, DType dtype, double v) {
  switch (dtype) {
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DType::f64: std::memcpy(p, &v, 8); break;
    case DType::f16: { std::uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DType::bf16: { std::uint16_t h = to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DType::boolean: { bool b = v != 0; std::memcpy(p, &b, 1); break; }
    case DType::i32: {
      const std::int32_t i = std::isfinite(v) ? static_cast<std::int32_t>(std::clamp(v, -2e9, 2e9)) : -1;
      std::memcpy(p, &i, 4);
      break;
    }
    case DType::i64: {
      const std::int64_t i = std::isfinite(v) ? static_cast<std::int64_t>(std::clamp(v, -9e18, 9e18)) : -1;
      std::memcpy(p, &i, 8);
      break;
    }
    case DType::i8: {
      const std::int8_t i = std::isfinite(v) ? static_cast<std::int8_t>(std::clamp(v, -127.0, 127.0)) : 0;
      std::memcpy(p, &i, 1);
      break;
    }
  }
}

// Small values from the input: [-4, 4) in steps of 1/32, or (with `specials`)
// now and then NaN, ±inf or a huge value.
inline double fuzz_value(FuzzedDataProvider& fdp, bool specials) {
  const std::uint8_t b = fdp.ConsumeIntegral<std::uint8_t>();
  if (specials && b >= 252) {
    const double s[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity(), 1e30};
    return s[b - 252];
  }
  return (static_cast<int>(b) - 128) / 32.0;
}

// Values of fuzz_value's distribution from a seed instead of the input: for
// tensors too large for the input to fill (splitmix64, so a seed replays).
struct Rng {
  std::uint64_t state;
  std::uint8_t byte() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<std::uint8_t>((z ^ (z >> 31)) >> 56);
  }
  double value(bool specials) {
    const std::uint8_t b = byte();
    if (specials && b >= 252) {
      const double s[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity(), 1e30};
      return s[b - 252];
    }
    return (static_cast<int>(b) - 128) / 32.0;
  }
};

enum class Layout : std::uint8_t { contiguous, padded, negative, zero, any };

// A view of `shape` (rank 1..4) in a buffer spanning exactly its elements.
// Layout: contiguous (C order), padded (gaps between rows), negative (some
// outer axes walk backwards), zero (some outer axes broadcast), any (fuzzed).
// The last axis stays contiguous unless `last_any`. The elements come from
// the input, or from `rng` when given (the strides still come from the input).
inline Buffer make_buffer(FuzzedDataProvider& fdp, DType dtype, const std::vector<std::int64_t>& shape, Layout layout,
                          bool specials = false, bool last_any = false, Rng* rng = nullptr) {
  Buffer b;
  const int rank = static_cast<int>(shape.size());
  std::int64_t stride[4] = {0, 0, 0, 0};
  std::int64_t extent = 1;  // elements spanned so far (C order, with gaps)
  for (int a = rank - 1; a >= 0; --a) {
    std::int64_t s = extent;
    Layout l = layout;
    if (l == Layout::any) l = static_cast<Layout>(fdp.ConsumeIntegralInRange<int>(0, 3));
    const bool last = a == rank - 1;
    if (!last || last_any) {
      if (l == Layout::padded) s += fdp.ConsumeIntegralInRange<int>(0, 3);
      if (l == Layout::negative && fdp.ConsumeBool()) s = -s;
      if (l == Layout::zero && fdp.ConsumeBool()) s = 0;
    }
    stride[a] = s;
    const std::int64_t n = std::max<std::int64_t>(shape[a], 1);
    extent = std::max<std::int64_t>(extent, std::abs(s) * (n - 1) + extent);
  }
  // Lowest and highest element offsets.
  std::int64_t lo = 0, hi = 0, numel = 1;
  for (int a = 0; a < rank; ++a) {
    numel *= shape[a];
    if (shape[a] <= 0) continue;
    const std::int64_t reach = stride[a] * (shape[a] - 1);
    if (reach < 0) lo += reach; else hi += reach;
  }
  const std::size_t es = dtype_size(dtype);
  const std::int64_t span = numel == 0 ? 0 : hi - lo + 1;
  b.bytes.resize(static_cast<std::size_t>(span) * es);
  b.view.data = numel == 0 ? static_cast<void*>(b.bytes.data())
                           : static_cast<void*>(b.bytes.data() - lo * static_cast<std::int64_t>(es));
  b.view.dtype = dtype;
  b.view.rank = rank;
  for (int a = 0; a < rank; ++a) {
    b.view.shape[a] = shape[a];
    b.view.stride[a] = stride[a];
  }
  // Fill every byte of the buffer (elements not in the view too).
  for (std::int64_t e = 0; e < span; ++e)
    store(b.bytes.data() + e * es, dtype, rng ? rng->value(specials) : fuzz_value(fdp, specials));
  return b;
}

// Every element slot of the buffer (in the view or not) set to v.
inline void fill(Buffer& b, double v) {
  const std::size_t es = dtype_size(b.view.dtype);
  for (std::size_t e = 0; e * es < b.bytes.size(); ++e) store(b.bytes.data() + e * es, b.view.dtype, v);
}

// The view with axes a and c exchanged (a [B, N, H, d] buffer seen as [B, H, N, d]).
inline void swap_axes(Buffer& b, int a, int c) {
  std::swap(b.view.shape[a], b.view.shape[c]);
  std::swap(b.view.stride[a], b.view.stride[c]);
}

// A second buffer with the same bytes and strides (its own memory).
inline Buffer clone(const Buffer& b) {
  Buffer c;
  c.bytes = b.bytes;
  c.view = b.view;
  if (b.view.is_set())
    c.view.data = c.bytes.data() + (static_cast<const std::byte*>(b.view.data) - b.bytes.data());
  return c;
}

inline Buffer make_int_buffer(FuzzedDataProvider& fdp, DType dtype, const std::vector<std::int64_t>& shape,
                              std::int64_t lo, std::int64_t hi) {
  Buffer b = make_buffer(fdp, dtype, shape, Layout::contiguous);
  const std::size_t es = dtype_size(dtype);
  for (std::size_t e = 0; e * es < b.bytes.size(); ++e)
    store(b.bytes.data() + e * es, dtype, static_cast<double>(fdp.ConsumeIntegralInRange<std::int64_t>(lo, hi)));
  return b;
}

// Reads element `idx` (C-order index over the view's shape) of a float view as double.
inline double load(const TensorView& v, std::int64_t idx) {
  std::int64_t off = 0;
  for (int a = v.rank - 1; a >= 0; --a) {
    const std::int64_t n = v.shape[a];
    off += (idx % n) * v.stride[a];
    idx /= n;
  }
  const std::byte* p = static_cast<const std::byte*>(v.data) + off * static_cast<std::int64_t>(dtype_size(v.dtype));
  switch (v.dtype) {
    case DType::f32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::f64: { double d; std::memcpy(&d, p, 8); return d; }
    default: return 0;
  }
}

// |a - b| small, both NaN, or equal infinities.
inline bool close(double a, double b, double tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= tol * (1 + std::abs(b));
}

// Every element of two views of one shape agrees (see close()).
inline void compare(const char* what, const TensorView& fast, const TensorView& ref, double tol) {
  if (!fast.is_set() || !ref.is_set()) return;
  const std::int64_t n = fast.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = load(fast, i), b = load(ref, i);
    if (!close(a, b, tol)) {
      std::fprintf(stderr, "fuzz: %s differs at element %lld of %s: fast %.9g, reference %.9g\n", what,
                   static_cast<long long>(i), fast.shape_string().c_str(), a, b);
      std::abort();
    }
  }
}

}  // namespace sdpa::fuzz
