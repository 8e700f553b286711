// SPDX-License-Identifier: Apache-2.0
// The compatibility rules of kstage.h ("Versioning and compatibility"): the
// frozen layout of the extensible descriptors, and how the library reads a
// descriptor by its struct_size -- zero, too small, larger from a newer
// caller (accepted when the bytes it does not know are zero), reserved bytes,
// and arrays of descriptors laid out with the caller's size.
#include "support.hpp"

#include <cstddef>

using namespace kstage_test;

// The first released layout. Fields may only be appended after these sizes.
static_assert(offsetof(kstage_config_t, struct_size) == 0);
static_assert(offsetof(kstage_config_t, host_execution) == 4);
static_assert(offsetof(kstage_config_t, residency) == 8);
static_assert(sizeof(kstage_config_t) == 16);

static_assert(offsetof(kstage_write_data_t, struct_size) == 0);
static_assert(offsetof(kstage_write_data_t, semantic) == 4);
static_assert(offsetof(kstage_write_data_t, tensors) == 8);
static_assert(offsetof(kstage_write_data_t, managed_tensors) == 16);
static_assert(offsetof(kstage_write_data_t, tensor_count) == 24);
static_assert(offsetof(kstage_write_data_t, count) == 32);
static_assert(offsetof(kstage_write_data_t, index_map) == 40);
static_assert(offsetof(kstage_write_data_t, mask) == 48);
static_assert(offsetof(kstage_write_data_t, device_sync) == 56);
static_assert(offsetof(kstage_write_data_t, is_array) == 72);
// 0.4 took attribute_mode from the reserved bytes (zero: REJECT, what every earlier caller meant).
static_assert(offsetof(kstage_write_data_t, attribute_mode) == 73);
static_assert(offsetof(kstage_write_data_t, reserved) == 74);
// 0.2 appended legacy_managed_tensors after the first layout's 80 bytes.
static_assert(offsetof(kstage_write_data_t, legacy_managed_tensors) == 80);
static_assert(offsetof(kstage_write_data_t, residency) == 88);
// 0.4 appended selection_device and index_map64.
static_assert(offsetof(kstage_write_data_t, selection_device) == 96);
static_assert(offsetof(kstage_write_data_t, index_map64) == 104);
static_assert(sizeof(kstage_write_data_t) == 112);

// 0.4, the scene: fixed for the major version (kstage_filter_ex_t extensible, first layout 24).
static_assert(offsetof(kstage_path_span_t, first) == 0);
static_assert(offsetof(kstage_path_span_t, count) == 8);
static_assert(sizeof(kstage_path_span_t) == 16);
static_assert(offsetof(kstage_hierarchy_item_t, status) == 0);
static_assert(offsetof(kstage_hierarchy_item_t, reserved) == 4);
static_assert(offsetof(kstage_hierarchy_item_t, span_offset) == 8);
static_assert(offsetof(kstage_hierarchy_item_t, span_count) == 16);
static_assert(offsetof(kstage_hierarchy_item_t, path_count) == 24);
static_assert(sizeof(kstage_hierarchy_item_t) == 32);
static_assert(offsetof(kstage_predicate_t, op) == 0);
static_assert(offsetof(kstage_predicate_t, reserved) == 4);
static_assert(offsetof(kstage_predicate_t, attribute) == 8);
static_assert(offsetof(kstage_predicate_t, values) == 16);
static_assert(offsetof(kstage_predicate_t, value_count) == 24);
static_assert(sizeof(kstage_predicate_t) == 32);
static_assert(offsetof(kstage_filter_ex_t, struct_size) == 0);
static_assert(offsetof(kstage_filter_ex_t, reserved) == 4);
static_assert(offsetof(kstage_filter_ex_t, predicates) == 8);
static_assert(offsetof(kstage_filter_ex_t, predicate_count) == 16);
static_assert(sizeof(kstage_filter_ex_t) == 24);

