// SPDX-License-Identifier: Apache-2.0
// kstage_compute_world_transforms: the convention (world = local . parent_world, row-major,
// translation in elements 12-14), parents through gaps in the path tree, reset flags, results
// against an independent reference on random trees (shallow and wide, deep chains past the
// pointer-jumping threshold, float64 and float32), what INCREMENTAL recomputes (exactly the
// changed prims and their descendants, read back as the world column's change range), the
// stale-matrix case of a rebuilt stage, drift after a foreign world write, structure changes,
// and every error, each leaving the stage as it was.
#include "support.hpp"

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <set>

using namespace kstage_test;

namespace {

using Mat = std::array<double, 16>;

Mat identity() {
  Mat m{};
  m[0] = m[5] = m[10] = m[15] = 1;
  return m;
}
Mat translate(double x, double y, double z) {
  Mat m = identity();
  m[12] = x;
  m[13] = y;
  m[14] = z;
  return m;
}
// A rotation about z by `a` radians, then a translation (row vectors: v' = v . R . T).
Mat rigid(double a, double x, double y, double z) {
  Mat m = translate(x, y, z);
  m[0] = std::cos(a);
  m[1] = std::sin(a);
  m[4] = -std::sin(a);
  m[5] = std::cos(a);
  return m;
}
Mat mul(const Mat& a, const Mat& b) {
  Mat out{};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += a[4 * r + k] * b[4 * k + c];
      out[4 * r + c] = s;
    }
  return out;
}

struct Scene {
  Stage& s;
  kstage_token_t local, reset, world;
  explicit Scene(Stage& st)
      : s(st),
        local(st.token(KSTAGE_LOCAL_MATRIX)),
        reset(st.token(KSTAGE_RESET_XFORM_STACK)),
        world(st.token(KSTAGE_WORLD_MATRIX)) {}

