// int8 quantisation of one row in groups (the rule of sdpa::quantize_int8,
// include/sdpa/serving.h): shared by the public call and by appending to an
// int8 KV cache.
#pragma once

#include <cstdint>

#include "sdpa/tensor_view.h"

namespace sdpa {

// x[0..n) in groups of `group` (n % group == 0) into q[0..n) and n / group
// scales of dtype sdt (float32 or float16) at scales[0..), scales_stride apart.
void quantize_row_i8(const float* x, std::int64_t n, std::int64_t group, std::int8_t* q, void* scales, DType sdt,
                     std::int64_t scales_stride);

}  // namespace sdpa
