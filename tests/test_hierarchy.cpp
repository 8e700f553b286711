// SPDX-License-Identifier: Apache-2.0
// Hierarchy: parents, children and siblings over the sealed state (kstage_query_hierarchy):
// gaps in the path tree, roots, "/" as a prim, missing prims, deletes, unsealed writes, path
// ranges answered as spans (with holes), descendants of range members, and the handle protocol.
#include "support.hpp"

#include <chrono>
#include <utility>

using namespace kstage_test;

namespace {

using Spans = std::vector<std::pair<uint64_t, uint64_t>>;  // (first, count)

struct Item {
  kstage_status_t status = KSTAGE_OK;
  Spans spans;
  uint64_t paths = 0;
};

// The answer for `prims`, checked for the CSR's own consistency (offsets in order, counts add
// up, reserved zero); the result and the query are released.
std::vector<Item> relation(Stage& s, const std::vector<kstage_path_t>& prims, kstage_relation_t r) {
  kstage_query_t q = s.query(prims);
  kstage_hierarchy_t h = 0;
  KS_OK(kstage_query_hierarchy(s.stage, q, r, &h));
  REQUIRE(h != 0);
  const kstage_hierarchy_item_t* items = nullptr;
  const kstage_path_span_t* spans = nullptr;
  uint64_t n_items = 0, n_spans = 0;
  KS_OK(kstage_hierarchy_get(s.stage, h, &items, &n_items, &spans, &n_spans));
  REQUIRE(n_items == prims.size());
  std::vector<Item> out;
  uint64_t next = 0;
  for (uint64_t i = 0; i < n_items; ++i) {
    const kstage_hierarchy_item_t& it = items[i];
    REQUIRE(it.reserved == 0);
    REQUIRE(it.span_offset == next);
    next += it.span_count;
    REQUIRE(next <= n_spans);
    Item item;
    item.status = it.status;
    item.paths = it.path_count;
    uint64_t total = 0;
    for (uint64_t k = 0; k < it.span_count; ++k) {
      const kstage_path_span_t& sp = spans[it.span_offset + k];
      REQUIRE(sp.count >= 1);
      item.spans.emplace_back(sp.first, sp.count);
      total += sp.count;
    }
    REQUIRE(total == it.path_count);
    if (it.status != KSTAGE_OK) REQUIRE(it.span_count == 0);
    out.push_back(std::move(item));
  }
  REQUIRE(next == n_spans);
  KS_OK(kstage_hierarchy_release(s.stage, h));
  KS_OK(kstage_query_release(s.stage, q));
  return out;
}

Item one(Stage& s, kstage_path_t prim, kstage_relation_t r) { return relation(s, {prim}, r)[0]; }

// The item's paths, one id each (small answers only).
std::vector<kstage_path_t> ids(const Item& item) {
  std::vector<kstage_path_t> v;
  for (const auto& [first, count] : item.spans)
    for (uint64_t k = 0; k < count; ++k) v.push_back(first + k);
  return v;
}

// Makes `prims` exist: a float32 written at `ordinal` and sealed.
void make_prims(Stage& s, const std::vector<kstage_path_t>& prims, uint64_t ordinal,
                bool seal = true) {
  kstage_query_t q = s.query(prims);
  s.write_f32(q, s.token("mass"), ordinal, std::vector<float>(prims.size(), 1.0f));
  KS_OK(kstage_query_release(s.stage, q));
  if (seal) s.seal(ordinal);
}

}  // namespace

