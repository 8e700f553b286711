// SPDX-License-Identifier: Apache-2.0
// The semantics that fix a column's layout, as ovstage defines them (kstage.h, kstage_semantic_t):
// ASSET_PATH_ID, PATH_EXPRESSION_ID, RELATIONSHIP_PATH_ID, CONNECTION_PATH_ID, TIME_CODE and
// FRAME, each written (fixed and array where its layout allows) and read back, and each layout
// that does not fit refused, by a write and by a map, with the stage unchanged.
#include "support.hpp"

#include <cstring>

using namespace kstage_test;

namespace {

struct Layout {
  const char* name;  // the column, and the semantic's name in messages
  kstage_semantic_t semantic;
  DLDataType dtype;
  bool fixed, array;  // the kinds it allows
};

// kstage.h's layouts.
const Layout kLayouts[] = {
    {"ASSET_PATH_ID", KSTAGE_SEMANTIC_ASSET_PATH_ID, u64(2), true, true},
    {"PATH_EXPRESSION_ID", KSTAGE_SEMANTIC_PATH_EXPRESSION_ID, u64(1), true, true},
    {"RELATIONSHIP_PATH_ID", KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID, u64(1), true, true},
    {"CONNECTION_PATH_ID", KSTAGE_SEMANTIC_CONNECTION_PATH_ID, u64(2), false, true},
    {"TIME_CODE", KSTAGE_SEMANTIC_TIME_CODE, f64(1), true, true},
    {"FRAME", KSTAGE_SEMANTIC_FRAME, f64(16), true, true},
};

size_t tuple_bytes(DLDataType t) { return size_t(t.bits / 8) * t.lanes; }

// Distinct bytes for `n` tuples of `dtype`; uint64 words are small ids (1 + word index + seed).
std::vector<unsigned char> value_bytes(DLDataType dtype, size_t n, uint64_t seed) {
  std::vector<unsigned char> b(n * tuple_bytes(dtype));
  if (dtype.code == kDLUInt) {
    for (size_t w = 0; w < b.size() / 8; ++w) {
      const uint64_t v = 1 + w + seed;
      std::memcpy(b.data() + w * 8, &v, 8);
    }
  } else {
    for (size_t w = 0; w < b.size() / 8; ++w) {
      const double v = 0.5 * double(w) + double(seed);
      std::memcpy(b.data() + w * 8, &v, 8);
    }
  }
  return b;
}

}  // namespace

TEST_CASE("each layout-fixing semantic is written and read back, fixed and array", "[semantic]") {
  Stage s(host_execution());
  auto prims = s.paths("/sem", 2);
  kstage_query_t q = s.query(prims);
  std::map<std::string, std::vector<std::vector<unsigned char>>> written;
  for (const Layout& l : kLayouts) {
    INFO(l.name);
    if (l.fixed) {
      auto bytes = value_bytes(l.dtype, 2, 10);
      int64_t shape[1] = {2};
      DLTensor t = tensor(bytes.data(), l.dtype, 1, shape);
      kstage_write_data_t w = write_data(&t);
      w.semantic = l.semantic;
      KS_OK(s.write(q, s.token((std::string(l.name) + "_fixed").c_str()), 1, w));
      const size_t tb = tuple_bytes(l.dtype);
      written[std::string(l.name) + "_fixed"] = {
          std::vector<unsigned char>(bytes.begin(), bytes.begin() + ptrdiff_t(tb)),
          std::vector<unsigned char>(bytes.begin() + ptrdiff_t(tb), bytes.end())};
    }
    if (l.array) {
      // Row 0 holds 3 elements, row 1 one.
      auto r0 = value_bytes(l.dtype, 3, 20), r1 = value_bytes(l.dtype, 1, 40);
      int64_t shapes[2] = {3, 1};
      DLTensor t[2] = {tensor(r0.data(), l.dtype, 1, &shapes[0]),
                       tensor(r1.data(), l.dtype, 1, &shapes[1])};
      kstage_write_data_t w = write_data(t, 2, true);
      w.semantic = l.semantic;
      KS_OK(s.write(q, s.token((std::string(l.name) + "_array").c_str()), 1, w));
      written[std::string(l.name) + "_array"] = {r0, r1};
    }
  }
  s.seal(1);
  for (const auto& [name, rows] : written) {
    INFO(name);
    const Layout& l = *std::find_if(std::begin(kLayouts), std::end(kLayouts), [&](const Layout& x) {
      return name.rfind(x.name, 0) == 0 && name[std::strlen(x.name)] == '_';
    });
    const kstage_token_t attr = s.token(name.c_str());
    auto groups = s.read(q, {attr});
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].semantic == l.semantic);
    REQUIRE(groups[0].is_array == (name.find("_array") != std::string::npos));
    REQUIRE(groups[0].dtype.code == l.dtype.code);
    REQUIRE(groups[0].dtype.bits == l.dtype.bits);
    REQUIRE(groups[0].dtype.lanes == l.dtype.lanes);
    auto values = s.values(q, attr);
    REQUIRE(values[prims[0]] == rows[0]);
    REQUIRE(values[prims[1]] == rows[1]);
    kstage_attribute_info_t info = kstage_attribute_info_init();
    KS_OK(kstage_attribute_info(s.stage, attr, &info));
    REQUIRE(info.semantic == l.semantic);
  }
  // A second write with the same semantic fits the column; another semantic does not, for the
  // prims that hold it (one value per prim and name).
  std::vector<double> f(32, 1.0);
  int64_t shape[1] = {2};
  DLTensor t = tensor(f.data(), f64(16), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.semantic = KSTAGE_SEMANTIC_FRAME;
  KS_OK(s.write(q, s.token("FRAME_fixed"), 2, w));
  w.semantic = KSTAGE_SEMANTIC_MATRIX;
  KS_FAILS(s.write(q, s.token("FRAME_fixed"), 3, w), KSTAGE_INVALID_ARGUMENT,
           "holds 'FRAME_fixed' as float64x16 FRAME (the pending write at ordinal 2): the "
           "write's semantic MATRIX does not match its semantic FRAME");
}

