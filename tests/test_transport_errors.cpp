// SPDX-License-Identifier: Apache-2.0
// Every validation error of a write. Each rejected call must return its code
// with a message naming the bad input, leave the op out-parameter untouched,
// and leave the stage exactly as it was -- also after sealing the ordinal the
// rejected call used.
#include "support.hpp"

#include <functional>
#include <numeric>
#include <regex>
#include <thread>

using namespace kstage_test;

namespace {

constexpr kstage_op_t kUntouched = 0xC0FFEE;

// The fingerprint without its floors: what sealing an empty ordinal must not change.
std::string values_only(const std::string& fingerprint) {
  static const std::regex floors("(global |floor [0-9]+=)[0-9]+;");
  return std::regex_replace(fingerprint, floors, "$1?;");
}

// A stage with 4 prims holding a sealed float32x3 column "points" (semantic
// NONE) at ordinal 1, and a token "fresh" no column has yet.
struct Rig {
  explicit Rig(kstage_host_execution_t exec) : s(exec) {
    prims = s.paths("/e", 4);
    q = s.query(prims);
    points = s.token("points");
    fresh = s.token("fresh");
    s.write_f32(q, points, 1, f12, 3);
    s.seal(1);
  }

  std::string fingerprint() { return s.fingerprint(q, {points, fresh}); }

  // Runs `submit(ordinal, &op)`, expecting `code` and `needle`; checks the op
  // is untouched and the stage unchanged before and after sealing the ordinal.
  // Returns the message.
  std::string rejects(const std::function<kstage_status_t(uint64_t, kstage_op_t*)>& submit,
                      kstage_status_t code, const std::string& needle) {
    const uint64_t ordinal = next++;
    const std::string before = fingerprint();
    kstage_op_t op = kUntouched;
    KS_FAILS(submit(ordinal, &op), code, needle);
    const std::string message = kstage_last_error();
    REQUIRE(op == kUntouched);
    REQUIRE(fingerprint() == before);
    s.seal(ordinal);
    REQUIRE(s.floor(0) == ordinal);
    REQUIRE(values_only(fingerprint()) == values_only(before));
    return message;
  }

  // A single-attribute write of `w` to `attr`.
  std::string rejects(kstage_token_t attr, const kstage_write_data_t& w, kstage_status_t code,
                      const std::string& needle,
                      kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT) {
    return rejects(
        [&](uint64_t ordinal, kstage_op_t* op) {
          return kstage_write_attribute(s.stage, q, attr, ordinal, &w, mode, op);
        },
        code, needle);
  }

  // "fresh" still has no column: any schema is accepted for it (then sealed).
  void fresh_has_no_column() {
    REQUIRE(s.read(q, {fresh}).empty());
    std::vector<int16_t> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int64_t shape[1] = {4};
    DLTensor t = tensor(v.data(), DLDataType{kDLInt, 16, 2}, 1, shape);
    const uint64_t ordinal = next++;
    KS_OK(s.write(q, fresh, ordinal, write_data(&t)));
    s.seal(ordinal);
    auto groups = s.read(q, {fresh});
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].dtype.code == kDLInt);
    REQUIRE(groups[0].dtype.bits == 16);
    REQUIRE(groups[0].dtype.lanes == 2);
  }

  std::vector<float> f12 = [] {
    std::vector<float> v(12);
    std::iota(v.begin(), v.end(), 0.f);
    return v;
  }();
  Stage s;
  std::vector<kstage_path_t> prims;
  kstage_query_t q = 0;
  kstage_token_t points = 0, fresh = 0;
  uint64_t next = 2;
};

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// A managed tensor whose deleter counts its calls.
struct Managed {
  DLManagedTensorVersioned m{};
  int deleted = 0;
  Managed(void* data, DLDataType dtype, int ndim, int64_t* shape) {
    m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m.manager_ctx = this;
    m.deleter = [](DLManagedTensorVersioned* self) {
      ++static_cast<Managed*>(self->manager_ctx)->deleted;
    };
    m.dl_tensor = tensor(data, dtype, ndim, shape);
  }
};

}  // namespace

