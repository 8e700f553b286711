// SPDX-License-Identifier: Apache-2.0
// Path ranges (kstage_intern_path_range): N paths "<parent>/<prefix><n>" in
// O(1) memory with consecutive ids, names made on demand, the same ids
// whichever way a name is interned, conflicts refused by name; and range
// members as ordinary prims of queries, writes, reads, filters, deletes,
// change ranges and maps.
#include "support.hpp"

#include <cstring>

#include <algorithm>

using namespace kstage_test;

namespace {

kstage_status_t try_range(Stage& s, const char* parent, const char* prefix, uint64_t begin,
                          uint64_t count) {
  kstage_path_t first = 0;
  return kstage_intern_path_range(s.stage, parent, KSTAGE_NUL_TERMINATED, prefix,
                                  KSTAGE_NUL_TERMINATED, begin, count, &first);
}

}  // namespace

TEST_CASE("a range's members have consecutive ids and their names on demand", "[ranges]") {
  Stage s(host_execution());
  const kstage_path_t first = s.range("/world/particles", "p", 0, 1000);
  REQUIRE(s.path_string(first) == "/world/particles/p0");
  REQUIRE(s.path_string(first + 17) == "/world/particles/p17");
  REQUIRE(s.path_string(first + 999) == "/world/particles/p999");
  // The same string, the same id, however it is interned.
  REQUIRE(s.path("/world/particles/p17") == first + 17);
  REQUIRE(s.path("/world/particles/p0") == first);
  REQUIRE(s.range("/world/particles", "p", 0, 1000) == first);  // the same range again
  const char* names[2] = {"/world/particles/p999", "/world/particles/p5"};
  kstage_path_t ids[2] = {0, 0};
  KS_OK(kstage_intern_paths(s.stage, names, nullptr, 2, ids));
  REQUIRE(ids[0] == first + 999);
  REQUIRE(ids[1] == first + 5);
  // Names that are not members: new paths of their own.
  const kstage_path_t padded = s.path("/world/particles/p017"),
                      beyond = s.path("/world/particles/p1000"),
                      other = s.path("/world/particles/q1");
  for (kstage_path_t p : {padded, beyond, other}) REQUIRE((p < first || p >= first + 1000));
  // The next path after the range gets the next id.
  REQUIRE(s.path("/after") == first + 1000 + 3);  // after p017, p1000, q1
  // info and member.
  kstage_path_t f = 0;
  uint64_t count = 0, index = 0;
  KS_OK(kstage_path_range_info(s.stage, first + 42, &f, &count, &index));
  REQUIRE(f == first);
  REQUIRE(count == 1000);
  REQUIRE(index == 42);
  KS_OK(kstage_path_range_info(s.stage, first + 1, nullptr, nullptr, nullptr));
  KS_FAILS(kstage_path_range_info(s.stage, padded, &f, &count, &index), KSTAGE_NOT_FOUND,
           "not a member");
  kstage_path_t m = 0;
  KS_OK(kstage_path_range_member(s.stage, first, 123, &m));
  REQUIRE(m == first + 123);
  KS_FAILS(kstage_path_range_member(s.stage, first, 1000, &m), KSTAGE_INVALID_ARGUMENT,
           "index 1000");
  KS_FAILS(kstage_path_range_member(s.stage, first + 1, 0, &m), KSTAGE_INVALID_ARGUMENT,
           "not the first path");
  // A range that does not start at 0, an empty prefix, top-level members.
  const kstage_path_t offs = s.range("/cells", "", 500, 10);
  REQUIRE(s.path_string(offs) == "/cells/500");
  REQUIRE(s.path("/cells/509") == offs + 9);
  KS_FAILS(kstage_path_range_info(s.stage, s.path("/cells/510"), nullptr, nullptr, nullptr),
           KSTAGE_NOT_FOUND,
           "not a member");  // one past the end: a path of its own
  const kstage_path_t top = s.range("/", "n", 0, 3);
  REQUIRE(s.path_string(top + 2) == "/n2");
  REQUIRE(s.path("/n1") == top + 1);
  // A member as a parent.
  const kstage_path_t child = s.path("/world/particles/p5/velocity");
  REQUIRE(s.path_string(child) == "/world/particles/p5/velocity");
}

TEST_CASE("a range's definition makes the same range in another stage", "[ranges]") {
  Stage s(host_execution());
  struct Made {
    const char* parent;
    const char* prefix;
    uint64_t begin, count;
  };
  // Prefixes that end in digits, no prefix, top level, a deep parent.
  const Made made[] = {{"/world/particles", "p1", 5, 20},
                       {"/cells", "", 500, 10},
                       {"/", "n", 0, 3},
                       {"/a/b/c", "x", 7, 1}};
  std::vector<kstage_path_t> firsts;
  for (const Made& m : made) firsts.push_back(s.range(m.parent, m.prefix, m.begin, m.count));
  Stage other(host_execution());
  for (size_t i = 0; i < firsts.size(); ++i) {
    const char *parent = nullptr, *prefix = nullptr;
    size_t parent_length = 0, prefix_length = 0;
    uint64_t begin = 99;
    KS_OK(kstage_path_range_definition(s.stage, firsts[i], &parent, &parent_length, &prefix,
                                       &prefix_length, &begin));
    CHECK(std::string(parent, parent_length) == made[i].parent);
    CHECK(std::string(prefix) == made[i].prefix);  // NUL-terminated too
    CHECK(prefix_length == std::strlen(made[i].prefix));
    CHECK(begin == made[i].begin);
    uint64_t count = 0;
    KS_OK(kstage_path_range_info(s.stage, firsts[i], nullptr, &count, nullptr));
    // The same arguments make the same paths elsewhere.
    const kstage_path_t again = other.range(parent, prefix, begin, count);
    for (uint64_t k : {uint64_t(0), count - 1})
      CHECK(other.path_string(again + k) == s.path_string(firsts[i] + k));
  }
  KS_OK(kstage_path_range_definition(s.stage, firsts[0], nullptr, nullptr, nullptr, nullptr,
                                     nullptr));
  const char* untouched = "untouched";
  const char* parent = untouched;
  KS_FAILS(kstage_path_range_definition(s.stage, firsts[0] + 1, &parent, nullptr, nullptr, nullptr,
                                        nullptr),
           KSTAGE_INVALID_ARGUMENT, "not the first path of a path range");
  CHECK(parent == untouched);
  KS_FAILS(kstage_path_range_definition(s.stage, s.path("/plain"), &parent, nullptr, nullptr,
                                        nullptr, nullptr),
           KSTAGE_INVALID_ARGUMENT, "not the first path");
  KS_FAILS(kstage_path_range_definition(0, firsts[0], &parent, nullptr, nullptr, nullptr, nullptr),
           KSTAGE_INVALID_HANDLE, "");
}

