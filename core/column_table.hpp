// SPDX-License-Identifier: Apache-2.0
// The columns of a stage: one per attribute name and schema. A name usually has one column; it
// has several when prims hold it with different schemas (a USD scene authors the same name with
// different types on different prims). A prim holds at most one value per name, in exactly one of
// that name's columns: the ledger's checks keep it so at every ordinal (docs/design.md "One name,
// several schemas").
#pragma once

#include "core/column.hpp"
#include "core/dtype.hpp"
#include "core/status.hpp"

#include <iterator>
#include <map>
#include <memory>
#include <string>

namespace kstage::core {

inline bool same_schema(const Schema& a, const Schema& b) {
  return a.is_array == b.is_array && same_dtype(a.dtype, b.dtype) && a.semantic == b.semantic;
}

// Whether a write or map declaring `declared` goes to a column of schema `column`: the same kind
// and dtype, and the same semantic or none (a declared NONE keeps the column's semantic).
inline bool keeps_schema(const Schema& column, const Schema& declared) {
  return column.is_array == declared.is_array && same_dtype(column.dtype, declared.dtype) &&
         (declared.semantic == KSTAGE_SEMANTIC_NONE || declared.semantic == column.semantic);
}

// A schema in messages: "float32x3 POINT", "array uint8 STRING".
inline std::string schema_string(const Schema& s) {
  return std::string(s.is_array ? "array " : "") + dtype_string(s.dtype) + " " +
         semantic_name(s.semantic);
}

// What differs between a column's schema and a write's: "the write's dtype float32 does not
// match its float32x3" (the first difference of kind, dtype, semantic).
inline std::string schema_mismatch(const Schema& held, const Schema& written) {
  if (held.is_array != written.is_array)
    return std::string("the write declares is_array = ") + (written.is_array ? "true" : "false") +
           ", it is " + (held.is_array ? "an array attribute" : "a fixed-size attribute");
  if (!same_dtype(held.dtype, written.dtype))
    return "the write's dtype " + dtype_string(written.dtype) + " does not match its dtype " +
           dtype_string(held.dtype);
  return std::string("the write's semantic ") + semantic_name(written.semantic) +
         " does not match its semantic " + semantic_name(held.semantic);
}

// A declared NONE semantic that matches two columns of `attribute` (they differ only in
// semantic): INVALID_ARGUMENT naming both.
inline Status ambiguous_semantic(const std::string& attribute, const Schema& a, const Schema& b) {
  return error(KSTAGE_INVALID_ARGUMENT,
               "semantic NONE is ambiguous for '%s': it holds %s and %s; name the semantic",
               attribute.c_str(), schema_string(a).c_str(), schema_string(b).c_str());
}

// Of `items` (an attribute's columns, or their schemas), the one a write or map declaring
// `declared` goes to (keeps_schema): null for none; INVALID_ARGUMENT naming `name()` and both
// when two match (they differ only in semantic, and NONE was declared).
template <class Range, class SchemaOf, class NameOf>
auto kept_by(const Range& items, const Schema& declared, SchemaOf schema_of, NameOf name)
    -> Result<decltype(&*std::begin(items))> {
  decltype(&*std::begin(items)) found = nullptr;
  for (const auto& item : items) {
    if (!keeps_schema(schema_of(item), declared)) continue;
    if (found) return ambiguous_semantic(name(), schema_of(*found), schema_of(item));
    found = &item;
  }
  return found;
}

class ColumnTable {
 public:
  // (attribute, slot): a name's columns are adjacent, oldest first (slots only grow).
  using Key = std::pair<uint64_t, uint32_t>;
  using Map = std::map<Key, std::unique_ptr<Column>>;

  // The columns of one name, oldest first.
  class Range {
   public:
    Range(Map::const_iterator b, Map::const_iterator e) : b_(b), e_(e) {}
    Map::const_iterator begin() const { return b_; }
    Map::const_iterator end() const { return e_; }
    bool empty() const { return b_ == e_; }
    // Whether the name has more than one column (the rare case every check of a prim's schema
    // is for: with one column a prim holds the name in it or not at all).
    bool several() const { return b_ != e_ && std::next(b_) != e_; }
    size_t size() const { return size_t(std::distance(b_, e_)); }

   private:
    Map::const_iterator b_, e_;
  };

  Range of(uint64_t attribute) const {
    return Range(map_.lower_bound(Key{attribute, 0}), map_.lower_bound(Key{attribute + 1, 0}));
  }
  bool contains(uint64_t attribute) const { return !of(attribute).empty(); }
  // The column of `attribute` with exactly `schema` (null: none).
  Column* find(uint64_t attribute, const Schema& schema) const {
    for (const auto& [key, c] : of(attribute))
      if (same_schema(c->schema(), schema)) return c.get();
    return nullptr;
  }
  // The name's only column (null: it has none, or several).
  Column* sole(uint64_t attribute) const {
    const Range r = of(attribute);
    return r.empty() || r.several() ? nullptr : r.begin()->second.get();
  }
  // The key a new column of `attribute` takes, after `also` (new columns not merged yet).
  Key next_key(uint64_t attribute, const Map& also) const {
    uint32_t slot = 0;
    for (const Map* m : {&map_, &also}) {
      auto it = m->lower_bound(Key{attribute + 1, 0});
      if (it != m->begin() && std::prev(it)->first.first == attribute)
        slot = std::max(slot, std::prev(it)->first.second + 1);
    }
    return Key{attribute, slot};
  }
  void erase(const Column* c) {
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second.get() == c) {
        map_.erase(it);
        return;
      }
  }
  // Moves every column of `m` in; allocates nothing (std::map::merge), so never throws.
  void merge(Map& m) noexcept { map_.merge(m); }
  void swap(Map& m) noexcept { map_.swap(m); }

  Map::const_iterator begin() const { return map_.begin(); }
  Map::const_iterator end() const { return map_.end(); }
  size_t size() const { return map_.size(); }

 private:
  Map map_;
};

}  // namespace kstage::core
