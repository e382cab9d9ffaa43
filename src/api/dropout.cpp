#include "sdpa/dropout.h"

#include "philox.h"

namespace sdpa {

std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
  return philox::rounds10(counter, key);
}

bool dropout_keep(double p, std::uint64_t seed, std::uint64_t offset, std::int64_t heads, std::int64_t b,
                  std::int64_t h, std::int64_t i, std::int64_t j) {
  return philox::Stream(seed, offset, static_cast<std::uint64_t>(b * heads + h), p).keep(i, j);
}

}  // namespace sdpa
