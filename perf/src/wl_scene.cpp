// SPDX-License-Identifier: Apache-2.0
// Scene workloads (issue #46, section 5): kstage_compute_world_transforms on the trees of
// scene.hpp (float64 x 16), next to what a user would write instead, in the same run:
//
//   transform_full_<tree>             timed: a FULL compute + kstage_wait + release op + the
//                                     seal of the world column (kstage_advance_write_floor).
//                                     The seal is in: a user's loop leaves world matrices in
//                                     place, kstage's output is a sealed column readers see.
//   transform_incremental_1pct_<tree> untimed before each run: 1% of the trees' roots move (a
//                                     write of their local matrices through a query of those
//                                     roots, sealed; its time is reported in the CSV note);
//                                     timed: an INCREMENTAL compute + wait + release + seal.
//                                     The 5% target compares it with transform_full_<tree>.
//
// Baselines (registered under transform_<tree>, measured right before the first kstage case
// of a tree, with memcpy of the same payload):
//   serial_loop  for i in generation order (parents first, each tree contiguous):
//                world[i] = parent[i] < 0 ? local[i] : local[i] . world[parent[i]]
//                on arrays indexed by prim, parents precomputed: the user's floor;
//   omp_loop     the same body, one `omp parallel for` per level over precomputed level lists;
//   memcpy       of 384 B per prim (the harness: memcpy at each case's payload): the bytes the
//                compute must touch, local and parent world read, world written.
// Payload (docs/performance.md "Bytes"): 384 B per prim the run computes (every prim for a full
// compute, the moved trees' prims for an incremental one).
//
// Each tree's kstage cases run in a stage of their own (WorkloadDef::own_shapes): the robot
// forest at 81,920 prims, random trees at 1e6 (and 1e7 in --full), 1,280 and 1e4 in --smoke.
#include "scene.hpp"

