// Non-owning strided views over the caller's memory.
//
// A TensorView names a pointer, an element type, a shape of rank <= 4 and
// strides in elements (not bytes). The library never copies or owns the
// memory behind a view; inputs are only read, outputs only written.
//
// Attention takes 4-D views with named axes:
//   Q [B, H,   Nq,  d ]     O   [B, H, Nq, dv]
//   K [B, Hkv, Nkv, d ]     lse [B, H, Nq]
//   V [B, Hkv, Nkv, dv]     P   [B, H, Nq, Nkv]
// The strides of the outer axes are arbitrary (so [B,H,N,d] and [B,N,H,d]
// memory both work without copies); the last axis must be contiguous.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "sdpa/export.h"

namespace sdpa {

// i8: int8 values of a quantised K/V (Options::k_scales / v_scales hold their scales).
enum class DType : std::uint8_t { f32, f64, f16, bf16, boolean, i32, i64, i8 };

// Size of one element in bytes.
SDPA_API std::size_t dtype_size(DType t);
// "float32", "float64", "float16", "bfloat16", "bool", "int32", "int64", "int8".
SDPA_API const char* dtype_name(DType t);

inline constexpr int kMaxRank = 4;

struct SDPA_API TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> stride{};  // in elements

  // An unset view (rank 0, no data): used for optional outputs that are not wanted.
  bool is_set() const { return rank > 0; }
  std::int64_t numel() const;
  // "[2, 8, 128, 64]"
  std::string shape_string() const;

  // A C-order (row-major, packed) view. Inputs may be passed as const pointers;
  // the library never writes through a view given as an input.
  static TensorView contiguous(const void* data, DType dtype, std::initializer_list<std::int64_t> shape);
  // The same for a shape known only at run time (rank 1..4).
  static TensorView contiguous(const void* data, DType dtype, std::span<const std::int64_t> shape);
  static TensorView contiguous(const float* data, std::initializer_list<std::int64_t> shape) {
    return contiguous(data, DType::f32, shape);
  }
  static TensorView contiguous(const double* data, std::initializer_list<std::int64_t> shape) {
    return contiguous(data, DType::f64, shape);
  }

  // A view of memory laid out as [B, N, H, d] (FlashAttention's layout), presented
  // with the axes in attention's order [B, H, N, d]. No copy is made.
  static TensorView bshd(const void* data, DType dtype, std::int64_t b, std::int64_t n, std::int64_t h,
                         std::int64_t d);
  static TensorView bshd(const float* data, std::int64_t b, std::int64_t n, std::int64_t h, std::int64_t d) {
    return bshd(data, DType::f32, b, n, h, d);
  }
};

// Copies `from` into `to` element by element, converting between float32,
// float64, float16 and bfloat16 (round to nearest even; overflow gives ±inf,
// NaN stays NaN). Same shape (rank 1..4), any strides; the views must not
// overlap. Throws sdpa::Error naming "from" or "to" otherwise.
SDPA_API void convert(const TensorView& from, const TensorView& to);

}  // namespace sdpa