  // Writes `mats` (one per path) as float64 x 16 MATRIX local matrices at `ordinal`.
  void write_local(const std::vector<kstage_path_t>& prims, const std::vector<Mat>& mats,
                   uint64_t ordinal) {
    std::vector<double> flat;
    for (const Mat& m : mats) flat.insert(flat.end(), m.begin(), m.end());
    int64_t shape[1] = {int64_t(mats.size())};
    DLTensor t = tensor(flat.data(), f64(16), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = KSTAGE_SEMANTIC_MATRIX;
    KS_OK(s.write(s.query(prims), local, ordinal, w));
  }
  void write_reset(const std::vector<kstage_path_t>& prims, const std::vector<uint8_t>& flags,
                   uint64_t ordinal) {
    std::vector<uint8_t> v = flags;
    int64_t shape[1] = {int64_t(v.size())};
    DLTensor t = tensor(v.data(), DLDataType{kDLBool, 8, 1}, 1, shape);
    kstage_write_data_t w = write_data(&t);
    KS_OK(s.write(s.query(prims), reset, ordinal, w));
  }
  // Computes (op waited for and released) at `ordinal`.
  void compute(uint64_t ordinal, kstage_transform_mode_t mode = KSTAGE_TRANSFORM_INCREMENTAL) {
    kstage_transform_desc_t d = kstage_transform_desc_init();
    d.mode = mode;
    kstage_op_t op = 0;
    KS_OK(kstage_compute_world_transforms(s.stage, &d, ordinal, &op));
    KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
    KS_OK(kstage_release_op(s.stage, op));
  }
  // Sealed world matrices of `prims`.
  std::map<kstage_path_t, Mat> worlds(const std::vector<kstage_path_t>& prims) {
    std::map<kstage_path_t, Mat> out;
    for (auto& [p, bytes] : s.values(s.query(prims), world)) {
      REQUIRE(bytes.size() == sizeof(Mat));
      Mat m;
      std::memcpy(m.data(), bytes.data(), sizeof m);
      out[p] = m;
    }
    return out;
  }
};

void require_near(const Mat& got, const Mat& want, double tolerance = 1e-9) {
  for (int e = 0; e < 16; ++e) {
    INFO("element " << e << ": got " << got[e] << ", want " << want[e]);
    REQUIRE(std::abs(got[e] - want[e]) <= tolerance * (1 + std::abs(want[e])));
  }
}

// The reference: from path strings alone. A prim's parent is its nearest ancestor path that
// holds a local matrix; world = local . parent's world, or local for a root or a reset prim.
struct Reference {
  std::map<std::string, Mat> local;
  std::set<std::string> reset;
  std::map<std::string, Mat> memo;
  static std::string up(const std::string& p) {
    if (p == "/") return "";
    const size_t slash = p.rfind('/');
    return slash == 0 ? "/" : p.substr(0, slash);
  }
  Mat world(const std::string& p) {
    if (auto it = memo.find(p); it != memo.end()) return it->second;
    const Mat& l = local.at(p);
    Mat w = l;
    if (!reset.count(p)) {
      for (std::string a = up(p); !a.empty(); a = up(a))
        if (local.count(a)) {
          w = mul(l, world(a));
          break;
        }
    }
    return memo[p] = w;
  }
};

// A random tree of `n` paths under "/r", each node's depth at most `max_depth`; about one
// path in five holds no local matrix (a gap the hierarchy passes through: either not a prim
// at all, or a prim holding something else).
struct RandomTree {
  std::vector<std::string> paths;  // every path, parents before children
  std::vector<char> has_local;
};
RandomTree random_tree(std::mt19937_64& rng, size_t n, size_t max_depth) {
  RandomTree t;
  std::vector<size_t> depth;
  t.paths.push_back("/r");
  depth.push_back(1);
  for (size_t i = 1; i < n; ++i) {
    size_t parent = rng() % t.paths.size();
    while (depth[parent] >= max_depth) parent = rng() % t.paths.size();
    t.paths.push_back(t.paths[parent] + "/c" + std::to_string(i));
    depth.push_back(depth[parent] + 1);
  }
  for (size_t i = 0; i < n; ++i) t.has_local.push_back(rng() % 5 != 0);
  return t;
}

// Writes a random tree's locals (and resets), computes, and checks every world matrix
// against the reference.
void check_random_tree(size_t n, size_t max_depth, uint64_t seed) {
  Stage s(host_execution());
  Scene sc(s);
  std::mt19937_64 rng(seed);
  RandomTree t = random_tree(rng, n, max_depth);
  Reference ref;
  std::vector<kstage_path_t> with_local, flagged, others;
  std::vector<Mat> mats;
  std::vector<uint8_t> flags;
  std::uniform_real_distribution<double> u(-1, 1);
  for (size_t i = 0; i < n; ++i) {
    const kstage_path_t p = s.path(t.paths[i]);
    if (!t.has_local[i]) {
      if (i % 2) others.push_back(p);  // a prim without a local matrix
      continue;
    }
    const Mat m = rigid(u(rng), u(rng), u(rng), u(rng));
    with_local.push_back(p);
    mats.push_back(m);
    ref.local[t.paths[i]] = m;
    if (rng() % 10 == 0) {
      flagged.push_back(p);
      flags.push_back(1);
      ref.reset.insert(t.paths[i]);
    } else if (rng() % 10 == 0) {
      flagged.push_back(p);
      flags.push_back(0);  // a false flag resets nothing
    }
  }
  sc.write_local(with_local, mats, 1);
  if (!flagged.empty()) sc.write_reset(flagged, flags, 1);
  if (!others.empty())
    KS_OK(
        try_write(s, s.query(others), s.token("mass"), 1, std::vector<float>(others.size(), 1.f)));
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  const auto got = sc.worlds(with_local);
  REQUIRE(got.size() == with_local.size());
  for (size_t i = 0; i < with_local.size(); ++i) {
    INFO("prim " << s.path_string(with_local[i]));
    require_near(got.at(with_local[i]), ref.world(s.path_string(with_local[i])));
  }
  // The prims without a local matrix have no world row.
  REQUIRE(sc.worlds(others).empty());
  // A few prims move (their subtrees are not runs of the written order): an incremental compute
  // writes exactly them and their descendants, and agrees with the reference.
  std::vector<kstage_path_t> moved;
  std::vector<Mat> moved_mats;
  for (size_t k = 0; k < 5; ++k) {
    const size_t i = size_t(rng() % with_local.size());
    if (std::find(moved.begin(), moved.end(), with_local[i]) != moved.end()) continue;
    moved.push_back(with_local[i]);
    moved_mats.push_back(rigid(u(rng), u(rng), u(rng), u(rng)));
    ref.local[s.path_string(with_local[i])] = moved_mats.back();
  }
  sc.write_local(moved, moved_mats, 3);
  s.seal(3);
  sc.compute(4);
  s.seal(4);
  ref.memo.clear();
  std::vector<kstage_path_t> expect_changed;
  for (kstage_path_t p : with_local) {
    const std::string name = s.path_string(p);
    for (kstage_path_t m : moved) {
      const std::string mover = s.path_string(m);
      if (name == mover || name.compare(0, mover.size() + 1, mover + "/") == 0) {
        expect_changed.push_back(p);
        break;
      }
    }
  }
  std::sort(expect_changed.begin(), expect_changed.end());
  REQUIRE(s.changed(s.query(with_local), sc.world, 4, 4) == expect_changed);
  const auto again = sc.worlds(with_local);
  for (kstage_path_t p : with_local) {
    INFO("prim " << s.path_string(p) << " after the move");
    require_near(again.at(p), ref.world(s.path_string(p)));
  }
}

}  // namespace

