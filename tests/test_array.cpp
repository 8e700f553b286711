// SPDX-License-Identifier: Apache-2.0
// Array (ragged) columns: per-row and packed transport, index_map / mask /
// count, rewrites that grow, shrink, add and delete rows, schema checks,
// every dtype, strided sources, compact reads, and copy-on-write of a held
// group.
#include <algorithm>
#include <complex>
#include <cstdint>
#include <numeric>
#include <random>

#include "support.hpp"

using namespace kstage_test;

namespace {

template <class T>
std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Like as_floats, without handing memcpy a NULL pointer for an empty row.
std::vector<float> to_floats(const std::vector<unsigned char>& bytes) {
  std::vector<float> f(bytes.size() / sizeof(float));
  if (!f.empty()) std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
  return f;
}

std::vector<float> iota_f(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Per-row tensors over rows of T. `inner` > 0 gives each row the shape
// (len / inner, inner) instead of (len,). Empty rows carry data == NULL.
template <class T>
struct RowTensors {
  std::vector<std::vector<T>> rows;
  std::vector<int64_t> shapes;
  std::vector<DLTensor> t;
  RowTensors(std::vector<std::vector<T>> r, DLDataType dtype, int64_t inner = 0)
      : rows(std::move(r)) {
    const int ndim = inner > 0 ? 2 : 1;
    shapes.resize(rows.size() * 2);
    for (size_t i = 0; i < rows.size(); ++i) {
      int64_t* shape = &shapes[2 * i];
      const int64_t elems = int64_t(rows[i].size()) / int64_t(dtype.lanes);
      if (inner > 0) {
        shape[0] = elems / inner;
        shape[1] = inner;
      } else {
        shape[0] = elems;
      }
      t.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), dtype, ndim, shape));
    }
  }
  kstage_write_data_t data() const {
    kstage_write_data_t w = write_data(t.data(), t.size(), true);
    return w;
  }
};

using FloatRows = RowTensors<float>;

// Writes `rows` (one float32 tensor per row, lanes `lanes`) to the query.
kstage_status_t write_rows(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                           const std::vector<std::vector<float>>& rows, uint16_t lanes = 1,
                           const uint64_t* mask = nullptr, uint64_t count = 0,
                           const uint32_t* index_map = nullptr) {
  FloatRows r(rows, f32(lanes));
  kstage_write_data_t w = r.data();
  w.mask = mask;
  w.count = count;
  w.index_map = index_map;
  return s.write(q, attr, ordinal, w);
}

// Writes one packed float32 tensor of `values` (lanes `lanes`).
kstage_status_t write_packed(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                             std::vector<float> values, uint16_t lanes = 1, uint64_t count = 0,
                             const uint32_t* index_map = nullptr, const uint64_t* mask = nullptr) {
  int64_t shape[1] = {int64_t(values.size() / lanes)};
  DLTensor t = tensor(values.empty() ? nullptr : values.data(), f32(lanes), 1, shape);
  kstage_write_data_t w = write_data(&t, 1, true);
  w.count = count;
  w.index_map = index_map;
  w.mask = mask;
  return s.write(q, attr, ordinal, w);
}

// What the raw group of an array read looks like, tensor by tensor.
struct ArrayShape {
  std::vector<kstage_path_t> prims;
  uint64_t tensor_count = 0;
  bool index_map_null = false, is_array = false;
  DLDataType dtype{};
  kstage_semantic_t semantic = 0;
  std::vector<int64_t> lengths;  // shape[0] per tensor
};

std::vector<ArrayShape> array_shapes(Stage& s, kstage_query_t q, kstage_token_t attr,
                                     const kstage_read_desc_t* desc = nullptr) {
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, desc, &r));
  std::vector<ArrayShape> out;
  for (;;) {
    kstage_read_group_t g{};
    kstage_status_t st = kstage_fetch_read_next(s.stage, r, 0, &g);
    if (st == KSTAGE_END_OF_ITERATION) break;
    KS_OK(st);
    ArrayShape a;
    a.prims.assign(g.prims, g.prims + g.prim_count);
    a.tensor_count = g.data.tensor_count;
    a.index_map_null = g.data.index_map == nullptr;
    a.is_array = g.is_array;
    a.dtype = g.dtype;
    a.semantic = g.semantic;
    REQUIRE(g.data.mask == nullptr);
    for (uint64_t i = 0; i < g.data.tensor_count; ++i) {
      const DLTensor& t = g.data.tensors[i];
      REQUIRE(t.ndim == 1);
      REQUIRE(t.device.device_type == kResidency.device_type);
      REQUIRE(t.dtype.code == g.dtype.code);
      REQUIRE(t.dtype.bits == g.dtype.bits);
      REQUIRE(t.dtype.lanes == g.dtype.lanes);
      REQUIRE(t.shape != nullptr);
      if (t.shape[0] > 0) {
        REQUIRE(t.data != nullptr);
        // Every row is naturally aligned for its element type (complex: its parts).
        const uintptr_t addr = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
        const unsigned align = g.dtype.code == kDLComplex ? g.dtype.bits / 16 : g.dtype.bits / 8;
        REQUIRE(addr % align == 0);
      }
      a.lengths.push_back(t.shape[0]);
    }
    out.push_back(std::move(a));
    KS_OK(kstage_release_group(s.stage, g.handle));
  }
  KS_OK(kstage_release_read(s.stage, r));
  return out;
}

// The float rows of `attr` per prim of `prims` (absent prims are missing).
std::map<kstage_path_t, std::vector<float>> rows_of(Stage& s, kstage_query_t q, kstage_token_t attr,
                                                    const kstage_read_desc_t* desc = nullptr) {
  std::map<kstage_path_t, std::vector<float>> m;
  for (const Group& g : s.read(q, {attr}, desc)) {
    REQUIRE(g.is_array);
    REQUIRE_FALSE(g.had_index_map);
    for (size_t i = 0; i < g.prims.size(); ++i) m[g.prims[i]] = to_floats(g.values[i]);
  }
  return m;
}

std::map<kstage_path_t, std::vector<float>> expect_rows(
    const std::vector<kstage_path_t>& prims, const std::vector<std::vector<float>>& rows) {
  std::map<kstage_path_t, std::vector<float>> m;
  for (size_t i = 0; i < prims.size(); ++i) m[prims[i]] = rows[i];
  return m;
}

}  // namespace

// ---------------------------------------------------------------------------
// Per-row transport

