#include "cpu/spare.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

namespace sdpa::cpu {
namespace {

struct Held {
  float* data;
  std::size_t floats;
};

struct Pool {
  Pool() { held.reserve(SpareFloats::kMaxHeld + 1); }  // so handing back never allocates
  std::mutex mu;
  std::vector<Held> held;  // at most SpareFloats::kMaxHeld, the largest first
};

Pool& pool() {
  // Never destroyed: a call ending during static destruction can still hand
  // its buffers back (they are then simply kept until the process exits).
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

SpareFloats::SpareFloats(std::size_t n) {
  n = std::max<std::size_t>(n, 1);
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    // The smallest held buffer that is large enough.
    auto best = p.held.end();
    for (auto it = p.held.begin(); it != p.held.end(); ++it)
      if (it->floats >= n && (best == p.held.end() || it->floats < best->floats)) best = it;
    if (best != p.held.end()) {
      data_ = best->data;
      floats_ = best->floats;
      p.held.erase(best);
      return;
    }
  }
  if (n > (static_cast<std::size_t>(-1) - 63) / 4) return;
  data_ = static_cast<float*>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64));
  floats_ = data_ ? n : 0;
}

SpareFloats::SpareFloats(SpareFloats&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), floats_(std::exchange(other.floats_, 0)) {}

SpareFloats& SpareFloats::operator=(SpareFloats&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    floats_ = std::exchange(other.floats_, 0);
  }
  return *this;
}

SpareFloats::~SpareFloats() { release(); }

std::size_t SpareFloats::held_count() {
  std::lock_guard<std::mutex> lock(pool().mu);
  return pool().held.size();
}

std::size_t SpareFloats::held_bytes() {
  std::lock_guard<std::mutex> lock(pool().mu);
  std::size_t bytes = 0;
  for (const Held& h : pool().held) bytes += h.floats * 4;
  return bytes;
}

void SpareFloats::release() {
  if (!data_) return;
  const Held h{std::exchange(data_, nullptr), std::exchange(floats_, 0)};
  float* drop[kMaxHeld + 1];
  std::size_t dropped = 0;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    p.held.push_back(h);  // within the reserved capacity
    // Keep the largest buffers that fit the limits, greedily; free the rest.
    std::sort(p.held.begin(), p.held.end(), [](const Held& a, const Held& b) { return a.floats > b.floats; });
    std::size_t kept = 0, bytes = 0;
    for (const Held& x : p.held) {
      if (kept < static_cast<std::size_t>(kMaxHeld) && x.floats * 4 <= kMaxHeldBytes - bytes) {
        bytes += x.floats * 4;
        p.held[kept++] = x;
      } else {
        drop[dropped++] = x.data;
      }
    }
    p.held.resize(kept);
  }
  for (std::size_t i = 0; i < dropped; ++i) std::free(drop[i]);
}

}  // namespace sdpa::cpu
