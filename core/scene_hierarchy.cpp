// SPDX-License-Identifier: Apache-2.0
#include "core/scene_hierarchy.hpp"

#include <algorithm>

namespace kstage::core {
namespace {

// Explicit prims whose tree parents are asked for under one lock of the path tree.
constexpr size_t kParentBatch = 4096;

}  // namespace

std::shared_ptr<const SceneHierarchy> SceneHierarchy::build(const Dictionary& d,
                                                            const AttributeCounts& counts) {
  auto h = std::make_shared<SceneHierarchy>();

  // A prim's parent: the nearest existing path at or above its tree parent.
  NearestHolder nearest(d, [&](uint64_t p) { return counts.get(p) != 0; });

  // The existing prims as maximal runs.
  const std::vector<std::pair<uint64_t, uint64_t>> runs = counts.joined_runs(d.path_id_bound());

  const std::vector<std::pair<uint64_t, uint64_t>> ranges = d.path_range_extents();
  size_t r = 0;  // the first range that does not end at or before the id being looked at
  std::vector<uint64_t> ids, parents;
  ids.reserve(kParentBatch);
  parents.resize(kParentBatch);
  auto flush_explicit = [&] {
    d.path_parents(ids.data(), ids.size(), parents.data());
    for (size_t k = 0; k < ids.size(); ++k)
      h->segments_.push_back(Segment{ids[k], 1, nearest.at_or_above(parents[k])});
    ids.clear();
  };
  for (const auto& [first, count] : runs) {
    const uint64_t end = first + count;
    for (uint64_t p = first; p < end;) {
      while (r < ranges.size() && ranges[r].first + ranges[r].second <= p) ++r;
      if (r < ranges.size() && ranges[r].first <= p) {
        // Range members: one tree parent for all of them, one segment for the piece.
        const uint64_t piece_end = std::min(end, ranges[r].first + ranges[r].second);
        h->segments_.push_back(Segment{p, piece_end - p, nearest.at_or_above(d.path_parent(p))});
        p = piece_end;
        continue;
      }
      // Explicit paths up to the next range (or the run's end), one segment each, in id order.
      const uint64_t stop = r < ranges.size() ? std::min(end, ranges[r].first) : end;
      for (; p < stop; ++p) {
        ids.push_back(p);
        if (ids.size() == kParentBatch) flush_explicit();
      }
      flush_explicit();
    }
  }

  // Children: the segments ordered by parent (stable: by first id within one parent).
  std::vector<size_t> order(h->segments_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return h->segments_[a].parent < h->segments_[b].parent;
  });
  h->children_.reserve(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const Segment& s = h->segments_[order[k]];
    if (k == 0 || h->segments_[order[k - 1]].parent != s.parent)
      h->by_parent_.emplace(s.parent, std::make_pair(k, k));
    h->by_parent_[s.parent].second = k + 1;
    h->children_.push_back(kstage_path_span_t{s.first, s.count});
  }
  return h;
}

const SceneHierarchy::Segment* SceneHierarchy::segment_of(uint64_t prim) const {
  auto it = std::upper_bound(segments_.begin(), segments_.end(), prim,
                             [](uint64_t v, const Segment& s) { return v < s.first; });
  if (it == segments_.begin()) return nullptr;
  const Segment& s = *(it - 1);
  return prim - s.first < s.count ? &s : nullptr;
}

std::pair<const kstage_path_span_t*, size_t> SceneHierarchy::children(uint64_t parent) const {
  auto it = by_parent_.find(parent);
  if (it == by_parent_.end()) return {nullptr, 0};
  return {children_.data() + it->second.first, it->second.second - it->second.first};
}

void SceneHierarchy::answer(uint64_t prim, kstage_relation_t relation, HierarchyAnswer& out) const {
  kstage_hierarchy_item_t item{};
  item.span_offset = out.spans.size();
  const Segment* s = segment_of(prim);
  if (s == nullptr) {
    item.status = KSTAGE_NOT_FOUND;
    out.items.push_back(item);
    return;
  }
  auto add = [&](uint64_t first, uint64_t count) {
    if (count == 0) return;
    out.spans.push_back(kstage_path_span_t{first, count});
    ++item.span_count;
    item.path_count += count;
  };
  if (relation == KSTAGE_RELATION_PARENT) {
    if (s->parent != 0) add(s->parent, 1);
  } else {
    // Children: of the prim. Siblings: of its parent (the roots' for a root), less the prim,
    // whose span splits around it.
    const auto [spans, n] = children(relation == KSTAGE_RELATION_CHILDREN ? prim : s->parent);
    for (size_t k = 0; k < n; ++k) {
      const kstage_path_span_t& c = spans[k];
      if (relation == KSTAGE_RELATION_SIBLINGS && prim - c.first < c.count) {
        add(c.first, prim - c.first);
        add(prim + 1, c.first + c.count - prim - 1);
      } else {
        add(c.first, c.count);
      }
    }
  }
  out.items.push_back(item);
}

}  // namespace kstage::core