TEST_CASE("world = local . parent_world: the chain of the system kstage follows",
          "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  const kstage_path_t world_prim = s.path("/World"), env = s.path("/World/Env_1"),
                      tip = s.path("/World/Env_1/Arm/Tip");  // "/World/Env_1/Arm" is no prim
  sc.write_local({world_prim, env, tip},
                 {translate(10, 0, 0), translate(0, 100, 0), translate(0, 0, 7)}, 1);
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  auto w = sc.worlds({world_prim, env, tip});
  require_near(w.at(tip), translate(10, 100, 7));
  require_near(w.at(env), translate(10, 100, 0));
  REQUIRE(w.at(tip)[12] == 10);  // the translation sits in elements 12-14
  REQUIRE(w.at(tip)[13] == 100);
  REQUIRE(w.at(tip)[14] == 7);
  // The environment moves: the tip follows at the next compute, not before.
  sc.write_local({env}, {translate(0, 100, 40)}, 3);
  s.seal(3);
  REQUIRE(sc.worlds({tip}).at(tip)[14] == 7);  // reads never compute
  sc.compute(4);
  s.seal(4);
  require_near(sc.worlds({tip}).at(tip), translate(10, 100, 47));
  // Rotations compose in USD's order: a child's offset turns with its parent.
  sc.write_local({world_prim}, {rigid(M_PI / 2, 0, 0, 0)}, 5);
  s.seal(5);
  sc.compute(6);
  s.seal(6);
  require_near(sc.worlds({tip}).at(tip),
               mul(mul(translate(0, 0, 7), translate(0, 100, 40)), rigid(M_PI / 2, 0, 0, 0)));
  // (0, 100, 47) turned a quarter about z: (-100, 0, 47).
  require_near(sc.worlds({tip}).at(tip), rigid(M_PI / 2, -100, 0, 47), 1e-12);
}

