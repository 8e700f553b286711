// SPDX-License-Identifier: Apache-2.0
// Fixed-size writes (is_array = false), checked by reading the sealed values
// back: canonical and convenience layouts, every dtype, semantics, count /
// index_map / mask, strided and offset sources, growth, prim modes, batches,
// and the zero-copy shape of latest reads.
#include "support.hpp"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <numeric>

using namespace kstage_test;

namespace {

std::vector<float> iota_f(size_t n, float start = 0.f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<unsigned char> bytes_of(const float* p, size_t n) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(p);
  return std::vector<unsigned char>(b, b + n * sizeof(float));
}

// Submits a write and waits for it; returns the call's status (the op is
// released). Unlike Stage::write, does not REQUIRE success.
kstage_status_t submit(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                       const kstage_write_data_t& w,
                       kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT) {
  return s.write(q, attr, ordinal, w, mode);
}

// Opens a read, hands every raw group to `f`, then releases everything.
template <class F>
void with_groups(Stage& s, kstage_query_t q, std::vector<kstage_token_t> attrs,
                 const kstage_read_desc_t* desc, F f) {
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, attrs.data(), attrs.size(), desc, &r));
  std::vector<kstage_read_group_t> groups;
  for (;;) {
    kstage_read_group_t g{};
    kstage_status_t st = kstage_fetch_read_next(s.stage, r, 0, &g);
    if (st == KSTAGE_END_OF_ITERATION) break;
    KS_OK(st);
    groups.push_back(g);
  }
  f(groups);
  for (const kstage_read_group_t& g : groups) KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
}

bool same(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// Expected per-prim float tuples: row r of `rows` (width `lanes`) for prim i.
std::map<kstage_path_t, std::vector<float>> expect_rows(
    const std::vector<kstage_path_t>& prims, const std::vector<std::vector<float>>& rows) {
  std::map<kstage_path_t, std::vector<float>> m;
  for (size_t i = 0; i < prims.size(); ++i) m[prims[i]] = rows[i];
  return m;
}

}  // namespace

// ---------------------------------------------------------------------------
// Layouts

TEST_CASE("canonical layout: ndim 1, shape [rows], lanes = tuple width", "[write][fixed][layout]") {
  Stage s(host_execution());
  const uint16_t lanes = GENERATE(as<uint16_t>{}, 1, 3, 4, 16);
  CAPTURE(lanes);
  auto prims = s.paths("/c", 5);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("value");
  std::vector<float> v(5 * lanes);
  for (size_t i = 0; i < 5; ++i)
    for (size_t l = 0; l < lanes; ++l) v[i * lanes + l] = float(i * 100 + l) + 0.25f;
  s.write_f32(q, attr, 1, v, lanes);
  s.seal(1);

  auto groups = s.read(q, {attr});
  REQUIRE(groups.size() == 1);
  const Group& g = groups[0];
  REQUIRE(g.prims == prims);
  REQUIRE(same(g.dtype, f32(lanes)));
  REQUIRE_FALSE(g.is_array);
  REQUIRE_FALSE(g.is_delete);
  REQUIRE(g.semantic == KSTAGE_SEMANTIC_NONE);
  for (size_t i = 0; i < 5; ++i)
    REQUIRE(as_floats(g.values[i]) ==
            std::vector<float>(v.begin() + i * lanes, v.begin() + (i + 1) * lanes));
  with_groups(s, q, {attr}, nullptr, [&](const std::vector<kstage_read_group_t>& gs) {
    REQUIRE(gs.size() == 1);
    REQUIRE(gs[0].data.tensor_count == 1);
    const DLTensor& t = gs[0].data.tensors[0];
    REQUIRE(t.ndim == 1);
    REQUIRE(t.shape[0] == 5);
    REQUIRE(same(t.dtype, f32(lanes)));
    REQUIRE(t.device.device_type == kResidency.device_type);
  });
}

TEST_CASE("float64 matrix4d column with MATRIX semantic", "[write][fixed][layout]") {
  Stage s(host_execution());
  auto prims = s.paths("/xf", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("xform");
  std::vector<double> m(3 * 16);
  for (size_t i = 0; i < m.size(); ++i) m[i] = double(i) * 1.5 - 7.0;
  int64_t shape[1] = {3};
  DLTensor t = tensor(m.data(), f64(16), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.semantic = KSTAGE_SEMANTIC_MATRIX;
  KS_OK(submit(s, q, attr, 1, w));
  s.seal(1);
  auto groups = s.read(q, {attr});
  REQUIRE(groups.size() == 1);
  REQUIRE(same(groups[0].dtype, DLDataType{kDLFloat, 64, 16}));
  REQUIRE(groups[0].semantic == KSTAGE_SEMANTIC_MATRIX);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(groups[0].values[i].size() == 16 * sizeof(double));
    REQUIRE(std::memcmp(groups[0].values[i].data(), &m[i * 16], 16 * sizeof(double)) == 0);
  }
}

TEST_CASE("convenience shapes fold trailing axes into lanes; reads are canonical",
          "[write][fixed][layout]") {
  Stage s(host_execution());
  auto prims = s.paths("/v", 4);
  kstage_query_t q = s.query(prims);

  struct Case {
    const char* name;
    std::vector<int64_t> shape;
    uint16_t dtype_lanes;
    uint16_t folded;
  };
  const std::vector<Case> cases = {
      {"n3_lanes1", {4, 3}, 1, 3}, {"n44_lanes1", {4, 4, 4}, 1, 16}, {"n4_lanes4", {4, 4}, 4, 16},
      {"n1_lanes1", {4, 1}, 1, 1}, {"n22_lanes2", {4, 2, 2}, 2, 8},
  };
  std::vector<std::vector<float>> data;
  for (const Case& c : cases) {
    INFO(c.name);
    std::vector<float> v = iota_f(size_t(4) * c.folded, 1000.f);
    std::vector<int64_t> shape = c.shape;
    DLTensor t = tensor(v.data(), f32(c.dtype_lanes), int(shape.size()), shape.data());
    kstage_write_data_t w = write_data(&t);
    KS_OK(submit(s, q, s.token(c.name), 1, w));
    data.push_back(v);
  }
  s.seal(1);
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    INFO(c.name);
    with_groups(s, q, {s.token(c.name)}, nullptr, [&](const std::vector<kstage_read_group_t>& gs) {
      REQUIRE(gs.size() == 1);
      REQUIRE(same(gs[0].dtype, f32(c.folded)));
      REQUIRE(gs[0].data.tensor_count == 1);
      REQUIRE(gs[0].data.tensors[0].ndim == 1);
      REQUIRE(gs[0].data.tensors[0].shape[0] == 4);
      REQUIRE(same(gs[0].data.tensors[0].dtype, f32(c.folded)));
    });
    auto got = s.values(q, s.token(c.name));
    REQUIRE(got.size() == 4);
    for (size_t i = 0; i < 4; ++i)
      REQUIRE(got[prims[i]] == bytes_of(&data[k][i * c.folded], c.folded));
  }

  // A convenience shape and the canonical layout address the same column.
  kstage_token_t pts = s.token("n3_lanes1");
  std::vector<float> canon = iota_f(12, -50.f);
  int64_t shape1[1] = {4};
  DLTensor t = tensor(canon.data(), f32(3), 1, shape1);
  KS_OK(submit(s, q, pts, 2, write_data(&t)));
  std::vector<float> conv = iota_f(12, 500.f);
  int64_t shape2[2] = {4, 3};
  DLTensor t2 = tensor(conv.data(), f32(1), 2, shape2);
  KS_OK(submit(s, q, pts, 3, write_data(&t2)));
  s.seal(2);
  REQUIRE(s.floats(q, pts)[prims[1]] == std::vector<float>{-47.f, -46.f, -45.f});
  s.seal(3);
  REQUIRE(s.floats(q, pts)[prims[3]] == std::vector<float>{509.f, 510.f, 511.f});
}

// ---------------------------------------------------------------------------
// Dtypes and semantics

