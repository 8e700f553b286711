// SPDX-License-Identifier: Apache-2.0
// Schemas that evolve (issue #48): a write or map with no semantic keeps the column's, a map of an
// existing column needs no dtype, one attribute name holds several schemas on different prims
// (a column each, one value per prim and name), KSTAGE_ATTRIBUTE_MODE_FORCE replaces a prim's
// schema at an ordinal (a deletion in the old column, a value in the new), and a name whose prims
// are all gone takes another schema. Every refusal leaves the stage as it was.
#include "support.hpp"

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

using namespace kstage_test;

namespace {

// A fixed-size write of float32 or float64 lanes 1 (`values` converted), with `semantic`
// and `mode`; returns the call's status.
kstage_status_t write_as(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                         const std::vector<double>& values, DLDataType dtype,
                         kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE,
                         uint8_t mode = KSTAGE_ATTRIBUTE_MODE_REJECT,
                         const uint64_t* mask = nullptr) {
  std::vector<float> f(values.begin(), values.end());
  std::vector<double> d = values;
  int64_t shape[1] = {int64_t(values.size())};
  DLTensor t = tensor(dtype.bits == 32 ? static_cast<void*>(f.data()) : d.data(), dtype, 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.semantic = semantic;
  w.attribute_mode = mode;
  w.mask = mask;
  if (mask) w.count = values.size();
  return s.write(q, attr, ordinal, w);
}

// The value of a group's prim i, as a double (float32 or float64 lanes 1).
double value_of(const Group& g, size_t i) {
  if (g.dtype.bits == 32) {
    float f;
    std::memcpy(&f, g.values[i].data(), sizeof f);
    return f;
  }
  double d;
  std::memcpy(&d, g.values[i].data(), sizeof d);
  return d;
}

// Per prim: (bits, value) of the sealed value, from every group of `attr`.
std::map<kstage_path_t, std::pair<int, double>> sealed(Stage& s, kstage_query_t q,
                                                       kstage_token_t attr) {
  std::map<kstage_path_t, std::pair<int, double>> m;
  for (const Group& g : s.read(q, {attr}))
    for (size_t i = 0; i < g.prims.size(); ++i) {
      REQUIRE(m.count(g.prims[i]) == 0);  // one value per prim and name
      m[g.prims[i]] = {g.dtype.bits, value_of(g, i)};
    }
  return m;
}

// Fills the one group of map `m` with `values` in prim order (fixed-size, lanes 1), unmaps it and
// waits; returns the group as fetched.
template <class T>
kstage_map_group_info_t fill_and_commit(Stage& s, kstage_map_t m, const std::vector<T>& values) {
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(s.stage, m, 0, &g));
  REQUIRE(g.prim_count == values.size());
  for (uint64_t i = 0; i < g.prim_count; ++i) {
    const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
    host_write(static_cast<T*>(g.data.tensors[0].data) + row, &values[i], sizeof(T),
               g.data.tensors[0].device);
  }
  kstage_op_t op = 0;
  KS_OK(kstage_unmap_attribute(s.stage, m, kstage_device_sync_t{0, 0}, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  return g;
}

kstage_attribute_info_t info_of(Stage& s, kstage_token_t attr) {
  kstage_attribute_info_t info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_info(s.stage, attr, &info));
  return info;
}

kstage_attribute_info_t schema_of(Stage& s, kstage_token_t attr, uint64_t index) {
  kstage_attribute_info_t info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_schema(s.stage, attr, index, &info));
  return info;
}

}  // namespace

