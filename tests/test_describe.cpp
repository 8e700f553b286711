// SPDX-License-Identifier: Apache-2.0
// Describing a stage: kstage_list_attributes (the attributes with a column, in token order,
// with the two-call count protocol) and kstage_attribute_info (each column's schema,
// residency, write floor and sealed prim count, through the extensible-descriptor rules for a
// struct the library fills); and the queries a generic consumer makes with them (every
// existing prim, the prims holding an attribute). Runs on the emulated device too.
#include "support.hpp"

#include <cstring>

using namespace kstage_test;

namespace {

std::vector<kstage_token_t> listed(Stage& s) {
  uint64_t n = 0;
  KS_OK(kstage_list_attributes(s.stage, nullptr, 0, &n));
  std::vector<kstage_token_t> out(n);
  uint64_t again = 0;
  KS_OK(kstage_list_attributes(s.stage, out.data(), out.size(), &again));
  REQUIRE(again == n);
  return out;
}

kstage_attribute_info_t info_of(Stage& s, kstage_token_t a) {
  kstage_attribute_info_t info = kstage_attribute_info_init();
  KS_OK(kstage_attribute_info(s.stage, a, &info));
  REQUIRE(info.struct_size == sizeof(kstage_attribute_info_t));
  return info;
}

// An int32 array (ragged) write of `rows` to the query's prims.
void write_rows(Stage& s, kstage_query_t q, kstage_token_t a, uint64_t ordinal,
                std::vector<std::vector<int32_t>> rows) {
  std::vector<int64_t> shapes(rows.size());
  std::vector<DLTensor> tensors;
  for (size_t i = 0; i < rows.size(); ++i) {
    shapes[i] = int64_t(rows[i].size());
    tensors.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), DLDataType{kDLInt, 32, 1},
                             1, &shapes[i]));
  }
  KS_OK(s.write(q, a, ordinal, write_data(tensors.data(), tensors.size(), true)));
}

}  // namespace

TEST_CASE("an empty stage lists no attributes", "[describe]") {
  Stage s(host_execution());
  s.token("never_written");  // a token is not a column
  REQUIRE(listed(s).empty());
}

TEST_CASE("attributes are listed with their schema, residency, floor and prim count",
          "[describe]") {
  Stage s(host_execution());
  const kstage_token_t vel = s.token("vel"), pos = s.token("pos"), nbrs = s.token("nbrs");
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);

  std::vector<float> v(12, 1.f);
  int64_t shape[1] = {4};
  DLTensor t = tensor(v.data(), f32(3), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.semantic = KSTAGE_SEMANTIC_POINT;
  KS_OK(s.write(q, pos, 1, w));
  write_rows(s, s.query({prims[0], prims[2]}), nbrs, 1, {{1, 2, 3}, {}});

  // Columns exist from the accepted write, before it is sealed: schema known, no prims yet.
  REQUIRE(listed(s) == std::vector<kstage_token_t>{pos, nbrs});  // token order (vel: none)
  kstage_attribute_info_t p = info_of(s, pos);
  CHECK(p.attribute == pos);
  CHECK(p.semantic == KSTAGE_SEMANTIC_POINT);
  CHECK(p.dtype.code == kDLFloat);
  CHECK(p.dtype.bits == 32);
  CHECK(p.dtype.lanes == 3);
  CHECK_FALSE(p.is_array);
  CHECK(p.residency.device_type == kResidency.device_type);
  CHECK(p.residency.device_id == kResidency.device_id);
  CHECK(p.write_floor == 0);
  CHECK(p.prim_count == 0);

  s.seal(1);
  p = info_of(s, pos);
  CHECK(p.write_floor == 1);
  CHECK(p.prim_count == 4);
  kstage_attribute_info_t n = info_of(s, nbrs);
  CHECK(n.is_array);
  CHECK(n.dtype.code == kDLInt);
  CHECK(n.dtype.bits == 32);
  CHECK(n.dtype.lanes == 1);
  CHECK(n.semantic == KSTAGE_SEMANTIC_NONE);
  CHECK(n.prim_count == 2);

  // Per-attribute floors; a later attribute's token sorts after.
  s.write_f32(q, vel, 2, {1, 2, 3, 4});
  s.seal(3, {vel});
  CHECK(info_of(s, vel).write_floor == 3);
  CHECK(info_of(s, pos).write_floor == 1);
  REQUIRE(listed(s) == std::vector<kstage_token_t>{vel, pos, nbrs});

  // Deletes lower the count; a column whose prims are all gone stays listed.
  KS_OK(s.remove(s.query({prims[0]}), {pos}, 4));
  KS_OK(s.remove(s.query({prims[0], prims[2]}), {nbrs}, 4));
  s.seal(4);
  CHECK(info_of(s, pos).prim_count == 3);
  CHECK(info_of(s, nbrs).prim_count == 0);
  REQUIRE(listed(s) == std::vector<kstage_token_t>{vel, pos, nbrs});
}