TEST_CASE("per-row tensors of different lengths, including 0, read back one tensor per prim",
          "[array][per_row]") {
  Stage s(host_execution());
  auto prims = s.paths("/mesh", 5);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("weights");
  std::vector<std::vector<float>> rows = {iota_f(3, 1), {}, iota_f(5, 10), {42.f}, {}};
  FloatRows r(rows, f32());
  REQUIRE(r.t[1].data == nullptr);  // an empty row may carry no data at all
  REQUIRE(r.t[1].shape[0] == 0);
  KS_OK(s.write(q, attr, 1, r.data()));
  REQUIRE(s.read(q, {attr}).empty());  // unsealed
  s.seal(1);

  auto shapes = array_shapes(s, q, attr);
  REQUIRE(shapes.size() == 1);
  const ArrayShape& a = shapes[0];
  REQUIRE(a.is_array);
  REQUIRE(a.prims == prims);
  REQUIRE(a.tensor_count == 5);
  REQUIRE(a.index_map_null);
  REQUIRE(a.dtype.code == kDLFloat);
  REQUIRE(a.dtype.bits == 32);
  REQUIRE(a.dtype.lanes == 1);
  REQUIRE(a.lengths == std::vector<int64_t>{3, 0, 5, 1, 0});
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, rows));

  auto groups = s.read(q, {attr});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].ordinal == 1);
  REQUIRE(groups[0].semantic == KSTAGE_SEMANTIC_NONE);
}

TEST_CASE("trailing axes of per-row tensors fold into lanes", "[array][per_row][lanes]") {
  Stage s(host_execution());
  auto prims = s.paths("/curve", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("cvs");
  // Per-row shape (len, 3), lanes 1 -> a float3 array column.
  std::vector<std::vector<float>> rows = {iota_f(6, 0), iota_f(3, 100), {}};
  FloatRows r(rows, f32(), 3);
  REQUIRE(r.t[0].ndim == 2);
  REQUIRE(r.t[0].shape[0] == 2);
  KS_OK(s.write(q, attr, 1, r.data()));
  s.seal(1);
  auto shapes = array_shapes(s, q, attr);
  REQUIRE(shapes.size() == 1);
  REQUIRE(shapes[0].dtype.lanes == 3);
  REQUIRE(shapes[0].lengths == std::vector<int64_t>{2, 1, 0});
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, rows));

  // The canonical form (len,) lanes 3 is the same column dtype.
  std::vector<std::vector<float>> rows2 = {iota_f(3, -3), iota_f(9, 50), iota_f(3, 7)};
  KS_OK(write_rows(s, q, attr, 2, rows2, 3));
  // And so is (len, 1) with lanes 3.
  FloatRows r3({iota_f(12, 200), {}, iota_f(3, 9)}, f32(3), 1);
  REQUIRE(r3.t[0].shape[0] == 4);
  KS_OK(s.write(q, attr, 3, r3.data()));
  s.seal(2);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, rows2));
  s.seal(3);
  shapes = array_shapes(s, q, attr);
  REQUIRE(shapes[0].lengths == std::vector<int64_t>{4, 0, 1});
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, r3.rows));
}

// ---------------------------------------------------------------------------
// Packed transport

TEST_CASE("a packed tensor is cut evenly across the source rows", "[array][packed]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);

  SECTION("12 floats over 4 prims: 3 each") {
    kstage_token_t attr = s.token("a");
    KS_OK(write_packed(s, q, attr, 1, iota_f(12, 0)));
    s.seal(1);
    auto shapes = array_shapes(s, q, attr);
    REQUIRE(shapes.size() == 1);
    REQUIRE(shapes[0].tensor_count == 4);
    REQUIRE(shapes[0].lengths == std::vector<int64_t>{3, 3, 3, 3});
    REQUIRE(rows_of(s, q, attr) ==
            expect_rows(prims, {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}}));
  }
  SECTION("float3 packed: 8 tuples over 4 prims, 2 each") {
    kstage_token_t attr = s.token("a3");
    KS_OK(write_packed(s, q, attr, 1, iota_f(24, 0), 3));
    s.seal(1);
    auto shapes = array_shapes(s, q, attr);
    REQUIRE(shapes[0].dtype.lanes == 3);
    REQUIRE(shapes[0].lengths == std::vector<int64_t>{2, 2, 2, 2});
    REQUIRE(rows_of(s, q, attr) ==
            expect_rows(prims, {iota_f(6, 0), iota_f(6, 6), iota_f(6, 12), iota_f(6, 18)}));
  }
  SECTION("with count: the leading prims only") {
    kstage_token_t attr = s.token("c");
    KS_OK(write_packed(s, q, attr, 1, iota_f(10, 0), 1, 2));
    s.seal(1);
    auto got = rows_of(s, q, attr);
    REQUIRE(got.size() == 2);
    REQUIRE(got[prims[0]] == iota_f(5, 0));
    REQUIRE(got[prims[1]] == iota_f(5, 5));
  }
  SECTION("with index_map: rows come from the highest entry + 1") {
    kstage_token_t attr = s.token("m");
    // Entries up to 2 -> 3 source rows of 3 elements; prim 3 gets row 1.
    const uint32_t map[4] = {2, 0, 2, 1};
    KS_OK(write_packed(s, q, attr, 1, iota_f(9, 0), 1, 4, map));
    s.seal(1);
    REQUIRE(rows_of(s, q, attr) ==
            expect_rows(prims, {{6, 7, 8}, {0, 1, 2}, {6, 7, 8}, {3, 4, 5}}));
    // The same 9 floats with entries up to 0 only: one row of all 9 -- but
    // then a single tensor is simply that one row, broadcast.
    const uint32_t zeros[2] = {0, 0};
    KS_OK(write_packed(s, q, attr, 2, iota_f(9, 0), 1, 2, zeros));
    s.seal(2);
    auto got = rows_of(s, q, attr);
    REQUIRE(got[prims[0]] == iota_f(9, 0));
    REQUIRE(got[prims[1]] == iota_f(9, 0));
    REQUIRE(got[prims[2]] == std::vector<float>{6, 7, 8});
  }
  SECTION("with a mask: source row i belongs to element i") {
    kstage_token_t attr = s.token("k");
    KS_OK(write_packed(s, q, attr, 1, iota_f(8, 0)));
    s.seal(1);
    const uint64_t mask = 0b1010;  // prims 1 and 3
    KS_OK(write_packed(s, q, attr, 2, iota_f(12, 100), 1, 4, nullptr, &mask));
    s.seal(2);
    REQUIRE(rows_of(s, q, attr) ==
            expect_rows(prims, {{0, 1}, {103, 104, 105}, {4, 5}, {109, 110, 111}}));
  }
  SECTION("0 elements over 4 prims: 4 empty rows") {
    kstage_token_t attr = s.token("z");
    KS_OK(write_packed(s, q, attr, 1, {}));
    s.seal(1);
    auto shapes = array_shapes(s, q, attr);
    REQUIRE(shapes.size() == 1);
    REQUIRE(shapes[0].lengths == std::vector<int64_t>{0, 0, 0, 0});
    // A compact read of a column whose rows are all empty (it has no buffer
    // at all) returns the empty rows too; it used to dereference NULL.
    kstage_read_desc_t compact = kstage_read_desc_init();
    compact.compact = true;
    auto packed = array_shapes(s, q, attr, &compact);
    REQUIRE(packed.size() == 1);
    REQUIRE(packed[0].prims == prims);
    REQUIRE(packed[0].index_map_null);
    REQUIRE(packed[0].lengths == std::vector<int64_t>{0, 0, 0, 0});
    REQUIRE(rows_of(s, q, attr, &compact) == expect_rows(prims, {{}, {}, {}, {}}));
    // The same for a subset of the prims, in another order.
    kstage_query_t some = s.query({prims[3], prims[1]});
    REQUIRE(rows_of(s, some, attr, &compact) == expect_rows({prims[3], prims[1]}, {{}, {}}));
  }
  SECTION("a single tensor for a single prim is just that prim's row") {
    kstage_token_t attr = s.token("one");
    kstage_query_t q1 = s.query({prims[2]});
    KS_OK(write_packed(s, q1, attr, 1, iota_f(7, 3)));
    // count 1 on the 4-prim query: also one row of 5.
    KS_OK(write_packed(s, q, attr, 2, iota_f(5, 50), 1, 1));
    s.seal(2);
    auto got = rows_of(s, q, attr);
    REQUIRE(got.size() == 2);
    REQUIRE(got[prims[2]] == iota_f(7, 3));
    REQUIRE(got[prims[0]] == iota_f(5, 50));
  }
}

