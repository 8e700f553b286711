// SPDX-License-Identifier: Apache-2.0
// Queries: explicit path queries (order, duplicates, empty), filter queries
// over the latest sealed state (HAS, path IN, PREFIX, combinations), and the
// query handle protocol.
#include "support.hpp"

using namespace kstage_test;

namespace {

// The prims of a query, through kstage_query_get_paths.
std::vector<kstage_path_t> prims_of(Stage& s, kstage_query_t q) {
  kstage_path_list_t list = 0;
  KS_OK(kstage_query_get_paths(s.stage, q, &list));
  REQUIRE(list != 0);
  const kstage_path_t* ids = nullptr;
  uint64_t n = 0;
  KS_OK(kstage_path_list_get(s.stage, list, &ids, &n));
  std::vector<kstage_path_t> out(ids, ids + n);
  KS_OK(kstage_path_list_release(s.stage, list));
  uint64_t count = 0;
  KS_OK(kstage_query_count(s.stage, q, &count));
  REQUIRE(count == n);
  return out;
}

// The prims a filter selects (the query is released).
std::vector<kstage_path_t> filter(Stage& s, const kstage_filter_t& f) {
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(s.stage, &f, &q));
  REQUIRE(q != 0);
  auto out = prims_of(s, q);
  KS_OK(kstage_query_release(s.stage, q));
  return out;
}

kstage_filter_t has(const std::vector<kstage_token_t>& attrs) {
  kstage_filter_t f{};
  f.has_attributes = attrs.data();
  f.has_attribute_count = attrs.size();
  return f;
}

kstage_path_list_t path_list(Stage& s, const std::vector<kstage_path_t>& ids) {
  kstage_path_list_t l = 0;
  KS_OK(kstage_path_list_create(s.stage, ids.data(), ids.size(), &l));
  return l;
}

}  // namespace

TEST_CASE("path queries keep their order and give their paths back", "[query]") {
  Stage s(host_execution());
  auto p = s.paths("/p", 4);
  std::vector<kstage_path_t> order{p[2], p[0], p[3], p[1]};
  kstage_query_t q = s.query(order);
  uint64_t n = 0;
  KS_OK(kstage_query_count(s.stage, q, &n));
  REQUIRE(n == 4);

  kstage_path_list_t list = 0;
  KS_OK(kstage_query_get_paths(s.stage, q, &list));
  const kstage_path_t* ids = nullptr;
  uint64_t count = 0;
  KS_OK(kstage_path_list_get(s.stage, list, &ids, &count));
  REQUIRE(std::vector<kstage_path_t>(ids, ids + count) == order);
  KS_OK(kstage_path_list_release(s.stage, list));
  KS_FAILS(kstage_path_list_get(s.stage, list, &ids, &count), KSTAGE_INVALID_HANDLE,
           "path list handle");
  // Getting the paths again gives a new, live list.
  kstage_path_list_t again = 0;
  KS_OK(kstage_query_get_paths(s.stage, q, &again));
  REQUIRE(again != list);
  KS_OK(kstage_path_list_get(s.stage, again, &ids, &count));
  REQUIRE(std::vector<kstage_path_t>(ids, ids + count) == order);
  // The list outlives the query.
  KS_OK(kstage_query_release(s.stage, q));
  KS_OK(kstage_path_list_get(s.stage, again, &ids, &count));
  REQUIRE(std::vector<kstage_path_t>(ids, ids + count) == order);
  KS_OK(kstage_path_list_release(s.stage, again));

  // Writes address the query's prims in its order.
  kstage_token_t a = s.token("a");
  kstage_query_t q2 = s.query(order);
  KS_OK(try_write(s, q2, a, 1, {2.f, 0.f, 3.f, 1.f}));
  s.seal(1);
  auto v = s.floats(s.query(p), a);
  for (int i = 0; i < 4; ++i) REQUIRE(v[p[i]] == std::vector<float>{float(i)});
}

TEST_CASE("path queries reject duplicates, non-paths and NULL", "[query][errors]") {
  Stage s(host_execution());
  auto p = s.paths("/p", 3);
  kstage_query_t q = 0;
  std::vector<kstage_path_t> dup{p[0], p[1], p[2], p[1]};
  KS_FAILS(kstage_query_paths(s.stage, dup.data(), dup.size(), &q), KSTAGE_INVALID_ARGUMENT,
           "paths[3] ('/p_1') repeats paths[1]");
  std::vector<kstage_path_t> bad{p[0], p[2] + 100};
  KS_FAILS(kstage_query_paths(s.stage, bad.data(), bad.size(), &q), KSTAGE_INVALID_ARGUMENT,
           "paths[1] = " + std::to_string(p[2] + 100) + " is not a path");
  std::vector<kstage_path_t> zero{0};
  KS_FAILS(kstage_query_paths(s.stage, zero.data(), 1, &q), KSTAGE_INVALID_ARGUMENT,
           "paths[0] = 0");
  KS_FAILS(kstage_query_paths(s.stage, nullptr, 2, &q), KSTAGE_INVALID_ARGUMENT,
           "paths is NULL but count is 2");
  KS_FAILS(kstage_query_paths(s.stage, p.data(), p.size(), nullptr), KSTAGE_INVALID_ARGUMENT,
           "query is NULL");
  KS_FAILS(kstage_query_paths(0, p.data(), p.size(), &q), KSTAGE_INVALID_HANDLE, "stage handle");
  REQUIRE(q == 0);
}