TEST_CASE("a range that is too big or badly named is refused and interns nothing",
          "[ranges][errors]") {
  Stage s(host_execution());
  kstage_path_t first = 77;
  KS_FAILS(kstage_intern_path_range(s.stage, "/a", KSTAGE_NUL_TERMINATED, "p",
                                    KSTAGE_NUL_TERMINATED, 0, 0, &first),
           KSTAGE_INVALID_ARGUMENT, "count 0");
  KS_FAILS(kstage_intern_path_range(s.stage, "/a", KSTAGE_NUL_TERMINATED, "p",
                                    KSTAGE_NUL_TERMINATED, 0, uint64_t(1) << 32, &first),
           KSTAGE_INVALID_ARGUMENT, "2^32 - 1");
  KS_FAILS(kstage_intern_path_range(s.stage, "/a", KSTAGE_NUL_TERMINATED, "p/q",
                                    KSTAGE_NUL_TERMINATED, 0, 5, &first),
           KSTAGE_INVALID_ARGUMENT, "prefix 'p' holds a '/' at byte 1");
  KS_FAILS(kstage_intern_path_range(s.stage, "a", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED,
                                    0, 5, &first),
           KSTAGE_INVALID_ARGUMENT, "not absolute");
  KS_FAILS(kstage_intern_path_range(s.stage, "/a", KSTAGE_NUL_TERMINATED, "p",
                                    KSTAGE_NUL_TERMINATED, UINT64_MAX, 2, &first),
           KSTAGE_INVALID_ARGUMENT, "overflows");
  KS_FAILS(kstage_intern_path_range(s.stage, "/a", KSTAGE_NUL_TERMINATED, nullptr, 3, 0, 5, &first),
           KSTAGE_INVALID_ARGUMENT, "prefix is NULL");
  KS_FAILS(kstage_intern_path_range(s.stage, "/a", KSTAGE_NUL_TERMINATED, "p",
                                    KSTAGE_NUL_TERMINATED, 0, 5, nullptr),
           KSTAGE_INVALID_ARGUMENT, "first");
  KS_FAILS(kstage_intern_path_range(0, "/a", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0,
                                    5, &first),
           KSTAGE_INVALID_HANDLE, "stage");
  REQUIRE(first == 77);
  REQUIRE(s.path("/probe") == 1);  // nothing above took an id
}

TEST_CASE("ranges that could name a path interned before are refused, naming it",
          "[ranges][errors]") {
  Stage s(host_execution());
  // An explicit member, checked by lookups (few members) or by a scan (many).
  const kstage_path_t p5 = s.path("/w/p5");
  KS_FAILS(try_range(s, "/w", "p", 0, 10), KSTAGE_ALREADY_EXISTS,
           "its member '/w/p5' was interned before");
  KS_FAILS(try_range(s, "/w", "p", 0, 100000), KSTAGE_ALREADY_EXISTS, "'/w/p5'");
  // Beyond it, or another prefix: fine.
  const kstage_path_t after = s.range("/w", "p", 6, 100);
  REQUIRE(s.path("/w/p5") == p5);
  REQUIRE(s.path("/w/p6") == after);
  // An ancestor made for another path.
  s.path("/v/p3/x");
  KS_FAILS(try_range(s, "/v", "p", 0, 10), KSTAGE_ALREADY_EXISTS,
           "'/v/p3' was interned before (as the ancestor");
  // Ranges whose names could meet: overlapping numbers, or one prefix starting the other.
  KS_FAILS(try_range(s, "/w", "p", 100, 10), KSTAGE_ALREADY_EXISTS, "'/w/p[6..105]'");
  KS_FAILS(try_range(s, "/w", "p1", 0, 10), KSTAGE_ALREADY_EXISTS, "could be those of the range");
  // An empty prefix and "1": "1" 5 is "15", a number the empty prefix can make.
  s.range("/w", "", 0, 10);
  KS_FAILS(try_range(s, "/w", "1", 0, 10), KSTAGE_ALREADY_EXISTS,
           "could be those of the range '/w/[0..9]'");
  // Prefixes that can never name the same path are fine: "p" and "p0" (no leading zeros),
  // "p" and "px", "" and "p".
  s.range("/w", "p0", 0, 10);
  s.range("/w", "px", 0, 10);
  const kstage_path_t disjoint = s.range("/w", "p", 106, 10);
  REQUIRE(s.path_string(disjoint) == "/w/p106");
  const kstage_path_t q = s.range("/w", "q", 0, 10);
  REQUIRE(s.path("/w/q3") == q + 3);
  // The same check by lookups, one per member: chosen when the stage holds far more paths
  // than the range has members (here 1500 paths, 10 members).
  for (int i = 0; i < 1500; ++i) s.path("/lk/q" + std::to_string(i));
  s.path("/lk/p3");
  KS_FAILS(try_range(s, "/lk", "p", 0, 10), KSTAGE_ALREADY_EXISTS,
           "its member '/lk/p3' was interned before");
  REQUIRE(s.path_string(s.range("/lk", "p", 4, 10)) == "/lk/p4");
  // A name that ends in a digit under another parent does not matter.
  s.path("/elsewhere/p1");
  s.range("/u", "p", 0, 10);
}