TEST_CASE("a packed tensor that does not divide evenly is rejected", "[array][packed][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  KS_OK(write_packed(s, q, attr, 1, iota_f(8, 0)));
  s.seal(1);
  const std::string before = s.fingerprint(q, {attr});

  std::vector<float> v = iota_f(10, 0);
  int64_t shape[1] = {10};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t, 1, true);
  kstage_op_t op = 777;
  KS_FAILS(kstage_write_attribute(s.stage, q, attr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "does not divide evenly across");
  REQUIRE(std::string(kstage_last_error()).find("from count") != std::string::npos);
  REQUIRE(std::string(kstage_last_error()).find("10 elements") != std::string::npos);
  REQUIRE(std::string(kstage_last_error()).find("4 source row") != std::string::npos);

  // With index_map the row count is the highest entry + 1 = 4.
  const uint32_t map[2] = {3, 0};
  w.count = 2;
  w.index_map = map;
  KS_FAILS(kstage_write_attribute(s.stage, q, attr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "does not divide evenly across");
  REQUIRE(std::string(kstage_last_error()).find("from the highest index_map entry") !=
          std::string::npos);
  REQUIRE(std::string(kstage_last_error()).find("4 source row") != std::string::npos);

  // With count 3: 10 % 3 != 0.
  w.index_map = nullptr;
  w.count = 3;
  KS_FAILS(kstage_write_attribute(s.stage, q, attr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "3 source row");
  REQUIRE(op == 777);

  REQUIRE(s.fingerprint(q, {attr}) == before);
  s.seal(2);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// ---------------------------------------------------------------------------
// index_map, mask, count with per-row tensors

TEST_CASE("index_map reorders and broadcasts per-row tensors", "[array][index_map]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 5);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<std::vector<float>> src = {{1, 2}, {}, {3, 4, 5, 6}};
  const uint32_t map[5] = {2, 0, 2, 1, 0};
  KS_OK(write_rows(s, q, attr, 1, src, 1, nullptr, 5, map));
  s.seal(1);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {src[2], src[0], src[2], src[1], src[0]}));
  auto shapes = array_shapes(s, q, attr);
  REQUIRE(shapes[0].tensor_count == 5);  // one tensor per prim, even for shared rows
  REQUIRE(shapes[0].index_map_null);

  // One tensor broadcast to the three leading prims.
  const uint32_t zeros[3] = {0, 0, 0};
  KS_OK(write_rows(s, q, attr, 2, {{9, 8, 7}}, 1, nullptr, 3, zeros));
  s.seal(2);
  REQUIRE(rows_of(s, q, attr) ==
          expect_rows(prims, {{9, 8, 7}, {9, 8, 7}, {9, 8, 7}, src[1], src[0]}));
}

TEST_CASE("index_map entries must be below tensor_count", "[array][index_map][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  KS_OK(write_rows(s, q, attr, 1, {{1}, {2}, {3}, {4}}));
  s.seal(1);
  const std::string before = s.fingerprint(q, {attr});

  FloatRows r({{10, 11}, {12}, {13, 14, 15}}, f32());
  kstage_write_data_t w = r.data();
  const uint32_t map[4] = {0, 1, 3, 2};
  w.count = 4;
  w.index_map = map;
  kstage_op_t op = 5;
  KS_FAILS(kstage_write_attribute(s.stage, q, attr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "index_map[2] = 3");
  REQUIRE(std::string(kstage_last_error()).find("tensor_count") != std::string::npos);
  REQUIRE(std::string(kstage_last_error()).find("count 3") != std::string::npos);

  // Without index_map, 3 tensors for 4 prims is a row-count mismatch.
  w.index_map = nullptr;
  w.count = 0;
  KS_FAILS(kstage_write_attribute(s.stage, q, attr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "3 source row(s) (tensor_count");
  REQUIRE(std::string(kstage_last_error()).find("4 prim(s)") != std::string::npos);
  REQUIRE(op == 5);

  REQUIRE(s.fingerprint(q, {attr}) == before);
  s.seal(2);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {{1}, {2}, {3}, {4}}));
}

TEST_CASE("mask writes selected prims, others keep their arrays; count writes the leading ones",
          "[array][mask][count]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 70);  // more than one mask word
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<std::vector<float>> model(70);
  for (size_t i = 0; i < 70; ++i) model[i] = iota_f(i % 5, float(i * 10));
  KS_OK(write_rows(s, q, attr, 1, model));
  s.seal(1);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, model));

  // Mask bits 1, 3, 64, 69: rows for every element, only selected ones land.
  uint64_t mask[2] = {(1u << 1) | (1u << 3), (1u << 0) | (1u << 5)};
  std::vector<std::vector<float>> src(70);
  for (size_t i = 0; i < 70; ++i) src[i] = iota_f((i * 3) % 7, float(1000 + i));
  KS_OK(write_rows(s, q, attr, 2, src, 1, mask, 70));
  for (size_t i : {1, 3, 64, 69}) model[i] = src[i];
  s.seal(2);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, model));

  // count = 2: only the two leading prims, from 2 tensors.
  KS_OK(write_rows(s, q, attr, 3, {{-1, -2, -3, -4, -5, -6}, {}}, 1, nullptr, 2));
  model[0] = {-1, -2, -3, -4, -5, -6};
  model[1] = {};
  s.seal(3);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, model));

  // A change-range read sees exactly the prims written at 3.
  kstage_read_desc_t d = kstage_read_desc_init();
  d.change_range = true;
  d.range_begin = 3;
  d.range_end = 3;
  auto got = rows_of(s, q, attr, &d);
  REQUIRE(got.size() == 2);
  REQUIRE(got[prims[0]] == model[0]);
  REQUIRE(got[prims[1]].empty());
}

// ---------------------------------------------------------------------------
// Rewrites: storage paths

