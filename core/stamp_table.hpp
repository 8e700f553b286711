// SPDX-License-Identifier: Apache-2.0
// A column's per-row stamps (each an index into its table of distinct change ordinals), stored
// in the narrowest width that holds the largest stamp: 1 byte per row while the table has at
// most 256 entries, then 2, then 4. The table is compacted to the ordinals some row still
// carries, so a simulation that rewrites a few rows per tick keeps a few live stamps, and 1 byte
// per row instead of 4 (a 1e8-row column: 100 MB, not 400 MB).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kstage::core {

class StampTable {
 public:
  bool empty() const { return n_ == 0; }
  size_t size() const { return n_; }
  // Bytes per row (1, 2 or 4).
  size_t width() const { return width_; }

  // `n` rows, every stamp 0, at the narrowest width. May throw std::bad_alloc,
  // leaving the table as it was.
  void assign_zeros(size_t n) {
    bytes_.assign(n, 0);
    width_ = 1;
    n_ = n;
  }
  void clear() {
    bytes_.clear();
    bytes_.shrink_to_fit();
    n_ = 0;
    width_ = 1;
  }
  // Capacity for `rows` rows at the current width, growing by half at least (amortised
  // push_back without a reallocation in the middle of a write).
  void reserve_geometric(size_t rows) {
    const size_t need = rows * width_;
    if (need > bytes_.capacity())
      bytes_.reserve(std::max(need, bytes_.capacity() + bytes_.capacity() / 2));
  }
  // The first `n` rows (no allocation): undoes push_back_zero().
  void truncate(size_t n) {
    if (n >= n_) return;
    bytes_.resize(n * width_);
    n_ = n;
  }
  void push_back_zero() {
    bytes_.resize(bytes_.size() + width_, 0);
    ++n_;
  }

  uint32_t get(size_t row) const {
    switch (width_) {
      case 1: return bytes_[row];
      case 2: return load<uint16_t>(row);
      default: return load<uint32_t>(row);
    }
  }
  // Widens the table first when `stamp` does not fit (once per width: O(rows)).
  void set(size_t row, uint32_t stamp) {
    fit(stamp);
    set_unchecked(row, stamp);
  }
  // set() of rows[0, n) to one stamp (a sparse write's rows): one width dispatch per batch,
  // then loops of plain stores, run by `loop(n, body)`, which calls body(begin, end) over
  // chunks of [0, n) (in parallel, say: the rows are distinct, each a store of its own).
  template <class Loop>
  void set_rows(const uint32_t* rows, size_t n, uint32_t stamp, Loop&& loop) {
    set_each(
        n, stamp, [rows](size_t j) { return size_t(rows[j]); }, loop);
  }
  // The same for rows first, first + step, ... (n of them): no row list to read.
  template <class Loop>
  void set_progression(size_t first, size_t step, size_t n, uint32_t stamp, Loop&& loop) {
    set_each(
        n, stamp, [first, step](size_t j) { return first + j * step; }, loop);
  }
  // set() of row_of(j), j in [0, n), to `stamp`.
  template <class RowOf, class Loop>
  void set_each(size_t n, uint32_t stamp, RowOf row_of, Loop&& loop) {
    fit(stamp);  // before the stores: a widening moves the table
    std::uint8_t* const base = bytes_.data();
    auto fill = [&](auto width) {
      using T = decltype(width);
      const T value = T(stamp);
      loop(n, [base, value, row_of](size_t begin, size_t end) {
        // Locals: a byte store may alias anything in memory (the vector's pointer, the row
        // function's captures), and reloading them per row halves the loop's speed.
        std::uint8_t* const b = base;
        const RowOf row = row_of;
        for (size_t j = begin; j < end; ++j) std::memcpy(b + row(j) * sizeof(T), &value, sizeof(T));
      });
    };
    switch (width_) {
      case 1: return fill(uint8_t{});
      case 2: return fill(uint16_t{});
      default: return fill(uint32_t{});
    }
  }
  // Makes room for stamps up to `largest` (call before a batch of set() calls of it).
  void fit(uint32_t largest) {
    const size_t w = largest <= 0xffu ? 1 : largest <= 0xffffu ? 2 : 4;
    if (w > width_) rewidth(w);
  }
  // After a compaction: the narrowest width for stamps up to `largest`.
  void shrink_to(uint32_t largest) {
    const size_t w = largest <= 0xffu ? 1 : largest <= 0xffffu ? 2 : 4;
    if (w < width_) rewidth(w);
  }

  // Calls f(const T* stamps) with the stamps as an array of their storage type: scans of
  // every row compare in a loop of their own width, not through get().
  template <class F>
  decltype(auto) visit(F&& f) const {
    switch (width_) {
      case 1: return f(reinterpret_cast<const uint8_t*>(bytes_.data()));
      case 2: return f(reinterpret_cast<const uint16_t*>(bytes_.data()));
      default: return f(reinterpret_cast<const uint32_t*>(bytes_.data()));
    }
  }

 private:
  void set_unchecked(size_t row, uint32_t stamp) {
    switch (width_) {
      case 1: bytes_[row] = uint8_t(stamp); break;
      case 2: store<uint16_t>(row, uint16_t(stamp)); break;
      default: store<uint32_t>(row, stamp); break;
    }
  }
  template <class T>
  T load(size_t row) const {
    T v;
    std::memcpy(&v, bytes_.data() + row * sizeof(T), sizeof(T));
    return v;
  }
  template <class T>
  void store(size_t row, T v) {
    std::memcpy(bytes_.data() + row * sizeof(T), &v, sizeof(T));
  }
  void rewidth(size_t w) {
    StampTable next;
    next.width_ = w;
    next.n_ = n_;
    next.bytes_.resize(n_ * w);
    for (size_t r = 0; r < n_; ++r) next.set_unchecked(r, get(r));
    *this = std::move(next);
  }

  std::vector<uint8_t> bytes_;  // n_ * width_ bytes (std::vector's buffer: aligned for uint32)
  size_t n_ = 0;
  size_t width_ = 1;
};

}  // namespace kstage::core
