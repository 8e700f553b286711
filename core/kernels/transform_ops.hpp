// SPDX-License-Identifier: Apache-2.0
// The world-transform kernel's descriptor (core/kernels/world_transform.hpp runs it): plain
// data the engine fills (core/world_transforms.cpp) and a backend launches, as copy_ops.hpp's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kstage::core::kernels {

// World matrices of n prims, the *slots*, ordered by level: a slot's parent slot lies in an
// earlier level. Matrices are 16 scalars (float64, or float32 with f32), row-major, for row
// vectors: world = local . parent_world; a root's (or a reset prim's) world is its local.
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
  const int64_t* parents = nullptr;      // per slot: a slot, kRoot, or a row of old_world
  // Host memory: slots [level_offsets[l], level_offsets[l + 1]) are level l, l < levels.
  const size_t* level_offsets = nullptr;
  size_t levels = 0;
  // Pointer jumping's scratch (kernels' memory): n matrices and 2n entries. Null: the kernel
  // goes level by level whatever the depth.
  std::byte* scratch = nullptr;
  int64_t* jumps = nullptr;

  size_t matrix_bytes() const { return 16 * (f32 ? sizeof(float) : sizeof(double)); }
};

// Deeper than this, a parallel compute jumps pointers (ceil(log2 levels) passes over every
// slot) instead of launching one pass per level (docs/scene.md, "Computing world matrices").
constexpr size_t kMaxLevelPasses = 32;

}  // namespace kstage::core::kernels
