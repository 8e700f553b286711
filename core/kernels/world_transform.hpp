// SPDX-License-Identifier: Apache-2.0
// World matrices from local ones (internal; not installed). See transform_ops.hpp for what
// the descriptor holds, and docs/scene.md for the convention and the choice of algorithm:
//  - an execution space that runs a range in order (Kokkos::Serial) makes one pass over the
//    slots, which are in topological order: the plain loop, O(n);
//  - a parallel one (OpenMP, a GPU) makes one pass per level, each over that level's slots in
//    parallel, O(n) work in `levels` launches: right for wide, shallow trees (4,096 robots of
//    depth 10: ten launches);
//  - deeper than kMaxLevelPasses it jumps pointers (Wyllie): every slot holds the product of
//    the locals from itself up to the ancestor it points at, and each pass multiplies in that
//    ancestor's product and doubles the jump, so ceil(log2 levels) passes over every slot,
//    O(n log depth) work, finish a chain of any depth (a 1e6-deep chain: 20 passes, where one
//    launch per level would be 1e6 launches).
// Products are evaluated left to right along the chain in the first two; jumping groups them
// differently (the same product, rounded differently: within a few ulps).
#pragma once

#include "core/kernels/transform_ops.hpp"

#include <Kokkos_Core.hpp>

#include <type_traits>
#include <utility>

namespace kstage::core::kernels {
namespace impl {

template <class T>
KOKKOS_FORCEINLINE_FUNCTION const T* matrix(const std::byte* base, size_t row) {
  return reinterpret_cast<const T*>(base) + row * 16;
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION T* matrix(std::byte* base, size_t row) {
  return reinterpret_cast<T*>(base) + row * 16;
}

// out = a . b (row-major 4 x 4); `out` may not alias `a` or `b`.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void multiply(T* out, const T* a, const T* b) {
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c)
      out[4 * r + c] = a[4 * r] * b[c] + a[4 * r + 1] * b[4 + c] + a[4 * r + 2] * b[8 + c] +
                       a[4 * r + 3] * b[12 + c];
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void copy(T* out, const T* a) {
  for (int e = 0; e < 16; ++e) out[e] = a[e];
}

// Whether slot i's reset flag is set.
KOKKOS_FORCEINLINE_FUNCTION bool resets(const WorldTransform& k, size_t i) {
  if (k.reset == nullptr) return false;
  const uint32_t row = k.reset_rows[i];
  return row != WorldTransform::kNoReset && k.reset[row] != std::byte{0};
}

// Slot i's world matrix, its parent's being final (an earlier level, or the old column's).
template <class T>
struct ComputeSlot {
  WorldTransform k;
  size_t first;  // slot of work item 0
  KOKKOS_INLINE_FUNCTION void operator()(size_t j) const {
    const size_t i = first + j;
    const T* local = matrix<T>(k.local, k.local_rows[i]);
    T* world = matrix<T>(k.world, i);
    const int64_t p = k.parents[i];
    if (p == WorldTransform::kRoot || resets(k, i)) return copy(world, local);
    const T* parent = p >= 0 ? matrix<T>(k.world, size_t(p))
                             : matrix<T>(k.old_world, size_t(WorldTransform::kOldWorld - p));
    multiply(world, local, parent);
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
void world_transform_typed(const Exec& exec, const WorldTransform& k, bool in_order) {
  if (in_order) return run(exec, "kstage::world_transform", k.n, ComputeSlot<T>{k, 0});
  if (k.levels <= kMaxLevelPasses || k.scratch == nullptr) {
    for (size_t l = 0; l < k.levels; ++l) {
      const size_t lo = k.level_offsets[l], hi = k.level_offsets[l + 1];
      run(exec, "kstage::world_transform_level", hi - lo, ComputeSlot<T>{k, lo});
    }
    return;
  }
  run(exec, "kstage::world_transform_jump_start", k.n, JumpStart<T>{k});
  std::byte* a = k.world;
  std::byte* b = k.scratch;
  int64_t* ja = k.jumps;
  int64_t* jb = k.jumps + k.n;
  // After pass r every jump spans 2^r levels: a chain of `levels` prims needs ceil(log2).
  for (size_t span = 1; span < k.levels; span *= 2) {
    run(exec, "kstage::world_transform_jump", k.n, JumpPass<T>{a, b, ja, jb});
    std::swap(a, b);
    std::swap(ja, jb);
  }
  if (a != k.world) run(exec, "kstage::world_transform_copy", k.n, CopyMatrix<T>{a, k.world});
}

}  // namespace impl

// Runs `k` on `exec`, enqueued in order (no fence). `in_order`: the execution space runs a
// range's indices one after another (Kokkos::Serial), so one pass computes every level.
template <class Exec>
void world_transform(const Exec& exec, const WorldTransform& k, bool in_order) {
  if (k.n == 0) return;
  if (k.f32) return impl::world_transform_typed<float>(exec, k, in_order);
  impl::world_transform_typed<double>(exec, k, in_order);
}

}  // namespace kstage::core::kernels