TEST_CASE("every supported dtype round-trips its bytes exactly", "[write][fixed][dtype]") {
  Stage s(host_execution());
  auto prims = s.paths("/d", 3);
  kstage_query_t q = s.query(prims);
  const std::vector<DLDataType> dtypes = {
      {kDLInt, 8, 1},    {kDLInt, 16, 1},     {kDLInt, 32, 1},     {kDLInt, 64, 1},
      {kDLUInt, 8, 1},   {kDLUInt, 16, 1},    {kDLUInt, 32, 1},    {kDLUInt, 64, 1},
      {kDLFloat, 16, 1}, {kDLFloat, 32, 1},   {kDLFloat, 64, 1},   {kDLBfloat, 16, 1},
      {kDLBool, 8, 1},   {kDLComplex, 64, 1}, {kDLComplex, 128, 1}};
  struct Col {
    kstage_token_t attr;
    DLDataType dtype;
    std::vector<unsigned char> bytes;
  };
  std::vector<Col> cols;
  uint32_t seed = 12345;
  for (DLDataType base : dtypes) {
    for (uint16_t lanes : {uint16_t(1), uint16_t(255)}) {
      DLDataType dt = base;
      dt.lanes = lanes;
      const size_t tuple = size_t(dt.bits / 8) * lanes;
      Col c;
      c.dtype = dt;
      c.attr = s.token(("a_" + std::to_string(dt.code) + "_" + std::to_string(dt.bits) + "_" +
                        std::to_string(lanes))
                           .c_str());
      c.bytes.resize(3 * tuple);
      for (unsigned char& b : c.bytes) {
        seed = seed * 1664525u + 1013904223u;
        b = (unsigned char)(seed >> 24);
        if (dt.code == kDLBool) b &= 1;
      }
      int64_t shape[1] = {3};
      DLTensor t = tensor(c.bytes.data(), dt, 1, shape);
      INFO("dtype code " << int(dt.code) << " bits " << int(dt.bits) << " lanes " << lanes);
      KS_OK(submit(s, q, c.attr, 1, write_data(&t)));
      cols.push_back(std::move(c));
    }
  }
  s.seal(1);
  std::vector<kstage_token_t> attrs;
  for (const Col& c : cols) attrs.push_back(c.attr);
  auto groups = s.read(q, attrs);  // one read over every column
  REQUIRE(groups.size() == cols.size());
  for (const Group& g : groups) {
    auto it =
        std::find_if(cols.begin(), cols.end(), [&](const Col& c) { return c.attr == g.attribute; });
    REQUIRE(it != cols.end());
    INFO("dtype code " << int(it->dtype.code) << " bits " << int(it->dtype.bits) << " lanes "
                       << it->dtype.lanes);
    REQUIRE(same(g.dtype, it->dtype));
    REQUIRE(g.prims == prims);
    const size_t tuple = size_t(it->dtype.bits / 8) * it->dtype.lanes;
    for (size_t i = 0; i < 3; ++i)
      REQUIRE(g.values[i] == std::vector<unsigned char>(it->bytes.begin() + i * tuple,
                                                        it->bytes.begin() + (i + 1) * tuple));
  }
}

TEST_CASE("semantics are stored with the column and returned by reads",
          "[write][fixed][semantic]") {
  Stage s(host_execution());
  auto prims = s.paths("/sem", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t t_a = s.token("tok_a"), t_b = s.token("tok_b");

  struct Case {
    const char* name;
    DLDataType dtype;
    kstage_semantic_t semantic;
  };
  const std::vector<Case> cases = {
      {"point", f32(3), KSTAGE_SEMANTIC_POINT},     {"vector", f32(3), KSTAGE_SEMANTIC_VECTOR},
      {"normal", f32(3), KSTAGE_SEMANTIC_NORMAL},   {"color", f32(4), KSTAGE_SEMANTIC_COLOR},
      {"quat", f32(4), KSTAGE_SEMANTIC_QUATERNION}, {"matrix", f64(16), KSTAGE_SEMANTIC_MATRIX},
      {"uv", f32(2), KSTAGE_SEMANTIC_TEXCOORD},     {"token", u64(1), KSTAGE_SEMANTIC_TOKEN_ID},
      {"pathref", u64(1), KSTAGE_SEMANTIC_PATH_ID}, {"plain", i32(2), KSTAGE_SEMANTIC_NONE},
  };
  std::map<std::string, std::vector<unsigned char>> written;
  for (const Case& c : cases) {
    INFO(c.name);
    const size_t tuple = size_t(c.dtype.bits / 8) * c.dtype.lanes;
    std::vector<unsigned char> bytes(2 * tuple);
    if (c.semantic == KSTAGE_SEMANTIC_TOKEN_ID) {
      const uint64_t ids[2] = {t_a, t_b};
      std::memcpy(bytes.data(), ids, sizeof ids);
    } else if (c.semantic == KSTAGE_SEMANTIC_PATH_ID) {
      const uint64_t ids[2] = {prims[1], prims[0]};
      std::memcpy(bytes.data(), ids, sizeof ids);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (unsigned char)(i * 7 + 3);
    }
    int64_t shape[1] = {2};
    DLTensor t = tensor(bytes.data(), c.dtype, 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = c.semantic;
    KS_OK(submit(s, q, s.token(c.name), 1, w));
    // The same semantic again is accepted (matches the column).
    KS_OK(submit(s, q, s.token(c.name), 2, w));
    written[c.name] = bytes;
  }
  s.seal(2);
  for (const Case& c : cases) {
    INFO(c.name);
    auto groups = s.read(q, {s.token(c.name)});
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].semantic == c.semantic);
    REQUIRE(same(groups[0].dtype, c.dtype));
    const size_t tuple = size_t(c.dtype.bits / 8) * c.dtype.lanes;
    const auto& bytes = written[c.name];
    REQUIRE(groups[0].values[0] ==
            std::vector<unsigned char>(bytes.begin(), bytes.begin() + tuple));
    REQUIRE(groups[0].values[1] == std::vector<unsigned char>(bytes.begin() + tuple, bytes.end()));
  }
  // TOKEN_ID values are token ids of the stage.
  auto tok = s.values(q, s.token("token"));
  uint64_t id = 0;
  std::memcpy(&id, tok[prims[1]].data(), 8);
  REQUIRE(id == t_b);
}

// ---------------------------------------------------------------------------
// count, index_map, mask

TEST_CASE("count 0 writes every prim, count k only the leading k", "[write][fixed][count]") {
  Stage s(host_execution());
  auto prims = s.paths("/n", 5);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a"), b = s.token("b");
  s.write_f32(q, a, 1, {0, 1, 2, 3, 4});
  s.seal(1);
  REQUIRE(s.floats(q, a).size() == 5);

  std::vector<float> two = {100, 101};
  int64_t shape2[1] = {2};
  DLTensor t = tensor(two.data(), f32(), 1, shape2);
  kstage_write_data_t w = write_data(&t);
  w.count = 2;
  KS_OK(submit(s, q, a, 2, w));
  s.seal(2);
  REQUIRE(s.floats(q, a) == expect_rows(prims, {{100}, {101}, {2}, {3}, {4}}));

  // To a new attribute: the trailing prims stay absent.
  std::vector<float> three = {7, 8, 9};
  int64_t shape3[1] = {3};
  DLTensor t3 = tensor(three.data(), f32(), 1, shape3);
  kstage_write_data_t w3 = write_data(&t3);
  w3.count = 3;
  KS_OK(submit(s, q, b, 3, w3));
  s.seal(3);
  auto got = s.floats(q, b);
  REQUIRE(got.size() == 3);
  REQUIRE(got[prims[0]] == std::vector<float>{7});
  REQUIRE(got[prims[2]] == std::vector<float>{9});
  REQUIRE(got.count(prims[3]) == 0);
  REQUIRE(got.count(prims[4]) == 0);
  auto groups = s.read(q, {b});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].prims == std::vector<kstage_path_t>(prims.begin(), prims.begin() + 3));

  // count == query size is the same as count 0.
  std::vector<float> five = {50, 51, 52, 53, 54};
  int64_t shape5[1] = {5};
  DLTensor t5 = tensor(five.data(), f32(), 1, shape5);
  kstage_write_data_t w5 = write_data(&t5);
  w5.count = 5;
  KS_OK(submit(s, q, a, 4, w5));
  s.seal(4);
  REQUIRE(s.floats(q, a) == expect_rows(prims, {{50}, {51}, {52}, {53}, {54}}));

  // count beyond the query is rejected, and so is a row count that is not count.
  std::vector<float> six(6, 1.f);
  int64_t shape6[1] = {6};
  DLTensor t6 = tensor(six.data(), f32(), 1, shape6);
  kstage_write_data_t w6 = write_data(&t6);
  w6.count = 6;
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 5, &w6, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "count 6 exceeds the query's 5 prims");
  w5.count = 2;  // 5 rows for 2 prims
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 5, &w5, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "5 source row(s)");
  REQUIRE(op == 0);
  s.seal(5);
  REQUIRE(s.floats(q, a) == expect_rows(prims, {{50}, {51}, {52}, {53}, {54}}));
}

