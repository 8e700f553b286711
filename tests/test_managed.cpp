// SPDX-License-Identifier: Apache-2.0
// managed_tensors (DLManagedTensorVersioned): the stage owns them from the
// call on, and calls each deleter exactly once -- after a successful write,
// and just as well when the call is rejected, whatever the reason. Under
// ASan these tests also prove there is no leak and no double free.
#include <atomic>
#include <mutex>
#include <thread>

#include "support.hpp"

using namespace kstage_test;

namespace {

// Deleter calls per tensor id, across the whole program.
struct Ledger {
  std::mutex m;
  std::map<int, int> calls;
  int next_id = 0;

  void reset() {
    std::lock_guard lock(m);
    calls.clear();
  }
  int open() {
    std::lock_guard lock(m);
    const int id = ++next_id;
    calls[id] = 0;
    return id;
  }
  void record(int id) {
    std::lock_guard lock(m);
    ++calls[id];
  }
  int of(int id) {
    std::lock_guard lock(m);
    return calls.count(id) ? calls[id] : -1;
  }
  int total() {
    std::lock_guard lock(m);
    int n = 0;
    for (auto& [id, c] : calls) n += c;
    return n;
  }
  // Every tensor made since reset() was deleted exactly once.
  bool all_once() {
    std::lock_guard lock(m);
    for (auto& [id, c] : calls)
      if (c != 1) return false;
    return true;
  }
};
Ledger ledger;

// The manager context: owns the element bytes and the shape.
struct Ctx {
  int id = 0;
  std::vector<unsigned char> bytes;
  int64_t shape[2] = {0, 0};
};

// The deleter of both DLPack structs: records the call, frees the context.
template <class Managed>
void counting_deleter(Managed* self) {
  Ctx* ctx = static_cast<Ctx*>(self->manager_ctx);
  ledger.record(ctx->id);
  delete ctx;
  delete self;
}

// A new context holding a copy of `values`, with a fresh ledger id.
template <class T>
Ctx* new_ctx(const std::vector<T>& values) {
  auto* ctx = new Ctx;
  ctx->id = ledger.open();
  ctx->bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(ctx->bytes.data(), values.data(), ctx->bytes.size());
  return ctx;
}

struct Made {
  DLManagedTensorVersioned* t = nullptr;
  int id = 0;
};

// A managed tensor over a copy of `values` (rows = values.size() / lanes, or
// shape (rows, inner) when inner > 0), version {1, 0}, owning its context.
template <class T>
Made make_managed(const std::vector<T>& values, DLDataType dtype, int64_t inner = 0) {
  Ctx* ctx = new_ctx(values);
  const int64_t elems = int64_t(values.size()) / int64_t(dtype.lanes);
  int ndim = 1;
  if (inner > 0) {
    ndim = 2;
    ctx->shape[0] = elems / inner;
    ctx->shape[1] = inner;
  } else {
    ctx->shape[0] = elems;
  }
  auto* m = new DLManagedTensorVersioned{};
  m->version.major = DLPACK_MAJOR_VERSION;
  m->version.minor = 0;
  m->manager_ctx = ctx;
  m->deleter = counting_deleter<DLManagedTensorVersioned>;
  m->flags = 0;
  m->dl_tensor = tensor(ctx->bytes.empty() ? nullptr : ctx->bytes.data(), dtype, ndim, ctx->shape);
  return Made{m, ctx->id};
}

Made managed_f32(const std::vector<float>& values, uint16_t lanes = 1) {
  return make_managed(values, f32(lanes));
}

kstage_write_data_t managed_data(DLManagedTensorVersioned* const* tensors, uint64_t n,
                                 bool is_array = false) {
  kstage_write_data_t w = kstage_write_data_init();
  w.managed_tensors = tensors;
  w.tensor_count = n;
  w.is_array = is_array;
  return w;
}

// Sealed float values per prim.
// (Stage::floats would hand memcpy a NULL pointer for an empty array row.)
std::map<kstage_path_t, std::vector<float>> sealed(Stage& s, kstage_query_t q, kstage_token_t a) {
  std::map<kstage_path_t, std::vector<float>> m;
  for (auto& [p, bytes] : s.values(q, a)) {
    std::vector<float> f(bytes.size() / sizeof(float));
    if (!f.empty()) std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
    m[p] = f;
  }
  return m;
}

// Sealed float values of `prims`, concatenated in their order.
std::vector<float> in_order(Stage& s, const std::vector<kstage_path_t>& prims, kstage_query_t q,
                            kstage_token_t a) {
  auto m = s.floats(q, a);
  std::vector<float> out;
  for (kstage_path_t p : prims) out.insert(out.end(), m[p].begin(), m[p].end());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Successful writes

TEST_CASE("a managed write with every mask bit set is a dense write", "[managed][mask]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/fm", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("points");
  Made m = managed_f32({0, 1, 2, 3}, 1);
  DLManagedTensorVersioned* list[1] = {m.t};
  kstage_write_data_t w = managed_data(list, 1);
  const uint64_t all = 0xF;
  w.count = 4;
  w.mask = &all;
  KS_OK(s.write(q, attr, 1, w));
  // A host column adopts it like a dense write; a device column copies it (deleted at once).
  REQUIRE(ledger.of(m.id) == (kOnDevice ? 1 : 0));
  s.seal(1);
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, nullptr, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  REQUIRE(g.prim_count == 4);
  if (!kOnDevice) REQUIRE(g.data.tensors[0].data == m.t->dl_tensor.data);
  const std::vector<float> v = group_floats(g, 0, 4);
  for (int i = 0; i < 4; ++i) REQUIRE(v[size_t(i)] == float(i));
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  KS_OK(kstage_destroy(s.stage));
  s.stage = 0;
  REQUIRE(ledger.all_once());
}

// A sparse (index_map or mask) write of a managed tensor to a host column
// keeps the tensor, not a copy: the seal reads its rows through the
// selection, moving each row once, and then lets it go. A device column
// copies it at write time, like any host source.
TEST_CASE("a sparse managed write is kept until its seal, then deleted once", "[managed][sparse]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/sp", 8);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("v");
  std::vector<float> base(16);
  for (size_t i = 0; i < 16; ++i) base[i] = -float(i);
  s.write_f32(q, attr, 1, base, 2);
  s.seal(1);
  // The source: 6 rows of float32 x 2, row r = {10r, 10r + 1}.
  std::vector<float> src(12);
  for (size_t r = 0; r < 6; ++r) src[2 * r] = 10.f * r, src[2 * r + 1] = 10.f * r + 1;
  auto expect = base;  // sealed values after the write, row-major per prim
  auto put = [&](size_t prim, size_t row) {
    expect[2 * prim] = src[2 * row];
    expect[2 * prim + 1] = src[2 * row + 1];
  };
  Made m = managed_f32(src, 2);
  DLManagedTensorVersioned* list[1] = {m.t};
  kstage_write_data_t w = managed_data(list, 1);
  std::vector<uint32_t> map;
  uint64_t mask = 0;
  SECTION("a random index_map") {
    map = {5, 0, 3, 3, 1};
    for (size_t i = 0; i < map.size(); ++i) put(i, map[i]);
  }
  SECTION("an index_map that is a progression") {
    map = {1, 2, 3, 4, 5};
    for (size_t i = 0; i < map.size(); ++i) put(i, map[i]);
  }
  SECTION("an index_map that broadcasts one row") {
    map = {4, 4, 4};
    for (size_t i = 0; i < map.size(); ++i) put(i, map[i]);
  }
  SECTION("a mask") {
    mask = 0b101101;
    for (size_t e = 0; e < 6; ++e)
      if (mask >> e & 1) put(e, e);
  }
  // The same maps as int64 entries (index_map64): converted at the call, kept the same way.
  bool wide = false;
  SECTION("a random index_map64") {
    map = {5, 0, 3, 3, 1};
    wide = true;
    for (size_t i = 0; i < map.size(); ++i) put(i, map[i]);
  }
  SECTION("an index_map64 that is a progression") {
    map = {1, 2, 3, 4, 5};
    wide = true;
    for (size_t i = 0; i < map.size(); ++i) put(i, map[i]);
  }
  const std::vector<int64_t> map64(map.begin(), map.end());
  if (mask) {
    w.count = 6;
    w.mask = &mask;
  } else if (wide) {
    w.count = map64.size();
    w.index_map64 = map64.data();
  } else {
    w.count = map.size();
    w.index_map = map.data();
  }
  KS_OK(s.write(q, attr, 2, w));
  REQUIRE(ledger.of(m.id) == (kOnDevice ? 1 : 0));
  REQUIRE(in_order(s, prims, q, attr) == base);  // invisible until sealed
  if (!kOnDevice) {
    // Kept, not copied: the seal reads the tensor's memory as it is then (a producer hands it
    // over; only this test still writes into it, to show that no copy was made).
    auto* rows = static_cast<float*>(m.t->dl_tensor.data);
    for (size_t i = 0; i < 12; ++i) rows[i] += 0.5f, src[i] += 0.5f;
    expect = base;
    if (mask) {
      for (size_t e = 0; e < 6; ++e)
        if (mask >> e & 1) put(e, e);
    } else {
      for (size_t i = 0; i < map.size(); ++i) put(i, map[i]);
    }
  }
  s.seal(2);
  REQUIRE(ledger.of(m.id) == 1);  // the seal moved its rows: released
  REQUIRE(in_order(s, prims, q, attr) == expect);
  KS_OK(kstage_destroy(s.stage));
  s.stage = 0;
  REQUIRE(ledger.all_once());
}

TEST_CASE(
    "a large sparse managed write: its index_map is checked in chunks, the first bad entry named",
    "[managed][sparse]") {
  ledger.reset();
  Stage s(host_execution());
  const size_t n = 200000;  // several of the host's 2^16-entry chunks
  auto prims = s.paths("/big", n);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("v");
  std::vector<float> values(2 * n);  // float32 x 2: wider than an index_map entry
  for (size_t i = 0; i < 2 * n; ++i) values[i] = float(i);
  std::vector<uint32_t> map(n);
  for (size_t i = 0; i < n; ++i) map[i] = uint32_t((i * 7919) % n);  // a permutation
  kstage_write_data_t w;
  {
    Made bad = managed_f32(values, 2);
    DLManagedTensorVersioned* list[1] = {bad.t};
    auto broken = map;
    broken[150000] = uint32_t(n + 5);
    broken[70001] = uint32_t(n);
    w = managed_data(list, 1);
    w.count = n;
    w.index_map = broken.data();
    kstage_op_t op = 0;
    KS_FAILS(kstage_write_attribute(s.stage, q, attr, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "index_map[70001] = 200000 references a source row outside");
    REQUIRE(ledger.of(bad.id) == 1);
  }
  Made m = managed_f32(values, 2);
  DLManagedTensorVersioned* list[1] = {m.t};
  w = managed_data(list, 1);
  w.count = n;
  w.index_map = map.data();
  KS_OK(s.write(q, attr, 1, w));
  REQUIRE(ledger.of(m.id) == (kOnDevice ? 1 : 0));
  s.seal(1);
  REQUIRE(ledger.of(m.id) == 1);
  auto got = s.floats(q, attr);
  REQUIRE(got.size() == n);
  for (size_t i = 0; i < n; i += 997)
    REQUIRE(got[prims[i]] == std::vector<float>{float(2 * map[i]), float(2 * map[i] + 1)});
}

// Keeping the tensor means copying a map that is not a progression for the seal: for rows no
// wider than its 4-byte entries that saves nothing, so those rows are copied as usual.
TEST_CASE("4-byte rows: adopted through a progression, copied through any other index_map",
          "[managed][sparse]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/narrow", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("v");
  s.write_f32(q, attr, 1, {0, 0, 0, 0});
  s.seal(1);
  Made strided = managed_f32({10, 11, 12, 13, 14, 15, 16});
  Made shuffled = managed_f32({20, 21, 22, 23});
  const uint32_t every_other[4] = {0, 2, 4, 6}, reversed[4] = {3, 2, 1, 0};
  DLManagedTensorVersioned* l1[1] = {strided.t};
  kstage_write_data_t w = managed_data(l1, 1);
  w.count = 4;
  w.index_map = every_other;
  KS_OK(s.write(q, attr, 2, w));
  REQUIRE(ledger.of(strided.id) == (kOnDevice ? 1 : 0));
  s.seal(2);
  REQUIRE(in_order(s, prims, q, attr) == std::vector<float>{10, 12, 14, 16});
  DLManagedTensorVersioned* l2[1] = {shuffled.t};
  w = managed_data(l2, 1);
  w.count = 4;
  w.index_map = reversed;
  KS_OK(s.write(q, attr, 3, w));
  REQUIRE(ledger.of(shuffled.id) == 1);
  s.seal(3);
  REQUIRE(in_order(s, prims, q, attr) == std::vector<float>{23, 22, 21, 20});
  REQUIRE(ledger.all_once());
}

// An index_map 0, 1, ..., n-1 over a tensor of n rows writes the tensor as it is: adopted like
// a dense write, so a write of every row takes the tensor itself as the column (zero-copy).
TEST_CASE("an adopted identity index_map is a dense write", "[managed][sparse]") {
  ledger.reset();
  const uint64_t n = GENERATE(uint64_t(1), uint64_t(5), uint64_t(300));
  CAPTURE(n);
  Stage s(host_execution());
  auto prims = s.paths("/ident", n);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("v");
  std::vector<float> values(n), earlier(n, -1.f);
  for (uint64_t i = 0; i < n; ++i) values[i] = float(i) + 0.5f;
  s.write_f32(q, attr, 1, earlier);
  s.seal(1);
  Made m = managed_f32(values);
  std::vector<uint32_t> identity(n);
  for (uint64_t i = 0; i < n; ++i) identity[i] = uint32_t(i);
  DLManagedTensorVersioned* list[1] = {m.t};
  kstage_write_data_t w = managed_data(list, 1);
  w.count = n;
  w.index_map = identity.data();
  KS_OK(s.write(q, attr, 2, w));
  REQUIRE(ledger.of(m.id) == (kOnDevice ? 1 : 0));
  s.seal(2);
  REQUIRE(in_order(s, prims, q, attr) == values);
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, nullptr, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  if (!kOnDevice) REQUIRE(g.data.tensors[0].data == m.t->dl_tensor.data);  // the tensor itself
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  // A later write replaces it; the tensor is deleted once.
  s.write_f32(q, attr, 3, earlier);
  s.seal(3);
  REQUIRE(in_order(s, prims, q, attr) == earlier);
  REQUIRE(ledger.all_once());
}

TEST_CASE("large adopted index_maps: progressions found in parallel blocks, near-misses are not",
          "[managed][sparse]") {
  ledger.reset();
  Stage s(host_execution());
  const size_t n = 200000;
  auto prims = s.paths("/blocks", n);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("v");
  std::vector<float> source(2 * 2 * n);  // 2n rows of float32 x 2
  for (size_t i = 0; i < source.size(); ++i) source[i] = float(i);
  uint64_t ordinal = 0;
  for (const bool near_miss : {true, false}) {
    CAPTURE(near_miss);
    std::vector<uint32_t> map(n);
    for (size_t i = 0; i < n; ++i) map[i] = uint32_t(2 * i);  // every other source row
    if (near_miss) map[150001] = 7;  // past the first 64 entries and the first 2^16-entry block
    Made m = managed_f32(source, 2);
    DLManagedTensorVersioned* list[1] = {m.t};
    kstage_write_data_t w = managed_data(list, 1);
    w.count = n;
    w.index_map = map.data();
    ++ordinal;
    KS_OK(s.write(q, attr, ordinal, w));
    REQUIRE(ledger.of(m.id) == (kOnDevice ? 1 : 0));
    s.seal(ordinal);
    REQUIRE(ledger.of(m.id) == 1);
    auto got = s.floats(q, attr);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i)
      wrong += got[prims[i]] != std::vector<float>{float(2 * map[i]), float(2 * map[i] + 1)};
    REQUIRE(wrong == 0);
  }
}

TEST_CASE("adopted sparse writes keep the rows they do not write, held or not, on any column",
          "[managed][sparse][pinned]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/keep", 6);
  // Rows made in reverse prim order: not an affine column (rows come from its row map).
  std::vector<kstage_path_t> reversed(prims.rbegin(), prims.rend());
  kstage_query_t q = s.query(prims), back = s.query(reversed);
  kstage_token_t attr = s.token("v");
  s.write_f32(back, attr, 1, {60, 61, 50, 51, 40, 41, 30, 31, 20, 21, 10, 11}, 2);
  s.seal(1);
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, nullptr, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  const std::vector<float> held = in_order(s, prims, q, attr);
  // An index_map write of two prims while the group is held.
  Made a = managed_f32({1, 2, 3, 4, 5, 6}, 2);
  DLManagedTensorVersioned* la[1] = {a.t};
  kstage_write_data_t w = managed_data(la, 1);
  const uint32_t map[2] = {2, 0};
  w.count = 2;
  w.index_map = map;
  KS_OK(s.write(q, attr, 2, w));
  s.seal(2);
  REQUIRE(in_order(s, prims, q, attr) ==
          std::vector<float>{5, 6, 1, 2, 30, 31, 40, 41, 50, 51, 60, 61});
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  REQUIRE(held == std::vector<float>{10, 11, 20, 21, 30, 31, 40, 41, 50, 51, 60, 61});
  // A mask over the same column (its rows through the row map), nobody holding it.
  Made b = managed_f32({0, 0, 0, 0, 7, 7, 0, 0, 0, 0, 8, 8}, 2);
  DLManagedTensorVersioned* lb[1] = {b.t};
  w = managed_data(lb, 1);
  const uint64_t mask = 0b100100;
  w.count = 6;
  w.mask = &mask;
  KS_OK(s.write(q, attr, 3, w));
  s.seal(3);
  REQUIRE(in_order(s, prims, q, attr) ==
          std::vector<float>{5, 6, 1, 2, 7, 7, 40, 41, 50, 51, 8, 8});
  REQUIRE(ledger.all_once());
}