TEST_CASE("a write or map with no semantic keeps the column's", "[schemas]") {
  Stage s(host_execution());
  auto prims = s.paths("/k", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t pos = s.token("pos");
  KS_OK(write_as(s, q, pos, 1, {1, 2}, f32(), KSTAGE_SEMANTIC_POINT));
  s.seal(1);
  // The ported update loop: no semantic.
  KS_OK(write_as(s, q, pos, 2, {3, 4}, f32()));
  s.seal(2);
  auto groups = s.read(q, {pos});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].semantic == KSTAGE_SEMANTIC_POINT);
  REQUIRE(value_of(groups[0], 1) == 4);
  REQUIRE(info_of(s, pos).schema_count == 1);

  // A map with no dtype and no semantic takes the column's schema.
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = pos;
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &d, 3, nullptr, 0, &m));
  const kstage_map_group_info_t g = fill_and_commit(s, m, std::vector<float>{5, 6});
  REQUIRE(g.dtype.code == kDLFloat);
  REQUIRE(g.dtype.bits == 32);
  REQUIRE(g.semantic == KSTAGE_SEMANTIC_POINT);
  s.seal(3);
  auto after = sealed(s, q, pos);
  REQUIRE(after[prims[1]] == std::pair<int, double>{32, 6});

  // A semantic that is not the column's is still refused for its prims.
  const std::string before = s.fingerprint(q, {pos});
  KS_FAILS(write_as(s, q, pos, 4, {7, 8}, f32(), KSTAGE_SEMANTIC_NORMAL), KSTAGE_INVALID_ARGUMENT,
           "the write's semantic NORMAL does not match its semantic POINT");
  REQUIRE(s.fingerprint(q, {pos}) == before);
}

TEST_CASE("a map's unset dtype needs one column to take it from", "[schemas][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/u", 2);
  kstage_query_t a = s.query({prims[0]});
  kstage_query_t b = s.query({prims[1]});
  kstage_query_t both = s.query(prims);
  kstage_token_t m = s.token("m");
  KS_OK(write_as(s, a, m, 1, {1}, f32()));
  KS_OK(write_as(s, b, m, 1, {2}, f64()));
  s.seal(1);
  const std::string before = s.fingerprint(both, {m});
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = m;
  kstage_map_t map = 0;
  KS_FAILS(kstage_map_attribute(s.stage, both, &d, 2, nullptr, 0, &map), KSTAGE_INVALID_ARGUMENT,
           "desc.dtype is unset, but 'm' holds float32 NONE and float64 NONE: name the dtype");
  d.is_array = true;
  const uint64_t counts[2] = {1, 1};
  KS_FAILS(kstage_map_attribute(s.stage, both, &d, 2, counts, 2, &map), KSTAGE_INVALID_ARGUMENT,
           "desc.dtype is unset, but 'm' has no array column to take it from");
  REQUIRE(map == 0);
  REQUIRE(s.fingerprint(both, {m}) == before);
}