TEST_CASE("index_map gathers, reorders and broadcasts source rows", "[write][fixed][index_map]") {
  // Every case through index_map (uint32) and through index_map64 (int64): the same rows.
  const bool wide = GENERATE(false, true);
  CAPTURE(wide);
  std::deque<std::vector<int64_t>> wide_maps;  // alive until the test ends
  auto set_map = [&](kstage_write_data_t& w, const uint32_t* map, size_t n) {
    if (!wide) {
      w.index_map = map;
      return;
    }
    wide_maps.emplace_back(map, map + n);
    w.index_map64 = wide_maps.back().data();
  };
  Stage s(host_execution());
  auto prims = s.paths("/g", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");

  // Three source rows, four prims: gather with a repeat.
  std::vector<float> src = {10, 11, 12, 20, 21, 22, 30, 31, 32};
  int64_t shape3[1] = {3};
  DLTensor t = tensor(src.data(), f32(3), 1, shape3);
  const uint32_t gather[4] = {2, 0, 1, 2};
  kstage_write_data_t w = write_data(&t);
  w.count = 4;
  set_map(w, gather, 4);
  KS_OK(submit(s, q, a, 1, w));
  s.seal(1);
  REQUIRE(s.floats(q, a) ==
          expect_rows(prims, {{30, 31, 32}, {10, 11, 12}, {20, 21, 22}, {30, 31, 32}}));

  // Broadcast: all zeros copies row 0 to every prim, from a single row.
  std::vector<float> one = {7, 8, 9};
  int64_t shape1[1] = {1};
  DLTensor t1 = tensor(one.data(), f32(3), 1, shape1);
  const uint32_t zeros[4] = {0, 0, 0, 0};
  kstage_write_data_t wb = write_data(&t1);
  wb.count = 4;
  set_map(wb, zeros, 4);
  KS_OK(submit(s, q, a, 2, wb));
  s.seal(2);
  REQUIRE(s.floats(q, a) == expect_rows(prims, {{7, 8, 9}, {7, 8, 9}, {7, 8, 9}, {7, 8, 9}}));

  // Reverse a full set of rows.
  std::vector<float> four = iota_f(12);
  int64_t shape4[1] = {4};
  DLTensor t4 = tensor(four.data(), f32(3), 1, shape4);
  const uint32_t reverse[4] = {3, 2, 1, 0};
  kstage_write_data_t wr = write_data(&t4);
  wr.count = 4;
  set_map(wr, reverse, 4);
  KS_OK(submit(s, q, a, 3, wr));
  s.seal(3);
  REQUIRE(s.floats(q, a) == expect_rows(prims, {{9, 10, 11}, {6, 7, 8}, {3, 4, 5}, {0, 1, 2}}));

  // More source rows than count: count 2 picks rows 5 and 3 of six; prims 2, 3 keep theirs.
  std::vector<float> six = iota_f(18, 100.f);
  int64_t shape6[1] = {6};
  DLTensor t6 = tensor(six.data(), f32(3), 1, shape6);
  const uint32_t pick[2] = {5, 3};
  kstage_write_data_t wp = write_data(&t6);
  wp.count = 2;
  set_map(wp, pick, 2);
  KS_OK(submit(s, q, a, 4, wp));
  s.seal(4);
  REQUIRE(s.floats(q, a) ==
          expect_rows(prims, {{115, 116, 117}, {109, 110, 111}, {3, 4, 5}, {0, 1, 2}}));

  // index_map with a fresh attribute and count < query size: only the leading prims appear.
  kstage_token_t b = s.token("b");
  const uint32_t pick1[1] = {4};
  kstage_write_data_t wf = write_data(&t6);
  wf.count = 1;
  set_map(wf, pick1, 1);
  KS_OK(submit(s, q, b, 5, wf));
  s.seal(5);
  auto got = s.floats(q, b);
  REQUIRE(got.size() == 1);
  REQUIRE(got[prims[0]] == std::vector<float>{112, 113, 114});
}

TEST_CASE("mask selects elements; unselected prims keep their values", "[write][fixed][mask]") {
  Stage s(host_execution());
  constexpr size_t kPrims = 200, kCount = 150;
  auto prims = s.paths("/m", kPrims);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");
  std::vector<float> base(kPrims * 2);
  for (size_t i = 0; i < kPrims; ++i) base[2 * i] = float(i), base[2 * i + 1] = -float(i);
  s.write_f32(q, a, 1, base, 2);
  s.seal(1);

  // Three words cover 150 elements; bits 22..63 of word 2 (elements 150..191,
  // which the query does have) lie beyond count and must be ignored.
  uint64_t mask[3] = {0, 0, 0};
  std::vector<bool> selected(kCount, false);
  for (size_t i = 0; i < kCount; ++i)
    if (i % 3 == 0 || i == 64 || i == 127 || i == 128 || i == 149) {
      selected[i] = true;
      mask[i / 64] |= uint64_t(1) << (i % 64);
    }
  mask[2] |= ~((uint64_t(1) << (kCount % 64)) - 1);  // stray bits past count
  std::vector<float> src(kCount * 2);
  for (size_t i = 0; i < kCount; ++i)
    src[2 * i] = 1000.f + float(i), src[2 * i + 1] = 2000.f + float(i);
  int64_t shape[1] = {int64_t(kCount)};
  DLTensor t = tensor(src.data(), f32(2), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.count = kCount;
  w.mask = mask;
  KS_OK(submit(s, q, a, 2, w));
  s.seal(2);
  auto got = s.floats(q, a);
  REQUIRE(got.size() == kPrims);
  for (size_t i = 0; i < kPrims; ++i) {
    INFO("prim " << i);
    if (i < kCount && selected[i])
      REQUIRE(got[prims[i]] == std::vector<float>{1000.f + float(i), 2000.f + float(i)});
    else REQUIRE(got[prims[i]] == std::vector<float>{float(i), -float(i)});
  }

  // A masked write to a new attribute creates only the selected prims.
  kstage_token_t b = s.token("b");
  KS_OK(submit(s, q, b, 3, w));
  s.seal(3);
  auto groups = s.read(q, {b});
  REQUIRE(groups.size() == 1);
  std::vector<kstage_path_t> want;
  for (size_t i = 0; i < kCount; ++i)
    if (selected[i]) want.push_back(prims[i]);
  REQUIRE(groups[0].prims == want);
  for (size_t k = 0; k < want.size(); ++k) {
    const size_t i = size_t(std::find(prims.begin(), prims.end(), want[k]) - prims.begin());
    REQUIRE(as_floats(groups[0].values[k]) ==
            std::vector<float>{1000.f + float(i), 2000.f + float(i)});
  }

  // An all-zero mask writes nothing.
  uint64_t none[3] = {0, 0, 0};
  w.mask = none;
  KS_OK(submit(s, q, a, 4, w));
  s.seal(4);
  REQUIRE(s.floats(q, a) == got);
}

TEST_CASE("mask over a short count: only the leading elements are addressed",
          "[write][fixed][mask]") {
  Stage s(host_execution());
  auto prims = s.paths("/ms", 6);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");
  s.write_f32(q, a, 1, {0, 1, 2, 3, 4, 5});
  s.seal(1);
  // count 3, bits 0 and 2 selected, bits 3..5 set but beyond count.
  const uint64_t mask[1] = {0b111101};
  std::vector<float> src = {10, 11, 12};
  int64_t shape[1] = {3};
  DLTensor t = tensor(src.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.count = 3;
  w.mask = mask;
  KS_OK(submit(s, q, a, 2, w));
  s.seal(2);
  REQUIRE(s.floats(q, a) == expect_rows(prims, {{10}, {1}, {12}, {3}, {4}, {5}}));
}

TEST_CASE("masked writes: new and existing targets, prim modes, tombstones, a full mask",
          "[write][fixed][mask]") {
  // A masked write targets a selection of the query's prims: the engine keeps
  // the selection, not a copy of the prims, and finds their rows through the
  // query's row map. Each step below reaches a different branch of that.
  Stage s(host_execution());
  constexpr size_t kPrims = 130;
  auto prims = s.paths("/mm", kPrims);
  kstage_query_t q = s.query(prims);
  std::vector<kstage_path_t> first_half(prims.begin(), prims.begin() + kPrims / 2);
  kstage_query_t half = s.query(first_half);
  kstage_token_t a = s.token("a");
  std::vector<float> base(kPrims / 2);
  for (size_t i = 0; i < base.size(); ++i) base[i] = float(i);
  s.write_f32(half, a, 1, base);
  s.seal(1);

  auto masked = [&](uint64_t ordinal, const std::vector<size_t>& on, float offset,
                    kstage_prim_mode_t mode) {
    uint64_t mask[3] = {0, 0, 0};
    for (size_t i : on) mask[i / 64] |= uint64_t(1) << (i % 64);
    std::vector<float> src(kPrims);
    for (size_t i = 0; i < kPrims; ++i) src[i] = offset + float(i);
    int64_t shape[1] = {int64_t(kPrims)};
    DLTensor t = tensor(src.data(), f32(), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.count = kPrims;
    w.mask = mask;
    return submit(s, q, a, ordinal, w, mode);
  };

  SECTION("selected prims that do not hold the attribute gain it; the rest keep theirs") {
    KS_OK(masked(2, {0, 5, 64, 65, 100, 129}, 1000.f, KSTAGE_PRIM_MODE_UPSERT));
    s.seal(2);
    auto got = scalars(s, q, a);
    REQUIRE(got.size() == kPrims / 2 + 3);  // 65, 100 and 129 are new
    for (size_t i : {size_t(0), size_t(5), size_t(64), size_t(65), size_t(100), size_t(129)})
      REQUIRE(got[prims[i]] == 1000.f + float(i));
    REQUIRE(got[prims[1]] == 1.f);
    REQUIRE(got.count(prims[66]) == 0);
    // Steady state: the same selection again, now all present.
    KS_OK(masked(3, {0, 5, 64, 65, 100, 129}, 2000.f, KSTAGE_PRIM_MODE_UPDATE));
    s.seal(3);
    got = scalars(s, q, a);
    REQUIRE(got[prims[129]] == 2129.f);
    REQUIRE(got[prims[64]] == 2064.f);
    REQUIRE(got[prims[63]] == 63.f);
  }
  SECTION("prim modes see the selection, against sealed and pending state") {
    const std::string before = s.fingerprint(q, {a});
    KS_FAILS(masked(2, {3, 70}, 0.f, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND,
             "'/mm_70' (element 70) does not exist");
    KS_FAILS(masked(2, {70, 3}, 0.f, KSTAGE_PRIM_MODE_INSERT), KSTAGE_ALREADY_EXISTS,
             "'/mm_3' (element 3) already exists");
    REQUIRE(s.fingerprint(q, {a}) == before);
    const auto sealed_before = scalars(s, q, a);
    s.seal(2);
    REQUIRE(scalars(s, q, a) == sealed_before);
    // A pending masked insert makes its selection exist for a later update.
    KS_OK(masked(3, {70, 71}, 500.f, KSTAGE_PRIM_MODE_INSERT));
    KS_OK(masked(4, {3, 70, 71}, 600.f, KSTAGE_PRIM_MODE_UPDATE));
    KS_FAILS(masked(4, {72}, 0.f, KSTAGE_PRIM_MODE_UPDATE), KSTAGE_NOT_FOUND,
             "'/mm_72' (element 72)");
    s.seal(4);
    auto got = scalars(s, q, a);
    REQUIRE(got[prims[3]] == 603.f);
    REQUIRE(got[prims[70]] == 670.f);
    REQUIRE(got[prims[71]] == 671.f);
    REQUIRE(got.count(prims[72]) == 0);
  }
  SECTION("a masked write after a delete clears the selected prims' tombstones") {
    REQUIRE(s.remove(half, {a}, 2) == KSTAGE_OK);
    KS_OK(masked(3, {1, 2}, 100.f, KSTAGE_PRIM_MODE_UPSERT));
    s.seal(3);
    auto got = scalars(s, q, a);
    REQUIRE(got.size() == 2);
    REQUIRE(got[prims[1]] == 101.f);
    kstage_read_desc_t desc = kstage_read_desc_init();
    desc.change_range = true;
    desc.range_begin = 2;
    desc.range_end = 3;
    auto groups = s.read(half, {a}, &desc);
    size_t tombstoned = 0, changed = 0;
    for (const auto& g : groups) (g.is_delete ? tombstoned : changed) += g.prims.size();
    REQUIRE(changed == 2);
    REQUIRE(tombstoned == kPrims / 2 - 2);  // prims 1 and 2 hold the attribute again
  }
  SECTION("through a query that is the column in row order") {
    uint64_t mask[2] = {0, 0};
    for (size_t i : {size_t(0), size_t(7), size_t(63), size_t(64)})
      mask[i / 64] |= uint64_t(1) << (i % 64);
    std::vector<float> src(kPrims / 2);
    for (size_t i = 0; i < src.size(); ++i) src[i] = 700.f + float(i);
    int64_t shape[1] = {int64_t(src.size())};
    DLTensor t = tensor(src.data(), f32(), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.count = src.size();
    w.mask = mask;
    KS_OK(submit(s, half, a, 2, w, KSTAGE_PRIM_MODE_UPDATE));
    s.seal(2);
    auto got = scalars(s, q, a);
    REQUIRE(got.size() == kPrims / 2);
    for (size_t i = 0; i < kPrims / 2; ++i) {
      const bool on = i == 0 || i == 7 || i == 63 || i == 64;
      REQUIRE(got[prims[i]] == (on ? 700.f + float(i) : float(i)));
    }
    kstage_read_desc_t d = kstage_read_desc_init();
    d.change_range = true;
    d.range_begin = d.range_end = 2;
    auto groups = s.read(q, {a}, &d);
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].prims ==
            std::vector<kstage_path_t>{prims[0], prims[7], prims[63], prims[64]});
  }
  SECTION("every bit set writes like no mask at all") {
    std::vector<size_t> all(kPrims);
    std::iota(all.begin(), all.end(), size_t(0));
    KS_OK(masked(2, all, 300.f, KSTAGE_PRIM_MODE_UPSERT));
    s.seal(2);
    auto got = scalars(s, q, a);
    REQUIRE(got.size() == kPrims);
    for (size_t i = 0; i < kPrims; ++i) REQUIRE(got[prims[i]] == 300.f + float(i));
  }
}

// ---------------------------------------------------------------------------
// Strided and offset sources

TEST_CASE("strided, offset and misaligned sources are read correctly", "[write][fixed][strides]") {
  Stage s(host_execution());
  constexpr int64_t N = 4;
  auto prims = s.paths("/s", N);
  kstage_query_t q = s.query(prims);
  std::map<std::string, std::vector<std::vector<float>>> expected;
  uint64_t attr_no = 0;
  auto check_later = [&](const std::string& name, const DLTensor& t,
                         std::vector<std::vector<float>> rows, const uint32_t* index_map = nullptr,
                         const uint64_t* mask = nullptr) {
    INFO(name);
    kstage_write_data_t w = write_data(&t);
    if (index_map || mask) w.count = uint64_t(N);
    w.index_map = index_map;
    w.mask = mask;
    KS_OK(submit(s, q, s.token(name.c_str()), 1, w));
    expected[name] = std::move(rows);
    ++attr_no;
  };

  // (N,5) floats, buf[i*5+j] = 10i + j.
  std::vector<float> wide(N * 8);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < 8; ++j) wide[size_t(i * 8 + j)] = float(10 * i + j);
  std::vector<float> five(N * 5);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < 5; ++j) five[size_t(i * 5 + j)] = float(10 * i + j);

  // Row-strided: a (N,3) view into an (N,5) array.
  int64_t shape_n3[2] = {N, 3};
  int64_t rs[2] = {5, 1};
  check_later("row_strided", tensor(five.data(), f32(), 2, shape_n3, rs),
              {{0, 1, 2}, {10, 11, 12}, {20, 21, 22}, {30, 31, 32}});

  // Fully strided: every other column of an (N,8) array.
  int64_t fs[2] = {8, 2};
  check_later("column_slice", tensor(wide.data(), f32(), 2, shape_n3, fs),
              {{0, 2, 4}, {10, 12, 14}, {20, 22, 24}, {30, 32, 34}});

  // Negative row stride: data points at the last row, rows walk backwards.
  int64_t neg[2] = {-5, 1};
  check_later("negative_rows", tensor(five.data() + 3 * 5, f32(), 2, shape_n3, neg),
              {{30, 31, 32}, {20, 21, 22}, {10, 11, 12}, {0, 1, 2}});

  // Negative inner stride: each row's lanes reversed.
  int64_t neg_inner[2] = {5, -1};
  check_later("negative_lanes", tensor(five.data() + 2, f32(), 2, shape_n3, neg_inner),
              {{2, 1, 0}, {12, 11, 10}, {22, 21, 20}, {32, 31, 30}});

  // Stride 0 over rows: one row broadcast to every prim.
  int64_t zero[2] = {0, 1};
  check_later("broadcast_rows", tensor(five.data() + 5, f32(), 2, shape_n3, zero),
              {{10, 11, 12}, {10, 11, 12}, {10, 11, 12}, {10, 11, 12}});

  // Column-major (transposed) source: element (i, j) at i + N*j.
  std::vector<float> colmajor(N * 3);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < 3; ++j) colmajor[size_t(i + N * j)] = float(10 * i + j);
  int64_t cm[2] = {1, N};
  check_later("column_major", tensor(colmajor.data(), f32(), 2, shape_n3, cm),
              {{0, 1, 2}, {10, 11, 12}, {20, 21, 22}, {30, 31, 32}});

  // Canonical float3 with a tuple stride of 2: every other tuple.
  std::vector<float> tuples = iota_f(size_t(2 * N * 3));
  int64_t shape_n[1] = {N};
  int64_t every_other[1] = {2};
  check_later("tuple_stride", tensor(tuples.data(), f32(3), 1, shape_n, every_other),
              {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}});

  // byte_offset: data at the start of the buffer, the offset skips two rows.
  std::vector<float> six = iota_f(6 * 3, 100.f);
  DLTensor off = tensor(six.data(), f32(3), 1, shape_n);
  off.byte_offset = 2 * 3 * sizeof(float);
  check_later("byte_offset", off,
              {{106, 107, 108}, {109, 110, 111}, {112, 113, 114}, {115, 116, 117}});

  // byte_offset together with strides.
  DLTensor off_strided = tensor(five.data(), f32(), 2, shape_n3, rs);
  off_strided.byte_offset = 2 * sizeof(float);
  check_later("byte_offset_strided", off_strided,
              {{2, 3, 4}, {12, 13, 14}, {22, 23, 24}, {32, 33, 34}});

  // NULL strides and explicit compact strides mean the same.
  std::vector<float> compact = iota_f(size_t(N * 3), 40.f);
  check_later("null_strides", tensor(compact.data(), f32(), 2, shape_n3, nullptr),
              {{40, 41, 42}, {43, 44, 45}, {46, 47, 48}, {49, 50, 51}});
  int64_t cs[2] = {3, 1};
  check_later("compact_strides", tensor(compact.data(), f32(), 2, shape_n3, cs),
              {{40, 41, 42}, {43, 44, 45}, {46, 47, 48}, {49, 50, 51}});

  // Misaligned: floats stored one byte into a byte buffer.
  std::vector<unsigned char> raw(1 + size_t(N * 5) * sizeof(float) + 8);
  std::memcpy(raw.data() + 1, five.data(), five.size() * sizeof(float));
  DLTensor mis = tensor(raw.data(), f32(), 2, shape_n3, rs);
  mis.byte_offset = 1;
  check_later("misaligned_strided", mis, {{0, 1, 2}, {10, 11, 12}, {20, 21, 22}, {30, 31, 32}});
  std::vector<unsigned char> raw2(1 + size_t(N * 3) * sizeof(float));
  std::memcpy(raw2.data() + 1, compact.data(), compact.size() * sizeof(float));
  DLTensor mis2 = tensor(raw2.data(), f32(3), 1, shape_n);
  mis2.byte_offset = 1;
  check_later("misaligned_compact", mis2, {{40, 41, 42}, {43, 44, 45}, {46, 47, 48}, {49, 50, 51}});
  const uint32_t rev[N] = {3, 2, 1, 0};
  check_later("misaligned_index_map", mis2,
              {{49, 50, 51}, {46, 47, 48}, {43, 44, 45}, {40, 41, 42}}, rev);

  // Misaligned and fully strided: a column slice one byte into a byte buffer.
  std::vector<unsigned char> raw3(1 + wide.size() * sizeof(float));
  std::memcpy(raw3.data() + 1, wide.data(), wide.size() * sizeof(float));
  DLTensor mis3 = tensor(raw3.data(), f32(), 2, shape_n3, fs);
  mis3.byte_offset = 1;
  check_later("misaligned_column_slice", mis3,
              {{0, 2, 4}, {10, 12, 14}, {20, 22, 24}, {30, 32, 34}});
  // Misaligned with a negative row stride: data at the last row (+1 byte).
  DLTensor mis4 = tensor(raw.data() + 3 * 5 * sizeof(float), f32(), 2, shape_n3, neg);
  mis4.byte_offset = 1;
  check_later("misaligned_negative_rows", mis4,
              {{30, 31, 32}, {20, 21, 22}, {10, 11, 12}, {0, 1, 2}});

  // Extent-1 axes may carry any stride.
  int64_t shape_n31[3] = {N, 3, 1};
  int64_t odd_strides[3] = {3, 1, 12345};
  check_later("extent_one_axis", tensor(compact.data(), f32(), 3, shape_n31, odd_strides),
              {{40, 41, 42}, {43, 44, 45}, {46, 47, 48}, {49, 50, 51}});

  // Strided sources with index_map and mask.
  const uint32_t gather[N] = {3, 3, 0, 1};
  check_later("strided_index_map", tensor(wide.data(), f32(), 2, shape_n3, fs),
              {{30, 32, 34}, {30, 32, 34}, {0, 2, 4}, {10, 12, 14}}, gather);
  check_later("row_strided_index_map", tensor(five.data(), f32(), 2, shape_n3, rs),
              {{30, 31, 32}, {30, 31, 32}, {0, 1, 2}, {10, 11, 12}}, gather);
  const uint64_t odd[1] = {0b1010};
  check_later("strided_mask", tensor(wide.data(), f32(), 2, shape_n3, fs),
              {{}, {10, 12, 14}, {}, {30, 32, 34}}, nullptr, odd);

  s.seal(1);
  for (const auto& [name, rows] : expected) {
    INFO(name);
    auto got = s.floats(q, s.token(name.c_str()));
    for (int64_t i = 0; i < N; ++i) {
      INFO("prim " << i);
      if (rows[size_t(i)].empty()) {
        REQUIRE(got.count(prims[size_t(i)]) == 0);
      } else {
        REQUIRE(got[prims[size_t(i)]] == rows[size_t(i)]);
      }
    }
  }
  REQUIRE(attr_no == expected.size());
}

