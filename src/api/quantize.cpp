#include "quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "half.h"
#include "sdpa/error.h"
#include "sdpa/serving.h"

namespace sdpa {

void quantize_row_i8(const float* x, std::int64_t n, std::int64_t group, std::int8_t* q, void* scales, DType sdt,
                     std::int64_t scales_stride) {
  for (std::int64_t g0 = 0, s = 0; g0 < n; g0 += group, ++s) {
    float amax = 0;
    bool finite = true;
    for (std::int64_t c = g0; c < g0 + group; ++c) {
      finite = finite && std::isfinite(x[c]);
      amax = std::max(amax, std::fabs(x[c]));
    }
    // The scale as stored (rounded to its dtype) is the one the values are
    // divided by, so that value * scale reads back what was quantised.
    double scale = finite ? static_cast<double>(amax) / 127.0 : std::numeric_limits<double>::quiet_NaN();
    store_float(scales, sdt, s * scales_stride, scale);
    scale = load_element(scales, sdt, s * scales_stride);
    if (!std::isfinite(scale)) {  // NaN/inf in the group, or a scale past float16's range
      store_float(scales, sdt, s * scales_stride, std::numeric_limits<double>::quiet_NaN());
      scale = 0;
    }
    for (std::int64_t c = g0; c < g0 + group; ++c) {
      const double r = scale > 0 ? std::nearbyint(static_cast<double>(x[c]) / scale) : 0.0;
      q[c] = static_cast<std::int8_t>(std::clamp(r, -127.0, 127.0));
    }
  }
}

void quantize_int8(const TensorView& x, const TensorView& values, const TensorView& scales) {
  if (x.rank < 1 || x.rank > kMaxRank) throw Error("x", "a view of rank 1..4", "rank " + std::to_string(x.rank));
  if (x.dtype != DType::f32 && x.dtype != DType::f64 && x.dtype != DType::f16 && x.dtype != DType::bf16)
    throw Error("x", "float32, float64, float16 or bfloat16", dtype_name(x.dtype));
  if (values.dtype != DType::i8) throw Error("values", "int8", dtype_name(values.dtype));
  if (scales.dtype != DType::f32 && scales.dtype != DType::f16)
    throw Error("scales", "float32 or float16", dtype_name(scales.dtype));
  for (int a = 0; a < x.rank; ++a)
    if (x.shape[a] < 0) throw Error("x", "non-negative sizes", x.shape_string());
  if (values.rank != x.rank || values.shape != x.shape) throw Error("values", "the shape of x " + x.shape_string(), values.shape_string());
  const int last = x.rank - 1;
  const std::int64_t width = x.shape[last];
  bool same_outer = scales.rank == x.rank;
  for (int a = 0; a < last && same_outer; ++a) same_outer = scales.shape[a] == x.shape[a];
  const std::int64_t ng = same_outer ? scales.shape[last] : -1;
  if (!same_outer || ng < 1 || width % ng != 0)
    throw Error("scales", "the shape of x " + x.shape_string() + " with a last axis dividing " + std::to_string(width),
                scales.shape_string());
  for (auto [t, name] : {std::pair{&x, "x"}, std::pair{&values, "values"}, std::pair{&scales, "scales"}}) {
    if (t->shape[last] > 1 && t->stride[last] != 1)
      throw Error(name, "a contiguous last axis (stride 1)", "stride " + std::to_string(t->stride[last]));
    if (t->numel() > 0 && !t->data) throw Error(name, "non-null data", "nullptr");
  }
  const std::int64_t rows = width > 0 ? x.numel() / width : 0;
  std::vector<float> row(static_cast<std::size_t>(width));
  std::array<std::int64_t, kMaxRank> idx{};
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t ax = 0, av = 0, as = 0;
    for (int a = 0; a < last; ++a) {
      ax += idx[a] * x.stride[a];
      av += idx[a] * values.stride[a];
      as += idx[a] * scales.stride[a];
    }
    for (std::int64_t c = 0; c < width; ++c) row[c] = static_cast<float>(load_element(x.data, x.dtype, ax + c));
    quantize_row_i8(row.data(), width, width / ng, static_cast<std::int8_t*>(values.data) + av,
                    static_cast<char*>(scales.data) + as * static_cast<std::int64_t>(dtype_size(scales.dtype)),
                    scales.dtype, 1);
    for (int a = last - 1; a >= 0; --a) {
      if (++idx[a] < x.shape[a]) break;
      idx[a] = 0;
    }
  }
}

}  // namespace sdpa