TEST_CASE("parents skip paths that are no prims; a prim between them becomes the parent",
          "[hierarchy]") {
  Stage s(host_execution());
  const kstage_path_t a = s.path("/a"), c = s.path("/a/b/c"), x = s.path("/x");
  make_prims(s, {a, c, x}, 1);

  REQUIRE(one(s, c, KSTAGE_RELATION_PARENT).spans == Spans{{a, 1}});
  REQUIRE(one(s, a, KSTAGE_RELATION_PARENT).spans.empty());  // a root
  REQUIRE(one(s, a, KSTAGE_RELATION_PARENT).status == KSTAGE_OK);
  REQUIRE(ids(one(s, a, KSTAGE_RELATION_CHILDREN)) == std::vector<kstage_path_t>{c});
  REQUIRE(ids(one(s, a, KSTAGE_RELATION_SIBLINGS)) == std::vector<kstage_path_t>{x});  // roots
  REQUIRE(one(s, c, KSTAGE_RELATION_SIBLINGS).spans.empty());
  REQUIRE(one(s, c, KSTAGE_RELATION_CHILDREN).spans.empty());

  // Interning "/a/b" (it was a hidden ancestor) changes nothing: it holds no attribute.
  const kstage_path_t b = s.path("/a/b");
  REQUIRE(one(s, c, KSTAGE_RELATION_PARENT).spans == Spans{{a, 1}});
  REQUIRE(one(s, b, KSTAGE_RELATION_PARENT).status == KSTAGE_NOT_FOUND);

  // Written but not sealed: invisible.
  make_prims(s, {b}, 2, /*seal=*/false);
  REQUIRE(one(s, c, KSTAGE_RELATION_PARENT).spans == Spans{{a, 1}});
  REQUIRE(one(s, b, KSTAGE_RELATION_CHILDREN).status == KSTAGE_NOT_FOUND);
  s.seal(2);
  REQUIRE(one(s, c, KSTAGE_RELATION_PARENT).spans == Spans{{b, 1}});
  REQUIRE(one(s, b, KSTAGE_RELATION_PARENT).spans == Spans{{a, 1}});
  REQUIRE(ids(one(s, a, KSTAGE_RELATION_CHILDREN)) == std::vector<kstage_path_t>{b});
  REQUIRE(ids(one(s, b, KSTAGE_RELATION_CHILDREN)) == std::vector<kstage_path_t>{c});

  // A value update of existing prims changes no answer.
  make_prims(s, {a, b, c, x}, 3);
  REQUIRE(one(s, c, KSTAGE_RELATION_PARENT).spans == Spans{{b, 1}});

  // Deleted prims disappear: "/a/b" goes, "/a/b/c" is "/a"'s child again.
  kstage_query_t qb = s.query({b});
  KS_OK(s.remove(qb, {}, 4));
  REQUIRE(one(s, c, KSTAGE_RELATION_PARENT).spans == Spans{{b, 1}});  // not sealed yet
  s.seal(4);
  KS_OK(kstage_query_release(s.stage, qb));
  REQUIRE(one(s, c, KSTAGE_RELATION_PARENT).spans == Spans{{a, 1}});
  REQUIRE(one(s, b, KSTAGE_RELATION_PARENT).status == KSTAGE_NOT_FOUND);
  REQUIRE(ids(one(s, a, KSTAGE_RELATION_CHILDREN)) == std::vector<kstage_path_t>{c});
  // Deleting an attribute the prim holds alone ends it too.
  kstage_query_t qc = s.query({c});
  KS_OK(s.remove(qc, {s.token("mass")}, 5));
  s.seal(5);
  KS_OK(kstage_query_release(s.stage, qc));
  REQUIRE(one(s, a, KSTAGE_RELATION_CHILDREN).spans.empty());
}

