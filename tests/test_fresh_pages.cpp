// SPDX-License-Identifier: Apache-2.0
// backends/host/fresh_pages.hpp: a fresh range's whole pages made resident in one call, its
// contents unchanged; a resident range, or one with no whole page, left alone. (Linux: mincore
// shows residency; elsewhere the call does nothing, and says so.)
#include "backends/host/fresh_pages.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cstring>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

using kstage::backends::host::populate_fresh_pages;

#if defined(__linux__)
namespace {
const size_t kPageBytes = size_t(sysconf(_SC_PAGESIZE));

// How many of the pages of [p, p + bytes) (page-aligned) are resident.
size_t resident_pages(const std::byte* p, size_t bytes) {
  std::vector<unsigned char> v(bytes / kPageBytes);
  REQUIRE(mincore(const_cast<std::byte*>(p), bytes, v.data()) == 0);
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// A fresh anonymous mapping of `pages` pages, unmapped at the end of the scope.
struct Fresh {
  explicit Fresh(size_t pages) : bytes(pages * kPageBytes) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    (void)madvise(m, bytes, MADV_NOHUGEPAGE);  // 4 KiB pages, whatever the system's THP setting
    p = static_cast<std::byte*>(m);
  }
  ~Fresh() { munmap(p, bytes); }
  size_t bytes;
  std::byte* p = nullptr;
};
}  // namespace

TEST_CASE("fresh pages are made resident in one call, zero-filled", "[fresh_pages]") {
  Fresh f(256);
  REQUIRE(resident_pages(f.p, f.bytes) == 0);
  const size_t made = populate_fresh_pages(f.p, f.p + f.bytes);
  if (made == 0) {
    WARN("this kernel refuses MADV_POPULATE_WRITE (Linux < 5.14): nothing populated");
    REQUIRE(resident_pages(f.p, f.bytes) == 0);
    return;
  }
  REQUIRE(made == f.bytes);
  REQUIRE(resident_pages(f.p, f.bytes) == 256);
  // They read as zeros, and writing them takes far fewer faults than writing as many fresh
  // pages (none of their own: a sanitizer's shadow memory may fault for either).
  for (size_t i = 0; i < f.bytes; i += 997) REQUIRE(f.p[i] == std::byte{0});
  long before = minor_faults();
  std::memset(f.p, 0x5A, f.bytes);
  const long populated_faults = minor_faults() - before;
  Fresh g(256);
  before = minor_faults();
  std::memset(g.p, 0x5A, g.bytes);
  const long fresh_faults = minor_faults() - before;
  CAPTURE(populated_faults, fresh_faults);
  REQUIRE(fresh_faults >= 256);
  REQUIRE(populated_faults < fresh_faults / 2);
}

TEST_CASE("only the whole pages inside the range are populated", "[fresh_pages]") {
  Fresh f(8);
  // From the middle of page 1 to the middle of page 6: pages 2 to 5.
  const size_t made =
      populate_fresh_pages(f.p + kPageBytes + 100, f.p + 6 * kPageBytes + kPageBytes / 2);
  if (made == 0) return;  // (refused: the first case says so)
  REQUIRE(made == 4 * kPageBytes);
  REQUIRE(resident_pages(f.p, 2 * kPageBytes) == 0);
  REQUIRE(resident_pages(f.p + 2 * kPageBytes, 4 * kPageBytes) == 4);
  REQUIRE(resident_pages(f.p + 6 * kPageBytes, 2 * kPageBytes) == 0);
  // A range with no whole page populates nothing.
  REQUIRE(populate_fresh_pages(f.p + 7 * kPageBytes + 1, f.p + 8 * kPageBytes - 1) == 0);
  REQUIRE(populate_fresh_pages(f.p + kPageBytes, f.p + kPageBytes) == 0);
  REQUIRE(resident_pages(f.p + 7 * kPageBytes, kPageBytes) == 0);
}

TEST_CASE("a resident range is left alone, its contents unchanged", "[fresh_pages]") {
  Fresh f(64);
  std::vector<std::byte> want(f.bytes);
  for (size_t i = 0; i < f.bytes; ++i) want[i] = std::byte(i * 131 % 251);
  std::memcpy(f.p, want.data(), f.bytes);
  REQUIRE(populate_fresh_pages(f.p, f.p + f.bytes) == 0);  // its first page is resident
  REQUIRE(std::memcmp(f.p, want.data(), f.bytes) == 0);
  // A range whose first whole page is fresh is populated, and what was written stays.
  Fresh g(16);
  std::memcpy(g.p + 8 * kPageBytes, want.data(), 8 * kPageBytes);
  const size_t made = populate_fresh_pages(g.p, g.p + g.bytes);
  if (made == 0) return;
  REQUIRE(made == g.bytes);
  REQUIRE(resident_pages(g.p, g.bytes) == 16);
  REQUIRE(std::memcmp(g.p + 8 * kPageBytes, want.data(), 8 * kPageBytes) == 0);
  for (size_t i = 0; i < 8 * kPageBytes; i += 509) REQUIRE(g.p[i] == std::byte{0});
}
#else
TEST_CASE("elsewhere than Linux nothing is populated", "[fresh_pages]") {
  std::vector<std::byte> v(size_t(1) << 20);
  REQUIRE(populate_fresh_pages(v.data(), v.data() + v.size()) == 0);
}
#endif
