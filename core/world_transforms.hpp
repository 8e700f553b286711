// SPDX-License-Identifier: Apache-2.0
// World transforms (kstage_compute_world_transforms): the hierarchy of the prims that hold a
// local matrix, how a compute runs over it, and what a world column remembers of the compute
// that last wrote it, which is what makes the next compute incremental without ever leaving a
// matrix stale (docs/scene.md).
#pragma once

#include "core/buffer.hpp"
#include "core/prim_seq.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kstage::core {

struct Op;

// The prims that hold a local matrix (sealed), as *slots* -- in the local column's row order
// when parents' rows come first (a scene written parents first), else depth-first (each root
// by path id, then its subtree) -- each with its parent's slot: the nearest ancestor path that
// holds a local matrix, always an earlier slot. A subtree that is a run of slots ends at
// subtree_end (0: it is not one; the child lists give it). Built when the local column's prims
// change (its structure counter), and shared by every compute that finds them unchanged.
struct TransformStructure {
  uint64_t local_serial = 0;          // the local column it was built from (Column::serial)
  uint64_t local_structure = 0;       // and that column's Column::structure() then
  PrimList prims;                     // per slot: the prim (a full compute's write targets)
  std::vector<uint32_t> local_rows;   // per slot: its row of the local column
  std::vector<int64_t> parents;       // per slot: the parent's slot (earlier), or kRoot
  std::vector<uint32_t> subtree_end;  // per slot: one past its subtree's run (0: not a run)
  std::vector<uint32_t> depth;        // per slot: 0 for a root
  std::vector<uint32_t> child_offsets, children;  // slot s's children: children[offsets[s]..]
  std::vector<uint32_t> slot_of_row;              // per local row: its slot (Column::kNoRow: none)
  size_t size() const { return local_rows.size(); }
};

// The arrays one compute's kernel reads, for m compute slots in depth-first order, in one block
// (one upload to a device), and the plan of its passes (core/kernels/transform_ops.hpp).
struct TransformArrays {
  size_t m = 0;
  std::vector<uint32_t> local_rows, reset_rows;
  std::vector<int64_t> parents;
  std::vector<uint32_t> order;        // the level passes' slots, level by level
  std::vector<size_t> level_offsets;  // host: level l is order[offsets[l] .. offsets[l + 1])
  std::vector<uint32_t> chunks;       // pairs (begin, end)
  bool jump = false;
  size_t depth = 0;
  // The block: the five arrays above, each starting 8-byte aligned.
  std::vector<uint64_t> block;
  size_t at_reset = 0, at_parents = 0, at_order = 0, at_chunks = 0;  // in uint64 words
  void pack();
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
  uint64_t world_serial = 0;     // the world column it wrote
  uint64_t world_seen = 0;       // that column's last_change() before this compute
  uint64_t world_structure = 0;  // and its structure() then,
  bool world_complete = false;   // when it held a row for every slot
  uint64_t output = 0;           // the ordinal it wrote at
  std::shared_ptr<const Op> op;
  // A full compute's arrays (and their copy on the device, where the kernel runs there), for
  // `structure` and the reset column's rows they were made with.
  std::shared_ptr<const TransformArrays> full;
  BufferPtr full_device;
  std::shared_ptr<const TransformStructure> full_for;
  uint64_t full_reset_serial = 0, full_reset_structure = 0;
};

}  // namespace kstage::core
