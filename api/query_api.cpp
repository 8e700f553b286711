// SPDX-License-Identifier: Apache-2.0
// Queries: fixed, ordered prim lists.
#include "api/guard.hpp"
#include "api/handles.hpp"

using namespace kstage;
using namespace kstage::capi;

extern "C" {

kstage_status_t kstage_query_paths(kstage_stage_t stage, const kstage_path_t* paths, uint64_t count,
                                   kstage_query_t* query) {
  return with_stage("kstage::query_paths", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(query, "query"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, s.engine->query_paths(paths, count));
    *query = s.queries.add(Kind::Query, std::move(prims));
    return Status::OK();
  });
}

kstage_status_t kstage_query_range(kstage_stage_t stage, kstage_path_t first, uint64_t start,
                                   uint64_t count, uint64_t stride, kstage_query_t* query) {
  return with_stage("kstage::query_range", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(query, "query"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, s.engine->query_range(first, start, count, stride));
    *query = s.queries.add(Kind::Query, std::move(prims));
    return Status::OK();
  });
}

kstage_status_t kstage_query_filter(kstage_stage_t stage, const kstage_filter_t* filter,
                                    kstage_query_t* query) {
  return with_stage("kstage::query_filter", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(filter, "filter"));
    KSTAGE_RETURN_NOT_OK(need(query, "query"));
    std::shared_ptr<const std::vector<uint64_t>> in;
    if (filter->path_in != 0) {
      std::shared_ptr<PathList> l;
      KSTAGE_ASSIGN_OR_RETURN(l, lookup(s.path_lists, filter->path_in, Kind::PathList));
      in = l->paths;
    }
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, s.engine->query_filter(*filter, in.get()));
    *query = s.queries.add(Kind::Query, std::move(prims));
    return Status::OK();
  });
}

kstage_status_t kstage_query_count(kstage_stage_t stage, kstage_query_t query, uint64_t* count) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(count, "count"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s.queries, query, Kind::Query));
    *count = prims->size();
    return Status::OK();
  });
}

kstage_status_t kstage_query_get_paths(kstage_stage_t stage, kstage_query_t query,
                                       kstage_path_list_t* paths) {
  return with_stage("kstage::query_get_paths", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(paths, "paths"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s.queries, query, Kind::Query));
    auto l = std::make_shared<PathList>();
    if (prims->data()) {
      // An immutable list: shared, not copied.
      l->paths = std::shared_ptr<const std::vector<uint64_t>>(prims, &prims->list());
    } else if (auto made = prims->shared_on_demand_list()) {
      // A filter's run of ids: the list its read groups publish, made once for both.
      l->paths = std::move(made);
    } else {  // a progression has no list: made for the caller
      std::vector<uint64_t> ids;
      prims->ids(0, prims->size(), ids);
      l->paths = std::make_shared<const std::vector<uint64_t>>(std::move(ids));
    }
    *paths = s.path_lists.add(Kind::PathList, std::move(l));
    return Status::OK();
  });
}

kstage_status_t kstage_query_release(kstage_stage_t stage, kstage_query_t query) {
  return with_stage(
      stage, [&](StageEntry& s) -> Status { return release(s.queries, query, Kind::Query); });
}

}  // extern "C"
