// SPDX-License-Identifier: Apache-2.0
// Handles: 0, garbage, wrong kind, another stage's, released and destroyed
// handles all give KSTAGE_INVALID_HANDLE naming the kind, never a crash, and
// leave out-parameters and the stage untouched. Also: stage lifecycle and
// config validation, kstage_wait / kstage_op_error on a good op, status
// strings and the version number.
#include "support.hpp"

#include <cstring>
#include <random>
#include <set>

using namespace kstage_test;

namespace {

constexpr uint64_t kSentinel = 0xDEADBEEFCAFEF00Dull;

// A stage with one live object of every kind: a sealed float3 column "points"
// on /h_0../h_3, a query over them, a path list, an open read with one
// unfetched group, a fetched (held) group and an unreleased op.
struct Live {
  Stage& s;
  std::vector<kstage_path_t> prims;
  kstage_token_t attr = 0;
  kstage_query_t query = 0;
  kstage_path_list_t list = 0;
  kstage_read_t read = 0;    // one group left to fetch
  kstage_group_t group = 0;  // fetched, held
  kstage_op_t op = 0;        // a completed write, unreleased
  std::vector<float> data = std::vector<float>(12, 1.f);
  int64_t shape[1] = {4};
  DLTensor t{};
  kstage_write_data_t w = kstage_write_data_init();

  explicit Live(Stage& stage) : s(stage) {
    prims = s.paths("/h", 4);
    attr = s.token("points");
    query = s.query(prims);
    s.write_f32(query, attr, 1, std::vector<float>(12, 0.5f), 3);
    s.seal(1);
    KS_OK(kstage_path_list_create(s.stage, prims.data(), prims.size(), &list));
    t = tensor(data.data(), f32(3), 1, shape);
    w = write_data(&t);
    // The op writes at ordinal 5, which stays unsealed.
    KS_OK(kstage_write_attribute(s.stage, query, attr, 5, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    // Completed (on a device the copy out of `data` runs later; `data` dies
    // with this object, possibly before the stage).
    KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
    kstage_read_t first = 0;
    KS_OK(kstage_read_attributes(s.stage, query, &attr, 1, nullptr, &first));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, first, 0, &g));
    group = g.handle;
    KS_OK(kstage_release_read(s.stage, first));
    KS_OK(kstage_read_attributes(s.stage, query, &attr, 1, nullptr, &read));
  }

  std::set<uint64_t> handles() const { return {s.stage, query, list, read, group, op}; }
};

// Handle-like garbage: 0, all ones, random 64-bit values, and random values
// carrying each kind tag in the top byte (1..6) so the tag alone cannot make
// them look live. Values equal to `live` handles are skipped.
std::vector<uint64_t> bad_handles(const std::set<uint64_t>& live) {
  std::vector<uint64_t> v = {0, UINT64_MAX, 1, uint64_t(1) << 56,
                             (uint64_t(3) << 56) | 0xFFFFFFFFull};
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 40; ++i) v.push_back(rng());
  for (uint64_t tag = 0; tag <= 7; ++tag)
    for (int i = 0; i < 6; ++i) v.push_back((tag << 56) | (rng() >> 8 | (uint64_t(1) << 40)));
  std::vector<uint64_t> out;
  for (uint64_t h : v)
    if (!live.count(h)) out.push_back(h);
  return out;
}

#define KS_BAD_HANDLE(expr, kind) KS_FAILS(expr, KSTAGE_INVALID_HANDLE, kind)

// Every function that takes a query handle, given `q`.
void expect_bad_query(Live& l, kstage_query_t q) {
  kstage_stage_t st = l.s.stage;
  uint64_t count = kSentinel;
  kstage_path_list_t list = kSentinel;
  kstage_op_t op = kSentinel;
  kstage_read_t read = kSentinel;
  KS_BAD_HANDLE(kstage_query_count(st, q, &count), "query handle");
  KS_BAD_HANDLE(kstage_query_get_paths(st, q, &list), "query handle");
  KS_BAD_HANDLE(kstage_query_release(st, q), "query handle");
  KS_BAD_HANDLE(kstage_write_attribute(st, q, l.attr, 7, &l.w, KSTAGE_PRIM_MODE_UPSERT, &op),
                "query handle");
  KS_BAD_HANDLE(kstage_write_attributes(st, q, &l.attr, &l.w, 1, 7, KSTAGE_PRIM_MODE_UPSERT, &op),
                "query handle");
  KS_BAD_HANDLE(kstage_delete_attributes(st, q, &l.attr, 1, 7, &op), "query handle");
  KS_BAD_HANDLE(kstage_delete_attributes(st, q, nullptr, 0, 7, &op), "query handle");
  KS_BAD_HANDLE(kstage_read_attributes(st, q, &l.attr, 1, nullptr, &read), "query handle");
  REQUIRE(count == kSentinel);
  REQUIRE(list == kSentinel);
  REQUIRE(op == kSentinel);
  REQUIRE(read == kSentinel);
}