TEST_CASE("an adopted sparse write leaves a held group as it was", "[managed][sparse][pinned]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/pin", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("v");
  s.write_f32(q, attr, 1, {1, 2, 3, 4, 5, 6, 7, 8}, 2);
  s.seal(1);
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, nullptr, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  // Every row, through a permutation: the seal gathers into the column's rows in order, which
  // must not be the buffer the group holds.
  Made m = managed_f32({10, 11, 20, 21, 30, 31, 40, 41}, 2);
  DLManagedTensorVersioned* list[1] = {m.t};
  kstage_write_data_t w = managed_data(list, 1);
  const uint32_t map[4] = {3, 2, 1, 0};
  w.count = 4;
  w.index_map = map;
  KS_OK(s.write(q, attr, 2, w));
  REQUIRE(ledger.of(m.id) == (kOnDevice ? 1 : 0));
  s.seal(2);
  REQUIRE(group_floats(g, 0, 8) == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  REQUIRE(in_order(s, prims, q, attr) == std::vector<float>{40, 41, 30, 31, 20, 21, 10, 11});
  // And with nobody holding the storage, in place.
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  Made m2 = managed_f32({5, 6, 7, 8, 9, 10, 11, 12}, 2);
  DLManagedTensorVersioned* list2[1] = {m2.t};
  w = managed_data(list2, 1);
  w.count = 4;
  w.index_map = map;
  KS_OK(s.write(q, attr, 3, w));
  s.seal(3);
  REQUIRE(in_order(s, prims, q, attr) == std::vector<float>{11, 12, 9, 10, 7, 8, 5, 6});
  REQUIRE(ledger.of(m.id) == 1);
  REQUIRE(ledger.of(m2.id) == 1);
}

// A dense fixed-size managed tensor is adopted without a copy: its deleter
// runs when the stage no longer needs the memory (storage replaced, stage
// destroyed), not when the op completes.
TEST_CASE("a fixed-size write adopts its tensor and deletes it exactly once",
          "[host_adoption][managed]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("points");
  Made m = managed_f32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 3);
  DLManagedTensorVersioned* list[1] = {m.t};
  kstage_write_data_t w = managed_data(list, 1);
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, attr, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  REQUIRE(op != 0);
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  REQUIRE(ledger.of(m.id) == 0);  // adopted: the pending write holds it

  // Sealed: the tensor's memory is the column's storage (zero-copy).
  s.seal(1);
  {
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, nullptr, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    REQUIRE(g.data.tensors[0].data == m.t->dl_tensor.data);
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
  }
  REQUIRE(ledger.of(m.id) == 0);
  auto got = sealed(s, q, attr);
  REQUIRE(got.size() == 4);
  for (size_t i = 0; i < 4; ++i)
    REQUIRE(got[prims[i]] == std::vector<float>{3.f * i, 3.f * i + 1, 3.f * i + 2});
  auto groups = s.read(q, {attr});
  REQUIRE(groups[0].dtype.lanes == 3);

  // A managed tensor with convenience shape (N, 3) folds the same way.
  Made folded = make_managed(std::vector<float>{9, 9, 9, 8, 8, 8, 7, 7, 7, 6, 6, 6}, f32(), 3);
  DLManagedTensorVersioned* list2[1] = {folded.t};
  kstage_write_data_t w2 = managed_data(list2, 1);
  KS_OK(s.write(q, attr, 2, w2));
  REQUIRE(ledger.of(folded.id) == 0);
  s.seal(2);
  // The second full write replaced the storage: the first tensor is released.
  REQUIRE(ledger.of(m.id) == 1);
  REQUIRE(sealed(s, q, attr)[prims[3]] == std::vector<float>{6, 6, 6});
  REQUIRE(ledger.of(folded.id) == 0);
  KS_OK(kstage_destroy(s.stage));
  s.stage = 0;
  REQUIRE(ledger.total() == 2);
  REQUIRE(ledger.all_once());
}

