// SPDX-License-Identifier: Apache-2.0
// The stage's per-prim attribute counts (core/attribute_counts.hpp), against
// a plain map: pages that hold one count for all their prims (a whole-range
// write) cost no bytes per prim, and behave like any other once a prim of
// them changes on its own, above 255 attributes too.
#include "core/attribute_counts.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

using kstage::core::AttributeCounts;
using kstage::core::PrimSeq;

namespace {
constexpr uint64_t kPage = uint64_t(1) << 16;

// The prims for_each_run() lists below `bound`, checking that its runs are in order, not empty,
// and maximal within a page (two runs of one page never touch).
std::vector<uint64_t> listed_prims(const AttributeCounts& c, uint64_t bound = UINT64_MAX) {
  std::vector<uint64_t> listed;
  uint64_t end = 0;
  c.for_each_run(bound, [&](uint64_t first, uint64_t count) {
    REQUIRE(count > 0);
    REQUIRE((listed.empty() || first >= end));
    if (!listed.empty() && first == end) REQUIRE(first % kPage == 0);  // joined only at a page edge
    REQUIRE((first % kPage) + count <= kPage);                         // within one page
    for (uint64_t p = first; p < first + count; ++p) listed.push_back(p);
    end = first + count;
  });
  return listed;
}

// Every prim of `m` and its count, and no other prim, from get() and for_each_run().
void require_same(const AttributeCounts& c, const std::map<uint64_t, uint32_t>& m,
                  const std::vector<uint64_t>& probes) {
  const std::vector<uint64_t> listed = listed_prims(c);
  std::vector<uint64_t> want;
  for (const auto& [p, n] : m)
    if (n > 0) want.push_back(p);
  REQUIRE(listed == want);
  for (uint64_t p : probes) {
    CAPTURE(p);
    const auto it = m.find(p);
    REQUIRE(c.get(p) == (it == m.end() ? 0u : it->second));
  }
}
}  // namespace

TEST_CASE("whole pages of a run hold one count and no bytes", "[attribute_counts]") {
  AttributeCounts c;
  const uint64_t first = 3 * kPage;
  c.increment_run(first, 100 * kPage);  // 100 whole pages
  REQUIRE(c.bytes() < kPage);           // no page of bytes made
  REQUIRE(c.get(first - 1) == 0);
  REQUIRE(c.get(first) == 1);
  REQUIRE(c.get(first + 100 * kPage - 1) == 1);
  REQUIRE(c.get(first + 100 * kPage) == 0);
  c.increment_run(first, 100 * kPage);  // a second attribute for all of them
  REQUIRE(c.get(first + 5 * kPage + 7) == 2);
  REQUIRE(c.bytes() < kPage);
  // One prim on its own: its page gets bytes, from the page's count.
  c.increment(first + 5 * kPage + 7);
  REQUIRE(c.get(first + 5 * kPage + 7) == 3);
  REQUIRE(c.get(first + 5 * kPage + 8) == 2);
  REQUIRE(c.bytes() >= kPage);
  REQUIRE(c.bytes() < 2 * kPage + 4096);
  // A delete's prims: bytes made first, then decrement() of them.
  PrimSeq gone = PrimSeq::progression(first + 50 * kPage + 3, 3, kPage);  // three pages
  c.prepare_decrements(gone, gone.size());
  for (uint64_t p : gone) c.decrement(p);
  for (uint64_t p : gone) REQUIRE(c.get(p) == 1);
  REQUIRE(c.get(first + 50 * kPage + 4) == 2);
  REQUIRE(listed_prims(c).size() == 100 * kPage);
  uint64_t runs = 0;
  c.for_each_run(UINT64_MAX, [&](uint64_t, uint64_t) { ++runs; });
  REQUIRE(runs == 100);  // one per page: the pages of bytes too hold no gap
  using Runs = std::vector<std::pair<uint64_t, uint64_t>>;
  REQUIRE(c.joined_runs(UINT64_MAX) == Runs{{first, 100 * kPage}});           // joined across pages
  REQUIRE(c.joined_runs(first + 2 * kPage + 5) == Runs{{first, 3 * kPage}});  // (whole pages)
  c.increment(first + 200 * kPage);
  for (int i = 0; i < 2; ++i) c.decrement(first + 3 * kPage);  // a gap in the fourth page
  REQUIRE(c.joined_runs(UINT64_MAX) == Runs{{first, 3 * kPage},
                                            {first + 3 * kPage + 1, 97 * kPage - 1},
                                            {first + 200 * kPage, 1}});
}