void expect_bad_read(Live& l, kstage_read_t r) {
  kstage_read_group_t g;
  std::memset(&g, 0xAB, sizeof g);
  kstage_read_group_t before;
  std::memcpy(&before, &g, sizeof g);
  KS_BAD_HANDLE(kstage_fetch_read_next(l.s.stage, r, 0, &g), "read handle");
  KS_BAD_HANDLE(kstage_fetch_read_next(l.s.stage, r, KSTAGE_TIMEOUT_INFINITE, &g), "read handle");
  KS_BAD_HANDLE(kstage_release_read(l.s.stage, r), "read handle");
  REQUIRE(std::memcmp(&g, &before, sizeof g) == 0);
}

void expect_bad_group(Live& l, kstage_group_t g) {
  KS_BAD_HANDLE(kstage_release_group(l.s.stage, g), "group handle");
}

void expect_bad_op(Live& l, kstage_op_t op) {
  const char* msg = "sentinel";
  KS_BAD_HANDLE(kstage_wait(l.s.stage, op, 0), "op handle");
  KS_BAD_HANDLE(kstage_wait(l.s.stage, op, KSTAGE_TIMEOUT_INFINITE), "op handle");
  KS_BAD_HANDLE(kstage_op_error(l.s.stage, op, &msg), "op handle");
  KS_BAD_HANDLE(kstage_release_op(l.s.stage, op), "op handle");
  REQUIRE(std::string(msg) == "sentinel");
}

void expect_bad_list(Live& l, kstage_path_list_t list) {
  const kstage_path_t* ids = reinterpret_cast<const kstage_path_t*>(&kSentinel);
  uint64_t n = kSentinel;
  kstage_query_t q = kSentinel;
  kstage_filter_t f{};
  f.path_in = list;
  KS_BAD_HANDLE(kstage_path_list_get(l.s.stage, list, &ids, &n), "path list handle");
  KS_BAD_HANDLE(kstage_path_list_retain(l.s.stage, list), "path list handle");
  KS_BAD_HANDLE(kstage_path_list_release(l.s.stage, list), "path list handle");
  if (list != 0) {  // path_in = 0 means "no constraint"
    KS_BAD_HANDLE(kstage_query_filter(l.s.stage, &f, &q), "path list handle");
  }
  REQUIRE(ids == reinterpret_cast<const kstage_path_t*>(&kSentinel));
  REQUIRE(n == kSentinel);
  REQUIRE(q == kSentinel);
}

