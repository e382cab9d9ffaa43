#include "sdpa/tensor_view.h"

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "half.h"
#include "sdpa/error.h"

namespace sdpa {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::boolean: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::i8: return 1;
  }
  throw Error("dtype", "a valid sdpa::DType", "enum value " + std::to_string(static_cast<int>(t)));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::boolean: return "bool";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::i8: return "int8";
  }
  // Names are used while building error messages, so this must not throw.
  return "invalid-dtype";
}

std::int64_t TensorView::numel() const {
  // An unset view holds no elements (rather than the empty product 1).
  if (rank <= 0) return 0;
  std::int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i) n *= shape[static_cast<std::size_t>(i)];
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < rank && i < kMaxRank; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[static_cast<std::size_t>(i)]);
  }
  s += "]";
  return s;
}

namespace {

// Checks one extent and folds it into a running element count, so that a view
// whose size overflows int64 is rejected here instead of producing wrapped strides.
void accumulate_extent(std::int64_t extent, std::int64_t& count, const char* what) {
  if (extent < 0) {
    throw Error("shape", "non-negative extents", std::string(what) + " = " + std::to_string(extent));
  }
  if (__builtin_mul_overflow(count, extent, &count)) {
    throw Error("shape", "an element count that fits in int64", "an overflowing shape");
  }
}

}  // namespace

TensorView TensorView::contiguous(const void* data, DType dtype, std::initializer_list<std::int64_t> shape) {
  return contiguous(data, dtype, std::span<const std::int64_t>(shape.begin(), shape.size()));
}

TensorView TensorView::contiguous(const void* data, DType dtype, std::span<const std::int64_t> shape) {
  const auto n = shape.size();
  if (n < 1 || n > static_cast<std::size_t>(kMaxRank)) {
    throw Error("shape", "rank 1.." + std::to_string(kMaxRank), "rank " + std::to_string(n));
  }
  TensorView v;
  // Views are the library's single currency for inputs and outputs; the
  // library never writes through a view given as an input.
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.rank = static_cast<int>(n);
  std::size_t i = 0;
  std::int64_t count = 1;
  for (std::int64_t e : shape) {
    accumulate_extent(e, count, ("extent " + std::to_string(i)).c_str());
    v.shape[i++] = e;
  }
  // The element count bounds the strides only when no extent is 0: with one,
  // the count is 0 and the strides of the axes before it can still overflow.
  std::int64_t stride = 1;
  for (std::size_t j = n; j-- > 0;) {
    v.stride[j] = stride;
    if (j > 0 && __builtin_mul_overflow(stride, v.shape[j], &stride))
      throw Error("shape", "extents whose strides fit in int64", v.shape_string());
  }
  return v;
}

TensorView TensorView::bshd(const void* data, DType dtype, std::int64_t b, std::int64_t n, std::int64_t h,
                            std::int64_t d) {
  std::int64_t count = 1;
  accumulate_extent(b, count, "b");
  accumulate_extent(n, count, "n");
  accumulate_extent(h, count, "h");
  accumulate_extent(d, count, "d");
  TensorView v;
  v.data = const_cast<void*>(data);
  v.dtype = dtype;
  v.rank = 4;
  v.shape = {b, h, n, d};
  // Memory is [B, N, H, d]; only the axis order presented to the caller changes.
  std::int64_t hd = 0, nhd = 0;
  if (__builtin_mul_overflow(h, d, &hd) || __builtin_mul_overflow(n, hd, &nhd))
    throw Error("shape", "extents whose strides fit in int64", v.shape_string());
  v.stride = {nhd, d, hd, 1};
  return v;
}

namespace {

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

// Byte offsets [lo, hi) a view spans (its elements' first and last byte).
std::pair<std::intptr_t, std::intptr_t> span_of(const TensorView& t) {
  std::int64_t lo = 0, hi = 0;
  for (int a = 0; a < t.rank; ++a) {
    const std::int64_t ext = (t.shape[a] - 1) * t.stride[a];
    (ext < 0 ? lo : hi) += ext;
  }
  const auto es = static_cast<std::intptr_t>(dtype_size(t.dtype));
  const auto base = reinterpret_cast<std::intptr_t>(t.data);
  return {base + lo * es, base + (hi + 1) * es};
}

}  // namespace

void convert(const TensorView& from, const TensorView& to) {
  for (auto [t, name] : {std::pair{&from, "from"}, std::pair{&to, "to"}}) {
    if (t->rank < 1 || t->rank > kMaxRank) throw Error(name, "a view of rank 1..4", "rank " + std::to_string(t->rank));
    if (!is_float(t->dtype)) throw Error(name, "float32, float64, float16 or bfloat16", dtype_name(t->dtype));
    for (int a = 0; a < t->rank; ++a)
      if (t->shape[a] < 0) throw Error(name, "non-negative sizes", t->shape_string());
    if (t->numel() > 0 && !t->data) throw Error(name, "non-null data", "nullptr");
  }
  if (to.rank != from.rank || to.shape != from.shape)
    throw Error("to", "the shape of from " + from.shape_string(), to.shape_string());
  const std::int64_t n = from.numel();
  if (n == 0) return;
  const auto [flo, fhi] = span_of(from);
  const auto [tlo, thi] = span_of(to);
  if (flo < thi && tlo < fhi) throw Error("to", "memory disjoint from from", "overlapping views");
  std::array<std::int64_t, kMaxRank> idx{};
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t af = 0, at = 0;
    for (int a = 0; a < from.rank; ++a) {
      af += idx[a] * from.stride[a];
      at += idx[a] * to.stride[a];
    }
    const double x = load_element(from.data, from.dtype, af);
    // float64 to a 16-bit type rounds once, from the double (not through float32).
    if (from.dtype == DType::f64 && (to.dtype == DType::f16 || to.dtype == DType::bf16)) {
      const float f = static_cast<float>(x);
      // Round to float32 with the sticky bit kept: the double's excess bits
      // become float32's last bit, so the 16-bit rounding below sees them.
      float g = f;
      if (std::isfinite(f) && static_cast<double>(f) != x) {
        std::uint32_t bits;
        std::memcpy(&bits, &g, sizeof bits);
        bits |= 1u;
        std::memcpy(&g, &bits, sizeof g);
        if ((static_cast<double>(f) > x) == (f > 0)) {  // f rounded away from zero: step back toward x
          std::memcpy(&bits, &f, sizeof bits);
          bits = (bits - 1u) | 1u;
          std::memcpy(&g, &bits, sizeof g);
        }
      }
      store_float(to.data, to.dtype, at, g);
    } else {
      store_float(to.data, to.dtype, at, x);
    }
    for (int a = from.rank - 1; a >= 0; --a) {
      if (++idx[a] < from.shape[a]) break;
      idx[a] = 0;
    }
  }
}

}  // namespace sdpa
