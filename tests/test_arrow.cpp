// SPDX-License-Identifier: Apache-2.0
// kstage_group_export_arrow (kstage/kstage_arrow.h): every column kind as its Arrow type, the
// values zero-copy where the group's memory is in prim order, path columns, lifetimes (the
// export outlives the group; each node released once; children moved out and released on their
// own), device groups (device_type, sync_event, buffers in device memory), and every error
// leaving the out-structs untouched. Runs on the host and on the emulated device.
#include <kstage/kstage_arrow.h>

#include "support.hpp"

#include <cstring>
#include <string>
#include <vector>

using namespace kstage_test;

namespace {

// A fetched group of a read of one attribute, released by the test (or at the end).
struct OneGroup {
  kstage_stage_t stage = 0;
  kstage_read_t read = 0;
  kstage_read_group_t g{};
  bool held = false;
  OneGroup(Stage& s, kstage_query_t q, kstage_token_t attr, bool compact = false) : stage(s.stage) {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = compact;
    KS_OK(kstage_read_attributes(stage, q, &attr, 1, &d, &read));
    KS_OK(kstage_fetch_read_next(stage, read, 0, &g));
    held = true;
  }
  void release() {
    if (held) KS_OK(kstage_release_group(stage, g.handle));
    held = false;
  }
  ~OneGroup() {
    if (held) kstage_release_group(stage, g.handle);
    kstage_release_read(stage, read);
  }
};

struct Exported {
  ArrowSchema schema{};
  ArrowDeviceArray array{};
  ~Exported() {
    if (array.array.release) array.array.release(&array.array);
    if (schema.release) schema.release(&schema);
  }
};

DLDevice device_of(const ArrowDeviceArray& a) {
  return DLDevice{DLDeviceType(a.device_type), int32_t(a.device_id)};
}

// Buffer `i` of `a` (`bytes` of it), on the host, after the export's event.
std::vector<unsigned char> buffer(const ArrowDeviceArray& top, const ArrowArray& a, int i,
                                  size_t bytes) {
  if (top.sync_event)
    wait_for(kstage_device_sync_t{0, *static_cast<const uintptr_t*>(top.sync_event)});
  return host_copy(a.buffers[i], bytes, device_of(top));
}
template <class T>
std::vector<T> values(const ArrowDeviceArray& top, const ArrowArray& a, int i, size_t n) {
  const auto b = buffer(top, a, i, n * sizeof(T));
  std::vector<T> v(n);
  if (n) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

kstage_query_t ordered(Stage& s, const std::vector<kstage_path_t>& p) { return s.query(p); }

}  // namespace

TEST_CASE("a fixed-size column is a FixedSizeList (lanes > 1) or a primitive, zero-copy",
          "[arrow]") {
  Stage s(host_execution());
  const kstage_token_t pos = s.token("position"), id = s.token("id");
  const auto prims = s.paths("/p", 5);
  const kstage_query_t q = ordered(s, prims);
  std::vector<float> v(15);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.5f;
  s.write_f32(q, pos, 1, v, 3);
  std::vector<int64_t> ids = {10, 11, 12, 13, 14};
  int64_t shape[1] = {5};
  DLTensor ti = tensor(ids.data(), DLDataType{kDLInt, 64, 1}, 1, shape);
  KS_OK(s.write(q, id, 1, write_data(&ti)));
  s.seal(1);

  OneGroup g(s, q, pos);
  REQUIRE(g.g.data.index_map == nullptr);
  Exported e;
  KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
  CHECK(std::string(e.schema.format) == "+w:3");
  CHECK(std::string(e.schema.name) == "position");
  REQUIRE(e.schema.n_children == 1);
  CHECK(std::string(e.schema.children[0]->format) == "f");
  const ArrowArray& a = e.array.array;
  CHECK(a.length == 5);
  CHECK(a.null_count == 0);
  CHECK(a.n_buffers == 1);
  CHECK(a.buffers[0] == nullptr);
  REQUIRE(a.n_children == 1);
  const ArrowArray& items = *a.children[0];
  CHECK(items.length == 15);
  CHECK(items.n_buffers == 2);
  // Zero-copy: the values are the group's own memory.
  const DLTensor& t = g.g.data.tensors[0];
  CHECK(items.buffers[1] == static_cast<const char*>(t.data) + t.byte_offset);
  CHECK(e.array.device_type == int32_t(kResidency.device_type));
  if (!kOnDevice) CHECK(e.array.sync_event == nullptr);
  // The export outlives the group.
  g.release();
  CHECK(values<float>(e.array, items, 1, 15) == v);
  // Each release once: the callback marks the struct released.
  e.array.array.release(&e.array.array);
  CHECK(e.array.array.release == nullptr);
  e.schema.release(&e.schema);
  CHECK(e.schema.release == nullptr);

  OneGroup gi(s, q, id);
  Exported ei;
  KS_OK(kstage_group_export_arrow(s.stage, gi.g.handle, 0, &ei.schema, &ei.array));
  CHECK(std::string(ei.schema.format) == "l");
  CHECK(ei.schema.n_children == 0);
  CHECK(ei.array.array.n_buffers == 2);
  CHECK(values<int64_t>(ei.array, ei.array.array, 1, 5) == ids);
}

TEST_CASE("every Arrow primitive kstage has, and bool packed into bits", "[arrow]") {
  Stage s(host_execution());
  const auto prims = s.paths("/p", 10);
  const kstage_query_t q = ordered(s, prims);
  struct Case {
    DLDataType dtype;
    const char* format;
  };
  const Case cases[] = {{{kDLInt, 8, 1}, "c"},    {{kDLInt, 16, 1}, "s"},  {{kDLInt, 32, 1}, "i"},
                        {{kDLInt, 64, 1}, "l"},   {{kDLUInt, 8, 1}, "C"},  {{kDLUInt, 16, 1}, "S"},
                        {{kDLUInt, 32, 1}, "I"},  {{kDLUInt, 64, 1}, "L"}, {{kDLFloat, 16, 1}, "e"},
                        {{kDLFloat, 32, 1}, "f"}, {{kDLFloat, 64, 1}, "g"}};
  std::vector<unsigned char> bytes(10 * 8);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (unsigned char)(i * 7 + 1);
  int k = 0;
  for (const Case& c : cases) {
    const std::string name = "a" + std::to_string(k++);
    int64_t shape[1] = {10};
    DLTensor tt = tensor(bytes.data(), c.dtype, 1, shape);
    KS_OK(s.write(q, s.token(name.c_str()), 1, write_data(&tt)));
  }
  s.seal(1);
  k = 0;
  for (const Case& c : cases) {
    CAPTURE(c.format);
    const std::string name = "a" + std::to_string(k++);
    OneGroup g(s, q, s.token(name.c_str()));
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
    CHECK(std::string(e.schema.format) == c.format);
    CHECK(std::string(e.schema.name) == name);
    CHECK(buffer(e.array, e.array.array, 1, 10 * c.dtype.bits / 8) ==
          std::vector<unsigned char>(bytes.begin(), bytes.begin() + 10 * c.dtype.bits / 8));
  }
  // bool (8-bit in kstage) is Arrow's bit-packed boolean: bit i of the values buffer.
  const kstage_token_t flag = s.token("flag");
  std::vector<uint8_t> on = {1, 0, 1, 1, 0, 0, 0, 1, 1, 0};
  int64_t shape[1] = {10};
  DLTensor tb = tensor(on.data(), DLDataType{kDLBool, 8, 1}, 1, shape);
  KS_OK(s.write(q, flag, 2, write_data(&tb)));
  s.seal(2);
  OneGroup g(s, q, flag);
  Exported e;
  if (kOnDevice) {
    KS_FAILS(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array),
             KSTAGE_NOT_SUPPORTED, "bit-packed");
    CHECK(e.array.array.release == nullptr);
    return;
  }
  KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
  CHECK(std::string(e.schema.format) == "b");
  const auto bits = buffer(e.array, e.array.array, 1, 2);
  for (size_t i = 0; i < on.size(); ++i) CHECK(((bits[i / 8] >> (i % 8)) & 1) == on[i]);
}