TEST_CASE("counts from 254 on leave the per-page count for the side map", "[attribute_counts]") {
  AttributeCounts c;
  for (int i = 0; i < 300; ++i) {
    if (i % 2 == 0) c.prepare_run(0, 2 * kPage + 10);
    c.increment_run(0, 2 * kPage + 10);
  }
  for (uint64_t p : {uint64_t(0), kPage - 1, kPage, 2 * kPage + 9}) REQUIRE(c.get(p) == 300);
  REQUIRE(c.get(2 * kPage + 10) == 0);
  PrimSeq one = PrimSeq::progression(kPage + 1, 1, 1);
  c.prepare_decrements(one, 1);
  for (int i = 0; i < 60; ++i) c.decrement(kPage + 1);
  REQUIRE(c.get(kPage + 1) == 240);
  REQUIRE(c.get(kPage + 2) == 300);
}

TEST_CASE("a run over a page of bytes where some prims hold 254 or more", "[attribute_counts]") {
  // The run's pass over a page's bytes is branch-free while no count reaches 254; a page where
  // some do takes the prim-by-prim path, and prepare_run makes their side-map entries first.
  AttributeCounts c;
  std::map<uint64_t, uint32_t> m;
  const uint64_t first = kPage + 100, count = 500;
  const std::vector<uint64_t> high = {first, first + 7, first + 499, first + 500};
  for (uint64_t p : high)
    for (int i = 0; i < 254; ++i) {
      c.increment(p);
      ++m[p];
    }
  for (int round = 0; round < 3; ++round) {
    c.prepare_run(first, count);
    REQUIRE(c.increment_run(first, count) == (round == 0));  // the prims without one appear once
    for (uint64_t p = first; p < first + count; ++p) ++m[p];
  }
  std::vector<uint64_t> probes = high;
  probes.insert(probes.end(), {first - 1, first + 1, first + 250, first + count});
  require_same(c, m, probes);
  REQUIRE(c.get(first + 7) == 257);
  REQUIRE(c.get(first + 500) == 254);  // past the run
}

TEST_CASE("any mix of runs, increments and decrements matches a plain map", "[attribute_counts]") {
  std::mt19937_64 rng(GENERATE(1u, 2u, 3u));
  AttributeCounts c;
  std::map<uint64_t, uint32_t> m;
  std::vector<uint64_t> probes;
  auto pick = [&](uint64_t n) { return uint64_t(rng() % n); };
  for (int step = 0; step < 150; ++step) {
    switch (pick(5)) {
      case 0: {  // a run, page-aligned or not, up to three pages
        const uint64_t first = pick(6) * kPage + (pick(2) ? 0 : pick(kPage));
        const uint64_t count = pick(2) ? kPage * (1 + pick(3)) : 1 + pick(2 * kPage);
        if (pick(2)) c.prepare_run(first, count);  // (what a seal does before it counts)
        c.increment_run(first, count);
        for (uint64_t p = first; p < first + count; ++p) ++m[p];
        probes.push_back(first);
        probes.push_back(first + count - 1);
        probes.push_back(first + count);
        break;
      }
      case 1: {
        const uint64_t p = pick(8 * kPage);
        c.increment(p);
        ++m[p];
        probes.push_back(p);
        break;
      }
      case 2: {  // a list of distinct prims, pages apart or not (as a write's new prims)
        std::vector<uint64_t> ids;
        for (int k = 0; k < 6; ++k) {
          const uint64_t p = pick(8 * kPage);
          if (std::find(ids.begin(), ids.end(), p) == ids.end()) ids.push_back(p);
        }
        bool appeared = false;
        for (uint64_t p : ids) appeared = appeared || m[p] == 0;
        REQUIRE(c.increment_each([&](const auto& f) {  // (in batches of two)
          for (size_t i = 0; i < ids.size(); i += 2)
            f(ids.data() + i, std::min<size_t>(2, ids.size() - i));
        }) == appeared);
        for (uint64_t p : ids) {
          ++m[p];
          probes.push_back(p);
        }
        break;
      }
      default: {  // decrements of prims that hold a count, a few at a time
        if (m.empty()) break;
        std::vector<uint64_t> ids;
        for (int k = 0; k < 4; ++k) {
          auto it = m.lower_bound(pick(8 * kPage));
          if (it == m.end() || it->second == 0) continue;
          if (std::find(ids.begin(), ids.end(), it->first) == ids.end()) ids.push_back(it->first);
        }
        if (ids.empty()) break;
        const PrimSeq seq(ids);
        c.prepare_decrements(seq, seq.size());
        for (uint64_t p : ids) {
          c.decrement(p);
          --m[p];
          probes.push_back(p);
        }
      }
    }
  }
  require_same(c, m, probes);
}

