// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0).
//
// Only plain little-endian, C-order arrays of the dtypes sdpa uses are
// supported: '<f4', '<f8', '<f2', '|b1', '|i1', '<i4', '<i8' (float16 is
// IEEE binary16, NumPy's float16; .npy has no bfloat16, which is refused on
// writing). Anything else, and any malformed file, is reported as sdpa::Error
// naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "sdpa/error.h"
#include "sdpa/tensor_view.h"

namespace sdpa::io {

// The largest rank read or written; sdpa's own tensors are rank <= 4, the rest
// is headroom for auxiliary arrays.
inline constexpr int kMaxNpyRank = 8;

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;  // rank 0..8; rank 0 = a scalar (1 element)
  std::vector<std::byte> data;      // C order, little-endian, numel*dtype_size bytes
  // Used in error messages; parse_npy/read_npy set it to their `name`/path.
  std::string name;

  std::int64_t numel() const;
  // A C-order TensorView over `data` (rank must be <= 4, else sdpa::Error naming
  // the array). A scalar (rank 0) is presented as shape [1], since a rank-0
  // TensorView means "unset".
  TensorView view();

  // Typed pointer; throws sdpa::Error if dtype mismatches. T is one of float,
  // double, bool, std::int8_t, std::int32_t, std::int64_t, or std::uint16_t for
  // the raw bits of float16.
  template <class T>
  T* as();
  template <class T>
  const T* as() const;

  // Throws sdpa::Error naming the array unless dtype == want.
  void require_dtype(DType want) const;
};

namespace detail {

template <class T>
inline constexpr bool kAlwaysFalse = false;

template <class T>
constexpr DType npy_dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return DType::f32;
  } else if constexpr (std::is_same_v<U, double>) {
    return DType::f64;
  } else if constexpr (std::is_same_v<U, std::uint16_t>) {
    return DType::f16;
  } else if constexpr (std::is_same_v<U, bool>) {
    return DType::boolean;
  } else if constexpr (std::is_same_v<U, std::int8_t>) {
    return DType::i8;
  } else if constexpr (std::is_same_v<U, std::int32_t>) {
    return DType::i32;
  } else if constexpr (std::is_same_v<U, std::int64_t>) {
    return DType::i64;
  } else {
    static_assert(kAlwaysFalse<T>, "NpyArray::as<T>: T has no matching sdpa::DType");
  }
}

}  // namespace detail

template <class T>
T* NpyArray::as() {
  require_dtype(detail::npy_dtype_of<T>());
  return reinterpret_cast<T*>(data.data());
}

template <class T>
const T* NpyArray::as() const {
  require_dtype(detail::npy_dtype_of<T>());
  return reinterpret_cast<const T*>(data.data());
}

// `name` is used in error messages (usually the path or the CLI flag).
NpyArray parse_npy(std::span<const std::byte> bytes, const std::string& name);
NpyArray read_npy(const std::string& path);  // errors name the path
std::vector<std::byte> encode_npy(DType dtype, std::span<const std::int64_t> shape, const void* data);
// Atomic write: writes to a temporary file in the same folder (path + ".tmp.XXXXXX"),
// fsyncs, then rename()s over `path`. On any failure the temporary file is removed
// and sdpa::Error is thrown; `path` is then untouched (no partial file ever).
void write_npy(const std::string& path, DType dtype, std::span<const std::int64_t> shape, const void* data);
// The same atomic write for any bytes: head then body (either may be empty).
void write_file_atomic(const std::string& path, const void* head, std::size_t head_bytes, const void* body = nullptr,
                       std::size_t body_bytes = 0);

}  // namespace sdpa::io