TEST_CASE("a group in column order is gathered into prim order, on its device too", "[arrow]") {
  Stage s(host_execution());
  const kstage_token_t x = s.token("x");
  const auto prims = s.paths("/p", 6);
  s.write_f32(ordered(s, prims), x, 1, {0, 1, 2, 3, 4, 5});
  s.seal(1);
  // A query in another order than the column's rows: the group has an index_map.
  const kstage_query_t q = ordered(s, {prims[4], prims[1], prims[5], prims[0]});
  OneGroup g(s, q, x);
  REQUIRE(g.g.data.index_map != nullptr);  // (on a device: gathered there, one kernel)
  Exported e;
  KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
  CHECK(values<float>(e.array, e.array.array, 1, 4) == std::vector<float>{4, 1, 5, 0});
}

TEST_CASE("a ragged column is a LargeList, STRING a LargeString, with kstage's values in place",
          "[arrow]") {
  Stage s(host_execution());
  const kstage_token_t nbrs = s.token("neighbours"), label = s.token("label"),
                       pts = s.token("points");
  const auto prims = s.paths("/p", 3);
  const kstage_query_t q = ordered(s, prims);
  std::vector<std::vector<int32_t>> rows = {{1, 2}, {}, {3, 4, 5}};
  std::vector<int64_t> shapes = {2, 0, 3};
  std::vector<DLTensor> rt;
  for (size_t i = 0; i < rows.size(); ++i)
    rt.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), i32(), 1, &shapes[i]));
  KS_OK(s.write(q, nbrs, 1, write_data(rt.data(), rt.size(), true)));
  std::vector<std::string> words = {"alpha", "", "γamma"};
  std::vector<int64_t> lengths;
  std::vector<DLTensor> wt;
  for (const auto& w : words) lengths.push_back(int64_t(w.size()));
  for (size_t i = 0; i < words.size(); ++i)
    wt.push_back(tensor(words[i].empty() ? nullptr : words[i].data(), u8(), 1, &lengths[i]));
  kstage_write_data_t ws = write_data(wt.data(), wt.size(), true);
  ws.semantic = KSTAGE_SEMANTIC_STRING;
  KS_OK(s.write(q, label, 1, ws));
  std::vector<float> p3 = {1, 2, 3, 4, 5, 6};  // rows of 2 and 0 and 0 points of 3 lanes
  std::vector<int64_t> pshape = {2, 0, 0};
  std::vector<DLTensor> pt = {tensor(p3.data(), f32(3), 1, &pshape[0]),
                              tensor(nullptr, f32(3), 1, &pshape[1]),
                              tensor(nullptr, f32(3), 1, &pshape[2])};
  KS_OK(s.write(q, pts, 1, write_data(pt.data(), pt.size(), true)));
  s.seal(1);

  {
    OneGroup g(s, q, nbrs, /*compact=*/true);
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
    CHECK(std::string(e.schema.format) == "+L");
    REQUIRE(e.schema.n_children == 1);
    CHECK(std::string(e.schema.children[0]->format) == "i");
    const ArrowArray& a = e.array.array;
    CHECK(a.length == 3);
    CHECK(a.n_buffers == 2);
    CHECK(values<int64_t>(e.array, a, 1, 4) == std::vector<int64_t>{0, 2, 2, 5});
    REQUIRE(a.n_children == 1);
    CHECK(a.children[0]->length == 5);
    CHECK(values<int32_t>(e.array, *a.children[0], 1, 5) == std::vector<int32_t>{1, 2, 3, 4, 5});
    // A compact group's rows lie back to back: the values are its memory.
    const DLTensor& first = g.g.data.tensors[g.g.data.index_map ? g.g.data.index_map[0] : 0];
    CHECK(a.children[0]->buffers[1] == static_cast<const char*>(first.data) + first.byte_offset);
  }
  {
    OneGroup g(s, q, label, /*compact=*/true);
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
    CHECK(std::string(e.schema.format) == "U");
    const ArrowArray& a = e.array.array;
    CHECK(a.n_buffers == 3);
    const auto offsets = values<int64_t>(e.array, a, 1, 4);
    const auto chars = buffer(e.array, a, 2, size_t(offsets[3]));
    for (size_t i = 0; i < 3; ++i)
      CHECK(std::string(chars.begin() + offsets[i], chars.begin() + offsets[i + 1]) == words[i]);
  }
  {
    OneGroup g(s, q, pts, /*compact=*/true);
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
    CHECK(std::string(e.schema.format) == "+L");
    CHECK(std::string(e.schema.children[0]->format) == "+w:3");
    CHECK(std::string(e.schema.children[0]->children[0]->format) == "f");
    const ArrowArray& a = e.array.array;
    CHECK(values<int64_t>(e.array, a, 1, 4) == std::vector<int64_t>{0, 2, 2, 2});
    CHECK(a.children[0]->length == 2);
    CHECK(a.children[0]->children[0]->length == 6);
    CHECK(values<float>(e.array, *a.children[0]->children[0], 1, 6) == p3);
  }
  if (!kOnDevice) {  // rows not back to back (a query out of column order): packed once
    OneGroup g(s, ordered(s, {prims[2], prims[0]}), nbrs);
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
    const ArrowArray& a = e.array.array;
    CHECK(values<int64_t>(e.array, a, 1, 3) == std::vector<int64_t>{0, 3, 5});
    CHECK(values<int32_t>(e.array, *a.children[0], 1, 5) == std::vector<int32_t>{3, 4, 5, 1, 2});
  }
}

