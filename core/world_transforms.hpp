// SPDX-License-Identifier: Apache-2.0
// World transforms (kstage_compute_world_transforms): the hierarchy of the prims that hold a
// local matrix, and what a world column remembers of the compute that last wrote it, which is
// what makes the next compute incremental without ever leaving a matrix stale (docs/scene.md).
#pragma once

#include "core/buffer.hpp"
#include "core/prim_seq.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kstage::core {

struct Op;

// The prims that hold a local matrix (sealed), as *slots* in level order -- roots first, then
// their children, ..., path-id order within a level -- each with its parent's slot: the
// nearest ancestor path that holds a local matrix. Built when the local column's rows change
// (its structure counter), and shared by every compute that finds them unchanged.
struct TransformStructure {
  uint64_t local_serial = 0;          // the local column it was built from (Column::serial)
  uint64_t local_structure = 0;       // and that column's Column::structure() then
  PrimList prims;                     // per slot: the prim (a full compute's write targets)
  std::vector<uint32_t> local_rows;   // per slot: its row of the local column
  std::vector<int64_t> parents;       // per slot: the parent's slot, or WorldTransform::kRoot
  std::vector<size_t> level_offsets;  // slots [level_offsets[l], level_offsets[l + 1]): level l
  std::vector<uint32_t> slot_of_row;  // per local row: its slot (Column::kNoRow: none)
  std::vector<uint32_t> child_offsets, children;  // slot s's children: children[offsets[s]..]
  size_t size() const { return local_rows.size(); }
  size_t levels() const { return level_offsets.empty() ? 0 : level_offsets.size() - 1; }
  size_t level_of(size_t slot) const {
    return size_t(std::upper_bound(level_offsets.begin(), level_offsets.end(), slot) -
                  level_offsets.begin()) -
           1;
  }
};

// What the last compute of one world column read and wrote (Stage keeps one per world
// attribute). The next incremental compute trusts the world column only if it still is what
// this compute left: the same column, its output sealed, its op not failed.
struct TransformState {
  uint64_t local = 0, reset = 0;  // the columns it read (tokens)
  std::shared_ptr<const TransformStructure> structure;
  uint64_t local_seen = 0;  // the local column's last_change() then: later changes are new
  // The reset column then (serial 0: there was none), and its last_change().
  uint64_t reset_serial = 0, reset_structure = 0, reset_seen = 0;
  uint64_t world_serial = 0;  // the world column it wrote
  uint64_t world_seen = 0;    // that column's last_change() before this compute
  uint64_t output = 0;        // the ordinal it wrote at
  std::shared_ptr<const Op> op;
  // A full compute's per-slot arrays where the kernel reads them (a device: uploaded once),
  // for `structure` and the reset column's rows they were made with.
  BufferPtr full_indices;
  std::shared_ptr<const TransformStructure> full_for;
  uint64_t full_reset_serial = 0, full_reset_structure = 0;
};

}  // namespace kstage::core