TEST_CASE("random trees agree with a reference computed from path strings", "[world_transforms]") {
  SECTION("shallow and wide") { check_random_tree(2000, 6, 1); }
  SECTION("deeper than the level-pass threshold (pointer jumping)") {
    check_random_tree(600, 200, 2);
  }
  SECTION("a chain of 1,000") {
    Stage s(host_execution());
    Scene sc(s);
    std::vector<kstage_path_t> chain;
    std::vector<Mat> mats;
    std::string p;
    for (int i = 0; i < 1000; ++i) {
      p += "/n";
      chain.push_back(s.path(p));
      mats.push_back(translate(1, 0, 0));
    }
    sc.write_local(chain, mats, 1);
    s.seal(1);
    sc.compute(2);
    s.seal(2);
    const auto w = sc.worlds(chain);
    for (int i = 0; i < 1000; i += 111) require_near(w.at(chain[i]), translate(i + 1, 0, 0));
    require_near(w.at(chain.back()), translate(1000, 0, 0));
  }
}

TEST_CASE("float32 matrices compute into a float32 world column", "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  const kstage_path_t a = s.path("/a"), b = s.path("/a/b");
  std::vector<float> flat;
  for (const Mat& m : {translate(1, 2, 3), translate(10, 20, 30)})
    for (double v : m) flat.push_back(float(v));
  int64_t shape[1] = {2};
  DLTensor t = tensor(flat.data(), f32(16), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.semantic = KSTAGE_SEMANTIC_MATRIX;
  KS_OK(s.write(s.query({a, b}), sc.local, 1, w));
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  const auto got = s.values(s.query({b}), sc.world);
  REQUIRE(got.at(b).size() == 16 * sizeof(float));
  float m[16];
  std::memcpy(m, got.at(b).data(), sizeof m);
  REQUIRE(m[12] == 11.f);
  REQUIRE(m[13] == 22.f);
  REQUIRE(m[14] == 33.f);
  kstage_attribute_info_t info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_info(s.stage, sc.world, &info));
  REQUIRE(info.dtype.bits == 32);
  REQUIRE(info.dtype.lanes == 16);
  REQUIRE(info.semantic == KSTAGE_SEMANTIC_MATRIX);
}

TEST_CASE("reset flags make roots; gaps pass the parent through; an absent parent is none",
          "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  const kstage_path_t a = s.path("/a"), b = s.path("/a/b"), c = s.path("/a/b/c"),
                      d = s.path("/a/b/c/d"), lone = s.path("/x/y/lone");
  // /a/b is a prim without a local matrix: c's parent is a.
  KS_OK(try_write(s, s.query({b}), s.token("mass"), 1, {1.f}));
  sc.write_local({a, c, d, lone},
                 {translate(1, 0, 0), translate(0, 1, 0), translate(0, 0, 1), translate(5, 5, 5)},
                 1);
  sc.write_reset({c}, {1}, 1);
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  auto w = sc.worlds({a, b, c, d, lone});
  REQUIRE(w.count(b) == 0);                   // no local matrix: no world row
  require_near(w.at(c), translate(0, 1, 0));  // reset: world = local
  require_near(w.at(d), translate(0, 1, 1));  // below a reset prim
  require_near(w.at(lone), translate(5, 5, 5));
  // The flag cleared: c and d recomputed below a, and nothing else.
  sc.write_reset({c}, {0}, 3);
  s.seal(3);
  sc.compute(4);
  s.seal(4);
  w = sc.worlds({a, c, d});
  require_near(w.at(c), translate(1, 1, 0));
  require_near(w.at(d), translate(1, 1, 1));
  REQUIRE(s.changed(s.query({a, c, d, lone}), sc.world, 4, 4) == std::vector<kstage_path_t>{c, d});
  // The flag's row deleted: the same as false (nothing to recompute), then true again.
  KS_OK(s.remove(s.query({c}), {sc.reset}, 5));
  s.seal(5);
  sc.compute(6);
  s.seal(6);
  require_near(sc.worlds({d}).at(d), translate(1, 1, 1));
  sc.write_reset({c}, {1}, 7);
  s.seal(7);
  sc.compute(8);
  s.seal(8);
  require_near(sc.worlds({d}).at(d), translate(0, 1, 1));
}