TEST_CASE("roots, '/' as a prim, and one item per query prim with its own status", "[hierarchy]") {
  Stage s(host_execution());
  const kstage_path_t a = s.path("/a"), b = s.path("/b"), d = s.path("/b/d");
  const kstage_path_t ghost = s.path("/ghost");  // interned, never a prim
  make_prims(s, {a, b, d}, 1);

  auto items = relation(s, {b, ghost, d, a}, KSTAGE_RELATION_SIBLINGS);
  REQUIRE(items[0].status == KSTAGE_OK);
  REQUIRE(ids(items[0]) == std::vector<kstage_path_t>{a});
  REQUIRE(items[1].status == KSTAGE_NOT_FOUND);
  REQUIRE(items[1].spans.empty());
  REQUIRE(items[2].spans.empty());
  REQUIRE(ids(items[3]) == std::vector<kstage_path_t>{b});

  // "/" interned changes nothing; "/" a prim is every top-level prim's parent (and the root).
  const kstage_path_t root = s.path("/");
  REQUIRE(one(s, a, KSTAGE_RELATION_PARENT).spans.empty());
  make_prims(s, {root}, 2);
  REQUIRE(one(s, a, KSTAGE_RELATION_PARENT).spans == Spans{{root, 1}});
  REQUIRE(one(s, d, KSTAGE_RELATION_PARENT).spans == Spans{{b, 1}});
  REQUIRE(ids(one(s, root, KSTAGE_RELATION_CHILDREN)) == std::vector<kstage_path_t>{a, b});
  REQUIRE(one(s, root, KSTAGE_RELATION_PARENT).spans.empty());
  REQUIRE(one(s, root, KSTAGE_RELATION_SIBLINGS).spans.empty());
  REQUIRE(ids(one(s, a, KSTAGE_RELATION_SIBLINGS)) == std::vector<kstage_path_t>{b});

  // An empty query: no items.
  kstage_query_t q = s.query({});
  kstage_hierarchy_t h = 0;
  KS_OK(kstage_query_hierarchy(s.stage, q, KSTAGE_RELATION_CHILDREN, &h));
  uint64_t n_items = 7, n_spans = 7;
  KS_OK(kstage_hierarchy_get(s.stage, h, nullptr, &n_items, nullptr, &n_spans));
  REQUIRE(n_items == 0);
  REQUIRE(n_spans == 0);
  KS_OK(kstage_hierarchy_release(s.stage, h));
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("a path range's members come back as spans, never one id each", "[hierarchy][range]") {
  Stage s(host_execution());
  constexpr uint64_t kEnvs = 1000000;
  const kstage_path_t world = s.path("/World");
  const kstage_path_t first = s.range("/World/envs", "env_", 0, kEnvs);
  const kstage_path_t base = s.path("/World/envs/env_17/Robot/base");
  const kstage_path_t other = s.path("/World/ground");
  make_prims(s, {world, other, base}, 1);
  kstage_query_t all = s.range_query(first);
  s.write_f32(all, s.token("mass"), 2, std::vector<float>(kEnvs, 2.0f));
  s.seal(2);

  const auto t0 = std::chrono::steady_clock::now();
  Item children = one(s, world, KSTAGE_RELATION_CHILDREN);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The range's 1e6 members are one span, in path-id order with "/World/ground" (interned
  // after the range). Building the index walks the counts' runs, not the members: well under a
  // second even unoptimised.
  REQUIRE(children.spans == Spans{{first, kEnvs}, {other, 1}});
  REQUIRE(children.paths == kEnvs + 1);
  CHECK(seconds < 5.0);

  const kstage_path_t env17 = first + 17;
  REQUIRE(one(s, env17, KSTAGE_RELATION_PARENT).spans == Spans{{world, 1}});
  REQUIRE(one(s, env17, KSTAGE_RELATION_SIBLINGS).spans ==
          Spans{{first, 17}, {first + 18, kEnvs - 18}, {other, 1}});
  REQUIRE(one(s, first, KSTAGE_RELATION_SIBLINGS).spans ==
          Spans{{first + 1, kEnvs - 1}, {other, 1}});
  // Descendants of a member are ordinary paths: "/World/envs/env_17/Robot" holds nothing.
  REQUIRE(one(s, base, KSTAGE_RELATION_PARENT).spans == Spans{{env17, 1}});
  REQUIRE(one(s, env17, KSTAGE_RELATION_CHILDREN).spans == Spans{{base, 1}});
  REQUIRE(one(s, first + 18, KSTAGE_RELATION_CHILDREN).spans.empty());

  // Holes: members deleted split the span (one at a page boundary of the counts, 65536).
  kstage_query_t holes = s.query({first + 10, first + 65536, first + 500000});
  KS_OK(s.remove(holes, {s.token("mass")}, 3));
  s.seal(3);
  KS_OK(kstage_query_release(s.stage, holes));
  REQUIRE(one(s, world, KSTAGE_RELATION_CHILDREN).spans == Spans{{first, 10},
                                                                 {first + 11, 65536 - 11},
                                                                 {first + 65537, 500000 - 65537},
                                                                 {first + 500001, kEnvs - 500001},
                                                                 {other, 1}});
  REQUIRE(one(s, first + 10, KSTAGE_RELATION_PARENT).status == KSTAGE_NOT_FOUND);
  // Every member's parent at once: one item each, each one span.
  kstage_hierarchy_t h = 0;
  KS_OK(kstage_query_hierarchy(s.stage, all, KSTAGE_RELATION_PARENT, &h));
  const kstage_hierarchy_item_t* items = nullptr;
  const kstage_path_span_t* spans = nullptr;
  uint64_t n_items = 0, n_spans = 0;
  KS_OK(kstage_hierarchy_get(s.stage, h, &items, &n_items, &spans, &n_spans));
  REQUIRE(n_items == kEnvs);
  REQUIRE(n_spans == kEnvs - 3);
  REQUIRE(items[10].status == KSTAGE_NOT_FOUND);
  REQUIRE(items[11].span_offset == 10);
  REQUIRE(spans[items[999].span_offset].first == world);
  KS_OK(kstage_hierarchy_release(s.stage, h));
  KS_OK(kstage_query_release(s.stage, all));
}

TEST_CASE("a range whose parent is a prim, next to explicit siblings", "[hierarchy][range]") {
  Stage s(host_execution());
  const kstage_path_t envs = s.path("/envs");
  const kstage_path_t a = s.path("/envs/a");
  const kstage_path_t first = s.range("/envs", "e", 1, 5);
  const kstage_path_t z = s.path("/envs/z");
  make_prims(s, {envs, a, z}, 1);
  kstage_query_t q = s.range_query(first);
  s.write_f32(q, s.token("mass"), 2, std::vector<float>(5, 1.0f));
  s.seal(2);
  KS_OK(kstage_query_release(s.stage, q));
  // Path-id order: "/envs/a", the range, "/envs/z"; explicit paths are spans of one.
  REQUIRE(one(s, envs, KSTAGE_RELATION_CHILDREN).spans == Spans{{a, 1}, {first, 5}, {z, 1}});
  REQUIRE(one(s, first + 4, KSTAGE_RELATION_SIBLINGS).spans == Spans{{a, 1}, {first, 4}, {z, 1}});
  REQUIRE(one(s, a, KSTAGE_RELATION_SIBLINGS).spans == Spans{{first, 5}, {z, 1}});
}

TEST_CASE("hierarchy calls refuse bad arguments and stale handles", "[hierarchy][errors]") {
  Stage s(host_execution());
  const kstage_path_t a = s.path("/a");
  make_prims(s, {a}, 1);
  kstage_query_t q = s.query({a});
  kstage_hierarchy_t h = 0;
  KS_FAILS(kstage_query_hierarchy(s.stage, q, 3, &h), KSTAGE_INVALID_ARGUMENT, "relation 3");
  KS_FAILS(kstage_query_hierarchy(s.stage, q, -1, &h), KSTAGE_INVALID_ARGUMENT, "relation -1");
  REQUIRE(h == 0);
  KS_FAILS(kstage_query_hierarchy(s.stage, q, KSTAGE_RELATION_PARENT, nullptr),
           KSTAGE_INVALID_ARGUMENT, "result");
  KS_FAILS(kstage_query_hierarchy(s.stage, q + 1, KSTAGE_RELATION_PARENT, &h),
           KSTAGE_INVALID_HANDLE, "query handle");
  KS_FAILS(kstage_query_hierarchy(0, q, KSTAGE_RELATION_PARENT, &h), KSTAGE_INVALID_HANDLE,
           "stage handle");
  REQUIRE(h == 0);

  KS_OK(kstage_query_hierarchy(s.stage, q, KSTAGE_RELATION_PARENT, &h));
  // Any out-pointer may be NULL.
  KS_OK(kstage_hierarchy_get(s.stage, h, nullptr, nullptr, nullptr, nullptr));
  // The answer outlives its query.
  KS_OK(kstage_query_release(s.stage, q));
  uint64_t n = 0;
  KS_OK(kstage_hierarchy_get(s.stage, h, nullptr, &n, nullptr, nullptr));
  REQUIRE(n == 1);
  // A query handle is not a hierarchy handle, nor the reverse.
  KS_FAILS(kstage_hierarchy_get(s.stage, q, nullptr, &n, nullptr, nullptr), KSTAGE_INVALID_HANDLE,
           "hierarchy handle");
  KS_FAILS(kstage_query_count(s.stage, h, &n), KSTAGE_INVALID_HANDLE, "query handle");
  KS_OK(kstage_hierarchy_release(s.stage, h));
  KS_FAILS(kstage_hierarchy_release(s.stage, h), KSTAGE_INVALID_HANDLE, "double release");
  KS_FAILS(kstage_hierarchy_get(s.stage, h, nullptr, &n, nullptr, nullptr), KSTAGE_INVALID_HANDLE,
           "hierarchy handle");
}
