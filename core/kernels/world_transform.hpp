// SPDX-License-Identifier: Apache-2.0
// World matrices from local ones (internal; not installed). transform_ops.hpp says what the
// descriptor holds and how its slots run; docs/scene.md why:
//  - in order (Kokkos::Serial): the slots are depth-first, so one pass is the plain loop, with
//    a parent's world matrix computed just before its subtree (in cache) and the local
//    matrices read in the order the prims were written;
//  - in parallel: the few levels above the chunks one pass each, then one work item per chunk
//    (a subtree, walked in order: the same locality as the serial pass), so a forest of 4,096
//    robots is one launch of 4,096 subtrees;
//  - a tree with no level wide enough within kMaxLevelPasses levels (a deep chain) jumps
//    pointers (Wyllie): every slot holds the product of the locals from itself up to the
//    ancestor it points at, and each pass multiplies in that ancestor's product and doubles the
//    jump: ceil(log2 depth) passes over every slot, O(n log depth) work, for any depth (a
//    1e6-deep chain: 20 passes, where one launch per level would be 1e6 launches).
// The first two evaluate each product left to right along the chain; jumping groups them
// differently (the same product, rounded differently: within a few ulps).
#pragma once

#include "core/kernels/transform_ops.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <utility>

namespace kstage::core::kernels {
namespace impl {

template <class T>
KOKKOS_FORCEINLINE_FUNCTION const T* matrix(const std::byte* base, size_t row) {
  return reinterpret_cast<const T*>(base) + row * size_t(16);
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION T* matrix(std::byte* base, size_t row) {
  return reinterpret_cast<T*>(base) + row * size_t(16);
}

// out = a . b (row-major 4 x 4). `out` aliases neither (__restrict__): the compiler need not
// reload `a` or `b` after each store, and schedules the loads itself.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void multiply(T* __restrict__ out, const T* __restrict__ a,
                                          const T* __restrict__ b) {
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 4; ++c)
      out[4 * r + c] = a[4 * r] * b[c] + a[4 * r + 1] * b[4 + c] + a[4 * r + 2] * b[8 + c] +
                       a[4 * r + 3] * b[12 + c];
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void copy(T* __restrict__ out, const T* __restrict__ a) {
  for (int e = 0; e < 16; ++e) out[e] = a[e];
}

// Whether slot i's reset flag is set.
KOKKOS_FORCEINLINE_FUNCTION bool resets(const WorldTransform& k, size_t i) {
  if (k.reset == nullptr) return false;
  const uint32_t row = k.reset_rows[i];
  return row != WorldTransform::kNoReset && k.reset[row] != std::byte{0};
}

// Slot i's world matrix, its parent's being final.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void compute(const WorldTransform& k, size_t i) {
  const T* local = matrix<T>(k.local, k.local_rows[i]);
  T* world = matrix<T>(k.world, i);
  const int64_t p = k.parents[i];
  if (p == WorldTransform::kRoot || resets(k, i)) return copy(world, local);
  const T* parent = p >= 0 ? matrix<T>(k.world, size_t(p))
                           : matrix<T>(k.old_world, size_t(WorldTransform::kOldWorld - p));
  multiply(world, local, parent);
}

template <class T>
struct InOrder {
  WorldTransform k;
  KOKKOS_INLINE_FUNCTION void operator()(size_t i) const { compute<T>(k, i); }
};
template <class T>
struct LevelPass {
  WorldTransform k;
  size_t first;  // the level's first entry of k.order
  KOKKOS_INLINE_FUNCTION void operator()(size_t j) const { compute<T>(k, k.order[first + j]); }
};
template <class T>
struct ChunkPass {
  WorldTransform k;
  KOKKOS_INLINE_FUNCTION void operator()(size_t c) const {
    for (size_t i = k.chunks[2 * c]; i < k.chunks[2 * c + 1]; ++i) compute<T>(k, i);
  }
};

// Jumping, first pass: a slot whose parent is final (none, reset, the old column's) is final
// itself (jump kRoot); the others hold their local and point at their parent.
template <class T>
struct JumpStart {
  WorldTransform k;
  KOKKOS_INLINE_FUNCTION void operator()(size_t i) const {
    const T* local = matrix<T>(k.local, k.local_rows[i]);
    T* out = matrix<T>(k.world, i);
    const int64_t p = k.parents[i];
    if (p == WorldTransform::kRoot || resets(k, i)) {
      copy(out, local);
      k.jumps[i] = WorldTransform::kRoot;
    } else if (p < 0) {
      multiply(out, local, matrix<T>(k.old_world, size_t(WorldTransform::kOldWorld - p)));
      k.jumps[i] = WorldTransform::kRoot;
    } else {
      copy(out, local);
      k.jumps[i] = p;
    }
  }
};

// One doubling: out[i] = in[i] . in[jump[i]], jump'[i] = jump[jump[i]].
template <class T>
struct JumpPass {
  const std::byte* in;
  std::byte* out;
  const int64_t* jump_in;
  int64_t* jump_out;
  KOKKOS_INLINE_FUNCTION void operator()(size_t i) const {
    const int64_t to = jump_in[i];
    if (to < 0) {
      copy(matrix<T>(out, i), matrix<T>(in, i));
      jump_out[i] = WorldTransform::kRoot;
      return;
    }
    multiply(matrix<T>(out, i), matrix<T>(in, i), matrix<T>(in, size_t(to)));
    jump_out[i] = jump_in[to];
  }
};

template <class T>
struct CopyMatrix {
  const std::byte* in;
  std::byte* out;
  KOKKOS_INLINE_FUNCTION void operator()(size_t i) const {
    copy(matrix<T>(out, i), matrix<T>(in, i));
  }
};

template <class Exec, class F>
void run(const Exec& exec, const char* name, size_t n, const F& f) {
  if (n == 0) return;
  Kokkos::parallel_for(name, Kokkos::RangePolicy<Exec, Kokkos::IndexType<size_t>>(exec, 0, n), f);
}

template <class T, class Exec>
void jump(const Exec& exec, const WorldTransform& k) {
  run(exec, "kstage::world_transform_jump_start", k.n, JumpStart<T>{k});
  std::byte* a = k.world;
  std::byte* b = k.scratch;
  int64_t* ja = k.jumps;
  int64_t* jb = k.jumps + k.n;
  // After pass r every jump spans 2^r levels: a chain of `depth` prims needs ceil(log2).
  for (size_t span = 1; span < k.depth; span *= 2) {
    run(exec, "kstage::world_transform_jump", k.n, JumpPass<T>{a, b, ja, jb});
    std::swap(a, b);
    std::swap(ja, jb);
  }
  if (a != k.world) run(exec, "kstage::world_transform_copy", k.n, CopyMatrix<T>{a, k.world});
}

template <class T, class Exec>
void world_transform_typed(const Exec& exec, const WorldTransform& k, bool in_order) {
  if (in_order) return run(exec, "kstage::world_transform", k.n, InOrder<T>{k});
  if (k.jump) return jump<T>(exec, k);
  for (size_t l = 0; l < k.levels; ++l) {
    const size_t lo = k.level_offsets[l], hi = k.level_offsets[l + 1];
    run(exec, "kstage::world_transform_level", hi - lo, LevelPass<T>{k, lo});
  }
  run(exec, "kstage::world_transform_chunks", k.n_chunks, ChunkPass<T>{k});
}

}  // namespace impl

// Runs `k` on `exec`, enqueued in order (no fence). `in_order`: the execution space runs a
// range's indices one after another (Kokkos::Serial), so one pass computes every slot.
template <class Exec>
void world_transform(const Exec& exec, const WorldTransform& k, bool in_order) {
  if (k.n == 0) return;
  if (k.f32) return impl::world_transform_typed<float>(exec, k, in_order);
  impl::world_transform_typed<double>(exec, k, in_order);
}

}  // namespace kstage::core::kernels