TEST_CASE("a huge range costs nothing until used", "[ranges]") {
  Stage s(host_execution());
  const kstage_path_t first = s.range("/sim/particles", "p", 0, 100000000);
  REQUIRE(s.path_string(first + 99999999) == "/sim/particles/p99999999");
  REQUIRE(s.path("/sim/particles/p12345678") == first + 12345678);
  kstage_query_t q = 0;
  KS_OK(kstage_query_range(s.stage, first, 7, 100, 1000000, &q));
  const auto prims = s.prims_of(q);
  REQUIRE(prims.size() == 100);
  REQUIRE(prims[0] == first + 7);
  REQUIRE(prims[99] == first + 7 + 99 * 1000000ull);
  kstage_token_t t = s.token("t");
  std::vector<float> v(100);
  for (size_t i = 0; i < 100; ++i) v[i] = float(i);
  s.write_f32(q, t, 1, v);
  s.seal(1);
  const auto got = s.floats(q, t);
  REQUIRE(got.size() == 100);
  REQUIRE(got.at(first + 7 + 42 * 1000000ull) == std::vector<float>{42.f});
  // A prim at the end of a 4e9-id range: the column and the stage keep memory for the ids
  // written (pages of them), not for every id below the largest (that would be 32 GB here).
  const kstage_path_t vast = s.range("/vast", "v", 0, 4000000000ull);
  const kstage_path_t ends[2] = {vast, vast + 3999999999ull};
  kstage_query_t both = 0;
  KS_OK(kstage_query_paths(s.stage, ends, 2, &both));
  s.write_f32(both, t, 3, {1.f, 2.f});
  s.seal(3);
  const auto far = s.floats(both, t);
  REQUIRE(far.at(vast + 3999999999ull) == std::vector<float>{2.f});
  kstage_filter_t has{};
  has.has_attributes = &t;
  has.has_attribute_count = 1;
  kstage_query_t holders = 0;
  KS_OK(kstage_query_filter(s.stage, &has, &holders));
  uint64_t held = 0;
  KS_OK(kstage_query_count(s.stage, holders, &held));
  REQUIRE(held == 102);
  // Names in messages are made on demand too.
  kstage_query_t one = 0;
  const kstage_path_t missing = first + 99999998;
  KS_OK(kstage_query_paths(s.stage, &missing, 1, &one));
  std::vector<float> x{1.f};
  int64_t shape[1] = {1};
  DLTensor tensor_ = tensor(x.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&tensor_);
  KS_FAILS(s.write(one, t, 4, w, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND,
           "/sim/particles/p99999998");
}

TEST_CASE("range queries: sub-ranges, strides and their errors", "[ranges][queries]") {
  Stage s(host_execution());
  const kstage_path_t first = s.range("/r", "p", 0, 10);
  kstage_query_t q = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &q));
  std::vector<kstage_path_t> all;
  for (uint64_t i = 0; i < 10; ++i) all.push_back(first + i);
  REQUIRE(s.prims_of(q) == all);
  KS_OK(kstage_query_range(s.stage, first, 1, 0, 3, &q));  // 1, 4, 7
  REQUIRE(s.prims_of(q) == std::vector<kstage_path_t>{first + 1, first + 4, first + 7});
  KS_OK(kstage_query_range(s.stage, first, 9, 1, 5, &q));
  REQUIRE(s.prims_of(q) == std::vector<kstage_path_t>{first + 9});
  KS_FAILS(kstage_query_range(s.stage, first, 10, 0, 0, &q), KSTAGE_INVALID_ARGUMENT, "start 10");
  KS_FAILS(kstage_query_range(s.stage, first, 1, 4, 3, &q), KSTAGE_INVALID_ARGUMENT, "at most 3");
  KS_FAILS(kstage_query_range(s.stage, first + 1, 0, 0, 0, &q), KSTAGE_INVALID_ARGUMENT,
           "not the first path");
  KS_FAILS(kstage_query_range(s.stage, s.path("/x"), 0, 0, 0, &q), KSTAGE_INVALID_ARGUMENT,
           "not the first path");
  KS_FAILS(kstage_query_range(s.stage, first, 0, 0, 0, nullptr), KSTAGE_INVALID_ARGUMENT, "query");
  // Duplicate detection between far-apart ids (a huge range between them).
  const kstage_path_t huge = s.range("/h", "p", 0, 4000000000ull);
  const kstage_path_t far = s.path("/far");
  const kstage_path_t dup[3] = {first, far, first};
  KS_FAILS(kstage_query_paths(s.stage, dup, 3, &q), KSTAGE_INVALID_ARGUMENT,
           "paths[2] ('/r/p0') repeats paths[0]");
  const kstage_path_t ok[3] = {first, huge + 3999999999ull, far};
  KS_OK(kstage_query_paths(s.stage, ok, 3, &q));
}

