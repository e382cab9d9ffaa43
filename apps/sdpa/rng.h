// Seeded random numbers for the teaching commands and the explorer: the same
// seed gives the same numbers with every standard library (mt19937_64's
// output is fixed by the standard; the normal draw is our own Box–Muller).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace sdpa::teaching {

// splitmix64: turns (seed, salt) into well-mixed generator seeds.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// N(0, 1) by Box–Muller on mt19937_64.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : gen_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = 0;
    while (u1 <= 0) u1 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;
    const double u2 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937_64 gen_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace sdpa::teaching