// Every entry point that takes a stage handle, given `bad` and otherwise
// valid arguments taken from `l`.
void expect_bad_stage(Live& l, kstage_stage_t bad) {
  uint64_t out = kSentinel;
  const char* str = "sentinel";
  size_t len = 99;
  const kstage_path_t* ids = nullptr;
  kstage_filter_t all{};
  kstage_read_group_t g;
  std::memset(&g, 0xAB, sizeof g);
  kstage_read_group_t before;
  std::memcpy(&before, &g, sizeof g);
  KS_BAD_HANDLE(kstage_intern_token(bad, "points", KSTAGE_NUL_TERMINATED, &out), "stage handle");
  KS_BAD_HANDLE(kstage_intern_path(bad, "/h_0", KSTAGE_NUL_TERMINATED, &out), "stage handle");
  KS_BAD_HANDLE(kstage_token_string(bad, l.attr, &str, &len), "stage handle");
  KS_BAD_HANDLE(kstage_path_string(bad, l.prims[0], &str, &len), "stage handle");
  KS_BAD_HANDLE(kstage_path_list_create(bad, l.prims.data(), l.prims.size(), &out), "stage handle");
  KS_BAD_HANDLE(kstage_path_list_get(bad, l.list, &ids, &out), "stage handle");
  KS_BAD_HANDLE(kstage_path_list_retain(bad, l.list), "stage handle");
  KS_BAD_HANDLE(kstage_path_list_release(bad, l.list), "stage handle");
  KS_BAD_HANDLE(kstage_query_paths(bad, l.prims.data(), l.prims.size(), &out), "stage handle");
  KS_BAD_HANDLE(kstage_query_filter(bad, &all, &out), "stage handle");
  KS_BAD_HANDLE(kstage_query_count(bad, l.query, &out), "stage handle");
  KS_BAD_HANDLE(kstage_query_get_paths(bad, l.query, &out), "stage handle");
  KS_BAD_HANDLE(kstage_query_release(bad, l.query), "stage handle");
  KS_BAD_HANDLE(
      kstage_write_attribute(bad, l.query, l.attr, 7, &l.w, KSTAGE_PRIM_MODE_UPSERT, &out),
      "stage handle");
  KS_BAD_HANDLE(
      kstage_write_attributes(bad, l.query, &l.attr, &l.w, 1, 7, KSTAGE_PRIM_MODE_UPSERT, &out),
      "stage handle");
  KS_BAD_HANDLE(kstage_delete_attributes(bad, l.query, nullptr, 0, 7, &out), "stage handle");
  KS_BAD_HANDLE(kstage_advance_write_floor(bad, 7, nullptr, 0), "stage handle");
  KS_BAD_HANDLE(kstage_get_write_floor(bad, 0, &out), "stage handle");
  KS_BAD_HANDLE(kstage_read_attributes(bad, l.query, &l.attr, 1, nullptr, &out), "stage handle");
  KS_BAD_HANDLE(kstage_fetch_read_next(bad, l.read, 0, &g), "stage handle");
  KS_BAD_HANDLE(kstage_release_group(bad, l.group), "stage handle");
  KS_BAD_HANDLE(kstage_release_read(bad, l.read), "stage handle");
  KS_BAD_HANDLE(kstage_wait(bad, l.op, 0), "stage handle");
  KS_BAD_HANDLE(kstage_wait(bad, l.op, KSTAGE_TIMEOUT_INFINITE), "stage handle");
  KS_BAD_HANDLE(kstage_op_error(bad, l.op, &str), "stage handle");
  KS_BAD_HANDLE(kstage_release_op(bad, l.op), "stage handle");
  KS_BAD_HANDLE(kstage_destroy(bad), "stage handle");
  REQUIRE(out == kSentinel);
  REQUIRE(std::string(str) == "sentinel");
  REQUIRE(len == 99);
  REQUIRE(ids == nullptr);
  REQUIRE(std::memcmp(&g, &before, sizeof g) == 0);
}

// The live objects of `l` still work (nothing above released them by accident).
void expect_all_live(Live& l) {
  uint64_t n = 0;
  KS_OK(kstage_query_count(l.s.stage, l.query, &n));
  REQUIRE(n == 4);
  const kstage_path_t* ids = nullptr;
  KS_OK(kstage_path_list_get(l.s.stage, l.list, &ids, &n));
  REQUIRE(n == 4);
  REQUIRE(ids[3] == l.prims[3]);
  KS_OK(kstage_wait(l.s.stage, l.op, 0));
}

}  // namespace

TEST_CASE("handle 0 and garbage handles give INVALID_HANDLE naming the kind", "[handles][errors]") {
  Stage s(host_execution());
  Live l(s);
  const std::string before = s.fingerprint(l.query, {l.attr});
  for (uint64_t h : bad_handles(l.handles())) {
    INFO("handle " << h);
    expect_bad_stage(l, h);
    expect_bad_query(l, h);
    expect_bad_read(l, h);
    expect_bad_group(l, h);
    expect_bad_op(l, h);
    expect_bad_list(l, h);
  }
  expect_all_live(l);
  // Nothing was written, deleted or sealed by any of the rejected calls.
  REQUIRE(s.fingerprint(l.query, {l.attr}) == before);
  s.seal(10);
  auto v = s.floats(l.query, l.attr);
  REQUIRE(v.size() == 4);
  for (auto& [p, f] : v) REQUIRE(f == std::vector<float>{1.f, 1.f, 1.f});  // the op at 5 only
  // The held group and the remaining read still work and release once.
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, l.read, 0, &g));
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_group(s.stage, l.group));
  KS_OK(kstage_release_read(s.stage, l.read));
  KS_OK(kstage_release_op(s.stage, l.op));
  KS_OK(kstage_path_list_release(s.stage, l.list));
  KS_OK(kstage_query_release(s.stage, l.query));
}