TEST_CASE("tensors and managed_tensors: exactly one, with at least one tensor",
          "[transport][errors]") {
  Rig r(host_execution());
  int64_t shape[1] = {4};
  DLTensor t = tensor(r.f12.data(), f32(3), 1, shape);

  // Both: rejected, and the managed tensor is still deleted exactly once.
  Managed managed(r.f12.data(), f32(3), 1, shape);
  DLManagedTensorVersioned* list[1] = {&managed.m};
  kstage_write_data_t both = write_data(&t);
  both.managed_tensors = list;
  r.rejects(r.points, both, KSTAGE_INVALID_ARGUMENT, "(got tensors and managed_tensors)");
  REQUIRE(managed.deleted == 1);

  kstage_write_data_t neither = write_data(nullptr);
  r.rejects(r.points, neither, KSTAGE_INVALID_ARGUMENT, "(got none)");
  r.rejects(r.fresh, neither, KSTAGE_INVALID_ARGUMENT,
            "exactly one of tensors, managed_tensors and legacy_managed_tensors");

  kstage_write_data_t none = write_data(&t, 0);
  r.rejects(r.points, none, KSTAGE_INVALID_ARGUMENT, "tensor_count is 0");

  // Fixed-size takes exactly one tensor.
  DLTensor two[2] = {t, t};
  kstage_write_data_t w2 = write_data(two, 2);
  std::string msg = r.rejects(r.points, w2, KSTAGE_INVALID_ARGUMENT, "exactly 1 tensor");
  REQUIRE(contains(msg, "tensor_count 2"));
  REQUIRE(contains(msg, "'points'"));
  r.rejects(r.fresh, w2, KSTAGE_INVALID_ARGUMENT, "tensor_count 2");

  // A managed write that is otherwise invalid: rejected, deleter runs once.
  int64_t bad_shape[1] = {3};
  Managed short_rows(r.f12.data(), f32(3), 1, bad_shape);
  DLManagedTensorVersioned* list2[1] = {&short_rows.m};
  kstage_write_data_t wm = kstage_write_data_init();
  wm.managed_tensors = list2;
  wm.tensor_count = 1;
  msg = r.rejects(r.points, wm, KSTAGE_INVALID_ARGUMENT, "3 source row(s)");
  REQUIRE(short_rows.deleted == 1);
  // Decode errors of a managed tensor name it as managed_tensors[i].
  int64_t neg[1] = {-1};
  Managed negative(r.f12.data(), f32(3), 1, neg);
  DLManagedTensorVersioned* list3[1] = {&negative.m};
  wm.managed_tensors = list3;
  r.rejects(r.fresh, wm, KSTAGE_INVALID_ARGUMENT, "managed_tensors[0]: shape[0] is negative (-1)");
  REQUIRE(negative.deleted == 1);
  // A NULL entry.
  DLManagedTensorVersioned* null_list[1] = {nullptr};
  wm.managed_tensors = null_list;
  r.rejects(r.points, wm, KSTAGE_INVALID_ARGUMENT, "managed_tensors[0] is NULL");
  // Another DLPack major version: refused, and still deleted.
  Managed old_version(r.f12.data(), f32(3), 1, shape);
  old_version.m.version.major = DLPACK_MAJOR_VERSION + 1;
  DLManagedTensorVersioned* list4[1] = {&old_version.m};
  wm.managed_tensors = list4;
  r.rejects(r.points, wm, KSTAGE_INVALID_ARGUMENT, "DLPack version");
  REQUIRE(old_version.deleted == 1);
  // The same managed tensor listed twice (as rows of an array write): refused,
  // deleted once.
  Managed twice(r.f12.data(), f32(3), 1, shape);
  DLManagedTensorVersioned* list5[2] = {&twice.m, &twice.m};
  wm.managed_tensors = list5;
  wm.tensor_count = 2;
  wm.is_array = true;
  r.rejects(r.points, wm, KSTAGE_INVALID_ARGUMENT, "listed more than once");
  REQUIRE(twice.deleted == 1);
  // A fixed-size write reads entry 0 only: listing it twice is a tensor_count
  // of 2, rejected without reading entry 1, and entry 0 is deleted once.
  Managed twice_fixed(r.f12.data(), f32(3), 1, shape);
  DLManagedTensorVersioned* list6[2] = {&twice_fixed.m, &twice_fixed.m};
  wm.managed_tensors = list6;
  wm.is_array = false;
  r.rejects(r.points, wm, KSTAGE_INVALID_ARGUMENT, "takes exactly 1 tensor, got tensor_count 2");
  REQUIRE(twice_fixed.deleted == 1);
  r.fresh_has_no_column();
}