// ---------------------------------------------------------------------------
// Rewrites and growth

TEST_CASE("rewrites update values and new prims append to the column", "[write][fixed][update]") {
  Stage s(host_execution());
  auto a_prims = s.paths("/r", 5);
  kstage_query_t first = s.query({a_prims[0], a_prims[1], a_prims[2]});
  kstage_token_t a = s.token("a");
  s.write_f32(first, a, 1, {1, 2, 3});
  s.seal(1);
  s.write_f32(first, a, 2, {11, 12, 13});
  s.seal(2);
  kstage_query_t all = s.query(a_prims);
  REQUIRE(s.floats(all, a) == std::map<kstage_path_t, std::vector<float>>{
                                  {a_prims[0], {11}}, {a_prims[1], {12}}, {a_prims[2], {13}}});
  // Two new prims, in a query that also names an existing one, out of order.
  kstage_query_t mixed = s.query({a_prims[4], a_prims[1], a_prims[3]});
  s.write_f32(mixed, a, 3, {45, 22, 44});
  s.seal(3);
  REQUIRE(s.floats(all, a) == expect_rows(a_prims, {{11}, {22}, {13}, {44}, {45}}));
  auto groups = s.read(all, {a});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].prims == a_prims);
  REQUIRE(groups[0].ordinal == 3);

  // Two pending writes to the same prims: the higher ordinal wins, whatever the submission order.
  s.write_f32(all, a, 5, {5, 5, 5, 5, 5});
  s.write_f32(all, a, 4, {4, 4, 4, 4, 4});
  s.seal(5);
  REQUIRE(s.floats(all, a) == expect_rows(a_prims, {{5}, {5}, {5}, {5}, {5}}));
  // Same ordinal: the later submission wins.
  s.write_f32(all, a, 6, {6, 6, 6, 6, 6});
  s.write_f32(first, a, 6, {7, 7, 7});
  s.seal(6);
  REQUIRE(s.floats(all, a) == expect_rows(a_prims, {{7}, {7}, {7}, {6}, {6}}));
}