TEST_CASE("incremental: exactly the changed prims and their descendants", "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  // Four environments, each a chain root -> link -> tip.
  std::vector<kstage_path_t> all, roots, tips;
  std::vector<Mat> mats;
  for (int e = 0; e < 4; ++e) {
    const std::string env = "/World/envs/env_" + std::to_string(e);
    for (const std::string& p : {env, env + "/link", env + "/link/tip"}) {
      all.push_back(s.path(p));
      mats.push_back(translate(e, 1, 0));
    }
    roots.push_back(all[all.size() - 3]);
    tips.push_back(all.back());
  }
  sc.write_local(all, mats, 1);
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  REQUIRE(s.changed(s.query(all), sc.world, 2, 2).size() == all.size());
  // Nothing changed: nothing written (and no world row changes).
  sc.compute(3);
  s.seal(3);
  REQUIRE(s.changed(s.query(all), sc.world, 3, 3).empty());
  // Environment 2's root moves: its three prims, nothing else.
  sc.write_local({roots[2]}, {translate(100, 0, 0)}, 4);
  s.seal(4);
  sc.compute(5);
  s.seal(5);
  std::vector<kstage_path_t> expect(all.begin() + 6, all.begin() + 9);
  REQUIRE(s.changed(s.query(all), sc.world, 5, 5) == expect);
  require_near(sc.worlds({tips[2]}).at(tips[2]), translate(104, 2, 0));
  require_near(sc.worlds({tips[1]}).at(tips[1]), translate(3, 3, 0));
  // A tip moves: only the tip. Two writes sealed between computes: both counted.
  sc.write_local({tips[0]}, {translate(0, 0, 9)}, 6);
  sc.write_local({tips[3]}, {translate(0, 0, 9)}, 7);
  s.seal(7);
  sc.compute(8);
  s.seal(8);
  REQUIRE(s.changed(s.query(all), sc.world, 8, 8) == std::vector<kstage_path_t>{tips[0], tips[3]});
  // FULL writes every prim, with the same values.
  const auto before = sc.worlds(all);
  sc.compute(9, KSTAGE_TRANSFORM_FULL);
  s.seal(9);
  REQUIRE(s.changed(s.query(all), sc.world, 9, 9).size() == all.size());
  const auto after = sc.worlds(all);
  for (kstage_path_t p : all) require_near(after.at(p), before.at(p), 0);
}

TEST_CASE("a stage rebuilt from scratch gets every world matrix (Isaac Lab #7472)",
          "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  std::vector<kstage_path_t> links;
  std::vector<Mat> mats;
  std::string p = "/World/robot";
  for (int i = 0; i < 38; ++i) {
    links.push_back(s.path(p));
    mats.push_back(translate(0, 0, 1));
    p += "/link" + std::to_string(i);
  }
  sc.write_local(links, mats, 1);
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  // The stage is torn down (every prim deleted) and built again with the same, unchanged
  // local matrices: a compute that visited only "dirty" prims would keep identity (or
  // nothing) for the static links.
  KS_OK(s.remove(s.query(links), {}, 3));
  s.seal(3);
  REQUIRE(sc.worlds(links).empty());
  sc.write_local(links, mats, 4);
  s.seal(4);
  sc.compute(5);
  s.seal(5);
  const auto w = sc.worlds(links);
  REQUIRE(w.size() == links.size());
  for (size_t i = 0; i < links.size(); ++i) require_near(w.at(links[i]), translate(0, 0, i + 1.0));
}

