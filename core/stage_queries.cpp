// SPDX-License-Identifier: Apache-2.0
// Stage: queries (path lists, path ranges, filters over the sealed state).
#include "core/stage.hpp"

#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/transport.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

namespace kstage::core {

Result<PrimList> Stage::query_paths(const uint64_t* paths, uint64_t n) {
  if (n > 0 && paths == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "paths is NULL but count is %llu", (unsigned long long)n);
  for (uint64_t i = 0; i < n; ++i)
    if (!dictionary_.is_path(paths[i]))
      return error(KSTAGE_INVALID_ARGUMENT, "paths[%llu] = %llu is not a path of this stage",
                   (unsigned long long)i, (unsigned long long)paths[i]);
  // Repeats: a bitmap over the ids the list spans (ids are dense), or, for a
  // short list of far-apart ids (ranges take large blocks of ids), a sorted copy.
  uint64_t lo = UINT64_MAX, hi = 0;
  for (uint64_t i = 0; i < n; ++i) lo = std::min(lo, paths[i]), hi = std::max(hi, paths[i]);
  uint64_t repeat = n;
  if (n > 1 && hi - lo < 64 * n + 4096) {
    std::vector<bool> seen(hi - lo + 1);
    for (uint64_t i = 0; i < n && repeat == n; ++i) {
      if (seen[paths[i] - lo]) repeat = i;
      seen[paths[i] - lo] = true;
    }
  } else if (n > 1) {
    std::unordered_set<uint64_t> seen;
    seen.reserve(n);
    for (uint64_t i = 0; i < n && repeat == n; ++i)
      if (!seen.insert(paths[i]).second) repeat = i;
  }
  if (repeat != n) {
    const uint64_t first = uint64_t(std::find(paths, paths + repeat, paths[repeat]) - paths);
    return error(KSTAGE_INVALID_ARGUMENT, "paths[%llu] ('%s') repeats paths[%llu]",
                 (unsigned long long)repeat, path_name(paths[repeat]).c_str(),
                 (unsigned long long)first);
  }
  // Ids that step by one constant in order (paths interned one after another,
  // or every k-th of them) are known to be a progression, as a range query is,
  // so writes compute their rows; the list is kept too (8 bytes per prim, as
  // any explicit query): read and map groups hand it out as it is, where a
  // progression alone would make an array at every fetch. (The ids are
  // distinct, checked above, so the step is never 0.)
  std::vector<uint64_t> ids(paths, paths + n);
  if (n > 1 && paths[1] > paths[0]) {
    const uint64_t step = paths[1] - paths[0];
    bool progression = (UINT64_MAX - paths[0]) / step >= n - 1;
    for (uint64_t i = 2; progression && i < n; ++i) progression = paths[i] == paths[0] + i * step;
    if (progression)
      return PrimList(
          std::make_shared<const PrimSeq>(PrimSeq::listed_progression(std::move(ids), step)));
  }
  return PrimList(std::make_shared<const PrimSeq>(std::move(ids)));
}

Result<PrimList> Stage::query_range(uint64_t first, uint64_t start, uint64_t count,
                                    uint64_t stride) {
  PathTree::Range r;
  if (!dictionary_.path_range(first, r) || r.first != first)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "range %llu is not the first path of a path range of this stage",
                 (unsigned long long)first);
  if (stride == 0) stride = 1;
  if (start >= r.count)
    return error(KSTAGE_INVALID_ARGUMENT, "start %llu is beyond the range's %llu paths",
                 (unsigned long long)start, (unsigned long long)r.count);
  const uint64_t available = (r.count - start - 1) / stride + 1;
  if (count == 0) count = available;
  if (count > available)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "count %llu%s from %llu reaches beyond the range's %llu paths (at most %llu)",
                 (unsigned long long)count,
                 stride == 1 ? "" : format(" with stride %llu", (unsigned long long)stride).c_str(),
                 (unsigned long long)start, (unsigned long long)r.count,
                 (unsigned long long)available);
  // No list: prim k is first + start + k * stride (the ids of a range are consecutive).
  return PrimList(
      std::make_shared<const PrimSeq>(PrimSeq::progression(first + start, count, stride)));
}

Result<PrimList> Stage::query_filter(const kstage_filter_t& f,
                                     const std::vector<uint64_t>* path_in) {
  if (f.has_attribute_count > 0 && f.has_attributes == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "filter.has_attributes is NULL but has_attribute_count is %llu",
                 (unsigned long long)f.has_attribute_count);
  for (uint64_t i = 0; i < f.has_attribute_count; ++i)
    KSTAGE_RETURN_NOT_OK(check_token(f.has_attributes[i], "filter.has_attributes", i));
  if (f.path_prefix != 0 && !dictionary_.is_path(f.path_prefix))
    return error(KSTAGE_INVALID_ARGUMENT, "filter.path_prefix = %llu is not a path of this stage",
                 (unsigned long long)f.path_prefix);
  std::lock_guard lock(mutex_);
  // Each attribute's columns (a prim holds a name in any one of them).
  std::vector<ColumnTable::Range> has;
  for (uint64_t i = 0; i < f.has_attribute_count; ++i) {
    const ColumnTable::Range columns = columns_.of(f.has_attributes[i]);
    if (columns.empty()) return PrimList(std::make_shared<const PrimSeq>());  // nobody holds it
    has.push_back(columns);
  }
  auto holds_all = [&has](uint64_t p) {
    for (const ColumnTable::Range& columns : has)
      if (std::none_of(columns.begin(), columns.end(),
                       [p](const auto& c) { return c.second->has(p); }))
        return false;
    return true;
  };
  if (path_in) {
    std::vector<uint64_t> candidates = *path_in;
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    std::vector<uint64_t> out;
    for (uint64_t p : candidates) {
      if (prim_attribute_count_.get(p) == 0) continue;
      if (holds_all(p)) out.push_back(p);
    }
    if (f.path_prefix != 0) dictionary_.keep_at_or_below(f.path_prefix, out);
    return PrimList(std::make_shared<const PrimSeq>(std::move(out)));
  }
  // Every existing prim: the counts' runs first (a path range's members are a few runs, not
  // one look per prim), then one list of exactly their size -- no vector regrown, no second
  // copy. A result that is one run (a whole range, prims interned one after another) is known
  // to be a progression, as a range query is, so writes through it compute their rows.
  const std::vector<std::pair<uint64_t, uint64_t>> runs =
      prim_attribute_count_.joined_runs(dictionary_.path_id_bound());
  uint64_t total = 0;
  for (const auto& run : runs) total += run.second;
  // Every prim, one run (a whole range; prims interned one after another): the progression,
  // its list made only if a reader asks for one (a checkpoint's reads take the progression).
  if (has.empty() && f.path_prefix == 0 && runs.size() == 1)
    return PrimList(std::make_shared<const PrimSeq>(
        PrimSeq::progression_listed_on_demand(runs[0].first, runs[0].second, 1)));
  std::vector<uint64_t> out;
  out.reserve(has.empty() ? total : 0);
  for (const auto& [first, count] : runs)
    for (uint64_t p = first; p < first + count; ++p)
      if (holds_all(p)) out.push_back(p);
  if (f.path_prefix != 0) dictionary_.keep_at_or_below(f.path_prefix, out);
  return PrimList(std::make_shared<const PrimSeq>(PrimSeq::sorted(std::move(out))));
}

}  // namespace kstage::core