TEST_CASE("the prims as a path column: ids, or dictionary-encoded strings", "[arrow]") {
  Stage s(host_execution());
  const kstage_token_t x = s.token("x"), owner = s.token("owner");
  const auto prims = s.paths("/body", 3);
  const kstage_query_t q = ordered(s, prims);
  s.write_f32(q, x, 1, {7, 8, 9});
  std::vector<uint64_t> tokens = {x, owner, x};
  int64_t shape[1] = {3};
  DLTensor tt = tensor(tokens.data(), u64(), 1, shape);
  kstage_write_data_t w = write_data(&tt);
  w.semantic = KSTAGE_SEMANTIC_TOKEN_ID;
  KS_OK(s.write(q, owner, 1, w));
  s.seal(1);
  {
    OneGroup g(s, q, x);
    Exported e;
    KS_OK(
        kstage_group_export_arrow(s.stage, g.g.handle, KSTAGE_ARROW_PATH_IDS, &e.schema, &e.array));
    CHECK(std::string(e.schema.format) == "+s");
    REQUIRE(e.schema.n_children == 2);
    CHECK(std::string(e.schema.children[0]->name) == "path");
    CHECK(std::string(e.schema.children[0]->format) == "L");
    CHECK(std::string(e.schema.children[1]->name) == "x");
    const ArrowArray& a = e.array.array;
    CHECK(a.length == 3);
    REQUIRE(a.n_children == 2);
    CHECK(values<uint64_t>(e.array, *a.children[0], 1, 3) ==
          std::vector<uint64_t>(prims.begin(), prims.end()));
    CHECK(values<float>(e.array, *a.children[1], 1, 3) == std::vector<float>{7, 8, 9});
    // A child moved out lives on its own after the parent is released (the specification's
    // "moving child arrays"): the consumer releases it.
    ArrowArray moved = *a.children[1];
    a.children[1]->release = nullptr;
    e.array.array.release(&e.array.array);
    CHECK(values<float>(e.array, moved, 1, 3) == std::vector<float>{7, 8, 9});
    moved.release(&moved);
    CHECK(moved.release == nullptr);
  }
  {
    OneGroup g(s, q, x);
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, KSTAGE_ARROW_PATH_STRINGS, &e.schema,
                                    &e.array));
    const ArrowSchema& path = *e.schema.children[0];
    CHECK(std::string(path.format) == "i");
    REQUIRE(path.dictionary != nullptr);
    CHECK(std::string(path.dictionary->format) == "U");
    const ArrowArray& p = *e.array.array.children[0];
    CHECK(values<int32_t>(e.array, p, 1, 3) == std::vector<int32_t>{0, 1, 2});
    REQUIRE(p.dictionary != nullptr);
    const auto offsets = values<int64_t>(e.array, *p.dictionary, 1, 4);
    const auto chars = buffer(e.array, *p.dictionary, 2, size_t(offsets[3]));
    for (size_t i = 0; i < 3; ++i)
      CHECK(std::string(chars.begin() + offsets[i], chars.begin() + offsets[i + 1]) ==
            s.path_string(prims[i]));
  }
  {  // TOKEN_ID is uint64
    OneGroup g(s, q, owner);
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.g.handle, 0, &e.schema, &e.array));
    CHECK(std::string(e.schema.format) == "L");
    CHECK(values<uint64_t>(e.array, e.array.array, 1, 3) == tokens);
  }
}