TEST_CASE("an array write with 5 per-row managed tensors deletes each once", "[managed][array]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/p", 5);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("rows");
  std::vector<std::vector<float>> rows = {{1, 2, 3}, {}, {4}, {5, 6, 7, 8, 9}, {10, 11}};
  std::vector<Made> made;
  std::vector<DLManagedTensorVersioned*> list;
  for (auto& r : rows) {
    made.push_back(managed_f32(r));
    list.push_back(made.back().t);
  }
  REQUIRE(list[1]->dl_tensor.data == nullptr);  // an empty row with no data at all
  kstage_write_data_t w = managed_data(list.data(), list.size(), true);
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, attr, 1, &w, KSTAGE_PRIM_MODE_INSERT, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  for (const Made& m : made) REQUIRE(ledger.of(m.id) == 1);
  REQUIRE(ledger.total() == 5);
  s.seal(1);
  auto got = sealed(s, q, attr);
  for (size_t i = 0; i < 5; ++i) REQUIRE(got[prims[i]] == rows[i]);

  // A packed managed tensor with an index_map: still one deleter call.
  Made packed = managed_f32({100, 101, 200, 201});
  DLManagedTensorVersioned* one[1] = {packed.t};
  kstage_write_data_t wp = managed_data(one, 1, true);
  const uint32_t map[3] = {1, 0, 1};
  wp.count = 3;
  wp.index_map = map;
  KS_OK(s.write(q, attr, 2, wp));
  REQUIRE(ledger.of(packed.id) == 1);
  s.seal(2);
  got = sealed(s, q, attr);
  REQUIRE(got[prims[0]] == std::vector<float>{200, 201});
  REQUIRE(got[prims[1]] == std::vector<float>{100, 101});
  REQUIRE(got[prims[2]] == std::vector<float>{200, 201});
  REQUIRE(got[prims[3]] == rows[3]);
  REQUIRE(ledger.total() == 6);
  REQUIRE(ledger.all_once());
}