TEST_CASE("a column grown 10 prims at a time keeps every value", "[write][fixed][growth]") {
  Stage s(host_execution());
  constexpr size_t kPrims = 1000, kStep = 10;
  auto prims = s.paths("/grow", kPrims);
  kstage_query_t all = s.query(prims);
  kstage_token_t a = s.token("pos");
  auto value = [](size_t i, size_t l) { return float(i) * 3.f + float(l) + 0.5f; };
  uint64_t ordinal = 0;
  for (size_t start = 0; start < kPrims; start += kStep) {
    ++ordinal;
    std::vector<kstage_path_t> chunk(prims.begin() + start, prims.begin() + start + kStep);
    kstage_query_t q = s.query(chunk);
    std::vector<float> v(kStep * 3);
    for (size_t k = 0; k < kStep; ++k)
      for (size_t l = 0; l < 3; ++l) v[k * 3 + l] = value(start + k, l);
    s.write_f32(q, a, ordinal, v, 3);
    KS_OK(kstage_query_release(s.stage, q));
    if (ordinal % 3 == 0) s.seal(ordinal);  // several pending writes applied per seal
    if (ordinal == 50) {
      s.seal(ordinal);
      REQUIRE(s.floats(all, a).size() == 500);
    }
  }
  s.seal(ordinal);
  auto got = s.floats(all, a);
  REQUIRE(got.size() == kPrims);
  for (size_t i = 0; i < kPrims; ++i) {
    INFO("prim " << i);
    REQUIRE(got[prims[i]] == std::vector<float>{value(i, 0), value(i, 1), value(i, 2)});
  }
  auto groups = s.read(all, {a});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].prims == prims);

  // Rewrite a slice in the middle; the rest is untouched.
  std::vector<kstage_path_t> mid(prims.begin() + 500, prims.begin() + 510);
  kstage_query_t qm = s.query(mid);
  s.write_f32(qm, a, ordinal + 1, std::vector<float>(30, -1.f), 3);
  s.seal(ordinal + 1);
  got = s.floats(all, a);
  for (size_t i = 495; i < 515; ++i) {
    INFO("prim " << i);
    if (i >= 500 && i < 510) REQUIRE(got[prims[i]] == std::vector<float>{-1.f, -1.f, -1.f});
    else REQUIRE(got[prims[i]] == std::vector<float>{value(i, 0), value(i, 1), value(i, 2)});
  }
}