TEST_CASE("malformed tensors are rejected with the bad field named", "[transport][errors]") {
  Rig r(host_execution());
  const bool existing = GENERATE(true, false);
  const kstage_token_t attr = existing ? r.points : r.fresh;
  CAPTURE(existing);

  int64_t shape[2] = {4, 3};
  // NULL data with a non-zero size.
  DLTensor null_data = tensor(nullptr, f32(), 2, shape);
  std::string msg =
      r.rejects(attr, write_data(&null_data), KSTAGE_INVALID_ARGUMENT, "data is NULL");
  REQUIRE(contains(msg, "12 elements"));
  REQUIRE(contains(msg, "tensors[0]"));

  // ndim 0.
  DLTensor scalar = tensor(r.f12.data(), f32(3), 0, shape);
  r.rejects(attr, write_data(&scalar), KSTAGE_INVALID_ARGUMENT, "ndim 0");

  // Negative extents.
  int64_t neg_inner[2] = {4, -3};
  DLTensor n1 = tensor(r.f12.data(), f32(), 2, neg_inner);
  r.rejects(attr, write_data(&n1), KSTAGE_INVALID_ARGUMENT, "shape[1] is negative (-3)");
  int64_t neg_rows[1] = {-4};
  DLTensor n0 = tensor(r.f12.data(), f32(3), 1, neg_rows);
  r.rejects(attr, write_data(&n0), KSTAGE_INVALID_ARGUMENT, "shape[0] is negative (-4)");

  // Too many dimensions, an overflowing size, a zero-extent trailing axis.
  int64_t nine[9] = {4, 3, 1, 1, 1, 1, 1, 1, 1};
  DLTensor deep = tensor(r.f12.data(), f32(), 9, nine);
  r.rejects(attr, write_data(&deep), KSTAGE_INVALID_ARGUMENT, "ndim 9 exceeds the supported 8");
  int64_t huge[2] = {INT64_MAX, 4};
  DLTensor overflow = tensor(r.f12.data(), f32(), 2, huge);
  r.rejects(attr, write_data(&overflow), KSTAGE_INVALID_ARGUMENT, "size overflows");
  int64_t empty_lanes[2] = {4, 0};
  DLTensor no_lanes = tensor(r.f12.data(), f32(), 2, empty_lanes);
  r.rejects(attr, write_data(&no_lanes), KSTAGE_INVALID_ARGUMENT, "trailing axis has extent 0");

  // shape NULL.
  DLTensor no_shape = tensor(r.f12.data(), f32(3), 1, nullptr);
  r.rejects(attr, write_data(&no_shape), KSTAGE_INVALID_ARGUMENT, "shape is NULL");

  // Unsupported dtype codes.
  int64_t rows[1] = {4};
  DLTensor opaque = tensor(r.f12.data(), DLDataType{kDLOpaqueHandle, 64, 1}, 1, rows);
  r.rejects(attr, write_data(&opaque), KSTAGE_INVALID_ARGUMENT, "unsupported dtype code 3");
  DLTensor code99 = tensor(r.f12.data(), DLDataType{99, 32, 1}, 1, rows);
  r.rejects(attr, write_data(&code99), KSTAGE_INVALID_ARGUMENT, "unsupported dtype code 99");

  // Unsupported bit widths.
  DLTensor float8 = tensor(r.f12.data(), DLDataType{kDLFloat, 8, 1}, 1, rows);
  r.rejects(attr, write_data(&float8), KSTAGE_INVALID_ARGUMENT,
            "unsupported bit width 8 for float");
  DLTensor int12 = tensor(r.f12.data(), DLDataType{kDLInt, 12, 1}, 1, rows);
  r.rejects(attr, write_data(&int12), KSTAGE_INVALID_ARGUMENT, "unsupported bit width 12 for int");
  DLTensor bool1 = tensor(r.f12.data(), DLDataType{kDLBool, 1, 1}, 1, rows);
  r.rejects(attr, write_data(&bool1), KSTAGE_INVALID_ARGUMENT, "unsupported bit width 1 for bool");
  DLTensor bf32 = tensor(r.f12.data(), DLDataType{kDLBfloat, 32, 1}, 1, rows);
  r.rejects(attr, write_data(&bf32), KSTAGE_INVALID_ARGUMENT,
            "unsupported bit width 32 for bfloat");

  // Lanes 0, lanes 256, and folding past 255 lanes.
  DLTensor lanes0 = tensor(r.f12.data(), f32(0), 1, rows);
  r.rejects(attr, write_data(&lanes0), KSTAGE_INVALID_ARGUMENT, "lanes 0 outside 1..255");
  std::vector<unsigned char> bytes(4 * 256);
  DLTensor lanes256 = tensor(bytes.data(), u8(256), 1, rows);
  r.rejects(attr, write_data(&lanes256), KSTAGE_INVALID_ARGUMENT, "lanes 256 outside 1..255");
  int64_t square[3] = {4, 16, 16};
  DLTensor folded = tensor(bytes.data(), u8(), 3, square);
  msg = r.rejects(attr, write_data(&folded), KSTAGE_INVALID_ARGUMENT, "256 lanes");
  REQUIRE(contains(msg, "at most 255"));
  if (attr == r.fresh) r.fresh_has_no_column();
}

