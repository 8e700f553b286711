// SPDX-License-Identifier: Apache-2.0
// Clone (kstage_clone, kstage_clone_range): a subtree copied to N targets as one op -- every
// column kind (fixed, array, prim type, schemas), paths between prims that hold nothing,
// PATH_ID and RELATIONSHIP_PATH_ID values and CONNECTION_PATH_ID paths rebased inside the
// subtree and kept outside it (ASSET_PATH_ID never), path-range targets, the
// sealed state at the call, change ranges and the hierarchy of the copies, and every refusal
// with the stage unchanged after it. Runs on the host and (as "emulated clone@N") with every
// column on the emulated device.
#include "support.hpp"

#include <cstring>

using namespace kstage_test;

namespace {

using Paths = std::vector<kstage_path_t>;

kstage_status_t write_f32_rows(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                               std::vector<std::vector<float>> rows) {
  std::vector<int64_t> shapes(rows.size());
  std::vector<DLTensor> t;
  for (size_t i = 0; i < rows.size(); ++i) {
    shapes[i] = int64_t(rows[i].size());
    t.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), f32(), 1, &shapes[i]));
  }
  return s.write(q, attr, ordinal, write_data(t.data(), t.size(), true));
}

std::vector<uint64_t> as_u64(const std::vector<unsigned char>& bytes) {
  std::vector<uint64_t> v(bytes.size() / sizeof(uint64_t));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

kstage_status_t clone(Stage& s, kstage_path_t source, const Paths& targets, uint64_t ordinal) {
  kstage_op_t op = 0;
  const kstage_status_t st =
      kstage_clone(s.stage, source, targets.data(), targets.size(), ordinal, &op);
  if (st == KSTAGE_OK) finish(s, op);
  return st;
}

bool exists(Stage& s, kstage_path_t p) {
  kstage_filter_t f{};
  const Paths all = s.filtered(f);
  return std::find(all.begin(), all.end(), p) != all.end();
}

// An environment below /World/envs/env_0 (a member of the range env_{0..n-1}):
//   env_0                  prim type Xform, "pos" (f32 x 3)
//   env_0/Robot            nothing: a path between prims
//   env_0/Robot/torso      prim type Body, schemas {RigidBody, Mass}, "pos", "xf" (f64 x 16),
//                          "verts" (a ragged f32 row), "joint" (PATH_ID -> leg, in the subtree)
//   env_0/Robot/leg        prim type Body, schemas {} (an empty row), "pos", "verts" (empty),
//                          "rel" (PATH_ID array: torso, /Ground, env_0/Robot, env_0)
// and /Ground ("pos"), outside it.
struct Env {
  Stage& s;
  kstage_path_t first = 0, env0 = 0, robot = 0, torso = 0, leg = 0, ground = 0;
  kstage_token_t type, schemas, pos, xf, verts, joint, rel;
  kstage_token_t xform, body, rigid, mass;
  Env(Stage& st, uint64_t envs) : s(st) {
    first = s.range("/World/envs", "env_", 0, envs);
    env0 = first;
    REQUIRE(s.path_string(env0) == "/World/envs/env_0");
    robot = s.path("/World/envs/env_0/Robot");
    torso = s.path("/World/envs/env_0/Robot/torso");
    leg = s.path("/World/envs/env_0/Robot/leg");
    ground = s.path("/Ground");
    type = s.token(KSTAGE_PRIM_TYPE);
    schemas = s.token(KSTAGE_APPLIED_SCHEMAS);
    pos = s.token("pos");
    xf = s.token("xf");
    verts = s.token("verts");
    joint = s.token("joint");
    rel = s.token("rel");
    xform = s.token("Xform");
    body = s.token("Body");
    rigid = s.token("RigidBody");
    mass = s.token("Mass");

    kstage_query_t q = s.query({env0, torso, leg, ground});
    s.write_f32(q, pos, 1, {0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 3);
    KS_OK(kstage_query_release(s.stage, q));
    q = s.query({env0, torso, leg});
    KS_OK(write_ids(s, q, type, 1, {xform, body, body}, KSTAGE_SEMANTIC_TOKEN_ID));
    KS_OK(kstage_query_release(s.stage, q));
    q = s.query({torso, leg});
    KS_OK(write_id_rows(s, q, schemas, 1, {{rigid, mass}, {}}, KSTAGE_SEMANTIC_TOKEN_ID));
    KS_OK(write_f32_rows(s, q, verts, 1, {{1.5f, 2.5f, 3.5f}, {}}));
    KS_OK(kstage_query_release(s.stage, q));
    q = s.query({torso});
    std::vector<double> m(16);
    for (int k = 0; k < 16; ++k) m[size_t(k)] = 100.0 + k;
    int64_t shape[1] = {1};
    DLTensor t = tensor(m.data(), f64(16), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = KSTAGE_SEMANTIC_MATRIX;
    KS_OK(s.write(q, xf, 1, w));
    KS_OK(write_ids(s, q, joint, 1, {leg}, KSTAGE_SEMANTIC_PATH_ID));
    KS_OK(kstage_query_release(s.stage, q));
    q = s.query({leg});
    KS_OK(write_id_rows(s, q, rel, 1, {{torso, ground, robot, env0}}, KSTAGE_SEMANTIC_PATH_ID));
    KS_OK(kstage_query_release(s.stage, q));
    s.seal(1);
  }
  kstage_path_t member(uint64_t i) const { return first + i; }
  // The copy of env_0/<below> for target `t` ("" below: the target itself).
  kstage_path_t copy(kstage_path_t t, const std::string& below) {
    return below.empty() ? t : s.path(s.path_string(t) + below);
  }
  std::vector<kstage_token_t> attrs() const { return {type, schemas, pos, xf, verts, joint, rel}; }
  // Every value of every attribute of `prims`, per attribute, with prims renamed by `rename`
  // (copy id -> source id) so that a copy compares equal to its source.
  std::string values_of(const Paths& prims) {
    std::string out;
    kstage_query_t q = s.query(prims);
    for (kstage_token_t a : attrs()) {
      out += "attr " + std::to_string(a) + ":";
      for (auto& [p, bytes] : s.values(q, a)) {
        const size_t i = size_t(std::find(prims.begin(), prims.end(), p) - prims.begin());
        out += " " + std::to_string(i) + "=";
        for (unsigned char b : bytes) out += std::to_string(b) + ",";
      }
      out += ";";
    }
    KS_OK(kstage_query_release(s.stage, q));
    return out;
  }
};

}  // namespace

TEST_CASE(
    "clone copies every attribute of the subtree to each target, paths between prims "
    "holding nothing",
    "[clone]") {
  Stage s;
  Env e(s, 4);
  const Paths targets = {e.member(1), e.member(3)};
  const Paths source_prims = {e.env0, e.torso, e.leg};
  const std::string before = e.values_of(source_prims);
  REQUIRE(clone(s, e.env0, targets, 2) == KSTAGE_OK);
  // Not visible before the seal.
  CHECK_FALSE(exists(s, e.member(1)));
  s.seal(2);
  for (kstage_path_t t : targets) {
    const Paths copies = {t, e.copy(t, "/Robot/torso"), e.copy(t, "/Robot/leg")};
    CHECK(s.path_string(copies[1]) == s.path_string(t) + "/Robot/torso");
    for (kstage_path_t c : copies) CHECK(exists(s, c));
    // /Robot holds nothing in the source: it holds nothing in the copy.
    CHECK_FALSE(exists(s, e.copy(t, "/Robot")));
    // Values: identical but for the PATH_ID columns, rebased (checked below).
    kstage_query_t q = s.query(copies);
    for (kstage_token_t a : {e.type, e.schemas, e.pos, e.xf, e.verts}) {
      kstage_query_t sq = s.query(source_prims);
      auto src = s.values(sq, a);
      auto dst = s.values(q, a);
      REQUIRE(src.size() == dst.size());
      for (size_t k = 0; k < 3; ++k) {
        CHECK(src.count(source_prims[k]) == dst.count(copies[k]));
        if (src.count(source_prims[k])) CHECK(src[source_prims[k]] == dst[copies[k]]);
      }
      KS_OK(kstage_query_release(s.stage, sq));
    }
    KS_OK(kstage_query_release(s.stage, q));
  }
  // The source is as it was; the member between stays untouched.
  CHECK(e.values_of(source_prims) == before);
  CHECK_FALSE(exists(s, e.member(2)));
}

TEST_CASE("clone rebases PATH_ID values inside the subtree and keeps the others", "[clone]") {
  Stage s;
  Env e(s, 2);
  const kstage_path_t t = e.member(1);
  REQUIRE(clone(s, e.env0, {t}, 2) == KSTAGE_OK);
  s.seal(2);
  const kstage_path_t torso = e.copy(t, "/Robot/torso"), leg = e.copy(t, "/Robot/leg");
  const kstage_path_t robot = e.copy(t, "/Robot");
  kstage_query_t q = s.query({torso, leg});
  auto joint = s.values(q, e.joint);
  REQUIRE(joint.count(torso) == 1);
  CHECK(as_u64(joint[torso]) == std::vector<uint64_t>{leg});  // inside: the copy's leg
  auto rel = s.values(q, e.rel);
  REQUIRE(rel.count(leg) == 1);
  // torso -> the copy's; /Ground (outside) kept; Robot (a path holding nothing) -> the copy's
  // Robot; env_0 (the source) -> the target.
  CHECK(as_u64(rel[leg]) == std::vector<uint64_t>{torso, e.ground, robot, t});
  KS_OK(kstage_query_release(s.stage, q));
  // The source's own values are unchanged.
  q = s.query({e.torso, e.leg});
  CHECK(as_u64(s.values(q, e.joint)[e.torso]) == std::vector<uint64_t>{e.leg});
  CHECK(as_u64(s.values(q, e.rel)[e.leg]) ==
        std::vector<uint64_t>{e.torso, e.ground, e.robot, e.env0});
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE(
    "clone rebases RELATIONSHIP_PATH_ID words and CONNECTION_PATH_ID paths, keeps their tokens "
    "and ASSET_PATH_ID values",
    "[clone][semantic]") {
  Stage s;
  Env e(s, 2);
  const kstage_token_t relarr = s.token("relarr"), relone = s.token("relone"),
                       conn = s.token("conn"), asset = s.token("asset");
  // uint64 x 2 rows (an array column, a tensor per row) with `semantic`.
  auto write_pairs = [&](kstage_query_t q, kstage_token_t attr, kstage_semantic_t semantic,
                         std::vector<std::vector<uint64_t>> rows) {
    std::vector<int64_t> shapes(rows.size());
    std::vector<DLTensor> t;
    for (size_t i = 0; i < rows.size(); ++i) {
      shapes[i] = int64_t(rows[i].size() / 2);
      t.push_back(tensor(rows[i].data(), u64(2), 1, &shapes[i]));
    }
    kstage_write_data_t w = write_data(t.data(), t.size(), true);
    w.semantic = semantic;
    return s.write(q, attr, 2, w);
  };
  kstage_query_t q = s.query({e.torso, e.leg});
  // Relationships: an array row per prim (inside, outside, the source, none), and a fixed one.
  KS_OK(write_id_rows(s, q, relarr, 2, {{e.leg, e.ground, e.env0, 0}, {e.robot}},
                      KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID));
  KS_OK(write_ids(s, q, relone, 2, {e.leg, e.ground}, KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID));
  // Connections (path, token): rows of 1 and 3 pairs; the tokens are numbers that are also
  // path ids of the subtree, and are kept all the same.
  KS_OK(write_pairs(q, conn, KSTAGE_SEMANTIC_CONNECTION_PATH_ID,
                    {{e.leg, e.xf}, {e.torso, e.torso, e.ground, e.leg, e.env0, e.env0}}));
  // Asset paths are token ids, never rebased, even where they equal a subtree path's id.
  std::vector<uint64_t> assets = {e.torso, e.leg, e.env0, 0};
  int64_t shape[1] = {2};
  DLTensor at = tensor(assets.data(), u64(2), 1, shape);
  kstage_write_data_t aw = write_data(&at);
  aw.semantic = KSTAGE_SEMANTIC_ASSET_PATH_ID;
  KS_OK(s.write(q, asset, 2, aw));
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(2);

  const kstage_path_t t = e.member(1);
  REQUIRE(clone(s, e.env0, {t}, 3) == KSTAGE_OK);
  s.seal(3);
  const kstage_path_t torso = e.copy(t, "/Robot/torso"), leg = e.copy(t, "/Robot/leg");
  const kstage_path_t robot = e.copy(t, "/Robot");
  q = s.query({torso, leg});
  auto ra = s.values(q, relarr);
  CHECK(as_u64(ra[torso]) == std::vector<uint64_t>{leg, e.ground, t, 0});
  CHECK(as_u64(ra[leg]) == std::vector<uint64_t>{robot});
  auto r1 = s.values(q, relone);
  CHECK(as_u64(r1[torso]) == std::vector<uint64_t>{leg});
  CHECK(as_u64(r1[leg]) == std::vector<uint64_t>{e.ground});
  auto c = s.values(q, conn);
  CHECK(as_u64(c[torso]) == std::vector<uint64_t>{leg, e.xf});
  CHECK(as_u64(c[leg]) == std::vector<uint64_t>{torso, e.torso, e.ground, e.leg, t, e.env0});
  auto a = s.values(q, asset);
  CHECK(as_u64(a[torso]) == std::vector<uint64_t>{e.torso, e.leg});
  CHECK(as_u64(a[leg]) == std::vector<uint64_t>{e.env0, 0});
  for (kstage_token_t attr : {relarr, relone, conn, asset}) {
    auto groups = s.read(q, {attr});
    REQUIRE(groups.size() == 1);
    kstage_semantic_t want = attr == conn    ? KSTAGE_SEMANTIC_CONNECTION_PATH_ID
                             : attr == asset ? KSTAGE_SEMANTIC_ASSET_PATH_ID
                                             : KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID;
    CHECK(groups[0].semantic == want);
  }
  KS_OK(kstage_query_release(s.stage, q));
  // The source's values are unchanged.
  q = s.query({e.torso, e.leg});
  CHECK(as_u64(s.values(q, conn)[e.leg]) ==
        std::vector<uint64_t>{e.torso, e.torso, e.ground, e.leg, e.env0, e.env0});
  CHECK(as_u64(s.values(q, relarr)[e.torso]) == std::vector<uint64_t>{e.leg, e.ground, e.env0, 0});
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("clone to path-range members: kstage_clone_range, hierarchy and change ranges",
          "[clone]") {
  Stage s;
  const uint64_t n = 64;
  Env e(s, n);
  kstage_op_t op = 0;
  // Members 1 .. n-1: every member but the source.
  KS_OK(kstage_clone_range(s.stage, e.env0, e.first, 1, 0, 2, &op));
  finish(s, op);
  s.seal(2);
  // Every copy exists; the hierarchy sees them like written prims.
  kstage_query_t all = s.range_query(e.first);
  CHECK(s.changed(all, e.pos, 2, 2).size() == n - 1);  // the targets, not the source
  const auto pos = s.floats(all, e.pos);
  REQUIRE(pos.size() == n);
  for (uint64_t i = 1; i < n; ++i) CHECK(pos.at(e.member(i)) == std::vector<float>{0, 0, 0});
  KS_OK(kstage_query_release(s.stage, all));

  const kstage_path_t t = e.member(37);
  const kstage_path_t torso = e.copy(t, "/Robot/torso"), leg = e.copy(t, "/Robot/leg");
  // Robot holds nothing: the target is the parent; the target's child is the copied torso's.
  CHECK(s.related(torso, KSTAGE_RELATION_PARENT) == Paths{t});
  CHECK(s.related(t, KSTAGE_RELATION_CHILDREN) ==
        Paths{std::min(torso, leg), std::max(torso, leg)});
  // Change ranges of a copied column: exactly the copies, at the clone's ordinal.
  kstage_query_t q = s.query({e.torso, torso, leg, e.leg});
  CHECK(s.changed(q, e.xf, 2, 2) == Paths{torso});
  CHECK(s.changed(q, e.verts, 2, 2) == Paths{std::min(torso, leg), std::max(torso, leg)});
  KS_OK(kstage_query_release(s.stage, q));
  q = s.query({e.torso, e.leg});
  CHECK(s.changed(q, e.verts, 1, 1).size() == 2);  // the source's, written at 1 (not again)
  CHECK(s.changed(q, e.verts, 2, 2).empty());
  KS_OK(kstage_query_release(s.stage, q));
  // A part of the range: members [start, start + count).
  Stage s2;
  Env e2(s2, 16);
  KS_OK(kstage_clone_range(s2.stage, e2.env0, e2.first, 4, 3, 2, &op));
  finish(s2, op);
  s2.seal(2);
  for (uint64_t i = 0; i < 16; ++i)
    CHECK(exists(s2, e2.member(i)) == (i == 0 || (i >= 4 && i < 7)));
}

TEST_CASE("clone copies the latest sealed state at the call", "[clone]") {
  Stage s;
  Env e(s, 3);
  kstage_query_t q = s.query({e.torso});
  // Pending at 2 (not sealed) when the clone at 3 is made: not copied.
  s.write_f32(q, e.pos, 2, {9, 9, 9}, 3);
  REQUIRE(clone(s, e.env0, {e.member(1)}, 3) == KSTAGE_OK);
  // Sealed after the call, before the clone's seal: not copied either.
  s.seal(2);
  s.write_f32(q, e.pos, 3, {7, 7, 7}, 3);
  s.seal(3);
  KS_OK(kstage_query_release(s.stage, q));
  const kstage_path_t torso = e.copy(e.member(1), "/Robot/torso");
  q = s.query({e.torso, torso});
  const auto pos = s.floats(q, e.pos);
  CHECK(pos.at(torso) == std::vector<float>{1, 2, 3});
  CHECK(pos.at(e.torso) == std::vector<float>{7, 7, 7});
  KS_OK(kstage_query_release(s.stage, q));
  // A clone of the clone: the copy is an ordinary prim.
  REQUIRE(clone(s, e.member(1), {e.member(2)}, 4) == KSTAGE_OK);
  s.seal(4);
  q = s.query({e.copy(e.member(2), "/Robot/torso")});
  CHECK(s.floats(q, e.pos).begin()->second == std::vector<float>{1, 2, 3});
  KS_OK(kstage_query_release(s.stage, q));
  // The copies can be deleted like written prims.
  q = s.query({torso});
  KS_OK(s.remove(q, {}, 5));
  s.seal(5);
  CHECK_FALSE(exists(s, torso));
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("clone refusals name the input and leave the stage unchanged", "[clone]") {
  Stage s;
  Env e(s, 8);
  const kstage_path_t outside = s.path("/Elsewhere/x");
  const kstage_path_t nested = s.path("/World/envs/env_2/deeper");
  kstage_query_t all = s.range_query(e.first);
  const std::vector<kstage_token_t> attrs = e.attrs();
  // An existing target and an existing copy below another target.
  kstage_query_t q = s.query({e.member(5)});
  s.write_f32(q, e.pos, 2, {5, 5, 5}, 3);
  KS_OK(kstage_query_release(s.stage, q));
  const kstage_path_t taken = s.path("/World/envs/env_6/Robot/leg");
  q = s.query({taken});
  s.write_f32(q, e.pos, 2, {6, 6, 6}, 3);
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(2);
  q = s.query({e.env0, e.torso, e.leg, e.member(5), taken, e.ground});
  const std::string before = s.fingerprint(q, attrs) + s.fingerprint(all, attrs);
  auto unchanged = [&] { CHECK(s.fingerprint(q, attrs) + s.fingerprint(all, attrs) == before); };
  kstage_op_t op = 0;
  const kstage_path_t one = e.member(1);

  KS_FAILS(kstage_clone(s.stage, e.member(7), &one, 1, 3, &op), KSTAGE_NOT_FOUND,
           "env_7' does not exist");
  KS_FAILS(kstage_clone(s.stage, 999999, &one, 1, 3, &op), KSTAGE_INVALID_ARGUMENT,
           "source 999999 is not a path");
  KS_FAILS(kstage_clone(s.stage, e.env0, &one, 0, 3, &op), KSTAGE_INVALID_ARGUMENT, "n = 0");
  KS_FAILS(kstage_clone(s.stage, e.env0, nullptr, 1, 3, &op), KSTAGE_INVALID_ARGUMENT, "targets");
  KS_FAILS(kstage_clone(s.stage, e.env0, &one, 1, 2, nullptr), KSTAGE_INVALID_ARGUMENT, "op");
  Paths bad = {e.member(1), 424242};
  KS_FAILS(kstage_clone(s.stage, e.env0, bad.data(), 2, 3, &op), KSTAGE_INVALID_ARGUMENT,
           "targets[1] (424242) is not a path");
  bad = {e.env0};
  KS_FAILS(kstage_clone(s.stage, e.env0, bad.data(), 1, 3, &op), KSTAGE_INVALID_ARGUMENT,
           "targets[0] is the source");
  bad = {e.member(1), s.path("/World/envs/env_0/Robot/copy")};
  KS_FAILS(kstage_clone(s.stage, e.env0, bad.data(), 2, 3, &op), KSTAGE_INVALID_ARGUMENT,
           "targets[1] ('/World/envs/env_0/Robot/copy') lies below the source");
  bad = {e.member(1), e.member(3), e.member(1)};
  KS_FAILS(kstage_clone(s.stage, e.env0, bad.data(), 3, 3, &op), KSTAGE_INVALID_ARGUMENT,
           "targets[0] and targets[2] are both '/World/envs/env_1'");
  bad = {nested, e.member(2)};
  KS_FAILS(kstage_clone(s.stage, e.env0, bad.data(), 2, 3, &op), KSTAGE_INVALID_ARGUMENT,
           "targets[0] ('/World/envs/env_2/deeper') lies below targets[1]");
  bad = {e.member(1), e.member(5)};
  KS_FAILS(kstage_clone(s.stage, e.env0, bad.data(), 2, 3, &op), KSTAGE_ALREADY_EXISTS,
           "targets[1] '/World/envs/env_5' already exists");
  bad = {outside, e.member(6)};
  KS_FAILS(kstage_clone(s.stage, e.env0, bad.data(), 2, 3, &op), KSTAGE_ALREADY_EXISTS,
           "'/World/envs/env_6/Robot/leg' (the copy of '/World/envs/env_0/Robot/leg' for "
           "targets[1]) already exists");
  KS_FAILS(kstage_clone(s.stage, e.env0, &one, 1, 2, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "not above the write floor 2");
  // Range forms.
  KS_FAILS(kstage_clone_range(s.stage, e.env0, e.first + 1, 0, 0, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "not the first path of a path range");
  KS_FAILS(kstage_clone_range(s.stage, e.env0, e.first, 4, 5, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "reaches beyond");
  KS_FAILS(kstage_clone_range(s.stage, e.env0, e.first, 0, 3, 4, &op), KSTAGE_INVALID_ARGUMENT,
           "targets[0] is the source");
  KS_FAILS(kstage_clone_range(s.stage, e.env0, e.first, 4, 2, 4, &op), KSTAGE_ALREADY_EXISTS,
           "targets[1] '/World/envs/env_5' already exists");
  unchanged();
  // The floor of one attribute the subtree holds.
  s.seal(4, {e.rel});
  const std::string sealed = s.fingerprint(q, attrs) + s.fingerprint(all, attrs);
  KS_FAILS(kstage_clone(s.stage, e.env0, &one, 1, 3, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "write floor 4 of attribute 'rel'");
  CHECK(s.fingerprint(q, attrs) + s.fingerprint(all, attrs) == sealed);
  for (uint64_t i : {1, 2, 3, 4, 7}) CHECK_FALSE(exists(s, e.member(i)));
  // ... and the same clone above every floor goes through.
  REQUIRE(clone(s, e.env0, {one}, 5) == KSTAGE_OK);
  s.seal(5);
  CHECK(exists(s, one));
  KS_OK(kstage_query_release(s.stage, q));
  KS_OK(kstage_query_release(s.stage, all));
}

TEST_CASE("clone refusals before any floor moves leave the fingerprint identical", "[clone]") {
  Stage s;
  Env e(s, 4);
  kstage_query_t q = s.query({e.env0, e.torso, e.leg, e.ground, e.member(1), e.member(2)});
  const std::vector<kstage_token_t> attrs = e.attrs();
  const std::string before = s.fingerprint(q, attrs);
  kstage_op_t op = 0;
  Paths t = {e.member(1), e.member(1)};
  KS_FAILS(kstage_clone(s.stage, e.env0, t.data(), 2, 2, &op), KSTAGE_INVALID_ARGUMENT, "both");
  CHECK(s.fingerprint(q, attrs) == before);
  t = {e.member(1), e.member(2)};
  KS_FAILS(kstage_clone(s.stage, e.env0, t.data(), 2, 1, &op), KSTAGE_WRITE_FLOOR_VIOLATION,
           "write floor");
  CHECK(s.fingerprint(q, attrs) == before);
  // A write submitted before, at a lower ordinal, creates a target: refused as for INSERT.
  kstage_query_t w = s.query({e.member(2)});
  s.write_f32(w, e.pos, 2, {1, 1, 1}, 3);
  KS_FAILS(kstage_clone(s.stage, e.env0, t.data(), 2, 3, &op), KSTAGE_ALREADY_EXISTS,
           "targets[1] '/World/envs/env_2' already exists at ordinal 3");
  KS_OK(kstage_query_release(s.stage, w));
  CHECK(s.fingerprint(q, attrs) == before);  // (the pending write is not sealed)
  KS_OK(kstage_query_release(s.stage, q));
}

// kstage_path_range_definition of `first`: "parent/prefix{begin..}" and the range's count.
std::string range_definition(Stage& s, kstage_path_t first) {
  const char *parent = nullptr, *prefix = nullptr;
  size_t np = 0, nx = 0;
  uint64_t begin = 0;
  KS_OK(kstage_path_range_definition(s.stage, first, &parent, &np, &prefix, &nx, &begin));
  return std::string(parent, np) + "/" + std::string(prefix, nx) + "{" + std::to_string(begin) +
         "..}";
}

TEST_CASE("clone copies a path range inside the subtree as a range below each target",
          "[clone][range]") {
  Stage s;
  // /Cloud, members p3 and p5 of /Cloud/pts/p{10..17} (p3 = number 13), a child of one member,
  // and a PATH_ID column naming a member, the member's child and a path outside.
  const kstage_path_t root = s.path("/Cloud");
  const kstage_path_t first = s.range("/Cloud/pts", "p", 10, 8);
  const kstage_path_t p3 = first + 3, p5 = first + 5;
  const kstage_path_t tip = s.path("/Cloud/pts/p13/tip");
  const kstage_path_t ground = s.path("/Ground");
  const kstage_token_t m = s.token("m"), links = s.token("links");
  kstage_query_t q = s.query({root, p3, p5, tip});
  s.write_f32(q, m, 1, {1, 2, 3, 4});
  KS_OK(write_id_rows(s, q, links, 1, {{p3, tip, ground}, {p5}, {}, {root}},
                      KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID));
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(1);

  // Two explicit targets, one of which already has the same range (paths, no prims).
  const kstage_path_t a = s.path("/A"), b = s.path("/B");
  const kstage_path_t b_first = s.range("/B/pts", "p", 10, 8);
  REQUIRE(clone(s, root, {a, b}, 2) == KSTAGE_OK);
  s.seal(2);
  const kstage_path_t a3 = s.path("/A/pts/p13"), a5 = s.path("/A/pts/p15");
  const kstage_path_t a_tip = s.path("/A/pts/p13/tip");
  const kstage_path_t b3 = s.path("/B/pts/p13"), b_tip = s.path("/B/pts/p13/tip");
  // /A's copies are a range: consecutive members, the source's definition below /A.
  const kstage_path_t a_first = a3 - 3;
  CHECK(a5 == a_first + 5);
  CHECK(range_definition(s, a_first) == "/A/pts/p{10..}");
  kstage_path_t member = 0;
  KS_OK(kstage_path_range_member(s.stage, a_first, 7, &member));
  CHECK(s.path_string(member) == "/A/pts/p17");
  // /B kept its range: the copies are its members.
  CHECK(b3 == b_first + 3);
  q = s.query({a, a3, a5, a_tip, b, b3, b_first + 5, b_tip});
  const auto v = s.floats(q, m);
  REQUIRE(v.size() == 8);
  CHECK(v.at(a) == std::vector<float>{1});
  CHECK(v.at(a3) == std::vector<float>{2});
  CHECK(v.at(a5) == std::vector<float>{3});
  CHECK(v.at(a_tip) == std::vector<float>{4});
  CHECK(v.at(b_tip) == std::vector<float>{4});
  // Rebased: the member, the member's child and the root to the target's; /Ground kept.
  const auto l = s.values(q, links);
  CHECK(as_u64(l.at(a)) == std::vector<uint64_t>{a3, a_tip, ground});
  CHECK(as_u64(l.at(a3)) == std::vector<uint64_t>{a5});
  CHECK(as_u64(l.at(a_tip)) == std::vector<uint64_t>{a});
  CHECK(as_u64(l.at(b)) == std::vector<uint64_t>{b3, b_tip, ground});
  CHECK(as_u64(l.at(b_first + 5)).empty());
  KS_OK(kstage_query_release(s.stage, q));
  // The hierarchy: the members are children of the copy of /Cloud/pts (a path holding nothing,
  // so of the target), the tip a child of its member.
  CHECK(s.related(a, KSTAGE_RELATION_CHILDREN) == Paths{a3, a5});
  CHECK(s.related(a_tip, KSTAGE_RELATION_PARENT) == Paths{a3});
  CHECK_FALSE(exists(s, a_first));  // a member that held nothing holds nothing
  // Change ranges: exactly the copies at the clone's ordinal.
  q = s.range_query(a_first);
  CHECK(s.changed(q, m, 2, 2) == Paths{a3, a5});
  KS_OK(kstage_query_release(s.stage, q));

  // To 100 members of a range of targets, and a clone of a copy.
  const kstage_path_t envs = s.range("/envs", "env_", 0, 100);
  kstage_op_t op = 0;
  KS_OK(kstage_clone_range(s.stage, root, envs, 0, 0, 3, &op));
  finish(s, op);
  REQUIRE(clone(s, a, {s.path("/A2")}, 3) == KSTAGE_OK);
  s.seal(3);
  const kstage_path_t e99 = s.path("/envs/env_99/pts/p15");
  CHECK(range_definition(s, e99 - 5) == "/envs/env_99/pts/p{10..}");
  const kstage_path_t a2_tip = s.path("/A2/pts/p13/tip");
  q = s.query({e99, a2_tip});
  const auto w = s.floats(q, m);
  CHECK(w.at(e99) == std::vector<float>{3});
  CHECK(w.at(a2_tip) == std::vector<float>{4});
  CHECK(as_u64(s.values(q, links).at(a2_tip)) == std::vector<uint64_t>{s.path("/A2")});
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("a clone whose range copy would collide with a target's paths is refused",
          "[clone][range]") {
  Stage s;
  const kstage_path_t root = s.path("/Grid");
  const kstage_path_t cells = s.range("/Grid", "c", 0, 4);  // right below the source
  const kstage_path_t first = s.range("/Grid/pts", "p", 0, 8);
  const kstage_token_t m = s.token("m");
  kstage_query_t q = s.query({root, cells, cells + 1, first + 2});
  s.write_f32(q, m, 1, {1, 2, 3, 4});
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(1);
  const std::vector<kstage_token_t> attrs{m};
  kstage_filter_t f{};
  kstage_query_t all = 0;
  KS_OK(kstage_query_filter(s.stage, &f, &all));
  const std::string before = s.fingerprint(all, attrs);
  KS_OK(kstage_query_release(s.stage, all));
  auto unchanged = [&] {
    kstage_query_t now = 0;
    KS_OK(kstage_query_filter(s.stage, &f, &now));
    CHECK(s.fingerprint(now, attrs) == before);
    KS_OK(kstage_query_release(s.stage, now));
  };
  kstage_op_t op = 0;
  auto refused = [&](kstage_path_t target, const std::string& message) {
    KS_FAILS(kstage_clone(s.stage, root, &target, 1, 2, &op), KSTAGE_ALREADY_EXISTS, message);
    CHECK_FALSE(exists(s, target));
    unchanged();
  };
  // A target with an explicit child named like a member the copy holds no prim for (c3: only
  // c0 and c1 are copied, but the range is): refused at the call.
  const kstage_path_t t1 = s.path("/T1");
  s.path("/T1/c3");
  refused(t1,
          "the copy of the path range '/Grid/c0' ... for '/T1' cannot be made under '/T1': its "
          "member '/T1/c3' was interned before");
  // Deeper: below an existing copy of the range's parent, another range whose names overlap.
  const kstage_path_t t2 = s.path("/T2");
  s.range("/T2/pts", "p", 5, 10);
  refused(t2,
          "for '/T2' cannot be made under '/T2/pts': its names could be those of the range "
          "'/T2/pts/p[5..14]' interned before");
  // The same range made before, one of whose members is a prim the copy would create.
  const kstage_path_t t3 = s.path("/T3");
  const kstage_path_t t3_first = s.range("/T3/pts", "p", 0, 8);
  q = s.query({t3_first + 2});
  s.write_f32(q, m, 2, {9});
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(2);
  KS_FAILS(kstage_clone(s.stage, root, &t3, 1, 3, &op), KSTAGE_ALREADY_EXISTS,
           "'/T3/pts/p2' (the copy of '/Grid/pts/p2' for targets[0]) already exists at ordinal 3");
  CHECK_FALSE(exists(s, t3));
  // With a target that can take it, in the same list: still all or nothing.
  const kstage_path_t ok = s.path("/OK");
  const Paths both{ok, t1};
  KS_FAILS(kstage_clone(s.stage, root, both.data(), 2, 3, &op), KSTAGE_ALREADY_EXISTS,
           "cannot be made under '/T1'");
  CHECK_FALSE(exists(s, ok));
  REQUIRE(clone(s, root, {ok}, 3) == KSTAGE_OK);
  s.seal(3);
  CHECK(exists(s, s.path("/OK/c1")));
  CHECK(exists(s, s.path("/OK/pts/p2")));
}

TEST_CASE("clone of a one-prim source to 10,000 range members", "[clone]") {
  Stage s;
  const uint64_t n = 10000;
  const kstage_path_t first = s.range("/envs", "e", 0, n + 1);
  const kstage_token_t x = s.token("x"), ids = s.token("ids");
  kstage_query_t q = s.query({first});
  s.write_f32(q, x, 1, {1, 2, 3, 4}, 4);
  KS_OK(write_ids(s, q, ids, 1, {first}, KSTAGE_SEMANTIC_PATH_ID));  // names itself
  const kstage_token_t none = s.token("none");
  KS_OK(write_id_rows(s, q, none, 1, {{}}, KSTAGE_SEMANTIC_PATH_ID));  // an empty relationship
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(1);
  kstage_op_t op = 0;
  KS_OK(kstage_clone_range(s.stage, first, first, 1, 0, 2, &op));
  finish(s, op);
  s.seal(2);
  q = s.range_query(first);
  const auto v = s.floats(q, x);
  REQUIRE(v.size() == n + 1);
  for (const auto& [p, f] : v) CHECK(f == std::vector<float>{1, 2, 3, 4});
  // Each copy's PATH_ID names itself (the source named the source).
  const auto self = s.values(q, ids);
  REQUIRE(self.size() == n + 1);
  size_t right = 0;
  for (const auto& [p, bytes] : self) right += as_u64(bytes) == std::vector<uint64_t>{p};
  CHECK(right == n + 1);
  const auto empty = s.values(q, none);
  REQUIRE(empty.size() == n + 1);
  for (const auto& [p, bytes] : empty) CHECK(bytes.empty());
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("clone copies device columns in device memory", "[clone]") {
  if (!kOnDevice) SKIP("the columns are on the host in this run");
  Stage s;
  const kstage_path_t src = s.path("/src"), a = s.path("/src/a"), b = s.path("/src/a/b");
  const kstage_token_t pos = s.token("pos"), verts = s.token("verts");
  kstage_query_t q = s.query({src, a, b});
  s.write_f32(q, pos, 1, {1, 2, 3, 4, 5, 6}, 2);
  KS_OK(write_f32_rows(s, q, verts, 1, {{1}, {}, {2, 3, 4}}));
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(1);
  const Paths targets = s.paths("/copy", 100);
  uint64_t h2d0 = 0, d2h0 = 0, h2d1 = 0, d2h1 = 0;
  KS_OK(kstage_transfer_counts(&h2d0, &d2h0, nullptr));
  REQUIRE(clone(s, src, targets, 2) == KSTAGE_OK);
  s.seal(2);
  KS_OK(kstage_transfer_counts(&h2d1, &d2h1, nullptr));
  CHECK(d2h1 == d2h0);  // no value came to the host (index uploads go the other way)
  q = s.query({targets[99], s.path("/copy_99/a"), s.path("/copy_99/a/b")});
  const auto p = s.floats(q, pos);
  CHECK(p.at(targets[99]) == std::vector<float>{1, 2});
  CHECK(p.at(s.path("/copy_99/a/b")) == std::vector<float>{5, 6});
  const auto v = s.floats(q, verts);
  CHECK(v.at(s.path("/copy_99/a")).empty());
  CHECK(v.at(s.path("/copy_99/a/b")) == std::vector<float>{2, 3, 4});
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("a clone's seal repeats a device column's source rows with no index upload", "[clone]") {
  // Copy t of source row k is produced row t * S + k: the seal reads row i % S of the source's
  // rows (a periodic gather), with no index of the produced rows made on the host and uploaded.
  if (!kOnDevice) SKIP("the columns are on the host in this run");
  Stage s;
  const kstage_path_t src = s.path("/src"), a = s.path("/src/a"), b = s.path("/src/a/b");
  const kstage_token_t pos = s.token("pos");
  kstage_query_t q = s.query({src, a, b});
  s.write_f32(q, pos, 1, {1, 2, 3, 4, 5, 6}, 2);
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(1);
  const Paths targets = s.paths("/copy", 100);
  REQUIRE(clone(s, src, targets, 2) == KSTAGE_OK);
  uint64_t uploads0 = 0, uploads1 = 0;
  KS_OK(kstage_transfer_counts(nullptr, nullptr, &uploads0));
  s.seal(2);
  KS_OK(kstage_transfer_counts(nullptr, nullptr, &uploads1));
  CHECK(uploads1 == uploads0);
  for (const size_t i : {0, 57, 99}) {
    const kstage_path_t t = targets[i];
    const std::string root = "/copy_" + std::to_string(i);
    q = s.query({t, s.path(root + "/a"), s.path(root + "/a/b")});
    const auto p = s.floats(q, pos);
    CHECK(p.at(t) == std::vector<float>{1, 2});
    CHECK(p.at(s.path(root + "/a")) == std::vector<float>{3, 4});
    CHECK(p.at(s.path(root + "/a/b")) == std::vector<float>{5, 6});
    KS_OK(kstage_query_release(s.stage, q));
  }
}

TEST_CASE("a clone's copies with digit-ended children keep path ranges honest", "[clone]") {
  Stage s;
  const kstage_path_t src = s.path("/src"), link = s.path("/src/link1");
  kstage_query_t q = s.query({src, link});
  s.write_f32(q, s.token("m"), 1, {1, 2});
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(1);
  const kstage_path_t target = s.path("/dst");
  REQUIRE(clone(s, src, {target}, 2) == KSTAGE_OK);
  // /dst/link1 was made by the clone: a range /dst/link{0..4} would name it again.
  kstage_path_t first = 0;
  KS_FAILS(kstage_intern_path_range(s.stage, "/dst", KSTAGE_NUL_TERMINATED, "link",
                                    KSTAGE_NUL_TERMINATED, 0, 5, &first),
           KSTAGE_ALREADY_EXISTS, "its member '/dst/link1' was interned before");
  KS_OK(kstage_intern_path_range(s.stage, "/dst", KSTAGE_NUL_TERMINATED, "link",
                                 KSTAGE_NUL_TERMINATED, 2, 5, &first));
}

TEST_CASE("writes that grow a column's rows: an affine run extended, new prims appended",
          "[clone]") {
  Stage s;
  const kstage_path_t first = s.range("/p", "p", 0, 30);
  const kstage_token_t x = s.token("x");
  auto members = [&](uint64_t from, uint64_t n) {
    std::vector<kstage_path_t> v;
    for (uint64_t i = 0; i < n; ++i) v.push_back(first + from + i);
    return v;
  };
  auto write = [&](const std::vector<kstage_path_t>& prims, uint64_t ordinal, float base) {
    std::vector<float> v;
    for (size_t i = 0; i < prims.size(); ++i) v.push_back(base + float(i));
    kstage_query_t q = s.query(prims);
    s.write_f32(q, x, ordinal, v);
    KS_OK(kstage_query_release(s.stage, q));
    s.seal(ordinal);
  };
  write(members(0, 10), 1, 0);    // the column's first write: an affine run
  write(members(10, 10), 2, 10);  // right after it: the run grows
  write(members(25, 5), 3, 25);   // not right after: appended rows
  write(members(5, 10), 4, 105);  // an update across both
  kstage_query_t all = s.range_query(first);
  const auto v = s.floats(all, x);
  REQUIRE(v.size() == 25);
  for (uint64_t i = 0; i < 30; ++i) {
    if (i >= 20 && i < 25) {
      CHECK(v.count(first + i) == 0);
      continue;
    }
    const float want = i >= 5 && i < 15 ? float(100 + i) : float(i);
    CHECK(v.at(first + i) == std::vector<float>{want});
  }
  CHECK(s.changed(all, x, 4, 4) == members(5, 10));
  CHECK(s.changed(all, x, 3, 4).size() == 15);
  KS_OK(kstage_query_release(s.stage, all));
}

TEST_CASE("the copies' paths are ordinary paths: found by name, parents, new children, reuse",
          "[clone]") {
  Stage s;
  const kstage_path_t src = s.path("/src"), a = s.path("/src/a"), leaf = s.path("/src/a/b/link7");
  kstage_query_t q = s.query({src, a, leaf});
  s.write_f32(q, s.token("m"), 1, {1, 2, 3});
  KS_OK(kstage_query_release(s.stage, q));
  s.seal(1);
  const Paths targets = s.paths("/dst", 3);
  REQUIRE(clone(s, src, targets, 2) == KSTAGE_OK);
  s.seal(2);
  // Every copy is found by its string, names itself, and has the right parent.
  const kstage_path_t copy = s.path("/dst_1/a/b/link7");
  CHECK(s.path_string(copy) == "/dst_1/a/b/link7");
  const kstage_path_t b = s.path("/dst_1/a/b");
  q = s.query({copy});
  CHECK(s.floats(q, s.token("m")).at(copy) == std::vector<float>{3});
  KS_OK(kstage_query_release(s.stage, q));
  // A new path below a copy, and below a path between copies.
  const kstage_path_t extra = s.path("/dst_1/a/b/link7/extra"), side = s.path("/dst_1/a/b/side");
  CHECK(s.path_string(extra) == "/dst_1/a/b/link7/extra");
  CHECK(s.path_string(side) == "/dst_1/a/b/side");
  CHECK(s.path("/dst_1/a/b/link7/extra") == extra);
  CHECK(side != b);
  // A range below a copy that would name a copied path is refused; one that would not is not.
  kstage_path_t first = 0;
  KS_FAILS(kstage_intern_path_range(s.stage, "/dst_2/a/b", KSTAGE_NUL_TERMINATED, "link",
                                    KSTAGE_NUL_TERMINATED, 0, 10, &first),
           KSTAGE_ALREADY_EXISTS, "its member '/dst_2/a/b/link7' was interned before");
  KS_FAILS(kstage_intern_path_range(s.stage, "/dst_2/a/b", KSTAGE_NUL_TERMINATED, "link",
                                    KSTAGE_NUL_TERMINATED, 0, 1000000, &first),
           KSTAGE_ALREADY_EXISTS, "its member '/dst_2/a/b/link7' was interned before");
  KS_OK(kstage_intern_path_range(s.stage, "/dst_2/a/b", KSTAGE_NUL_TERMINATED, "link",
                                 KSTAGE_NUL_TERMINATED, 8, 10, &first));
  // Deleted, then cloned again to the same target: the same paths, found again.
  q = s.query({targets[0], s.path("/dst_0/a"), s.path("/dst_0/a/b/link7")});
  const Paths before = s.prims_of(q);
  KS_OK(s.remove(q, {}, 3));
  s.seal(3);
  CHECK_FALSE(exists(s, targets[0]));
  REQUIRE(clone(s, src, {targets[0]}, 4) == KSTAGE_OK);
  s.seal(4);
  CHECK(s.path("/dst_0/a/b/link7") == before[2]);
  CHECK(s.floats(q, s.token("m")).at(before[2]) == std::vector<float>{3});
  KS_OK(kstage_query_release(s.stage, q));
}

#if defined(KSTAGE_TEST_EMULATED_DEVICE)
TEST_CASE("a clone whose device runs out of memory is refused, the stage unchanged", "[clone]") {
  if (!kOnDevice) SKIP("the columns are on the host in this run");
  const int32_t ordinal = test_emulated_ordinal();
  for (uint32_t nth : {1u, 2u, 3u, 5u}) {
    Stage s;
    Env e(s, 4);
    kstage_query_t q = s.query({e.env0, e.torso, e.leg, e.member(1), e.member(2)});
    const std::string before = s.fingerprint(q, e.attrs());
    const kstage_path_t target = e.member(1);
    // The nth device allocation of the call fails: a source gather's buffer (after others were
    // enqueued), an index upload, or a PATH_ID column's upload.
    REQUIRE(kstage_emulated_inject_fault(ordinal, KSTAGE_EMULATED_FAULT_ALLOC, nth) == 1);
    kstage_op_t op = 0;
    const kstage_status_t st = kstage_clone(s.stage, e.env0, &target, 1, 2, &op);
    kstage_emulated_device_reset(ordinal);
    INFO("allocation " << nth << ": " << kstage_last_error());
    REQUIRE(st == KSTAGE_OUT_OF_MEMORY);
    CHECK(s.fingerprint(q, e.attrs()) == before);
    CHECK_FALSE(exists(s, target));
    // The same clone then goes through.
    REQUIRE(clone(s, e.env0, {target}, 2) == KSTAGE_OK);
    s.seal(2);
    kstage_query_t c = s.query({e.copy(target, "/Robot/torso")});
    CHECK(s.floats(c, e.pos).begin()->second == std::vector<float>{1, 2, 3});
    KS_OK(kstage_query_release(s.stage, c));
    KS_OK(kstage_query_release(s.stage, q));
  }
}
#endif
