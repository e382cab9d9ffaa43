// The pool of spare buffers that large per-call working memory comes from
// (src/cpu/spare.h): a buffer handed back is handed out again, the smallest
// that fits, within the pool's limits.
#include "cpu/spare.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace sdpa::cpu {
namespace {

bool aligned64(const float* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

TEST(Spare, BufferHandedBackIsHandedOutAgainAndAligned) {
  float* first = nullptr;
  {
    SpareFloats a(1000003);
    ASSERT_TRUE(a);
    EXPECT_TRUE(aligned64(a.get()));
    a.get()[0] = 1.0f;
    a.get()[1000002] = 2.0f;  // every float asked for is writable
    first = a.get();
  }
  SpareFloats b(1000003);
  EXPECT_EQ(b.get(), first);
  SpareFloats smaller(1000);  // a request it also fits takes another buffer once it is out
  EXPECT_NE(smaller.get(), first);
}

TEST(Spare, SmallestHeldBufferThatFitsIsTaken) {
  float *big = nullptr, *mid = nullptr;
  {
    SpareFloats a(3 << 20), b(2 << 20);
    big = a.get();
    mid = b.get();
  }
  SpareFloats x((2 << 20) - 5);  // fits both: the smaller is taken
  EXPECT_EQ(x.get(), mid);
  SpareFloats y((2 << 20) + 5);  // fits only the larger
  EXPECT_EQ(y.get(), big);
}

TEST(Spare, ZeroFloatsIsAValidBuffer) {
  SpareFloats z(0);
  ASSERT_TRUE(z);
  z.get()[0] = 0.0f;
  SpareFloats empty;
  EXPECT_FALSE(empty);
}

TEST(Spare, MovedBufferIsHandedBackOnce) {
  float* p = nullptr;
  {
    SpareFloats a(777777);
    p = a.get();
    SpareFloats b(std::move(a));
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
    EXPECT_EQ(b.get(), p);
    SpareFloats c;
    c = std::move(b);
    EXPECT_EQ(c.get(), p);
  }
  SpareFloats again(777777), other(777777);
  EXPECT_EQ(again.get(), p);
  EXPECT_NE(other.get(), p);  // held once, not twice
}

TEST(Spare, AtMostMaxHeldBuffersAreKeptTheLargest) {
  const int n = SpareFloats::kMaxHeld + 3;
  std::vector<float*> handed;
  {
    std::vector<SpareFloats> bufs;
    for (int i = 0; i < n; ++i) bufs.emplace_back(static_cast<std::size_t>(4 << 20) + 1024 * i);
    for (const SpareFloats& b : bufs) handed.push_back(b.get());
  }
  EXPECT_EQ(SpareFloats::held_count(), static_cast<std::size_t>(SpareFloats::kMaxHeld));
  // Ask for the sizes again, largest first: the kMaxHeld largest come back.
  std::vector<SpareFloats> again;
  for (int i = n - 1; i >= 0; --i) again.emplace_back(static_cast<std::size_t>(4 << 20) + 1024 * i);
  for (int i = 0; i < SpareFloats::kMaxHeld; ++i) EXPECT_EQ(again[i].get(), handed[n - 1 - i]) << "size #" << n - 1 - i;
}

TEST(Spare, HeldBytesStayWithinTheLimit) {
  // Pages of a buffer never written are not touched: these cost no memory.
  const std::size_t big = SpareFloats::kMaxHeldBytes / 4 / 2 + 1;  // two do not fit together
  {
    SpareFloats a(big), b(big), c(1 << 20);
    ASSERT_TRUE(a && b && c);
  }
  EXPECT_LE(SpareFloats::held_bytes(), SpareFloats::kMaxHeldBytes);
  SpareFloats x(big), y(big);  // one held, one new
  EXPECT_LE(SpareFloats::held_bytes(), SpareFloats::kMaxHeldBytes);
  {
    SpareFloats too_big(SpareFloats::kMaxHeldBytes / 4 + 16);
    ASSERT_TRUE(too_big);
  }
  EXPECT_LE(SpareFloats::held_bytes(), SpareFloats::kMaxHeldBytes);
}

TEST(Spare, ConcurrentCallsTakeDistinctBuffers) {
  std::vector<std::thread> threads;
  std::vector<std::vector<float*>> seen(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &seen] {
      for (int i = 0; i < 200; ++i) {
        SpareFloats a(50000 + 100 * (i % 7)), b(60000);
        a.get()[0] = static_cast<float>(t);
        b.get()[59999] = static_cast<float>(i);
        if (a.get() == b.get()) seen[t].push_back(a.get());  // never: two live buffers share no memory
      }
    });
  for (std::thread& th : threads) th.join();
  for (const auto& s : seen) EXPECT_TRUE(s.empty());
}

}  // namespace
}  // namespace sdpa::cpu
