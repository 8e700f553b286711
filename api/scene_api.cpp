// SPDX-License-Identifier: Apache-2.0
// The scene: hierarchy answers and relational filters (kstage.h, "Scene"). The engine answers
// (core/stage_scene.cpp); this file checks arguments, keeps the answers' handles and hands out
// their arrays.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"

using namespace kstage;
using namespace kstage::capi;

extern "C" {

kstage_status_t kstage_query_hierarchy(kstage_stage_t stage, kstage_query_t query,
                                       kstage_relation_t relation, kstage_hierarchy_t* result) {
  return with_stage("kstage::query_hierarchy", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(result, "result"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s.queries, query, Kind::Query));
    std::shared_ptr<const core::HierarchyAnswer> answer;
    KSTAGE_ASSIGN_OR_RETURN(answer, s.engine->query_hierarchy(*prims, relation));
    *result = s.hierarchies.add(Kind::Hierarchy, std::move(answer));
    return Status::OK();
  });
}

kstage_status_t kstage_hierarchy_get(kstage_stage_t stage, kstage_hierarchy_t result,
                                     const kstage_hierarchy_item_t** items, uint64_t* item_count,
                                     const kstage_path_span_t** spans, uint64_t* span_count) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    std::shared_ptr<const core::HierarchyAnswer> answer;
    KSTAGE_ASSIGN_OR_RETURN(answer, lookup(s.hierarchies, result, Kind::Hierarchy));
    // The arrays live as long as the handle: the table holds the answer until its release.
    if (items) *items = answer->items.empty() ? nullptr : answer->items.data();
    if (item_count) *item_count = answer->items.size();
    if (spans) *spans = answer->spans.empty() ? nullptr : answer->spans.data();
    if (span_count) *span_count = answer->spans.size();
    return Status::OK();
  });
}

kstage_status_t kstage_hierarchy_release(kstage_stage_t stage, kstage_hierarchy_t result) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    return release(s.hierarchies, result, Kind::Hierarchy);
  });
}

kstage_status_t kstage_query_filter_ex(kstage_stage_t stage, const kstage_filter_ex_t* filter,
                                       kstage_query_t* query) {
  return with_stage("kstage::query_filter_ex", stage, [&](StageEntry& s) -> Status {
    kstage_filter_ex_t f;
    KSTAGE_ASSIGN_OR_RETURN(f, read_descriptor(filter, "filter"));
    KSTAGE_RETURN_NOT_OK(need(query, "query"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, s.engine->query_filter_ex(f));
    *query = s.queries.add(Kind::Query, std::move(prims));
    return Status::OK();
  });
}

}  // extern "C"