TEST_CASE("an empty path query is valid and a write to it does nothing", "[query]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 2);
  kstage_query_t q = s.query(p);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  s.seal(1);

  kstage_query_t empty = 0;
  KS_OK(kstage_query_paths(s.stage, nullptr, 0, &empty));
  REQUIRE(empty != 0);
  uint64_t n = 99;
  KS_OK(kstage_query_count(s.stage, empty, &n));
  REQUIRE(n == 0);
  REQUIRE(prims_of(s, empty).empty());

  int64_t shape[1] = {0};
  DLTensor t = tensor(nullptr, f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  KS_OK(s.write(empty, a, 2, w));
  KS_OK(s.write(empty, a, 2, w, KSTAGE_PRIM_MODE_INSERT));
  KS_OK(s.write(empty, a, 2, w, KSTAGE_PRIM_MODE_UPDATE));
  s.seal(2);
  REQUIRE(s.read(empty, {a}).empty());
  // Nothing but the floor changed.
  kstage_filter_t all{};
  REQUIRE(filter(s, all) == p);
  auto v = s.floats(q, a);
  REQUIRE(v.size() == 2);
  REQUIRE(v[p[0]] == std::vector<float>{1.f});
  REQUIRE(v[p[1]] == std::vector<float>{2.f});
  REQUIRE(s.floor(a) == 2);
}

TEST_CASE("filter queries select existing prims in path-id order", "[query][filter]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), b = s.token("b"), nobody = s.token("nobody");
  // Interning order decides path-id order.
  kstage_path_t world = s.path("/world"), deep = s.path("/world/a/b"), wide = s.path("/worldwide"),
                other = s.path("/other"), sub = s.path("/world/c"),
                unsealed = s.path("/world/late"), never = s.path("/never");
  // Written in an order unlike the id order.
  KS_OK(try_write(s, s.query({other, deep, world}), a, 1, {1.f, 2.f, 3.f}));
  KS_OK(try_write(s, s.query({sub, wide, deep}), b, 1, {4.f, 5.f, 6.f}));
  s.seal(1);
  KS_OK(try_write(s, s.query({unsealed}), a, 2, {7.f}));  // not sealed: does not count
  KS_OK(try_write(s, s.query({unsealed}), b, 2, {7.f}));
  KS_OK(try_write(s, s.query({world}), b, 2, {8.f}));  // world gains b only when sealed
  KS_OK(s.remove(s.query({other}), {a}, 2));           // other loses a only when sealed

  kstage_filter_t f{};
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world, deep, wide, other, sub});

  REQUIRE(filter(s, has({a})) == std::vector<kstage_path_t>{world, deep, other});
  REQUIRE(filter(s, has({b})) == std::vector<kstage_path_t>{deep, wide, sub});
  REQUIRE(filter(s, has({a, b})) == std::vector<kstage_path_t>{deep});
  REQUIRE(filter(s, has({b, a})) == std::vector<kstage_path_t>{deep});
  REQUIRE(filter(s, has({nobody})).empty());
  REQUIRE(filter(s, has({a, nobody})).empty());

  // path IN: result in path-id order, duplicates harmless, absent prims out.
  kstage_path_list_t in = path_list(s, {sub, never, world, sub, unsealed, other, world});
  f = kstage_filter_t{};
  f.path_in = in;
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world, other, sub});
  // The filter does not consume the list.
  const kstage_path_t* ids = nullptr;
  uint64_t n = 0;
  KS_OK(kstage_path_list_get(s.stage, in, &ids, &n));
  REQUIRE(n == 7);

  // PREFIX.
  f = kstage_filter_t{};
  f.path_prefix = world;
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world, deep, sub});
  f.path_prefix = s.path("/world/a");  // not a prim itself; covers /world/a/b
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{deep});
  f.path_prefix = s.path("/");
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world, deep, wide, other, sub});
  f.path_prefix = s.path("/wor");  // a string prefix, not a path prefix
  REQUIRE(filter(s, f).empty());

  // Combinations are AND-ed.
  std::vector<kstage_token_t> just_a{a};
  f = has(just_a);
  f.path_prefix = world;
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world, deep});
  f.path_in = in;
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world});
  std::vector<kstage_token_t> just_b{b};
  f = has(just_b);
  f.path_in = in;
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{sub});
  KS_OK(kstage_path_list_release(s.stage, in));

  // Once sealed, the late prim counts.
  s.seal(2);
  f = kstage_filter_t{};
  f.path_prefix = world;
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world, deep, sub, unsealed});
  REQUIRE(filter(s, has({a, b})) == std::vector<kstage_path_t>{world, deep, unsealed});
  REQUIRE(filter(s, has({a})) == std::vector<kstage_path_t>{world, deep, unsealed});
  f = kstage_filter_t{};
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{world, deep, wide, sub, unsealed});
}

