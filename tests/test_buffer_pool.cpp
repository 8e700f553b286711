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

TEST_CASE("the pool keeps at most 8 buffers and 1 GiB, oldest out first", "[buffer_pool]") {
  auto pool = std::make_shared<BufferPool>();
  int deaths = 0;
  // Sizes 2^10 .. 2^19, far enough apart that each request fits one buffer only.
  for (size_t i = 0; i < 10; ++i) make(*pool, size_t(1024) << i, &deaths);  // released at once
  REQUIRE(deaths == 2);
  REQUIRE(pool->take(1024) == nullptr);  // the two oldest were dropped
  REQUIRE(pool->take(2048) == nullptr);
  BufferPtr third = pool->take(4096);
  REQUIRE(third != nullptr);

  int big = 0;
  make(*pool, kGiB / 2, &big);
  make(*pool, kGiB / 2 + 1, &big);  // over 1 GiB in all: the older half-GiB goes
  REQUIRE(big == 1);
  REQUIRE(pool->take(kGiB / 2 + 1) != nullptr);
}

TEST_CASE("a buffer larger than the byte cap is still kept, alone", "[buffer_pool]") {
  // A 1.3 GB column alternates between two buffers tick after tick; without
  // the spare, every tick would allocate and fault in the whole column.
  auto pool = std::make_shared<BufferPool>();
  int deaths = 0;
  make(*pool, 4096, &deaths);
  const DeviceBuffer* huge = nullptr;
  {
    BufferPtr h = make(*pool, kGiB + kGiB / 4, &deaths);
    huge = h.get();
  }
  REQUIRE(deaths == 1);  // the small one made room
  BufferPtr again = pool->take(kGiB + kGiB / 5);
  REQUIRE(again.get() == huge);
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