TEST_CASE("counts say when a prim comes into or goes out of existence", "[attribute_counts]") {
  // What the stage's existence generation is bumped by (the scene hierarchy's cache).
  AttributeCounts c;
  REQUIRE(c.increment(7));
  REQUIRE_FALSE(c.increment(7));  // a second attribute
  // A run over a page with bytes (7 is there) and a whole page of its own count.
  REQUIRE(c.increment_run(5, 4));              // 5, 6 and 8 appear
  REQUIRE_FALSE(c.increment_run(7, 1));        // 7 held attributes already
  REQUIRE(c.increment_run(2 * kPage, kPage));  // a uniform page from 0
  REQUIRE_FALSE(c.increment_run(2 * kPage, kPage));
  REQUIRE(c.increment_run(2 * kPage, kPage + 1));  // 3 * kPage appears
  REQUIRE(c.get(7) == 4);
  REQUIRE_FALSE(c.decrement(7));
  REQUIRE_FALSE(c.decrement(7));
  REQUIRE_FALSE(c.decrement(7));
  REQUIRE(c.decrement(7));
  REQUIRE(c.decrement(5));
  PrimSeq one(std::vector<uint64_t>{2 * kPage + 3});
  c.prepare_decrements(one, 1);
  REQUIRE_FALSE(c.decrement(2 * kPage + 3));  // it held 3
  REQUIRE_FALSE(c.decrement(2 * kPage + 3));
  REQUIRE(c.decrement(2 * kPage + 3));
}

TEST_CASE("a page's scan finds prims at every place of its 64-entry blocks", "[attribute_counts]") {
  // The scan looks at 64 entries, then 8, at a time: prims at the edges of both, alone or next
  // to each other, in the first and the last block of a page and of the next page.
  AttributeCounts c;
  std::map<uint64_t, uint32_t> m;
  const std::vector<uint64_t> at = {
      0,         1,         7,     8,          9,          62,           63,         64,
      65,        127,       128,   191,        4095,       4096,         kPage - 64, kPage - 9,
      kPage - 8, kPage - 1, kPage, kPage + 63, kPage + 64, 2 * kPage - 1};
  for (uint64_t p : at) {
    c.increment(p);
    ++m[p];
  }
  require_same(c, m, at);
  // A bound stops the scan of a page of bytes there (every prim below it is found).
  for (uint64_t bound : {uint64_t(0), uint64_t(1), uint64_t(9), uint64_t(64), uint64_t(65),
                         uint64_t(4096), kPage - 8, kPage, kPage + 64, 2 * kPage}) {
    CAPTURE(bound);
    std::vector<uint64_t> below;
    for (uint64_t p : at)
      if (p < bound) below.push_back(p);
    REQUIRE(listed_prims(c, bound) == below);
  }
  // Taken away again one at a time: each block left empty is skipped, the others still found.
  for (uint64_t p : at) {
    c.decrement(p);
    m.erase(p);
    require_same(c, m, at);
  }
  REQUIRE(listed_prims(c).empty());
}
