// SPDX-License-Identifier: Apache-2.0
// The world-transform kernel's descriptor (core/kernels/world_transform.hpp runs it): plain
// data the engine fills (core/world_transforms.cpp) and a backend launches, as copy_ops.hpp's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kstage::core::kernels {

// World matrices of n prims, the *slots*, in depth-first order: a slot's parent is an earlier
// slot, and a slot's subtree is the slots after it up to some end. Matrices are 16 scalars
// (float64, or float32 with f32), row-major, for row vectors: world = local . parent_world; a
// root's (or a reset prim's) world is its local.
//
// How the slots run (the engine plans it; docs/scene.md, "The algorithm"):
//  - on an execution space that runs a range in order (Kokkos::Serial): one pass over the
//    slots, whatever the plan says;
//  - else, unless `jump`: the level passes -- for each level l < levels, the slots
//    order[level_offsets[l] .. level_offsets[l + 1]) in parallel -- then the chunks in
//    parallel, chunk c being the slots chunks[2c] .. chunks[2c + 1] - 1 in order (a subtree
//    whose root's parent is final by then);
//  - with `jump`: pointer jumping over every slot, ceil(log2 depth) passes.
//
// Every pointer but level_offsets is memory the backend's kernels read (the engine uploads the
// per-slot arrays to a device once per structure and keeps them).
struct WorldTransform {
  static constexpr int64_t kRoot = -1;  // parents[i]: no parent
  // parents[i] <= kOldWorld: the parent's world is row (kOldWorld - parents[i]) of old_world (a
  // prim not recomputed this time: its world matrix is the column's).
  static constexpr int64_t kOldWorld = -2;
  static constexpr uint32_t kNoReset = UINT32_MAX;  // reset_rows[i]: no reset row

  size_t n = 0;
  bool f32 = false;
  std::byte* world = nullptr;            // out: row i is slot i's world matrix, compact
  const std::byte* local = nullptr;      // the local column's values (row r: 16 scalars at r)
  const std::byte* reset = nullptr;      // the reset column's values (one byte a row), or null
  const std::byte* old_world = nullptr;  // the world column's values, or null (no kOldWorld)
  const uint32_t* local_rows = nullptr;  // per slot: its row of `local`
  const uint32_t* reset_rows = nullptr;  // per slot: its row of `reset` or kNoReset
  const int64_t* parents = nullptr;      // per slot: an earlier slot, kRoot, or a row of old_world
  // The level passes: `order` in the kernels' memory, `level_offsets` host memory (levels + 1).
  const uint32_t* order = nullptr;
  const size_t* level_offsets = nullptr;
  size_t levels = 0;
  // The chunks: n_chunks pairs (begin, end) of slots.
  const uint32_t* chunks = nullptr;
  size_t n_chunks = 0;
  // Pointer jumping: `depth` levels; scratch for n matrices and 2n jumps.
  bool jump = false;
  size_t depth = 0;
  std::byte* scratch = nullptr;
  int64_t* jumps = nullptr;

  size_t matrix_bytes() const { return 16 * (f32 ? sizeof(float) : sizeof(double)); }
};

// The plan's bounds (core/world_transforms.cpp): the chunks' roots are the first level with a
// slot for every kMaxChunkSlots slots of the compute whose subtrees are runs of slots (chunks of
// at most a few hundred prims on average: enough of them to fill the cores or a GPU's threads,
// each a short in-order walk of one subtree); the levels above it run one pass each, at most
// kMaxLevelPasses of them, else the plan jumps pointers.
constexpr size_t kMaxChunkSlots = 256;
constexpr size_t kMaxLevelPasses = 32;

}  // namespace kstage::core::kernels