TEST_CASE("range members are ordinary prims: filters, deletes, change ranges, maps", "[ranges]") {
  Stage s(host_execution());
  const kstage_path_t first = s.range("/g/particles", "p", 0, 8);
  const kstage_path_t loose = s.path("/g/loose");
  kstage_query_t all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  kstage_token_t t = s.token("mass");
  s.write_f32(all, t, 1, {0, 1, 2, 3, 4, 5, 6, 7});
  kstage_query_t l = s.query({loose});
  s.write_f32(l, t, 1, {100});
  s.seal(1);
  // HAS and PREFIX ("/g/particles" was reserved by the range; interning it makes it a prefix).
  kstage_filter_t f{};
  f.has_attributes = &t;
  f.has_attribute_count = 1;
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(s.stage, &f, &q));
  REQUIRE(s.prims_of(q).size() == 9);
  f.path_prefix = s.path("/g/particles");
  KS_OK(kstage_query_filter(s.stage, &f, &q));
  auto under = s.prims_of(q);
  REQUIRE(under.size() == 8);
  REQUIRE(under.front() == first);
  f.path_prefix = first + 3;  // a member as the prefix
  KS_OK(kstage_query_filter(s.stage, &f, &q));
  REQUIRE(s.prims_of(q) == std::vector<kstage_path_t>{first + 3});
  // IN.
  kstage_path_list_t in = 0;
  const kstage_path_t some[2] = {first + 6, loose};
  KS_OK(kstage_path_list_create(s.stage, some, 2, &in));
  kstage_filter_t fin{};
  fin.path_in = in;
  KS_OK(kstage_query_filter(s.stage, &fin, &q));
  REQUIRE(s.prims_of(q).size() == 2);
  KS_OK(kstage_path_list_release(s.stage, in));
  // Delete two members; a change range shows the tombstones by name.
  kstage_query_t two = 0;
  KS_OK(kstage_query_range(s.stage, first, 2, 2, 3, &two));  // members 2 and 5
  REQUIRE(s.remove(two, {}, 2) == KSTAGE_OK);
  s.seal(2);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.change_range = true;
  d.range_begin = d.range_end = 2;
  const auto groups = s.read(all, {t}, &d);
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].is_delete);
  REQUIRE(groups[0].prims == std::vector<kstage_path_t>{first + 2, first + 5});
  REQUIRE(s.path_string(groups[0].prims[1]) == "/g/particles/p5");
  // A map over the range.
  kstage_map_desc_t md = kstage_map_desc_init();
  md.attribute = s.token("charge");
  md.dtype = f32();
  md.residency = kResidency;
  kstage_map_t map = 0;
  KS_OK(kstage_map_attribute(s.stage, all, &md, 3, nullptr, 0, &map));
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(s.stage, map, 0, &g));
  std::vector<float> ones(size_t(g.data.tensors[0].shape[0]), 1.f);
  host_write(g.data.tensors[0].data, ones.data(), ones.size() * sizeof(float),
             g.data.tensors[0].device);
  kstage_op_t op = 0;
  KS_OK(kstage_unmap_attribute(s.stage, map, kstage_device_sync_t{0, 0}, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  s.seal(3);
  const auto charge = s.floats(all, md.attribute);
  REQUIRE(charge.size() == 8);
  REQUIRE(charge.at(first + 7) == std::vector<float>{1.f});
}

// A fixed-size column whose first write is consecutive new prims in order keeps no per-prim
// tables (the affine form) until a change needs them; everything reads the same either way.
TEST_CASE("a column that starts with no per-prim tables behaves like any other",
          "[ranges][affine]") {
  Stage s(host_execution());
  const kstage_path_t first = s.range("/a", "p", 0, 12);
  kstage_query_t ten = 0, all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 10, 1, &ten));
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  kstage_token_t t = s.token("t"), u = s.token("u");
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[size_t(i)] = float(i);
  s.write_f32(ten, t, 1, v);  // affine: rows are members 0..9
  s.write_f32(ten, u, 1, v);
  s.seal(1);
  auto expect = [&](kstage_token_t a, std::map<int, float> want) {
    const auto got = s.floats(all, a);
    REQUIRE(got.size() == want.size());
    for (const auto& [i, x] : want) REQUIRE(got.at(first + uint64_t(i)) == std::vector<float>{x});
  };
  std::map<int, float> want_t;
  for (int i = 0; i < 10; ++i) want_t[i] = float(i);
  expect(t, want_t);
  // A sparse write: stamps appear; change ranges see exactly it.
  std::vector<float> src(10, 0.f);
  src[2] = 20.f;
  src[7] = 70.f;
  int64_t shape[1] = {10};
  DLTensor x = tensor(src.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&x);
  const uint64_t mask = (1u << 2) | (1u << 7);
  w.count = 10;
  w.mask = &mask;
  KS_OK(s.write(ten, t, 2, w));
  s.seal(2);
  want_t[2] = 20.f;
  want_t[7] = 70.f;
  expect(t, want_t);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.change_range = true;
  d.range_begin = d.range_end = 2;
  auto changed = s.read(all, {t}, &d);
  REQUIRE(changed.size() == 1);
  REQUIRE(changed[0].prims == std::vector<kstage_path_t>{first + 2, first + 7});
  d.range_begin = 1;
  REQUIRE(s.read(all, {t}, &d)[0].prims.size() == 10);
  // New prims after the last row (members 10, 11): the tables from here on.
  s.write_f32(all, t, 3, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  s.seal(3);
  for (int i = 0; i < 12; ++i) want_t[i] = float(i);
  expect(t, want_t);
  // A delete from a column still in the affine form (u): a hole, then a change range with its
  // tombstone.
  kstage_query_t five = s.query({first + 5});
  REQUIRE(s.remove(five, {u}, 4) == KSTAGE_OK);
  s.seal(4);
  std::map<int, float> want_u;
  for (int i = 0; i < 10; ++i)
    if (i != 5) want_u[i] = float(i);
  expect(u, want_u);
  d.range_begin = d.range_end = 4;
  auto tomb = s.read(all, {u}, &d);
  REQUIRE(tomb.size() == 1);
  REQUIRE(tomb[0].is_delete);
  REQUIRE(tomb[0].prims == std::vector<kstage_path_t>{first + 5});
  // The deleted prim comes back (a new row), the others keep theirs.
  s.write_f32(five, u, 5, {55.f});
  s.seal(5);
  want_u[5] = 55.f;
  expect(u, want_u);
  // Paths interned one after another take the affine form too; a write in another order works on
  // it.
  std::vector<kstage_path_t> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(s.path("/e/q" + std::to_string(i)));
  kstage_query_t fwd = s.query(ps), rev = s.query({ps[3], ps[2], ps[1], ps[0]});
  kstage_token_t e = s.token("e");
  s.write_f32(fwd, e, 6, {0, 1, 2, 3});
  s.write_f32(rev, e, 7, {30, 20, 10, 0});
  s.seal(7);
  const auto ev = s.floats(fwd, e);
  for (int i = 0; i < 4; ++i) REQUIRE(ev.at(ps[size_t(i)]) == std::vector<float>{float(10 * i)});
  // A masked first write is not affine: only the selected prims exist.
  kstage_token_t m = s.token("m");
  std::vector<float> msrc{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  DLTensor mx = tensor(msrc.data(), f32(), 1, shape);
  kstage_write_data_t mw = write_data(&mx);
  mw.count = 10;
  mw.mask = &mask;
  KS_OK(s.write(ten, m, 8, mw));
  s.seal(8);
  expect(m, {{2, 3.f}, {7, 8.f}});
}

// A query over a range is a progression (no list of ids); the arrays a caller is handed
// -- a group's prims, a map group's prims, kstage_query_get_paths -- are made for it.
TEST_CASE("a range query reads in bounded groups, zero-copy, with each group's own prims",
          "[ranges][groups]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 1 << 20, kPer = 1 << 16;
  const kstage_path_t first = s.range("/big", "p", 0, kN);
  kstage_query_t all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  kstage_token_t x = s.token("x");
  std::vector<float> v(kN);
  for (uint64_t i = 0; i < kN; ++i) v[i] = float(i);
  s.write_f32(all, x, 1, v);
  s.seal(1);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.max_group_prims = kPer;
  kstage_read_t read = 0;
  KS_OK(kstage_read_attributes(s.stage, all, &x, 1, &d, &read));
  const unsigned char* base = nullptr;
  for (uint64_t k = 0; k < kN / kPer; ++k) {
    INFO("group " << k);
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, read, 0, &g));
    REQUIRE(g.prim_count == kPer);
    REQUIRE(g.prims[0] == first + k * kPer);
    REQUIRE(g.prims[kPer - 1] == first + (k + 1) * kPer - 1);
    REQUIRE(g.data.index_map == nullptr);  // the column in row order: no index map
    REQUIRE(g.data.tensors[0].shape[0] == int64_t(kPer));
    // Zero-copy: every group is a window of the same column buffer.
    const unsigned char* data = static_cast<const unsigned char*>(g.data.tensors[0].data);
    if (k == 0) base = data;
    REQUIRE(data == base + k * kPer * sizeof(float));
    const std::vector<float> got = group_floats(g, 0, 2);
    REQUIRE(got == std::vector<float>{float(k * kPer), float(k * kPer + 1)});
    KS_OK(kstage_release_group(s.stage, g.handle));
  }
  kstage_read_group_t end{};
  REQUIRE(kstage_fetch_read_next(s.stage, read, 0, &end) == KSTAGE_END_OF_ITERATION);
  KS_OK(kstage_release_read(s.stage, read));

  // A strided sub-range: its own ids, in every group and in kstage_query_get_paths.
  kstage_query_t odd = 0;
  KS_OK(kstage_query_range(s.stage, first, 1, 5, 7, &odd));
  REQUIRE(s.prims_of(odd) ==
          std::vector<kstage_path_t>{first + 1, first + 8, first + 15, first + 22, first + 29});
  d.max_group_prims = 2;
  const auto groups = s.read(odd, {x}, &d);
  REQUIRE(groups.size() == 3);
  REQUIRE(groups[1].prims == std::vector<kstage_path_t>{first + 15, first + 22});
  REQUIRE(as_floats(groups[1].values[1]) == std::vector<float>{22.f});
  REQUIRE(groups[1].had_index_map);
  // A map over it, in groups of two: each group's prims, committed to the right prims.
  kstage_map_desc_t md = kstage_map_desc_init();
  md.attribute = x;
  md.dtype = f32();
  md.max_group_prims = 2;
  kstage_map_t map = 0;
  KS_OK(kstage_map_attribute(s.stage, odd, &md, 2, nullptr, 0, &map));
  for (uint64_t k = 0; k < 3; ++k) {
    kstage_map_group_info_t g{};
    KS_OK(kstage_fetch_map_next(s.stage, map, 0, &g));
    REQUIRE(g.prim_count == (k < 2 ? 2u : 1u));
    for (uint64_t i = 0; i < g.prim_count; ++i) {
      REQUIRE(g.prims[i] == first + 1 + 7 * (2 * k + i));
      const float value = -float(g.prims[i] - first);
      host_write(static_cast<float*>(g.data.tensors[0].data) + i, &value, sizeof value,
                 g.data.tensors[0].device);
    }
  }
  kstage_op_t op = 0;
  KS_OK(kstage_unmap_attribute(s.stage, map, kstage_device_sync_t{0, 0}, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  s.seal(2);
  const auto after = s.floats(odd, x);
  REQUIRE(after.at(first + 29) == std::vector<float>{-29.f});
  // (One prim's query, not a map of all 2^20: the rest of the column was read group by group
  // above.)
  kstage_query_t p30 = 0;
  KS_OK(kstage_query_range(s.stage, first, 30, 1, 1, &p30));
  REQUIRE(s.floats(p30, x).at(first + 30) == std::vector<float>{30.f});
}

// A query whose ids step by a constant (every k-th prim, from a range or from paths interned
// one after another) is a progression too, and a write through it reaches the rows of an
// affine column without a row table: each case is checked against a model of the column,
// value by value, with the change range of its ordinal, including progressions that leave the
// column's rows (new prims), start before them, or step down (a list).
// Found by the perf suite: a query over paths interned in order was kept as a progression
// only, so every read of it made an array of its 8-byte ids to publish as the group's prims
// (8 MB per read of 1e6 prims, 6x the read's own cost). It keeps the caller's list too.
TEST_CASE("a query over paths in id order keeps its list: groups publish it, no array per fetch",
          "[ranges][queries]") {
  Stage s(host_execution());
  const size_t n = 1000;
  auto paths = s.paths("/ordered/p", n);
  for (size_t i = 1; i < n; ++i) REQUIRE(paths[i] == paths[0] + i);
  std::vector<kstage_path_t> every_other;
  for (size_t i = 0; i < n; i += 2) every_other.push_back(paths[i]);
  const kstage_token_t t = s.token("t");
  s.write_f32(s.query(paths), t, 1, std::vector<float>(n, 1.f));
  s.seal(1);
  for (const auto& p : {paths, every_other}) {
    const kstage_query_t q = s.query(p);
    kstage_path_list_t list = 0;
    KS_OK(kstage_query_get_paths(s.stage, q, &list));
    const kstage_path_t* ids = nullptr;
    uint64_t count = 0;
    KS_OK(kstage_path_list_get(s.stage, list, &ids, &count));
    REQUIRE(count == p.size());
    for (int pass = 0; pass < 2; ++pass) {
      kstage_read_t r = 0;
      KS_OK(kstage_read_attributes(s.stage, q, &t, 1, nullptr, &r));
      kstage_read_group_t g{};
      KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
      REQUIRE(g.prim_count == p.size());
      REQUIRE(g.prims == ids);  // the query's own list, shared
      REQUIRE(std::vector<kstage_path_t>(g.prims, g.prims + g.prim_count) == p);
      KS_OK(kstage_release_group(s.stage, g.handle));
      KS_OK(kstage_release_read(s.stage, r));
    }
    KS_OK(kstage_path_list_release(s.stage, list));
  }
}

TEST_CASE("writes through strided queries land on the right rows", "[ranges][affine]") {
  const bool from_range = GENERATE(true, false);
  CAPTURE(from_range);
  Stage s(host_execution());
  constexpr uint64_t kN = 40;
  std::vector<kstage_path_t> id(kN);
  if (from_range) {
    const kstage_path_t first = s.range("/s", "p", 0, kN);
    for (uint64_t i = 0; i < kN; ++i) id[i] = first + i;
  } else {
    id = s.paths("/s/q", kN);  // interned one after another: consecutive ids
    for (uint64_t i = 1; i < kN; ++i) REQUIRE(id[i] == id[0] + i);
  }
  // Every k-th member from `start`, `count` of them, as an explicit query.
  auto every = [&](uint64_t start, uint64_t k, uint64_t count) {
    std::vector<kstage_path_t> p;
    for (uint64_t j = 0; j < count; ++j) p.push_back(id[start + j * k]);
    const kstage_query_t q = s.query(p);
    REQUIRE(s.prims_of(q) == p);  // the query keeps its prims and their order
    return std::make_pair(q, p);
  };
  const kstage_token_t t = s.token("t");
  std::map<kstage_path_t, float> model;
  uint64_t ordinal = 0;
  // Seals `ordinal` and checks every value and the change range [ordinal, ordinal].
  auto check = [&](const std::vector<kstage_path_t>& changed) {
    s.seal(ordinal);
    const auto all = every(0, 1, kN).first;
    const auto got = scalars(s, all, t);
    CAPTURE(ordinal);
    REQUIRE(got.size() == model.size());
    for (const auto& [path, value] : model) {
      CAPTURE(path - id[0], value);
      REQUIRE(got.count(path) == 1);
      REQUIRE(got.at(path) == value);
    }
    std::vector<kstage_path_t> want = changed;
    std::sort(want.begin(), want.end());
    REQUIRE(s.changed(all, t, ordinal, ordinal) == want);
  };
  auto write = [&](const std::vector<kstage_path_t>& p, kstage_query_t q, float base) {
    std::vector<float> v(p.size());
    for (size_t j = 0; j < p.size(); ++j) v[j] = model[p[j]] = base + float(j);
    s.write_f32(q, t, ++ordinal, v);
    check(p);
  };
  // The affine column: members 0..29 in order.
  const auto [head, head_p] = every(0, 1, 30);
  write(head_p, head, 0.f);
  {  // every 3rd member from 1: rows 1, 4, ..., 28
    const auto [q, p] = every(1, 3, 10);
    write(p, q, 100.f);
  }
  {  // a step-1 run in the middle: rows 5..14
    const auto [q, p] = every(5, 1, 10);
    write(p, q, 200.f);
  }
  {  // one prim
    const auto [q, p] = every(29, 1, 1);
    write(p, q, 300.f);
  }
  {  // every 3rd from 2 ends exactly on the last row (29)
    const auto [q, p] = every(2, 3, 10);
    REQUIRE(p.back() == id[29]);
    write(p, q, 350.f);
  }
  if (from_range) {  // one prim through a range query with a huge stride (the step is never taken)
    kstage_query_t q = 0;
    KS_OK(kstage_query_range(s.stage, id[0], 28, 1, uint64_t(1) << 62, &q));
    write({id[28]}, q, 360.f);
  }
  {  // an index_map write through every 5th member from 2, source rows reversed
    const auto [q, p] = every(2, 5, 6);
    std::vector<float> src(6);
    std::vector<uint32_t> map(6);
    for (uint32_t j = 0; j < 6; ++j) src[j] = 400.f + float(j);
    for (uint32_t j = 0; j < 6; ++j) {
      map[j] = 5 - j;  // element j takes source row map[j]
      model[p[j]] = src[map[j]];
    }
    int64_t shape[1] = {6};
    DLTensor x = tensor(src.data(), f32(), 1, shape);
    kstage_write_data_t w = write_data(&x);
    w.count = 6;
    w.index_map = map.data();
    KS_OK(s.write(q, t, ++ordinal, w));
    check(p);
  }
  // Masked writes through a stride-2 progression from 3 and through a prefix (step 1 from row 0).
  for (const auto& [start, k] : {std::pair<uint64_t, uint64_t>{3, 2}, {0, 1}}) {
    const auto [q, p] = every(start, k, 12);
    std::vector<float> src(12);
    uint64_t mask = 0;
    std::vector<kstage_path_t> picked;
    for (uint64_t j = 0; j < 12; ++j) {
      src[j] = 500.f + float(j);
      if (j % 3 != 1) continue;
      mask |= uint64_t(1) << j;
      model[p[j]] = src[j];
      picked.push_back(p[j]);
    }
    s.write_f32(q, t, ++ordinal, src, 1, &mask);
    check(picked);
  }
  {  // steps down: a list, not a progression
    std::vector<kstage_path_t> p;
    for (int j = 27; j >= 0; j -= 9) p.push_back(id[size_t(j)]);
    write(p, s.query(p), 600.f);
  }
  {  // every 4th from 2 up to 30: one step past the last row (29), so one new prim and the
     // column takes its tables; then up to 38
    const auto [q, p] = every(2, 4, 8);
    write(p, q, 650.f);
    const auto [q2, p2] = every(2, 4, 10);
    write(p2, q2, 700.f);
  }
  {  // and strided writes on the tables from here on
    const auto [q, p] = every(0, 7, 6);
    write(p, q, 800.f);
  }
}

TEST_CASE("a strided query that starts before an affine column's rows adds its new prims",
          "[ranges][affine]") {
  Stage s(host_execution());
  const kstage_path_t first = s.range("/b", "p", 0, 30);
  kstage_query_t tail = 0, strided = 0;
  KS_OK(kstage_query_range(s.stage, first, 10, 20, 1, &tail));   // members 10..29
  KS_OK(kstage_query_range(s.stage, first, 0, 6, 5, &strided));  // members 0, 5, ..., 25
  const kstage_token_t t = s.token("t");
  std::vector<float> v(20);
  for (int i = 0; i < 20; ++i) v[size_t(i)] = float(10 + i);
  s.write_f32(tail, t, 1, v);
  s.write_f32(strided, t, 2, {-0.f, -5.f, -10.f, -15.f, -20.f, -25.f});
  s.seal(2);
  kstage_query_t all = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &all));
  const auto got = scalars(s, all, t);
  REQUIRE(got.size() == 22);  // 10..29 and the new 0 and 5
  for (uint64_t i = 0; i < 30; ++i) {
    CAPTURE(i);
    if (i % 5 == 0) {
      REQUIRE(got.at(first + i) == -float(i));
    } else if (i >= 10) {
      REQUIRE(got.at(first + i) == float(i));
    } else {
      REQUIRE(got.count(first + i) == 0);
    }
  }
}