TEST_CASE("row counts must match the addressed prims", "[transport][errors]") {
  Rig r(host_execution());
  const bool existing = GENERATE(true, false);
  const kstage_token_t attr = existing ? r.points : r.fresh;
  CAPTURE(existing);

  // 3 rows for 4 prims.
  int64_t three[1] = {3};
  DLTensor t3 = tensor(r.f12.data(), f32(3), 1, three);
  std::string msg = r.rejects(attr, write_data(&t3), KSTAGE_INVALID_ARGUMENT, "3 source row(s)");
  REQUIRE(contains(msg, "4 prim(s)"));
  REQUIRE(contains(msg, "shape[0]"));

  // 3 rows with count 2.
  kstage_write_data_t c2 = write_data(&t3);
  c2.count = 2;
  msg = r.rejects(attr, c2, KSTAGE_INVALID_ARGUMENT, "3 source row(s)");
  REQUIRE(contains(msg, "2 prim(s)"));

  // Convenience (N,3) with too few rows.
  int64_t n3[2] = {3, 3};
  DLTensor conv = tensor(r.f12.data(), f32(), 2, n3);
  r.rejects(attr, write_data(&conv), KSTAGE_INVALID_ARGUMENT, "3 source row(s)");

  // count beyond the query.
  int64_t five[1] = {5};
  std::vector<float> f15(15, 1.f);
  DLTensor t5 = tensor(f15.data(), f32(3), 1, five);
  kstage_write_data_t c5 = write_data(&t5);
  c5.count = 5;
  r.rejects(attr, c5, KSTAGE_INVALID_ARGUMENT, "count 5 exceeds the query's 4 prims");

  // A mask needs one source row per addressed element (count), not per selected one.
  const uint64_t mask[1] = {0b0101};
  int64_t two[1] = {2};
  DLTensor t2 = tensor(r.f12.data(), f32(3), 1, two);
  kstage_write_data_t m = write_data(&t2);
  m.count = 4;
  m.mask = mask;
  msg = r.rejects(attr, m, KSTAGE_INVALID_ARGUMENT, "source row i belongs to element i");
  REQUIRE(contains(msg, "2 source row(s)"));
  REQUIRE(contains(msg, "4 prim(s)"));
  if (attr == r.fresh) r.fresh_has_no_column();
}

TEST_CASE("index_map and mask are validated", "[transport][errors]") {
  Rig r(host_execution());
  const bool existing = GENERATE(true, false);
  const kstage_token_t attr = existing ? r.points : r.fresh;
  CAPTURE(existing);
  int64_t rows[1] = {4};
  DLTensor t = tensor(r.f12.data(), f32(3), 1, rows);

  // An entry past the transported rows: index, value and row count named.
  const uint32_t out_of_range[4] = {0, 1, 9, 2};
  kstage_write_data_t w = write_data(&t);
  w.count = 4;
  w.index_map = out_of_range;
  std::string msg = r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "index_map[2] = 9");
  REQUIRE(contains(msg, "row count 4"));
  // The boundary: an entry equal to the row count.
  const uint32_t at_end[2] = {1, 4};
  w.count = 2;
  w.index_map = at_end;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "index_map[1] = 4");

  // index_map and mask together.
  const uint32_t identity[4] = {0, 1, 2, 3};
  const uint64_t mask[1] = {0xF};
  w.count = 4;
  w.index_map = identity;
  w.mask = mask;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "mutually exclusive");

  // Either requires count > 0.
  kstage_write_data_t im = write_data(&t);
  im.index_map = identity;
  r.rejects(attr, im, KSTAGE_INVALID_ARGUMENT, "count must be non-zero");
  kstage_write_data_t mk = write_data(&t);
  mk.mask = mask;
  r.rejects(attr, mk, KSTAGE_INVALID_ARGUMENT, "count must be non-zero");
  if (attr == r.fresh) r.fresh_has_no_column();
}

