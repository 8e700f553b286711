// SPDX-License-Identifier: Apache-2.0
// A table indexed by path id that holds memory only for the ids in use.
//
// Path ids are dense where paths are interned one by one, but a path range
// (kstage_intern_path_range) takes up to 2^32 ids at once for free: a column
// or a count indexed by id must not cost memory for every id below the
// largest one written. Entries live in pages of 2^16, made when an entry in
// them is first set; a missing page reads as `Default`.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace kstage::core {

template <class T, T Default, unsigned kPageBits = 16>
class PagedArray {
 public:
  static constexpr uint64_t kPage = uint64_t(1) << kPageBits;

  T get(uint64_t i) const {
    const uint64_t p = i >> kPageBits;
    return p < pages_.size() && pages_[p] ? pages_[p][i & (kPage - 1)] : Default;
  }
  // The entry, making its page (filled with `fill`, Default unless said) if
  // needed. May throw std::bad_alloc, leaving the table as it was.
  T& at(uint64_t i, T fill = Default) {
    const uint64_t p = i >> kPageBits;
    if (p >= pages_.size()) pages_.resize(p + 1);
    if (!pages_[p]) {
      auto page = std::make_unique<T[]>(kPage);
      for (uint64_t k = 0; k < kPage; ++k) page[k] = fill;
      pages_[p] = std::move(page);
    }
    return pages_[p][i & (kPage - 1)];
  }
  // Calls f(entry, i) for the entries of ids id(0) .. id(n - 1) in turn, making their pages, until
  // f returns false. Ids in one page share one look-up (a batch of
  // new prims is mostly a few pages). May throw std::bad_alloc part way (the pages made read
  // Default; what f changed stays changed).
  template <class Id, class F>
  void for_entries(size_t n, const Id& id, F&& f) {
    uint64_t page_of = UINT64_MAX;
    T* page = nullptr;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t k = id(i);
      if ((k >> kPageBits) != page_of) {
        page = &at(k) - (k & (kPage - 1));
        page_of = k >> kPageBits;
      }
      if (!f(page[k & (kPage - 1)], i)) return;
    }
  }
  // Whether page `p` (ids [p * kPage, (p + 1) * kPage)) has been made.
  bool has_page(uint64_t p) const { return p < pages_.size() && pages_[p]; }
  // Makes the pages of ids [first, last] (so that at() on them cannot throw).
  void reserve(uint64_t first, uint64_t last) {
    for (uint64_t p = first >> kPageBits; p <= (last >> kPageBits); ++p) at(p << kPageBits);
  }
  // Calls f(id) for every id whose entry is not Default, in increasing order.
  template <class F>
  void for_each(F&& f) const {
    for (uint64_t p = 0; p < pages_.size(); ++p) for_each_in_page(p, f);
  }
  // The same for the ids of page `p` alone, below p * kPage + `end` (end <= kPage).
  template <class F>
  void for_each_in_page(uint64_t p, F&& f, uint64_t end = kPage) const {
    if (!has_page(p)) return;
    const T* page = pages_[p].get();
    if constexpr (sizeof(T) == 1 && Default == T(0)) {
      static_assert(kPage % 64 == 0);
      // 64 entries per look, then eight (a page of counts of a few prims is mostly zeros: 64 Ki
      // byte compares took tens of microseconds of a scene hierarchy's build of a small stage,
      // eight per look ~5 us, a clone's to 64 targets a tenth of its time).
      for (uint64_t k = 0; k < end; k += 64) {
        uint64_t words[8], any = 0;
        std::memcpy(words, page + k, sizeof words);
        for (uint64_t w : words) any |= w;  // (one or two vector compares)
        if (any == 0) continue;
        for (uint64_t w = 0; w < 8; ++w) {
          if (words[w] == 0) continue;
          for (uint64_t j = k + 8 * w; j < std::min(k + 8 * w + 8, end); ++j)
            if (page[j] != Default) f((p << kPageBits) | j);
        }
      }
      return;
    }
    for (uint64_t k = 0; k < end; ++k)
      if (page[k] != Default) f((p << kPageBits) | k);
  }
  // One past the last page that may have been made.
  uint64_t page_count() const { return pages_.size(); }
  size_t bytes() const {
    size_t b = pages_.capacity() * sizeof(void*);
    for (const auto& page : pages_)
      if (page) b += kPage * sizeof(T);
    return b;
  }

 private:
  std::vector<std::unique_ptr<T[]>> pages_;
};

}  // namespace kstage::core
