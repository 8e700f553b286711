// SPDX-License-Identifier: Apache-2.0
// How many attributes each prim holds (sealed): the stage's "does this prim
// exist" table. A prim exists while it holds at least one attribute.
//
// One byte per prim id in use, in pages of 2^16 ids; counts from 255 on (a
// prim with hundreds of attributes) live in a side map, so the common case
// stays one byte. A page whose prims all hold the same count -- a path range's
// members, which gain each attribute together when a whole-range write seals
// -- is one byte for the page and no page at all: a first write of 1e8 range
// prims neither faults in nor walks 100 MB of counts. Its bytes are made when
// one of its prims changes on its own.
#pragma once

#include "core/paged_array.hpp"
#include "core/prim_seq.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kstage::core {

class AttributeCounts {
 public:
  uint32_t get(uint64_t prim) const {
    const uint64_t page = prim >> kPageBits;
    if (!small_.has_page(page)) return uniform(page);
    const uint8_t b = small_.get(prim);
    return b == kBig ? big_.at(prim) : b;
  }
  // May throw std::bad_alloc, leaving the count as it was; does not throw for a prim of
  // prepare_run(). Returns whether the prim came into existence (its count was 0).
  bool increment(uint64_t prim) {
    uint8_t& b = entry(prim);
    if (b < kBig - 1) {
      return ++b == 1;
    } else if (b == kBig - 1) {
      big_[prim] = kBig;  // (an entry prepare_run() made: no allocation)
      b = kBig;
    } else {
      ++big_.at(prim);
    }
    return false;
  }
  // increment() of every prim of the batches `each(f)` calls f(ids, n) with (in the same order
  // every time, each prim once), all or nothing (prims close together share their page's
  // look-up): may throw std::bad_alloc, leaving the counts as they were. Returns whether one of
  // them came into existence.
  template <class Each>
  bool increment_each(const Each& each) {
    Increments state;
    try {
      each([&](const uint64_t* ids, size_t n) { increment_batch(ids, n, state); });
    } catch (...) {
      size_t k = 0;  // the first `done` go back (their bytes exist: no allocation)
      each([&](const uint64_t* ids, size_t n) {
        for (size_t i = 0; i < n && k < state.done; ++i, ++k) decrement(ids[i]);
      });
      throw;
    }
    return state.appeared;
  }
  // increment() of prims [first, first + count): whole pages that hold one
  // count for all their prims stay so (one byte each), the rest a page at a
  // time. May throw std::bad_alloc part way (like a loop of increment()). Returns whether a
  // prim of the run came into existence.
  bool increment_run(uint64_t first, uint64_t count) {
    bool appeared = false;
    for (uint64_t p = first; p < first + count;) {
      const uint64_t page = p >> kPageBits, offset = p & (kPage - 1);
      const uint64_t in_page = std::min(count - (p - first), kPage - offset);
      if (takes_uniform(page, in_page)) {
        if (page >= uniform_.size()) uniform_.resize(page + 1, 0);
        if (uniform_[page]++ == 0) appeared = true;
      } else {
        uint8_t* bytes = &entry(p);  // the page of p, from p on
        for (uint64_t k = 0; k < in_page; ++k) {
          if (bytes[k] >= kBig - 1) increment(p + k);
          else if (++bytes[k] == 1) appeared = true;
        }
      }
      p += in_page;
    }
    return appeared;
  }
  // Makes what increment_run(run_first, run_count) will need (pages' bytes, per-page counts,
  // side-map entries for counts reaching kBig), so that it cannot throw: a seal calls this
  // before it moves a write's rows, and counts the write's new prims after. May throw
  // std::bad_alloc, leaving the counts as they were (what it made reads as before).
  void prepare_run(uint64_t run_first, uint64_t run_count) {
    if (run_count == 0) return;
    const uint64_t last_page = (run_first + run_count - 1) >> kPageBits;
    if (last_page >= uniform_.size()) uniform_.resize(last_page + 1, 0);
    for (uint64_t p = run_first; p < run_first + run_count;) {
      const uint64_t page = p >> kPageBits, offset = p & (kPage - 1);
      const uint64_t in_page = std::min(run_count - (p - run_first), kPage - offset);
      if (!takes_uniform(page, in_page))
        for (uint64_t k = 0; k < in_page; ++k) prepare_increment(p + k);
      p += in_page;
    }
  }
  // Makes the bytes of prims[0, n) that share a page's count, so that
  // decrement() of them cannot throw: call before the change that needs it.
  // May throw std::bad_alloc, leaving the counts as they were.
  void prepare_decrements(const PrimSeq& prims, size_t n) {
    if (uniform_.empty()) return;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t page = prims[i] >> kPageBits;
      if (!small_.has_page(page) && uniform(page) != 0) entry(prims[i]);
    }
  }
  // Does not throw for a prim of prepare_decrements() (or one incremented on its own).
  // Returns whether the prim ceased to exist (its count reached 0).
  bool decrement(uint64_t prim) {
    uint8_t& b = entry(prim);
    if (b != kBig) return --b == 0;
    auto it = big_.find(prim);
    if (--it->second < kBig) {
      big_.erase(it);
      b = uint8_t(kBig - 1);
    }
    return false;
  }
  // Memory held (the byte pages and the per-page counts; not the side map).
  size_t bytes() const { return small_.bytes() + uniform_.capacity(); }
  // Calls f(first, count) for runs of consecutive prims holding an attribute, in increasing
  // order: a page whose prims all hold one count is one run without a look at its prims (a
  // path range's members), so a stage of 1e8 range prims is ~1500 calls. Runs do not cross
  // pages: the caller joins adjacent ones. `bound` is above every prim that holds one (the
  // stage's Dictionary::path_id_bound(): they are paths), and a page of bytes is looked at only
  // below it -- a small stage's one page, 64 Ki bytes, was a tenth of a clone to 64 targets.
  template <class F>
  void for_each_run(uint64_t bound, F&& f) const {
    const uint64_t pages = std::max<uint64_t>(uniform_.size(), small_.page_count());
    for (uint64_t page = 0; page < pages && (page << kPageBits) < bound; ++page) {
      const uint64_t base = page << kPageBits;
      if (!small_.has_page(page)) {
        if (uniform(page) != 0) f(base, kPage);
        continue;
      }
      uint64_t start = 0, count = 0;  // the run being joined
      small_.for_each_in_page(
          page,
          [&](uint64_t p) {
            if (count != 0 && p == start + count) {
              ++count;
              return;
            }
            if (count != 0) f(start, count);
            start = p;
            count = 1;
          },
          std::min(kPage, bound - base));
      if (count != 0) f(start, count);
    }
  }
  // for_each_run's runs joined across pages: the existing prims below `bound` as maximal runs
  // (a path range's members one run however many pages they span), in increasing order.
  std::vector<std::pair<uint64_t, uint64_t>> joined_runs(uint64_t bound) const {
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    for_each_run(bound, [&](uint64_t first, uint64_t count) {
      if (!runs.empty() && runs.back().first + runs.back().second == first)
        runs.back().second += count;
      else runs.emplace_back(first, count);
    });
    return runs;
  }

 private:
  static constexpr unsigned kPageBits = 16;
  static constexpr uint64_t kPage = uint64_t(1) << kPageBits;
  static constexpr uint8_t kBig = 255;  // the count is in big_

  // Where increment_each is: the page looked up last, the prims counted so far.
  struct Increments {
    uint64_t page_of = UINT64_MAX;
    uint8_t* bytes = nullptr;
    size_t done = 0;
    bool appeared = false;
  };
  // ids[0, n) incremented, `state` carried on. (The loop's state in locals: a byte store may
  // alias anything whose address is taken, which would keep it in memory.)
  void increment_batch(const uint64_t* ids, size_t n, Increments& state) {
    const size_t base = state.done;
    uint64_t page_of = state.page_of;
    uint8_t* bytes = state.bytes;
    bool appeared = false;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t p = ids[i];
      if ((p >> kPageBits) != page_of) {
        state.done = base + i;                  // (entry() may throw)
        bytes = &entry(p) - (p & (kPage - 1));  // (the page made, from its count if need be)
        page_of = p >> kPageBits;
      }
      uint8_t& b = bytes[p & (kPage - 1)];
      if (b >= kBig - 1) {
        state.done = base + i;  // (may throw before it changes anything)
        increment(p);
        continue;
      }
      appeared = appeared || b == 0;
      ++b;
    }
    state.done = base + n;
    state.page_of = page_of;
    state.bytes = bytes;
    state.appeared = state.appeared || appeared;
  }
  uint8_t uniform(uint64_t page) const { return page < uniform_.size() ? uniform_[page] : 0; }
  // Whether a run of `in_page` prims of `page` is counted in the page's count (no bytes).
  bool takes_uniform(uint64_t page, uint64_t in_page) const {
    return in_page == kPage && !small_.has_page(page) && uniform(page) < kBig - 1;
  }
  void prepare_increment(uint64_t prim) {
    if (entry(prim) == kBig - 1) big_.try_emplace(prim, uint32_t(kBig));
  }
  // The prim's own byte, its page made from the page's count if needed (which
  // is then the page's bytes' to say: the per-page count goes back to 0).
  uint8_t& entry(uint64_t prim) {
    const uint64_t page = prim >> kPageBits;
    if (small_.has_page(page)) return small_.at(prim);
    uint8_t& b = small_.at(prim, uniform(page));
    if (page < uniform_.size()) uniform_[page] = 0;
    return b;
  }

  PagedArray<uint8_t, 0, kPageBits> small_;
  // Per page without bytes: the count every prim of it holds (< kBig); 0 for
  // a page with bytes.
  std::vector<uint8_t> uniform_;
  std::unordered_map<uint64_t, uint32_t> big_;
};

}  // namespace kstage::core