// An UPDATE tick through a strided range query of an affine column needs no row map to know
// that its targets exist; one that reaches past the column's rows, or targets a prim deleted
// by a pending delete before it, is refused, naming the first missing element.
TEST_CASE("UPDATE writes through strided range queries check every target", "[ranges][affine]") {
  Stage s(host_execution());
  const kstage_path_t first = s.range("/u", "p", 0, 40);
  kstage_query_t head = 0, inside = 0, past = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 30, 1, &head));   // the column: members 0..29
  KS_OK(kstage_query_range(s.stage, first, 0, 6, 5, &inside));  // 0, 5, ..., 25
  KS_OK(kstage_query_range(s.stage, first, 10, 5, 5, &past));   // 10, ..., 25, 30 (no row)
  const kstage_token_t t = s.token("t");
  std::vector<float> v(30);
  for (int i = 0; i < 30; ++i) v[size_t(i)] = float(i);
  s.write_f32(head, t, 1, v);
  s.seal(1);
  auto update = [&](kstage_query_t q, uint64_t ordinal, std::vector<float> x) {
    int64_t shape[1] = {int64_t(x.size())};
    DLTensor tensor_ = tensor(x.data(), f32(), 1, shape);
    return s.write(q, t, ordinal, write_data(&tensor_), KSTAGE_PRIM_MODE_UPDATE);
  };
  REQUIRE(update(inside, 2, {-0.f, -5.f, -10.f, -15.f, -20.f, -25.f}) == KSTAGE_OK);
  KS_FAILS(update(past, 2, {1.f, 2.f, 3.f, 4.f, 5.f}), KSTAGE_NOT_FOUND, "/u/p30' (element 4)");
  s.seal(2);
  auto got = scalars(s, head, t);
  REQUIRE(got.size() == 30);
  for (uint64_t i = 0; i < 30; ++i)
    REQUIRE(got.at(first + i) == (i % 5 == 0 ? -float(i) : float(i)));
  // A delete of member 5 pending before the update: the update is refused, naming it.
  kstage_query_t five = 0;
  KS_OK(kstage_query_range(s.stage, first, 5, 1, 1, &five));
  REQUIRE(s.remove(five, {t}, 3) == KSTAGE_OK);
  KS_FAILS(update(inside, 4, {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}), KSTAGE_NOT_FOUND,
           "/u/p5' (element 1)");
  s.seal(4);
  got = scalars(s, head, t);
  REQUIRE(got.size() == 29);
  REQUIRE(got.count(first + 5) == 0);
  REQUIRE(got.at(first + 10) == -10.f);
}

