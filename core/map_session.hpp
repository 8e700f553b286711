// SPDX-License-Identifier: Apache-2.0
// Map sessions: writable buffers handed to a producer, committed at unmap as
// writes whose staged data *is* those buffers. Nothing is copied on the way
// in; at seal, a fixed-size group that covers every row of its column in row
// order replaces the storage outright (Column::apply_fixed's identity path),
// so a dense map -> fill -> unmap -> seal moves the payload zero times beyond
// the fill. Other groups are scattered once at seal.
//
// The session's state machine is all here, as an ArrowArrayStream's producer owns get_next:
// Stage::open_map plans the groups and allocates their buffers (Pending); next() hands them out
// in order (Fetched); commit() and end() commit fetched groups as writes (Committed), and end()
// also ends the session. The C API only names sessions and groups and copies descriptors out
// (api/map_api.cpp).
#pragma once

#include "core/stage.hpp"

#include <mutex>

namespace kstage::core {

struct MapGroup {
  enum class State { Pending, Fetched, Committed };
  State state = State::Pending;
  kstage_map_group_info_t desc{};
  // The group's prims (query order) and, for a whole-column map whose rows
  // are not in query order, prim i -> buffer row. Shared with the query and
  // the column's row map, not copied. A range query's prims have no list:
  // publish_prims() makes the group's in `prim_ids` when it is fetched.
  PrimList prims;
  std::vector<uint64_t> prim_ids;
  std::shared_ptr<const std::vector<uint32_t>> index_map;
  std::vector<DLTensor> tensors;
  std::vector<int64_t> shapes, strides;
  StagedRows rows;  // what unmap commits: the buffer and its target prims

  void publish_prims() {
    if (desc.prims == nullptr && desc.prim_count > 0)
      desc.prims = prims->ids(0, desc.prim_count, prim_ids);
  }
};

// Every call takes the session's mutex: one map may be fetched and unmapped from several
// threads. The session is freed with its last holder, and with it the buffers of the groups
// never committed.
class MapSession {
 public:
  explicit MapSession(Stage& stage) : stage_(stage) {}

  // What Stage::open_map planned: set before the session is shared, read-only after (groups'
  // states and rows change under the mutex only).
  uint64_t attribute = 0;
  uint64_t ordinal = 0;
  Schema schema;
  Backend* backend = nullptr;
  kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT;
  bool replaces = false;  // KSTAGE_ATTRIBUTE_MODE_FORCE
  std::vector<std::unique_ptr<MapGroup>> groups;

  // Hands out the next group, named `name()`: called under the mutex, and only for a group
  // there is (the name is a process-wide handle, made by the C API). Null once every group was
  // handed out or the session ended. The descriptor lives as long as the session and is not
  // written again. Making a range query's prims array may run out of memory (std::bad_alloc):
  // then nothing changed.
  const kstage_map_group_info_t* next(uint64_t (*name)());
  // Commits the fetched group named `group` as one op (kstage_unmap_group). A failed commit
  // commits nothing: the group stays fetched, for a retry. `reserve()` runs under the mutex once
  // the group is found, just before the commit: there the C API reserves the op's handle, so that
  // a group that is not fetched is reported before anything is reserved, and nothing after the
  // commit can fail. It may throw (std::bad_alloc): then nothing was committed.
  template <class Reserve>
  Result<std::shared_ptr<Op>> commit(uint64_t group, const kstage_device_sync_t& done_sync,
                                     Reserve&& reserve) {
    std::lock_guard lock(mutex_);
    MapGroup* g;
    KSTAGE_ASSIGN_OR_RETURN(g, fetched(group));
    reserve();
    return stage_.commit(*this, {g}, done_sync);
  }
  // Commits every fetched group as one op, then ends the session: next() hands out no more
  // (kstage_unmap_attribute). A failed commit commits nothing and leaves the session open.
  // `reserve()` as for commit(): under the mutex, once the fetched groups are listed.
  template <class Reserve>
  Result<std::shared_ptr<Op>> end(const kstage_device_sync_t& done_sync, Reserve&& reserve) {
    std::lock_guard lock(mutex_);
    const std::vector<MapGroup*> filled = fetched_groups();
    reserve();
    std::shared_ptr<Op> op;
    KSTAGE_ASSIGN_OR_RETURN(op, stage_.commit(*this, filled, done_sync));
    ended_ = true;
    return op;
  }
  // Orders the frees of the session's buffers, in the order of the stage's stream, after
  // `producer` ({0, 0}: nothing to wait for): a map given up while a producer may still be
  // writing its buffers (kstage_release_map_after). The frees happen when the session is let go.
  Status abandon_after(const kstage_device_sync_t& producer);
  // Tensor `index` of the fetched group named `group`, as DLPack (kstage_map_group_export).
  Result<DLManagedTensorVersioned*> export_tensor(uint64_t group, uint64_t index, uint64_t flags);

 private:
  // The group named `group` if it was fetched and not committed. Requires mutex_.
  Result<MapGroup*> fetched(uint64_t group);
  // Every group fetched and not committed, in order. Requires mutex_.
  std::vector<MapGroup*> fetched_groups() const;

  Stage& stage_;  // outlives the session (api/handles.hpp: StageEntry drops maps first)
  size_t next_fetch_ = 0;
  bool ended_ = false;
  std::mutex mutex_;
};

}  // namespace kstage::core
