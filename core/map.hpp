// SPDX-License-Identifier: Apache-2.0
// Map sessions: writable buffers handed to a producer, committed at unmap as
// writes whose staged data *is* those buffers. Nothing is copied on the way
// in; at seal, a fixed-size group that covers every row of its column in row
// order replaces the storage outright (Column::apply_fixed's identity path),
// so a dense map -> fill -> unmap -> seal moves the payload zero times beyond
// the fill. Other groups are scattered once at seal.
#pragma once

#include "core/column.hpp"

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

struct MapSession {
  uint64_t attribute = 0;
  uint64_t ordinal = 0;
  Schema schema;
  Backend* backend = nullptr;
  kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT;
  std::vector<std::unique_ptr<MapGroup>> groups;
  size_t next_fetch = 0;
  bool ended = false;
  std::mutex mutex;  // fetch / unmap of one session from several threads
};

}  // namespace kstage::core