// A seal stamps a large write's rows in chunks, in parallel where the host execution is
// (Backend::host_for): every row of the write carries the write's ordinal, no other row does.
TEST_CASE("a large sparse write stamps exactly its rows", "[ranges][affine]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 140000;  // three host_for chunks of 2^16 rows
  const kstage_path_t first = s.range("/big", "p", 0, kN);
  const kstage_query_t all = s.range_query(first);
  kstage_query_t every3 = 0;
  KS_OK(kstage_query_range(s.stage, first, 1, 0, 3, &every3));  // members 1, 4, 7, ...
  const kstage_token_t t = s.token("t");
  s.write_f32(all, t, 1, std::vector<float>(kN, 0.f));
  s.seal(1);
  // Through a progression: rows 1, 4, 7, ...
  const uint64_t m = (kN - 1 + 2) / 3;
  s.write_f32(every3, t, 2, std::vector<float>(m, 2.f));
  s.seal(2);
  std::vector<kstage_path_t> want;
  for (uint64_t i = 1; i < kN; i += 3) want.push_back(first + i);
  REQUIRE(s.changed(all, t, 2, 2) == want);
  // Through a mask over the whole range (a row list): every other row from 0.
  const std::vector<uint64_t> mask((kN + 63) / 64, 0x5555555555555555ull);
  s.write_f32(all, t, 3, std::vector<float>(kN, 3.f), 1, mask.data());
  s.seal(3);
  std::vector<kstage_path_t> even;
  for (uint64_t i = 0; i < kN; i += 2) even.push_back(first + i);
  REQUIRE(s.changed(all, t, 3, 3) == even);
  // [2, 3]: the rows of either write, each once (rows 1, 4, 7, ... that are odd kept 2).
  std::vector<kstage_path_t> either;
  for (uint64_t i = 0; i < kN; ++i)
    if (i % 2 == 0 || i % 3 == 1) either.push_back(first + i);
  REQUIRE(s.changed(all, t, 2, 3) == either);
  // And the values: 3 where the mask wrote, else 2 on rows 1, 4, 7, ..., else 0.
  const auto got = scalars(s, all, t);
  REQUIRE(got.size() == kN);
  size_t wrong = 0;
  for (uint64_t i = 0; i < kN; ++i) {
    const float want_value = i % 2 == 0 ? 3.f : i % 3 == 1 ? 2.f : 0.f;
    wrong += got.at(first + i) != want_value;
  }
  REQUIRE(wrong == 0);
}