TEST_CASE("a foreign write of the world column is undone by the next compute (no drift)",
          "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  const kstage_path_t a = s.path("/a"), b = s.path("/a/b"), c = s.path("/c");
  sc.write_local({a, b, c}, {translate(1, 0, 0), translate(0, 1, 0), translate(0, 0, 1)}, 1);
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  // Someone writes a's world matrix directly (Isaac Lab #5516's "set world pose").
  {
    Mat m = translate(50, 50, 50);
    int64_t shape[1] = {1};
    DLTensor t = tensor(m.data(), f64(16), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = KSTAGE_SEMANTIC_MATRIX;
    KS_OK(s.write(s.query({a}), sc.world, 3, w));
  }
  s.seal(3);
  sc.compute(4);
  s.seal(4);
  REQUIRE(s.changed(s.query({a, b, c}), sc.world, 4, 4) == std::vector<kstage_path_t>{a, b});
  require_near(sc.worlds({a}).at(a), translate(1, 0, 0));
  require_near(sc.worlds({b}).at(b), translate(1, 1, 0));
  // A world row deleted by someone else comes back; a world row of a prim without a local
  // matrix goes.
  KS_OK(s.remove(s.query({c}), {sc.world}, 5));
  {
    Mat m = identity();
    int64_t shape[1] = {1};
    DLTensor t = tensor(m.data(), f64(16), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = KSTAGE_SEMANTIC_MATRIX;
    const kstage_path_t stray = s.path("/stray");
    KS_OK(s.write(s.query({stray}), sc.world, 5, w));
    s.seal(5);
    sc.compute(6);
    s.seal(6);
    REQUIRE(sc.worlds({stray}).empty());
  }
  require_near(sc.worlds({c}).at(c), translate(0, 0, 1));
}

TEST_CASE("structure changes: a new ancestor, a deleted local, computes not yet sealed",
          "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  const kstage_path_t a = s.path("/a"), b = s.path("/a/b"), c = s.path("/a/b/c"),
                      other = s.path("/z");
  sc.write_local({a, c, other}, {translate(1, 0, 0), translate(0, 0, 1), translate(9, 9, 9)}, 1);
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  require_near(sc.worlds({c}).at(c), translate(1, 0, 1));
  // b gains a local matrix: c has a new parent, and is recomputed with b.
  sc.write_local({b}, {translate(0, 10, 0)}, 3);
  s.seal(3);
  sc.compute(4);
  s.seal(4);
  REQUIRE(s.changed(s.query({a, b, c, other}), sc.world, 4, 4) == std::vector<kstage_path_t>{b, c});
  require_near(sc.worlds({c}).at(c), translate(1, 10, 1));
  // b loses it again: its world row goes at the compute's ordinal, c follows a.
  KS_OK(s.remove(s.query({b}), {sc.local}, 5));
  s.seal(5);
  sc.compute(6);
  REQUIRE(sc.worlds({b}).count(b) == 1);  // not sealed yet
  s.seal(6);
  REQUIRE(sc.worlds({b}).empty());
  require_near(sc.worlds({c}).at(c), translate(1, 0, 1));
  // Two computes before a seal: the second cannot trust the first's unsealed output, and
  // computes everything (correct either way).
  sc.write_local({a}, {translate(2, 0, 0)}, 7);
  s.seal(7);
  sc.compute(8);
  sc.compute(9);
  s.seal(9);
  require_near(sc.worlds({c}).at(c), translate(2, 0, 1));
  REQUIRE(s.changed(s.query({a, c, other}), sc.world, 9, 9).size() == 3);
}

TEST_CASE("world matrices under path ranges: 4,096 robots, one moved", "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  const size_t envs = 4096;
  const kstage_path_t first = s.range("/World/envs", "env_", 0, envs);
  std::vector<kstage_path_t> roots(envs), bodies(envs);
  std::vector<Mat> root_mats(envs), body_mats(envs, translate(0, 0, 2));
  for (size_t e = 0; e < envs; ++e) {
    roots[e] = first + e;
    root_mats[e] = translate(double(e), 0, 0);
    bodies[e] = s.path("/World/envs/env_" + std::to_string(e) + "/Robot/body");
  }
  sc.write_local(roots, root_mats, 2);
  sc.write_local(bodies, body_mats, 2);
  s.seal(2);
  sc.compute(3);
  s.seal(3);
  require_near(sc.worlds({bodies[4095]}).at(bodies[4095]), translate(4095, 0, 2));
  sc.write_local({roots[17]}, {translate(-1, -1, -1)}, 4);
  s.seal(4);
  sc.compute(5);
  s.seal(5);
  std::vector<kstage_path_t> everything = roots;
  everything.insert(everything.end(), bodies.begin(), bodies.end());
  REQUIRE(s.changed(s.query(everything), sc.world, 5, 5) ==
          std::vector<kstage_path_t>{roots[17], bodies[17]});
  require_near(sc.worlds({bodies[17]}).at(bodies[17]), translate(-1, -1, 1));
}

TEST_CASE("errors name the input and leave the stage as it was", "[world_transforms]") {
  Stage s(host_execution());
  Scene sc(s);
  const kstage_path_t a = s.path("/a"), b = s.path("/a/b");
  kstage_transform_desc_t d = kstage_transform_desc_init();
  kstage_op_t op = 0;
  // No local column yet.
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 1, &op), KSTAGE_NOT_FOUND, "omni:xform");
  sc.write_local({a, b}, {translate(1, 0, 0), translate(0, 1, 0)}, 1);
  s.seal(1);
  sc.compute(2);
  s.seal(2);
  kstage_query_t q = s.query({a, b});
  const kstage_token_t bad_local = s.token("bad_local"), bad_reset = s.token("bad_reset"),
                       bad_world = s.token("bad_world");
  KS_OK(try_write(s, q, bad_local, 3, {1.f, 2.f}));
  KS_OK(try_write(s, q, bad_reset, 3, {1.f, 2.f}));
  KS_OK(try_write(s, q, bad_world, 3, {1.f, 2.f}));
  s.seal(3);
  const std::string before = s.fingerprint(q, {sc.local, sc.world, bad_local, bad_reset});

  d = kstage_transform_desc_init();
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 2, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "write floor 3");
  d.local = bad_local;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "'bad_local' is fixed-size float32");
  d = kstage_transform_desc_init();
  d.reset = bad_reset;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "reset column 'bad_reset'");
  d = kstage_transform_desc_init();
  d.world = bad_world;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "world matrix column 'bad_world'");
  d = kstage_transform_desc_init();
  d.world = sc.local;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "desc.local and desc.world");
  d = kstage_transform_desc_init();
  d.reset = sc.world;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "desc.reset and desc.world");
  d = kstage_transform_desc_init();
  d.local = 987654;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "desc.local = 987654");
  d = kstage_transform_desc_init();
  d.mode = 7;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "desc.mode 7");
  d = kstage_transform_desc_init();
  d.struct_size = 16;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "struct_size");
  KS_FAILS(kstage_compute_world_transforms(s.stage, nullptr, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "desc is NULL");
  d = kstage_transform_desc_init();
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 4, nullptr), KSTAGE_INVALID_ARGUMENT, "op");
  KS_FAILS(kstage_compute_world_transforms(s.stage + 1000, &d, 4, &op), KSTAGE_INVALID_HANDLE, "");
  // A newer caller's struct with a byte this library does not know.
  struct Newer {
    kstage_transform_desc_t d;
    uint64_t extra;
  } newer{kstage_transform_desc_init(), 1};
  newer.d.struct_size = sizeof(Newer);
  KS_FAILS(kstage_compute_world_transforms(s.stage, &newer.d, 4, &op), KSTAGE_NOT_SUPPORTED,
           "byte 32");
  REQUIRE(s.fingerprint(q, {sc.local, sc.world, bad_local, bad_reset}) == before);
  // And the next compute is still incremental (nothing changed: nothing written).
  sc.compute(4);
  s.seal(4);
  REQUIRE(s.changed(q, sc.world, 4, 4).empty());
}

