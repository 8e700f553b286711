// SPDX-License-Identifier: Apache-2.0
// Scene filters (kstage_query_filter_ex): every supported predicate alone and combined, each
// unsupported one and each bad value refused with a message naming it, the descriptor's
// struct_size rules, and the reserved names' write and map rules (usd-prim-type, usd-schemas,
// and the derived usd-path, usd-parent, usd-children).
#include "support.hpp"

#include <cstring>

using namespace kstage_test;

namespace {

using Paths = std::vector<kstage_path_t>;

kstage_predicate_t pred(kstage_filter_op_t op, kstage_token_t attribute,
                        const std::vector<uint64_t>& values = {}) {
  kstage_predicate_t p{};
  p.op = op;
  p.attribute = attribute;
  p.values = values.empty() ? nullptr : values.data();
  p.value_count = values.size();
  return p;
}

kstage_status_t run_filter(Stage& s, const std::vector<kstage_predicate_t>& preds,
                           kstage_query_t* q) {
  kstage_filter_ex_t f = kstage_filter_ex_init();
  f.predicates = preds.empty() ? nullptr : preds.data();
  f.predicate_count = preds.size();
  return kstage_query_filter_ex(s.stage, &f, q);
}

// The prims the filter selects, in path-id order.
Paths select(Stage& s, const std::vector<kstage_predicate_t>& preds) {
  kstage_query_t q = 0;
  KS_OK(run_filter(s, preds, &q));
  Paths out = s.prims_of(q);
  KS_OK(kstage_query_release(s.stage, q));
  return out;
}

// One token per row (usd-prim-type's schema); token sets, one row each (usd-schemas').
kstage_status_t write_types(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                            std::vector<uint64_t> types) {
  return write_ids(s, q, attr, ordinal, std::move(types), KSTAGE_SEMANTIC_TOKEN_ID);
}
kstage_status_t write_sets(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                           std::vector<std::vector<uint64_t>> rows) {
  return write_id_rows(s, q, attr, ordinal, std::move(rows), KSTAGE_SEMANTIC_TOKEN_ID);
}

// A small scene: /World (Xform) with /World/a (Cube; RigidBody, Collision), /World/b (Cube;
// RigidBody), /World/a/c (Sphere; no schemas, an empty row), and /Other (no type, no schemas).
// "mass" on /World/a and /Other.
struct Scene {
  Stage& s;
  kstage_token_t type, schemas, path, parent, children, mass;
  kstage_token_t xform, cube, sphere, rigid, collision;
  kstage_path_t world, a, b, c, other, ghost;
  explicit Scene(Stage& st) : s(st) {
    type = s.token(KSTAGE_PRIM_TYPE);
    schemas = s.token(KSTAGE_APPLIED_SCHEMAS);
    path = s.token(KSTAGE_PATH_ATTRIBUTE);
    parent = s.token(KSTAGE_PARENT_ATTRIBUTE);
    children = s.token(KSTAGE_CHILDREN_ATTRIBUTE);
    mass = s.token("mass");
    xform = s.token("Xform");
    cube = s.token("Cube");
    sphere = s.token("Sphere");
    rigid = s.token("PhysicsRigidBodyAPI");
    collision = s.token("PhysicsCollisionAPI");
    world = s.path("/World");
    a = s.path("/World/a");
    b = s.path("/World/b");
    c = s.path("/World/a/c");
    other = s.path("/Other");
    ghost = s.path("/World/ghost");  // interned, never a prim
    kstage_query_t typed = s.query({world, a, b, c});
    KS_OK(write_types(s, typed, type, 1, {xform, cube, cube, sphere}));
    kstage_query_t bodies = s.query({a, b, c});
    KS_OK(write_sets(s, bodies, schemas, 1, {{rigid, collision}, {rigid}, {}}));
    kstage_query_t heavy = s.query({a, other});
    s.write_f32(heavy, mass, 1, {1.0f, 2.0f});
    s.seal(1);
    for (kstage_query_t q : {typed, bodies, heavy}) KS_OK(kstage_query_release(s.stage, q));
  }
};

}  // namespace