TEST_CASE("a handle of one kind is refused where another kind is expected", "[handles][errors]") {
  Stage s(host_execution());
  Live l(s);
  const std::string before = s.fingerprint(l.query, {l.attr});
  // A query handle everywhere else.
  expect_bad_read(l, l.query);
  expect_bad_group(l, l.query);
  expect_bad_op(l, l.query);
  expect_bad_list(l, l.query);
  expect_bad_stage(l, l.query);
  // Every other kind where a query is expected.
  for (uint64_t h : {uint64_t(s.stage), l.list, l.read, l.group, l.op}) expect_bad_query(l, h);
  // Reads, groups, ops, path lists and the stage handle swapped around.
  for (uint64_t h : {uint64_t(s.stage), l.list, l.group, l.op}) expect_bad_read(l, h);
  for (uint64_t h : {uint64_t(s.stage), l.list, l.read, l.op}) expect_bad_group(l, h);
  for (uint64_t h : {uint64_t(s.stage), l.list, l.read, l.group}) expect_bad_op(l, h);
  for (uint64_t h : {uint64_t(s.stage), l.read, l.group, l.op}) expect_bad_list(l, h);
  for (uint64_t h : {l.list, l.read, l.group, l.op}) expect_bad_stage(l, h);
  // Token and path ids are not handles either.
  expect_bad_query(l, l.attr);
  expect_bad_list(l, l.prims[0]);
  expect_all_live(l);
  REQUIRE(s.fingerprint(l.query, {l.attr}) == before);
  // Each object still releases exactly once with its own function.
  KS_OK(kstage_release_group(s.stage, l.group));
  KS_OK(kstage_release_read(s.stage, l.read));
  KS_OK(kstage_release_op(s.stage, l.op));
  KS_OK(kstage_path_list_release(s.stage, l.list));
  KS_OK(kstage_query_release(s.stage, l.query));
}

TEST_CASE("handles of another stage are refused", "[handles][errors]") {
  const kstage_host_execution_t exec = host_execution();
  Stage a(exec), b(exec);
  Live la(a);
  Live lb(b);  // same paths and token names, so ids coincide: only the handles differ
  REQUIRE(la.attr == lb.attr);
  REQUIRE(la.prims == lb.prims);
  const std::string before_b = b.fingerprint(lb.query, {lb.attr});
  // Stage A's handles used with stage B (whose Live objects give valid arguments).
  expect_bad_query(lb, la.query);
  expect_bad_read(lb, la.read);
  expect_bad_group(lb, la.group);
  expect_bad_op(lb, la.op);
  expect_bad_list(lb, la.list);
  // And the other way round.
  expect_bad_query(la, lb.query);
  expect_bad_read(la, lb.read);
  expect_bad_group(la, lb.group);
  expect_bad_op(la, lb.op);
  expect_bad_list(la, lb.list);
  expect_all_live(la);
  expect_all_live(lb);
  REQUIRE(b.fingerprint(lb.query, {lb.attr}) == before_b);
}

TEST_CASE("released handles are stale; a second release is an error, not a crash",
          "[handles][errors]") {
  Stage s(host_execution());
  Live l(s);
  // A second group of the open read, so a group can be released twice while the read lives.
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, l.read, 0, &g));
  REQUIRE(g.handle != 0);
  REQUIRE(g.handle != l.group);
  const std::vector<float> before_bytes = group_floats(g, 0, 12);

  KS_OK(kstage_release_group(s.stage, l.group));
  KS_FAILS(kstage_release_group(s.stage, l.group), KSTAGE_INVALID_HANDLE, "group handle");
  expect_bad_group(l, l.group);

  KS_OK(kstage_release_read(s.stage, l.read));
  KS_FAILS(kstage_release_read(s.stage, l.read), KSTAGE_INVALID_HANDLE, "read handle");
  expect_bad_read(l, l.read);
  // Releasing the read does not release the group fetched from it.
  REQUIRE(group_floats(g, 0, 12) == before_bytes);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_FAILS(kstage_release_group(s.stage, g.handle), KSTAGE_INVALID_HANDLE, "group handle");

  KS_OK(kstage_release_op(s.stage, l.op));
  KS_FAILS(kstage_release_op(s.stage, l.op), KSTAGE_INVALID_HANDLE, "op handle");
  expect_bad_op(l, l.op);

  // A path list with two references is live until the second release.
  KS_OK(kstage_path_list_retain(s.stage, l.list));
  KS_OK(kstage_path_list_release(s.stage, l.list));
  uint64_t n = 0;
  const kstage_path_t* ids = nullptr;
  KS_OK(kstage_path_list_get(s.stage, l.list, &ids, &n));
  REQUIRE(n == 4);
  KS_OK(kstage_path_list_release(s.stage, l.list));
  KS_FAILS(kstage_path_list_release(s.stage, l.list), KSTAGE_INVALID_HANDLE, "path list handle");
  expect_bad_list(l, l.list);

  // A path list made from a query outlives the query.
  kstage_path_list_t from_query = 0;
  KS_OK(kstage_query_get_paths(s.stage, l.query, &from_query));
  KS_OK(kstage_query_release(s.stage, l.query));
  KS_FAILS(kstage_query_release(s.stage, l.query), KSTAGE_INVALID_HANDLE, "query handle");
  expect_bad_query(l, l.query);
  KS_OK(kstage_path_list_get(s.stage, from_query, &ids, &n));
  REQUIRE(n == 4);
  REQUIRE(ids[0] == l.prims[0]);
  KS_OK(kstage_path_list_release(s.stage, from_query));
  KS_FAILS(kstage_path_list_get(s.stage, from_query, &ids, &n), KSTAGE_INVALID_HANDLE,
           "path list handle");

  // Handles are never reused: new objects get new handles.
  kstage_query_t q2 = s.query(l.prims);
  REQUIRE(q2 != l.query);
  KS_OK(kstage_query_release(s.stage, q2));
}