TEST_CASE(
    "a group whose prims are a progression exports its path column; a record batch read "
    "with prims_as_progression is the same batch",
    "[arrow][ranges]") {
  // Regression: the group's `prims` is NULL then (kstage_read_desc_t::prims_as_progression), and
  // both exports read it.
  Stage s(host_execution());
  const kstage_token_t x = s.token("x");
  const kstage_path_t first = s.range("/cells", "c", 0, 6);
  const kstage_query_t all = s.range_query(first);
  s.write_f32(all, x, 1, {0, 1, 2, 3, 4, 5});
  s.seal(1);
  kstage_query_t odd = 0;
  KS_OK(kstage_query_range(s.stage, first, 1, 0, 2, &odd));  // members 1, 3, 5
  const std::vector<uint64_t> odd_ids = {first + 1, first + 3, first + 5};
  kstage_read_desc_t d = kstage_read_desc_init();
  d.compact = true;
  d.prims_as_progression = true;
  if (kOnDevice) d.target_device = DLDevice{kDLCPU, 0};
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  KS_OK(kstage_read_attributes(s.stage, odd, &x, 1, &d, &r));
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  REQUIRE(g.prims == nullptr);
  REQUIRE(g.prim_count == 3);
  for (uint64_t flags : {uint64_t(KSTAGE_ARROW_PATH_IDS), uint64_t(KSTAGE_ARROW_PATH_STRINGS)}) {
    CAPTURE(flags);
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.handle, flags, &e.schema, &e.array));
    REQUIRE(e.array.array.n_children == 2);
    CHECK(e.array.array.length == 3);
    CHECK(values<float>(e.array, *e.array.array.children[1], 1, 3) == std::vector<float>{1, 3, 5});
    const ArrowArray& path = *e.array.array.children[0];
    if (flags == KSTAGE_ARROW_PATH_IDS) {
      CHECK(values<uint64_t>(e.array, path, 1, 3) == odd_ids);
    } else {
      REQUIRE(path.dictionary != nullptr);
      const auto offsets = values<int64_t>(e.array, *path.dictionary, 1, 4);
      const auto chars = buffer(e.array, *path.dictionary, 2, size_t(offsets[3]));
      CHECK(std::string(chars.begin(), chars.end()) == "/cells/c1/cells/c3/cells/c5");
    }
  }
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  // A record batch of the same query, read with the flag: its rows are the query's prims.
  Exported e;
  KS_OK(kstage_read_export_arrow(s.stage, odd, &x, 1, &d, KSTAGE_ARROW_PATH_IDS, &e.schema,
                                 &e.array));
  REQUIRE(e.array.array.n_children == 2);
  CHECK(values<uint64_t>(e.array, *e.array.array.children[0], 1, 3) == odd_ids);
  CHECK(values<float>(e.array, *e.array.array.children[1], 1, 3) == std::vector<float>{1, 3, 5});
}

