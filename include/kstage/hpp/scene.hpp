// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/scene.hpp
 * \brief The C++ API's scene: Hierarchy (a kstage_query_hierarchy answer, released once) and
 * FilterEx (the predicates of kstage_query_filter_ex, built in C++).
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views). Stage::hierarchy and
 * Stage::query(const FilterEx&) make these.
 */
#ifndef KSTAGE_HPP_SCENE_HPP_
#define KSTAGE_HPP_SCENE_HPP_

#include <kstage/hpp/handles.hpp>
#include <kstage/hpp/span.hpp>
#include <kstage/kstage.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace kstage {

/**
 * \brief The parent, children or siblings of every prim of a query (kstage_hierarchy_t), as
 * kstage.h describes: one item per query prim, in query order, each with its own status, and
 * its paths as spans of one array. Valid until reset() or destruction, which release it.
 */
class Hierarchy {
 public:
  /// An empty Hierarchy.
  Hierarchy() = default;
  /// Takes `o`'s answer; `o` is left empty.
  Hierarchy(Hierarchy&& o) noexcept
      : h_(std::move(o.h_)),
        items_(std::exchange(o.items_, nullptr)),
        spans_(std::exchange(o.spans_, nullptr)),
        item_count_(std::exchange(o.item_count_, 0)),
        span_count_(std::exchange(o.span_count_, 0)) {}
  /// Releases this answer, then takes `o`'s.
  Hierarchy& operator=(Hierarchy&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::move(o.h_);
      items_ = std::exchange(o.items_, nullptr);
      spans_ = std::exchange(o.spans_, nullptr);
      item_count_ = std::exchange(o.item_count_, 0);
      span_count_ = std::exchange(o.span_count_, 0);
    }
    return *this;
  }
  Hierarchy(const Hierarchy&) = delete;
  Hierarchy& operator=(const Hierarchy&) = delete;
  ~Hierarchy() = default;
  /// The C handle (0 when empty), still owned by this object.
  kstage_hierarchy_t handle() const noexcept { return h_.get(); }
  /// True when the object holds an answer.
  explicit operator bool() const noexcept { return bool(h_); }
  /// One item per query prim (empty for an empty Hierarchy).
  span<const kstage_hierarchy_item_t> items() const noexcept { return {items_, item_count_}; }
  /// Every item's spans, one after another (an item's are spans(i)).
  span<const kstage_path_span_t> spans() const noexcept { return {spans_, span_count_}; }
  /// The spans of item `i` (< items().size()); none for an item that failed.
  span<const kstage_path_span_t> spans(size_t i) const noexcept {
    const kstage_hierarchy_item_t& it = items_[i];
    return {spans_ + it.span_offset, size_t(it.span_count)};
  }
  /// The paths of item `i`, one id each (for small answers: a range's members are a span, and
  /// this makes an id for every member).
  std::vector<kstage_path_t> paths(size_t i) const {
    std::vector<kstage_path_t> out;
    out.reserve(size_t(items_[i].path_count));
    for (const kstage_path_span_t& s : spans(i))
      for (uint64_t k = 0; k < s.count; ++k) out.push_back(s.first + k);
    return out;
  }
  /// Releases the answer now (kstage_hierarchy_release); items() and spans() become empty.
  void reset() noexcept {
    h_.reset();
    items_ = nullptr;
    spans_ = nullptr;
    item_count_ = span_count_ = 0;
  }

 private:
  friend class Stage;
  // Takes `h` and fetches its arrays (which live as long as the handle).
  Hierarchy(kstage_stage_t s, kstage_hierarchy_t h, Status& st) : h_(s, h) {
    uint64_t n_items = 0, n_spans = 0;
    if (!detail::check(kstage_hierarchy_get(s, h, &items_, &n_items, &spans_, &n_spans), st)) {
      reset();
      return;
    }
    item_count_ = size_t(n_items);
    span_count_ = size_t(n_spans);
  }
  detail::UniqueHandle<kstage_hierarchy_release> h_;
  const kstage_hierarchy_item_t* items_ = nullptr;
  const kstage_path_span_t* spans_ = nullptr;
  size_t item_count_ = 0, span_count_ = 0;
};

/**
 * \brief The predicates of a relational filter (kstage_filter_ex_t), ANDed; kstage.h lists what
 * is supported. The values are copied in, so the builder owns everything the C filter points
 * at:
 * \code
 *   kstage::FilterEx f;
 *   f.in(stage.token(KSTAGE_PARENT_ATTRIBUTE),
 * {world}).contains(stage.token(KSTAGE_APPLIED_SCHEMAS), {rigid_body}); kstage::Query q =
 * stage.query(f); \endcode
 */
class FilterEx {
 public:
  /// Prims that hold `attribute` (or, for the derived names, have a parent, have children).
  FilterEx& has(kstage_token_t attribute) {
    return add(KSTAGE_FILTER_HAS, attribute, span<const uint64_t>());
  }
  /// Prims whose `attribute` value is one of `values` (usd-path, usd-parent, usd-prim-type).
  FilterEx& in(kstage_token_t attribute, array_ref<uint64_t> values) {
    return add(KSTAGE_FILTER_IN, attribute, values);
  }
  /// Prims whose `attribute` set holds every one of `values` (usd-children, usd-schemas).
  FilterEx& contains(kstage_token_t attribute, array_ref<uint64_t> values) {
    return add(KSTAGE_FILTER_CONTAINS, attribute, values);
  }
  /// Prims at or below `path` (usd-path).
  FilterEx& prefix(kstage_token_t attribute, kstage_path_t path) {
    return add(KSTAGE_FILTER_PREFIX, attribute, {path});
  }
  /// Any predicate, as the C struct has it (what it does not support, kstage refuses).
  FilterEx& add(kstage_filter_op_t op, kstage_token_t attribute, array_ref<uint64_t> values) {
    entries_.push_back(Entry{op, attribute, std::vector<uint64_t>(values.begin(), values.end())});
    return *this;
  }
  /// The predicates so far.
  size_t size() const noexcept { return entries_.size(); }

  /// The C predicates, pointing into this object (valid until it changes or goes).
  std::vector<kstage_predicate_t> predicates() const {
    std::vector<kstage_predicate_t> out(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) {
      out[i].op = entries_[i].op;
      out[i].attribute = entries_[i].attribute;
      out[i].values = entries_[i].values.empty() ? nullptr : entries_[i].values.data();
      out[i].value_count = entries_[i].values.size();
    }
    return out;
  }

 private:
  struct Entry {
    kstage_filter_op_t op;
    kstage_token_t attribute;
    std::vector<uint64_t> values;
  };
  std::vector<Entry> entries_;
};

}  // namespace kstage

#endif  // KSTAGE_HPP_SCENE_HPP_