namespace {
int g_deleted = 0;
void count_deleter(DLManagedTensorVersioned* t) {
  ++g_deleted;
  t->dl_tensor.data = nullptr;
}
}  // namespace

TEST_CASE("kstage_destroy frees every live handle; they all go stale", "[handles][lifecycle]") {
  const kstage_host_execution_t exec = host_execution();
  kstage_config_t config = kstage_config_init();
  config.host_execution = exec;
  kstage_stage_t st = 0;
  KS_OK(kstage_create(&config, &st));
  REQUIRE(st != 0);

  // Objects of every kind, several of each, never released.
  std::vector<kstage_path_t> prims;
  for (int i = 0; i < 8; ++i) {
    kstage_path_t p = 0;
    const std::string name = "/d_" + std::to_string(i);
    KS_OK(kstage_intern_path(st, name.c_str(), KSTAGE_NUL_TERMINATED, &p));
    prims.push_back(p);
  }
  kstage_token_t pos = 0, mass = 0;
  KS_OK(kstage_intern_token(st, "points", KSTAGE_NUL_TERMINATED, &pos));
  KS_OK(kstage_intern_token(st, "mass", KSTAGE_NUL_TERMINATED, &mass));
  kstage_query_t q = 0, q_half = 0, q_filter = 0;
  KS_OK(kstage_query_paths(st, prims.data(), prims.size(), &q));
  KS_OK(kstage_query_paths(st, prims.data(), 4, &q_half));

  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  int64_t shape[1] = {8};
  DLTensor t = tensor(v.data(), f32(3), 1, shape);
  kstage_write_data_t w = write_data(&t);
  std::vector<kstage_op_t> ops;
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(st, q, pos, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  ops.push_back(op);
  KS_OK(kstage_advance_write_floor(st, 1, nullptr, 0));
  kstage_filter_t everything{};
  KS_OK(kstage_query_filter(st, &everything, &q_filter));

  // Pending, unsealed writes (client tensor and a managed tensor) and a delete.
  KS_OK(kstage_write_attribute(st, q, pos, 3, &w, KSTAGE_PRIM_MODE_UPDATE, &op));
  ops.push_back(op);
  std::vector<float> m(8, 2.f);
  int64_t mshape[1] = {8};
  DLManagedTensorVersioned managed{};
  managed.version.major = DLPACK_MAJOR_VERSION;
  managed.version.minor = DLPACK_MINOR_VERSION;
  managed.deleter = count_deleter;
  managed.dl_tensor = tensor(m.data(), f32(), 1, mshape);
  DLManagedTensorVersioned* mp = &managed;
  kstage_write_data_t mw = kstage_write_data_init();
  mw.managed_tensors = &mp;
  mw.tensor_count = 1;
  g_deleted = 0;
  KS_OK(kstage_write_attribute(st, q, mass, 4, &mw, KSTAGE_PRIM_MODE_UPSERT, &op));
  ops.push_back(op);
  KS_OK(kstage_delete_attributes(st, q_half, &pos, 1, 5, &op));
  ops.push_back(op);

  // Path lists: created, retained (two references), and from a query.
  kstage_path_list_t l1 = 0, l2 = 0;
  KS_OK(kstage_path_list_create(st, prims.data(), prims.size(), &l1));
  KS_OK(kstage_path_list_retain(st, l1));
  KS_OK(kstage_query_get_paths(st, q, &l2));

  // Reads: one untouched (unfetched groups), one with a fetched, held group.
  kstage_read_t r_unfetched = 0, r_fetched = 0;
  KS_OK(kstage_read_attributes(st, q, &pos, 1, nullptr, &r_unfetched));
  KS_OK(kstage_read_attributes(st, q, &pos, 1, nullptr, &r_fetched));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(st, r_fetched, 0, &g));
  REQUIRE(g.prim_count == 8);
  // A compact read too (its own buffer), fetched and held.
  kstage_read_desc_t compact = kstage_read_desc_init();
  compact.compact = true;
  kstage_read_t r_compact = 0;
  KS_OK(kstage_read_attributes(st, q, &pos, 1, &compact, &r_compact));
  kstage_read_group_t gc{};
  KS_OK(kstage_fetch_read_next(st, r_compact, 0, &gc));

  KS_OK(kstage_destroy(st));
  REQUIRE(g_deleted == 1);  // the managed tensor's deleter ran exactly once

  // With the destroyed stage handle, everything is INVALID_HANDLE.
  uint64_t out = kSentinel;
  const kstage_path_t* ids = nullptr;
  kstage_read_group_t g2{};
  const char* msg = nullptr;
  KS_FAILS(kstage_query_count(st, q, &out), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_query_release(st, q_filter), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_path_list_get(st, l1, &ids, &out), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_path_list_release(st, l2), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_fetch_read_next(st, r_unfetched, 0, &g2), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_release_read(st, r_fetched), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_release_group(st, g.handle), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_release_group(st, gc.handle), KSTAGE_INVALID_HANDLE, "stage handle");
  for (kstage_op_t o : ops) {
    KS_FAILS(kstage_wait(st, o, 0), KSTAGE_INVALID_HANDLE, "stage handle");
    KS_FAILS(kstage_op_error(st, o, &msg), KSTAGE_INVALID_HANDLE, "stage handle");
    KS_FAILS(kstage_release_op(st, o), KSTAGE_INVALID_HANDLE, "stage handle");
  }
  KS_FAILS(kstage_intern_token(st, "points", KSTAGE_NUL_TERMINATED, &out), KSTAGE_INVALID_HANDLE,
           "stage handle");
  KS_FAILS(kstage_advance_write_floor(st, 9, nullptr, 0), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_get_write_floor(st, 0, &out), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_destroy(st), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_destroy(st), KSTAGE_INVALID_HANDLE, "stage handle");
  REQUIRE(out == kSentinel);
  REQUIRE(msg == nullptr);

  // The dead stage's handles are not live on a new stage either, and the new
  // stage does not see the old one's data or floors.
  Stage fresh(exec);
  Live l(fresh);
  for (kstage_query_t h : {q, q_half, q_filter}) expect_bad_query(l, h);
  for (kstage_read_t h : {r_unfetched, r_fetched, r_compact}) expect_bad_read(l, h);
  for (kstage_group_t h : {g.handle, gc.handle}) expect_bad_group(l, h);
  for (kstage_op_t h : ops) expect_bad_op(l, h);
  for (kstage_path_list_t h : {l1, l2}) expect_bad_list(l, h);
  expect_bad_stage(l, st);
  REQUIRE(fresh.floor(0) == 1);
  REQUIRE(fresh.values(l.query, fresh.token("mass")).empty());
}