TEST_CASE("kstage_list_attributes counts, and fills only its capacity", "[describe]") {
  Stage s(host_execution());
  const kstage_token_t a = s.token("a"), b = s.token("b"), c = s.token("c");
  kstage_query_t q = s.query(s.paths("/p", 2));
  for (kstage_token_t t : {a, b, c}) s.write_f32(q, t, 1, {1, 2});
  kstage_token_t out[3] = {99, 99, 99};
  uint64_t n = 0;
  KS_OK(kstage_list_attributes(s.stage, out, 2, &n));
  CHECK(n == 3);
  CHECK(out[0] == a);
  CHECK(out[1] == b);
  CHECK(out[2] == 99);  // past the capacity: untouched
  KS_OK(kstage_list_attributes(s.stage, out, 3, &n));
  CHECK(out[2] == c);

  KS_FAILS(kstage_list_attributes(s.stage, out, 3, nullptr), KSTAGE_INVALID_ARGUMENT, "count");
  KS_FAILS(kstage_list_attributes(s.stage, nullptr, 1, &n), KSTAGE_INVALID_ARGUMENT,
           "attributes is NULL but capacity is 1");
  KS_FAILS(kstage_list_attributes(0, out, 3, &n), KSTAGE_INVALID_HANDLE, "");
}

TEST_CASE("kstage_attribute_info: errors name the input and write nothing", "[describe]") {
  Stage s(host_execution());
  const kstage_token_t a = s.token("a"), ghost = s.token("ghost");
  s.write_f32(s.query(s.paths("/p", 2)), a, 1, {1, 2});
  kstage_attribute_info_t info = kstage_attribute_info_init();
  info.prim_count = 12345;
  KS_FAILS(kstage_attribute_info(s.stage, ghost, &info), KSTAGE_NOT_FOUND,
           "attribute 'ghost' has no column");
  CHECK(info.prim_count == 12345);
  KS_FAILS(kstage_attribute_info(s.stage, 987654, &info), KSTAGE_INVALID_ARGUMENT,
           "not a token of this stage");
  KS_FAILS(kstage_attribute_info(s.stage, a, nullptr), KSTAGE_INVALID_ARGUMENT, "info is NULL");
  info.struct_size = 0;
  KS_FAILS(
      kstage_attribute_info(s.stage, a, &info), KSTAGE_INVALID_ARGUMENT,
      "info.struct_size is 0: start the kstage_attribute_info_t from kstage_attribute_info_init()");
  info.struct_size = 47;
  KS_FAILS(kstage_attribute_info(s.stage, a, &info), KSTAGE_INVALID_ARGUMENT,
           "info.struct_size is 47");
  CHECK(info.prim_count == 12345);
  KS_FAILS(kstage_attribute_info(0, a, &info), KSTAGE_INVALID_HANDLE, "");
}

TEST_CASE("kstage_attribute_info writes exactly struct_size bytes", "[describe]") {
  Stage s(host_execution());
  const kstage_token_t a = s.token("a");
  s.write_f32(s.query(s.paths("/p", 2)), a, 1, {1, 2}, 1);
  s.seal(1);
  // A newer caller's larger struct: the fields this library knows, zeros after them.
  unsigned char bytes[sizeof(kstage_attribute_info_t) + 24];
  std::memset(bytes, 0xAB, sizeof bytes);
  const uint32_t size = uint32_t(sizeof(kstage_attribute_info_t) + 16);
  std::memcpy(bytes, &size, sizeof size);
  KS_OK(kstage_attribute_info(s.stage, a, reinterpret_cast<kstage_attribute_info_t*>(bytes)));
  kstage_attribute_info_t got;
  std::memcpy(&got, bytes, sizeof got);
  CHECK(got.struct_size == size);  // the caller's, kept
  CHECK(got.attribute == a);
  CHECK(got.prim_count == 2);
  CHECK(got.write_floor == 1);
  for (unsigned char r : got.reserved) CHECK(r == 0);
  for (size_t i = sizeof(kstage_attribute_info_t); i < size; ++i) CHECK(bytes[i] == 0);
  for (size_t i = size; i < sizeof bytes; ++i) CHECK(bytes[i] == 0xAB);  // past struct_size
}