TEST_CASE("Arrow export errors name the input and leave the out-structs untouched",
          "[arrow][errors]") {
  Stage s(host_execution());
  const kstage_token_t x = s.token("x"), half = s.token("half");
  const auto prims = s.paths("/p", 2);
  const kstage_query_t q = ordered(s, prims);
  s.write_f32(q, x, 1, {1, 2});
  std::vector<uint16_t> bf = {1, 2};
  int64_t shape[1] = {2};
  DLTensor tb = tensor(bf.data(), DLDataType{kDLBfloat, 16, 1}, 1, shape);
  KS_OK(s.write(q, half, 1, write_data(&tb)));
  s.seal(1);
  OneGroup g(s, q, x);
  ArrowSchema schema{};
  ArrowDeviceArray array{};
  std::memset(&schema, 0xab, sizeof schema);
  std::memset(&array, 0xab, sizeof array);
  const ArrowSchema schema_before = schema;
  auto untouched = [&] {
    CHECK(std::memcmp(&schema, &schema_before, sizeof schema) == 0);
    const auto* b = reinterpret_cast<const unsigned char*>(&array);
    for (size_t i = 0; i < sizeof array; ++i) REQUIRE(b[i] == 0xab);
  };
  KS_FAILS(kstage_group_export_arrow(s.stage, g.g.handle, 0, nullptr, &array),
           KSTAGE_INVALID_ARGUMENT, "schema");
  KS_FAILS(kstage_group_export_arrow(s.stage, g.g.handle, 0, &schema, nullptr),
           KSTAGE_INVALID_ARGUMENT, "array");
  KS_FAILS(kstage_group_export_arrow(s.stage, g.g.handle, 1u << 5, &schema, &array),
           KSTAGE_INVALID_ARGUMENT, "unknown bits");
  KS_FAILS(
      kstage_group_export_arrow(s.stage, g.g.handle,
                                KSTAGE_ARROW_PATH_IDS | KSTAGE_ARROW_PATH_STRINGS, &schema, &array),
      KSTAGE_INVALID_ARGUMENT, "not both");
  KS_FAILS(kstage_group_export_arrow(s.stage, g.g.handle + 1000, 0, &schema, &array),
           KSTAGE_INVALID_HANDLE, "");
  KS_FAILS(kstage_group_export_arrow(s.stage + 99, g.g.handle, 0, &schema, &array),
           KSTAGE_INVALID_HANDLE, "");
  untouched();
  {
    OneGroup gb(s, q, half);
    KS_FAILS(kstage_group_export_arrow(s.stage, gb.g.handle, 0, &schema, &array),
             KSTAGE_NOT_SUPPORTED, "'half' is bfloat16");
    untouched();
  }
  // A released group is a stale handle.
  const kstage_group_t h = g.g.handle;
  g.release();
  KS_FAILS(kstage_group_export_arrow(s.stage, h, 0, &schema, &array), KSTAGE_INVALID_HANDLE, "");
  untouched();
  // A tombstone group has no values.
  KS_OK(s.remove(ordered(s, {prims[0]}), {x}, 2));
  s.seal(2);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.change_range = true;
  d.range_begin = d.range_end = 2;
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &x, 1, &d, &r));
  kstage_read_group_t tg{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &tg));
  REQUIRE(tg.is_delete);
  KS_FAILS(kstage_group_export_arrow(s.stage, tg.handle, 0, &schema, &array),
           KSTAGE_INVALID_ARGUMENT, "tombstone");
  untouched();
  KS_OK(kstage_release_group(s.stage, tg.handle));
  KS_OK(kstage_release_read(s.stage, r));
}