TEST_CASE("kstage_destroy of a stage with nothing in it, and twice", "[handles][lifecycle]") {
  kstage_config_t config = kstage_config_init();
  config.host_execution = host_execution();
  kstage_stage_t a = 0, b = 0;
  KS_OK(kstage_create(&config, &a));
  KS_OK(kstage_create(&config, &b));
  REQUIRE(a != 0);
  REQUIRE(b != 0);
  REQUIRE(a != b);
  KS_OK(kstage_destroy(a));
  KS_FAILS(kstage_destroy(a), KSTAGE_INVALID_HANDLE, "stage handle");
  // Destroying one stage leaves the other alive.
  kstage_token_t t = 0;
  KS_OK(kstage_intern_token(b, "x", KSTAGE_NUL_TERMINATED, &t));
  KS_OK(kstage_destroy(b));
  KS_FAILS(kstage_destroy(b), KSTAGE_INVALID_HANDLE, "stage handle");
  KS_FAILS(kstage_destroy(0), KSTAGE_INVALID_HANDLE, "stage handle");
}

TEST_CASE("kstage_wait and kstage_op_error on a successful op", "[handles][ops]") {
  Stage s(host_execution());
  auto prims = s.paths("/w", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("points");
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  int64_t shape[1] = {3};
  DLTensor t = tensor(v.data(), f32(3), 1, shape);
  kstage_write_data_t w = write_data(&t);
  kstage_op_t op = kSentinel;
  KS_OK(kstage_write_attribute(s.stage, q, attr, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  REQUIRE(op != kSentinel);
  REQUIRE(op != 0);
  // A poll: host ops are complete when submitted; a device op may still be copying.
  const kstage_status_t polled = kstage_wait(s.stage, op, 0);
  REQUIRE((polled == KSTAGE_OK || (kOnDevice && polled == KSTAGE_TIMEOUT)));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_wait(s.stage, op, 1000));  // waiting again is fine
  const char* msg = nullptr;
  KS_OK(kstage_op_error(s.stage, op, &msg));
  REQUIRE(msg != nullptr);
  REQUIRE(std::string(msg).empty());
  KS_FAILS(kstage_op_error(s.stage, op, nullptr), KSTAGE_INVALID_ARGUMENT, "message is NULL");

  // A delete op and a batch op behave the same.
  kstage_op_t del = 0, batch = 0;
  KS_OK(kstage_delete_attributes(s.stage, q, &attr, 1, 2, &del));
  KS_OK(kstage_wait(s.stage, del, 0));
  KS_OK(kstage_op_error(s.stage, del, &msg));
  REQUIRE(std::string(msg).empty());
  KS_OK(kstage_write_attributes(s.stage, q, &attr, &w, 1, 3, KSTAGE_PRIM_MODE_UPSERT, &batch));
  KS_OK(kstage_wait(s.stage, batch, KSTAGE_TIMEOUT_INFINITE));
  REQUIRE(del != op);
  REQUIRE(batch != op);
  REQUIRE(batch != del);
  KS_OK(kstage_release_op(s.stage, op));
  KS_OK(kstage_release_op(s.stage, del));
  KS_OK(kstage_release_op(s.stage, batch));
  // The op outcome did not depend on being waited for or released.
  s.seal(3);
  auto f = s.floats(q, attr);
  REQUIRE(f.size() == 3);
  REQUIRE(f[prims[2]] == std::vector<float>{7, 8, 9});
}

TEST_CASE("NULL out-parameters are INVALID_ARGUMENT and consume nothing", "[handles][errors]") {
  Stage s(host_execution());
  Live l(s);
  const kstage_path_t* ids = nullptr;
  uint64_t n = 0;
  KS_FAILS(kstage_query_count(s.stage, l.query, nullptr), KSTAGE_INVALID_ARGUMENT, "count is NULL");
  KS_FAILS(kstage_query_get_paths(s.stage, l.query, nullptr), KSTAGE_INVALID_ARGUMENT,
           "paths is NULL");
  KS_FAILS(kstage_query_paths(s.stage, l.prims.data(), 4, nullptr), KSTAGE_INVALID_ARGUMENT,
           "query is NULL");
  kstage_filter_t all{};
  KS_FAILS(kstage_query_filter(s.stage, &all, nullptr), KSTAGE_INVALID_ARGUMENT, "query is NULL");
  KS_FAILS(kstage_query_filter(s.stage, nullptr, &n), KSTAGE_INVALID_ARGUMENT, "filter is NULL");
  KS_FAILS(kstage_path_list_create(s.stage, l.prims.data(), 4, nullptr), KSTAGE_INVALID_ARGUMENT,
           "list is NULL");
  KS_FAILS(kstage_path_list_get(s.stage, l.list, nullptr, &n), KSTAGE_INVALID_ARGUMENT,
           "paths is NULL");
  KS_FAILS(kstage_path_list_get(s.stage, l.list, &ids, nullptr), KSTAGE_INVALID_ARGUMENT,
           "count is NULL");
  KS_FAILS(kstage_get_write_floor(s.stage, 0, nullptr), KSTAGE_INVALID_ARGUMENT, "ordinal is NULL");
  KS_FAILS(
      kstage_write_attribute(s.stage, l.query, l.attr, 7, &l.w, KSTAGE_PRIM_MODE_UPSERT, nullptr),
      KSTAGE_INVALID_ARGUMENT, "op is NULL");
  KS_FAILS(kstage_write_attributes(s.stage, l.query, &l.attr, &l.w, 1, 7, KSTAGE_PRIM_MODE_UPSERT,
                                   nullptr),
           KSTAGE_INVALID_ARGUMENT, "op is NULL");
  KS_FAILS(kstage_delete_attributes(s.stage, l.query, nullptr, 0, 7, nullptr),
           KSTAGE_INVALID_ARGUMENT, "op is NULL");
  KS_FAILS(kstage_read_attributes(s.stage, l.query, &l.attr, 1, nullptr, nullptr),
           KSTAGE_INVALID_ARGUMENT, "read is NULL");
  KS_FAILS(kstage_fetch_read_next(s.stage, l.read, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "group is NULL");
  KS_FAILS(kstage_op_error(s.stage, l.op, nullptr), KSTAGE_INVALID_ARGUMENT, "message is NULL");
  KS_FAILS(kstage_token_string(s.stage, l.attr, nullptr, nullptr), KSTAGE_INVALID_ARGUMENT,
           "str is NULL");
  KS_FAILS(kstage_path_string(s.stage, l.prims[0], nullptr, nullptr), KSTAGE_INVALID_ARGUMENT,
           "str is NULL");
  KS_FAILS(kstage_intern_path(s.stage, "/x", KSTAGE_NUL_TERMINATED, nullptr),
           KSTAGE_INVALID_ARGUMENT, "path is NULL");
  // The failed fetch consumed no group: the read still has its one group.
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, l.read, 0, &g));
  REQUIRE(g.prim_count == 4);
  KS_FAILS(kstage_fetch_read_next(s.stage, l.read, 0, &g), KSTAGE_END_OF_ITERATION,
           "no more groups");
  KS_OK(kstage_release_group(s.stage, g.handle));
  // The writes rejected for a NULL op left nothing pending.
  s.seal(10);
  auto f = s.floats(l.query, l.attr);
  for (auto& [p, vals] : f) REQUIRE(vals == std::vector<float>{1.f, 1.f, 1.f});  // the op at 5
  REQUIRE(f.size() == 4);  // the rejected delete at 7 did not run
}

TEST_CASE("kstage_status_string names every code; kstage_version matches the header",
          "[handles][status]") {
  const char* names[] = {"KSTAGE_OK",
                         "KSTAGE_INVALID_ARGUMENT",
                         "KSTAGE_INVALID_HANDLE",
                         "KSTAGE_NOT_FOUND",
                         "KSTAGE_ALREADY_EXISTS",
                         "KSTAGE_WRITE_FLOOR_VIOLATION",
                         "KSTAGE_NOT_SUPPORTED",
                         "KSTAGE_END_OF_ITERATION",
                         "KSTAGE_TIMEOUT",
                         "KSTAGE_OUT_OF_MEMORY",
                         "KSTAGE_OUT_OF_RANGE",
                         "KSTAGE_OP_FAILED",
                         "KSTAGE_DEVICE_ERROR",
                         "KSTAGE_INTERNAL"};
  for (kstage_status_t c = 0; c <= 13; ++c) {
    INFO("code " << c);
    REQUIRE(kstage_status_string(c) != nullptr);
    REQUIRE(std::string(kstage_status_string(c)) == names[c]);
  }
  REQUIRE(std::string(kstage_status_string(KSTAGE_WRITE_FLOOR_VIOLATION)) ==
          "KSTAGE_WRITE_FLOOR_VIOLATION");
  REQUIRE(std::string(kstage_status_string(KSTAGE_INTERNAL)) == "KSTAGE_INTERNAL");
  for (kstage_status_t c : {-1, 14, 15, 100, INT32_MAX, INT32_MIN})
    REQUIRE(std::string(kstage_status_string(c)) == "KSTAGE_UNKNOWN_STATUS");
  REQUIRE(kstage_version() == uint32_t(KSTAGE_VERSION_MAJOR * 10000 + KSTAGE_VERSION_MINOR * 100 +
                                       KSTAGE_VERSION_PATCH));
  REQUIRE(kstage_version() == 400);  // 0.4.0
}

TEST_CASE("kstage_create validates its config and out-parameter", "[handles][lifecycle][errors]") {
  kstage_stage_t st = kSentinel;
  {
    kstage_config_t config = kstage_config_init();
    config.struct_size = 0;
    KS_FAILS(kstage_create(&config, &st), KSTAGE_INVALID_ARGUMENT, "struct_size is 0");
    REQUIRE(st == kSentinel);
  }
  for (kstage_host_execution_t bad : {9, 3, -1, INT32_MIN}) {
    kstage_config_t config = kstage_config_init();
    config.host_execution = bad;
    INFO("host_execution " << bad);
    KS_FAILS(kstage_create(&config, &st), KSTAGE_INVALID_ARGUMENT, "host_execution");
    REQUIRE(st == kSentinel);
  }
  kstage_config_t good = kstage_config_init();
  KS_FAILS(kstage_create(&good, nullptr), KSTAGE_INVALID_ARGUMENT, "stage is NULL");
  KS_FAILS(kstage_create(nullptr, nullptr), KSTAGE_INVALID_ARGUMENT, "stage is NULL");

  // NULL config: the defaults.
  KS_OK(kstage_create(nullptr, &st));
  REQUIRE(st != kSentinel);
  REQUIRE(st != 0);
  kstage_token_t t = 0;
  KS_OK(kstage_intern_token(st, "points", KSTAGE_NUL_TERMINATED, &t));
  REQUIRE(t != 0);
  uint64_t floor = kSentinel;
  KS_OK(kstage_get_write_floor(st, 0, &floor));
  REQUIRE(floor == 0);
  KS_OK(kstage_destroy(st));
  // Every valid host execution value creates a stage.
  for (kstage_host_execution_t e : {KSTAGE_HOST_EXECUTION_DEFAULT, KSTAGE_HOST_EXECUTION_SERIAL,
                                    KSTAGE_HOST_EXECUTION_PARALLEL}) {
    kstage_config_t config = kstage_config_init();
    config.host_execution = e;
    kstage_stage_t x = 0;
    KS_OK(kstage_create(&config, &x));
    KS_OK(kstage_destroy(x));
  }
}
