// Philox-4x32-10 and the dropout keep rule (see sdpa/dropout.h), inline for
// the kernels and the oracle alike.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace sdpa::philox {

inline constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

using Counter = std::array<std::uint32_t, 4>;
using Key = std::array<std::uint32_t, 2>;

inline Counter rounds10(Counter c, Key k) {
  for (int r = 0; r < 10; ++r) {
    const std::uint64_t p0 = std::uint64_t{kMul0} * c[0], p1 = std::uint64_t{kMul1} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

// floor(p * 2^32) for p in [0, 1): a key is kept iff its word is >= this.
inline std::uint32_t threshold(double p) {
  const double t = std::floor(p * 4294967296.0);
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
}

// The dropout stream of one (b, h) slice: words for query i, keys j..j+3 (j % 4 == 0).
struct Stream {
  Key key;
  std::uint32_t bh, offset, thr;

  Stream(std::uint64_t seed, std::uint64_t off, std::uint64_t slice, double p)
      : key{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)},
        bh(static_cast<std::uint32_t>(slice)),
        offset(static_cast<std::uint32_t>(off)),
        thr(threshold(p)) {}

  Counter words(std::int64_t i, std::int64_t j4) const {
    return rounds10({static_cast<std::uint32_t>(j4), static_cast<std::uint32_t>(i), bh, offset}, key);
  }
  bool keep(std::int64_t i, std::int64_t j) const { return words(i, j >> 2)[j & 3] >= thr; }
};

}  // namespace sdpa::philox