// ---------------------------------------------------------------------------
// Prim modes

TEST_CASE("UPSERT creates missing prims and updates existing ones", "[write][fixed][prim_mode]") {
  Stage s(host_execution());
  auto prims = s.paths("/u", 3);
  kstage_query_t q01 = s.query({prims[0], prims[1]});
  kstage_query_t q12 = s.query({prims[1], prims[2]});
  kstage_token_t a = s.token("a");
  std::vector<float> v = {1, 2};
  int64_t shape[1] = {2};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  KS_OK(submit(s, q01, a, 1, write_data(&t), KSTAGE_PRIM_MODE_UPSERT));
  s.seal(1);
  v = {20, 30};
  KS_OK(submit(s, q12, a, 2, write_data(&t), KSTAGE_PRIM_MODE_UPSERT));
  s.seal(2);
  kstage_query_t all = s.query(prims);
  REQUIRE(s.floats(all, a) == expect_rows(prims, {{1}, {20}, {30}}));
}

TEST_CASE("INSERT creates fresh prims and rejects existing ones", "[write][fixed][prim_mode]") {
  Stage s(host_execution());
  auto prims = s.paths("/ins", 4);
  kstage_query_t all = s.query(prims);
  kstage_query_t q01 = s.query({prims[0], prims[1]});
  kstage_token_t a = s.token("a"), b = s.token("b");
  std::vector<float> v = {1, 2};
  int64_t shape[1] = {2};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  KS_OK(submit(s, q01, a, 1, write_data(&t), KSTAGE_PRIM_MODE_INSERT));
  s.seal(1);
  REQUIRE(s.floats(all, a).size() == 2);

  // [fresh, existing]: rejected, naming the existing prim; nothing of it lands.
  kstage_query_t q21 = s.query({prims[2], prims[1]});
  const std::string before = s.fingerprint(all, {a, b});
  kstage_op_t op = 42;
  kstage_write_data_t w = write_data(&t);
  KS_FAILS(kstage_write_attribute(s.stage, q21, a, 2, &w, KSTAGE_PRIM_MODE_INSERT, &op),
           KSTAGE_ALREADY_EXISTS, "'/ins_1'");
  REQUIRE(op == 42);
  REQUIRE(s.fingerprint(all, {a, b}) == before);
  // Prim-level: holding any attribute makes a prim exist, also for another attribute.
  KS_FAILS(kstage_write_attribute(s.stage, q21, b, 2, &w, KSTAGE_PRIM_MODE_INSERT, &op),
           KSTAGE_ALREADY_EXISTS, "'/ins_1'");
  REQUIRE(op == 42);
  s.seal(2);
  REQUIRE(s.floats(all, a).count(prims[2]) == 0);
  REQUIRE(s.floats(all, b).empty());

  // count 1 over [fresh, existing] only targets the fresh prim.
  kstage_query_t q30 = s.query({prims[3], prims[0]});
  std::vector<float> one = {33};
  int64_t shape1[1] = {1};
  DLTensor t1 = tensor(one.data(), f32(), 1, shape1);
  kstage_write_data_t w1 = write_data(&t1);
  w1.count = 1;
  KS_OK(submit(s, q30, a, 3, w1, KSTAGE_PRIM_MODE_INSERT));
  s.seal(3);
  REQUIRE(s.floats(all, a) == std::map<kstage_path_t, std::vector<float>>{
                                  {prims[0], {1}}, {prims[1], {2}}, {prims[3], {33}}});
}

TEST_CASE("UPDATE writes existing prims and rejects missing ones", "[write][fixed][prim_mode]") {
  Stage s(host_execution());
  auto prims = s.paths("/upd", 3);
  kstage_query_t all = s.query(prims);
  kstage_query_t q0 = s.query({prims[0]});
  kstage_token_t a = s.token("a"), b = s.token("b");
  s.write_f32(q0, a, 1, {1});
  s.seal(1);

  // [existing, missing]: NOT_FOUND naming the missing prim.
  kstage_query_t q02 = s.query({prims[0], prims[2]});
  std::vector<float> v = {5, 6};
  int64_t shape[1] = {2};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  const std::string before = s.fingerprint(all, {a, b});
  kstage_op_t op = 42;
  KS_FAILS(kstage_write_attribute(s.stage, q02, a, 2, &w, KSTAGE_PRIM_MODE_UPDATE, &op),
           KSTAGE_NOT_FOUND, "'/upd_2'");
  REQUIRE(op == 42);
  REQUIRE(s.fingerprint(all, {a, b}) == before);
  s.seal(2);
  REQUIRE(s.floats(all, a) == std::map<kstage_path_t, std::vector<float>>{{prims[0], {1}}});

  // An existing prim takes a new attribute under UPDATE.
  std::vector<float> one = {9};
  int64_t shape1[1] = {1};
  DLTensor t1 = tensor(one.data(), f32(), 1, shape1);
  KS_OK(submit(s, q0, b, 3, write_data(&t1), KSTAGE_PRIM_MODE_UPDATE));
  // count 1 over [existing, missing] only targets the existing prim.
  w.count = 1;
  t.shape[0] = 1;
  KS_OK(submit(s, q02, a, 3, w, KSTAGE_PRIM_MODE_UPDATE));
  s.seal(3);
  REQUIRE(s.floats(all, b) == std::map<kstage_path_t, std::vector<float>>{{prims[0], {9}}});
  REQUIRE(s.floats(all, a) == std::map<kstage_path_t, std::vector<float>>{{prims[0], {5}}});
}

