// SPDX-License-Identifier: Apache-2.0
// Map / unmap: writable buffers for producers. The session's state machine is the engine's
// (core/map_session.hpp); these calls name maps and their groups and copy descriptors out.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"

#include <optional>

using namespace kstage;
using namespace kstage::capi;

extern "C" {

kstage_status_t kstage_map_attribute(kstage_stage_t stage, kstage_query_t query,
                                     const kstage_map_desc_t* desc, uint64_t ordinal,
                                     const uint64_t* element_counts, uint64_t n,
                                     kstage_map_t* map) {
  return with_stage("kstage::map_attribute", stage, [&](StageEntry& s) -> Status {
    kstage_map_desc_t d;
    KSTAGE_ASSIGN_OR_RETURN(d, read_descriptor(desc, "desc"));
    KSTAGE_RETURN_NOT_OK(need(map, "map"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s.queries, query, Kind::Query));
    std::shared_ptr<core::MapSession> session;
    KSTAGE_ASSIGN_OR_RETURN(session, s.engine->open_map(prims, d, ordinal, element_counts, n));
    *map = s.maps.add(Kind::Map, std::move(session));
    return Status::OK();
  });
}

kstage_status_t kstage_fetch_map_next(kstage_stage_t stage, kstage_map_t map, uint64_t timeout_ns,
                                      kstage_map_group_info_t* group) {
  (void)timeout_ns;  // every group is allocated when the map opens
  return with_stage("kstage::fetch_map_next", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(group, "group"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s.maps, map, Kind::Map));
    const kstage_map_group_info_t* next = m->next([] { return new_handle(Kind::MapGroup); });
    if (!next)
      return error(KSTAGE_END_OF_ITERATION, "map %llu has no more groups", (unsigned long long)map);
    // Copied out after next() let the session's lock go, and no concurrent call can tell: next()
    // wrote the descriptor under the lock and nothing writes it again (a commit changes the
    // group's state and rows, never its descriptor), and `m` keeps the session, and so the
    // descriptor, alive.
    *group = *next;
    return Status::OK();
  });
}

kstage_status_t kstage_unmap_group(kstage_stage_t stage, kstage_map_t map, kstage_map_group_t group,
                                   kstage_device_sync_t done_sync, kstage_op_t* op) {
  return with_stage("kstage::unmap_group", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s.maps, map, Kind::Map));
    // The op's handle is reserved once the group is found (a group that is not fetched is
    // reported first) and before the commit: nothing after the commit can fail.
    std::optional<HandleTable<core::Op>::Slot> slot;
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, m->commit(group, done_sync, [&] { slot.emplace(s.ops, Kind::Op); }));
    *op = slot->fill(std::move(o));
    return Status::OK();
  });
}

kstage_status_t kstage_unmap_attribute(kstage_stage_t stage, kstage_map_t map,
                                       kstage_device_sync_t done_sync, kstage_op_t* op) {
  return with_stage("kstage::unmap_attribute", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s.maps, map, Kind::Map));
    // The op's handle is reserved under the session's lock, once the fetched groups are listed,
    // and before the commit: nothing after the commit can fail.
    std::optional<HandleTable<core::Op>::Slot> slot;
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, m->end(done_sync, [&] { slot.emplace(s.ops, Kind::Op); }));
    *op = slot->fill(std::move(o));
    s.maps.take(map);  // the map ends; unfetched buffers are freed with it
    return Status::OK();
  });
}

kstage_status_t kstage_release_map_after(kstage_stage_t stage, kstage_map_t map,
                                         kstage_device_sync_t producer) {
  return with_stage("kstage::release_map_after", stage, [&](StageEntry& s) -> Status {
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s.maps, map, Kind::Map));
    KSTAGE_RETURN_NOT_OK(m->abandon_after(producer));
    if (!s.maps.take(map))  // released by another thread meanwhile
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
  return with_stage("kstage::map_group_export", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(tensor, "tensor"));
    std::shared_ptr<core::MapSession> m;
    KSTAGE_ASSIGN_OR_RETURN(m, lookup(s.maps, map, Kind::Map));
    KSTAGE_ASSIGN_OR_RETURN(*tensor, m->export_tensor(group, index, flags));
    return Status::OK();
  });
}

}  // extern "C"