TEST_CASE("each supported predicate alone", "[scene_filter]") {
  Stage s(host_execution());
  Scene sc(s);
  const auto& [world, a, b, c, other] = std::tie(sc.world, sc.a, sc.b, sc.c, sc.other);

  REQUIRE(select(s, {}) == Paths{world, a, b, c, other});  // every existing prim
  // HAS: any attribute; the derived names: every prim, non-roots, prims with children.
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, sc.mass)}) == Paths{a, other});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, sc.schemas)}) == Paths{a, b, c});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, sc.path)}) == Paths{world, a, b, c, other});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, sc.parent)}) == Paths{a, b, c});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, sc.children)}) == Paths{world, a});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, s.token("never-written"))}).empty());
  // usd-path IN (repeats and paths that are no prims are fine) and PREFIX.
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.path, {c, sc.ghost, a, c})}) == Paths{a, c});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_PREFIX, sc.path, {world})}) == Paths{world, a, b, c});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_PREFIX, sc.path, {a})}) == Paths{a, c});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_PREFIX, sc.path, {sc.ghost})}).empty());
  // usd-parent IN: the children of those prims.
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.parent, {world})}) == Paths{a, b});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.parent, {a, world})}) == Paths{a, b, c});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.parent, {sc.ghost, other})}).empty());
  // usd-children CONTAINS: the parent of every value.
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.children, {a, b})}) == Paths{world});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.children, {c})}) == Paths{a});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.children, {a, c})}).empty());
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.children, {world})}).empty());  // a root
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.children, {sc.ghost})}).empty());
  // usd-prim-type IN.
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.type, {sc.cube})}) == Paths{a, b});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.type, {sc.sphere, sc.xform})}) == Paths{world, c});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.type, {sc.rigid})}).empty());
  // usd-schemas CONTAINS: every value applied.
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.schemas, {sc.rigid})}) == Paths{a, b});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.schemas, {sc.collision, sc.rigid})}) ==
          Paths{a});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.schemas, {sc.cube})}).empty());
}

TEST_CASE("predicates combine as AND; kstage_query_filter answers as before", "[scene_filter]") {
  Stage s(host_execution());
  Scene sc(s);
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.type, {sc.cube}),
                     pred(KSTAGE_FILTER_CONTAINS, sc.schemas, {sc.collision})}) == Paths{sc.a});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.parent, {sc.world}),
                     pred(KSTAGE_FILTER_HAS, sc.mass)}) == Paths{sc.a});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_PREFIX, sc.path, {sc.world}),
                     pred(KSTAGE_FILTER_HAS, sc.children),
                     pred(KSTAGE_FILTER_IN, sc.type, {sc.cube, sc.xform})}) ==
          Paths{sc.world, sc.a});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.path, {sc.a, sc.b, sc.other}),
                     pred(KSTAGE_FILTER_IN, sc.parent, {sc.world})}) == Paths{sc.a, sc.b});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.children, {sc.c}),
                     pred(KSTAGE_FILTER_IN, sc.type, {sc.sphere})})
              .empty());
  // The same predicate twice is fine.
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, sc.mass), pred(KSTAGE_FILTER_HAS, sc.mass)}) ==
          Paths{sc.a, sc.other});

  // The old filter, unchanged.
  std::vector<kstage_token_t> has{sc.mass};
  kstage_filter_t f{};
  f.has_attributes = has.data();
  f.has_attribute_count = 1;
  f.path_prefix = sc.world;
  REQUIRE(s.filtered(f) == Paths{sc.a});

  // Changes of types and of the hierarchy show after their seal only.
  kstage_query_t qb = s.query({sc.b});
  KS_OK(write_types(s, qb, sc.type, 2, {sc.sphere}));
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.type, {sc.sphere})}) == Paths{sc.c});
  s.seal(2);
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.type, {sc.sphere})}) == Paths{sc.b, sc.c});
  KS_OK(s.remove(qb, {}, 3));
  s.seal(3);
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, sc.parent, {sc.world})}) == Paths{sc.a});
  KS_OK(kstage_query_release(s.stage, qb));
}