TEST_CASE("index_map64 is validated: negative and wide entries named with their value",
          "[transport][errors]") {
  Rig r(host_execution());
  const bool existing = GENERATE(true, false);
  const kstage_token_t attr = existing ? r.points : r.fresh;
  CAPTURE(existing);
  int64_t rows[1] = {4};
  DLTensor t = tensor(r.f12.data(), f32(3), 1, rows);
  kstage_write_data_t w = write_data(&t);
  w.count = 4;
  // A negative entry is out of range of every row count, named with its value.
  const int64_t negative[4] = {0, 1, -3, 2};
  w.index_map64 = negative;
  std::string msg = r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT,
                              "index_map64[2] = -3 references a source row outside the "
                              "transported row count 4 (shape[0] of the tensor)");
  // The first bad entry is named, whether or not a later one is wider than 32 bits.
  const int64_t first_wins[4] = {0, 4, -1, int64_t(1) << 40};
  w.index_map64 = first_wins;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "index_map64[1] = 4 references");
  const int64_t wide[4] = {0, int64_t(1) << 40, 1, 2};
  w.index_map64 = wide;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "index_map64[1] = 1099511627776 references");
  // 2^32 - 1 as int64 and as the uint32 it fits in: both out of range of 4 rows.
  const int64_t top[4] = {0, int64_t(UINT32_MAX), 1, 2};
  w.index_map64 = top;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "index_map64[1] = 4294967295 references");

  // Exclusive with index_map and mask, and requires count > 0.
  const int64_t identity64[4] = {0, 1, 2, 3};
  const uint32_t identity[4] = {0, 1, 2, 3};
  const uint64_t mask[1] = {0xF};
  w.index_map64 = identity64;
  w.index_map = identity;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "index_map and index_map64 are mutually exclusive");
  w.index_map = nullptr;
  w.mask = mask;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT, "index_map64 and mask are mutually exclusive");
  w.index_map = identity;
  r.rejects(attr, w, KSTAGE_INVALID_ARGUMENT,
            "index_map and index_map64 and mask are mutually exclusive");
  kstage_write_data_t im = write_data(&t);
  im.index_map64 = identity64;
  r.rejects(attr, im, KSTAGE_INVALID_ARGUMENT, "count must be non-zero when index_map64");

  // More than 2^32 source rows (a tensor never read: the entry is refused first): an entry of
  // 2^32 is a row such a tensor has, but not one kstage addresses.
  if (!existing) {
    uint8_t byte = 0;
    int64_t many[1] = {int64_t(1) << 33};
    DLTensor huge = tensor(&byte, DLDataType{kDLUInt, 8, 1}, 1, many);
    kstage_write_data_t h = write_data(&huge);
    h.count = 1;
    const int64_t past[1] = {int64_t(1) << 32};
    h.index_map64 = past;
    r.rejects(attr, h, KSTAGE_INVALID_ARGUMENT,
              "index_map64[0] = 4294967296 is not a source row kstage can address");
  }

  // An array write counts its packed rows from the entries: a wide entry is named first (before
  // the prims' own fixed-size values are found in the way).
  kstage_write_data_t a = write_data(&t);
  a.is_array = true;
  a.count = 2;
  const int64_t wide_rows[2] = {0, -1};
  a.index_map64 = wide_rows;
  r.rejects(attr, a, KSTAGE_INVALID_ARGUMENT,
            "index_map64[1] = -1 is not a source row kstage can address");
  if (attr == r.fresh) r.fresh_has_no_column();
}

// The prims of the column hold it: another schema for them is refused (one value per prim and
// name), naming what differs. (New prims may take another schema: test_schemas.cpp.)
TEST_CASE("a write must match the existing column's kind, dtype and semantic",
          "[transport][errors][schema]") {
  Rig r(host_execution());
  int64_t rows[1] = {4};

  // float32 lanes 1 to a float32x3 column: both dtypes named.
  std::vector<float> f4 = {1, 2, 3, 4};
  DLTensor lanes1 = tensor(f4.data(), f32(), 1, rows);
  std::string msg = r.rejects(r.points, write_data(&lanes1), KSTAGE_INVALID_ARGUMENT,
                              "the write's dtype float32 does not match its dtype float32x3");
  REQUIRE(contains(msg, "holds 'points' as float32x3 NONE"));

  // A flat (N*3,) lanes-1 tensor is not N rows of width 3 (nor 12 prims' float32).
  int64_t flat[1] = {12};
  DLTensor flat_t = tensor(r.f12.data(), f32(), 1, flat);
  msg = r.rejects(r.points, write_data(&flat_t), KSTAGE_INVALID_ARGUMENT, "12 source row(s)");
  REQUIRE(contains(msg, "4 prim(s)"));
  // ... nor to a new column of 4 prims: 12 rows.
  msg = r.rejects(r.fresh, write_data(&flat_t), KSTAGE_INVALID_ARGUMENT, "12 source row(s)");
  REQUIRE(contains(msg, "4 prim(s)"));

  // Same lanes, other type: float64x3 and int32x3.
  std::vector<double> d12(12, 1.0);
  DLTensor f64x3 = tensor(d12.data(), f64(3), 1, rows);
  r.rejects(r.points, write_data(&f64x3), KSTAGE_INVALID_ARGUMENT, "dtype float64x3");
  DLTensor i32x3 = tensor(r.f12.data(), i32(3), 1, rows);
  r.rejects(r.points, write_data(&i32x3), KSTAGE_INVALID_ARGUMENT, "dtype int32x3");

  // Kind: is_array true to a fixed-size column.
  DLTensor good = tensor(r.f12.data(), f32(3), 1, rows);
  kstage_write_data_t arr = write_data(&good);
  arr.is_array = true;
  msg = r.rejects(r.points, arr, KSTAGE_INVALID_ARGUMENT, "a fixed-size attribute");
  REQUIRE(contains(msg, "is_array = true"));

  // Semantic: POINT to a NONE column.
  kstage_write_data_t sem = write_data(&good);
  sem.semantic = KSTAGE_SEMANTIC_POINT;
  msg = r.rejects(r.points, sem, KSTAGE_INVALID_ARGUMENT, "the write's semantic POINT");
  REQUIRE(contains(msg, "its semantic NONE"));

  // The same write with the column's own schema is accepted.
  KS_OK(r.s.write(r.q, r.points, r.next++, write_data(&good)));
}