TEST_CASE(
    "a read of several attributes is a record batch: the query's prims as rows, nulls where a prim "
    "lacks an attribute",
    "[arrow][record_batch]") {
  Stage s(host_execution());
  const kstage_token_t x = s.token("x"), sparse = s.token("sparse"), nbrs = s.token("neighbours"),
                       never = s.token("never");
  const auto prims = s.paths("/p", 4);
  const kstage_query_t q = ordered(s, prims);
  s.write_f32(q, x, 1, {1, 2, 3, 4, 5, 6, 7, 8}, 2);
  s.write_f32(ordered(s, {prims[0], prims[2]}), sparse, 1, {10, 30});
  std::vector<std::vector<int32_t>> rows = {{1}, {2, 3}, {}, {4, 5, 6}};
  std::vector<int64_t> shapes = {1, 2, 0, 3};
  std::vector<DLTensor> rt;
  for (size_t i = 0; i < rows.size(); ++i)
    rt.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), i32(), 1, &shapes[i]));
  KS_OK(s.write(q, nbrs, 1, write_data(rt.data(), rt.size(), true)));
  s.seal(1);
  const kstage_token_t all3[3] = {x, sparse, nbrs};

  kstage_read_desc_t to_host = kstage_read_desc_init();
  to_host.target_device = DLDevice{kDLCPU, 0};
  if (kOnDevice) {  // nulls are gathered on the host: a batch of device columns that needs them is
                    // refused
    ArrowSchema schema{};
    ArrowDeviceArray array{};
    KS_FAILS(kstage_read_export_arrow(s.stage, q, all3, 3, nullptr, 0, &schema, &array),
             KSTAGE_NOT_SUPPORTED, "'sparse'");
    CHECK(array.array.release == nullptr);
    // Whole columns stay on the device, zero-copy.
    Exported e;
    const kstage_token_t whole[1] = {x};
    KS_OK(kstage_read_export_arrow(s.stage, q, whole, 1, nullptr, 0, &e.schema, &e.array));
    CHECK(e.array.device_type == int32_t(kResidency.device_type));
    CHECK(values<float>(e.array, *e.array.array.children[0]->children[0], 1, 8) ==
          std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  }
  Exported e;
  KS_OK(kstage_read_export_arrow(s.stage, q, all3, 3, kOnDevice ? &to_host : nullptr,
                                 KSTAGE_ARROW_PATH_IDS, &e.schema, &e.array));
  CHECK(std::string(e.schema.format) == "+s");
  REQUIRE(e.schema.n_children == 4);
  CHECK(std::string(e.schema.children[0]->name) == "path");
  CHECK(std::string(e.schema.children[1]->name) == "x");
  CHECK(std::string(e.schema.children[1]->format) == "+w:2");
  CHECK(e.schema.children[1]->flags == 0);  // every prim holds it: not nullable
  CHECK(std::string(e.schema.children[2]->name) == "sparse");
  CHECK((e.schema.children[2]->flags & ARROW_FLAG_NULLABLE) != 0);
  CHECK(std::string(e.schema.children[3]->format) == "+L");
  CHECK(e.array.device_type == ARROW_DEVICE_CPU);
  const ArrowArray& a = e.array.array;
  CHECK(a.length == 4);
  REQUIRE(a.n_children == 4);
  CHECK(values<uint64_t>(e.array, *a.children[0], 1, 4) ==
        std::vector<uint64_t>(prims.begin(), prims.end()));
  CHECK(values<float>(e.array, *a.children[1]->children[0], 1, 8) ==
        std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  const ArrowArray& sp = *a.children[2];
  CHECK(sp.null_count == 2);
  REQUIRE(sp.buffers[0] != nullptr);
  const auto valid = buffer(e.array, sp, 0, 1);
  CHECK((valid[0] & 0x0f) == 0x05);  // prims 0 and 2
  const auto sv = values<float>(e.array, sp, 1, 4);
  CHECK(sv[0] == 10);
  CHECK(sv[2] == 30);
  const ArrowArray& nb = *a.children[3];
  CHECK(values<int64_t>(e.array, nb, 1, 5) == std::vector<int64_t>{0, 1, 3, 3, 6});
  CHECK(values<int32_t>(e.array, *nb.children[0], 1, 6) == std::vector<int32_t>{1, 2, 3, 4, 5, 6});

  // A query in another order than the column (gathered), and an attribute no prim holds.
  Exported r;
  const kstage_token_t two[2] = {x, never};
  KS_OK(kstage_read_export_arrow(s.stage, ordered(s, {prims[3], prims[1]}), two, 2,
                                 kOnDevice ? &to_host : nullptr, 0, &r.schema, &r.array));
  REQUIRE(r.array.array.n_children == 2);
  CHECK(values<float>(r.array, *r.array.array.children[0]->children[0], 1, 4) ==
        std::vector<float>{7, 8, 3, 4});
  CHECK(std::string(r.schema.children[1]->format) == "n");
  CHECK(r.array.array.children[1]->null_count == 2);

  // Errors: no attributes, bad flags, a stale query, columns on two devices; the structs stay
  // untouched.
  ArrowSchema schema{};
  ArrowDeviceArray array{};
#if defined(KSTAGE_TEST_EMULATED_DEVICE)
  if (!kOnDevice) {  // a column on the emulated device beside the host's: an Arrow batch is on one
    kstage_map_desc_t md = kstage_map_desc_init();
    md.attribute = s.token("on_device");
    md.dtype = f32();
    md.residency = DLDevice{DLDeviceType(KSTAGE_EMULATED_DEVICE_TYPE), 0};
    kstage_map_t map = 0;
    KS_OK(kstage_map_attribute(s.stage, q, &md, 2, nullptr, 0, &map));
    kstage_map_group_info_t mg{};
    KS_OK(kstage_fetch_map_next(s.stage, map, 0, &mg));
    const std::vector<float> four = {1, 2, 3, 4};
    host_write(mg.data.tensors[0].data, four.data(), sizeof(float) * 4, mg.data.tensors[0].device);
    kstage_op_t op = 0;
    KS_OK(kstage_unmap_attribute(s.stage, map, kstage_device_sync_t{0, 0}, &op));
    KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
    KS_OK(kstage_release_op(s.stage, op));
    s.seal(2, {md.attribute});
    const kstage_token_t mixed[2] = {x, md.attribute};
    KS_FAILS(kstage_read_export_arrow(s.stage, q, mixed, 2, nullptr, 0, &schema, &array),
             KSTAGE_NOT_SUPPORTED, "different devices");
  }
#endif
  KS_FAILS(kstage_read_export_arrow(s.stage, q, all3, 0, nullptr, 0, &schema, &array),
           KSTAGE_INVALID_ARGUMENT, "at least one");
  KS_FAILS(kstage_read_export_arrow(s.stage, q, nullptr, 2, nullptr, 0, &schema, &array),
           KSTAGE_INVALID_ARGUMENT, "NULL");
  KS_FAILS(kstage_read_export_arrow(s.stage, q, all3, 3, nullptr, 8, &schema, &array),
           KSTAGE_INVALID_ARGUMENT, "unknown bits");
  KS_FAILS(kstage_read_export_arrow(s.stage, q + 1000, all3, 3, nullptr, 0, &schema, &array),
           KSTAGE_INVALID_HANDLE, "");
  KS_FAILS(kstage_read_export_arrow(s.stage, q, all3, 3, nullptr, 0, nullptr, &array),
           KSTAGE_INVALID_ARGUMENT, "schema");
  CHECK(array.array.release == nullptr);
  CHECK(schema.release == nullptr);
}

TEST_CASE("a name held in several schemas: a group per schema exports, a record batch refuses",
          "[arrow][record_batch][schemas]") {
  Stage s(host_execution());
  const kstage_token_t m = s.token("m");
  const auto prims = s.paths("/sch", 3);
  const kstage_query_t q = ordered(s, prims);
  s.write_f32(ordered(s, {prims[0], prims[1]}), m, 1, {1, 2});
  std::vector<double> d = {3};
  int64_t one[1] = {1};
  DLTensor t = tensor(d.data(), f64(), 1, one);
  KS_OK(s.write(ordered(s, {prims[2]}), m, 1, write_data(&t)));
  s.seal(1);
  kstage_read_desc_t to_host = kstage_read_desc_init();
  to_host.target_device = DLDevice{kDLCPU, 0};
  ArrowSchema schema{};
  ArrowDeviceArray array{};
  KS_FAILS(kstage_read_export_arrow(s.stage, q, &m, 1, &to_host, 0, &schema, &array),
           KSTAGE_NOT_SUPPORTED,
           "attribute 'm' is held in several schemas by the query's prims (float32 NONE and "
           "float64 NONE)");
  CHECK(array.array.release == nullptr);
  CHECK(schema.release == nullptr);
  // Each group is one schema: "f" and "g".
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &m, 1, nullptr, &r));
  std::vector<std::string> formats;
  kstage_read_group_t g{};
  while (kstage_fetch_read_next(s.stage, r, 0, &g) == KSTAGE_OK) {
    Exported e;
    KS_OK(kstage_group_export_arrow(s.stage, g.handle, 0, &e.schema, &e.array));
    formats.emplace_back(e.schema.format);
    KS_OK(kstage_release_group(s.stage, g.handle));
  }
  KS_OK(kstage_release_read(s.stage, r));
  std::sort(formats.begin(), formats.end());
  CHECK(formats == std::vector<std::string>{"f", "g"});
  // The prims of one schema export as one column.
  Exported e;
  KS_OK(kstage_read_export_arrow(s.stage, ordered(s, {prims[0], prims[1]}), &m, 1, &to_host, 0,
                                 &e.schema, &e.array));
  CHECK(std::string(e.schema.children[0]->format) == "f");
}