TEST_CASE("rewriting rows with the same, longer and shorter lengths; adding and re-adding prims",
          "[array][rewrite]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 6);
  kstage_query_t q4 = s.query({prims[0], prims[1], prims[2], prims[3]});
  kstage_query_t all = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<std::vector<float>> model = {iota_f(4, 0), iota_f(2, 10), {}, iota_f(3, 20)};
  KS_OK(write_rows(s, q4, attr, 1, model));
  s.seal(1);
  REQUIRE(rows_of(s, all, attr) == expect_rows({prims[0], prims[1], prims[2], prims[3]}, model));

  // Same lengths (in place).
  std::vector<std::vector<float>> same = {iota_f(4, 100), iota_f(2, 110), {}, iota_f(3, 120)};
  KS_OK(write_rows(s, q4, attr, 2, same));
  s.seal(2);
  REQUIRE(rows_of(s, all, attr) == expect_rows({prims[0], prims[1], prims[2], prims[3]}, same));

  // Longer for some, shorter for others, one untouched via mask.
  const uint64_t mask = 0b1011;
  std::vector<std::vector<float>> mixed = {iota_f(9, 200), {7}, {99, 99}, iota_f(1, 230)};
  KS_OK(write_rows(s, q4, attr, 3, mixed, 1, &mask, 4));
  std::vector<std::vector<float>> expect = {mixed[0], mixed[1], same[2], mixed[3]};
  s.seal(3);
  REQUIRE(rows_of(s, all, attr) == expect_rows({prims[0], prims[1], prims[2], prims[3]}, expect));

  // Adding prims 4 and 5 alongside a rewrite of 0.
  kstage_query_t q_add = s.query({prims[4], prims[0], prims[5]});
  KS_OK(write_rows(s, q_add, attr, 4, {iota_f(5, 400), {}, iota_f(2, 500)}));
  s.seal(4);
  auto got = rows_of(s, all, attr);
  REQUIRE(got.size() == 6);
  REQUIRE(got[prims[0]].empty());
  REQUIRE(got[prims[1]] == mixed[1]);
  REQUIRE(got[prims[2]] == same[2]);
  REQUIRE(got[prims[3]] == mixed[3]);
  REQUIRE(got[prims[4]] == iota_f(5, 400));
  REQUIRE(got[prims[5]] == iota_f(2, 500));

  // Delete 1 and 4, then re-add them (possibly reusing their rows) with other lengths.
  kstage_query_t q_del = s.query({prims[1], prims[4]});
  KS_OK(s.remove(q_del, {attr}, 5));
  s.seal(5);
  got = rows_of(s, all, attr);
  REQUIRE(got.size() == 4);
  REQUIRE(got.count(prims[1]) == 0);
  REQUIRE(got.count(prims[4]) == 0);
  REQUIRE(got[prims[5]] == iota_f(2, 500));

  KS_OK(write_rows(s, q_del, attr, 6, {iota_f(11, 600), {}}, 1, nullptr, 0));
  s.seal(6);
  got = rows_of(s, all, attr);
  REQUIRE(got.size() == 6);
  REQUIRE(got[prims[1]] == iota_f(11, 600));
  REQUIRE(got[prims[4]].empty());
  REQUIRE(got[prims[2]] == same[2]);
  REQUIRE(got[prims[5]] == iota_f(2, 500));
  REQUIRE(got[prims[3]] == mixed[3]);
}

TEST_CASE("200 ticks of random ragged updates match a model", "[array][rewrite][stress]") {
  Stage s(host_execution());
  constexpr size_t N = 50;
  auto prims = s.paths("/r", N);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::mt19937 rng(12345);
  std::vector<std::vector<float>> model(N);
  std::vector<bool> present(N, false);
  float next = 0.f;
  auto fresh_row = [&](size_t max_len) {
    std::vector<float> v(rng() % (max_len + 1));
    for (float& x : v) x = next++;
    return v;
  };

  for (uint64_t tick = 1; tick <= 200; ++tick) {
    const unsigned kind = rng() % 10;
    if (kind < 5 || tick == 1) {
      // Whole-query write with random lengths (sometimes all the same as before).
      std::vector<std::vector<float>> rows(N);
      const bool keep_lengths = tick > 1 && rng() % 3 == 0;
      for (size_t i = 0; i < N; ++i) {
        if (keep_lengths && present[i]) {
          rows[i] = model[i];
          for (float& x : rows[i]) x = next++;
        } else {
          rows[i] = fresh_row(16);
        }
      }
      KS_OK(write_rows(s, q, attr, tick, rows));
      for (size_t i = 0; i < N; ++i) model[i] = rows[i], present[i] = true;
    } else if (kind < 8) {
      // Masked write of a random subset.
      uint64_t mask = 0;
      for (size_t i = 0; i < N; ++i)
        if (rng() % 4 == 0) mask |= uint64_t(1) << i;
      std::vector<std::vector<float>> rows(N);
      for (size_t i = 0; i < N; ++i)
        rows[i] = (mask >> i & 1) ? fresh_row(40) : std::vector<float>{};
      KS_OK(write_rows(s, q, attr, tick, rows, 1, &mask, N));
      for (size_t i = 0; i < N; ++i)
        if (mask >> i & 1) model[i] = rows[i], present[i] = true;
    } else {
      // Delete a random subset.
      std::vector<kstage_path_t> doomed;
      for (size_t i = 0; i < N; ++i)
        if (rng() % 5 == 0) doomed.push_back(prims[i]);
      if (doomed.empty()) doomed.push_back(prims[tick % N]);
      kstage_query_t qd = s.query(doomed);
      KS_OK(s.remove(qd, {attr}, tick));
      KS_OK(kstage_query_release(s.stage, qd));
      for (size_t i = 0; i < N; ++i)
        if (std::find(doomed.begin(), doomed.end(), prims[i]) != doomed.end()) present[i] = false;
    }
    s.seal(tick);
    auto got = rows_of(s, q, attr);
    std::map<kstage_path_t, std::vector<float>> expect;
    for (size_t i = 0; i < N; ++i)
      if (present[i]) expect[prims[i]] = model[i];
    INFO("tick " << tick);
    REQUIRE(got == expect);
  }
}

TEST_CASE("large rows rewritten many times are compacted without losing values",
          "[array][rewrite][stress]") {
  Stage s(host_execution());
  constexpr size_t N = 6;
  auto prims = s.paths("/big", N);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::mt19937 rng(7);
  std::vector<std::vector<float>> model(N);
  for (size_t i = 0; i < N; ++i) model[i] = iota_f(1000 + i, float(i));
  KS_OK(write_rows(s, q, attr, 1, model));
  s.seal(1);
  // Rewrite one or two prims at a time with new lengths: each rewrite leaves
  // the old bytes behind as garbage (hundreds of KiB per tick).
  for (uint64_t tick = 2; tick <= 40; ++tick) {
    uint64_t mask = (uint64_t(1) << (rng() % N)) | (uint64_t(1) << (rng() % N));
    std::vector<std::vector<float>> rows(N);
    for (size_t i = 0; i < N; ++i)
      if (mask >> i & 1) rows[i] = iota_f(50000 + rng() % 100000, float(tick * 1000 + i));
    KS_OK(write_rows(s, q, attr, tick, rows, 1, &mask, N));
    for (size_t i = 0; i < N; ++i)
      if (mask >> i & 1) model[i] = rows[i];
    s.seal(tick);
    INFO("tick " << tick);
    REQUIRE(rows_of(s, q, attr) == expect_rows(prims, model));
  }
}