static_assert(offsetof(kstage_read_desc_t, struct_size) == 0);
static_assert(offsetof(kstage_read_desc_t, change_range) == 4);
static_assert(offsetof(kstage_read_desc_t, compact) == 5);
static_assert(offsetof(kstage_read_desc_t, device_index_map) == 6);      // 0.4: was reserved[0]
static_assert(offsetof(kstage_read_desc_t, prims_as_progression) == 7);  // 0.4: was reserved[0]
static_assert(offsetof(kstage_read_desc_t, range_begin) == 8);
static_assert(offsetof(kstage_read_desc_t, range_end) == 16);
static_assert(offsetof(kstage_read_desc_t, target_device) == 24);
static_assert(offsetof(kstage_read_desc_t, device_sync) == 32);
static_assert(offsetof(kstage_read_desc_t, max_group_prims) == 48);
static_assert(sizeof(kstage_read_desc_t) == 56);

static_assert(offsetof(kstage_map_desc_t, struct_size) == 0);
static_assert(offsetof(kstage_map_desc_t, semantic) == 4);
static_assert(offsetof(kstage_map_desc_t, attribute) == 8);
static_assert(offsetof(kstage_map_desc_t, dtype) == 16);
static_assert(offsetof(kstage_map_desc_t, prim_mode) == 20);
static_assert(offsetof(kstage_map_desc_t, residency) == 24);
static_assert(offsetof(kstage_map_desc_t, max_group_prims) == 32);
static_assert(offsetof(kstage_map_desc_t, is_array) == 40);
static_assert(offsetof(kstage_map_desc_t, attribute_mode) == 41);
static_assert(offsetof(kstage_map_desc_t, reserved) == 42);
static_assert(sizeof(kstage_map_desc_t) == 48);

namespace {

// A descriptor as a caller built against a newer kstage.h passes it: the
// struct this library knows, then fields it does not.
template <class T>
struct Newer {
  T known;
  uint64_t added[2] = {0, 0};
  Newer() : known() { known.struct_size = uint32_t(sizeof(Newer)); }
};

// Stage with one float32 column "x" over 3 prims, sealed at 1.
struct Fixture : SealedColumn {
  kstage_token_t y = s.token("y");
  Fixture() : SealedColumn("/abi") {}
  std::string state() { return s.fingerprint(q, {x, y}); }
  kstage_status_t write(const kstage_write_data_t* d, uint64_t n, uint64_t ordinal) {
    const kstage_token_t attrs[2] = {x, y};
    kstage_op_t op = 0;
    kstage_status_t st =
        kstage_write_attributes(s.stage, q, attrs, d, n, ordinal, KSTAGE_PRIM_MODE_UPSERT, &op);
    if (st == KSTAGE_OK) KS_OK(kstage_release_op(s.stage, op));
    return st;
  }
  kstage_status_t read(const kstage_read_desc_t* d) {
    kstage_read_t r = 0;
    kstage_status_t st = kstage_read_attributes(s.stage, q, &x, 1, d, &r);
    if (st == KSTAGE_OK) KS_OK(kstage_release_read(s.stage, r));
    return st;
  }
  kstage_status_t map(const kstage_map_desc_t* d) {
    kstage_map_t m = 0;
    kstage_status_t st = kstage_map_attribute(s.stage, q, d, 5, nullptr, 0, &m);
    if (st == KSTAGE_OK) KS_OK(kstage_release_map(s.stage, m));
    return st;
  }
};

}  // namespace

TEST_CASE("the init functions set struct_size and zero every other field", "[abi]") {
  kstage_config_t c = kstage_config_init();
  kstage_write_data_t w = kstage_write_data_init();
  kstage_read_desc_t r = kstage_read_desc_init();
  kstage_map_desc_t m = kstage_map_desc_init();
  kstage_filter_ex_t fx = kstage_filter_ex_init();
  REQUIRE(fx.struct_size == sizeof fx);
  REQUIRE(c.struct_size == sizeof c);
  REQUIRE(w.struct_size == sizeof w);
  REQUIRE(r.struct_size == sizeof r);
  REQUIRE(m.struct_size == sizeof m);
  auto zero_after_size = [](const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = sizeof(uint32_t); i < n; ++i)
      if (b[i] != 0) return false;
    return true;
  };
  REQUIRE(zero_after_size(&c, sizeof c));
  REQUIRE(zero_after_size(&w, sizeof w));
  REQUIRE(zero_after_size(&r, sizeof r));
  REQUIRE(zero_after_size(&m, sizeof m));
  REQUIRE(zero_after_size(&fx, sizeof fx));
}