TEST_CASE("a batch write deletes the managed tensors of every entry once",
          "[host_adoption][managed][batch]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attrs[3] = {s.token("mass"), s.token("name"), s.token("plain")};
  Made mass = managed_f32({1.5f, 2.5f, 3.5f});
  Made r0 = make_managed(std::vector<uint8_t>{'a', 'b'}, u8());
  Made r1 = make_managed(std::vector<uint8_t>{}, u8());
  Made r2 = make_managed(std::vector<uint8_t>{'x', 'y', 'z'}, u8());
  DLManagedTensorVersioned* l0[1] = {mass.t};
  DLManagedTensorVersioned* l1[3] = {r0.t, r1.t, r2.t};
  std::vector<float> plain = {7, 8, 9};
  int64_t shape[1] = {3};
  DLTensor client = tensor(plain.data(), f32(), 1, shape);  // a client entry alongside
  kstage_write_data_t data[3] = {managed_data(l0, 1), managed_data(l1, 3, true),
                                 write_data(&client)};
  data[1].semantic = KSTAGE_SEMANTIC_STRING;
  kstage_op_t op = 0;
  KS_OK(kstage_write_attributes(s.stage, q, attrs, data, 3, 1, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
  // Array rows are copied (deleted now); the dense fixed one is adopted.
  for (const Made& m : {r0, r1, r2}) REQUIRE(ledger.of(m.id) == 1);
  REQUIRE(ledger.of(mass.id) == 0);
  s.seal(1);
  auto m = sealed(s, q, attrs[0]);
  REQUIRE(m[prims[0]] == std::vector<float>{1.5f});
  REQUIRE(m[prims[2]] == std::vector<float>{3.5f});
  auto names = s.values(q, attrs[1]);
  REQUIRE(names[prims[0]] == std::vector<unsigned char>{'a', 'b'});
  REQUIRE(names[prims[1]].empty());
  REQUIRE(names[prims[2]] == std::vector<unsigned char>{'x', 'y', 'z'});
  REQUIRE(sealed(s, q, attrs[2])[prims[1]] == std::vector<float>{8});
  KS_OK(kstage_destroy(s.stage));
  s.stage = 0;
  REQUIRE(ledger.total() == 4);
  REQUIRE(ledger.all_once());
}

TEST_CASE("a deleter == NULL tensor is accepted and the write works", "[managed]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/p", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  std::vector<float> v = {4, 5};
  int64_t shape[1] = {2};
  DLManagedTensorVersioned m{};
  m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  m.manager_ctx = nullptr;
  m.deleter = nullptr;  // nothing to call: the producer keeps ownership of the memory
  m.dl_tensor = tensor(v.data(), f32(), 1, shape);
  DLManagedTensorVersioned* list[1] = {&m};
  kstage_write_data_t w = managed_data(list, 1);
  KS_OK(s.write(q, attr, 1, w));
  // The stage read the tensor and left the struct alone.
  REQUIRE(m.dl_tensor.data == v.data());
  REQUIRE(m.deleter == nullptr);
  s.seal(1);
  auto got = sealed(s, q, attr);
  REQUIRE(got[prims[0]] == std::vector<float>{4});
  REQUIRE(got[prims[1]] == std::vector<float>{5});

  // Rejected with deleter == NULL: nothing is called, nothing crashes.
  m.dl_tensor.dtype = i32();
  kstage_op_t op = 1;
  KS_FAILS(kstage_write_attribute(s.stage, q, attr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "the write's dtype int32 does not match its dtype float32");
  REQUIRE(op == 1);
  REQUIRE(ledger.total() == 0);
}

TEST_CASE("READ_ONLY and newer-minor tensors are fine to write from", "[host_adoption][managed]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/p", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t attr = s.token("a");
  Made ro = managed_f32({1, 2, 3});
  ro.t->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  DLManagedTensorVersioned* list[1] = {ro.t};
  KS_OK(s.write(q, attr, 1, managed_data(list, 1)));
  REQUIRE(ledger.of(ro.id) == 0);  // adopted

  // Same major, newer minor: the ABI is compatible, so it is accepted.
  Made minor = managed_f32({4, 5, 6});
  minor.t->version.minor = 7;
  minor.t->flags = DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED;
  DLManagedTensorVersioned* list2[1] = {minor.t};
  KS_OK(s.write(q, attr, 2, managed_data(list2, 1)));
  REQUIRE(ledger.of(minor.id) == 0);
  s.seal(1);
  REQUIRE(sealed(s, q, attr)[prims[2]] == std::vector<float>{3});
  // The column's storage is now the READ_ONLY tensor: a sparse update must
  // copy it first and leave the producer's memory untouched.
  std::vector<float> one = {42};
  int64_t shape[1] = {1};
  DLTensor t = tensor(one.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.count = 1;
  KS_OK(s.write(q, attr, 2, w));
  s.seal(2);
  auto got = sealed(s, q, attr);
  REQUIRE(got[prims[0]] == std::vector<float>{42});
  REQUIRE(got[prims[2]] == std::vector<float>{6});
  REQUIRE(ledger.of(ro.id) == 1);  // replaced by the full write at ordinal 2
  // `minor` (READ_ONLY) was copied, not written in place, by the sparse
  // update: the copy replaced it as storage, so it has been released.
  REQUIRE(ledger.of(minor.id) == 1);
  KS_OK(kstage_destroy(s.stage));
  s.stage = 0;
  REQUIRE(ledger.total() == 2);
  REQUIRE(ledger.all_once());
}

TEST_CASE("an unsealed managed write is not deleted again when the stage is destroyed",
          "[host_adoption][managed]") {
  ledger.reset();
  Made m = managed_f32({1, 2});
  {
    Stage s(host_execution());
    kstage_query_t q = s.query(s.paths("/p", 2));
    DLManagedTensorVersioned* list[1] = {m.t};
    KS_OK(s.write(q, s.token("a"), 5, managed_data(list, 1)));
    REQUIRE(ledger.of(m.id) == 0);  // adopted by the pending write
    // No seal: the write is still pending when the stage goes.
  }
  REQUIRE(ledger.of(m.id) == 1);
  REQUIRE(ledger.total() == 1);
}

// A producer's deleter may call back into the stage (Python's takes the GIL, which another
// thread may hold while it waits for the stage): the seal releases what it lets go of -- a
// sealed sparse write's adopted tensor, a column's replaced adopted storage -- after its lock.
namespace {
kstage_stage_t g_calling_stage = 0;
std::atomic<int> g_callbacks{0};
void calling_deleter(DLManagedTensorVersioned* self) {
  uint64_t floor = 0;
  if (kstage_get_write_floor(g_calling_stage, 0, &floor) == KSTAGE_OK) ++g_callbacks;
  counting_deleter<DLManagedTensorVersioned>(self);
}
}  // namespace

TEST_CASE("a deleter that calls the stage runs after the seal's lock", "[managed][sparse]") {
  ledger.reset();
  g_callbacks = 0;
  Stage s(host_execution());
  g_calling_stage = s.stage;
  auto prims = s.paths("/cb", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");
  // Dense: adopted as the column's storage, replaced by the sparse write's seal (which
  // allocates fresh storage: the adopted buffer is read-only).
  Made dense = managed_f32({1, 2, 3, 4}, 2);
  dense.t->deleter = calling_deleter;
  dense.t->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  DLManagedTensorVersioned* l1[1] = {dense.t};
  KS_OK(s.write(q, a, 1, managed_data(l1, 1)));
  s.seal(1);
  // Sparse: kept by the pending write, released once it is sealed.
  Made sparse = managed_f32({7, 8, 9, 10}, 2);
  sparse.t->deleter = calling_deleter;
  DLManagedTensorVersioned* l2[1] = {sparse.t};
  kstage_write_data_t w = managed_data(l2, 1);
  const uint32_t map[1] = {1};
  w.count = 1;
  w.index_map = map;
  KS_OK(s.write(q, a, 2, w));
  s.seal(2);
  REQUIRE(ledger.of(sparse.id) == 1);
  REQUIRE(ledger.of(dense.id) == 1);  // (a device column copied both at their writes)
  REQUIRE(g_callbacks == 2);
  REQUIRE(in_order(s, prims, q, a) == std::vector<float>{9, 10, 3, 4});
}

TEST_CASE("a pending sparse managed write is deleted once when the stage is destroyed",
          "[managed][sparse]") {
  ledger.reset();
  Made m = managed_f32({1, 2, 3, 4, 5, 6}, 2);
  {
    Stage s(host_execution());
    kstage_query_t q = s.query(s.paths("/p", 2));
    kstage_token_t a = s.token("a");
    s.write_f32(q, a, 1, {0, 0, 0, 0}, 2);
    s.seal(1);
    DLManagedTensorVersioned* list[1] = {m.t};
    kstage_write_data_t w = managed_data(list, 1);
    const uint32_t map[2] = {2, 0};
    w.count = 2;
    w.index_map = map;
    KS_OK(s.write(q, a, 5, w));
    REQUIRE(ledger.of(m.id) == (kOnDevice ? 1 : 0));
  }
  REQUIRE(ledger.of(m.id) == 1);
  REQUIRE(ledger.total() == 1);
}

// ---------------------------------------------------------------------------
// Rejected calls

TEST_CASE("every rejected call deletes each managed tensor exactly once", "[managed][errors]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/p", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");      // fixed float32
  kstage_token_t arr = s.token("arr");  // array float32
  kstage_token_t fresh = s.token("fresh");
  s.write_f32(q, a, 1, {1, 2, 3, 4});
  {
    std::vector<std::vector<float>> rows = {{1}, {}, {2, 3}, {4}};
    std::vector<int64_t> shapes = {1, 0, 2, 1};
    std::vector<DLTensor> t;
    for (size_t i = 0; i < 4; ++i)
      t.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), f32(), 1, &shapes[i]));
    KS_OK(s.write(q, arr, 1, write_data(t.data(), 4, true)));
  }
  s.seal(1);
  const std::vector<kstage_token_t> attrs = {a, arr, fresh};
  const std::string before = s.fingerprint(q, attrs);
  const auto a_before = sealed(s, q, a);
  const auto arr_before = sealed(s, q, arr);
  REQUIRE(a_before.size() == 4);

  std::vector<Made> made;
  auto four = [&]() {
    made.push_back(managed_f32({10, 20, 30, 40}));
    return made.back().t;
  };
  kstage_op_t op = 4242;
  uint64_t used_ordinal = 2;

  SECTION("invalid stage handle (0, unknown, destroyed)") {
    DLManagedTensorVersioned* l0[1] = {four()};
    kstage_write_data_t w = managed_data(l0, 1);
    KS_FAILS(kstage_write_attribute(0, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_HANDLE, "stage handle 0");
    DLManagedTensorVersioned* l1[1] = {four()};
    w = managed_data(l1, 1);
    KS_FAILS(kstage_write_attribute(s.stage + 1000, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_HANDLE, "not a live stage");
    kstage_stage_t gone = 0;
    KS_OK(kstage_create(nullptr, &gone));
    KS_OK(kstage_destroy(gone));
    DLManagedTensorVersioned* l2[1] = {four()};
    w = managed_data(l2, 1);
    KS_FAILS(kstage_write_attribute(gone, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_HANDLE, "not a live stage");
    // The batch entry point too.
    DLManagedTensorVersioned* l3[1] = {four()};
    w = managed_data(l3, 1);
    KS_FAILS(kstage_write_attributes(gone, q, &a, &w, 1, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_HANDLE, "not a live stage");
  }
  SECTION("invalid query handle (0, unknown, released)") {
    DLManagedTensorVersioned* l0[1] = {four()};
    kstage_write_data_t w = managed_data(l0, 1);
    KS_FAILS(kstage_write_attribute(s.stage, 0, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_HANDLE, "query handle");
    DLManagedTensorVersioned* l1[1] = {four()};
    w = managed_data(l1, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q + 777, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_HANDLE, "query handle");
    kstage_query_t dead = s.query(prims);
    KS_OK(kstage_query_release(s.stage, dead));
    DLManagedTensorVersioned* l2[1] = {four()};
    w = managed_data(l2, 1);
    KS_FAILS(kstage_write_attribute(s.stage, dead, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_HANDLE, "query handle");
  }
  SECTION("ordinal at or below the floor") {
    DLManagedTensorVersioned* l0[1] = {four()};
    kstage_write_data_t w = managed_data(l0, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_WRITE_FLOOR_VIOLATION, "ordinal 1 is not above the write floor 1");
    DLManagedTensorVersioned* l1[1] = {four()};
    w = managed_data(l1, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 0, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_WRITE_FLOOR_VIOLATION, "ordinal 0 is not above");
    used_ordinal = 1;
  }
  SECTION("dtype mismatch") {
    made.push_back(make_managed(std::vector<int32_t>{1, 2, 3, 4}, i32()));
    DLManagedTensorVersioned* l0[1] = {made.back().t};
    kstage_write_data_t w = managed_data(l0, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT,
             "holds 'a' as float32 NONE: the write's dtype int32 does not match");
    // Kind mismatch: array managed tensors against the fixed-size column.
    DLManagedTensorVersioned* l1[1] = {four()};
    w = managed_data(l1, 1, true);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "it is a fixed-size attribute");
  }
  SECTION("row count mismatch") {
    made.push_back(managed_f32({1, 2, 3}));
    DLManagedTensorVersioned* l0[1] = {made.back().t};
    kstage_write_data_t w = managed_data(l0, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT,
             "3 source row(s) (shape[0] of the tensor) but the write addresses 4 prim(s)");
    // Array: 3 per-row managed tensors for 4 prims.
    DLManagedTensorVersioned* l1[3] = {four(), four(), four()};
    w = managed_data(l1, 3, true);
    KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "3 source row(s) (tensor_count");
  }
  SECTION("index_map out of range") {
    DLManagedTensorVersioned* l0[1] = {four()};
    kstage_write_data_t w = managed_data(l0, 1);
    const uint32_t map[2] = {0, 7};
    w.count = 2;
    w.index_map = map;
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT,
             "index_map[1] = 7 references a source row outside the transported row count 4");
    // A progression (kept as first and step by a host column, not copied) is checked too.
    DLManagedTensorVersioned* lp[1] = {four()};
    w = managed_data(lp, 1);
    const uint32_t progression[4] = {0, 2, 4, 6};
    w.count = 4;
    w.index_map = progression;
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "index_map[2] = 4 references a source row outside");
    DLManagedTensorVersioned* l1[2] = {four(), four()};
    w = managed_data(l1, 2, true);
    const uint32_t map2[3] = {1, 2, 0};
    w.count = 3;
    w.index_map = map2;
    KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "index_map[1] = 2");
  }
  SECTION("index_map and mask together; mask without count") {
    DLManagedTensorVersioned* l0[1] = {four()};
    kstage_write_data_t w = managed_data(l0, 1);
    const uint32_t map[4] = {0, 1, 2, 3};
    const uint64_t mask = 0xF;
    w.count = 4;
    w.index_map = map;
    w.mask = &mask;
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "mutually exclusive");
    DLManagedTensorVersioned* l1[1] = {four()};
    w = managed_data(l1, 1);
    w.mask = &mask;
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "count must be non-zero");
  }
  SECTION("prim mode violations and a bad prim_mode") {
    DLManagedTensorVersioned* l0[1] = {four()};
    kstage_write_data_t w = managed_data(l0, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_INSERT, &op),
             KSTAGE_ALREADY_EXISTS, "already exists");
    kstage_query_t others = s.query(s.paths("/new", 4));
    DLManagedTensorVersioned* l1[1] = {four()};
    w = managed_data(l1, 1);
    KS_FAILS(kstage_write_attribute(s.stage, others, a, 2, &w, KSTAGE_PRIM_MODE_UPDATE, &op),
             KSTAGE_NOT_FOUND, "does not exist");
    DLManagedTensorVersioned* l2[1] = {four()};
    w = managed_data(l2, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, kstage_prim_mode_t(7), &op),
             KSTAGE_INVALID_ARGUMENT, "prim_mode 7");
  }
  SECTION("NULL op out-parameter, unknown attribute token, NULL attributes") {
    DLManagedTensorVersioned* l0[1] = {four()};
    kstage_write_data_t w = managed_data(l0, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, nullptr),
             KSTAGE_INVALID_ARGUMENT, "op is NULL");
    DLManagedTensorVersioned* l1[1] = {four()};
    w = managed_data(l1, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, fresh + 1000, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "is not a token of this stage");
    DLManagedTensorVersioned* l2[1] = {four()};
    w = managed_data(l2, 1);
    KS_FAILS(kstage_write_attributes(s.stage, q, nullptr, &w, 1, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "attributes is NULL");
  }
  SECTION("both tensors and managed_tensors set: only the managed ones are owned") {
    DLManagedTensorVersioned* l0[1] = {four()};
    std::vector<float> client_values = {5, 6, 7, 8};
    int64_t shape[1] = {4};
    DLTensor client = tensor(client_values.data(), f32(), 1, shape);
    kstage_write_data_t w = managed_data(l0, 1);
    w.tensors = &client;
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT,
             "exactly one of tensors, managed_tensors and legacy_managed_tensors must be non-NULL "
             "(got tensors and managed_tensors)");
    // The client tensor is untouched and still the caller's.
    REQUIRE(client.data == client_values.data());
    REQUIRE(client_values == std::vector<float>{5, 6, 7, 8});
  }
  SECTION("batch whose 2nd entry is invalid: the 1st entry's tensors are deleted too") {
    // data[0]: a valid array write of 4 per-row tensors to a new column.
    DLManagedTensorVersioned* l0[4] = {four(), four(), four(), four()};
    made.push_back(make_managed(std::vector<int32_t>{1, 2, 3, 4}, i32()));
    DLManagedTensorVersioned* l1[1] = {made.back().t};
    kstage_write_data_t data[2] = {managed_data(l0, 4, true), managed_data(l1, 1)};
    kstage_token_t batch_attrs[2] = {fresh, a};
    KS_FAILS(
        kstage_write_attributes(s.stage, q, batch_attrs, data, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
        KSTAGE_INVALID_ARGUMENT,
        "data[1] ('a'): prim '/p_0' (element 0) holds 'a' as float32 NONE: the write's dtype "
        "int32");
  }
  SECTION("batch whose 2nd entry fails its prim mode after the 1st was staged") {
    DLManagedTensorVersioned* l0[1] = {four()};
    DLManagedTensorVersioned* l1[4] = {four(), four(), four(), four()};
    kstage_write_data_t data[2] = {managed_data(l0, 1), managed_data(l1, 4, true)};
    kstage_token_t batch_attrs[2] = {fresh, arr};
    kstage_query_t others = s.query(s.paths("/new", 4));
    KS_FAILS(kstage_write_attributes(s.stage, others, batch_attrs, data, 2, 2,
                                     KSTAGE_PRIM_MODE_UPDATE, &op),
             KSTAGE_NOT_FOUND, "does not exist");
  }
  SECTION("repeated attribute in a batch") {
    DLManagedTensorVersioned* l0[1] = {four()};
    DLManagedTensorVersioned* l1[1] = {four()};
    kstage_write_data_t data[2] = {managed_data(l0, 1), managed_data(l1, 1)};
    kstage_token_t batch_attrs[2] = {a, a};
    KS_FAILS(
        kstage_write_attributes(s.stage, q, batch_attrs, data, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
        KSTAGE_INVALID_ARGUMENT, "repeats attributes[0]");
  }
  SECTION("versioned major != 1: rejected without reading anything else") {
    for (uint32_t major : {2u, 0u, 255u}) {
      auto* ctx = new Ctx;
      const int id = ctx->id = ledger.open();
      auto* m = new DLManagedTensorVersioned{};
      m->version.major = major;
      m->version.minor = 3;
      m->manager_ctx = ctx;
      m->deleter = counting_deleter<DLManagedTensorVersioned>;
      // Garbage: a consumer that read these would crash or misbehave.
      m->dl_tensor.data = reinterpret_cast<void*>(uintptr_t(0xdead));
      m->dl_tensor.ndim = -5;
      m->dl_tensor.shape = nullptr;
      m->dl_tensor.strides = reinterpret_cast<int64_t*>(uintptr_t(0x1));
      m->dl_tensor.dtype = DLDataType{200, 3, 0};
      m->dl_tensor.device = DLDevice{DLDeviceType(99), -7};
      made.push_back(Made{m, ctx->id});
      DLManagedTensorVersioned* l0[1] = {m};
      kstage_write_data_t w = managed_data(l0, 1);
      INFO("major " << major);
      KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
               KSTAGE_INVALID_ARGUMENT, "version " + std::to_string(major) + ".3");
      REQUIRE(std::string(kstage_last_error()).find("major version 1") != std::string::npos);
      REQUIRE(ledger.of(id) == 1);  // ctx and m are gone now
    }
    // One bad-version tensor among good ones: all deleted, nothing written.
    auto* ctx = new Ctx;
    ctx->id = ledger.open();
    auto* bad = new DLManagedTensorVersioned{};
    bad->version.major = 2;
    bad->manager_ctx = ctx;
    bad->deleter = counting_deleter<DLManagedTensorVersioned>;
    bad->dl_tensor.ndim = -5;
    made.push_back(Made{bad, ctx->id});
    DLManagedTensorVersioned* l1[4] = {four(), four(), bad, four()};
    kstage_write_data_t w = managed_data(l1, 4, true);
    KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "version 2.0");
  }
  SECTION("the same pointer listed twice") {
    DLManagedTensorVersioned* t = four();
    DLManagedTensorVersioned* l0[4] = {four(), t, four(), t};
    kstage_write_data_t w = managed_data(l0, 4, true);
    KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "more than once");
    REQUIRE(std::string(kstage_last_error()).find("managed_tensors[3]") != std::string::npos);
    // Across two entries of a batch.
    DLManagedTensorVersioned* shared = four();
    DLManagedTensorVersioned* l1[1] = {shared};
    DLManagedTensorVersioned* l2[1] = {shared};
    kstage_write_data_t data[2] = {managed_data(l1, 1), managed_data(l2, 1)};
    kstage_token_t batch_attrs[2] = {a, fresh};
    KS_FAILS(
        kstage_write_attributes(s.stage, q, batch_attrs, data, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
        KSTAGE_INVALID_ARGUMENT, "data[1].managed_tensors[0] is listed more than once");
  }
  SECTION("a NULL entry in managed_tensors") {
    DLManagedTensorVersioned* l0[4] = {four(), nullptr, four(), four()};
    kstage_write_data_t w = managed_data(l0, 4, true);
    KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "managed_tensors[1] is NULL");
    DLManagedTensorVersioned* l1[1] = {nullptr};
    w = managed_data(l1, 1);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "managed_tensors[0] is NULL");
    // In a batch: the valid first entry's tensor is deleted as well.
    DLManagedTensorVersioned* l2[1] = {four()};
    DLManagedTensorVersioned* l3[2] = {four(), nullptr};
    kstage_write_data_t data[2] = {managed_data(l2, 1), managed_data(l3, 2, true)};
    kstage_token_t batch_attrs[2] = {fresh, arr};
    KS_FAILS(
        kstage_write_attributes(s.stage, q, batch_attrs, data, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
        KSTAGE_INVALID_ARGUMENT, "managed_tensors[1] is NULL");
  }
  SECTION("a bad tensor among per-row managed tensors is named") {
    DLManagedTensorVersioned* l0[4] = {four(), four(), four(), four()};
    l0[2]->dl_tensor.ndim = 0;
    kstage_write_data_t w = managed_data(l0, 4, true);
    KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "managed_tensors[2]: ndim 0");
    DLManagedTensorVersioned* first = four();
    made.push_back(make_managed(std::vector<double>{1}, f64()));
    DLManagedTensorVersioned* l1[2] = {first, made.back().t};
    w = managed_data(l1, 2, true);
    w.count = 2;
    KS_FAILS(kstage_write_attribute(s.stage, q, arr, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT,
             "managed_tensors[1] has dtype float64 but managed_tensors[0] has float32");
  }

  // Catch2 may run the case once more with no section entered: nothing to check.
  if (made.empty()) return;
  // Every managed tensor made in the section was deleted exactly once, and
  // the out-parameter was never written.
  for (const Made& m : made) {
    INFO("tensor id " << m.id);
    REQUIRE(ledger.of(m.id) == 1);
  }
  REQUIRE(ledger.all_once());
  REQUIRE(op == 4242);
  // The stage is unchanged, also once the ordinal the calls used is sealed.
  REQUIRE(s.fingerprint(q, attrs) == before);
  s.seal(used_ordinal + 1);
  REQUIRE(sealed(s, q, a) == a_before);
  REQUIRE(sealed(s, q, arr) == arr_before);
  REQUIRE(s.read(q, {fresh}).empty());
  kstage_filter_t all{};
  kstage_query_t existing = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &existing));
  uint64_t n = 0;
  KS_OK(kstage_query_count(s.stage, existing, &n));
  REQUIRE(n == 4);  // no prim was created by a rejected call
}