TEST_CASE(
    "pending writes apply in ordinal, then submission order; sources are copied at submission",
    "[array][rewrite][ordering]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  {
    FloatRows r({iota_f(2, 0), iota_f(3, 10), {}}, f32());
    KS_OK(s.write(q, attr, 1, r.data()));
    // The op completed: the caller may reuse its buffers at once.
    for (auto& row : r.rows) std::fill(row.begin(), row.end(), -1.f);
  }
  // Submitted out of ordinal order, and twice at ordinal 3.
  KS_OK(write_rows(s, q, attr, 4, {{40}, iota_f(6, 40), {41, 42}}));
  KS_OK(write_rows(s, q, attr, 3, {iota_f(7, 30), {}, {31}}));
  const uint64_t mask = 0b010;
  KS_OK(write_rows(s, q, attr, 3, {{}, iota_f(9, 300), {}}, 1, &mask, 3));
  kstage_query_t q2 = s.query({prims[2]});
  KS_OK(s.remove(q2, {attr}, 2));
  KS_OK(write_rows(s, q2, attr, 2, {iota_f(4, 20)}));  // same ordinal, after the delete

  s.seal(1);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {iota_f(2, 0), iota_f(3, 10), {}}));
  s.seal(2);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {iota_f(2, 0), iota_f(3, 10), iota_f(4, 20)}));
  s.seal(3);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {iota_f(7, 30), iota_f(9, 300), {31}}));
  s.seal(4);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {{40}, iota_f(6, 40), {41, 42}}));

  // Sealing several ordinals at once gives the same result as one by one.
  KS_OK(write_rows(s, q, attr, 5, {iota_f(3, 50), iota_f(1, 51), iota_f(20, 52)}));
  KS_OK(write_rows(s, q, attr, 6, {{}, iota_f(2, 60), iota_f(20, 62)}));
  KS_OK(s.remove(q2, {attr}, 7));
  KS_OK(write_rows(s, q, attr, 8, {iota_f(5, 80)}, 1, nullptr, 1));
  s.seal(8);
  auto got = rows_of(s, q, attr);
  REQUIRE(got.size() == 2);
  REQUIRE(got[prims[0]] == iota_f(5, 80));
  REQUIRE(got[prims[1]] == iota_f(2, 60));
}

// ---------------------------------------------------------------------------
// Schema

// Another schema for prims that hold the attribute: refused (one value per prim and name), with
// what differs named. (Prims that do not hold it may take another schema: test_schemas.cpp.)
TEST_CASE("kind, dtype and semantic mismatches against an array column are rejected",
          "[array][schema][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t arr = s.token("arr");
  kstage_token_t fixed = s.token("fixed");
  KS_OK(write_rows(s, q, arr, 1, {{1, 2}, {3}}));
  s.write_f32(q, fixed, 1, {5, 6});
  s.seal(1);
  const std::string before = s.fingerprint(q, {arr, fixed});
  kstage_op_t op = 3;

  // Fixed-size write to the array column.
  std::vector<float> two = {7, 8};
  int64_t shape2[1] = {2};
  DLTensor t = tensor(two.data(), f32(), 1, shape2);
  kstage_write_data_t w = write_data(&t, 1, false);
  KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT,
           "the write declares is_array = false, it is an array attribute");
  // Array write to the fixed-size column.
  RowTensors<float> r({{1}, {2}}, f32());
  kstage_write_data_t wa = r.data();
  KS_FAILS(kstage_write_attribute(s.stage, q, fixed, 2, &wa, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT,
           "the write declares is_array = true, it is a fixed-size attribute");
  // Other dtype.
  RowTensors<int32_t> ri({{1}, {2, 3}}, i32());
  kstage_write_data_t wi = ri.data();
  KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &wi, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT,
           "prim '/p_0' (element 0) holds 'arr' as array float32 NONE: the write's dtype int32 "
           "does not match its dtype float32");
  // Other lanes, including by folding: (len, 3) lanes 1 is float32x3.
  RowTensors<float> r3({{1, 2, 3}, {}}, f32(), 3);
  kstage_write_data_t w3 = r3.data();
  KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w3, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "dtype float32x3");
  // Packed of another dtype.
  std::vector<double> d4 = {1, 2, 3, 4};
  int64_t shape4[1] = {4};
  DLTensor td = tensor(d4.data(), f64(), 1, shape4);
  kstage_write_data_t wd = write_data(&td, 1, true);
  KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &wd, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "dtype float64");
  // Other semantic.
  kstage_write_data_t ws = r.data();
  ws.semantic = KSTAGE_SEMANTIC_VECTOR;
  KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &ws, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "the write's semantic VECTOR does not match its semantic NONE");
  REQUIRE(op == 3);

  REQUIRE(s.fingerprint(q, {arr, fixed}) == before);
  s.seal(2);
  REQUIRE(rows_of(s, q, arr) == expect_rows(prims, {{1, 2}, {3}}));
  auto shapes = array_shapes(s, q, arr);
  REQUIRE(shapes[0].dtype.code == kDLFloat);
  REQUIRE(shapes[0].dtype.bits == 32);
  REQUIRE(shapes[0].dtype.lanes == 1);
}