TEST_CASE(
    "a struct_size of 0, below the first layout, or past KSTAGE_MAX_STRUCT_SIZE is "
    "INVALID_ARGUMENT",
    "[abi][errors]") {
  Fixture f;
  const std::string before = f.state();
  // Sizes below every first layout (8 bytes for the config), or past the bound kstage.h states.
  for (uint32_t size : {0u, 4u, 7u, uint32_t(KSTAGE_MAX_STRUCT_SIZE) + 1, 1u << 20, UINT32_MAX}) {
    INFO("struct_size " << size);
    const std::string needle =
        size == 0 ? "struct_size is 0" : "struct_size is " + std::to_string(size);

    kstage_config_t c = kstage_config_init();
    c.struct_size = size;
    kstage_stage_t other = 0;
    KS_FAILS(kstage_create(&c, &other), KSTAGE_INVALID_ARGUMENT, "config." + needle);
    REQUIRE(other == 0);

    kstage_write_data_t w = write_data(&f.t);
    w.struct_size = size;
    KS_FAILS(f.write(&w, 1, 2), KSTAGE_INVALID_ARGUMENT, "data[0]." + needle);

    kstage_read_desc_t r = kstage_read_desc_init();
    r.struct_size = size;
    KS_FAILS(f.read(&r), KSTAGE_INVALID_ARGUMENT, "desc." + needle);

    kstage_map_desc_t m = kstage_map_desc_init();
    m.attribute = f.y;
    m.dtype = f32();
    m.struct_size = size;
    KS_FAILS(f.map(&m), KSTAGE_INVALID_ARGUMENT, "desc." + needle);
  }
  // Just below each first layout.
  {
    kstage_write_data_t w = write_data(&f.t);
    w.struct_size = 79;
    KS_FAILS(f.write(&w, 1, 2), KSTAGE_INVALID_ARGUMENT, "data[0].struct_size is 79");
    kstage_read_desc_t r = kstage_read_desc_init();
    r.struct_size = 47;
    KS_FAILS(f.read(&r), KSTAGE_INVALID_ARGUMENT,
             "accepts for kstage_read_desc_t: 48 (the first layout) to 65536");
    kstage_map_desc_t m = kstage_map_desc_init();
    m.struct_size = 40;
    KS_FAILS(f.map(&m), KSTAGE_INVALID_ARGUMENT, "desc.struct_size is 40");
  }
  // The message says how to build the descriptor.
  kstage_read_desc_t r = kstage_read_desc_init();
  r.struct_size = 0;
  KS_FAILS(f.read(&r), KSTAGE_INVALID_ARGUMENT, "kstage_read_desc_init()");
  REQUIRE(f.state() == before);
}

TEST_CASE(
    "a struct_size between two layouts is accepted: the field it cuts is absent, and "
    "must be zero where the caller's struct holds part of it",
    "[abi]") {
  Fixture f;
  SECTION("config: 10 and 12 bytes hold the 0.1 layout and part of residency") {
    for (uint32_t size : {10u, 12u, 15u}) {
      INFO("struct_size " << size);
      kstage_config_t c = kstage_config_init();
      c.struct_size = size;
      kstage_stage_t other = 0;
      KS_OK(kstage_create(&c, &other));
      KS_OK(kstage_destroy(other));
      c.residency.device_type = kDLCUDA;  // bytes 8..11: part of a field the size cuts
      other = 0;
      KS_FAILS(kstage_create(&c, &other), KSTAGE_INVALID_ARGUMENT,
               "config sets byte 8 of its " + std::to_string(size) + "-byte kstage_config_t");
      REQUIRE(other == 0);
    }
  }
  SECTION("read descriptor: 50 bytes, max_group_prims cut") {
    kstage_read_desc_t r = kstage_read_desc_init();
    r.struct_size = 50;
    auto groups = f.s.read(f.q, {f.x}, &r);
    REQUIRE(groups.size() == 1);
    r.max_group_prims = 1;  // byte 48 is inside the caller's 50
    KS_FAILS(f.read(&r), KSTAGE_INVALID_ARGUMENT, "desc sets byte 48 of its 50-byte");
  }
  SECTION("write descriptor: 81 bytes, legacy_managed_tensors cut") {
    kstage_write_data_t w = write_data(&f.t);
    w.struct_size = 81;
    REQUIRE(f.write(&w, 1, 2) == KSTAGE_OK);
    w.residency = DLDevice{kDLCPU, 0};  // past the caller's 81 bytes: never read
    w.struct_size = 85;
    REQUIRE(f.write(&w, 1, 3) == KSTAGE_OK);
    DLManagedTensor* fake[1] = {nullptr};
    w.legacy_managed_tensors = fake;  // bytes 80..87, five of them inside 85
    KS_FAILS(f.write(&w, 1, 4), KSTAGE_INVALID_ARGUMENT, "data[0] sets byte 8");
  }
}

