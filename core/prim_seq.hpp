// SPDX-License-Identifier: Apache-2.0
// A query's prims, in query order: an explicit list of path ids, or the
// progression first, first + stride, ... of a query over a path range, which
// stores no list at all (a 1e8-prim range query is 32 bytes, not 800 MB), or
// both: a caller's list whose ids step by a constant keeps its list (read and
// map groups publish it as it is, no array made per fetch) and is known to be
// a progression (writes through it compute their rows).
//
// Everything that walks a query indexes it (operator[]) or asks for the
// list (data(), null for a progression) when a loop over a plain array is
// worth the branch. The few places that must hand an array of ids to a
// caller -- a read or map group's `prims` -- make one for their own slice
// (ids()), when the caller fetches the group. A progression made with a
// list on demand (a filter whose result is one run of ids) makes its whole
// list once, at the first such hand-out, and shares it with every later one
// (as a listed query would): a reader that takes the progression instead
// (kstage_read_desc_t::prims_as_progression) never makes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <vector>

namespace kstage::core {

class PrimSeq {
 public:
  PrimSeq() = default;
  explicit PrimSeq(std::vector<uint64_t> ids) : ids_(std::move(ids)), count_(ids_.size()) {}
  static PrimSeq progression(uint64_t first, size_t count, uint64_t stride) {
    PrimSeq s;
    s.listed_ = false;
    s.progression_ = true;
    s.first_ = first;
    s.count_ = count;
    s.stride_ = stride;
    return s;
  }
  // A progression whose list ids() makes once, when first asked, for everyone after.
  static PrimSeq progression_listed_on_demand(uint64_t first, size_t count, uint64_t stride) {
    PrimSeq s = progression(first, count, stride);
    s.on_demand_ = std::make_shared<OnDemand>();
    return s;
  }
  // A list whose ids are ids[0] + i * stride: both forms.
  static PrimSeq listed_progression(std::vector<uint64_t> ids, uint64_t stride) {
    PrimSeq s(std::move(ids));
    s.progression_ = s.count_ > 0;
    s.first_ = s.count_ > 0 ? s.ids_[0] : 0;
    s.stride_ = stride;
    return s;
  }

  // Sorted, distinct ids: known to be a progression when they are consecutive (a whole range, prims
  // interned one after another), so that writes through it compute their rows.
  static PrimSeq sorted(std::vector<uint64_t> ids) {
    if (ids.size() > 1 && ids.back() - ids.front() == ids.size() - 1)
      return listed_progression(std::move(ids), 1);
    return PrimSeq(std::move(ids));
  }

  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  uint64_t operator[](size_t i) const { return listed_ ? ids_[i] : first_ + i * stride_; }
  // The ids as one array; null for a progression without a list.
  const uint64_t* data() const { return listed_ ? ids_.data() : nullptr; }
  // first() + i * stride() for every i (with or without a list).
  bool is_progression() const { return progression_; }
  // The list itself (empty for a progression without one).
  const std::vector<uint64_t>& list() const { return ids_; }
  // A progression's first id and step (meaningless for a list that is not one).
  uint64_t first() const { return first_; }
  uint64_t stride() const { return stride_; }
  // Prims [from, from + n): a progression stays one.
  PrimSeq slice(size_t from, size_t n) const {
    if (!listed_) return progression(first_ + from * stride_, n, stride_);
    std::vector<uint64_t> part(ids_.begin() + from, ids_.begin() + from + n);
    return progression_ ? listed_progression(std::move(part), stride_) : PrimSeq(std::move(part));
  }
  // Ids [from, from + n) as an array: the list itself, or `scratch` filled.
  const uint64_t* ids(size_t from, size_t n, std::vector<uint64_t>& scratch) const {
    if (listed_) return ids_.data() + from;
    if (on_demand_) return made_list().data() + from;
    scratch.resize(n);
    for (size_t k = 0; k < n; ++k) scratch[k] = first_ + (from + k) * stride_;
    return scratch.data();
  }

  // A progression_listed_on_demand's list, made if it was not, shared (it keeps what holds it
  // alive); null for any other sequence.
  std::shared_ptr<const std::vector<uint64_t>> shared_on_demand_list() const {
    if (!on_demand_) return nullptr;
    return std::shared_ptr<const std::vector<uint64_t>>(on_demand_, &made_list());
  }

  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = uint64_t;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = uint64_t;
    iterator(const PrimSeq* s, size_t i) : s_(s), i_(i) {}
    uint64_t operator*() const { return (*s_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    const PrimSeq* s_;
    size_t i_;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, count_); }

 private:
  struct OnDemand {
    std::once_flag once;
    std::vector<uint64_t> ids;
  };
  const std::vector<uint64_t>& made_list() const {
    std::call_once(on_demand_->once, [&] {
      on_demand_->ids.resize(count_);
      for (size_t k = 0; k < count_; ++k) on_demand_->ids[k] = first_ + k * stride_;
    });
    return on_demand_->ids;
  }

  bool listed_ = true, progression_ = false;
  std::vector<uint64_t> ids_;
  std::shared_ptr<OnDemand> on_demand_;  // progression_listed_on_demand's list
  uint64_t first_ = 0;
  size_t count_ = 0;
  uint64_t stride_ = 1;
};

using PrimList = std::shared_ptr<const PrimSeq>;

}  // namespace kstage::core
