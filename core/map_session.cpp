// SPDX-License-Identifier: Apache-2.0
// Map sessions: handing groups out, finding the fetched ones, giving up the session, exports.
// commit() and end() are in the header (they call the C API's `reserve` under the mutex).
// Planning the groups and the commit's write are the stage's (stage_maps.cpp).
#include "core/map_session.hpp"

#include "core/group_export.hpp"

namespace kstage::core {

Result<MapGroup*> MapSession::fetched(uint64_t group) {
  for (auto& g : groups) {
    if (g->desc.handle != group || group == 0) continue;
    if (g->state == MapGroup::State::Committed)
      return error(KSTAGE_INVALID_HANDLE, "map group handle %llu was already unmapped",
                   (unsigned long long)group);
    return g.get();
  }
  return error(KSTAGE_INVALID_HANDLE, "map group handle %llu is not a fetched group of this map",
               (unsigned long long)group);
}

const kstage_map_group_info_t* MapSession::next(uint64_t (*name)()) {
  std::lock_guard lock(mutex_);
  if (ended_ || next_fetch_ >= groups.size()) return nullptr;
  MapGroup& g = *groups[next_fetch_];
  g.publish_prims();  // first: may run out of memory, and then nothing changed
  ++next_fetch_;
  g.state = MapGroup::State::Fetched;
  g.desc.handle = name();
  return &g.desc;
}

std::vector<MapGroup*> MapSession::fetched_groups() const {
  std::vector<MapGroup*> filled;
  for (auto& g : groups)
    if (g->state == MapGroup::State::Fetched) filled.push_back(g.get());
  return filled;
}

Status MapSession::abandon_after(const kstage_device_sync_t& producer) {
  // The buffers are freed in the order of the stage's stream: it waits for the producer first.
  // Under the mutex, as a commit's wait for its producer is.
  std::lock_guard lock(mutex_);
  return backend->order_after(producer, "producer");
}

Result<DLManagedTensorVersioned*> MapSession::export_tensor(uint64_t group, uint64_t index,
                                                            uint64_t flags) {
  std::lock_guard lock(mutex_);
  MapGroup* g;
  KSTAGE_ASSIGN_OR_RETURN(g, fetched(group));
  ExportSource src;
  src.tensors = &g->tensors;
  src.buffer = g->rows.data;
  return export_group_versioned(src, index, flags);
}

}  // namespace kstage::core