TEST_CASE("prim modes are checked against the projected state, pending writes included",
          "[write][fixed][prim_mode]") {
  Stage s(host_execution());
  auto prims = s.paths("/proj", 4);
  kstage_query_t all = s.query(prims);
  kstage_token_t a = s.token("a"), b = s.token("b");
  std::vector<float> one = {1};
  int64_t shape1[1] = {1};
  DLTensor t1 = tensor(one.data(), f32(), 1, shape1);
  const kstage_write_data_t w = write_data(&t1);
  kstage_query_t p0 = s.query({prims[0]}), p1 = s.query({prims[1]});
  kstage_op_t op = 42;

  // INSERT at 1 (unsealed), then INSERT of the same prim at 2.
  KS_OK(submit(s, p0, a, 1, w, KSTAGE_PRIM_MODE_INSERT));
  KS_FAILS(kstage_write_attribute(s.stage, p0, a, 2, &w, KSTAGE_PRIM_MODE_INSERT, &op),
           KSTAGE_ALREADY_EXISTS, "'/proj_0'");
  KS_FAILS(kstage_write_attribute(s.stage, p0, b, 2, &w, KSTAGE_PRIM_MODE_INSERT, &op),
           KSTAGE_ALREADY_EXISTS, "'/proj_0'");
  // UPDATE after the unsealed create succeeds.
  one = {2};
  KS_OK(submit(s, p0, a, 2, w, KSTAGE_PRIM_MODE_UPDATE));
  REQUIRE(op == 42);

  // A create ordered *after* (higher ordinal) does not make the prim exist earlier.
  one = {30};
  KS_OK(submit(s, p1, a, 3, w, KSTAGE_PRIM_MODE_INSERT));
  KS_FAILS(kstage_write_attribute(s.stage, p1, a, 2, &w, KSTAGE_PRIM_MODE_UPDATE, &op),
           KSTAGE_NOT_FOUND, "'/proj_1'");
  // Same ordinal: submission order decides.
  one = {31};
  KS_OK(submit(s, p1, a, 3, w, KSTAGE_PRIM_MODE_UPDATE));
  KS_FAILS(kstage_write_attribute(s.stage, p1, b, 3, &w, KSTAGE_PRIM_MODE_INSERT, &op),
           KSTAGE_ALREADY_EXISTS, "'/proj_1'");
  REQUIRE(op == 42);

  // Nothing is visible yet; sealing applies them in ordinal order.
  REQUIRE(s.read(all, {a, b}).empty());
  s.seal(3);
  REQUIRE(s.floats(all, a) ==
          std::map<kstage_path_t, std::vector<float>>{{prims[0], {2}}, {prims[1], {31}}});
  REQUIRE(s.floats(all, b).empty());

  // A pending deletion of the prim: UPDATE after it is NOT_FOUND, INSERT succeeds.
  REQUIRE(s.remove(p0, {}, 4) == KSTAGE_OK);
  KS_FAILS(kstage_write_attribute(s.stage, p0, a, 5, &w, KSTAGE_PRIM_MODE_UPDATE, &op),
           KSTAGE_NOT_FOUND, "'/proj_0'");
  one = {50};
  KS_OK(submit(s, p0, a, 5, w, KSTAGE_PRIM_MODE_INSERT));
  // A pending attribute delete that leaves another attribute: the prim still exists.
  one = {60};
  KS_OK(submit(s, p1, b, 5, w, KSTAGE_PRIM_MODE_UPSERT));
  REQUIRE(s.remove(p1, {a}, 6) == KSTAGE_OK);
  KS_FAILS(kstage_write_attribute(s.stage, p1, a, 7, &w, KSTAGE_PRIM_MODE_INSERT, &op),
           KSTAGE_ALREADY_EXISTS, "'/proj_1'");
  one = {70};
  KS_OK(submit(s, p1, a, 7, w, KSTAGE_PRIM_MODE_UPDATE));
  REQUIRE(op == 42);
  s.seal(7);
  REQUIRE(s.floats(all, a) ==
          std::map<kstage_path_t, std::vector<float>>{{prims[0], {50}}, {prims[1], {70}}});
  REQUIRE(s.floats(all, b) == std::map<kstage_path_t, std::vector<float>>{{prims[1], {60}}});
}

// ---------------------------------------------------------------------------
// Batches

TEST_CASE("write_attributes applies a batch as one op", "[write][fixed][batch]") {
  Stage s(host_execution());
  auto prims = s.paths("/bat", 3);
  kstage_query_t q = s.query(prims);
  const kstage_token_t attrs[3] = {s.token("points"), s.token("ids"), s.token("mass")};
  std::vector<float> pts = iota_f(9);
  std::vector<uint64_t> ids = {7, 8, 9};
  std::vector<double> mass = {0.5, 1.5, 2.5};
  int64_t shape[1] = {3};
  DLTensor tp = tensor(pts.data(), f32(3), 1, shape);
  DLTensor ti = tensor(ids.data(), u64(), 1, shape);
  DLTensor tm = tensor(mass.data(), f64(), 1, shape);
  kstage_write_data_t data[3] = {write_data(&tp), write_data(&ti), write_data(&tm)};
  data[0].semantic = KSTAGE_SEMANTIC_POINT;
  kstage_op_t op = 0;
  KS_OK(kstage_write_attributes(s.stage, q, attrs, data, 3, 1, KSTAGE_PRIM_MODE_INSERT, &op));
  REQUIRE(op != 0);
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  const char* msg = nullptr;
  KS_OK(kstage_op_error(s.stage, op, &msg));
  REQUIRE(std::string(msg).empty());
  KS_OK(kstage_release_op(s.stage, op));
  REQUIRE(s.read(q, {attrs[0], attrs[1], attrs[2]}).empty());
  s.seal(1);
  auto groups = s.read(q, {attrs[0], attrs[1], attrs[2]});
  REQUIRE(groups.size() == 3);
  REQUIRE(groups[0].attribute == attrs[0]);
  REQUIRE(groups[0].semantic == KSTAGE_SEMANTIC_POINT);
  REQUIRE(as_floats(groups[0].values[2]) == std::vector<float>{6, 7, 8});
  REQUIRE(groups[1].attribute == attrs[1]);
  REQUIRE(same(groups[1].dtype, u64()));
  uint64_t id = 0;
  std::memcpy(&id, groups[1].values[1].data(), 8);
  REQUIRE(id == 8);
  REQUIRE(groups[2].attribute == attrs[2]);
  double m = 0;
  std::memcpy(&m, groups[2].values[2].data(), 8);
  REQUIRE(m == 2.5);
}