#include "context.hpp"

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace kperf {

// ---- trees -----------------------------------------------------------------------------------
namespace {

// The robot: 20 prims, 10 levels (the env root is level 1): a base with an arm of 7 links and a
// hand with a finger, two legs of 4 and a camera.
constexpr int kRobotParent[kRobotPrims] = {-1, 0,  1,  2,  3, 4,  5,  6,  7, 8,
                                           2,  10, 11, 12, 2, 14, 15, 16, 2, 8};
const char* const kRobotName[kRobotPrims] = {
    "",   "Robot", "base", "a1",    "a2", "a3", "a4", "a5",    "a6",  "hand",
    "l1", "l2",    "l3",   "lfoot", "r1", "r2", "r3", "rfoot", "cam", "finger"};
constexpr uint64_t kRandomPerTree = 100;

uint64_t draw(uint64_t a, uint64_t b, uint64_t c) {
  return mix64(a * 0x9E3779B97F4A7C15ull ^ mix64(b + 0x632BE59BD9B4E019ull) ^ (c << 17));
}

// The random tree t's parents (local indices, -1 for its root), `size` prims at most `max_depth`
// levels deep.
void random_tree_parents(uint64_t t, uint64_t size, int32_t* parent, uint8_t* depth) {
  const uint64_t max_depth = 3 + draw(t, 0, 1) % 6;  // 3..8
  parent[0] = -1;
  depth[0] = 1;
  for (uint64_t j = 1; j < size; ++j) {
    uint64_t k = 0;
    for (uint64_t attempt = 0;; ++attempt) {
      k = draw(t, j, attempt) % j;
      if (depth[k] < max_depth) break;
    }
    parent[j] = int32_t(k);
    depth[j] = uint8_t(depth[k] + 1);
  }
}

}  // namespace

std::string robot_path(int j) {
  return j == 0 ? std::string() : robot_path(kRobotParent[j]) + "/" + kRobotName[j];
}

uint64_t robots_prims(uint64_t prims) {
  return std::max<uint64_t>(1, prims / kRobotPrims) * kRobotPrims;
}

SceneTree make_scene_tree(TreeKind kind, uint64_t prims) {
  SceneTree t;
  t.kind = kind;
  t.n = kind == TreeKind::Robots ? robots_prims(prims) : std::max<uint64_t>(prims, 1);
  t.per_tree = kind == TreeKind::Robots ? kRobotPrims : kRandomPerTree;
  t.trees = (t.n + t.per_tree - 1) / t.per_tree;
  t.parent.resize(t.n);
  std::vector<uint8_t> depth(t.n);
  std::vector<int32_t> local(t.per_tree);
  std::vector<uint8_t> local_depth(t.per_tree);
  for (uint64_t e = 0; e < t.trees; ++e) {
    const uint64_t base = t.root(e), size = t.tree_size(e);
    if (kind == TreeKind::Robots) {
      for (int j = 0; j < kRobotPrims; ++j) {
        local[size_t(j)] = kRobotParent[j];
        local_depth[size_t(j)] = uint8_t(j == 0 ? 1 : local_depth[size_t(kRobotParent[j])] + 1);
      }
    } else {
      random_tree_parents(e, size, local.data(), local_depth.data());
    }
    for (uint64_t j = 0; j < size; ++j) {
      t.parent[base + j] = local[j] < 0 ? -1 : int32_t(base + uint64_t(local[j]));
      depth[base + j] = local_depth[j];
    }
  }
  const uint8_t levels = *std::max_element(depth.begin(), depth.end());
  t.level_offsets.assign(size_t(levels) + 1, 0);
  for (uint64_t i = 0; i < t.n; ++i) ++t.level_offsets[depth[i]];
  for (size_t l = 1; l <= levels; ++l) t.level_offsets[l] += t.level_offsets[l - 1];
  std::vector<uint64_t> next(t.level_offsets.begin(), t.level_offsets.end() - 1);
  t.level_order.resize(t.n);
  for (uint64_t i = 0; i < t.n; ++i) t.level_order[next[depth[i] - 1]++] = uint32_t(i);
  return t;
}

void scene_local(uint64_t i, uint64_t version, double* m) {
  const uint64_t h = draw(i, version, 7);
  const double a = (double(h & 0xFFFF) / 65536.0 - 0.5) * 0.8;
  const double x = double((h >> 16) & 0xFFFF) / 65536.0 - 0.5;
  const double y = double((h >> 32) & 0xFFFF) / 65536.0 - 0.5;
  const double z = double(h >> 48) / 65536.0;
  std::memset(m, 0, 16 * sizeof(double));
  m[0] = std::cos(a);
  m[1] = std::sin(a);
  m[4] = -std::sin(a);
  m[5] = std::cos(a);
  m[10] = 1;
  m[12] = x;
  m[13] = y;
  m[14] = z;
  m[15] = 1;
}

namespace {

// The path of every prim of the tree, in generation order, `chunk` trees at a time:
// f(first prim, strings) for every chunk (robots and random trees below their range member).
template <class F>
void for_path_chunks(const SceneTree& t, const std::string& range_path, uint64_t chunk, F&& f) {
  std::vector<int32_t> local(t.per_tree);
  std::vector<uint8_t> depth(t.per_tree);
  std::vector<std::string> rel(t.per_tree);
  std::vector<std::string> names;
  for (uint64_t e0 = 0; e0 < t.trees; e0 += chunk) {
    names.clear();
    const uint64_t e1 = std::min(t.trees, e0 + chunk);
    for (uint64_t e = e0; e < e1; ++e) {
      const uint64_t size = t.tree_size(e);
      const std::string root = range_path + std::to_string(e);
      for (uint64_t j = 0; j < size; ++j) {
        const int32_t p = t.parent[t.root(e) + j];
        const uint64_t pj = p < 0 ? 0 : uint64_t(p) - t.root(e);
        if (j == 0) rel[0].clear();
        else
          rel[j] =
              rel[pj] + "/" +
              (t.kind == TreeKind::Robots ? std::string(kRobotName[j]) : "c" + std::to_string(j));
        names.push_back(root + rel[j]);
      }
    }
    f(t.root(e0), names);
  }
}

}  // namespace

// ---- a scene in a stage ----------------------------------------------------------------------
namespace {

// One tree's prims in a stage: locals written and sealed; computes, moves, checks. `dev`: the
// columns' device (null: the host), through whose calls the data goes up.
class SceneStage {
 public:
  SceneStage(kstage_stage_t stage, const SceneTree& tree, const SceneDeviceOps* dev)
      : stage_(stage), t_(tree), dev_(dev) {
    KP_CHECK(kstage_intern_token(stage_, KSTAGE_LOCAL_MATRIX, KSTAGE_NUL_TERMINATED, &local_));
    KP_CHECK(kstage_intern_token(stage_, KSTAGE_WORLD_MATRIX, KSTAGE_NUL_TERMINATED, &world_));
  }
  ~SceneStage() {
    if (all_) kstage_query_release(stage_, all_);
  }
  SceneStage(const SceneStage&) = delete;
  SceneStage& operator=(const SceneStage&) = delete;

  // Paths (the roots one range), then every local matrix written and sealed.
  void build() {
    const bool robots = t_.kind == TreeKind::Robots;
    const char* parent = robots ? "/World/envs" : "/World/trees";
    const char* prefix = robots ? "env_" : "t_";
    kstage_path_t first = 0;
    KP_CHECK(kstage_intern_path_range(stage_, parent, KSTAGE_NUL_TERMINATED, prefix,
                                      KSTAGE_NUL_TERMINATED, 0, t_.trees, &first));
    paths_.assign(t_.n, 0);
    std::vector<const char*> ptrs;
    std::vector<kstage_path_t> ids;
    for_path_chunks(
        t_, std::string(parent) + "/" + prefix, 4096,
        [&](uint64_t at, const std::vector<std::string>& names) {
          ptrs.clear();
          for (const std::string& s : names) ptrs.push_back(s.c_str());
          ids.resize(names.size());
          KP_CHECK(kstage_intern_paths(stage_, ptrs.data(), nullptr, ptrs.size(), ids.data()));
          std::copy(ids.begin(), ids.end(), paths_.begin() + long(at));
        });
    for (uint64_t e = 0; e < t_.trees; ++e)
      if (paths_[t_.root(e)] != first + e)
        throw std::runtime_error("a root is not its range member");
    KP_CHECK(kstage_query_paths(stage_, paths_.data(), paths_.size(), &all_));
    {
      std::vector<double> m(t_.n * 16);
      for (uint64_t i = 0; i < t_.n; ++i) scene_local(i, 0, &m[i * 16]);
      write_locals(all_, m.data(), t_.n);
    }
  }

  // A compute of `mode` at a new ordinal, waited for, released and sealed; the ordinal.
  uint64_t compute(kstage_transform_mode_t mode) {
    kstage_transform_desc_t d = kstage_transform_desc_init();
    d.mode = mode;
    const uint64_t o = ++ordinal_;
    kstage_op_t op = 0;
    const auto t0 = Clock::now();
    KP_CHECK(kstage_compute_world_transforms(stage_, &d, o, &op));
    const auto t1 = Clock::now();
    const kstage_status_t st = kstage_wait(stage_, op, KSTAGE_TIMEOUT_INFINITE);
    kstage_release_op(stage_, op);
    if (st != KSTAGE_OK) throw_kstage(st, "kstage_wait (world transforms)");
    const auto t2 = Clock::now();
    KP_CHECK(kstage_advance_write_floor(stage_, o, &world_, 1));
    const auto t3 = Clock::now();
    split_[0].push_back(std::chrono::duration<double>(t1 - t0).count());
    split_[1].push_back(std::chrono::duration<double>(t2 - t1).count());
    split_[2].push_back(std::chrono::duration<double>(t3 - t2).count());
    return o;
  }
  // Medians of the three parts of the computes so far (the first, which makes the structure,
  // left out when there are others), in µs: the compute call (on a host column it runs the
  // kernel before it returns), the wait, the seal.
  std::vector<std::pair<std::string, double>> split_us() const {
    static const char* const names[3] = {"call_us", "wait_us", "seal_us"};
    std::vector<std::pair<std::string, double>> out;
    for (int k = 0; k < 3; ++k) {
      std::vector<double> v(split_[k].begin() + (split_[k].size() > 1 ? 1 : 0), split_[k].end());
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      out.emplace_back(names[k], 1e6 * v[v.size() / 2]);
    }
    return out;
  }

  // Moves `count` roots drawn at random (new local matrices, written through a query of those
  // roots and sealed); returns the prims whose world matrices change (the moved trees).
  uint64_t move_roots(uint64_t count, std::mt19937_64& rng) {
    moved_.clear();
    while (moved_.size() < count) {
      const uint64_t e = rng() % t_.trees;
      if (std::find(moved_.begin(), moved_.end(), e) == moved_.end()) moved_.push_back(e);
    }
    std::sort(moved_.begin(), moved_.end());
    std::vector<kstage_path_t> roots;
    std::vector<double> m(moved_.size() * 16);
    uint64_t dirty = 0;
    for (size_t k = 0; k < moved_.size(); ++k) {
      const uint64_t r = t_.root(moved_[k]);
      roots.push_back(paths_[r]);
      scene_local(r, ++version_[r], &m[k * 16]);
      dirty += t_.tree_size(moved_[k]);
    }
    kstage_query_t q = 0;
    KP_CHECK(kstage_query_paths(stage_, roots.data(), roots.size(), &q));
    try {
      write_locals(q, m.data(), roots.size());
    } catch (...) {
      kstage_query_release(stage_, q);
      throw;
    }
    KP_CHECK(kstage_query_release(stage_, q));
    return dirty;
  }

  // The prims whose world rows changed at `ordinal` (a change-range read over every prim).
  uint64_t changed_at(uint64_t ordinal) {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.change_range = true;
    d.range_begin = d.range_end = ordinal;
    if (dev_) d.target_device = DLDevice{kDLCPU, 0};
    uint64_t seen = 0;
    read_groups(stage_, all_, world_, &d, [&](const kstage_read_group_t& g) {
      if (!g.is_delete) seen += g.prim_count;
    });
    return seen;
  }

  // Checks the world matrices of `sample` random prims, of the first and last tree and of the
  // trees moved last against the reference (the chain of locals multiplied from the root down,
  // as the serial loop does). "" or the first mismatch.
  std::string verify(uint64_t sample) {
    std::vector<uint64_t> prims;
    std::mt19937_64 rng(0x5CE7E);
    for (uint64_t k = 0; k < sample; ++k) prims.push_back(rng() % t_.n);
    for (uint64_t e : {uint64_t(0), t_.trees - 1})
      for (uint64_t j = 0; j < t_.tree_size(e); ++j) prims.push_back(t_.root(e) + j);
    for (uint64_t e : moved_)
      for (uint64_t j = 0; j < t_.tree_size(e); ++j) prims.push_back(t_.root(e) + j);
    std::sort(prims.begin(), prims.end());
    prims.erase(std::unique(prims.begin(), prims.end()), prims.end());
    std::unordered_map<kstage_path_t, uint64_t> index;
    std::vector<kstage_path_t> ids;
    for (uint64_t i : prims) {
      index.emplace(paths_[i], i);
      ids.push_back(paths_[i]);
    }
    kstage_query_t q = 0;
    KP_CHECK(kstage_query_paths(stage_, ids.data(), ids.size(), &q));
    kstage_read_desc_t d = kstage_read_desc_init();
    if (dev_) d.target_device = DLDevice{kDLCPU, 0};
    std::string bad;
    uint64_t seen = 0;
    try {
      read_groups(stage_, q, world_, &d, [&](const kstage_read_group_t& g) {
        if (!bad.empty() || g.is_delete) return;
        const DLTensor& tt = g.data.tensors[0];
        const double* base =
            reinterpret_cast<const double*>(static_cast<const char*>(tt.data) + tt.byte_offset);
        for (uint64_t k = 0; k < g.prim_count && bad.empty(); ++k) {
          const uint64_t row = g.data.index_map ? g.data.index_map[k] : k;
          const uint64_t i = index.at(g.prims[k]);
          double want[16];
          reference(i, want);
          for (int e = 0; e < 16; ++e) {
            const double got = base[row * 16 + uint64_t(e)];
            if (!(std::fabs(got - want[e]) <= 1e-12 * (1 + std::fabs(want[e])))) {
              bad = "prim " + std::to_string(i) + " element " + std::to_string(e) + ": world " +
                    std::to_string(got) + ", expected " + std::to_string(want[e]);
              break;
            }
          }
          ++seen;
        }
      });
    } catch (...) {
      kstage_query_release(stage_, q);
      throw;
    }
    KP_CHECK(kstage_query_release(stage_, q));
    if (bad.empty() && seen != prims.size())
      bad = "the world column holds " + std::to_string(seen) + " of " +
            std::to_string(prims.size()) + " sampled prims";
    return bad;
  }

  // The world matrix of prim i: its chain's locals from the root down.
  void reference(uint64_t i, double* out) const {
    uint64_t chain[64];
    int len = 0;
    for (int64_t p = int64_t(i); p >= 0; p = t_.parent[size_t(p)]) chain[len++] = uint64_t(p);
    double w[16], l[16], next[16];
    local_of(chain[len - 1], w);
    for (int k = len - 2; k >= 0; --k) {
      local_of(chain[k], l);
      scene_multiply(next, l, w);
      std::memcpy(w, next, sizeof w);
    }
    std::memcpy(out, w, sizeof w);
  }

 private:
  void local_of(uint64_t i, double* m) const {
    auto it = version_.find(i);
    scene_local(i, it == version_.end() ? 0 : it->second, m);
  }
  // Writes `count` matrices (host memory) as the local matrices of `q`'s prims, sealed.
  void write_locals(kstage_query_t q, const double* m, uint64_t count) {
    const size_t bytes = count * 16 * sizeof(double);
    void* data = const_cast<double*>(m);
    if (dev_) {
      data = dev_->alloc(bytes);
      dev_->upload(data, m, bytes);
    }
    int64_t shape[1] = {int64_t(count)};
    DLTensor t = make_tensor(data, DType::F64, 16, shape);
    if (dev_) t.device = dev_->residency;
    kstage_write_data_t w = kstage_write_data_init();
    w.tensors = &t;
    w.tensor_count = 1;
    w.semantic = KSTAGE_SEMANTIC_MATRIX;
    const uint64_t o = ++ordinal_;
    kstage_op_t op = 0;
    kstage_status_t st =
        kstage_write_attribute(stage_, q, local_, o, &w, KSTAGE_PRIM_MODE_UPSERT, &op);
    if (st == KSTAGE_OK) {
      st = kstage_wait(stage_, op, KSTAGE_TIMEOUT_INFINITE);
      kstage_release_op(stage_, op);
    }
    if (dev_) dev_->release(data);
    if (st != KSTAGE_OK) throw_kstage(st, "kstage_write_attribute (local matrices)");
    KP_CHECK(kstage_advance_write_floor(stage_, o, &local_, 1));
  }

  kstage_stage_t stage_;
  const SceneTree& t_;
  const SceneDeviceOps* dev_;
  kstage_token_t local_ = 0, world_ = 0;
  kstage_query_t all_ = 0;
  std::vector<kstage_path_t> paths_;
  std::unordered_map<uint64_t, uint64_t> version_;  // moved roots' versions
  std::vector<uint64_t> moved_;                     // trees moved last
  uint64_t ordinal_ = 0;
  std::vector<double> split_[3];  // per compute: call, wait, seal (seconds)
};

uint64_t moved_count(const SceneTree& t) {
  return std::max<uint64_t>(1, uint64_t(std::llround(kSceneMovedShare * double(t.trees))));
}

// ---- kstage workloads ------------------------------------------------------------------------
class TransformInstance final : public Instance {
 public:
  TransformInstance(Context& cx, const Shape& s, TreeKind kind, bool incremental)
      : cx_(cx), kind_(kind), incremental_(incremental), rows_(s.rows) {}

  void prepare() override {
    tree_ = make_scene_tree(kind_, rows_);
    scene_ = std::make_unique<SceneStage>(cx_.stage(), tree_, nullptr);
    scene_->build();
    if (incremental_) {
      scene_->compute(KSTAGE_TRANSFORM_FULL);  // the state an incremental compute starts from
      moved_ = moved_count(tree_);
    }
  }
  void before() override {
    if (!incremental_) return;
    const auto t0 = Clock::now();
    dirty_ = scene_->move_roots(moved_, rng_);
    move_s_.push_back(seconds_since(t0));
  }
  void run() override {
    const auto t0 = Clock::now();
    last_ = scene_->compute(incremental_ ? KSTAGE_TRANSFORM_INCREMENTAL : KSTAGE_TRANSFORM_FULL);
    if (first_s_ < 0) first_s_ = seconds_since(t0);
  }
  std::string verify() override {
    if (incremental_) {
      const uint64_t changed = scene_->changed_at(last_);
      if (changed != dirty_)
        return "the incremental compute wrote " + std::to_string(changed) +
               " world rows, expected the " + std::to_string(dirty_) + " prims of the moved trees";
    } else if (scene_->changed_at(last_) != tree_.n) {
      return "the full compute did not write every world row";
    }
    return scene_->verify(2000);
  }
  double payload_bytes() const override {
    return kSceneBytesPerPrim * double(incremental_ ? dirty_ : tree_.n);
  }
  double items() const override { return double(incremental_ ? dirty_ : tree_.n); }
  std::vector<std::pair<std::string, double>> extras() const override {
    std::vector<std::pair<std::string, double>> e{{"prims", double(tree_.n)},
                                                  {"trees", double(tree_.trees)},
                                                  {"levels", double(tree_.levels())},
                                                  {"first_compute_s", first_s_}};
    for (const auto& kv : scene_->split_us()) e.push_back(kv);
    if (incremental_) {
      std::vector<double> m = move_s_;
      std::sort(m.begin(), m.end());
      e.emplace_back("moved_roots", double(moved_));
      e.emplace_back("recomputed_prims", double(dirty_));
      if (!m.empty()) e.emplace_back("move_write_seal_us_untimed", 1e6 * m[m.size() / 2]);
    }
    return e;
  }

 private:
  Context& cx_;
  TreeKind kind_;
  bool incremental_;
  uint64_t rows_;
  SceneTree tree_;
  std::unique_ptr<SceneStage> scene_;
  std::mt19937_64 rng_{0x5EED0460};
  uint64_t moved_ = 0, dirty_ = 0, last_ = 0;
  double first_s_ = -1;
  std::vector<double> move_s_;
};

// ---- baselines: the user's loops -------------------------------------------------------------
class TransformLoopInstance final : public Instance {
 public:
  TransformLoopInstance(const Shape& s, TreeKind kind, int threads)
      : kind_(kind), rows_(s.rows), threads_(threads) {}
  void prepare() override {
    tree_ = make_scene_tree(kind_, rows_);
    const uint64_t n = tree_.n;
    local_ = HostBuf(n * 128);
    world_ = HostBuf(n * 128);
    double* l = local_.as<double>();
    for (uint64_t i = 0; i < n; ++i) scene_local(i, 0, l + i * 16);
    std::memset(world_.p, 0, n * 128);
  }
  void run() override {
    const double* __restrict l = local_.as<double>();
    double* __restrict w = world_.as<double>();
    const int32_t* parent = tree_.parent.data();
    if (threads_ <= 1) {
      const uint64_t n = tree_.n;
      for (uint64_t i = 0; i < n; ++i) {
        const int32_t p = parent[i];
        if (p < 0) std::memcpy(w + i * 16, l + i * 16, 128);
        else scene_multiply(w + i * 16, l + i * 16, w + uint64_t(p) * 16);
      }
      return;
    }
    const uint32_t* order = tree_.level_order.data();
    const int nt = threads_;
    (void)nt;
    for (size_t lv = 0; lv < tree_.levels(); ++lv) {
      const int64_t lo = int64_t(tree_.level_offsets[lv]),
                    hi = int64_t(tree_.level_offsets[lv + 1]);
#pragma omp parallel for schedule(static) num_threads(nt)
      for (int64_t k = lo; k < hi; ++k) {
        const uint64_t i = order[k];
        const int32_t p = parent[i];
        if (p < 0) std::memcpy(w + i * 16, l + i * 16, 128);
        else scene_multiply(w + i * 16, l + i * 16, w + uint64_t(p) * 16);
      }
    }
  }
  std::string verify() override {
    // The chain walk of SceneStage::reference, here on the loop's own locals.
    std::mt19937_64 rng(0x5CE7E);
    const double* l = local_.as<double>();
    const double* w = world_.as<double>();
    for (int k = 0; k < 2000; ++k) {
      const uint64_t i = rng() % tree_.n;
      uint64_t chain[64];
      int len = 0;
      for (int64_t p = int64_t(i); p >= 0; p = tree_.parent[size_t(p)]) chain[len++] = uint64_t(p);
      double acc[16], next[16];
      std::memcpy(acc, l + chain[len - 1] * 16, sizeof acc);
      for (int c = len - 2; c >= 0; --c) {
        scene_multiply(next, l + chain[c] * 16, acc);
        std::memcpy(acc, next, sizeof acc);
      }
      for (int e = 0; e < 16; ++e)
        if (!(std::fabs(w[i * 16 + uint64_t(e)] - acc[e]) <= 1e-12 * (1 + std::fabs(acc[e]))))
          return "the transform loop's world matrix of prim " + std::to_string(i) + " differs";
    }
    return "";
  }
  double payload_bytes() const override { return kSceneBytesPerPrim * double(tree_.n); }
  double items() const override { return double(tree_.n); }

 private:
  TreeKind kind_;
  uint64_t rows_;
  int threads_;
  SceneTree tree_;
  HostBuf local_, world_;
};

// ---- registration ----------------------------------------------------------------------------
std::vector<Shape> scene_shapes(const Options& o, TreeKind kind) {
  std::vector<uint64_t> rows;
  if (o.rows_explicit) rows = o.rows;
  else if (o.mode == Mode::Smoke) rows = {kind == TreeKind::Robots ? 1280u : 10000u};
  else if (kind == TreeKind::Robots) rows = {4096 * 20};
  else if (o.mode == Mode::Quick) rows = {1000000};
  else rows = {1000000, 10000000};
  std::vector<Shape> out;
  for (uint64_t r : rows)
    out.push_back(Shape{kind == TreeKind::Robots ? robots_prims(r) : r, DType::F64, 16});
  return out;
}

// Bytes of one scene stage and its case, per prim: measured (the process's resident memory
// right after the case, results.csv rss_mib) at 525 MB for the 1e6-prim random forest --
// the path dictionary and tables, the local column, the world column and the compute's next
// output, the per-slot structure -- so 560 B, which keeps the 1e7 forest (5.6 GB) under the
// default 6 GiB cap.
double scene_ws(const Shape& s) { return double(s.rows) * 560; }
double loop_ws(const Shape& s) { return double(s.rows) * (2 * 128 + 16); }

void reg_scene(TreeKind kind) {
  const std::string tree = tree_name(kind);
  const std::string params = kind == TreeKind::Robots
                                 ? "tree=robots(20 prims x 10 levels),f64x16"
                                 : "tree=random(100-prim trees, 3-8 levels),f64x16";
  for (bool incremental : {false, true}) {
    WorkloadDef d;
    d.name = (incremental ? "transform_incremental_1pct_" : "transform_full_") + tree;
    d.family = "scene";
    d.description = incremental
                        ? "INCREMENTAL world transforms after 1% of the roots moved (write + seal "
                          "untimed): compute + wait + seal"
                        : "FULL world transforms: kstage_compute_world_transforms + wait + seal";
    d.params = params;
    d.loop_key = incremental ? "" : "transform_" + tree;
    d.working_set = scene_ws;
    d.own_shapes = [kind](const Options& o) { return scene_shapes(o, kind); };
    d.make = [kind, incremental](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<TransformInstance>(cx, s, kind, incremental);
    };
    RegisterWorkload{std::move(d)};
  }
  RegisterBaseline{BaselineDef{"transform_" + tree, "serial_loop", Exec::Serial,
                               "for i in topological order: world[i] = local[i] . world[parent[i]] "
                               "(4x4 float64, parents precomputed)",
                               loop_ws, [kind](const Shape& s) -> std::unique_ptr<Instance> {
                                 return std::make_unique<TransformLoopInstance>(s, kind, 1);
                               }}};
#if defined(_OPENMP)
  RegisterBaseline{
      BaselineDef{"transform_" + tree, "omp_loop", Exec::Parallel,
                  "the transform loop, one omp parallel for per level (level lists precomputed)",
                  loop_ws, [kind](const Shape& s) -> std::unique_ptr<Instance> {
                    return std::make_unique<TransformLoopInstance>(
                        s, kind, std::max(2, Kokkos::DefaultHostExecutionSpace().concurrency()));
                  }}};
#endif
}

const bool registered = [] {
  reg_scene(TreeKind::Robots);
  reg_scene(TreeKind::Random);
  return true;
}();

}  // namespace

// ---- the device grids --------------------------------------------------------------------------
std::vector<std::pair<TreeKind, uint64_t>> scene_device_trees(const Options& o, bool emulated) {
  std::vector<std::pair<TreeKind, uint64_t>> out;
  if (o.rows_explicit) {
    for (uint64_t r : o.rows) out.emplace_back(TreeKind::Random, r);
    return out;
  }
  if (o.mode == Mode::Smoke) return {{TreeKind::Robots, 1280}, {TreeKind::Random, 10000}};
  out = {{TreeKind::Robots, 4096 * 20}, {TreeKind::Random, 1000000}};
  if (o.mode == Mode::Full && !emulated) out.emplace_back(TreeKind::Random, 10000000);
  return out;
}

std::vector<SceneDeviceRow> run_scene_device(const SceneDeviceOps& ops, const Options& o,
                                             bool emulated, int reps) {
  std::vector<SceneDeviceRow> rows;
  for (const auto& [kind, prims] : scene_device_trees(o, emulated)) {
    const SceneTree tree = make_scene_tree(kind, prims);
    const uint64_t n = tree.n;
    const std::string tname = tree_name(kind);
    const double bytes = kSceneBytesPerPrim * double(n);
    kstage_config_t config = kstage_config_init();
    config.residency = ops.residency;
    kstage_stage_t stage = 0;
    KP_CHECK(kstage_create(&config, &stage));
    struct Destroy {  // also when a call below throws
      kstage_stage_t s;
      ~Destroy() { kstage_destroy(s); }
    } destroy{stage};
    SceneStage scene(stage, tree, &ops);
    scene.build();
    scene.compute(KSTAGE_TRANSFORM_FULL);  // first: the structure is made
    const double t_full = median_seconds(reps, [&] { scene.compute(KSTAGE_TRANSFORM_FULL); });
    if (std::string bad = scene.verify(2000); !bad.empty())
      throw std::runtime_error("transform_full_" + tname + ": " + bad);
    // The device-to-device copy of the same bytes.
    double t_copy = 0;
    {
      void* src = ops.alloc(size_t(bytes));
      void* dst = ops.alloc(size_t(bytes));
      {
        std::vector<unsigned char> h(size_t(bytes), 0x5A);
        ops.upload(src, h.data(), h.size());
      }
      t_copy = median_seconds(reps, [&] { ops.copy(dst, src, size_t(bytes)); });
      ops.release(src);
      ops.release(dst);
    }
    // Incremental: 1% of the roots moved before each (untimed).
    std::mt19937_64 rng(0x5EED0461);
    const uint64_t moved = moved_count(tree);
    std::vector<double> t_inc;
    uint64_t dirty = 0, last = 0;
    for (int r = 0; r <= reps; ++r) {
      dirty = scene.move_roots(moved, rng);
      const auto t0 = Clock::now();
      last = scene.compute(KSTAGE_TRANSFORM_INCREMENTAL);
      if (r > 0) t_inc.push_back(seconds_since(t0));  // the first is a warm-up
    }
    std::sort(t_inc.begin(), t_inc.end());
    if (const uint64_t changed = scene.changed_at(last); changed != dirty)
      throw std::runtime_error("transform_incremental_1pct_" + tname + ": wrote " +
                               std::to_string(changed) + " world rows, expected " +
                               std::to_string(dirty));
    if (std::string bad = scene.verify(2000); !bad.empty())
      throw std::runtime_error("transform_incremental_1pct_" + tname + ": " + bad);
    const std::string copy_name = "copy_d2d_384B_" + tname;
    const std::string full_name = "transform_full_" + tname;
    rows.push_back({copy_name, n, t_copy, bytes, "", 0, ""});
    rows.push_back(
        {full_name, n, t_full, bytes, copy_name, 0.5, std::to_string(tree.levels()) + " levels"});
    // Same bytes as the full row: the ratio is full time / incremental time (>= 20: <= 5%).
    rows.push_back(
        {"transform_incremental_1pct_" + tname, n, t_inc[t_inc.size() / 2], bytes, full_name, 20,
         std::to_string(dirty) + " prims recomputed (" + std::to_string(moved) + " roots moved)"});
  }
  return rows;
}

}  // namespace kperf