TEST_CASE("one name holds several schemas on different prims", "[schemas]") {
  Stage s(host_execution());
  auto prims = s.paths("/s", 3);  // /s_0, /s_1 float32; /s_2 float64
  kstage_query_t ab = s.query({prims[0], prims[1]});
  kstage_query_t c = s.query({prims[2]});
  kstage_query_t all = s.query(prims);
  kstage_token_t m = s.token("m");
  KS_OK(write_as(s, ab, m, 1, {1, 2}, f32()));
  KS_OK(write_as(s, c, m, 2, {3}, f64()));  // ovstage: float64 m on /c beside float32 m
  s.seal(2);

  // A read returns a group per schema, each prim once.
  auto groups = s.read(all, {m});
  REQUIRE(groups.size() == 2);
  std::map<int, std::vector<kstage_path_t>> by_bits;
  for (const Group& g : groups) by_bits[g.dtype.bits] = g.prims;
  REQUIRE(by_bits[32] == std::vector<kstage_path_t>{prims[0], prims[1]});
  REQUIRE(by_bits[64] == std::vector<kstage_path_t>{prims[2]});
  auto values = sealed(s, all, m);
  REQUIRE(values[prims[2]] == std::pair<int, double>{64, 3});

  // Describe: the name once; the info of the column with the most prims, counts of all.
  uint64_t count = 0;
  KS_OK(kstage_list_attributes(s.stage, nullptr, 0, &count));
  REQUIRE(count == 1);
  kstage_attribute_info_t info = info_of(s, m);
  REQUIRE(info.schema_count == 2);
  REQUIRE(info.prim_count == 3);
  REQUIRE(info.dtype.bits == 32);
  REQUIRE(schema_of(s, m, 0).dtype.bits == 32);
  REQUIRE(schema_of(s, m, 0).prim_count == 2);
  REQUIRE(schema_of(s, m, 1).dtype.bits == 64);
  REQUIRE(schema_of(s, m, 1).prim_count == 1);
  REQUIRE(schema_of(s, m, 1).schema_count == 2);
  kstage_attribute_info_t none = kstage_attribute_info_init();
  KS_FAILS(kstage_attribute_schema(s.stage, m, 2, &none), KSTAGE_NOT_FOUND,
           "index 2: attribute 'm' has 2 schemas");
  KS_FAILS(kstage_attribute_schema(s.stage, s.token("nothing"), 0, &none), KSTAGE_NOT_FOUND,
           "attribute 'nothing' has no column");
  KS_FAILS(kstage_attribute_schema(s.stage, m, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "info is NULL");
  KS_FAILS(kstage_attribute_schema(s.stage, 987654321, 0, &none), KSTAGE_INVALID_ARGUMENT,
           "is not a token of this stage");
  none.struct_size = 4;
  KS_FAILS(kstage_attribute_schema(s.stage, m, 0, &none), KSTAGE_INVALID_ARGUMENT, "struct_size");

  // Each schema's prims are updated in their own column; HAS finds prims in any of them.
  KS_OK(write_as(s, c, m, 3, {30}, f64()));
  KS_OK(write_as(s, ab, m, 3, {10, 20}, f32()));
  s.seal(3);
  values = sealed(s, all, m);
  REQUIRE(values[prims[0]] == std::pair<int, double>{32, 10});
  REQUIRE(values[prims[2]] == std::pair<int, double>{64, 30});
  kstage_filter_t f{};
  f.has_attributes = &m;
  f.has_attribute_count = 1;
  REQUIRE(s.filtered(f) == prims);

  // A delete of the name removes it from whichever column holds each prim.
  REQUIRE(s.remove(s.query({prims[1], prims[2]}), {m}, 4) == KSTAGE_OK);
  s.seal(4);
  values = sealed(s, all, m);
  REQUIRE(values.size() == 1);
  REQUIRE(values.count(prims[0]) == 1);
  REQUIRE(s.filtered(f) == std::vector<kstage_path_t>{prims[0]});
  REQUIRE(s.changed(all, m, 4, 4) == std::vector<kstage_path_t>{prims[1], prims[2]});
}

TEST_CASE("another schema for a prim that holds the name is refused without FORCE",
          "[schemas][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/r", 3);
  kstage_query_t ab = s.query({prims[0], prims[1]});
  kstage_query_t bc = s.query({prims[1], prims[2]});
  kstage_query_t all = s.query(prims);
  kstage_token_t m = s.token("m");
  kstage_token_t other = s.token("other");
  KS_OK(write_as(s, ab, m, 1, {1, 2}, f32()));
  s.seal(1);
  const std::string before = s.fingerprint(all, {m, other});
  // /r_1 holds float32: the float64 write to /r_1 and /r_2 is refused whole (element 0 named).
  KS_FAILS(write_as(s, bc, m, 2, {5, 6}, f64()), KSTAGE_INVALID_ARGUMENT,
           "prim '/r_1' (element 0) holds 'm' as float32 NONE: the write's dtype float64 does "
           "not match its dtype float32; a prim holds one value per name (delete it first, or "
           "write with KSTAGE_ATTRIBUTE_MODE_FORCE)");
  // In a batch: all or none, the entry named.
  {
    std::vector<double> d = {5, 6};
    std::vector<float> o = {7, 8};
    int64_t shape[1] = {2};
    DLTensor td = tensor(d.data(), f64(), 1, shape);
    DLTensor to = tensor(o.data(), f32(), 1, shape);
    kstage_write_data_t data[2] = {write_data(&to), write_data(&td)};
    const kstage_token_t attrs[2] = {other, m};
    kstage_op_t op = 7;
    KS_FAILS(kstage_write_attributes(s.stage, bc, attrs, data, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "data[1] ('m'): prim '/r_1' (element 0) holds 'm'");
    REQUIRE(op == 7);
  }
  // A masked write names the element as the caller numbers it.
  const uint64_t second_only = 0x2;
  KS_FAILS(write_as(s, s.query({prims[2], prims[0]}), m, 2, {5, 6}, f64(), KSTAGE_SEMANTIC_NONE,
                    KSTAGE_ATTRIBUTE_MODE_REJECT, &second_only),
           KSTAGE_INVALID_ARGUMENT, "prim '/r_0' (element 1) holds 'm' as float32 NONE");
  // A map too, at the map and (for a column made meanwhile) at the unmap.
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = m;
  d.dtype = f64();
  kstage_map_t map = 0;
  KS_FAILS(kstage_map_attribute(s.stage, bc, &d, 2, nullptr, 0, &map), KSTAGE_INVALID_ARGUMENT,
           "prim '/r_1' (element 0) holds 'm' as float32 NONE: the write's dtype float64");
  REQUIRE(map == 0);
  REQUIRE(s.fingerprint(all, {m, other}) == before);
  // The prim that does not hold it takes float64 on its own.
  KS_OK(write_as(s, s.query({prims[2]}), m, 2, {6}, f64()));
  s.seal(2);
  auto values = sealed(s, all, m);
  REQUIRE(values[prims[1]] == std::pair<int, double>{32, 2});
  REQUIRE(values[prims[2]] == std::pair<int, double>{64, 6});
}

TEST_CASE("FORCE replaces a prim's schema at the write's ordinal", "[schemas]") {
  Stage s(host_execution());
  auto prims = s.paths("/f", 3);
  kstage_query_t ab = s.query({prims[0], prims[1]});
  kstage_query_t all = s.query(prims);
  kstage_token_t m = s.token("m");
  KS_OK(write_as(s, ab, m, 1, {1, 2}, f32(), KSTAGE_SEMANTIC_NONE));
  KS_OK(write_as(s, s.query({prims[2]}), m, 1, {3}, f64()));
  s.seal(1);
  const bool by_map = GENERATE(false, true);
  CAPTURE(by_map);
  if (!by_map) {
    KS_OK(
        write_as(s, ab, m, 5, {10, 20}, f64(), KSTAGE_SEMANTIC_NONE, KSTAGE_ATTRIBUTE_MODE_FORCE));
  } else {
    kstage_map_desc_t d = kstage_map_desc_init();
    d.attribute = m;
    d.dtype = f64();
    d.attribute_mode = KSTAGE_ATTRIBUTE_MODE_FORCE;
    kstage_map_t map = 0;
    KS_OK(kstage_map_attribute(s.stage, ab, &d, 5, nullptr, 0, &map));
    fill_and_commit(s, map, std::vector<double>{10, 20});
  }
  // Unsealed: the old values stay readable.
  REQUIRE(sealed(s, all, m)[prims[0]] == std::pair<int, double>{32, 1});
  s.seal(5);
  auto values = sealed(s, all, m);
  REQUIRE(values[prims[0]] == std::pair<int, double>{64, 10});
  REQUIRE(values[prims[1]] == std::pair<int, double>{64, 20});
  REQUIRE(values[prims[2]] == std::pair<int, double>{64, 3});
  auto latest = s.read(all, {m});
  REQUIRE(latest.size() == 1);  // the float32 column holds nothing: no group
  // The change range at 5: a deletion in the float32 column and the values in the float64 one.
  kstage_read_desc_t r = kstage_read_desc_init();
  r.change_range = true;
  r.range_begin = 5;
  r.range_end = 5;
  auto changes = s.read(all, {m}, &r);
  REQUIRE(changes.size() == 2);
  const Group& tomb = changes[0].is_delete ? changes[0] : changes[1];
  const Group& value = changes[0].is_delete ? changes[1] : changes[0];
  REQUIRE(tomb.is_delete);
  REQUIRE(tomb.dtype.bits == 32);
  REQUIRE(tomb.prims == std::vector<kstage_path_t>{prims[0], prims[1]});
  REQUIRE(!value.is_delete);
  REQUIRE(value.dtype.bits == 64);
  REQUIRE(value.prims == std::vector<kstage_path_t>{prims[0], prims[1]});
  // The prims exist throughout (no count passed through 0), and the name has both columns.
  kstage_attribute_info_t info = info_of(s, m);
  REQUIRE(info.prim_count == 3);
  REQUIRE(info.schema_count == 2);
  REQUIRE(info.dtype.bits == 64);
  REQUIRE(schema_of(s, m, 0).prim_count == 0);
}

TEST_CASE("FORCE of some prims of a masked write moves only those", "[schemas]") {
  Stage s(host_execution());
  auto prims = s.paths("/mk", 4);
  kstage_query_t all = s.query(prims);
  kstage_token_t m = s.token("m");
  KS_OK(write_as(s, all, m, 1, {1, 2, 3, 4}, f32()));
  s.seal(1);
  const uint64_t mask = 0b1010;  // /mk_1 and /mk_3
  KS_OK(write_as(s, all, m, 2, {0, 20, 0, 40}, f64(), KSTAGE_SEMANTIC_NONE,
                 KSTAGE_ATTRIBUTE_MODE_FORCE, &mask));
  s.seal(2);
  auto values = sealed(s, all, m);
  REQUIRE(values[prims[0]] == std::pair<int, double>{32, 1});
  REQUIRE(values[prims[1]] == std::pair<int, double>{64, 20});
  REQUIRE(values[prims[2]] == std::pair<int, double>{32, 3});
  REQUIRE(values[prims[3]] == std::pair<int, double>{64, 40});
  REQUIRE(schema_of(s, m, 0).prim_count == 2);
  REQUIRE(schema_of(s, m, 1).prim_count == 2);
  // And back, FORCE float32 over all: one column holds them all again.
  KS_OK(write_as(s, all, m, 3, {5, 6, 7, 8}, f32(), KSTAGE_SEMANTIC_NONE,
                 KSTAGE_ATTRIBUTE_MODE_FORCE));
  s.seal(3);
  values = sealed(s, all, m);
  for (size_t i = 0; i < 4; ++i) REQUIRE(values[prims[i]] == std::pair<int, double>{32, 5.0 + i});
  REQUIRE(schema_of(s, m, 1).prim_count == 0);
  // At 3: every prim's new value, and the deletions of the two that left float64.
  REQUIRE(s.changed(all, m, 3, 3) ==
          std::vector<kstage_path_t>{prims[0], prims[1], prims[1], prims[2], prims[3], prims[3]});
}

TEST_CASE("a name whose prims are all gone takes another schema", "[schemas]") {
  Stage s(host_execution());
  auto prims = s.paths("/g", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t x = s.token("x");
  KS_OK(write_as(s, q, x, 1, {1, 2}, f32(), KSTAGE_SEMANTIC_POINT));
  s.seal(1);
  // ovstage's documented path: delete it before changing type.
  REQUIRE(s.remove(q, {x}, 2) == KSTAGE_OK);
  s.seal(2);
  REQUIRE(info_of(s, x).prim_count == 0);
  KS_OK(write_as(s, q, x, 3, {5, 6}, f64(), KSTAGE_SEMANTIC_VECTOR));
  s.seal(3);
  auto values = sealed(s, q, x);
  REQUIRE(values[prims[1]] == std::pair<int, double>{64, 6});
  kstage_attribute_info_t info = info_of(s, x);
  REQUIRE(info.dtype.bits == 64);
  REQUIRE(info.semantic == KSTAGE_SEMANTIC_VECTOR);
  REQUIRE(info.prim_count == 2);
  REQUIRE(info.schema_count == 2);  // the old column stays: change ranges still see its deletions
  kstage_read_desc_t r = kstage_read_desc_init();
  r.change_range = true;
  r.range_begin = 2;
  r.range_end = 3;
  auto changes = s.read(q, {x}, &r);
  REQUIRE(changes.size() == 2);
  REQUIRE(changes[0].is_delete);
  REQUIRE(changes[0].dtype.bits == 32);
  REQUIRE(changes[0].prims == prims);
  REQUIRE(!changes[1].is_delete);
  REQUIRE(changes[1].semantic == KSTAGE_SEMANTIC_VECTOR);
}

TEST_CASE("pending writes: a prim's schema as the ledger will stand", "[schemas][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 2);
  kstage_query_t d = s.query({prims[0]});
  kstage_query_t all = s.query(prims);
  kstage_token_t m = s.token("m");
  KS_OK(write_as(s, s.query({prims[1]}), m, 1, {9}, f32()));  // the name exists in float32
  s.seal(1);
  // Unsealed float32 at 3 for /p_0: a float64 write at 5 finds it.
  KS_OK(write_as(s, d, m, 3, {1}, f32()));
  const std::string before = s.fingerprint(all, {m});
  KS_FAILS(write_as(s, d, m, 5, {2}, f64()), KSTAGE_INVALID_ARGUMENT,
           "prim '/p_0' (element 0) holds 'm' as float32 NONE (the pending write at ordinal 3)");
  // A float64 write at 2, before it: the pending REJECT write at 3 would then change the
  // prim's schema.
  KS_FAILS(write_as(s, d, m, 2, {2}, f64()), KSTAGE_INVALID_ARGUMENT,
           "prim '/p_0' (element 0): the pending write of 'm' as float32 NONE at ordinal 3 "
           "(KSTAGE_ATTRIBUTE_MODE_REJECT) would then find this write's float64 NONE");
  REQUIRE(s.fingerprint(all, {m}) == before);
  // A delete at 4 between them frees the prim for the float64 write at 5.
  REQUIRE(s.remove(d, {m}, 4) == KSTAGE_OK);
  KS_OK(write_as(s, d, m, 5, {2}, f64()));
  // FORCE at 6 over it, and a FORCE at 2 before the REJECT write at 3? still refused: the write
  // at 3 finds float64 from 2.
  KS_OK(write_as(s, d, m, 6, {3}, f32(), KSTAGE_SEMANTIC_NONE, KSTAGE_ATTRIBUTE_MODE_FORCE));
  KS_FAILS(write_as(s, d, m, 2, {2}, f64(), KSTAGE_SEMANTIC_NONE, KSTAGE_ATTRIBUTE_MODE_FORCE),
           KSTAGE_INVALID_ARGUMENT, "the pending write of 'm' as float32 NONE at ordinal 3");
  // Sealed in ordinal order: 3 float32, 4 gone, 5 float64, 6 float32.
  s.seal(5);
  REQUIRE(sealed(s, all, m)[prims[0]] == std::pair<int, double>{64, 2});
  s.seal(6);
  REQUIRE(sealed(s, all, m)[prims[0]] == std::pair<int, double>{32, 3});
  REQUIRE(info_of(s, m).prim_count == 2);
}

TEST_CASE("a NONE semantic matching two columns is ambiguous", "[schemas][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/a", 3);
  kstage_query_t all = s.query(prims);
  kstage_token_t v = s.token("v");
  KS_OK(write_as(s, s.query({prims[0]}), v, 1, {1}, f32(), KSTAGE_SEMANTIC_POINT));
  KS_OK(write_as(s, s.query({prims[1]}), v, 1, {2}, f32(), KSTAGE_SEMANTIC_NORMAL));
  s.seal(1);
  const std::string before = s.fingerprint(all, {v});
  KS_FAILS(write_as(s, s.query({prims[2]}), v, 2, {3}, f32()), KSTAGE_INVALID_ARGUMENT,
           "semantic NONE is ambiguous for 'v': it holds float32 POINT and float32 NORMAL; name "
           "the semantic");
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = v;
  d.dtype = f32();
  kstage_map_t map = 0;
  KS_FAILS(kstage_map_attribute(s.stage, all, &d, 2, nullptr, 0, &map), KSTAGE_INVALID_ARGUMENT,
           "semantic NONE is ambiguous for 'v'");
  REQUIRE(s.fingerprint(all, {v}) == before);
  // Named, it goes to its column.
  KS_OK(write_as(s, s.query({prims[2]}), v, 2, {3}, f32(), KSTAGE_SEMANTIC_NORMAL));
  s.seal(2);
  REQUIRE(schema_of(s, v, 1).prim_count == 2);
}

TEST_CASE("world transforms and clone with a name of several schemas", "[schemas][scene]") {
  Stage s(host_execution());
  kstage_token_t xform = s.token("omni:xform");
  kstage_token_t m = s.token("m");
  auto w = s.path("/W");
  auto a = s.path("/W/a");
  auto b = s.path("/W/b");
  std::vector<float> eye(16, 0.f);
  for (int i = 0; i < 4; ++i) eye[size_t(i) * 5] = 1.f;
  int64_t one[1] = {1};
  DLTensor t32 = tensor(eye.data(), f32(16), 1, one);
  std::vector<double> eye64(eye.begin(), eye.end());
  DLTensor t64 = tensor(eye64.data(), f64(16), 1, one);
  KS_OK(s.write(s.query({w}), xform, 1, write_data(&t32)));
  KS_OK(s.write(s.query({a}), xform, 1, write_data(&t64)));
  KS_OK(write_as(s, s.query({a}), m, 1, {1}, f32()));
  KS_OK(write_as(s, s.query({b}), m, 1, {2}, f64()));
  s.seal(1);
  kstage_transform_desc_t td = kstage_transform_desc_init();
  kstage_op_t op = 0;
  KS_FAILS(kstage_compute_world_transforms(s.stage, &td, 2, &op), KSTAGE_INVALID_ARGUMENT,
           "the local column 'omni:xform' holds several schemas: world transforms need one");
  // Clone copies each prim's value in its own schema.
  auto t = s.path("/T");
  KS_OK(kstage_clone(s.stage, w, &t, 1, 2, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  s.seal(2);
  auto values = sealed(s, s.query({s.path("/T/a"), s.path("/T/b")}), m);
  REQUIRE(values[s.path("/T/a")] == std::pair<int, double>{32, 1});
  REQUIRE(values[s.path("/T/b")] == std::pair<int, double>{64, 2});
}

// Copy-on-write, not refusal: a FORCE write while a read group of its prims is held goes ahead,
// and the held group keeps the values it was handed.
TEST_CASE("a held read group keeps its values across a FORCE write", "[schemas]") {
  Stage s(host_execution());
  auto prims = s.paths("/h", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t m = s.token("m");
  KS_OK(write_as(s, q, m, 1, {1, 2}, f32()));
  s.seal(1);
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &m, 1, nullptr, &r));
  kstage_read_group_t held{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &held));
  KS_OK(write_as(s, q, m, 2, {10, 20}, f64(), KSTAGE_SEMANTIC_NONE, KSTAGE_ATTRIBUTE_MODE_FORCE));
  s.seal(2);
  // Rows reused by a later float32 write must not show through the held group either.
  KS_OK(write_as(s, s.query({s.path("/h_other")}), m, 3, {99}, f32()));
  s.seal(3);
  const Group g = Stage::copy_group(held);
  REQUIRE(g.dtype.bits == 32);
  REQUIRE(value_of(g, 0) == 1);
  REQUIRE(value_of(g, 1) == 2);
  KS_OK(kstage_release_group(s.stage, held.handle));
  KS_OK(kstage_release_read(s.stage, r));
  auto values = sealed(s, q, m);
  REQUIRE(values[prims[0]] == std::pair<int, double>{64, 10});
}