#if KSTAGE_TEST_EMULATED_DEVICE
TEST_CASE("a device compute moves no data through the host", "[world_transforms]") {
  if (!kOnDevice) SKIP("host columns: no transfer to count (the emulated runs count them)");
  Stage s(host_execution());
  Scene sc(s);
  std::vector<kstage_path_t> prims;
  std::vector<Mat> mats;
  std::string p;
  for (int i = 0; i < 64; ++i) {
    p += "/n";
    prims.push_back(s.path(p));
    mats.push_back(translate(1, 0, 0));
  }
  sc.write_local(prims, mats, 1);
  s.seal(1);
  uint64_t h2d0 = 0, d2h0 = 0, h2d1 = 0, d2h1 = 0;
  KS_OK(kstage_transfer_counts(&h2d0, &d2h0, nullptr));
  sc.compute(2);
  s.seal(2);
  sc.write_local({prims[10]}, {translate(2, 0, 0)}, 3);
  s.seal(3);
  KS_OK(kstage_transfer_counts(&h2d1, &d2h1, nullptr));
  const uint64_t write_h2d = h2d1 - h2d0;  // the local write's own upload
  sc.compute(4);
  s.seal(4);
  uint64_t h2d2 = 0, d2h2 = 0;
  KS_OK(kstage_transfer_counts(&h2d2, &d2h2, nullptr));
  REQUIRE(d2h2 == d2h0);
  REQUIRE(h2d2 - h2d1 == 0);
  REQUIRE(write_h2d == 1);
  require_near(sc.worlds({prims.back()}).at(prims.back()), translate(65, 0, 0));
}

