// Large working buffers of floats that outlive a call: the forward's packed
// key tiles, the backward's dQ accumulators and packed Q and dO rows. A call
// takes its buffers from a small process-wide pool and hands them back when
// it ends, so the next call finds pages already mapped: a fresh 16 MiB costs
// 4096 page faults, which measured 7.6% of a backward call at N = 1024,
// d = 128, H = 8 (1 thread, Intel Xeon). The pool keeps at most kMaxHeld
// buffers and kMaxHeldBytes in all (the largest ones); concurrent calls
// each take buffers of their own.
#pragma once

#include <cstddef>

namespace sdpa::cpu {

class SpareFloats {
 public:
  SpareFloats() = default;
  // At least n floats (one when n is 0), 64-byte aligned, uninitialised;
  // empty (get() == nullptr) when the memory cannot be had.
  explicit SpareFloats(std::size_t n);
  SpareFloats(SpareFloats&& other) noexcept;
  SpareFloats& operator=(SpareFloats&& other) noexcept;
  SpareFloats(const SpareFloats&) = delete;
  SpareFloats& operator=(const SpareFloats&) = delete;
  ~SpareFloats();  // back to the pool (or freed)

  float* get() const { return data_; }
  explicit operator bool() const { return data_ != nullptr; }

  // What the pool holds now: buffers and their bytes.
  static std::size_t held_count();
  static std::size_t held_bytes();

  static constexpr int kMaxHeld = 8;
  static constexpr std::size_t kMaxHeldBytes = std::size_t{256} << 20;

 private:
  void release();
  float* data_ = nullptr;
  std::size_t floats_ = 0;  // as allocated
};

}  // namespace sdpa::cpu
