// SPDX-License-Identifier: Apache-2.0
// The buffer pool of core/buffer_pool.hpp: which released buffer a request
// gets back, and what the pool keeps. Buffers here are bookkeeping only (no
// memory behind them), so sizes can be as large as the policy needs.
#include "core/buffer_pool.hpp"

#include <catch2/catch_test_macros.hpp>

using kstage::core::BufferPool;
using kstage::core::BufferPtr;
using kstage::core::DeviceBuffer;

namespace {
constexpr size_t kGiB = size_t(1) << 30;

struct Counted : DeviceBuffer {
  explicit Counted(size_t bytes, int* deaths)
      : DeviceBuffer(nullptr, bytes, DLDevice{kDLCPU, 0}), deaths_(deaths) {}
  ~Counted() override { ++*deaths_; }
  int* deaths_;
};

BufferPtr make(BufferPool& pool, size_t bytes, int* deaths) {
  return pool.wrap(std::make_unique<Counted>(bytes, deaths));
}
}  // namespace

TEST_CASE("a request gets the smallest released buffer within +25%", "[buffer_pool]") {
  auto pool = std::make_shared<BufferPool>();
  int deaths = 0;
  const DeviceBuffer* b100 = nullptr;
  const DeviceBuffer* b120 = nullptr;
  {
    BufferPtr a = make(*pool, 100, &deaths), b = make(*pool, 120, &deaths),
              c = make(*pool, 200, &deaths);
    b100 = a.get();
    b120 = b.get();
  }  // all three released into the pool
  REQUIRE(deaths == 0);
  REQUIRE(pool->take(130) == nullptr);  // 200 is more than 25% over 130
  BufferPtr got = pool->take(96);       // 100 and 120 fit; 100 is smaller
  REQUIRE(got.get() == b100);
  REQUIRE(got->size() == 100);  // size() is the capacity
  BufferPtr second = pool->take(101);
  REQUIRE(second.get() == b120);
  REQUIRE(pool->take(100) == nullptr);  // both taken: gone from the pool
  got.reset();                          // and back again
  REQUIRE(pool->take(100).get() == b100);
}

TEST_CASE("the pool keeps at most 8 buffers and 1 GiB besides its largest, oldest out first",
          "[buffer_pool]") {
  auto pool = std::make_shared<BufferPool>();
  int deaths = 0;
  // Sizes 2^10 .. 2^19, far enough apart that each request fits one buffer only.
  for (size_t i = 0; i < 10; ++i) make(*pool, size_t(1024) << i, &deaths);  // released at once
  REQUIRE(deaths == 2);
  REQUIRE(pool->take(1024) == nullptr);  // the two oldest were dropped
  REQUIRE(pool->take(2048) == nullptr);
  BufferPtr third = pool->take(4096);
  REQUIRE(third != nullptr);

  auto big_pool = std::make_shared<BufferPool>();
  int big = 0;
  const size_t kTenth = kGiB / 10;
  make(*big_pool, 6 * kTenth, &big);
  make(*big_pool, 9 * kTenth, &big);
  make(*big_pool, 5 * kTenth, &big);  // 1.1 GiB besides the largest (0.9): the oldest goes
  REQUIRE(big == 1);
  REQUIRE(big_pool->take(6 * kTenth) == nullptr);
  BufferPtr a = big_pool->take(9 * kTenth), b = big_pool->take(5 * kTenth);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
}

TEST_CASE("the largest buffer is kept over the byte cap, and small releases do not evict it",
          "[buffer_pool]") {
  // A 1.3 GB column alternates between two buffers tick after tick; without
  // the spare, every tick would allocate and fault in the whole column.
  auto pool = std::make_shared<BufferPool>();
  int deaths = 0;
  const DeviceBuffer* huge = nullptr;
  {
    BufferPtr h = make(*pool, kGiB + kGiB / 4, &deaths);
    huge = h.get();
  }
  for (int i = 0; i < 3; ++i) make(*pool, 4096 << i, &deaths);  // later, smaller releases
  REQUIRE(deaths == 0);
  BufferPtr again = pool->take(kGiB + kGiB / 5);
  REQUIRE(again.get() == huge);
  REQUIRE(pool->take(4096) != nullptr);
}

TEST_CASE("buffers released after the pool is gone are destroyed", "[buffer_pool]") {
  int deaths = 0;
  BufferPtr kept;
  {
    auto pool = std::make_shared<BufferPool>();
    kept = make(*pool, 64, &deaths);
    make(*pool, 32, &deaths);  // in the pool when it dies
  }
  REQUIRE(deaths == 1);
  kept.reset();
  REQUIRE(deaths == 2);
}
