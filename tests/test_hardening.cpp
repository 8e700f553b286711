// SPDX-License-Identifier: Apache-2.0
// Defects found by fuzzing the C API from the outside, one test each (each
// fails, or aborts under the asan preset, without its fix): unaddressable
// strides, tensor_count used before it is validated, and the message of a
// map whose dtype does not match its column. (The compact read of all-empty
// array rows is in test_array.cpp; the pin/release hand-off in test_stress.)
#include "support.hpp"

#include <limits>

using namespace kstage_test;

namespace {

// A query of 4 prims holding a float64 column "x" = {1, 2, 3, 4} at ordinal 1.
struct Fixture {
  Stage s{host_execution()};
  std::vector<kstage_path_t> prims = s.paths("/h", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t x = s.token("x");
  Fixture() {
    std::vector<double> v = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    DLTensor t = tensor(v.data(), f64(), 1, shape);
    KS_OK(s.write(q, x, 1, write_data(&t)));
    s.seal(1);
  }
  std::string state() { return s.fingerprint(q, {x}); }
};

}  // namespace

TEST_CASE("a stride whose byte offset overflows is rejected, naming the axis and the stride",
          "[hardening][strides][errors]") {
  Fixture f;
  const std::string before = f.state();
  std::vector<double> data(8, 5.0);

  SECTION("float64, strides[0] = 2^61 + 2^37: 8 bytes times that wraps to 2^40") {
    int64_t shape[1] = {4};
    int64_t strides[1] = {(int64_t(1) << 61) + (int64_t(1) << 37)};
    DLTensor t = tensor(data.data(), f64(), 1, shape, strides);
    KS_FAILS(f.s.write(f.q, f.x, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT,
             "tensors[0]: strides[0] = 2305843146652647424 is not addressable");
  }
  SECTION("a stride that fits in bytes but not over the extent") {
    int64_t shape[1] = {4};
    int64_t strides[1] = {int64_t(1) << 60};  // 2^63 bytes, 3 steps
    DLTensor t = tensor(data.data(), f64(), 1, shape, strides);
    KS_FAILS(f.s.write(f.q, f.x, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT, "strides[0]");
  }
  SECTION("INT64_MIN and INT64_MAX") {
    for (int64_t bad : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                        -(int64_t(1) << 61)}) {
      INFO("stride " << bad);
      int64_t shape[1] = {4};
      int64_t strides[1] = {bad};
      DLTensor t = tensor(data.data(), f64(), 1, shape, strides);
      KS_FAILS(f.s.write(f.q, f.x, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT,
               "strides[0] = " + std::to_string(bad));
    }
  }
  SECTION("an interior axis: (4, 2) float32 with strides[1] = 2^62") {
    kstage_token_t y = f.s.token("y");
    std::vector<float> fl(16, 1.f);
    int64_t shape[2] = {4, 2};
    int64_t strides[2] = {2, int64_t(1) << 62};
    DLTensor t = tensor(fl.data(), f32(), 2, shape, strides);
    KS_FAILS(f.s.write(f.q, y, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT,
             "strides[1] = 4611686018427387904");
  }
  SECTION("axes that each fit but whose spans add up past 2^63") {
    kstage_token_t y = f.s.token("y");
    std::vector<float> fl(16, 1.f);
    int64_t shape[2] = {4, 2};
    int64_t strides[2] = {int64_t(1) << 58, int64_t(1) << 61};  // 3 x 2^60 + 2^63 bytes
    DLTensor t = tensor(fl.data(), f32(), 2, shape, strides);
    KS_FAILS(f.s.write(f.q, y, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT, "not addressable");
  }
  SECTION("a row tensor of an array write") {
    kstage_token_t r = f.s.token("ragged");
    int64_t s0[1] = {2}, s1[1] = {3};
    int64_t bad[1] = {int64_t(1) << 62};
    DLTensor rows[2] = {tensor(data.data(), f64(), 1, s0), tensor(data.data(), f64(), 1, s1, bad)};
    kstage_query_t two = f.s.query({f.prims[0], f.prims[1]});
    KS_FAILS(f.s.write(two, r, 2, write_data(rows, 2, true)), KSTAGE_INVALID_ARGUMENT,
             "tensors[1]: strides[0] = 4611686018427387904");
  }
  REQUIRE(f.state() == before);
}

TEST_CASE("the stride of an extent-1 axis is never used, so any value is accepted",
          "[hardening][strides]") {
  Fixture f;
  // One row: its stride is arbitrary in DLPack (numpy gives such strides).
  // Multiplying it by the element size was undefined behaviour (UBSan).
  kstage_query_t one = f.s.query({f.prims[2]});
  uint64_t ordinal = 1;
  for (int64_t stride :
       {(int64_t(1) << 61) + (int64_t(1) << 37), std::numeric_limits<int64_t>::max(),
        std::numeric_limits<int64_t>::min(), int64_t(0)}) {
    INFO("stride " << stride);
    ++ordinal;
    double value = double(ordinal) * 10;
    int64_t shape[1] = {1};
    int64_t strides[1] = {stride};
    DLTensor t = tensor(&value, f64(), 1, shape, strides);
    KS_OK(f.s.write(one, f.x, ordinal, write_data(&t)));
    f.s.seal(ordinal);
    auto v = f.s.values(one, f.x);
    double got = 0;
    std::memcpy(&got, v[f.prims[2]].data(), sizeof got);
    REQUIRE(got == value);
  }
  // An extent-1 interior axis too: (4, 1) with a wild strides[1].
  std::vector<double> col = {7, 8, 9, 10};
  int64_t shape[2] = {4, 1};
  int64_t strides[2] = {1, std::numeric_limits<int64_t>::min()};
  DLTensor t = tensor(col.data(), f64(), 2, shape, strides);
  KS_OK(f.s.write(f.q, f.x, 100, write_data(&t)));
  f.s.seal(100);
  auto v = f.s.values(f.q, f.x);
  for (size_t i = 0; i < 4; ++i) {
    double got = 0;
    std::memcpy(&got, v[f.prims[i]].data(), sizeof got);
    REQUIRE(got == col[i]);
  }
}

TEST_CASE("tensor_count is validated before anything is sized by it or read through it",
          "[hardening][tensor_count][errors]") {
  Fixture f;
  const std::string before = f.state();
  std::vector<double> v = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  DLTensor t = tensor(v.data(), f64(), 1, shape);  // the only DLTensor there is

  SECTION("fixed-size: 2^40 and UINT64_MAX give INVALID_ARGUMENT, not OOM or INTERNAL") {
    for (uint64_t n : {uint64_t(1) << 40, std::numeric_limits<uint64_t>::max(), uint64_t(2)}) {
      INFO("tensor_count " << n);
      kstage_write_data_t w = write_data(&t);
      w.tensor_count = n;
      KS_FAILS(f.s.write(f.q, f.x, 2, w), KSTAGE_INVALID_ARGUMENT,
               "takes exactly 1 tensor, got tensor_count " + std::to_string(n));
    }
  }
  SECTION("array without index_map: more tensors than prims addressed") {
    kstage_token_t r = f.s.token("ragged");
    for (uint64_t n : {uint64_t(1) << 40, std::numeric_limits<uint64_t>::max(), uint64_t(5)}) {
      INFO("tensor_count " << n);
      kstage_write_data_t w = write_data(&t, n, true);
      KS_FAILS(f.s.write(f.q, r, 2, w), KSTAGE_INVALID_ARGUMENT,
               std::to_string(n) + " source row(s) (tensor_count, one tensor per row)");
    }
  }
  SECTION("array with an index_map: beyond 2^32-1 source rows") {
    kstage_token_t r = f.s.token("ragged");
    const uint32_t index_map[4] = {0, 0, 0, 0};
    for (uint64_t n : {uint64_t(1) << 40, std::numeric_limits<uint64_t>::max()}) {
      INFO("tensor_count " << n);
      kstage_write_data_t w = write_data(&t, n, true);
      w.count = 4;
      w.index_map = index_map;
      KS_FAILS(f.s.write(f.q, r, 2, w), KSTAGE_INVALID_ARGUMENT, "exceeds 2^32-1");
    }
  }
  REQUIRE(f.state() == before);
}

TEST_CASE("a map of an existing column with another dtype names both dtypes",
          "[hardening][map][errors]") {
  Fixture f;  // "x" is float64
  const std::string before = f.state();
  kstage_map_t map = 0;
  SECTION("a zero dtype (the descriptor left unset) of an attribute with no column") {
    kstage_map_desc_t d = kstage_map_desc_init();
    d.attribute = f.s.token("never_written");
    KS_FAILS(kstage_map_attribute(f.s.stage, f.q, &d, 2, nullptr, 0, &map), KSTAGE_INVALID_ARGUMENT,
             "desc.dtype is unset, but 'never_written' has no fixed-size column to take it from");
    REQUIRE(std::string(kstage_last_error()).find("bit width") == std::string::npos);
  }
  SECTION("float32 for the prims of a float64 column") {
    kstage_map_desc_t d = kstage_map_desc_init();
    d.attribute = f.x;
    d.dtype = f32();
    KS_FAILS(kstage_map_attribute(f.s.stage, f.q, &d, 2, nullptr, 0, &map), KSTAGE_INVALID_ARGUMENT,
             "the write's dtype float32 does not match its dtype float64");
  }
  REQUIRE(map == 0);
  REQUIRE(f.state() == before);
}

TEST_CASE("addresses are formed only for elements that exist, and never wrap",
          "[hardening][byte_offset][errors]") {
  Fixture f;
  const std::string before = f.state();
  SECTION("an empty tensor with NULL data and a byte_offset is a valid empty write") {
    // Adding the offset to NULL was undefined behaviour (UBSan).
    kstage_query_t none = f.s.query({});
    int64_t shape[1] = {0};
    DLTensor t = tensor(nullptr, f64(), 1, shape);
    t.byte_offset = 1;
    KS_OK(f.s.write(none, f.x, 2, write_data(&t)));
    f.s.seal(2);
    REQUIRE(f.s.values(f.q, f.x).size() == 4);  // nothing changed
  }
  SECTION("a byte_offset past the end of the address space") {
    std::vector<double> v = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    DLTensor t = tensor(v.data(), f64(), 1, shape);
    t.byte_offset = std::numeric_limits<uint64_t>::max() - 7;
    KS_FAILS(f.s.write(f.q, f.x, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT,
             "tensors[0]: byte_offset 18446744073709551608 overflows");
  }
  SECTION("negative strides that reach below address 0") {
    int64_t shape[1] = {4};
    int64_t strides[1] = {-1000};
    // Never dereferenced: the range check rejects it first.
    DLTensor t = tensor(reinterpret_cast<void*>(uintptr_t(4096)), f64(), 1, shape, strides);
    KS_FAILS(f.s.write(f.q, f.x, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT,
             "24000 bytes before and 0 bytes after data + byte_offset, which wraps");
  }
  SECTION("a compact tensor that would end past the address space") {
    int64_t shape[1] = {4};
    DLTensor t = tensor(reinterpret_cast<void*>(UINTPTR_MAX - 15), f64(), 1, shape);
    KS_FAILS(f.s.write(f.q, f.x, 2, write_data(&t)), KSTAGE_INVALID_ARGUMENT, "wraps around");
  }
  if (f.s.floor(f.x) == 1) REQUIRE(f.state() == before);  // the empty write's seal moved it
}

TEST_CASE(
    "a packed array write picking one row of 2^32 empty source rows builds nothing per "
    "source row",
    "[hardening][array][packed]") {
  // index_map [2^32 - 1] over one packed tensor of 0 elements: 2^32 source
  // rows of 0 elements each. Building a pointer and a length per source row
  // took minutes and gigabytes; only the written rows cost anything now.
  Stage s(host_execution());
  auto prims = s.paths("/packed", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t r = s.token("ragged");
  int64_t shape[1] = {0};
  DLTensor t = tensor(nullptr, f32(), 1, shape);
  const uint32_t index_map[1] = {UINT32_MAX};
  kstage_write_data_t w = write_data(&t, 1, true);
  w.count = 1;
  w.index_map = index_map;
  KS_OK(s.write(q, r, 1, w));
  s.seal(1);
  auto v = s.values(q, r);
  REQUIRE(v.size() == 1);
  REQUIRE(v[prims[0]].empty());
}

TEST_CASE("an array write whose rows add up past 2^63 bytes is rejected before any allocation",
          "[hardening][array][errors]") {
  // Found in review: the staged buffer's size wrapped, the buffer was
  // allocated at the wrapped size, and the row copy ran past it. A packed
  // tensor claiming 2^61 float32 (never read: rejected first), cut into 2
  // rows of 2^62 bytes, and an index_map repeating them 4 times.
  Stage s(host_execution());
  auto prims = s.paths("/huge", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t r = s.token("ragged");
  float tiny[4] = {0, 0, 0, 0};
  int64_t shape[1] = {int64_t(1) << 61};
  DLTensor t = tensor(tiny, f32(), 1, shape);
  const uint32_t index_map[4] = {0, 1, 0, 1};
  kstage_write_data_t w = write_data(&t, 1, true);
  w.count = 4;
  w.index_map = index_map;
  const std::string before = s.fingerprint(q, {r});
  KS_FAILS(s.write(q, r, 1, w), KSTAGE_INVALID_ARGUMENT, "add up to more than 2^63 bytes");
  REQUIRE(s.fingerprint(q, {r}) == before);

  // One tensor per row, in order (offsets made while the rows are decoded): two rows that claim
  // 2^60 float32 each (2^62 bytes, never read) and a third make more than 2^63 bytes together;
  // the message names the row where the total passed it.
  int64_t big[1] = {int64_t(1) << 60};
  int64_t one[1] = {1};
  DLTensor rows[4] = {tensor(tiny, f32(), 1, one), tensor(tiny, f32(), 1, big),
                      tensor(tiny, f32(), 1, big), tensor(tiny, f32(), 1, one)};
  kstage_write_data_t per_row = write_data(rows, 4, true);
  KS_FAILS(
      s.write(q, r, 1, per_row), KSTAGE_INVALID_ARGUMENT,
      "add up to more than 2^63 bytes (at element 2: source row 2 of 4611686018427387904 bytes)");
  REQUIRE(s.fingerprint(q, {r}) == before);
}