TEST_CASE("a usd-schemas write replaces the prim's whole set; an empty row clears it",
          "[scene_filter]") {
  Stage s(host_execution());
  Scene sc(s);
  kstage_query_t qa = s.query({sc.a});
  KS_OK(write_sets(s, qa, sc.schemas, 2, {{sc.cube}}));
  s.seal(2);
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.schemas, {sc.rigid})}) == Paths{sc.b});
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.schemas, {sc.cube})}) == Paths{sc.a});
  auto values = s.values(qa, sc.schemas);
  REQUIRE(values[sc.a].size() == sizeof(uint64_t));
  KS_OK(write_sets(s, qa, sc.schemas, 3, {{}}));
  s.seal(3);
  REQUIRE(select(s, {pred(KSTAGE_FILTER_CONTAINS, sc.schemas, {sc.cube})}).empty());
  values = s.values(qa, sc.schemas);
  REQUIRE(values.count(sc.a) == 1);  // the prim keeps an empty set
  REQUIRE(values[sc.a].empty());
  REQUIRE(select(s, {pred(KSTAGE_FILTER_HAS, sc.schemas)}) == Paths{sc.a, sc.b, sc.c});
  KS_OK(kstage_query_release(s.stage, qa));
}

TEST_CASE("a filter over a path range's members", "[scene_filter][range]") {
  Stage s(host_execution());
  constexpr uint64_t kEnvs = 200000;
  const kstage_token_t type = s.token(KSTAGE_PRIM_TYPE), parent = s.token(KSTAGE_PARENT_ATTRIBUTE);
  const kstage_token_t xform = s.token("Xform"), scope = s.token("Scope");
  const kstage_path_t world = s.path("/World");
  const kstage_path_t first = s.range("/World/envs", "env_", 0, kEnvs);
  kstage_query_t qw = s.query({world});
  KS_OK(write_types(s, qw, type, 1, {scope}));
  kstage_query_t all = s.range_query(first);
  std::vector<uint64_t> types(kEnvs, xform);
  types[7] = scope;
  KS_OK(write_types(s, all, type, 1, types));
  s.seal(1);
  kstage_query_t q = 0;
  std::vector<uint64_t> worlds{world};
  KS_OK(run_filter(
      s, {pred(KSTAGE_FILTER_IN, parent, worlds), pred(KSTAGE_FILTER_IN, type, {xform})}, &q));
  uint64_t n = 0;
  KS_OK(kstage_query_count(s.stage, q, &n));
  REQUIRE(n == kEnvs - 1);
  KS_OK(kstage_query_release(s.stage, q));
  REQUIRE(select(s, {pred(KSTAGE_FILTER_IN, type, {scope})}) == Paths{world, first + 7});
  KS_OK(kstage_query_release(s.stage, qw));
  KS_OK(kstage_query_release(s.stage, all));
}