TEST_CASE("a batch with one invalid element is rejected whole", "[write][fixed][batch][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/bad", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t mass = s.token("mass"), n1 = s.token("new1"), n2 = s.token("new2");
  std::vector<double> m = {1, 2, 3};
  int64_t shape[1] = {3};
  DLTensor tm = tensor(m.data(), f64(), 1, shape);
  KS_OK(submit(s, q, mass, 1, write_data(&tm)));
  s.seal(1);
  const std::vector<kstage_token_t> watched = {mass, n1, n2};
  const std::string before = s.fingerprint(q, watched);

  std::vector<float> f = {9, 8, 7};
  DLTensor tf = tensor(f.data(), f32(), 1, shape);
  std::vector<double> m2 = {4, 5, 6};
  DLTensor tm2 = tensor(m2.data(), f64(), 1, shape);
  kstage_op_t op = 42;

  SECTION("dtype mismatch with an existing column in the middle") {
    const kstage_token_t attrs[3] = {n1, mass, n2};
    const kstage_write_data_t data[3] = {write_data(&tf), write_data(&tf), write_data(&tm2)};
    KS_FAILS(kstage_write_attributes(s.stage, q, attrs, data, 3, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "data[1]");
    REQUIRE(std::string(kstage_last_error()).find("'mass'") != std::string::npos);
  }
  SECTION("a malformed tensor in the last element") {
    const kstage_token_t attrs[3] = {n1, mass, n2};
    DLTensor bad = tensor(f.data(), f32(), 0, shape);  // ndim 0
    const kstage_write_data_t data[3] = {write_data(&tf), write_data(&tm2), write_data(&bad)};
    KS_FAILS(kstage_write_attributes(s.stage, q, attrs, data, 3, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "data[2] ('new2')");
  }
  SECTION("a repeated attribute") {
    const kstage_token_t attrs[3] = {n1, mass, n1};
    const kstage_write_data_t data[3] = {write_data(&tf), write_data(&tm2), write_data(&tf)};
    KS_FAILS(kstage_write_attributes(s.stage, q, attrs, data, 3, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "attributes[2] ('new1') repeats attributes[0]");
  }
  SECTION("a prim-mode failure in one element") {
    // INSERT: element 0 addresses one fresh prim only; element 1 also the existing ones.
    kstage_query_t fresh_first = s.query({s.path("/bad_fresh"), prims[0], prims[1]});
    std::vector<float> one = {1};
    int64_t shape1[1] = {1};
    DLTensor t1 = tensor(one.data(), f32(), 1, shape1);
    kstage_write_data_t d0 = write_data(&t1);
    d0.count = 1;
    const kstage_token_t attrs[2] = {n1, n2};
    const kstage_write_data_t data[2] = {d0, write_data(&tf)};
    KS_FAILS(kstage_write_attributes(s.stage, fresh_first, attrs, data, 2, 2,
                                     KSTAGE_PRIM_MODE_INSERT, &op),
             KSTAGE_ALREADY_EXISTS, "data[1] ('new2')");
    REQUIRE(std::string(kstage_last_error()).find("'/bad_0'") != std::string::npos);
  }
  SECTION("n = 0") {
    KS_FAILS(kstage_write_attributes(s.stage, q, &n1, nullptr, 0, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "n = 0");
  }
  REQUIRE(op == 42);
  REQUIRE(s.fingerprint(q, watched) == before);
  s.seal(2);
  // Nothing of the batch appears: mass keeps its values, new1 / new2 hold nothing.
  auto got = s.values(q, mass);
  REQUIRE(got.size() == 3);
  double first = 0;
  std::memcpy(&first, got[prims[0]].data(), 8);
  REQUIRE(first == 1.0);
  REQUIRE(s.read(q, {n1, n2}).empty());
  // And no column was created: new1 accepts a different schema.
  std::vector<int32_t> ints = {1, 2, 3};
  DLTensor ti = tensor(ints.data(), i32(), 1, shape);
  KS_OK(submit(s, q, n1, 3, write_data(&ti)));
  s.seal(3);
  auto groups = s.read(q, {n1});
  REQUIRE(groups.size() == 1);
  REQUIRE(same(groups[0].dtype, i32()));
}

// ---------------------------------------------------------------------------
// Zero-copy reads

TEST_CASE("latest reads are zero-copy with index_map only when needed", "[write][fixed][read]") {
  Stage s(host_execution());
  auto prims = s.paths("/z", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");
  s.write_f32(q, a, 1, iota_f(12), 3);
  s.seal(1);

  const void* storage = nullptr;
  with_groups(s, q, {a}, nullptr, [&](const std::vector<kstage_read_group_t>& gs) {
    REQUIRE(gs.size() == 1);
    REQUIRE(gs[0].data.index_map == nullptr);
    REQUIRE(gs[0].data.mask == nullptr);
    REQUIRE(gs[0].data.tensors[0].shape[0] == 4);
    storage = gs[0].data.tensors[0].data;
    const std::vector<float> f = group_floats(gs[0], 0, 12);
    REQUIRE(f[3 * 2 + 1] == 7.f);
  });
  // A second read (nothing sealed meanwhile) hands out the same storage.
  with_groups(s, q, {a}, nullptr, [&](const std::vector<kstage_read_group_t>& gs) {
    REQUIRE(gs.size() == 1);
    REQUIRE(gs[0].data.tensors[0].data == storage);
  });

  // A different order than the storage: index_map maps each prim to its row.
  kstage_query_t rev = s.query({prims[3], prims[2], prims[1], prims[0]});
  with_groups(s, rev, {a}, nullptr, [&](const std::vector<kstage_read_group_t>& gs) {
    REQUIRE(gs.size() == 1);
    REQUIRE(gs[0].data.index_map != nullptr);
    REQUIRE(gs[0].data.tensors[0].data == storage);
    REQUIRE(gs[0].data.tensors[0].shape[0] == 4);
    REQUIRE(gs[0].prims[0] == prims[3]);
    const std::vector<float> f = group_floats(gs[0], 0, 12);
    for (uint64_t i = 0; i < 4; ++i) {
      const uint32_t row = gs[0].data.index_map[i];
      REQUIRE(f[row * 3] == float(3 * (3 - i)));
    }
  });
  auto groups = s.read(rev, {a});
  REQUIRE(groups[0].had_index_map);
  REQUIRE(as_floats(groups[0].values[0]) == std::vector<float>{9, 10, 11});

  // A subset in storage order still needs an index_map (not every row).
  kstage_query_t sub = s.query({prims[1], prims[2]});
  with_groups(s, sub, {a}, nullptr, [&](const std::vector<kstage_read_group_t>& gs) {
    REQUIRE(gs.size() == 1);
    REQUIRE(gs[0].data.index_map != nullptr);
    REQUIRE(gs[0].data.index_map[0] == 1);
    REQUIRE(gs[0].data.index_map[1] == 2);
  });

  // compact: rows gathered in prim order, no index_map.
  kstage_read_desc_t desc = kstage_read_desc_init();
  desc.compact = true;
  with_groups(s, rev, {a}, &desc, [&](const std::vector<kstage_read_group_t>& gs) {
    REQUIRE(gs.size() == 1);
    REQUIRE(gs[0].data.index_map == nullptr);
    REQUIRE(gs[0].data.tensors[0].shape[0] == 4);
    REQUIRE(gs[0].data.tensors[0].ndim == 1);
    REQUIRE(same(gs[0].data.tensors[0].dtype, f32(3)));
    REQUIRE(gs[0].data.tensors[0].data != storage);
    const std::vector<float> f = group_floats(gs[0], 0, 12);
    REQUIRE(f == std::vector<float>{9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2});
  });
  with_groups(s, sub, {a}, &desc, [&](const std::vector<kstage_read_group_t>& gs) {
    REQUIRE(gs.size() == 1);
    REQUIRE(gs[0].data.index_map == nullptr);
    REQUIRE(gs[0].data.tensors[0].shape[0] == 2);
    const std::vector<float> f = group_floats(gs[0], 0, 6);
    REQUIRE(f == std::vector<float>{3, 4, 5, 6, 7, 8});
  });
}

TEST_CASE("float64 rows aligned to 4 bytes only are read correctly", "[write][fixed][strides]") {
  Stage s(host_execution());
  auto prims = s.paths("/al", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");
  std::vector<double> d = {1.25, -2.5, 3.75, 4.0, 5.5, -6.25, 7.0, 8.5, 9.75};
  std::vector<uint32_t> words(1 + d.size() * 2 + 1);  // 4-byte aligned storage
  unsigned char* base = reinterpret_cast<unsigned char*>(words.data());
  const size_t shift =
      (reinterpret_cast<uintptr_t>(base) % 8 == 0) ? 4 : 0;  // force a 4 mod 8 address
  std::memcpy(base + shift, d.data(), d.size() * sizeof(double));
  int64_t shape[1] = {3};
  DLTensor t = tensor(base, f64(3), 1, shape);
  t.byte_offset = shift;
  KS_OK(submit(s, q, a, 1, write_data(&t)));
  const uint32_t rev[3] = {2, 1, 0};
  kstage_write_data_t w = write_data(&t);
  w.count = 3;
  w.index_map = rev;
  kstage_token_t b = s.token("b");
  KS_OK(submit(s, q, b, 1, w));
  s.seal(1);
  auto got = s.values(q, a);
  auto got_b = s.values(q, b);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<double> row(3), row_b(3);
    std::memcpy(row.data(), got[prims[i]].data(), 24);
    std::memcpy(row_b.data(), got_b[prims[i]].data(), 24);
    REQUIRE(row == std::vector<double>(d.begin() + 3 * i, d.begin() + 3 * i + 3));
    REQUIRE(row_b == std::vector<double>(d.begin() + 3 * (2 - i), d.begin() + 3 * (2 - i) + 3));
  }
}

TEST_CASE("an empty query or a zero-row write is accepted and changes nothing",
          "[write][fixed][count]") {
  Stage s(host_execution());
  auto prims = s.paths("/empty", 2);
  kstage_query_t q = s.query(prims);
  kstage_query_t none = s.query({});
  kstage_token_t a = s.token("a");
  s.write_f32(q, a, 1, {1, 2});
  s.seal(1);
  int64_t zero[1] = {0};
  DLTensor t = tensor(nullptr, f32(), 1, zero);  // no elements: data may be NULL
  KS_OK(submit(s, none, a, 2, write_data(&t)));
  KS_OK(submit(s, none, s.token("b"), 2, write_data(&t)));
  s.seal(2);
  REQUIRE(s.floats(q, a) == expect_rows(prims, {{1}, {2}}));
  REQUIRE(s.read(q, {s.token("b")}).empty());
  // Zero rows for two prims is a row-count mismatch, not an empty write.
  kstage_op_t op = 42;
  kstage_write_data_t w = write_data(&t);
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 3, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "0 source row(s)");
  REQUIRE(op == 42);
}