TEST_CASE("a write whose layout does not fit its semantic is refused, naming both",
          "[semantic][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/bad", 2);
  kstage_query_t q = s.query(prims);
  const kstage_token_t fresh = s.token("fresh");
  s.write_f32(q, s.token("kept"), 1, {1, 2});
  s.seal(1);
  const std::string before = s.fingerprint(q, {s.token("kept"), fresh});

  // One wrong layout per semantic: another dtype, other lanes, and the wrong kind.
  struct Bad {
    kstage_semantic_t semantic;
    DLDataType dtype;
    bool is_array;
    const char* needle;
  };
  const Bad cases[] = {
      {KSTAGE_SEMANTIC_ASSET_PATH_ID, u64(1), false,
       "semantic ASSET_PATH_ID needs dtype uint64x2 (authored, resolved token ids), got a "
       "fixed-size column of uint64"},
      {KSTAGE_SEMANTIC_ASSET_PATH_ID, f64(2), true, "got an array column of float64x2"},
      {KSTAGE_SEMANTIC_PATH_EXPRESSION_ID, u64(2), false,
       "semantic PATH_EXPRESSION_ID needs dtype uint64 (lanes 1)"},
      {KSTAGE_SEMANTIC_PATH_EXPRESSION_ID, i32(1), true, "int32"},
      {KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID, DLDataType{kDLInt, 64, 1}, true,
       "semantic RELATIONSHIP_PATH_ID needs dtype uint64 (lanes 1), got an array column of int64"},
      {KSTAGE_SEMANTIC_CONNECTION_PATH_ID, u64(2), false,
       "semantic CONNECTION_PATH_ID needs an array column of uint64x2 (path, token ids), got a "
       "fixed-size column of uint64x2"},
      {KSTAGE_SEMANTIC_CONNECTION_PATH_ID, u64(1), true, "got an array column of uint64"},
      {KSTAGE_SEMANTIC_TIME_CODE, f32(1), false,
       "semantic TIME_CODE needs dtype float64 (lanes 1), got a fixed-size column of float32"},
      {KSTAGE_SEMANTIC_TIME_CODE, f64(2), true, "float64x2"},
      {KSTAGE_SEMANTIC_FRAME, f32(16), false,
       "semantic FRAME needs dtype float64x16 (a row-major 4x4), got a fixed-size column of "
       "float32x16"},
      {KSTAGE_SEMANTIC_FRAME, f64(9), true, "float64x9"},
  };
  std::vector<unsigned char> bytes(2 * 16 * 8);
  for (const Bad& c : cases) {
    INFO(c.needle);
    int64_t shapes[2] = {2, 1};
    DLTensor t[2] = {tensor(bytes.data(), c.dtype, 1, &shapes[0]),
                     tensor(bytes.data(), c.dtype, 1, &shapes[1])};
    kstage_write_data_t w = c.is_array ? write_data(t, 2, true) : write_data(t);
    w.semantic = c.semantic;
    KS_FAILS(s.write(q, fresh, 2, w), KSTAGE_INVALID_ARGUMENT, c.needle);
    REQUIRE(s.fingerprint(q, {s.token("kept"), fresh}) == before);

    // A map that would create the column is refused the same way, and opens nothing.
    kstage_map_desc_t d = kstage_map_desc_init();
    d.attribute = fresh;
    d.dtype = c.dtype;
    d.semantic = c.semantic;
    d.is_array = c.is_array;
    const uint64_t counts[2] = {1, 1};
    kstage_map_t m = 0;
    KS_FAILS(kstage_map_attribute(s.stage, q, &d, 2, c.is_array ? counts : nullptr,
                                  c.is_array ? 2 : 0, &m),
             KSTAGE_INVALID_ARGUMENT, c.needle);
    REQUIRE(m == 0);
    REQUIRE(s.fingerprint(q, {s.token("kept"), fresh}) == before);
  }
  kstage_attribute_info_t info = kstage_attribute_info_init();
  REQUIRE(kstage_attribute_info(s.stage, fresh, &info) == KSTAGE_NOT_FOUND);
}

TEST_CASE("a map creates a column of a layout-fixing semantic", "[semantic][map]") {
  Stage s(host_execution());
  auto prims = s.paths("/m", 2);
  kstage_query_t q = s.query(prims);
  const kstage_token_t tc = s.token("time");
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = tc;
  d.dtype = f64(1);
  d.semantic = KSTAGE_SEMANTIC_TIME_CODE;
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &d, 1, nullptr, 0, &m));
  KS_OK(kstage_release_map(s.stage, m));  // abandoned: only the schema check is at stake here
  // A map of an existing column checks its layout against the column's.
  std::vector<double> v = {1.5, 2.5};
  int64_t shape[1] = {2};
  DLTensor t = tensor(v.data(), f64(1), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.semantic = KSTAGE_SEMANTIC_TIME_CODE;
  KS_OK(s.write(q, tc, 1, w));
  s.seal(1);
  d.semantic = KSTAGE_SEMANTIC_POINT;
  KS_FAILS(kstage_map_attribute(s.stage, q, &d, 2, nullptr, 0, &m), KSTAGE_INVALID_ARGUMENT,
           "holds 'time' as float64 TIME_CODE: the write's semantic POINT does not match its "
           "semantic TIME_CODE");
  auto groups = s.read(q, {tc});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].semantic == KSTAGE_SEMANTIC_TIME_CODE);
}