TEST_CASE("unsupported predicates are refused, naming the predicate, operator and attribute",
          "[scene_filter][errors]") {
  Stage s(host_execution());
  Scene sc(s);
  kstage_query_t q = 0;
  struct Case {
    kstage_predicate_t p;
    const char* op;
    const char* attr;
  };
  const std::vector<uint64_t> one{sc.a}, two{sc.a, sc.b}, token{sc.cube};
  const std::vector<Case> unsupported{
      {pred(KSTAGE_FILTER_LT, sc.mass, one), "LT", "'mass'"},
      {pred(KSTAGE_FILTER_LE, sc.mass, one), "LE", "'mass'"},
      {pred(KSTAGE_FILTER_GT, sc.type, token), "GT", "'usd-prim-type'"},
      {pred(KSTAGE_FILTER_GE, sc.path, one), "GE", "'usd-path'"},
      {pred(KSTAGE_FILTER_IN, sc.mass, one), "IN", "'mass'"},
      {pred(KSTAGE_FILTER_CONTAINS, sc.mass, one), "CONTAINS", "'mass'"},
      {pred(KSTAGE_FILTER_PREFIX, sc.mass, one), "PREFIX", "'mass'"},
      {pred(KSTAGE_FILTER_CONTAINS, sc.path, one), "CONTAINS", "'usd-path'"},
      {pred(KSTAGE_FILTER_PREFIX, sc.parent, one), "PREFIX", "'usd-parent'"},
      {pred(KSTAGE_FILTER_CONTAINS, sc.parent, one), "CONTAINS", "'usd-parent'"},
      {pred(KSTAGE_FILTER_IN, sc.children, one), "IN", "'usd-children'"},
      {pred(KSTAGE_FILTER_CONTAINS, sc.type, token), "CONTAINS", "'usd-prim-type'"},
      {pred(KSTAGE_FILTER_IN, sc.schemas, token), "IN", "'usd-schemas'"},
      {pred(KSTAGE_FILTER_PREFIX, sc.schemas, token), "PREFIX", "'usd-schemas'"},
  };
  for (const Case& c : unsupported) {
    INFO(c.op << " on " << c.attr);
    // Second, after a good predicate: the index is the caller's.
    KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_HAS, sc.mass), c.p}, &q), KSTAGE_NOT_SUPPORTED,
             "filter.predicates[1]");
    REQUIRE(std::string(kstage_last_error()).find(c.op) != std::string::npos);
    REQUIRE(std::string(kstage_last_error()).find(c.attr) != std::string::npos);
    REQUIRE(q == 0);
  }
}

