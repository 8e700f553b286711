// SPDX-License-Identifier: Apache-2.0
// The scene hierarchy of the sealed state: a prim's parent is its nearest ancestor path that
// exists (holds an attribute), and a prim with none is a root (kstage.h, kstage_relation_t).
//
// The index is built from the stage's existence runs (AttributeCounts::for_each_run) and the
// path tree, and holds *segments*: consecutive existing prims that share their parent and are
// the members of one path range, or one explicit path. A range's members all have the same
// tree parent, so a run of 1e6 range members is one segment found with one look at the tree,
// never 1e6: building is O(runs + explicit prims), and a range's children come back as one
// span. Explicit paths are one segment each (they were interned one by one anyway).
//
// Only existence can change the answer: a path interned later (hidden ancestor or visible
// path) holds no attribute until a seal makes it exist, and a path's tree parent is fixed when
// it is interned ("/" becomes the tree parent of top-level paths once interned, but is no one's
// parent before it exists). So the stage rebuilds the index only when its existence generation
// moved (Stage::existence_generation_, bumped by a seal that makes a prim appear or disappear).
//
// The index is immutable once built: answers are made from it without the stage's lock.
#pragma once

#include "core/attribute_counts.hpp"
#include "core/dictionary.hpp"

#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kstage::core {

// The nearest path at or above `at` in the tree of paths (hidden ancestors included, "/" at the
// top once interned) for which holds(path) is true, 0 when none does: a prim's parent in the
// hierarchy (holds: exists) and in a world-transform pass (holds: has a local matrix), asked
// with at = the prim's tree parent. Memoized: the paths a walk passes that do not hold remember
// where it ended, so the 4,096 members of a range under a hidden "/World/envs" walk its chain
// once, not once each.
template <class Holds>
class NearestHolder {
 public:
  NearestHolder(const Dictionary& d, Holds holds) : d_(d), holds_(std::move(holds)) {}
  // May throw std::bad_alloc.
  uint64_t at_or_above(uint64_t at) {
    chain_.clear();
    uint64_t found = 0;
    for (; at != 0; at = d_.path_parent(at)) {
      if (holds_(at)) {
        found = at;
        break;
      }
      if (auto it = passed_.find(at); it != passed_.end()) {
        found = it->second;
        break;
      }
      chain_.push_back(at);
    }
    for (uint64_t c : chain_) passed_.emplace(c, found);
    return found;
  }

 private:
  const Dictionary& d_;
  Holds holds_;
  std::unordered_map<uint64_t, uint64_t> passed_;  // path that does not hold -> the answer
  std::vector<uint64_t> chain_;
};

// One answer of kstage_query_hierarchy: an item per query prim, their spans as one array (CSR).
struct HierarchyAnswer {
  std::vector<kstage_hierarchy_item_t> items;
  std::vector<kstage_path_span_t> spans;
};

class SceneHierarchy {
 public:
  // Consecutive existing prims [first, first + count) that share `parent` (0: roots): the
  // members of one range, or one explicit path.
  struct Segment {
    uint64_t first = 0, count = 0, parent = 0;
  };

  // The index of the prims `counts` says exist. May throw std::bad_alloc.
  static std::shared_ptr<const SceneHierarchy> build(const Dictionary& d,
                                                     const AttributeCounts& counts);

  bool exists(uint64_t prim) const { return segment_of(prim) != nullptr; }
  // The prim's parent; 0 for a root or a prim that does not exist.
  uint64_t parent(uint64_t prim) const {
    const Segment* s = segment_of(prim);
    return s ? s->parent : 0;
  }
  // The children of `parent` (0: the roots) as spans in path-id order; empty when none.
  std::pair<const kstage_path_span_t*, size_t> children(uint64_t parent) const;
  bool has_children(uint64_t prim) const { return children(prim).second != 0; }
  // The existing prims, in path-id order.
  const std::vector<Segment>& segments() const { return segments_; }

  // Appends the relation's spans of `prim` to out.spans and its item to out.items (NOT_FOUND
  // when it does not exist). May throw std::bad_alloc.
  void answer(uint64_t prim, kstage_relation_t relation, HierarchyAnswer& out) const;

 private:
  const Segment* segment_of(uint64_t prim) const;

  std::vector<Segment> segments_;  // by first id
  // Every segment as a span, ordered by (parent, first): the children of a parent are
  // children_[begin, end) of by_parent_'s entry.
  std::vector<kstage_path_span_t> children_;
  std::unordered_map<uint64_t, std::pair<size_t, size_t>> by_parent_;
};

}  // namespace kstage::core