TEST_CASE("STRING semantic holds UTF-8 bytes in a uint8 array column", "[array][schema][string]") {
  Stage s(host_execution());
  auto prims = s.paths("/label", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t name = s.token("name");
  auto utf8 = [](const std::string& str) { return std::vector<uint8_t>(str.begin(), str.end()); };
  std::vector<std::vector<uint8_t>> rows = {utf8("h\xC3\xA9llo"), utf8(""),
                                            utf8("w\xC3\xB6rld \xE2\x9C\x93")};
  RowTensors<uint8_t> r(rows, u8());
  kstage_write_data_t w = r.data();
  w.semantic = KSTAGE_SEMANTIC_STRING;
  KS_OK(s.write(q, name, 1, w));
  s.seal(1);
  auto groups = s.read(q, {name});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].is_array);
  REQUIRE(groups[0].semantic == KSTAGE_SEMANTIC_STRING);
  REQUIRE(groups[0].dtype.code == kDLUInt);
  REQUIRE(groups[0].dtype.bits == 8);
  for (size_t i = 0; i < 3; ++i) REQUIRE(groups[0].values[i] == bytes_of(rows[i]));
  REQUIRE(std::string(groups[0].values[2].begin(), groups[0].values[2].end()) ==
          "w\xC3\xB6rld \xE2\x9C\x93");

  kstage_op_t op = 9;
  // Writing the STRING column without the semantic: NONE keeps the column's.
  kstage_write_data_t plain = r.data();
  kstage_op_t kept = 0;
  KS_OK(kstage_write_attribute(s.stage, q, name, 2, &plain, KSTAGE_PRIM_MODE_UPSERT, &kept));
  KS_OK(kstage_release_op(s.stage, kept));
  s.seal(2);
  REQUIRE(s.read(q, {name})[0].semantic == KSTAGE_SEMANTIC_STRING);
  // STRING on a float32 array column: rejected at creation.
  kstage_token_t bad = s.token("bad");
  FloatRows fr({{1}, {2}, {3}}, f32());
  kstage_write_data_t wf = fr.data();
  wf.semantic = KSTAGE_SEMANTIC_STRING;
  KS_FAILS(kstage_write_attribute(s.stage, q, bad, 3, &wf, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "semantic STRING needs an array column of uint8/int8");
  REQUIRE(std::string(kstage_last_error()).find("float32") != std::string::npos);
  // STRING on a fixed-size uint8 column: rejected too.
  std::vector<uint8_t> three = {1, 2, 3};
  int64_t shape3[1] = {3};
  DLTensor tf = tensor(three.data(), u8(), 1, shape3);
  kstage_write_data_t wfixed = write_data(&tf, 1, false);
  wfixed.semantic = KSTAGE_SEMANTIC_STRING;
  KS_FAILS(kstage_write_attribute(s.stage, q, bad, 3, &wfixed, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "a fixed-size column of uint8");
  // STRING on uint8 lanes 2: rejected.
  RowTensors<uint8_t> r2({{1, 2}, {}, {3, 4}}, u8(2));
  kstage_write_data_t w2 = r2.data();
  w2.semantic = KSTAGE_SEMANTIC_STRING;
  KS_FAILS(kstage_write_attribute(s.stage, q, bad, 3, &w2, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "uint8x2");
  REQUIRE(op == 9);
  s.seal(2);
  REQUIRE(s.read(q, {bad}).empty());  // no column was created
  REQUIRE(s.read(q, {name})[0].values[0] == bytes_of(rows[0]));
}

TEST_CASE("every dtype round trips in an array column", "[array][dtype]") {
  Stage s(host_execution());
  auto prims = s.paths("/d", 3);
  kstage_query_t q = s.query(prims);

  auto check = [&](const char* attr_name, auto rows, DLDataType dtype) {
    using Row = typename decltype(rows)::value_type;
    using T = typename Row::value_type;
    kstage_token_t attr = s.token(attr_name);
    RowTensors<T> r(rows, dtype);
    KS_OK(s.write(q, attr, 1, r.data()));
    s.seal(1, {attr});
    auto groups = s.read(q, {attr});
    INFO(attr_name);
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].is_array);
    REQUIRE(groups[0].dtype.code == dtype.code);
    REQUIRE(groups[0].dtype.bits == dtype.bits);
    REQUIRE(groups[0].dtype.lanes == dtype.lanes);
    for (size_t i = 0; i < rows.size(); ++i) REQUIRE(groups[0].values[i] == bytes_of(rows[i]));
    auto shapes = array_shapes(s, q, attr);
    for (size_t i = 0; i < rows.size(); ++i)
      REQUIRE(shapes[0].lengths[i] == int64_t(rows[i].size() / dtype.lanes));
  };

  check("i8", std::vector<std::vector<int8_t>>{{-128, 0, 127}, {}, {-1}}, DLDataType{kDLInt, 8, 1});
  check("u16", std::vector<std::vector<uint16_t>>{{1}, {65535, 2}, {}}, DLDataType{kDLUInt, 16, 1});
  check("i64",
        std::vector<std::vector<int64_t>>{{INT64_MIN, INT64_MAX}, {0x0123456789abcdefLL}, {}},
        DLDataType{kDLInt, 64, 1});
  // float16 as bit patterns: 1.0, -2.0, +inf, a NaN payload.
  check("f16", std::vector<std::vector<uint16_t>>{{0x3C00, 0xC000}, {0x7C00, 0x7E01, 0x0001}, {}},
        DLDataType{kDLFloat, 16, 1});
  check("bf16", std::vector<std::vector<uint16_t>>{{0x3F80}, {}, {0xC000, 0x7F80}},
        DLDataType{kDLBfloat, 16, 1});
  check("c128",
        std::vector<std::vector<std::complex<double>>>{
            {{1.5, -2.5}}, {}, {{0, 1}, {3, 4}, {-0.0, 1e300}}},
        DLDataType{kDLComplex, 128, 1});
  check("c64",
        std::vector<std::vector<std::complex<float>>>{{{1.f, 2.f}, {3.f, 4.f}}, {{5.f, 6.f}}, {}},
        DLDataType{kDLComplex, 64, 1});
  check("b", std::vector<std::vector<uint8_t>>{{1, 0, 1, 1}, {0}, {}}, DLDataType{kDLBool, 8, 1});
  check("f64x2", std::vector<std::vector<double>>{{1, 2, 3, 4}, {}, {5, 6}}, f64(2));
  // float3 per element (lanes > 1).
  check("f32x3", std::vector<std::vector<float>>{{1, 2, 3, 4, 5, 6}, {7, 8, 9}, {}}, f32(3));
}

