// SPDX-License-Identifier: Apache-2.0
// The scene trees of the world-transform workloads (perf/src/wl_scene.cpp), shared with the
// device grids (device_suite.cpp, emulated_suite.cpp):
//   robots  4,096 (prims / 20) copies of a 10-deep, 20-prim robot, each under
//           /World/envs/env_<i> (one path range: kstage_intern_path_range);
//   random  forests of prims / 100 trees of 100 prims under /World/trees/t_<i> (a path range),
//           each tree random (every prim's parent drawn among the earlier ones) and at most
//           3 to 8 levels deep (drawn per tree).
// Local matrices are rigid motions (a rotation about z, a translation), float64 x 16,
// row-major, row vectors: world = local . parent_world (kstage_compute_world_transforms).
#pragma once

#include "harness.hpp"

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kperf {

enum class TreeKind { Robots, Random };
inline const char* tree_name(TreeKind k) { return k == TreeKind::Robots ? "robots" : "random"; }

// A forest in generation order: parents before children, each tree's prims contiguous and
// its root first.
struct SceneTree {
  TreeKind kind = TreeKind::Robots;
  uint64_t n = 0;                       // prims
  uint64_t trees = 0;                   // roots (environments)
  uint64_t per_tree = 0;                // prims per tree (the last random tree may hold fewer)
  std::vector<int32_t> parent;          // generation index of the parent, -1 for a root
  std::vector<uint64_t> level_offsets;  // level_order[level_offsets[l] .. [l+1]): depth l + 1
  std::vector<uint32_t> level_order;    // prims by depth, generation order within a depth
  uint64_t root(uint64_t t) const { return t * per_tree; }
  uint64_t tree_size(uint64_t t) const { return std::min(per_tree, n - root(t)); }
  size_t levels() const { return level_offsets.empty() ? 0 : level_offsets.size() - 1; }
};
// The robot (also the clone workloads' environment, perf/src/wl_clone.cpp): kRobotPrims prims,
// the env root first (j = 0), parents before children; robot_path(j) is prim j's path below
// its env root ("" for the root, "/Robot", "/Robot/base", ...).
constexpr int kRobotPrims = 20;
std::string robot_path(int j);
// robots: prims rounded down to a multiple of 20 (at least one robot).
SceneTree make_scene_tree(TreeKind kind, uint64_t prims);
uint64_t robots_prims(uint64_t prims);

// The local matrix of prim i at `version` (0 initially; a moved root gets 1, 2, ...).
void scene_local(uint64_t i, uint64_t version, double* m);
// out = a . b, row-major 4 x 4, the expression of core/kernels/world_transform.hpp.
inline void scene_multiply(double* __restrict out, const double* a, const double* b) {
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c)
      out[4 * r + c] = a[4 * r] * b[c] + a[4 * r + 1] * b[4 + c] + a[4 * r + 2] * b[8 + c] +
                       a[4 * r + 3] * b[12 + c];
}

// Bytes a world-transform compute must touch per prim: its local and its parent's world
// read, its world written (3 x 128 B at float64 x 16): the memcpy-equivalent payload.
constexpr double kSceneBytesPerPrim = 384;
// Share of the trees whose roots an incremental tick moves.
constexpr double kSceneMovedShare = 0.01;

// The trees a device grid measures: (kind, prims).
std::vector<std::pair<TreeKind, uint64_t>> scene_device_trees(const Options& o, bool emulated);

// What a device grid gives the scene workloads: its residency and synchronous memory calls.
struct SceneDeviceOps {
  DLDevice residency{kDLCPU, 0};
  std::function<void*(size_t)> alloc;  // device memory (throws or dies when none)
  std::function<void(void*)> release;
  std::function<void(void*, const void*, size_t)> upload;  // host -> device, complete on return
  std::function<void(void*, const void*, size_t)> copy;    // device -> device, complete on return
};
struct SceneDeviceRow {
  std::string name;
  uint64_t rows = 0;
  double seconds = 0;
  double bytes = 0;   // payload per run
  std::string vs;     // the row compared with (same rows)
  double target = 0;  // ratio to reach (0: reported only)
  std::string note;
};
// transform_full_<tree> (FULL compute + wait + seal) against copy_d2d_384B (a device-to-device
// copy of 384 B per prim; target 0.5x its bandwidth) and transform_incremental_1pct_<tree> (1%
// of the roots moved, untimed; INCREMENTAL compute + wait + seal) against the full compute
// (ratio = full time / incremental time, target 20: <= 5%), each tree in a stage of its own on
// ops.residency; every result checked on a sample of prims (read back to the host). Throws on
// a failed check or call.
std::vector<SceneDeviceRow> run_scene_device(const SceneDeviceOps& ops, const Options& o,
                                             bool emulated, int reps);
// The clone workloads (perf/src/wl_clone.cpp) on ops.residency: clone_<source> (kstage_clone_range
// + wait + seal, each run in a fresh stage) against copy_d2d_<source> (a device-to-device copy of
// the bytes the clone produces; target 0.5x its bandwidth at 4,096 targets of the env) and against
// clone_<source>_read_write (the read-and-write route; printed as clone_<source>_vs_read_write,
// route time / clone time, target 10), env to 64, 1,024 and 4,096 targets and prim to 1e6 (64 and
// 1,000 in --smoke); every result read back to the host and checked. Throws on a failed check.
std::vector<SceneDeviceRow> run_clone_device(const SceneDeviceOps& ops, const Options& o,
                                             bool emulated, int reps);

}  // namespace kperf