TEST_CASE("a filter query is a fixed list: later seals do not change it", "[query][filter]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 3);
  KS_OK(try_write(s, s.query({p[0], p[1]}), a, 1, {1.f, 2.f}));
  s.seal(1);
  kstage_filter_t f{};
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(s.stage, &f, &q));
  KS_OK(try_write(s, s.query({p[2]}), a, 2, {3.f}));
  KS_OK(s.remove(s.query({p[0]}), {a}, 2));
  s.seal(2);
  REQUIRE(prims_of(s, q) == std::vector<kstage_path_t>{p[0], p[1]});
  // Reading through it shows the prims of the list that still hold the attribute.
  auto g = s.read(q, {a});
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[1]});
  REQUIRE(filter(s, f) == std::vector<kstage_path_t>{p[1], p[2]});
}

TEST_CASE("bad filter inputs are rejected", "[query][filter][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 2);
  KS_OK(try_write(s, s.query(p), a, 1, {1.f, 2.f}));
  s.seal(1);
  kstage_query_t q = 0;

  const kstage_token_t bad = a + 50;
  std::vector<kstage_token_t> attrs{a, bad};
  kstage_filter_t f = has(attrs);
  KS_FAILS(kstage_query_filter(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT,
           "filter.has_attributes[1] = " + std::to_string(bad) + " is not a token");
  f = kstage_filter_t{};
  f.has_attribute_count = 2;
  KS_FAILS(kstage_query_filter(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT,
           "filter.has_attributes is NULL but has_attribute_count is 2");

  f = kstage_filter_t{};
  kstage_path_list_t list = path_list(s, p);
  KS_OK(kstage_path_list_release(s.stage, list));
  f.path_in = list;  // released
  KS_FAILS(kstage_query_filter(s.stage, &f, &q), KSTAGE_INVALID_HANDLE, "path list handle");
  f.path_in = s.query(p);  // a query is not a path list
  KS_FAILS(kstage_query_filter(s.stage, &f, &q), KSTAGE_INVALID_HANDLE, "path list handle");

  f = kstage_filter_t{};
  f.path_prefix = p[1] + 1000;
  KS_FAILS(kstage_query_filter(s.stage, &f, &q), KSTAGE_INVALID_ARGUMENT,
           "filter.path_prefix = " + std::to_string(p[1] + 1000) + " is not a path");
  KS_FAILS(kstage_query_filter(s.stage, nullptr, &q), KSTAGE_INVALID_ARGUMENT, "filter is NULL");
  f = kstage_filter_t{};
  KS_FAILS(kstage_query_filter(s.stage, &f, nullptr), KSTAGE_INVALID_ARGUMENT, "query is NULL");
  REQUIRE(q == 0);
}

TEST_CASE("the query handle protocol", "[query][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 2);
  kstage_query_t q = s.query(p);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  s.seal(1);
  const std::string before = s.fingerprint(q, {a});

  kstage_query_t gone = s.query(p);
  KS_OK(kstage_query_release(s.stage, gone));
  KS_FAILS(kstage_query_release(s.stage, gone), KSTAGE_INVALID_HANDLE, "query handle");
  KS_FAILS(kstage_query_release(s.stage, 0), KSTAGE_INVALID_HANDLE, "query handle 0");

  uint64_t n = 42;
  KS_FAILS(kstage_query_count(s.stage, gone, &n), KSTAGE_INVALID_HANDLE, "query handle");
  REQUIRE(n == 42);
  kstage_path_list_t list = 0;
  KS_FAILS(kstage_query_get_paths(s.stage, gone, &list), KSTAGE_INVALID_HANDLE, "query handle");
  REQUIRE(list == 0);
  KS_FAILS(kstage_query_count(s.stage, q, nullptr), KSTAGE_INVALID_ARGUMENT, "count is NULL");

  // Using the released query in a write, a delete and a read.
  std::vector<float> v{5.f, 6.f};
  int64_t shape[1] = {2};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attribute(s.stage, gone, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_HANDLE, "query handle");
  KS_FAILS(kstage_delete_attributes(s.stage, gone, &a, 1, 2, &op), KSTAGE_INVALID_HANDLE,
           "query handle");
  REQUIRE(op == 0);
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, gone, &a, 1, nullptr, &r), KSTAGE_INVALID_HANDLE,
           "query handle");
  REQUIRE(r == 0);
  // A path list handle is not a query.
  kstage_path_list_t pl = path_list(s, p);
  KS_FAILS(kstage_query_count(s.stage, pl, &n), KSTAGE_INVALID_HANDLE, "query handle");
  KS_FAILS(kstage_read_attributes(s.stage, pl, &a, 1, nullptr, &r), KSTAGE_INVALID_HANDLE,
           "query handle");
  KS_OK(kstage_path_list_release(s.stage, pl));

  REQUIRE(s.fingerprint(q, {a}) == before);
  s.seal(2);
  auto vals = s.floats(q, a);
  REQUIRE(vals[p[0]] == std::vector<float>{1.f});
  REQUIRE(vals[p[1]] == std::vector<float>{2.f});
}