TEST_CASE("semantics are checked against the dtype and kind", "[transport][errors][schema]") {
  Rig r(host_execution());
  int64_t rows[1] = {4};
  std::vector<float> f4 = {1, 2, 3, 4};
  DLTensor t = tensor(f4.data(), f32(), 1, rows);

  kstage_write_data_t tok = write_data(&t);
  tok.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  std::string msg =
      r.rejects(r.fresh, tok, KSTAGE_INVALID_ARGUMENT, "semantic TOKEN_ID needs dtype uint64");
  REQUIRE(contains(msg, "float32"));

  std::vector<uint64_t> ids(8, 1);
  DLTensor u64x2 = tensor(ids.data(), u64(2), 1, rows);
  kstage_write_data_t path = write_data(&u64x2);
  path.semantic = KSTAGE_SEMANTIC_PATH_ID;
  r.rejects(r.fresh, path, KSTAGE_INVALID_ARGUMENT,
            "semantic PATH_ID needs dtype uint64 (lanes 1)");
  DLTensor u32 = tensor(ids.data(), DLDataType{kDLUInt, 32, 1}, 1, rows);
  kstage_write_data_t tok32 = write_data(&u32);
  tok32.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  r.rejects(r.fresh, tok32, KSTAGE_INVALID_ARGUMENT, "uint32");

  std::vector<unsigned char> bytes = {'a', 'b', 'c', 'd'};
  DLTensor u8t = tensor(bytes.data(), u8(), 1, rows);
  kstage_write_data_t str = write_data(&u8t);
  str.semantic = KSTAGE_SEMANTIC_STRING;
  r.rejects(r.fresh, str, KSTAGE_INVALID_ARGUMENT, "semantic STRING needs an array column");

  kstage_write_data_t bad = write_data(&t);
  bad.semantic = 42;
  r.rejects(r.fresh, bad, KSTAGE_INVALID_ARGUMENT, "semantic 42");
  bad.semantic = -1;
  r.rejects(r.fresh, bad, KSTAGE_INVALID_ARGUMENT, "semantic -1");
  r.fresh_has_no_column();
}

TEST_CASE("tensors on devices this build cannot read are refused, naming the type",
          "[transport][errors][device]") {
  Rig r(host_execution());
  int64_t rows[1] = {4};
  // The data pointer is host memory; the stage must refuse by device type
  // alone and never touch it.
  // (kDLCUDA only where the build has no CUDA backend: there a host pointer labelled kDLCUDA
  // is the runtime's INVALID_ARGUMENT, tests/cuda.)
  const std::vector<std::pair<DLDeviceType, const char*>> devices = {
#if !defined(KSTAGE_TEST_ON_CUDA_DEVICE)
    {kDLCUDA, "kDLCUDA"},
#endif
    {kDLOpenCL, "kDLOpenCL"},
    {kDLVulkan, "kDLVulkan"},
    {kDLMetal, "kDLMetal"},
    {kDLOneAPI, "kDLOneAPI"},
    {kDLVPI, "kDLVPI"},
    {kDLWebGPU, "kDLWebGPU"},
  };
  for (const auto& [type, name] : devices) {
    INFO(name);
    DLTensor t = tensor(r.f12.data(), f32(3), 1, rows, nullptr, DLDevice{type, 0});
    r.rejects(r.points, write_data(&t), KSTAGE_NOT_SUPPORTED, name);
    r.rejects(r.fresh, write_data(&t), KSTAGE_NOT_SUPPORTED, name);
  }
  r.fresh_has_no_column();
}