TEST_CASE(
    "groups of progressions: prims_as_progression leaves the ids unmade (first and stride "
    "name them)",
    "[ranges][queries]") {
  Stage s(host_execution());
  constexpr uint64_t n = 1000;
  const kstage_path_t apart = s.path("/apart");
  s.path("/gap");  // (an id between /apart and the range)
  const kstage_path_t first = s.range("/r", "p", 0, n);
  const kstage_token_t a = s.token("a"), b = s.token("b");
  const kstage_query_t range = s.range_query(first);
  s.write_f32(range, a, 1, std::vector<float>(n, 1.f));
  s.write_f32(range, b, 1, std::vector<float>(n, 2.f));
  s.seal(1);
  // The whole stage is one run of ids: a filter without criteria is that progression.
  kstage_filter_t all{};
  kstage_query_t whole = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &whole));
  uint64_t count = 0;
  KS_OK(kstage_query_count(s.stage, whole, &count));
  REQUIRE(count == n);
  const kstage_token_t both[2] = {a, b};
  kstage_read_desc_t d = kstage_read_desc_init();
  d.prims_as_progression = true;
  d.max_group_prims = 300;  // groups of 300, 300, 300, 100 per attribute
  for (kstage_query_t q : {whole, range}) {
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, both, 2, &d, &r));
    kstage_read_group_t g{};
    uint64_t groups = 0, next = first;
    while (kstage_fetch_read_next(s.stage, r, 0, &g) == KSTAGE_OK) {
      ++groups;
      REQUIRE(g.prims == nullptr);
      uint64_t f = 0, stride = 0;
      KS_OK(kstage_group_prim_progression(s.stage, g.handle, &f, &stride));
      CHECK(f == next);
      CHECK(stride == 1);
      CHECK(g.prim_count == (next - first == 900 ? 100 : 300));
      next = next + g.prim_count == first + n ? first : next + g.prim_count;
      KS_OK(kstage_release_group(s.stage, g.handle));
    }
    CHECK(groups == 8);
    KS_OK(kstage_release_read(s.stage, r));
  }
  // Without it, every group of the filter's query shares one list, made once (as a listed
  // query's); the range query's groups make their own.
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, whole, both, 2, nullptr, &r));
  kstage_read_group_t ga{}, gb{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &ga));
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &gb));
  REQUIRE(ga.prims != nullptr);
  CHECK(ga.prims == gb.prims);
  for (uint64_t i = 0; i < n; ++i) REQUIRE(ga.prims[i] == first + i);
  // kstage_query_get_paths of that query hands out the same list (no copy of its own), which
  // outlives the groups, the read and the query.
  kstage_path_list_t listed = 0;
  KS_OK(kstage_query_get_paths(s.stage, whole, &listed));
  const kstage_path_t* listed_ids = nullptr;
  uint64_t listed_count = 0;
  KS_OK(kstage_path_list_get(s.stage, listed, &listed_ids, &listed_count));
  CHECK(listed_ids == ga.prims);
  CHECK(listed_count == n);
  // Any group whose prims are a progression names it; a listed one that is no progression,
  // NOT_FOUND, with the outputs unchanged.
  uint64_t f = 7, stride = 7;
  KS_OK(kstage_group_prim_progression(s.stage, ga.handle, &f, &stride));
  CHECK(f == first);
  CHECK(stride == 1);
  KS_OK(kstage_release_group(s.stage, ga.handle));
  KS_OK(kstage_release_group(s.stage, gb.handle));
  KS_OK(kstage_release_read(s.stage, r));
  KS_OK(kstage_query_release(s.stage, whole));
  KS_OK(kstage_path_list_get(s.stage, listed, &listed_ids, &listed_count));
  for (uint64_t i = 0; i < n; ++i) REQUIRE(listed_ids[i] == first + i);
  KS_OK(kstage_path_list_release(s.stage, listed));
  const kstage_query_t scattered = s.query({first + 5, first + 1, first + 9});
  KS_OK(kstage_read_attributes(s.stage, scattered, &a, 1, &d, &r));
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &ga));
  REQUIRE(ga.prims != nullptr);  // a list is published whatever the flag
  f = 7;
  stride = 7;
  KS_FAILS(kstage_group_prim_progression(s.stage, ga.handle, &f, &stride), KSTAGE_NOT_FOUND,
           "are not a progression");
  CHECK(f == 7);
  CHECK(stride == 7);
  KS_FAILS(kstage_group_prim_progression(s.stage, ga.handle, nullptr, &stride),
           KSTAGE_INVALID_ARGUMENT, "first");
  KS_OK(kstage_release_group(s.stage, ga.handle));
  KS_FAILS(kstage_group_prim_progression(s.stage, ga.handle, &f, &stride), KSTAGE_INVALID_HANDLE,
           "group");
  KS_OK(kstage_release_read(s.stage, r));
  // A stage whose prims are two runs: the filter keeps its list.
  s.write_f32(s.query({apart}), a, 2, {3.f});
  s.seal(2);
  kstage_query_t two = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &two));
  KS_OK(kstage_read_attributes(s.stage, two, &a, 1, &d, &r));
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &ga));
  REQUIRE(ga.prims != nullptr);
  CHECK(ga.prim_count == 300);  // (d.max_group_prims)
  KS_OK(kstage_release_group(s.stage, ga.handle));
  KS_OK(kstage_release_read(s.stage, r));
  for (kstage_query_t q : {range, scattered, two}) KS_OK(kstage_query_release(s.stage, q));
}
