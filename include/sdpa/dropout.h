// The random function behind dropout: Philox-4x32-10, a counter-based
// generator, so a keep decision is a pure function of its coordinates.
// ref: Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
//      SC'11, https://www.thesalmons.org/john/random123/papers/random123sc11.pdf
#pragma once

#include <array>
#include <cstdint>

#include "sdpa/export.h"

namespace sdpa {

// Ten rounds of Philox-4x32 on a 128-bit counter under a 64-bit key, as in
// Random123 (philox4x32_R(10, ctr, key)).
SDPA_API std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter,
                                                    std::array<std::uint32_t, 2> key);

// Whether dropout keeps key j for query i of batch entry b, head h, in a call
// with `heads` query heads and dropout probability p in [0, 1):
//   key     = (seed mod 2^32, seed / 2^32)
//   counter = (j / 4, i, b * heads + h, offset), each word mod 2^32
//   u       = word j mod 4 of philox4x32_10(counter, key)
//   kept    = u >= floor(p * 2^32)
// so P(kept) = 1 - p (to 2^-32). The call checks i < 2^32, j < 2^34,
// b * heads + h < 2^32 and offset < 2^32, so no two (b, h, i, j) share a word.
SDPA_API bool dropout_keep(double p, std::uint64_t seed, std::uint64_t offset, std::int64_t heads, std::int64_t b,
                           std::int64_t h, std::int64_t i, std::int64_t j);

}  // namespace sdpa
