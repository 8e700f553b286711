// SPDX-License-Identifier: Apache-2.0
// Map / unmap: writable buffers for producers.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"
#include "core/group_export.hpp"

using namespace kstage;
using namespace kstage::capi;

namespace {

// The fetched group `h` of `s` (session mutex held by the caller).
Result<core::MapGroup*> fetched_group(core::MapSession& s, kstage_map_group_t h) {
  for (auto& g : s.groups) {
    if (g->desc.handle != h || h == 0) continue;
    if (g->state == core::MapGroup::State::Committed)
      return error(KSTAGE_INVALID_HANDLE, "map group handle %llu was already unmapped",
                   (unsigned long long)h);
    return g.get();
  }
  return error(KSTAGE_INVALID_HANDLE, "map group handle %llu is not a fetched group of this map",
               (unsigned long long)h);
}

}  // namespace

extern "C" {

kstage_status_t kstage_map_attribute(kstage_stage_t stage, kstage_query_t query,
                                     const kstage_map_desc_t* desc, uint64_t ordinal,
                                     const uint64_t* element_counts, uint64_t n, kstage_map_t* map) {
  return guard("kstage::map_attribute", [&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    kstage_map_desc_t d;
    KSTAGE_ASSIGN_OR_RETURN(d, read_descriptor(desc, "desc"));
    KSTAGE_RETURN_NOT_OK(need(map, "map"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s->queries, query, Kind::Query));
    std::shared_ptr<core::MapSession> session;
    KSTAGE_ASSIGN_OR_RETURN(session, s->engine->map(prims, d, ordinal, element_counts, n));
    *map = s->maps.add(Kind::Map, std::move(session));
    return Status::OK();
  });
}

kstage_status_t kstage_fetch_map_next(kstage_stage_t stage, kstage_map_t map, uint64_t timeout_ns,
                                      kstage_map_group_info_t* group) {
  (void)timeout_ns;  // every group is allocated when the map opens
  return guard("kstage::fetch_map_next", [&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    KSTAGE_RETURN_NOT_OK(need(group, "group"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s->maps, map, Kind::Map));
    std::lock_guard lock(m->mutex);
    if (m->ended || m->next_fetch >= m->groups.size())
      return error(KSTAGE_END_OF_ITERATION, "map %llu has no more groups", (unsigned long long)map);
    core::MapGroup& g = *m->groups[m->next_fetch];
    g.publish_prims();  // first: may run out of memory, and then nothing changed
    ++m->next_fetch;
    g.state = core::MapGroup::State::Fetched;
    g.desc.handle = new_handle(Kind::MapGroup);
    *group = g.desc;
    return Status::OK();
  });
}

kstage_status_t kstage_unmap_group(kstage_stage_t stage, kstage_map_t map,
                                   kstage_map_group_t group, kstage_device_sync_t done_sync,
                                   kstage_op_t* op) {
  return guard("kstage::unmap_group", [&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s->maps, map, Kind::Map));
    std::lock_guard lock(m->mutex);
    core::MapGroup* g;
    KSTAGE_ASSIGN_OR_RETURN(g, fetched_group(*m, group));
    auto slot = s->ops.reserve(Kind::Op);  // before the commit: nothing after it can fail
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, s->engine->commit(*m, {g}, done_sync));
    *op = slot.fill(std::move(o));
    return Status::OK();
  });
}

kstage_status_t kstage_unmap_attribute(kstage_stage_t stage, kstage_map_t map,
                                       kstage_device_sync_t done_sync, kstage_op_t* op) {
  return guard("kstage::unmap_attribute", [&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s->maps, map, Kind::Map));
    {
      std::lock_guard lock(m->mutex);
      std::vector<core::MapGroup*> fetched;
      for (auto& g : m->groups)
        if (g->state == core::MapGroup::State::Fetched) fetched.push_back(g.get());
      auto slot = s->ops.reserve(Kind::Op);  // before the commit: nothing after it can fail
      std::shared_ptr<core::Op> o;
      KSTAGE_ASSIGN_OR_RETURN(o, s->engine->commit(*m, fetched, done_sync));
      m->ended = true;
      *op = slot.fill(std::move(o));
    }
    s->maps.take(map);  // the map ends; unfetched buffers are freed with it
    return Status::OK();
  });
}

kstage_status_t kstage_release_map_after(kstage_stage_t stage, kstage_map_t map,
                                         kstage_device_sync_t producer) {
  return guard("kstage::release_map_after", [&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s->maps, map, Kind::Map));
    {
      // The buffers are freed in the order of the stage's stream: it waits for the producer
      // first ({0, 0}: nothing to wait for).
      std::lock_guard lock(m->mutex);
      KSTAGE_RETURN_NOT_OK(m->backend->order_after(producer, "producer"));
    }
    if (!s->maps.take(map))  // released by another thread meanwhile
      return error(KSTAGE_INVALID_HANDLE, "map handle %llu is not live (released or unmapped?)",
                   (unsigned long long)map);
    return Status::OK();
  });
}

kstage_status_t kstage_release_map(kstage_stage_t stage, kstage_map_t map) {
  return kstage_release_map_after(stage, map, kstage_device_sync_t{0, 0});
}

kstage_status_t kstage_map_group_export(kstage_stage_t stage, kstage_map_t map,
                                        kstage_map_group_t group, uint64_t index, uint64_t flags,
                                        struct DLManagedTensorVersioned** tensor) {
  return guard("kstage::map_group_export", [&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    KSTAGE_RETURN_NOT_OK(need(tensor, "tensor"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s->maps, map, Kind::Map));
    std::lock_guard lock(m->mutex);
    core::MapGroup* g;
    KSTAGE_ASSIGN_OR_RETURN(g, fetched_group(*m, group));
    core::ExportSource src;
    src.tensors = &g->tensors;
    src.buffer = g->rows.data;
    KSTAGE_ASSIGN_OR_RETURN(*tensor, core::export_group_versioned(src, index, flags));
    return Status::OK();
  });
}

}  // extern "C"
