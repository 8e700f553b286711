// SPDX-License-Identifier: Apache-2.0
// Host memory that runs out in the middle of a seal. This program replaces the global
// operator new (libkstage's allocations come here too) with one that throws std::bad_alloc for
// requests of at least `fail_at` bytes while armed: a seal that needs a large host table (the
// first stamp table of a column, a ragged column's per-row lists) fails with
// KSTAGE_OUT_OF_MEMORY, the attribute's write floor stays below the write, the stage reads
// exactly as before, and the same seal succeeds once memory is back.
#include "support.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<size_t> fail_at{SIZE_MAX};

// Requests of at least `bytes` fail while this lives.
struct NoMemoryFrom {
  explicit NoMemoryFrom(size_t bytes) { fail_at = bytes; }
  ~NoMemoryFrom() { fail_at = SIZE_MAX; }
  NoMemoryFrom(const NoMemoryFrom&) = delete;
  NoMemoryFrom& operator=(const NoMemoryFrom&) = delete;
};
}  // namespace

void* operator new(size_t n) {
  if (n >= fail_at.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (void* p = std::malloc(n > 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

using namespace kstage_test;

TEST_CASE("a seal that runs out of host memory changes nothing and succeeds later", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 200000;
  kstage_path_t first = 0;
  KS_OK(kstage_intern_path_range(s.stage, "/m", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0, kN,
                                 &first));
  kstage_query_t all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  const kstage_token_t t = s.token("t");
  s.write_f32(all, t, 1, std::vector<float>(kN, 1.f));
  s.seal(1);
  // A 50% mask write at 2: its seal makes the column's first stamp table (kN bytes).
  std::vector<float> src(kN, 2.f);
  std::vector<uint64_t> mask((kN + 63) / 64, 0xAAAAAAAAAAAAAAAAull);
  int64_t shape[1] = {int64_t(kN)};
  DLTensor x = tensor(src.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&x);
  w.count = kN;
  w.mask = mask.data();
  KS_OK(s.write(all, t, 2, w));
  const std::string before = s.fingerprint(all, {t});
  {
    NoMemoryFrom guard(kN / 2);
    const kstage_status_t st = kstage_advance_write_floor(s.stage, 2, &t, 1);
    REQUIRE(st == KSTAGE_OUT_OF_MEMORY);
  }
  REQUIRE(s.floor(t) == 1);
  REQUIRE(s.fingerprint(all, {t}) == before);
  // Memory is back: the same seal applies the write, stamps and all.
  s.seal(2, {t});
  REQUIRE(s.floor(t) == 2);
  const auto got = scalars(s, all, t);
  size_t wrong = 0;
  for (uint64_t i = 0; i < kN; ++i) wrong += got.at(first + i) != (i % 2 ? 2.f : 1.f);
  REQUIRE(wrong == 0);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.change_range = true;
  d.range_begin = d.range_end = 2;
  uint64_t changed = 0;
  for (const Group& g : s.read(all, {t}, &d)) changed += g.prims.size();
  REQUIRE(changed == kN / 2);
}

TEST_CASE("a ragged seal that runs out of host memory changes nothing and succeeds later", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 50000;
  kstage_path_t first = 0;
  KS_OK(kstage_intern_path_range(s.stage, "/r", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0, kN,
                                 &first));
  kstage_query_t all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  const kstage_token_t t = s.token("r");
  // Rows of 1-3 floats, one tensor each.
  auto write_rows = [&](uint64_t ordinal, float value, const uint64_t* mask) {
    std::vector<float> data;
    std::vector<int64_t> shapes(kN);
    for (uint64_t i = 0; i < kN; ++i) shapes[i] = int64_t(1 + i % 3);
    for (uint64_t i = 0; i < kN; ++i) data.insert(data.end(), size_t(shapes[i]), value);
    std::vector<DLTensor> rows(kN);
    size_t at = 0;
    for (uint64_t i = 0; i < kN; ++i) {
      rows[i] = tensor(data.data() + at, f32(), 1, &shapes[i]);
      at += size_t(shapes[i]);
    }
    kstage_write_data_t w = write_data(rows.data(), kN, true);
    if (mask) {
      w.count = kN;
      w.mask = mask;
    }
    KS_OK(s.write(all, t, ordinal, w));  // the rows are staged (copied) by the time this returns
  };
  write_rows(1, 1.f, nullptr);
  s.seal(1);
  std::vector<uint64_t> mask((kN + 63) / 64, 0x00FF00FF00FF00FFull);
  write_rows(2, 2.f, mask.data());
  const std::string before = s.fingerprint(all, {t});
  {
    NoMemoryFrom guard(kN * 4);  // the seal's per-row tables are 8 bytes a row
    REQUIRE(kstage_advance_write_floor(s.stage, 2, &t, 1) == KSTAGE_OUT_OF_MEMORY);
  }
  REQUIRE(s.floor(t) == 1);
  REQUIRE(s.fingerprint(all, {t}) == before);
  s.seal(2, {t});
  REQUIRE(s.floor(t) == 2);
  size_t wrong = 0;
  for (const auto& [p, v] : s.floats(all, t)) {
    const uint64_t i = p - first;
    const float want = (mask[i / 64] >> (i % 64)) & 1 ? 2.f : 1.f;
    wrong += v.size() != size_t(1 + i % 3) || std::any_of(v.begin(), v.end(), [&](float f) { return f != want; });
  }
  REQUIRE(wrong == 0);
}

// A range query's read group makes its `prims` array when it is fetched (8 bytes a prim). No
// memory for it: the fetch fails with KSTAGE_OUT_OF_MEMORY and takes nothing off the read, and
// the next fetch returns that same group.
TEST_CASE("a fetch that cannot make its group's prims array takes nothing", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 100000;
  kstage_path_t first = 0;
  KS_OK(kstage_intern_path_range(s.stage, "/f", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0, kN,
                                 &first));
  kstage_query_t all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  const kstage_token_t t = s.token("t");
  std::vector<float> v(kN);
  for (uint64_t i = 0; i < kN; ++i) v[i] = float(i);
  s.write_f32(all, t, 1, v);
  s.seal(1);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.max_group_prims = kN / 2;  // two groups of 50000 prims: 400 KB of ids each
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, all, &t, 1, &d, &r));
  kstage_read_group_t g{};
  {
    NoMemoryFrom guard(kN);
    REQUIRE(kstage_fetch_read_next(s.stage, r, 0, &g) == KSTAGE_OUT_OF_MEMORY);
  }
  uint64_t seen = 0;
  for (;;) {
    const kstage_status_t st = kstage_fetch_read_next(s.stage, r, 0, &g);
    if (st == KSTAGE_END_OF_ITERATION) break;
    KS_OK(st);
    REQUIRE(g.prim_count == kN / 2);
    for (uint64_t k = 0; k < g.prim_count; ++k) REQUIRE(g.prims[k] == first + seen + k);
    const std::vector<float> got = group_floats(g, 0, size_t(g.prim_count));
    for (uint64_t k = 0; k < g.prim_count; ++k) REQUIRE(got[k] == float(seen + k));
    seen += g.prim_count;
    KS_OK(kstage_release_group(s.stage, g.handle));
  }
  REQUIRE(seen == kN);  // both groups, the first one included
  KS_OK(kstage_release_read(s.stage, r));
}