TEST_CASE("prim_mode, attribute, query, data and op arguments are checked", "[transport][errors]") {
  Rig r(host_execution());
  int64_t rows[1] = {4};
  DLTensor t = tensor(r.f12.data(), f32(3), 1, rows);
  const kstage_write_data_t w = write_data(&t);

  r.rejects(r.points, w, KSTAGE_INVALID_ARGUMENT, "prim_mode 7", kstage_prim_mode_t(7));
  r.rejects(r.fresh, w, KSTAGE_INVALID_ARGUMENT, "prim_mode -1", kstage_prim_mode_t(-1));

  // Attribute ids that are not tokens: 0, 9999, and a path id no token has.
  r.rejects(0, w, KSTAGE_INVALID_ARGUMENT, "= 0 is not a token");
  r.rejects(9999, w, KSTAGE_INVALID_ARGUMENT, "9999 is not a token");
  for (int i = 0; i < 8; ++i) r.s.path("/filler_" + std::to_string(i));
  const kstage_path_t high = r.s.path("/high_id_path");
  const char* str = nullptr;
  REQUIRE(kstage_token_string(r.s.stage, high, &str, nullptr) != KSTAGE_OK);  // not a token id
  r.rejects(high, w, KSTAGE_INVALID_ARGUMENT, "is not a token");

  // Unknown and released query handles.
  r.rejects(
      [&](uint64_t ordinal, kstage_op_t* op) {
        return kstage_write_attribute(r.s.stage, 987654, r.points, ordinal, &w,
                                      KSTAGE_PRIM_MODE_UPSERT, op);
      },
      KSTAGE_INVALID_HANDLE, "query handle 987654");
  kstage_query_t gone = r.s.query({r.prims[0]});
  KS_OK(kstage_query_release(r.s.stage, gone));
  r.rejects(
      [&](uint64_t ordinal, kstage_op_t* op) {
        return kstage_write_attribute(r.s.stage, gone, r.points, ordinal, &w,
                                      KSTAGE_PRIM_MODE_UPSERT, op);
      },
      KSTAGE_INVALID_HANDLE, "query handle");
  r.rejects(
      [&](uint64_t ordinal, kstage_op_t* op) {
        return kstage_write_attribute(r.s.stage, 0, r.points, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT,
                                      op);
      },
      KSTAGE_INVALID_HANDLE, "query handle 0");

  // Unknown stage.
  r.rejects(
      [&](uint64_t ordinal, kstage_op_t* op) {
        return kstage_write_attribute(r.s.stage + 1000, r.q, r.points, ordinal, &w,
                                      KSTAGE_PRIM_MODE_UPSERT, op);
      },
      KSTAGE_INVALID_HANDLE, "stage handle");

  // write_data NULL.
  r.rejects(
      [&](uint64_t ordinal, kstage_op_t* op) {
        return kstage_write_attribute(r.s.stage, r.q, r.points, ordinal, nullptr,
                                      KSTAGE_PRIM_MODE_UPSERT, op);
      },
      KSTAGE_INVALID_ARGUMENT, "data is NULL");
  r.rejects(
      [&](uint64_t ordinal, kstage_op_t* op) {
        return kstage_write_attributes(r.s.stage, r.q, &r.points, nullptr, 1, ordinal,
                                       KSTAGE_PRIM_MODE_UPSERT, op);
      },
      KSTAGE_INVALID_ARGUMENT, "data is NULL");
  r.rejects(
      [&](uint64_t ordinal, kstage_op_t* op) {
        return kstage_write_attributes(r.s.stage, r.q, nullptr, &w, 1, ordinal,
                                       KSTAGE_PRIM_MODE_UPSERT, op);
      },
      KSTAGE_INVALID_ARGUMENT, "attributes is NULL");

  // op NULL: nothing to leave untouched, but the stage must be unchanged.
  const uint64_t ordinal = r.next++;
  const std::string before = r.fingerprint();
  KS_FAILS(kstage_write_attribute(r.s.stage, r.q, r.points, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT,
                                  nullptr),
           KSTAGE_INVALID_ARGUMENT, "op is NULL");
  KS_FAILS(kstage_write_attribute(r.s.stage, r.q, r.fresh, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT,
                                  nullptr),
           KSTAGE_INVALID_ARGUMENT, "op is NULL");
  REQUIRE(r.fingerprint() == before);
  r.s.seal(ordinal);
  REQUIRE(values_only(r.fingerprint()) == values_only(before));
  r.fresh_has_no_column();
}