TEST_CASE("a newer caller's larger descriptor is read when the fields it adds are zero", "[abi]") {
  Fixture f;
  SECTION("config") {
    Newer<kstage_config_t> c;
    c.known.host_execution = KSTAGE_HOST_EXECUTION_SERIAL;
    kstage_stage_t other = 0;
    KS_OK(kstage_create(&c.known, &other));
    KS_OK(kstage_destroy(other));
    c.added[1] = 7;
    KS_FAILS(kstage_create(&c.known, &other), KSTAGE_NOT_SUPPORTED,
             "config sets byte 24 of its 32-byte kstage_config_t");
  }
  SECTION("read descriptor: a change-range read") {
    Newer<kstage_read_desc_t> r;
    r.known.change_range = true;
    r.known.range_begin = 1;
    r.known.range_end = 1;
    auto groups = f.s.read(f.q, {f.x}, &r.known);
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].prims == f.prims);
    r.added[0] = uint64_t(1) << 56;  // the last byte of the first added field
    KS_FAILS(f.read(&r.known), KSTAGE_NOT_SUPPORTED, "desc sets byte 63 of its 72-byte");
  }
  SECTION("map descriptor") {
    Newer<kstage_map_desc_t> m;
    m.known.attribute = f.y;
    m.known.dtype = f32();
    KS_OK(f.map(&m.known));
    m.added[1] = 1;
    KS_FAILS(f.map(&m.known), KSTAGE_NOT_SUPPORTED, "does not know");
  }
  SECTION("an array of write descriptors is laid out with the caller's struct size") {
    std::vector<float> ys = {10, 20, 30};
    DLTensor ty = tensor(ys.data(), f32(), 1, f.shape);
    Newer<kstage_write_data_t> d[2];
    d[0].known.tensors = &f.t;
    d[0].known.tensor_count = 1;
    d[1].known.tensors = &ty;
    d[1].known.tensor_count = 1;
    REQUIRE(f.write(&d[0].known, 2, 2) == KSTAGE_OK);
    f.s.seal(2);
    REQUIRE(f.s.floats(f.q, f.y) ==
            std::map<kstage_path_t, std::vector<float>>{
                {f.prims[0], {10}}, {f.prims[1], {20}}, {f.prims[2], {30}}});
    const std::string before = f.state();
    d[1].added[0] = 1;
    KS_FAILS(f.write(&d[0].known, 2, 3), KSTAGE_NOT_SUPPORTED, "data[1] sets byte 112");
    d[1].added[0] = 0;
    d[1].known.struct_size = sizeof(kstage_write_data_t);
    KS_FAILS(f.write(&d[0].known, 2, 3), KSTAGE_INVALID_ARGUMENT,
             "data[1].struct_size is 112 but data[0].struct_size is 128");
    REQUIRE(f.state() == before);
  }
}