TEST_CASE("concurrent writers, some rejected, delete every tensor exactly once",
          "[host_adoption][managed][threads]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/p", 8);
  kstage_query_t q = s.query(prims);
  constexpr int kThreads = 4, kWrites = 40;
  std::vector<kstage_token_t> attrs;
  for (int t = 0; t < kThreads; ++t) attrs.push_back(s.token(("attr" + std::to_string(t)).c_str()));
  std::atomic<int> ok{0}, rejected{0}, unexpected{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t]() {
      for (int i = 0; i < kWrites; ++i) {
        // Every third write has the wrong row count.
        const size_t rows = (i % 3 == 2) ? 7 : 8;
        std::vector<float> v(rows, float(t * 1000 + i));
        Made m = managed_f32(v);
        DLManagedTensorVersioned* list[1] = {m.t};
        kstage_write_data_t w = managed_data(list, 1);
        kstage_op_t op = 0;
        kstage_status_t st = kstage_write_attribute(s.stage, q, attrs[size_t(t)], uint64_t(i + 1),
                                                    &w, KSTAGE_PRIM_MODE_UPSERT, &op);
        if (st == KSTAGE_OK) {
          if (kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) != KSTAGE_OK) ++unexpected;
          if (kstage_release_op(s.stage, op) != KSTAGE_OK) ++unexpected;
          ++ok;
        } else if (st == KSTAGE_INVALID_ARGUMENT && rows == 7) {
          ++rejected;
        } else {
          ++unexpected;
        }
        // Rejected: deleted at once. Accepted: adopted, deleted at most once so far.
        if (rows == 7 ? ledger.of(m.id) != 1 : ledger.of(m.id) > 1) ++unexpected;
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(unexpected == 0);
  REQUIRE(ok + rejected == kThreads * kWrites);
  REQUIRE(rejected == kThreads * (kWrites / 3));
  s.seal(kWrites);
  // The last accepted write of each attribute wins: i = 39 (39 % 3 == 0).
  for (int t = 0; t < kThreads; ++t)
    REQUIRE(sealed(s, q, attrs[size_t(t)])[prims[5]] ==
            std::vector<float>{float(t * 1000 + kWrites - 1)});
  // Sealing replaced every adopted buffer but each column's last one.
  REQUIRE(ledger.total() == kThreads * kWrites - kThreads);
  KS_OK(kstage_destroy(s.stage));
  s.stage = 0;
  REQUIRE(ledger.total() == kThreads * kWrites);
  REQUIRE(ledger.all_once());
}

