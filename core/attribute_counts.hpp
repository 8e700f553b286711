// SPDX-License-Identifier: Apache-2.0
// How many attributes each prim holds (sealed): the stage's "does this prim
// exist" table, one byte per prim id in use. A prim exists while it holds at
// least one attribute. Counts from 255 on (a prim with hundreds of
// attributes) live in a side map, so the common case stays one byte.
#pragma once

#include "core/paged_array.hpp"

#include <algorithm>
#include <unordered_map>

namespace kstage::core {

class AttributeCounts {
 public:
  uint32_t get(uint64_t prim) const {
    const uint8_t b = small_.get(prim);
    return b == kBig ? big_.at(prim) : b;
  }
  // May throw std::bad_alloc, leaving the count as it was.
  void increment(uint64_t prim) {
    uint8_t& b = small_.at(prim);
    if (b < kBig - 1) {
      ++b;
    } else if (b == kBig - 1) {
      big_.emplace(prim, uint32_t(kBig));
      b = kBig;
    } else {
      ++big_.at(prim);
    }
  }
  // increment() of prims [first, first + count), a page at a time.
  void increment_run(uint64_t first, uint64_t count) {
    for (uint64_t p = first; p < first + count;) {
      uint8_t* page = &small_.at(p);  // the page of p, from p on
      const uint64_t in_page = std::min(count - (p - first), small_.kPage - (p & (small_.kPage - 1)));
      for (uint64_t k = 0; k < in_page; ++k) {
        if (page[k] < kBig - 1)
          ++page[k];
        else
          increment(p + k);
      }
      p += in_page;
    }
  }
  void decrement(uint64_t prim) {
    uint8_t& b = small_.at(prim);
    if (b != kBig) {
      --b;
      return;
    }
    auto it = big_.find(prim);
    if (--it->second < kBig) {
      big_.erase(it);
      b = uint8_t(kBig - 1);
    }
  }
  // Calls f(prim) for every prim holding an attribute, in increasing order.
  template <class F>
  void for_each(F&& f) const {
    small_.for_each(f);
  }

 private:
  static constexpr uint8_t kBig = 255;  // the count is in big_
  PagedArray<uint8_t, 0> small_;
  std::unordered_map<uint64_t, uint32_t> big_;
};

}  // namespace kstage::core