TEST_CASE("a generic consumer's queries: every existing prim, the prims holding one",
          "[describe]") {
  Stage s(host_execution());
  const kstage_token_t a = s.token("a"), b = s.token("b");
  auto prims = s.paths("/p", 4);
  s.write_f32(s.query({prims[0], prims[1], prims[2]}), a, 1, {1, 2, 3});
  s.write_f32(s.query({prims[2], prims[3]}), b, 1, {4, 5});
  s.seal(1);
  kstage_filter_t all{};
  CHECK(s.filtered(all) == prims);
  for (kstage_token_t t : listed(s)) {
    kstage_filter_t holding{};
    holding.has_attributes = &t;
    holding.has_attribute_count = 1;
    CHECK(s.filtered(holding).size() == info_of(s, t).prim_count);
  }
}

TEST_CASE("every existing prim of whole ranges, gaps and explicit paths, in path-id order",
          "[describe]") {
  // kstage_query_filter walks the prim table by runs (a whole page of range members is one
  // run, no look at its prims): the result must still be exactly the existing prims.
  Stage s(host_execution());
  const kstage_token_t a = s.token("a");
  const uint64_t n = 2 * 65536 + 3;
  const kstage_path_t first = s.range("/r", "p", 0, n);
  kstage_query_t range = s.range_query(first);
  s.write_f32(range, a, 1, std::vector<float>(n, 1.0f));
  const std::vector<kstage_path_t> loose = s.paths("/loose", 3);
  s.write_f32(s.query(loose), a, 1, {1, 2, 3});
  s.seal(1);
  std::vector<kstage_path_t> want;
  for (uint64_t i = 0; i < n; ++i) want.push_back(first + i);
  want.insert(want.end(), loose.begin(), loose.end());
  std::sort(want.begin(), want.end());
  kstage_filter_t all{};
  CHECK(s.filtered(all) == want);
  // A gap in a page of members (a deleted prim), and the last of a page: runs split there.
  KS_OK(s.remove(s.query({first + 70000, first + 65535}), {}, 2));
  s.seal(2);
  want.erase(
      std::remove_if(want.begin(), want.end(),
                     [&](kstage_path_t p) { return p == first + 70000 || p == first + 65535; }),
      want.end());
  CHECK(s.filtered(all) == want);
  // Only the range's members left, and not all of them: still every one, in order, and a write
  // through the query (one run: a progression) reaches exactly them.
  KS_OK(s.remove(s.query(loose), {}, 3));
  s.seal(3);
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &q));
  std::vector<kstage_path_t> members(want.begin(), want.end());
  members.erase(std::remove_if(members.begin(), members.end(),
                               [&](kstage_path_t p) { return p < first || p >= first + n; }),
                members.end());
  CHECK(s.prims_of(q) == members);
  kstage_query_t tail = 0;
  KS_OK(kstage_query_range(s.stage, first, 70001, 0, 0, &tail));  // p70001 .. the end: one run
  const kstage_token_t b = s.token("b");
  s.write_f32(tail, b, 4, std::vector<float>(n - 70001, 2.0f));
  s.seal(4);
  kstage_filter_t holding_b{};
  holding_b.has_attributes = &b;
  holding_b.has_attribute_count = 1;
  kstage_query_t qb = 0;
  KS_OK(kstage_query_filter(s.stage, &holding_b, &qb));
  CHECK(s.prims_of(qb).size() == n - 70001);
  s.write_f32(qb, b, 5, std::vector<float>(n - 70001, 3.0f));  // through the filter's query
  s.seal(5);
  uint64_t rows = 0;
  for (const auto& g : s.read(tail, {b})) {
    for (const auto& v : g.values) REQUIRE(as_floats(v) == std::vector<float>{3.0f});
    rows += g.prims.size();
  }
  CHECK(rows == n - 70001);
  KS_OK(kstage_query_release(s.stage, q));
  KS_OK(kstage_query_release(s.stage, qb));
  KS_OK(kstage_query_release(s.stage, tail));
  KS_OK(kstage_query_release(s.stage, range));
}