TEST_CASE("a rejected descriptor layout still deletes each managed tensor exactly once",
          "[managed][abi][errors]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/lay", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a"), b = s.token("b");
  const std::string before = s.fingerprint(q, {a, b});
  SECTION("struct_size 0") {
    Made m = managed_f32({1, 2});
    DLManagedTensorVersioned* list[1] = {m.t};
    kstage_write_data_t w = managed_data(list, 1);
    w.struct_size = 0;
    KS_FAILS(s.write(q, a, 1, w), KSTAGE_INVALID_ARGUMENT, "struct_size is 0");
    REQUIRE(ledger.of(m.id) == 1);
  }
  SECTION("struct_size 8: below the first layout, read as this header's struct") {
    Made m = managed_f32({1, 2});
    DLManagedTensorVersioned* list[1] = {m.t};
    kstage_write_data_t w = managed_data(list, 1);
    w.struct_size = 8;
    KS_FAILS(s.write(q, a, 1, w), KSTAGE_INVALID_ARGUMENT, "struct_size is 8");
    REQUIRE(ledger.of(m.id) == 1);
  }
  SECTION("a batch whose second descriptor has another struct_size") {
    Made m0 = managed_f32({1, 2}), m1 = managed_f32({3, 4});
    DLManagedTensorVersioned* l0[1] = {m0.t};
    DLManagedTensorVersioned* l1[1] = {m1.t};
    kstage_write_data_t data[2] = {managed_data(l0, 1), managed_data(l1, 1)};
    data[1].struct_size = 96;  // the 0.3 layout, not this header's
    const kstage_token_t attrs[2] = {a, b};
    kstage_op_t op = 0;
    KS_FAILS(kstage_write_attributes(s.stage, q, attrs, data, 2, 1, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "data[1].struct_size is 96");
    REQUIRE(ledger.of(m0.id) == 1);
    REQUIRE(ledger.of(m1.id) == 1);
  }
  SECTION("a fixed-size write with tensor_count 2: entry 0 is the stage's, entry 1 never read") {
    Made m0 = managed_f32({1, 2}), m1 = managed_f32({3, 4});
    DLManagedTensorVersioned* list[2] = {m0.t, m1.t};
    KS_FAILS(s.write(q, a, 1, managed_data(list, 2)), KSTAGE_INVALID_ARGUMENT,
             "takes exactly 1 tensor, got tensor_count 2");
    REQUIRE(ledger.of(m0.id) == 1);
    REQUIRE(ledger.of(m1.id) == 0);  // still the caller's
    m1.t->deleter(m1.t);
  }
  SECTION("a fixed-size write with tensor_count 2^40 over a one-entry list") {
    Made m0 = managed_f32({1, 2});
    DLManagedTensorVersioned* list[1] = {m0.t};  // nothing after it may be read
    KS_FAILS(s.write(q, a, 1, managed_data(list, uint64_t(1) << 40)), KSTAGE_INVALID_ARGUMENT,
             "takes exactly 1 tensor");
    REQUIRE(ledger.of(m0.id) == 1);
  }
  REQUIRE(ledger.all_once());
  REQUIRE(s.fingerprint(q, {a, b}) == before);
}

// ---------------------------------------------------------------------------
// Legacy producers (DLManagedTensor: JAX, older PyTorch and CuPy)

namespace {

struct MadeLegacy {
  DLManagedTensor* t = nullptr;
  int id = 0;
};

// A legacy tensor over `data` (rows = elements / lanes) owning `ctx`.
MadeLegacy make_legacy(Ctx* ctx, float* data, size_t elements, uint16_t lanes) {
  ctx->shape[0] = int64_t(elements) / lanes;
  auto* m = new DLManagedTensor{};
  m->manager_ctx = ctx;
  m->deleter = counting_deleter<DLManagedTensor>;
  m->dl_tensor = tensor(elements ? data : nullptr, f32(lanes), 1, ctx->shape);
  return MadeLegacy{m, ctx->id};
}

// Over a copy of `values`, which the context owns.
MadeLegacy legacy_f32(const std::vector<float>& values, uint16_t lanes = 1) {
  Ctx* ctx = new_ctx(values);
  return make_legacy(ctx, reinterpret_cast<float*>(ctx->bytes.data()), values.size(), lanes);
}

// Over memory the test owns, so that it can be checked after the deleter ran.
MadeLegacy legacy_over(std::vector<float>& storage, uint16_t lanes) {
  return make_legacy(new_ctx(std::vector<float>{}), storage.data(), storage.size(), lanes);
}

kstage_write_data_t legacy_data(DLManagedTensor* const* tensors, uint64_t n,
                                bool is_array = false) {
  kstage_write_data_t w = kstage_write_data_init();
  w.legacy_managed_tensors = tensors;
  w.tensor_count = n;
  w.is_array = is_array;
  return w;
}

}  // namespace

TEST_CASE("a 0.2-layout caller's rejected batch still deletes its legacy tensors exactly once",
          "[managed][legacy][abi][errors]") {
  // 88-byte descriptors (0.2: legacy_managed_tensors, no residency), strided by
  // 88 bytes. data[0] is bad, so data[1] is read best effort: the whole 0.2
  // layout, legacy field included (found by fuzzing: only the first 80 bytes
  // were read, and the tensor leaked).
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/old", 2);
  kstage_query_t q = s.query(prims);
  const kstage_token_t attrs[2] = {s.token("a"), s.token("b")};
  const std::string before = s.fingerprint(q, {attrs[0], attrs[1]});
  std::vector<float> v = {1, 2};
  int64_t shape[1] = {2};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  MadeLegacy m = legacy_f32({3, 4});
  DLManagedTensor* list[1] = {m.t};
  constexpr size_t k02 = 88;
  std::vector<unsigned char> raw(2 * k02);
  kstage_write_data_t d0 = write_data(&t);
  d0.struct_size = k02;
  d0.reserved[4] = 1;
  kstage_write_data_t d1 = legacy_data(list, 1);
  d1.struct_size = k02;
  std::memcpy(raw.data(), &d0, k02);
  std::memcpy(raw.data() + k02, &d1, k02);
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attributes(s.stage, q, attrs,
                                   reinterpret_cast<const kstage_write_data_t*>(raw.data()), 2, 1,
                                   KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "data[0].reserved[4] is 1");
  REQUIRE(ledger.of(m.id) == 1);
  REQUIRE(s.fingerprint(q, {attrs[0], attrs[1]}) == before);
}

TEST_CASE("every struct_size: kstage.h's rule, and each legacy tensor deleted exactly once",
          "[managed][legacy][abi][errors]") {
  // One legacy managed tensor per write, its descriptor at the start of an 8 KiB buffer of
  // zeros with struct_size set as the row says (the rule: kstage.h, "Extensible descriptors").
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/sizes", 2);
  kstage_query_t q = s.query(prims);
  const kstage_token_t a = s.token("a");
  std::vector<unsigned char> raw(8192);
  auto write_sized = [&](uint32_t size, uint64_t ordinal, size_t poke = 0) {
    MadeLegacy m = legacy_f32({float(ordinal), float(ordinal) + 0.5f});
    DLManagedTensor* list[1] = {m.t};
    kstage_write_data_t d = legacy_data(list, 1);
    d.struct_size = size;
    std::fill(raw.begin(), raw.end(), 0);
    std::memcpy(raw.data(), &d, sizeof d);
    if (poke) raw[poke] = 1;
    kstage_op_t op = 0;
    const kstage_status_t st = kstage_write_attribute(
        s.stage, q, a, ordinal, reinterpret_cast<const kstage_write_data_t*>(raw.data()),
        KSTAGE_PRIM_MODE_UPSERT, &op);
    if (st == KSTAGE_OK) {
      REQUIRE(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_OK);
      REQUIRE(kstage_release_op(s.stage, op) == KSTAGE_OK);
      s.seal(ordinal);
      REQUIRE(sealed(s, q, a)[prims[1]] == std::vector<float>{float(ordinal) + 0.5f});
    }
    return std::pair<kstage_status_t, int>(st, m.id);
  };
  // An accepted write's tensor may become the column's storage (adopted): its deleter runs
  // when a later seal replaces it or the stage goes, counted at the end.
  std::vector<int> accepted;
  SECTION("accepted: a newer caller's 8192 bytes, zero past this struct") {
    auto [st, id] = write_sized(8192, 1);
    REQUIRE(st == KSTAGE_OK);
    accepted.push_back(id);
  }
  SECTION(
      "accepted: sizes that are no multiple of the alignment (89, 92, 97); the field "
      "they cut is absent") {
    uint64_t ordinal = 1;
    for (uint32_t size : {89u, 92u, 97u, 100u, 103u, uint32_t(KSTAGE_MAX_STRUCT_SIZE) - 1}) {
      INFO("struct_size " << size);
      if (size > raw.size()) raw.resize(size);
      auto [st, id] = write_sized(size, ordinal++);
      INFO(kstage_last_error());
      REQUIRE(st == KSTAGE_OK);
      accepted.push_back(id);
    }
  }
  SECTION("rejected, the tensor deleted once: 0, 8, 79, and past KSTAGE_MAX_STRUCT_SIZE") {
    const std::string before = s.fingerprint(q, {a});
    for (uint32_t size : {0u, 8u, 79u, uint32_t(KSTAGE_MAX_STRUCT_SIZE) + 1, UINT32_MAX}) {
      INFO("struct_size " << size);
      auto [st, id] = write_sized(size, 1);
      REQUIRE(st == KSTAGE_INVALID_ARGUMENT);
      REQUIRE(std::string(kstage_last_error()).find("struct_size is " + std::to_string(size)) !=
              std::string::npos);
      REQUIRE(ledger.of(id) == 1);
    }
    REQUIRE(s.fingerprint(q, {a}) == before);
  }
  SECTION(
      "rejected, the tensor deleted once: a byte of a field the size cuts, or one past "
      "this struct") {
    const std::string before = s.fingerprint(q, {a});
    auto [cut, cut_id] = write_sized(97, 1, 96);  // selection_device's first byte
    REQUIRE(cut == KSTAGE_INVALID_ARGUMENT);
    REQUIRE(std::string(kstage_last_error()).find("sets byte 96 of its 97-byte") !=
            std::string::npos);
    REQUIRE(ledger.of(cut_id) == 1);
    auto [newer, newer_id] = write_sized(8192, 1, 5000);
    REQUIRE(newer == KSTAGE_NOT_SUPPORTED);
    REQUIRE(std::string(kstage_last_error()).find("sets byte 5000 of its 8192-byte") !=
            std::string::npos);
    REQUIRE(ledger.of(newer_id) == 1);
    REQUIRE(s.fingerprint(q, {a}) == before);
  }
  KS_OK(kstage_destroy(s.stage));
  s.stage = 0;
  for (int id : accepted) REQUIRE(ledger.of(id) == 1);
  REQUIRE(ledger.all_once());
}

TEST_CASE("a legacy producer's dense write is adopted, never written into, and deleted once",
          "[host_adoption][managed][legacy]") {
  ledger.reset();
  {
    Stage s(host_execution());
    auto prims = s.paths("/lg", 4);
    kstage_query_t q = s.query(prims);
    kstage_token_t a = s.token("a");
    std::vector<float> storage = {1, 2, 3, 4, 5, 6, 7, 8};  // the producer's (immutable) array
    MadeLegacy m = legacy_over(storage, 2);
    DLManagedTensor* list[1] = {m.t};
    KS_OK(s.write(q, a, 1, legacy_data(list, 1)));
    REQUIRE(ledger.of(m.id) == 0);  // adopted: pending, then the column's storage
    s.seal(1);
    {
      kstage_read_t r = 0;
      KS_OK(kstage_read_attributes(s.stage, q, &a, 1, nullptr, &r));
      kstage_read_group_t g{};
      KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
      REQUIRE(g.data.tensors[0].data == storage.data());  // zero-copy
      KS_OK(kstage_release_group(s.stage, g.handle));
      KS_OK(kstage_release_read(s.stage, r));
    }
    // A sparse write copies the adopted buffer first: the producer's memory
    // (which JAX considers immutable) never changes.
    const std::vector<float> before = storage;
    std::vector<float> row = {-1, -2};
    int64_t one[1] = {1};
    DLTensor t = tensor(row.data(), f32(2), 1, one);
    kstage_write_data_t w = write_data(&t);
    const uint32_t index_map[1] = {0};
    w.count = 1;
    w.index_map = index_map;
    KS_OK(s.write(q, a, 2, w));
    s.seal(2);
    REQUIRE(storage == before);
    REQUIRE(sealed(s, q, a)[prims[0]] == std::vector<float>{-1, -2});
    REQUIRE(sealed(s, q, a)[prims[3]] == std::vector<float>{7, 8});
    // The column no longer uses the producer's buffer: deleted now, once.
    REQUIRE(ledger.of(m.id) == 1);

    // Adopted again, then the stage is destroyed with it as storage.
    MadeLegacy m2 = legacy_f32({9, 9, 9, 9, 9, 9, 9, 9}, 2);
    DLManagedTensor* list2[1] = {m2.t};
    KS_OK(s.write(q, a, 3, legacy_data(list2, 1)));
    s.seal(3);
    REQUIRE(ledger.of(m2.id) == 0);
  }
  REQUIRE(ledger.all_once());
}

TEST_CASE("legacy producers: copied, rejected and array writes delete each exactly once",
          "[managed][legacy][errors]") {
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/lc", 3);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a"), r = s.token("rows");
  SECTION("an index_map write of 4-byte rows, not a progression: copied, deleted at once") {
    MadeLegacy m = legacy_f32({5, 6});
    DLManagedTensor* list[1] = {m.t};
    kstage_write_data_t w = legacy_data(list, 1);
    const uint32_t index_map[3] = {1, 0, 1};
    w.count = 3;
    w.index_map = index_map;
    KS_OK(s.write(q, a, 1, w));
    REQUIRE(ledger.of(m.id) == 1);
    s.seal(1);
    REQUIRE(sealed(s, q, a) == std::map<kstage_path_t, std::vector<float>>{
                                   {prims[0], {6}}, {prims[1], {5}}, {prims[2], {6}}});
  }
  SECTION("one legacy tensor per row of an array write") {
    MadeLegacy r0 = legacy_f32({1}), r1 = legacy_f32({}), r2 = legacy_f32({2, 3, 4});
    DLManagedTensor* list[3] = {r0.t, r1.t, r2.t};
    KS_OK(s.write(q, r, 1, legacy_data(list, 3, true)));
    s.seal(1);
    REQUIRE(sealed(s, q, r) == std::map<kstage_path_t, std::vector<float>>{
                                   {prims[0], {1}}, {prims[1], {}}, {prims[2], {2, 3, 4}}});
  }
  SECTION("rejected: wrong row count, a NULL entry, listed twice, mixed with tensors") {
    const std::string before = s.fingerprint(q, {a, r});
    MadeLegacy m = legacy_f32({1, 2});
    DLManagedTensor* list[1] = {m.t};
    KS_FAILS(s.write(q, a, 1, legacy_data(list, 1)), KSTAGE_INVALID_ARGUMENT, "2 source row(s)");
    REQUIRE(ledger.of(m.id) == 1);
    DLManagedTensor* none[1] = {nullptr};
    KS_FAILS(s.write(q, a, 1, legacy_data(none, 1)), KSTAGE_INVALID_ARGUMENT,
             "legacy_managed_tensors[0] is NULL");
    MadeLegacy twice = legacy_f32({1});
    DLManagedTensor* dup[3] = {twice.t, twice.t, twice.t};
    KS_FAILS(s.write(q, r, 1, legacy_data(dup, 3, true)), KSTAGE_INVALID_ARGUMENT,
             "data[0].legacy_managed_tensors[1] is listed more than once");
    REQUIRE(ledger.of(twice.id) == 1);
    MadeLegacy mixed = legacy_f32({1, 2, 3});
    DLManagedTensor* l3[1] = {mixed.t};
    std::vector<float> v = {1, 2, 3};
    int64_t shape[1] = {3};
    DLTensor t = tensor(v.data(), f32(), 1, shape);
    kstage_write_data_t w = legacy_data(l3, 1);
    w.tensors = &t;
    KS_FAILS(s.write(q, a, 1, w), KSTAGE_INVALID_ARGUMENT,
             "(got tensors and legacy_managed_tensors)");
    REQUIRE(ledger.of(mixed.id) == 1);
    REQUIRE(s.fingerprint(q, {a, r}) == before);
  }
  REQUIRE(ledger.all_once());
}

TEST_CASE("a fixed-size write with tensor_count 0 still deletes managed_tensors[0] once",
          "[managed][legacy][errors]") {
  // kstage_write_data_init() leaves tensor_count at 0: a caller who sets only
  // managed_tensors is rejected, and its producer must not leak.
  ledger.reset();
  Stage s(host_execution());
  auto prims = s.paths("/zero", 2);
  kstage_query_t q = s.query(prims);
  kstage_token_t a = s.token("a");
  Made m = managed_f32({1, 2});
  DLManagedTensorVersioned* list[1] = {m.t};
  KS_FAILS(s.write(q, a, 1, managed_data(list, 0)), KSTAGE_INVALID_ARGUMENT, "tensor_count is 0");
  REQUIRE(ledger.of(m.id) == 1);
  MadeLegacy l = legacy_f32({1, 2});
  DLManagedTensor* llist[1] = {l.t};
  KS_FAILS(s.write(q, a, 1, legacy_data(llist, 0)), KSTAGE_INVALID_ARGUMENT, "tensor_count is 0");
  REQUIRE(ledger.of(l.id) == 1);
  REQUIRE(ledger.all_once());
}
