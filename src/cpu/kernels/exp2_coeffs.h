// Coefficients of 2^f ~= 1 + f*(c0 + f*(c1 + ... + f*c5)) on f in [-0.5, 0.5].
// Fitted for minimum relative error (iteratively reweighted least squares on
// Chebyshev nodes): |rel err| <= 2.0e-9 in exact arithmetic, far below float's
// 6e-8, so the float evaluation (Horner with FMA) dominates the error. The
// measured worst case over the range used is in tests/exp2_test.cpp.
#pragma once

namespace sdpa::cpu::exp2_coeffs {
inline constexpr float c0 = 0.6931472028550667f;
inline constexpr float c1 = 0.2402264791362524f;
inline constexpr float c2 = 0.055503324711223545f;
inline constexpr float c3 = 0.00961843735802288f;
inline constexpr float c4 = 0.0013398874415691125f;
inline constexpr float c5 = 0.0001535336182668101f;
// Below this exponent 2^t would be a denormal: the kernels return 0 (flush to
// zero), which is within 2^-126 of the exact value.
inline constexpr float min_exponent = -126.0f;
}  // namespace sdpa::cpu::exp2_coeffs