TEST_CASE("reset and world columns on another device than the local one are refused",
          "[world_transforms]") {
  if (kOnDevice) SKIP("the host run puts the local matrices on the host, the others on a device");
  Stage s(host_execution());
  Scene sc(s);
  const kstage_path_t a = s.path("/a"), b = s.path("/a/b");
  sc.write_local({a, b}, {translate(1, 0, 0), translate(0, 1, 0)}, 1);
  const DLDevice device{DLDeviceType(KSTAGE_EMULATED_DEVICE_TYPE), 0};
  // The reset flags and a world column made on emulated device 0.
  std::vector<uint8_t> flags = {0, 1};
  int64_t shape[1] = {2};
  DLTensor t = tensor(flags.data(), DLDataType{kDLBool, 8, 1}, 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.residency = device;
  KS_OK(s.write(s.query({a, b}), sc.reset, 1, w));
  Mat m[2] = {identity(), identity()};
  DLTensor tm = tensor(m, f64(16), 1, shape);
  kstage_write_data_t wm = write_data(&tm);
  wm.semantic = KSTAGE_SEMANTIC_MATRIX;
  wm.residency = device;
  const kstage_token_t elsewhere = s.token("world_elsewhere");
  KS_OK(s.write(s.query({a, b}), elsewhere, 1, wm));
  s.seal(1);
  kstage_query_t q = s.query({a, b});
  const std::string before = s.fingerprint(q, {sc.local, sc.reset, elsewhere, sc.world});
  kstage_transform_desc_t d = kstage_transform_desc_init();
  kstage_op_t op = 0;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 2, &op), KSTAGE_NOT_SUPPORTED,
           "the reset column 'omni:resetXformStack' lives on ");
  d.reset = s.token("no_reset_column");
  d.world = elsewhere;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &d, 2, &op), KSTAGE_INVALID_ARGUMENT,
           "they must live on one device");
  REQUIRE(s.fingerprint(q, {sc.local, sc.reset, elsewhere, sc.world}) == before);
  // Without them the compute runs (on the host, where the local matrices are).
  d.world = 0;
  KS_OK(kstage_compute_world_transforms(s.stage, &d, 2, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  s.seal(2);
  require_near(sc.worlds({b}).at(b), translate(1, 1, 0));
}
#endif