TEST_CASE("an older caller's smaller write descriptor: the fields it lacks are read as zero",
          "[abi]") {
  // A caller built against the first layout (80 bytes, before
  // legacy_managed_tensors): whatever lies after its struct is not read.
  Fixture f;
  std::vector<float> ys = {10, 20, 30};
  DLTensor ty = tensor(ys.data(), f32(), 1, f.shape);
  kstage_write_data_t w0 = write_data(&f.t), w1 = write_data(&ty);
  w0.struct_size = w1.struct_size = 80;
  // Two 80-byte descriptors back to back, as that caller's array is laid out
  // (strided by its 80 bytes, not this library's 88).
  alignas(8) unsigned char packed[160];
  std::memcpy(packed, &w0, 80);
  std::memcpy(packed + 80, &w1, 80);
  static DLManagedTensor* const junk[1] = {reinterpret_cast<DLManagedTensor*>(uintptr_t(0x40))};
  REQUIRE(f.write(reinterpret_cast<const kstage_write_data_t*>(packed), 2, 2) == KSTAGE_OK);
  f.s.seal(2);
  REQUIRE(f.s.floats(f.q, f.y) == std::map<kstage_path_t, std::vector<float>>{
                                      {f.prims[0], {10}}, {f.prims[1], {20}}, {f.prims[2], {30}}});
  // A single one, with the "newer" field's bytes right after it set.
  kstage_write_data_t one = write_data(&f.t);
  one.struct_size = 80;
  one.legacy_managed_tensors = junk;  // beyond its struct_size: never read
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(f.s.stage, f.q, f.x, 3, &one, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_OK(kstage_release_op(f.s.stage, op));
}

TEST_CASE("an older caller's 48-byte read descriptor reads one group per attribute", "[abi]") {
  // Before max_group_prims: whatever follows its 48 bytes is not read.
  Fixture f;
  kstage_read_desc_t r = kstage_read_desc_init();
  r.struct_size = 48;
  r.max_group_prims = 1;  // beyond its struct_size: never read
  auto groups = f.s.read(f.q, {f.x}, &r);
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].prims == f.prims);
  r.struct_size = sizeof(kstage_read_desc_t);  // the same caller with this header: 3 groups
  groups = f.s.read(f.q, {f.x}, &r);
  REQUIRE(groups.size() == 3);
}

TEST_CASE("reserved bytes must be zero", "[abi][errors]") {
  Fixture f;
  const std::string before = f.state();
  for (int i = 0; i < 6; ++i) {
    INFO("reserved[" << i << "]");
    kstage_write_data_t w = write_data(&f.t);
    w.reserved[i] = 1;
    KS_FAILS(f.write(&w, 1, 2), KSTAGE_INVALID_ARGUMENT,
             "data[0].reserved[" + std::to_string(i) + "] is 1");
    kstage_map_desc_t m = kstage_map_desc_init();
    m.attribute = f.y;
    m.dtype = f32();
    m.reserved[i] = 2;
    KS_FAILS(f.map(&m), KSTAGE_INVALID_ARGUMENT, "desc.reserved[" + std::to_string(i) + "] is 2");
  }
  // The byte 0.4 took from them: a kstage_attribute_mode_t, nothing else.
  {
    kstage_write_data_t w = write_data(&f.t);
    w.attribute_mode = 2;
    KS_FAILS(f.write(&w, 1, 2), KSTAGE_INVALID_ARGUMENT,
             "data[0].attribute_mode 2 is not a kstage_attribute_mode_t");
    kstage_map_desc_t m = kstage_map_desc_init();
    m.attribute = f.y;
    m.dtype = f32();
    m.attribute_mode = 255;
    KS_FAILS(f.map(&m), KSTAGE_INVALID_ARGUMENT,
             "desc.attribute_mode 255 is not a kstage_attribute_mode_t");
  }
  {  // The byte 0.4 took from them: a bool, 0 or 1.
    kstage_read_desc_t r = kstage_read_desc_init();
    const uint8_t three = 3;
    std::memcpy(&r.prims_as_progression, &three, 1);
    KS_FAILS(f.read(&r), KSTAGE_INVALID_ARGUMENT,
             "desc.prims_as_progression is 3; it must be 0 or 1");
  }
  REQUIRE(f.state() == before);
}

TEST_CASE("NULL read and config descriptors mean the defaults", "[abi]") {
  Fixture f;
  REQUIRE(f.read(nullptr) == KSTAGE_OK);
  kstage_stage_t other = 0;
  KS_OK(kstage_create(nullptr, &other));
  KS_OK(kstage_destroy(other));
  kstage_map_t m = 0;
  KS_FAILS(kstage_map_attribute(f.s.stage, f.q, nullptr, 5, nullptr, 0, &m),
           KSTAGE_INVALID_ARGUMENT, "desc is NULL");
}
