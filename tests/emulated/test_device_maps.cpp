// SPDX-License-Identifier: Apache-2.0
// Index maps in device memory (kstage_write_data_t::selection_device, kstage.h "Device index
// maps"): read in place by the gather kernel, with no upload and no copy of the map to the
// host; checked on the device, a bad entry failing the op (not the call); a failed write never
// applied, whatever is held, written after it or sealed in between; and every check the call
// can make without reading the map. On the emulated device, whose poisoning reports any host
// read of a device map (ASan) and whose launches refuse pointers outside its arena.
#include "emulated/device_support.hpp"

#include <string>

using namespace kstage_test;
using namespace kstage_device_test;

namespace {

const DLDevice kDev = kResidency;  // the emulated ordinal under test
const DLDevice kOther = {kDev.device_type, kDev.device_id == 0 ? 1 : 0};

// Device memory of `ordinal` holding `values` (an index map, mask words), freed with the object.
template <class T>
struct DeviceArray {
  DeviceArray(int32_t ordinal, const std::vector<T>& values) : n(values.size()) {
    p = static_cast<T*>(kstage_emulated_malloc(ordinal, std::max<size_t>(n, 1) * sizeof(T)));
    REQUIRE(p != nullptr);
    if (n) kstage_emulated_memcpy(p, values.data(), n * sizeof(T));
  }
  ~DeviceArray() { kstage_emulated_free(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* p = nullptr;
  size_t n;
};
using DeviceIndex = DeviceArray<uint32_t>;
using DeviceIndex64 = DeviceArray<int64_t>;
using DeviceWords = DeviceArray<uint64_t>;

// A write of `src` (one row per element) through the device mask `mask` over `count` elements.
kstage_write_data_t device_mask_write(const DLTensor& src, const DeviceWords& mask, uint64_t count,
                                      DLDevice where = kDev) {
  kstage_write_data_t w = write_data(&src);
  w.mask = mask.p;
  w.count = count;
  w.selection_device = where;
  return w;
}

// A write of `src` through the device index map `map` (count = its entries).
kstage_write_data_t device_gather(const DLTensor& src, const DeviceIndex& map,
                                  DLDevice where = kDev) {
  kstage_write_data_t w = write_data(&src);
  w.index_map = map.p;
  w.count = map.n;
  w.selection_device = where;
  return w;
}

// A write of `src` through the device index_map64 `map` (count = its entries).
kstage_write_data_t device_gather64(const DLTensor& src, const DeviceIndex64& map,
                                    DLDevice where = kDev) {
  kstage_write_data_t w = write_data(&src);
  w.index_map64 = map.p;
  w.count = map.n;
  w.selection_device = where;
  return w;
}

struct Counts {
  uint64_t h2d = 0, d2h = 0, uploads = 0, emulated_uploads = 0, emulated_h2d = 0, emulated_d2h = 0;
  static Counts now() {
    Counts c;
    KS_OK(kstage_transfer_counts(&c.h2d, &c.d2h, &c.uploads));
    c.emulated_uploads = kstage_emulated_upload_count(kDev.device_id);
    kstage_emulated_copy_counts(kDev.device_id, &c.emulated_h2d, &c.emulated_d2h);
    return c;
  }
};

// A stage with column x (f32, on the device under test) holding 1..5 at ordinal 1, sealed.
struct Sealed {
  Sealed() : s(kDev), q(s.query(5)), x(s.token("x")) {
    DeviceFloats init(kDev.device_id, {1, 2, 3, 4, 5});
    REQUIRE(s.write(q, x, 1, write_data(&init.t)) == KSTAGE_OK);
    s.seal(1);
  }
  std::vector<float> values() { return read_back(s, q, x).values; }
  DeviceStage s;
  kstage_query_t q;
  kstage_token_t x;
};

}  // namespace

TEST_CASE("a device index_map is read in place: gathered on the device, no upload, no host copy",
          "[device_maps]") {
  DeviceStage s(kDev);
  kstage_query_t q = s.query(5);
  kstage_token_t x = s.token("x");
  DeviceFloats src(kDev.device_id, {10, 20, 30, 40});
  DeviceIndex map(kDev.device_id, {3, 0, 2, 2, 1});  // reorder and broadcast
  const Counts before = Counts::now();
  kstage_op_t op = 0;
  const kstage_write_data_t w = device_gather(src.t, map);
  KS_OK(kstage_write_attribute(s.stage, q, x, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  const Counts after = Counts::now();
  KS_OK(kstage_release_op(s.stage, op));
  // Nothing went up (no map upload, no data copy: the source is device memory), and the one
  // copy down is the check's 8-byte report, read once the op is done.
  CHECK(after.uploads == before.uploads);
  CHECK(after.emulated_uploads == before.emulated_uploads);
  CHECK(after.h2d == before.h2d);
  CHECK(after.emulated_h2d == before.emulated_h2d);
  CHECK(after.d2h == before.d2h + 1);
  CHECK(after.emulated_d2h == before.emulated_d2h + 1);
  s.seal(1);
  CHECK(read_back(s, q, x).values == std::vector<float>{40, 10, 30, 30, 20});
  // kDLCPU names host memory, as {0, 0} does: the host path, which reads a host map.
  std::vector<uint32_t> host_map = {0, 1, 2, 3, 3};
  kstage_write_data_t h = write_data(&src.t);
  h.index_map = host_map.data();
  h.count = host_map.size();
  h.selection_device = kHost;
  REQUIRE(s.write(q, x, 2, h) == KSTAGE_OK);
  s.seal(2);
  CHECK(read_back(s, q, x).values == std::vector<float>{10, 20, 30, 40, 40});
}

TEST_CASE(
    "a device index_map64 (int64 entries, as torch's) is read in place and checked on the "
    "device, a bad entry named with its value",
    "[device_maps]") {
  Sealed f;
  DeviceFloats src(kDev.device_id, {10, 20, 30, 40});
  DeviceIndex64 map(kDev.device_id, {3, 0, 2, 2, 1});
  const Counts before = Counts::now();
  kstage_op_t op = 0;
  const kstage_write_data_t w = device_gather64(src.t, map);
  KS_OK(kstage_write_attribute(f.s.stage, f.q, f.x, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_OK(kstage_wait(f.s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(f.s.stage, op));
  const Counts after = Counts::now();
  // No upload and no conversion on the host: the one copy down is the check's report.
  CHECK(after.uploads == before.uploads);
  CHECK(after.emulated_uploads == before.emulated_uploads);
  CHECK(after.h2d == before.h2d);
  CHECK(after.emulated_h2d == before.emulated_h2d);
  CHECK(after.d2h == before.d2h + 1);
  f.s.seal(2);
  CHECK(f.values() == std::vector<float>{40, 10, 30, 30, 20});

  // Negative and wider-than-32-bit entries are out of range; the first bad one is named, with
  // its value, whatever comes after it.
  struct Case {
    std::vector<int64_t> entries;
    const char* message;
  };
  const Case cases[] = {
      {{0, 1, -2, 9, 0},
       "index_map64[2] = -2 references a source row outside the transported row count 4 "
       "(shape[0] of the tensor); checked on the device"},
      {{0, int64_t(1) << 40, -1, 0, 0}, "index_map64[1] = 1099511627776 references"},
      {{0, 1, 2, 3, 4}, "index_map64[4] = 4 references"},
      {{INT64_MIN, 0, 0, 0, 0}, "index_map64[0] = -9223372036854775808 references"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    DeviceIndex64 bad(kDev.device_id, c.entries);
    const kstage_write_data_t b = device_gather64(src.t, bad);
    KS_OK(kstage_write_attribute(f.s.stage, f.q, f.x, 3, &b, KSTAGE_PRIM_MODE_UPSERT, &op));
    KS_FAILS(kstage_wait(f.s.stage, op, KSTAGE_TIMEOUT_INFINITE), KSTAGE_INVALID_ARGUMENT,
             c.message);
    KS_OK(kstage_release_op(f.s.stage, op));
  }
  // None of them was applied.
  f.s.seal(3);
  CHECK(f.values() == std::vector<float>{40, 10, 30, 30, 20});
  CHECK(f.s.changed(f.q, f.x, 3, 3).empty());
}

TEST_CASE("a device index_map is ordered by the write's device_sync, like its tensors",
          "[device_maps]") {
  DeviceStage s(kDev);
  kstage_query_t q = s.query(3);
  kstage_token_t x = s.token("x");
  DeviceFloats src(kDev.device_id, {10, 20, 30});
  DeviceIndex map(kDev.device_id, {0, 0, 0});
  // The producer fills the map on its own stream, which has not run yet: the write is behind it.
  const std::vector<uint32_t> filled = {2, 1, 0};
  finish_after_held_producer(
      s, kDev.device_id, map.p, filled.data(), 12, [&](kstage_device_sync_t sync) {
        kstage_write_data_t w = device_gather(src.t, map);
        w.device_sync = sync;
        kstage_op_t op = 0;
        KS_OK(kstage_write_attribute(s.stage, q, x, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
        return op;
      });
  s.seal(1);
  CHECK(read_back(s, q, x).values == std::vector<float>{30, 20, 10});
}

TEST_CASE("a device mask and index_map64 are ordered by the write's device_sync too",
          "[device_maps]") {
  DeviceStage s(kDev);
  kstage_query_t q = s.query(3);
  kstage_token_t x = s.token("x"), y = s.token("y");
  DeviceFloats src(kDev.device_id, {10, 20, 30});
  DeviceWords mask(kDev.device_id, {0b001});
  DeviceIndex64 map(kDev.device_id, {0, 0, 0});
  // The producer's mask selects elements 1 and 2, not 0 as the buffer did before.
  const std::vector<uint64_t> words = {0b110};
  finish_after_held_producer(
      s, kDev.device_id, mask.p, words.data(), 8, [&](kstage_device_sync_t sync) {
        kstage_write_data_t w = device_mask_write(src.t, mask, 3);
        w.device_sync = sync;
        kstage_op_t op = 0;
        KS_OK(kstage_write_attribute(s.stage, q, x, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
        return op;
      });
  const std::vector<int64_t> filled = {2, 1, 0};
  finish_after_held_producer(
      s, kDev.device_id, map.p, filled.data(), 24, [&](kstage_device_sync_t sync) {
        kstage_write_data_t w = device_gather64(src.t, map);
        w.device_sync = sync;
        kstage_op_t op = 0;
        KS_OK(kstage_write_attribute(s.stage, q, y, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
        return op;
      });
  s.seal(1);
  CHECK(s.changed(q, x, 1, 1) == std::vector<kstage_path_t>{s.prims[1], s.prims[2]});
  CHECK(read_back(s, q, y).values == std::vector<float>{30, 20, 10});
}

TEST_CASE("a bad device index_map entry fails the op, not the call, and the write is never applied",
          "[device_maps]") {
  Sealed f;
  // A group held across everything below keeps the sealed values.
  kstage_read_desc_t desc = kstage_read_desc_init();
  kstage_read_t held = 0;
  KS_OK(kstage_read_attributes(f.s.stage, f.q, &f.x, 1, &desc, &held));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(f.s.stage, held, 0, &g));

  DeviceFloats src(kDev.device_id, {10, 20, 30, 40});
  DeviceIndex bad(kDev.device_id, {0, 1, 7, 2, 9});  // entries 2 and 4 are >= 4 rows
  kstage_op_t op = 0;
  const kstage_write_data_t w = device_gather(src.t, bad);
  KS_OK(kstage_write_attribute(f.s.stage, f.q, f.x, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_FAILS(kstage_wait(f.s.stage, op, KSTAGE_TIMEOUT_INFINITE), KSTAGE_INVALID_ARGUMENT,
           "index_map[2] = 7");
  const char* message = nullptr;
  KS_OK(kstage_op_error(f.s.stage, op, &message));
  const std::string m = message;
  CHECK(m.find("index_map[2] = 7 references a source row outside the transported row count 4 "
               "(shape[0] of the tensor)") != std::string::npos);
  CHECK(m.find("checked on the device") != std::string::npos);
  // The same answer again: worked out once.
  KS_FAILS(kstage_wait(f.s.stage, op, 0), KSTAGE_INVALID_ARGUMENT, "index_map[2] = 7");
  KS_OK(kstage_release_op(f.s.stage, op));

  // A seal in between skips it; a later write at the same ordinal is applied.
  f.s.seal(1);
  CHECK(f.values() == std::vector<float>{1, 2, 3, 4, 5});
  DeviceIndex good(kDev.device_id, {3, 3});
  REQUIRE(f.s.write(f.q, f.x, 2, device_gather(src.t, good)) == KSTAGE_OK);
  f.s.seal(2);
  CHECK(f.values() == std::vector<float>{40, 40, 3, 4, 5});
  CHECK(f.s.floor(f.x) == 2);
  // Only the applied write's prims changed at 2.
  CHECK(f.s.changed(f.q, f.x, 2, 2) == std::vector<kstage_path_t>{f.s.prims[0], f.s.prims[1]});
  // The held group never changed.
  const size_t rows = size_t(g.data.tensors[0].shape[0]);
  const std::vector<float> held_values = group_floats(g, 0, rows);
  std::vector<float> in_order;
  for (uint64_t i = 0; i < g.prim_count; ++i)
    in_order.push_back(held_values[g.data.index_map ? g.data.index_map[i] : i]);
  CHECK(in_order == std::vector<float>{1, 2, 3, 4, 5});
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, held));
}

TEST_CASE("a failed device-map write that made its column leaves no column behind",
          "[device_maps]") {
  Sealed f;
  kstage_token_t y = f.s.token("y");
  DeviceFloats src(kDev.device_id, {10, 20});
  DeviceIndex bad(kDev.device_id, {0, 5});
  kstage_op_t op = 0;
  const kstage_write_data_t w = device_gather(src.t, bad);
  KS_OK(kstage_write_attribute(f.s.stage, f.q, y, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_FAILS(kstage_wait(f.s.stage, op, KSTAGE_TIMEOUT_INFINITE), KSTAGE_INVALID_ARGUMENT,
           "index_map[1] = 5");
  KS_OK(kstage_release_op(f.s.stage, op));
  f.s.seal(2);
  // As if the call had been refused: y has no column, so a float64 y is a new column.
  std::vector<double> d = {1, 2, 3, 4, 5};
  int64_t shape[1] = {5};
  DLTensor t64 = tensor(d.data(), f64(), 1, shape);
  REQUIRE(f.s.write(f.q, y, 3, write_data(&t64)) == KSTAGE_OK);
  f.s.seal(3);
}

TEST_CASE("a batch write with one bad device index_map applies none of its attributes",
          "[device_maps]") {
  Sealed f;
  kstage_token_t v = f.s.token("v");
  DeviceFloats src(kDev.device_id, {10, 20, 30});
  DeviceIndex good(kDev.device_id, {0, 1, 2, 0, 1});
  DeviceIndex bad(kDev.device_id, {0, 1, 2, 3, 1});
  kstage_write_data_t data[2] = {device_gather(src.t, good), device_gather(src.t, bad)};
  const kstage_token_t attrs[2] = {f.x, v};
  kstage_op_t op = 0;
  KS_OK(kstage_write_attributes(f.s.stage, f.q, attrs, data, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_FAILS(kstage_wait(f.s.stage, op, KSTAGE_TIMEOUT_INFINITE), KSTAGE_INVALID_ARGUMENT,
           "data[1] ('v'): index_map[3] = 3");
  KS_OK(kstage_release_op(f.s.stage, op));
  f.s.seal(2);
  CHECK(f.values() == std::vector<float>{1, 2, 3, 4, 5});
  CHECK(f.s.changed(f.q, f.x, 2, 2).empty());
}

TEST_CASE("what a call checks of a device index_map without reading it", "[device_maps]") {
  Sealed f;
  DeviceFloats src(kDev.device_id, {10, 20, 30, 40, 50});
  DeviceIndex map(kDev.device_id, {4, 3, 2, 1, 0});
  const Counts before = Counts::now();
  kstage_op_t op = 0;
  auto refused = [&](const kstage_write_data_t& w, kstage_status_t code, const char* needle) {
    KS_FAILS(kstage_write_attribute(f.s.stage, f.q, f.x, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op), code,
             needle);
  };
  SECTION("on another device than the tensors: both named") {
    refused(device_gather(src.t, map, kOther), KSTAGE_INVALID_ARGUMENT, "selection_device is");
    CHECK(std::string(kstage_last_error()).find("tensors[0] is on") != std::string::npos);
  }
  SECTION("where the column does not live: both named") {
    kstage_token_t h = f.s.token("h");
    std::vector<float> host = {1, 2, 3, 4, 5};
    int64_t shape[1] = {5};
    DLTensor ht = tensor(host.data(), f32(), 1, shape);
    kstage_write_data_t first = write_data(&ht);
    first.residency = kHost;
    REQUIRE(f.s.write(f.q, h, 2, first) == KSTAGE_OK);
    const kstage_write_data_t w = device_gather(src.t, map);
    KS_FAILS(kstage_write_attribute(f.s.stage, f.q, h, 3, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "column 'h' lives on kDLCPU:0");
  }
  SECTION("a host pointer said to be device memory") {
    std::vector<uint32_t> host_map = {0, 1, 2, 3, 4};
    kstage_write_data_t w = device_gather(src.t, map);
    w.index_map = host_map.data();
    refused(w, KSTAGE_INVALID_ARGUMENT, "index_map: DLDevice says");
  }
  SECTION("memory of the other ordinal") {
    DeviceIndex elsewhere(kOther.device_id, {0, 1, 2, 3, 4});
    kstage_write_data_t w = device_gather(src.t, elsewhere);
    refused(w, KSTAGE_INVALID_ARGUMENT, "index_map: DLDevice says device_id");
  }
  SECTION("count past the query, and no count") {
    kstage_write_data_t w = device_gather(src.t, map);
    w.count = 6;
    refused(w, KSTAGE_INVALID_ARGUMENT, "count 6 exceeds the query's 5 prims");
    w.count = 0;
    refused(w, KSTAGE_INVALID_ARGUMENT, "count must be non-zero");
  }
  SECTION("a device mask on the other ordinal, or in host memory") {
    DeviceWords elsewhere(kOther.device_id, {0x1f});
    kstage_write_data_t w = device_mask_write(src.t, elsewhere, 5);
    refused(w, KSTAGE_INVALID_ARGUMENT, "mask: DLDevice says device_id");
    const uint64_t host_words[1] = {0x1f};
    w.mask = host_words;
    refused(w, KSTAGE_INVALID_ARGUMENT, "mask: DLDevice says");
  }
  SECTION("a device index_map64: the same checks, named as index_map64") {
    DeviceIndex64 map64(kDev.device_id, {4, 3, 2, 1, 0});
    refused(device_gather64(src.t, map64, kOther), KSTAGE_INVALID_ARGUMENT, "selection_device is");
    std::vector<int64_t> host_map = {0, 1, 2, 3, 4};
    kstage_write_data_t w = device_gather64(src.t, map64);
    w.index_map64 = host_map.data();
    refused(w, KSTAGE_INVALID_ARGUMENT, "index_map64: DLDevice says");
    DeviceIndex64 elsewhere(kOther.device_id, {0, 1, 2, 3, 4});
    refused(device_gather64(src.t, elsewhere), KSTAGE_INVALID_ARGUMENT,
            "index_map64: DLDevice says device_id");
    w = device_gather64(src.t, map64);
    w.index_map = map.p;
    refused(w, KSTAGE_INVALID_ARGUMENT, "index_map and index_map64 are mutually exclusive");
    kstage_token_t a = f.s.token("a");
    kstage_write_data_t arr = device_gather64(src.t, map64);
    arr.is_array = true;
    KS_FAILS(kstage_write_attribute(f.s.stage, f.q, a, 2, &arr, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_NOT_SUPPORTED, "index_map64 in device memory");
  }
  SECTION("an array attribute's device map or mask: not yet") {
    kstage_token_t a = f.s.token("a");
    kstage_write_data_t arr = device_gather(src.t, map);
    arr.is_array = true;
    KS_FAILS(kstage_write_attribute(f.s.stage, f.q, a, 2, &arr, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_NOT_SUPPORTED, "for an array attribute");
  }
  // Nothing moved, nothing changed.
  const Counts after = Counts::now();
  CHECK(after.uploads == before.uploads);
  CHECK(after.d2h == before.d2h);
  f.s.seal(2);
  CHECK(f.values() == std::vector<float>{1, 2, 3, 4, 5});
}

TEST_CASE("a read can hand out a device column's index_map in device memory", "[device_maps]") {
  Sealed f;
  // The query in reverse: a zero-copy group needs an index map (prim i is row 4 - i).
  std::vector<kstage_path_t> reversed(f.s.prims.rbegin(), f.s.prims.rend());
  kstage_query_t rq = f.s.Stage::query(reversed);
  for (uint64_t per : {uint64_t(0), uint64_t(2)}) {  // whole, and split into groups of 2
    INFO("max_group_prims " << per);
    kstage_read_desc_t desc = kstage_read_desc_init();
    desc.device_index_map = true;
    desc.max_group_prims = per;
    const Counts before = Counts::now();
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(f.s.stage, rq, &f.x, 1, &desc, &r));
    std::vector<uint32_t> rows;
    for (;;) {
      kstage_read_group_t g{};
      const kstage_status_t st = kstage_fetch_read_next(f.s.stage, r, 0, &g);
      if (st == KSTAGE_END_OF_ITERATION) break;
      KS_OK(st);
      REQUIRE(g.data.index_map != nullptr);
      // On the group's device, ordered by its event like the tensor.
      CHECK(kstage_emulated_ordinal_of(g.data.index_map) == kDev.device_id);
      if (g.data.device_sync.event) kstage_emulated_event_synchronize(g.data.device_sync.event);
      std::vector<uint32_t> part(g.data.count);
      kstage_emulated_memcpy(part.data(), g.data.index_map, part.size() * sizeof(uint32_t));
      rows.insert(rows.end(), part.begin(), part.end());
      KS_OK(kstage_release_group(f.s.stage, g.handle));
    }
    KS_OK(kstage_release_read(f.s.stage, r));
    CHECK(rows == std::vector<uint32_t>{4, 3, 2, 1, 0});
    // One upload of the map (the column's cached copy once made is shared by later reads).
    CHECK(Counts::now().uploads - before.uploads <= 1);
  }
  // Without the flag: a host map.
  kstage_read_desc_t plain = kstage_read_desc_init();
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(f.s.stage, rq, &f.x, 1, &plain, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g));
  CHECK(kstage_emulated_ordinal_of(g.data.index_map) == -1);
  CHECK(std::vector<uint32_t>(g.data.index_map, g.data.index_map + 5) ==
        std::vector<uint32_t>{4, 3, 2, 1, 0});
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  // A host column keeps a host map whatever the reader asks.
  kstage_token_t h = f.s.token("h");
  std::vector<float> host = {1, 2, 3, 4, 5};
  int64_t shape[1] = {5};
  DLTensor ht = tensor(host.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&ht);
  w.residency = kHost;
  REQUIRE(f.s.write(f.q, h, 2, w) == KSTAGE_OK);
  f.s.seal(2);
  kstage_read_desc_t desc = kstage_read_desc_init();
  desc.device_index_map = true;
  KS_OK(kstage_read_attributes(f.s.stage, rq, &h, 1, &desc, &r));
  KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g));
  CHECK(kstage_emulated_ordinal_of(g.data.index_map) == -1);
  CHECK(g.data.index_map[0] == 4);
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
}

TEST_CASE("a read group's index_map exports as a DLPack tensor where it lives, outliving the group",
          "[device_maps][dlpack]") {
  Sealed f;
  std::vector<kstage_path_t> reversed(f.s.prims.rbegin(), f.s.prims.rend());
  kstage_query_t rq = f.s.Stage::query(reversed);
  auto first_group = [&](kstage_read_desc_t desc, kstage_read_t* r, kstage_read_group_t* g) {
    KS_OK(kstage_read_attributes(f.s.stage, rq, &f.x, 1, &desc, r));
    KS_OK(kstage_fetch_read_next(f.s.stage, *r, 0, g));
  };
  kstage_read_desc_t on_device = kstage_read_desc_init();
  on_device.device_index_map = true;
  on_device.max_group_prims = 2;  // the second group's slice of the map: rows 2, 1
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  first_group(on_device, &r, &g);
  kstage_read_group_t g2{};
  KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g2));
  DLManagedTensorVersioned* e = nullptr;
  KS_OK(kstage_group_export_index_map(f.s.stage, g2.handle, 0, &e));
  CHECK(e->dl_tensor.data == g2.data.index_map);
  CHECK(e->dl_tensor.device.device_type == kDev.device_type);
  CHECK(e->dl_tensor.device.device_id == kDev.device_id);
  CHECK(kstage_emulated_ordinal_of(e->dl_tensor.data) == kDev.device_id);
  CHECK(e->dl_tensor.ndim == 1);
  CHECK(e->dl_tensor.shape[0] == 2);
  CHECK(e->dl_tensor.strides[0] == 1);
  CHECK(e->dl_tensor.dtype.code == kDLUInt);
  CHECK(e->dl_tensor.dtype.bits == 32);
  CHECK(e->dl_tensor.dtype.lanes == 1);
  CHECK(e->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
  if (g2.data.device_sync.event) kstage_emulated_event_synchronize(g2.data.device_sync.event);
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_group(f.s.stage, g2.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  // The map outlives its group and read.
  std::vector<uint32_t> part(2);
  kstage_emulated_memcpy(part.data(), e->dl_tensor.data, 2 * sizeof(uint32_t));
  CHECK(part == std::vector<uint32_t>{2, 1});
  e->deleter(e);

  // To a consumer stream: ordered after the group, released after the consumer's reads.
  on_device.max_group_prims = 0;
  first_group(on_device, &r, &g);
  const uintptr_t consumer = kstage_emulated_stream_create(kDev.device_id);
  KS_OK(kstage_group_export_index_map(f.s.stage, g.handle, consumer, &e));
  kstage_emulated_stream_hold(consumer);
  // (Pinned memory: a copy to pageable memory would wait for the held stream.)
  auto* all = static_cast<uint32_t*>(kstage_emulated_host_malloc(5 * sizeof(uint32_t)));
  REQUIRE(all != nullptr);
  REQUIRE(kstage_emulated_memcpy_async(consumer, all, e->dl_tensor.data, 5 * 4) == 0);
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  e->deleter(e);
  kstage_emulated_stream_release(consumer);
  kstage_emulated_stream_synchronize(consumer);
  CHECK(std::vector<uint32_t>(all, all + 5) == std::vector<uint32_t>{4, 3, 2, 1, 0});
  kstage_emulated_host_free(all);
  // A stream the device does not know is refused, and nothing is exported.
  first_group(on_device, &r, &g);
  e = nullptr;
  KS_FAILS(kstage_group_export_index_map(f.s.stage, g.handle, 0xbad0, &e), KSTAGE_INVALID_ARGUMENT,
           "consumer.stream 0xbad0");
  CHECK(e == nullptr);
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  kstage_emulated_stream_destroy(consumer);

  // A read that did not ask: the host map, exported as host memory, alive after the group.
  first_group(kstage_read_desc_init(), &r, &g);
  KS_OK(kstage_group_export_index_map(f.s.stage, g.handle, 0, &e));
  CHECK(e->dl_tensor.device.device_type == kDLCPU);
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  const uint32_t* host_rows = static_cast<const uint32_t*>(e->dl_tensor.data);
  CHECK(std::vector<uint32_t>(host_rows, host_rows + 5) == std::vector<uint32_t>{4, 3, 2, 1, 0});
  e->deleter(e);

  // No map to export: a compact group (rows in prim order), a tombstone; and bad handles.
  kstage_read_desc_t compact = kstage_read_desc_init();
  compact.compact = true;
  first_group(compact, &r, &g);
  KS_FAILS(kstage_group_export_index_map(f.s.stage, g.handle, 0, &e), KSTAGE_INVALID_ARGUMENT,
           "the group has no index_map");
  KS_FAILS(kstage_group_export_index_map(f.s.stage, g.handle, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "tensor");
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  KS_FAILS(kstage_group_export_index_map(f.s.stage, g.handle, 0, &e), KSTAGE_INVALID_HANDLE,
           "group");
  REQUIRE(f.s.remove(f.q, {f.x}, 2) == KSTAGE_OK);
  f.s.seal(2);
  kstage_read_desc_t range = kstage_read_desc_init();
  range.change_range = true;
  range.range_begin = range.range_end = 2;
  first_group(range, &r, &g);
  REQUIRE(g.is_delete);
  KS_FAILS(kstage_group_export_index_map(f.s.stage, g.handle, 0, &e), KSTAGE_INVALID_ARGUMENT,
           "a tombstone group has no index_map");
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
}

TEST_CASE(
    "a device mask is read in place: rows gathered on the device, the selection read back "
    "once for the seal",
    "[device_maps]") {
  Sealed f;
  DeviceFloats src(kDev.device_id, {10, 20, 30, 40, 50});
  DeviceWords mask(kDev.device_id, {0b10110});  // elements 1, 2 and 4
  const Counts before = Counts::now();
  kstage_op_t op = 0;
  const kstage_write_data_t w = device_mask_write(src.t, mask, 5);
  KS_OK(kstage_write_attribute(f.s.stage, f.q, f.x, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_OK(kstage_wait(f.s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(f.s.stage, op));
  const Counts written = Counts::now();
  CHECK(written.uploads == before.uploads);
  CHECK(written.emulated_uploads == before.emulated_uploads);
  CHECK(written.h2d == before.h2d);
  CHECK(written.d2h == before.d2h);  // nothing read back by the write
  f.s.seal(2);
  // The seal reads the mask's one word back (the host's tables need the selection), once.
  CHECK(Counts::now().d2h == before.d2h + 1);
  CHECK(f.values() == std::vector<float>{1, 20, 30, 4, 50});
  CHECK(f.s.changed(f.q, f.x, 2, 2) ==
        std::vector<kstage_path_t>{f.s.prims[1], f.s.prims[2], f.s.prims[4]});
  // A column made by a device mask holds the selected prims only; no bit set writes nothing.
  kstage_token_t y = f.s.token("y");
  DeviceWords some(kDev.device_id, {0b01001});
  REQUIRE(f.s.write(f.q, y, 3, device_mask_write(src.t, some, 5)) == KSTAGE_OK);
  DeviceWords none(kDev.device_id, {0});
  REQUIRE(f.s.write(f.q, f.x, 3, device_mask_write(src.t, none, 5)) == KSTAGE_OK);
  f.s.seal(3);
  CHECK(f.s.changed(f.q, y, 3, 3) == std::vector<kstage_path_t>{f.s.prims[0], f.s.prims[3]});
  CHECK(f.s.changed(f.q, f.x, 3, 3).empty());
  CHECK(f.values() == std::vector<float>{1, 20, 30, 4, 50});
  // A mask over more words than one, with bits past count ignored.
  std::vector<float> many(70);
  for (size_t i = 0; i < many.size(); ++i) many[i] = float(i);
  DeviceFloats big(kDev.device_id, many);
  DeviceStage wide(kDev);
  kstage_query_t wq = wide.query(70);
  kstage_token_t z = wide.token("z");
  DeviceWords two(kDev.device_id, {uint64_t(1) << 63, ~uint64_t(0)});  // 63, 64..69 (+ past 70)
  REQUIRE(wide.write(wq, z, 1, device_mask_write(big.t, two, 70)) == KSTAGE_OK);
  wide.seal(1);
  std::vector<kstage_path_t> expect = {wide.prims[63]};
  for (size_t i = 64; i < 70; ++i) expect.push_back(wide.prims[i]);
  CHECK(wide.changed(wq, z, 1, 1) == expect);
}

TEST_CASE(
    "a device mask's prim mode: UPDATE of present prims needs no read-back, INSERT reads "
    "the mask at the call",
    "[device_maps]") {
  Sealed f;
  DeviceFloats src(kDev.device_id, {10, 20, 30, 40, 50});
  DeviceWords mask(kDev.device_id, {0b00101});
  const Counts before = Counts::now();
  REQUIRE(f.s.write(f.q, f.x, 2, device_mask_write(src.t, mask, 5), KSTAGE_PRIM_MODE_UPDATE) ==
          KSTAGE_OK);
  CHECK(Counts::now().d2h == before.d2h);  // every prim of the query holds x: no need to know
  // INSERT of a prim that exists: refused at the call, naming it.
  kstage_op_t op = 0;
  const kstage_write_data_t w = device_mask_write(src.t, mask, 5);
  KS_FAILS(kstage_write_attribute(f.s.stage, f.q, f.x, 2, &w, KSTAGE_PRIM_MODE_INSERT, &op),
           KSTAGE_ALREADY_EXISTS, "(element 0) already exists");
  // Prims that do not exist yet: INSERT of the selected ones (0 and 2), then UPDATEs behind it
  // at the same ordinal, checked against the pending INSERT (its device mask read back).
  const std::vector<kstage_path_t> fresh = f.s.paths("/fresh", 5);
  kstage_query_t nq = f.s.Stage::query(fresh);
  kstage_token_t y = f.s.token("y");
  KS_FAILS(kstage_write_attribute(f.s.stage, nq, y, 2, &w, KSTAGE_PRIM_MODE_UPDATE, &op),
           KSTAGE_NOT_FOUND, "(element 0) does not exist");
  REQUIRE(f.s.write(nq, y, 2, device_mask_write(src.t, mask, 5), KSTAGE_PRIM_MODE_INSERT) ==
          KSTAGE_OK);
  REQUIRE(f.s.write(nq, y, 2, device_mask_write(src.t, mask, 5), KSTAGE_PRIM_MODE_UPDATE) ==
          KSTAGE_OK);
  DeviceWords other(kDev.device_id, {0b00110});  // element 1 was not inserted
  const kstage_write_data_t w1 = device_mask_write(src.t, other, 5);
  KS_FAILS(kstage_write_attribute(f.s.stage, nq, y, 2, &w1, KSTAGE_PRIM_MODE_UPDATE, &op),
           KSTAGE_NOT_FOUND, "(element 1) does not exist");
  f.s.seal(2);
  CHECK(f.values() == std::vector<float>{10, 2, 30, 4, 5});
  CHECK(f.s.changed(nq, y, 2, 2) == std::vector<kstage_path_t>{fresh[0], fresh[2]});
}

TEST_CASE(
    "a device fault in a device map's gather fails the op and the seal with DEVICE_ERROR, "
    "a refused launch fails the call",
    "[device_maps]") {
  struct Reset {
    ~Reset() { kstage_emulated_device_reset(kDev.device_id); }
  } reset;
  {
    DeviceStage s(kDev);
    kstage_query_t q = s.query(4);
    kstage_token_t x = s.token("x");
    DeviceFloats src(kDev.device_id, {1, 2, 3, 4});
    DeviceIndex map(kDev.device_id, {3, 2, 1, 0});
    // A launch refused at launch time: the call fails, not sticky, nothing queued.
    REQUIRE(kstage_emulated_inject_fault(kDev.device_id, KSTAGE_EMULATED_FAULT_LAUNCH, 1) == 1);
    kstage_op_t op = 0;
    const kstage_write_data_t w = device_gather(src.t, map);
    KS_FAILS(kstage_write_attribute(s.stage, q, x, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_DEVICE_ERROR, "too many resources requested for launch");
    // The gather itself faults when it runs: the op's outcome, and the seal's.
    REQUIRE(kstage_emulated_inject_fault(kDev.device_id, KSTAGE_EMULATED_FAULT_KERNEL, 1) == 1);
    KernelDelay slow(20000);  // the fault happens after the call has returned
    KS_OK(kstage_write_attribute(s.stage, q, x, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    KS_FAILS(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE), KSTAGE_DEVICE_ERROR,
             "illegal memory access");
    KS_OK(kstage_release_op(s.stage, op));
    KS_FAILS(kstage_advance_write_floor(s.stage, 1, &x, 1), KSTAGE_DEVICE_ERROR,
             "illegal memory access");
    CHECK(s.floor(x) == 0);  // the write was not applied
  }
}