TEST_CASE("malformed predicates and values are INVALID_ARGUMENT naming them",
          "[scene_filter][errors]") {
  Stage s(host_execution());
  Scene sc(s);
  kstage_query_t q = 0;
  const std::vector<uint64_t> one{sc.a}, two{sc.a, sc.b};
  kstage_predicate_t p = pred(KSTAGE_FILTER_HAS, sc.mass);

  p.op = 8;
  KS_FAILS(run_filter(s, {p}, &q), KSTAGE_INVALID_ARGUMENT, "filter.predicates[0].op = 8");
  p.op = -1;
  KS_FAILS(run_filter(s, {p}, &q), KSTAGE_INVALID_ARGUMENT, "filter.predicates[0].op = -1");
  p = pred(KSTAGE_FILTER_HAS, sc.mass);
  p.reserved = 1;
  KS_FAILS(run_filter(s, {p}, &q), KSTAGE_INVALID_ARGUMENT, "filter.predicates[0].reserved");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_HAS, 0)}, &q), KSTAGE_INVALID_ARGUMENT,
           "attribute = 0 is not a token");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_HAS, 123456)}, &q), KSTAGE_INVALID_ARGUMENT,
           "attribute = 123456 is not a token");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_HAS, sc.mass, one)}, &q), KSTAGE_INVALID_ARGUMENT,
           "HAS takes no values");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_PREFIX, sc.path, two)}, &q), KSTAGE_INVALID_ARGUMENT,
           "PREFIX takes exactly one path");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_PREFIX, sc.path)}, &q), KSTAGE_INVALID_ARGUMENT,
           "PREFIX takes exactly one path");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_IN, sc.type)}, &q), KSTAGE_INVALID_ARGUMENT,
           "value_count is 0");
  p = pred(KSTAGE_FILTER_IN, sc.path);
  p.value_count = 2;
  KS_FAILS(run_filter(s, {p}, &q), KSTAGE_INVALID_ARGUMENT, "values is NULL but value_count is 2");
  // Values that are no path / no token of the stage, named by index.
  const std::vector<uint64_t> zero{sc.a, 0}, not_path{sc.a, 987654}, not_token{sc.cube, 987654};
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_IN, sc.path, zero)}, &q), KSTAGE_INVALID_ARGUMENT,
           "values[1] = 0 is not a path");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_IN, sc.parent, not_path)}, &q),
           KSTAGE_INVALID_ARGUMENT, "values[1] = 987654 is not a path");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_CONTAINS, sc.children, not_path)}, &q),
           KSTAGE_INVALID_ARGUMENT, "values[1] = 987654 is not a path");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_IN, sc.type, not_token)}, &q), KSTAGE_INVALID_ARGUMENT,
           "values[1] = 987654 is not a token");
  KS_FAILS(run_filter(s, {pred(KSTAGE_FILTER_CONTAINS, sc.schemas, zero)}, &q),
           KSTAGE_INVALID_ARGUMENT, "values[1] = 0 is not a token");
  REQUIRE(q == 0);

  // The filter itself.
  kstage_filter_ex_t f = kstage_filter_ex_init();
  KS_FAILS(kstage_query_filter_ex(s.stage, nullptr, &q), KSTAGE_INVALID_ARGUMENT, "filter is NULL");
  KS_FAILS(kstage_query_filter_ex(s.stage, &f, nullptr), KSTAGE_INVALID_ARGUMENT, "query is NULL");
  KS_FAILS(kstage_query_filter_ex(0, &f, &q), KSTAGE_INVALID_HANDLE, "stage handle");
  f.predicate_count = 1;
  KS_FAILS(kstage_query_filter_ex(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT,
           "filter.predicates is NULL but predicate_count is 1");
  f = kstage_filter_ex_init();
  f.reserved = 2;
  KS_FAILS(kstage_query_filter_ex(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT, "filter.reserved");
  REQUIRE(q == 0);
}

TEST_CASE("kstage_filter_ex_t follows the extensible-descriptor rules", "[scene_filter][abi]") {
  Stage s(host_execution());
  Scene sc(s);
  kstage_query_t q = 0;
  REQUIRE(sizeof(kstage_filter_ex_t) == 24);
  REQUIRE(kstage_filter_ex_init().struct_size == 24);
  // A larger (newer) caller: unknown bytes zero are fine, a set one is NOT_SUPPORTED.
  struct Newer {
    kstage_filter_ex_t f;
    uint64_t extra;
  } newer{};
  newer.f = kstage_filter_ex_init();
  newer.f.struct_size = sizeof(Newer);
  KS_OK(kstage_query_filter_ex(s.stage, &newer.f, &q));
  REQUIRE(s.prims_of(q).size() == 5);
  KS_OK(kstage_query_release(s.stage, q));
  q = 0;
  newer.extra = 1;
  KS_FAILS(kstage_query_filter_ex(s.stage, &newer.f, &q), KSTAGE_NOT_SUPPORTED, "byte 24");
  // Sizes kstage.h does not accept.
  kstage_filter_ex_t f = kstage_filter_ex_init();
  f.struct_size = 0;
  KS_FAILS(kstage_query_filter_ex(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT,
           "filter.struct_size is 0");
  f.struct_size = 23;
  KS_FAILS(kstage_query_filter_ex(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT,
           "filter.struct_size is 23");
  f.struct_size = KSTAGE_MAX_STRUCT_SIZE + 1;
  KS_FAILS(kstage_query_filter_ex(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT,
           "KSTAGE_MAX_STRUCT_SIZE");
  REQUIRE(q == 0);
}

TEST_CASE("writes and maps of reserved names must have their schema; derived names none",
          "[scene_filter][reserved]") {
  Stage s(host_execution());
  const kstage_token_t type = s.token(KSTAGE_PRIM_TYPE), schemas = s.token(KSTAGE_APPLIED_SCHEMAS);
  const kstage_token_t cube = s.token("Cube");
  const kstage_path_t a = s.path("/a");
  kstage_query_t q = s.query({a});

  // usd-prim-type: another dtype, lanes, semantic or kind.
  std::vector<float> f{1.0f};
  int64_t one[1] = {1};
  DLTensor tf = tensor(f.data(), f32(), 1, one);
  kstage_write_data_t w = write_data(&tf);
  w.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  KS_FAILS(s.write(q, type, 1, w), KSTAGE_INVALID_ARGUMENT, "'usd-prim-type' is a reserved name");
  std::vector<uint64_t> u{cube, cube};
  DLTensor tu = tensor(u.data(), u64(), 1, one);
  w = write_data(&tu);  // no semantic
  KS_FAILS(s.write(q, type, 1, w), KSTAGE_INVALID_ARGUMENT, "semantic TOKEN_ID");
  DLTensor tu2 = tensor(u.data(), u64(2), 1, one);
  w = write_data(&tu2);
  w.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  KS_FAILS(s.write(q, type, 1, w), KSTAGE_INVALID_ARGUMENT, "'usd-prim-type' is a reserved name");
  w = write_data(&tu, 1, /*is_array=*/true);
  w.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  KS_FAILS(s.write(q, type, 1, w), KSTAGE_INVALID_ARGUMENT, "must be a fixed-size column");
  // usd-schemas: fixed-size is refused.
  w = write_data(&tu);
  w.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  KS_FAILS(s.write(q, schemas, 1, w), KSTAGE_INVALID_ARGUMENT,
           "'usd-schemas' is a reserved name: it must be an array column");
  // Through kstage_write_attributes too, named by its index.
  kstage_write_data_t batch[2] = {w, w};
  const kstage_token_t pair[2] = {s.token("other"), schemas};
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attributes(s.stage, q, pair, batch, 2, 1, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "data[1] ('usd-schemas')");
  // The derived names cannot be written at all.
  for (const char* name :
       {KSTAGE_PATH_ATTRIBUTE, KSTAGE_PARENT_ATTRIBUTE, KSTAGE_CHILDREN_ATTRIBUTE}) {
    INFO(name);
    w = write_data(&tu);
    w.semantic = KSTAGE_SEMANTIC_PATH_ID;
    KS_FAILS(s.write(q, s.token(name), 1, w), KSTAGE_NOT_SUPPORTED, "derived from paths");
    REQUIRE(std::string(kstage_last_error()).find(name) != std::string::npos);
  }

  // Maps: the same rules.
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = type;
  d.dtype = f32();
  d.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  kstage_map_t m = 0;
  KS_FAILS(kstage_map_attribute(s.stage, q, &d, 1, nullptr, 0, &m), KSTAGE_INVALID_ARGUMENT,
           "'usd-prim-type' is a reserved name");
  d.attribute = schemas;
  d.dtype = u64();
  KS_FAILS(kstage_map_attribute(s.stage, q, &d, 1, nullptr, 0, &m), KSTAGE_INVALID_ARGUMENT,
           "'usd-schemas' is a reserved name");
  d.attribute = s.token(KSTAGE_PARENT_ATTRIBUTE);
  d.semantic = KSTAGE_SEMANTIC_PATH_ID;
  KS_FAILS(kstage_map_attribute(s.stage, q, &d, 1, nullptr, 0, &m), KSTAGE_NOT_SUPPORTED,
           "derived from paths");
  REQUIRE(m == 0);

  // Nothing of it changed the stage: no column, no prim.
  s.seal(1);
  REQUIRE(s.read(q, {type}).empty());
  REQUIRE(s.read(q, {schemas}).empty());
  uint64_t n = 99;
  KS_OK(kstage_list_attributes(s.stage, nullptr, 0, &n));
  REQUIRE(n == 0);

  // The right schemas work, by write and by map.
  DLTensor t1 = tensor(u.data(), u64(), 1, one);
  w = write_data(&t1);
  w.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  KS_OK(s.write(q, type, 2, w));
  d = kstage_map_desc_init();
  d.attribute = schemas;
  d.dtype = u64();
  d.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  d.is_array = true;
  const uint64_t counts[1] = {0};
  KS_OK(kstage_map_attribute(s.stage, q, &d, 2, counts, 1, &m));
  KS_OK(kstage_release_map(s.stage, m));
  KS_OK(kstage_query_release(s.stage, q));
}