TEST_CASE("ordinals at or below the write floor are rejected with both numbers",
          "[transport][errors][floor]") {
  Rig r(host_execution());
  int64_t rows[1] = {4};
  DLTensor t = tensor(r.f12.data(), f32(3), 1, rows);
  const kstage_write_data_t w = write_data(&t);
  r.s.seal(5);
  r.next = 6;
  const std::string before = r.fingerprint();
  kstage_op_t op = kUntouched;
  for (uint64_t ordinal : {uint64_t(5), uint64_t(3), uint64_t(0)}) {
    INFO("ordinal " << ordinal);
    KS_FAILS(
        kstage_write_attribute(r.s.stage, r.q, r.points, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
        KSTAGE_WRITE_FLOOR_VIOLATION,
        "ordinal " + std::to_string(ordinal) + " is not above the write floor 5");
    REQUIRE(contains(kstage_last_error(), "'points'"));
    // A new attribute has the default floor, 5 as well.
    KS_FAILS(
        kstage_write_attribute(r.s.stage, r.q, r.fresh, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
        KSTAGE_WRITE_FLOOR_VIOLATION,
        "ordinal " + std::to_string(ordinal) + " is not above the write floor 5");
    // A batch: one attribute under its floor rejects all.
    const kstage_token_t attrs[2] = {r.fresh, r.points};
    const kstage_write_data_t data[2] = {w, w};
    KS_FAILS(kstage_write_attributes(r.s.stage, r.q, attrs, data, 2, ordinal,
                                     KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_WRITE_FLOOR_VIOLATION, "write floor 5");
  }
  REQUIRE(op == kUntouched);
  REQUIRE(r.fingerprint() == before);

  // Per-attribute floors: points sealed to 8, fresh stays at 5.
  r.s.seal(8, {r.points});
  KS_FAILS(kstage_write_attribute(r.s.stage, r.q, r.points, 7, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_WRITE_FLOOR_VIOLATION, "ordinal 7 is not above the write floor 8");
  REQUIRE(op == kUntouched);
  const kstage_token_t attrs[2] = {r.fresh, r.points};
  const kstage_write_data_t data[2] = {w, w};
  KS_FAILS(kstage_write_attributes(r.s.stage, r.q, attrs, data, 2, 7, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_WRITE_FLOOR_VIOLATION, "write floor 8 of attribute 'points'");
  REQUIRE(op == kUntouched);
  REQUIRE(values_only(r.fingerprint()) == values_only(before));
  KS_OK(r.s.write(r.q, r.fresh, 7, w));  // fresh's floor is still 5
  r.s.seal(9);
  REQUIRE(r.s.read(r.q, {r.fresh}).size() == 1);
  REQUIRE(r.s.floats(r.q, r.points)[r.prims[0]] == std::vector<float>{0, 1, 2});
}

TEST_CASE("kstage_last_error is per thread", "[transport][errors][threads]") {
  Rig r(host_execution());
  int64_t rows[1] = {4};
  DLTensor t = tensor(r.f12.data(), f32(3), 1, rows);
  const kstage_write_data_t w = write_data(&t);
  kstage_op_t op = kUntouched;
  KS_FAILS(kstage_write_attribute(r.s.stage, r.q, r.points, 0, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_WRITE_FLOOR_VIOLATION, "ordinal 0 is not above the write floor 1");
  const std::string mine = kstage_last_error();

  std::string theirs_before, theirs_after;
  kstage_status_t theirs_status = KSTAGE_OK;
  std::thread other([&] {
    theirs_before = kstage_last_error();  // a fresh thread has no message
    kstage_op_t o = 0;
    theirs_status =
        kstage_write_attribute(r.s.stage, r.q, r.points, 50, &w, kstage_prim_mode_t(7), &o);
    theirs_after = kstage_last_error();
  });
  other.join();
  REQUIRE(theirs_before.empty());
  REQUIRE(theirs_status == KSTAGE_INVALID_ARGUMENT);
  REQUIRE(contains(theirs_after, "prim_mode 7"));
  REQUIRE(std::string(kstage_last_error()) == mine);
  REQUIRE(op == kUntouched);

  // Several threads failing at once each keep their own message.
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) {
        kstage_op_t o = 0;
        kstage_write_attribute(r.s.stage, r.q, r.points, 0, &w, kstage_prim_mode_t(10 + i), &o);
        got[size_t(i)] = kstage_last_error();
        if (got[size_t(i)].find("prim_mode " + std::to_string(10 + i)) == std::string::npos) return;
      }
    });
  for (std::thread& th : threads) th.join();
  for (int i = 0; i < 4; ++i)
    REQUIRE(contains(got[size_t(i)], "prim_mode " + std::to_string(10 + i)));
  REQUIRE(std::string(kstage_last_error()) == mine);
}