TEST_CASE("per-row tensors must agree on device and dtype; bad tensors are named",
          "[array][errors]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  KS_OK(write_rows(s, q, attr, 1, {{1}, {2}, {3}}));
  s.seal(1);
  kstage_token_t fresh = s.token("fresh");
  const std::string before = s.fingerprint(q, {attr, fresh});
  kstage_op_t op = 11;

  for (kstage_token_t target : {attr, fresh}) {
    INFO("attribute " << target);
    {
      FloatRows r({{1}, {2, 3}, {4}}, f32());
      r.t[1].device = DLDevice{kDLCUDA, 0};
      kstage_write_data_t w = r.data();
      KS_FAILS(kstage_write_attribute(s.stage, q, target, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT,
               "tensors[1] is on device kDLCUDA:0 but tensors[0] is on kDLCPU:0");
    }
    {
      FloatRows r({{1}, {2, 3}, {4}}, f32());
      r.t[2].device = DLDevice{kDLCPU, 1};
      kstage_write_data_t w = r.data();
      KS_FAILS(kstage_write_attribute(s.stage, q, target, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT, "tensors[2] is on device kDLCPU:1");
    }
    {
      FloatRows r({{1}, {2, 3}, {4}}, f32());
      r.t[2].dtype = i32();
      kstage_write_data_t w = r.data();
      KS_FAILS(kstage_write_attribute(s.stage, q, target, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT, "tensors[2] has dtype int32 but tensors[0] has float32");
    }
    {
      // Lanes after folding differ: tensors[1] is (1, 2) -> float32x2.
      FloatRows r({{1}, {2, 3}, {4}}, f32());
      int64_t shape12[2] = {1, 2};
      r.t[1].ndim = 2;
      r.t[1].shape = shape12;
      kstage_write_data_t w = r.data();
      KS_FAILS(kstage_write_attribute(s.stage, q, target, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT, "tensors[1] has dtype float32x2");
    }
    {
      FloatRows r({{1}, {2, 3}, {4}}, f32());
      r.t[1].ndim = 0;
      kstage_write_data_t w = r.data();
      KS_FAILS(kstage_write_attribute(s.stage, q, target, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT, "tensors[1]: ndim 0");
    }
    {
      FloatRows r({{1}, {2, 3}, {4}}, f32());
      int64_t neg[1] = {-2};
      r.t[2].shape = neg;
      kstage_write_data_t w = r.data();
      KS_FAILS(kstage_write_attribute(s.stage, q, target, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT, "tensors[2]: shape[0] is negative (-2)");
    }
    {
      FloatRows r({{1}, {2, 3}, {4}}, f32());
      r.t[1].data = nullptr;
      kstage_write_data_t w = r.data();
      KS_FAILS(kstage_write_attribute(s.stage, q, target, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT, "tensors[1]: data is NULL but the tensor has 2 elements");
    }
  }
  REQUIRE(op == 11);
  REQUIRE(s.fingerprint(q, {attr, fresh}) == before);
  s.seal(2);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {{1}, {2}, {3}}));
  REQUIRE(s.read(q, {fresh}).empty());

  // Rows that agree (canonical float32x2 next to a folded (n, 2)) are accepted.
  FloatRows ok({{1, 2}, {3, 4, 5, 6}, {}}, f32(2));
  int64_t shape22[2] = {2, 2};
  DLTensor folded = tensor(ok.rows[1].data(), f32(), 2, shape22);
  ok.t[1] = folded;
  kstage_token_t pairs = s.token("pairs");
  KS_OK(s.write(q, pairs, 3, ok.data()));
  s.seal(3);
  REQUIRE(rows_of(s, q, pairs) == expect_rows(prims, ok.rows));
  REQUIRE(array_shapes(s, q, pairs)[0].lengths == std::vector<int64_t>{1, 2, 0});
}

TEST_CASE("strided and offset per-row tensors read correctly", "[array][strided]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  // Row 0: every other element of 0..9 (stride 2) -> 0, 2, 4, 6, 8.
  std::vector<float> backing0 = iota_f(10, 0);
  int64_t shape0[1] = {5}, stride0[1] = {2};
  // Row 1: compact, but behind a byte_offset of 3 floats -> 103, 104.
  std::vector<float> backing1 = iota_f(5, 100);
  int64_t shape1[1] = {2};
  // Row 2: stride 3 starting at element 1 -> 201, 204, 207.
  std::vector<float> backing2 = iota_f(9, 200);
  int64_t shape2[1] = {3}, stride2[1] = {3};
  DLTensor t[3] = {tensor(backing0.data(), f32(), 1, shape0, stride0),
                   tensor(backing1.data(), f32(), 1, shape1),
                   tensor(backing2.data(), f32(), 1, shape2, stride2)};
  t[1].byte_offset = 3 * sizeof(float);
  t[2].byte_offset = 1 * sizeof(float);
  KS_OK(s.write(q, attr, 1, write_data(t, 3, true)));
  s.seal(1);
  REQUIRE(rows_of(s, q, attr) ==
          expect_rows(prims, {{0, 2, 4, 6, 8}, {103, 104}, {201, 204, 207}}));

  // float3 elements spaced 4 floats apart: (len, 3) with strides (4, 1).
  kstage_token_t pts = s.token("pts");
  std::vector<float> padded = iota_f(12, 0);  // 3 elements of 3 + 1 padding
  int64_t shape_p[2] = {3, 3}, stride_p[2] = {4, 1};
  std::vector<float> one = {7, 8, 9};
  int64_t shape_one[2] = {1, 3};
  // Transposed source: a (2, 3) view of a column-major 3x2 block.
  std::vector<float> colmajor = {1, 2, 3, 4, 5, 6};  // element e, lane l at [l*2 + e]
  int64_t shape_t[2] = {2, 3}, stride_t[2] = {1, 2};
  DLTensor tp[3] = {tensor(padded.data(), f32(), 2, shape_p, stride_p),
                    tensor(one.data(), f32(), 2, shape_one),
                    tensor(colmajor.data(), f32(), 2, shape_t, stride_t)};
  KS_OK(s.write(q, pts, 2, write_data(tp, 3, true)));
  s.seal(2);
  auto got = rows_of(s, q, pts);
  REQUIRE(got[prims[0]] == std::vector<float>{0, 1, 2, 4, 5, 6, 8, 9, 10});
  REQUIRE(got[prims[1]] == std::vector<float>{7, 8, 9});
  REQUIRE(got[prims[2]] == std::vector<float>{1, 3, 5, 2, 4, 6});

  // A strided packed tensor: 12 elements at stride 2, over 3 prims.
  kstage_token_t packed = s.token("packed");
  std::vector<float> wide = iota_f(24, 0);
  int64_t shape_w[1] = {12}, stride_w[1] = {2};
  DLTensor tw = tensor(wide.data(), f32(), 1, shape_w, stride_w);
  KS_OK(s.write(q, packed, 3, write_data(&tw, 1, true)));
  s.seal(3);
  REQUIRE(rows_of(s, q, packed) ==
          expect_rows(prims, {{0, 2, 4, 6}, {8, 10, 12, 14}, {16, 18, 20, 22}}));
}

TEST_CASE(
    "middle row tensors of every layout: the per-row fast check passes on what it cannot take",
    "[array][strided]") {
  // Rows between the first and the last are checked inline when they are 1-D, compact and
  // non-empty; every other row takes the full decoding, which reads it or names its fault.
  Stage s(host_execution());
  auto prims = s.paths("/m", 7);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<float> b = iota_f(16, 0);
  int64_t one[1] = {1}, two[1] = {2}, three[1] = {3}, zero[1] = {0};
  int64_t by2[1] = {2}, back[1] = {-1}, odd[1] = {12345};
  DLTensor t[7] = {tensor(b.data(), f32(), 1, two),
                   tensor(b.data(), f32(), 1, three, by2),       // 0, 2, 4
                   tensor(b.data() + 9, f32(), 1, three, back),  // 9, 8, 7
                   tensor(b.data() + 5, f32(), 1, one, odd),     // extent 1: stride unused
                   tensor(b.data(), f32(), 1, zero),             // empty
                   tensor(b.data(), f32(), 1, two),              // + byte_offset below: 12, 13
                   tensor(b.data() + 14, f32(), 1, two)};
  t[5].byte_offset = 12 * sizeof(float);
  KS_OK(s.write(q, attr, 1, write_data(t, 7, true)));
  s.seal(1);
  REQUIRE(rows_of(s, q, attr) ==
          expect_rows(prims, {{0, 1}, {0, 2, 4}, {9, 8, 7}, {5}, {}, {12, 13}, {14, 15}}));

  const std::string before = s.fingerprint(q, {attr});
  {
    DLTensor bad[7];
    std::copy(t, t + 7, bad);
    bad[2] = tensor(b.data(), f32(), 1, two);
    bad[2].byte_offset = UINT64_MAX - 2;  // data + byte_offset wraps
    KS_FAILS(s.write(q, attr, 2, write_data(bad, 7, true)), KSTAGE_INVALID_ARGUMENT,
             "tensors[2]: byte_offset 18446744073709551613 overflows");
  }
  {
    DLTensor bad[7];
    std::copy(t, t + 7, bad);
    int64_t huge[1] = {int64_t(1) << 62};  // x 4 bytes: more than 2^63
    bad[3] = tensor(b.data(), f32(), 1, huge);
    KS_FAILS(s.write(q, attr, 2, write_data(bad, 7, true)), KSTAGE_INVALID_ARGUMENT, "tensors[3]");
  }
  {
    DLTensor bad[7];
    std::copy(t, t + 7, bad);
    bad[4] = tensor(b.data(), f32(), 1, two);
    bad[4].dtype = f32(2);  // lanes differ
    KS_FAILS(s.write(q, attr, 2, write_data(bad, 7, true)), KSTAGE_INVALID_ARGUMENT,
             "tensors[4] has dtype float32x2 but tensors[0] has float32");
  }
  REQUIRE(s.fingerprint(q, {attr}) == before);
}

TEST_CASE("compact reads return the same rows", "[array][read][compact]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 6);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<std::vector<float>> rows = {iota_f(3, 0), {}, iota_f(7, 10), {1}, iota_f(2, 30), {}};
  KS_OK(write_rows(s, q, attr, 1, rows));
  // Some churn so the storage is not in prim order any more.
  const uint64_t mask = 0b010101;
  std::vector<std::vector<float>> churn = {iota_f(9, 100), {}, {5}, {}, iota_f(4, 130), {}};
  KS_OK(write_rows(s, q, attr, 2, churn, 1, &mask, 6));
  s.seal(2);
  rows[0] = churn[0];
  rows[2] = churn[2];
  rows[4] = churn[4];

  kstage_read_desc_t compact = kstage_read_desc_init();
  compact.compact = true;
  auto plain = rows_of(s, q, attr);
  auto packed = rows_of(s, q, attr, &compact);
  REQUIRE(plain == expect_rows(prims, rows));
  REQUIRE(packed == plain);

  // Reordered subset query, compact.
  kstage_query_t sub = s.query({prims[4], prims[1], prims[0]});
  auto shapes = array_shapes(s, sub, attr, &compact);
  REQUIRE(shapes.size() == 1);
  REQUIRE(shapes[0].prims == std::vector<kstage_path_t>{prims[4], prims[1], prims[0]});
  REQUIRE(shapes[0].tensor_count == 3);
  REQUIRE(shapes[0].index_map_null);
  REQUIRE(shapes[0].lengths == std::vector<int64_t>{4, 0, 9});
  auto groups = s.read(sub, {attr}, &compact);
  REQUIRE(to_floats(groups[0].values[0]) == rows[4]);
  REQUIRE(groups[0].values[1].empty());
  REQUIRE(to_floats(groups[0].values[2]) == rows[0]);

  // A compact change-range read too.
  compact.change_range = true;
  compact.range_begin = 2;
  compact.range_end = 2;
  auto changed = rows_of(s, q, attr, &compact);
  REQUIRE(changed.size() == 3);
  REQUIRE(changed[prims[0]] == rows[0]);
  REQUIRE(changed[prims[2]] == rows[2]);
  REQUIRE(changed[prims[4]] == rows[4]);
}

TEST_CASE("a held group keeps its arrays across later seals (copy-on-write)",
          "[array][read][cow]") {
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<std::vector<float>> old_rows = {iota_f(4, 0), iota_f(2, 10), {}, iota_f(3, 20)};
  KS_OK(write_rows(s, q, attr, 1, old_rows));
  s.seal(1);

  const bool compact = GENERATE(false, true);
  kstage_read_desc_t desc = kstage_read_desc_init();
  desc.compact = compact;
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, &desc, &r));
  kstage_read_group_t held{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &held));
  KS_OK(kstage_release_read(s.stage, r));  // the group outlives its read
  REQUIRE(held.is_array);
  REQUIRE(held.data.tensor_count == 4);
  auto held_values = [&]() {
    Group g = Stage::copy_group(held);
    std::vector<std::vector<float>> v;
    for (auto& b : g.values) v.push_back(to_floats(b));
    return v;
  };
  REQUIRE(held_values() == old_rows);
  const void* data0 = held.data.tensors[0].data;

  // Same lengths (the in-place path), then different lengths, then a delete
  // and a whole new set of prims: the held group never changes.
  std::vector<std::vector<float>> same = {iota_f(4, 100), iota_f(2, 110), {}, iota_f(3, 120)};
  KS_OK(write_rows(s, q, attr, 2, same));
  s.seal(2);
  REQUIRE(held_values() == old_rows);
  REQUIRE(held.data.tensors[0].data == data0);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, same));

  // A masked same-length update of one row: the others must come from the old storage.
  const uint64_t mask = 0b0010;
  KS_OK(write_rows(s, q, attr, 3, {{}, {-1, -2}, {}, {}}, 1, &mask, 4));
  s.seal(3);
  REQUIRE(held_values() == old_rows);
  same[1] = {-1, -2};
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, same));

  std::vector<std::vector<float>> longer = {iota_f(40, 200), {1}, iota_f(5, 300), {}};
  KS_OK(write_rows(s, q, attr, 4, longer));
  s.seal(4);
  REQUIRE(held_values() == old_rows);

  kstage_query_t q0 = s.query({prims[0]});
  KS_OK(s.remove(q0, {attr}, 5));
  s.seal(5);
  REQUIRE(held_values() == old_rows);
  auto now = rows_of(s, q, attr);
  REQUIRE(now.size() == 3);
  REQUIRE(now[prims[3]].empty());
  REQUIRE(now[prims[2]] == longer[2]);

  KS_OK(kstage_release_group(s.stage, held.handle));
  KS_FAILS(kstage_release_group(s.stage, held.handle), KSTAGE_INVALID_HANDLE, "not live");

  // After the release the column is free to be rewritten in place again.
  std::vector<std::vector<float>> last = {iota_f(2, 900), iota_f(1, 910), iota_f(5, 920),
                                          iota_f(1, 930)};
  KS_OK(write_rows(s, q, attr, 6, last));
  s.seal(6);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, last));
}

TEST_CASE("a one-element row whose trailing axis is strided is read element by element",
          "[array][strides]") {
  // Found by fuzzing: a row of one element is not contiguous when its folded
  // lanes are spaced out (or reversed); it used to be read as if it were,
  // which gave wrong values or read past the producer's buffer.
  Stage s(host_execution());
  auto prims = s.paths("/one", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<float> buf = {0, 1, 2, 3, 4, 5};
  int64_t shape[2] = {1, 3};
  int64_t spaced[2] = {6, 2};     // elements 0, 2, 4
  int64_t reversed[2] = {3, -1};  // elements 2, 1, 0
  DLTensor rows[2] = {tensor(buf.data(), f32(), 2, shape, spaced),
                      tensor(buf.data() + 2, f32(), 2, shape, reversed)};
  KS_OK(s.write(q, attr, 1, write_data(rows, 2, true)));
  s.seal(1);
  REQUIRE(rows_of(s, q, attr) == expect_rows(prims, {{0, 2, 4}, {2, 1, 0}}));
}
