// SPDX-License-Identifier: Apache-2.0
// Host memory that runs out in the middle of a seal. This program replaces the global
// operator new (libkstage's allocations come here too) with one that throws std::bad_alloc for
// requests of at least `fail_at` bytes while armed: a seal that needs a large host table (the
// first stamp table of a column, a ragged column's per-row lists) fails with
// KSTAGE_OUT_OF_MEMORY, the attribute's write floor stays below the write, the stage reads
// exactly as before, and the same seal succeeds once memory is back.
#include "support.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <new>

namespace {
std::atomic<size_t> fail_at{SIZE_MAX};

// Requests of at least `bytes` fail while this lives.
struct NoMemoryFrom {
  explicit NoMemoryFrom(size_t bytes) { fail_at = bytes; }
  ~NoMemoryFrom() { fail_at = SIZE_MAX; }
  NoMemoryFrom(const NoMemoryFrom&) = delete;
  NoMemoryFrom& operator=(const NoMemoryFrom&) = delete;
};

// This thread's requests after the first `allowed` fail while this lives (-1: none fail). Other
// threads (the host execution's workers) are not touched.
thread_local long countdown = -1;
struct NoMemoryAfter {
  explicit NoMemoryAfter(long allowed) { countdown = allowed; }
  ~NoMemoryAfter() { countdown = -1; }
  NoMemoryAfter(const NoMemoryAfter&) = delete;
  NoMemoryAfter& operator=(const NoMemoryAfter&) = delete;
};
bool out_of_memory(size_t n) {
  if (countdown == 0) return true;
  if (countdown > 0) --countdown;
  return n >= fail_at.load(std::memory_order_relaxed);
}
}  // namespace

void* operator new(size_t n) {
  if (out_of_memory(n)) throw std::bad_alloc();
  if (void* p = std::malloc(n > 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them): everything this
// program's deletes free must come from malloc.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (out_of_memory(n)) return nullptr;
  return std::malloc(n > 0 ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

using namespace kstage_test;

namespace {
// The seal of `attr` at `ordinal` (with nothing else pending below it) fails while requests of
// `fail_at` bytes or more fail: KSTAGE_OUT_OF_MEMORY, the floor stays below the ordinal, the
// stage reads exactly as before. Then, with memory back, the same seal succeeds.
void require_seal_fails_then_succeeds(Stage& s, kstage_query_t q, kstage_token_t attr,
                                      uint64_t ordinal, size_t fail_at) {
  const std::string before = s.fingerprint(q, {attr});
  {
    NoMemoryFrom guard(fail_at);
    const kstage_status_t st = kstage_advance_write_floor(s.stage, ordinal, &attr, 1);
    INFO(int(st) << ": " << kstage_last_error());
    REQUIRE(st == KSTAGE_OUT_OF_MEMORY);
  }
  REQUIRE(s.floor(attr) == ordinal - 1);
  REQUIRE(s.fingerprint(q, {attr}) == before);
  s.seal(ordinal, {attr});
  REQUIRE(s.floor(attr) == ordinal);
}
}  // namespace

TEST_CASE("a seal that runs out of host memory changes nothing and succeeds later", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 200000;
  const kstage_path_t first = s.range("/m", "p", 0, kN);
  const kstage_query_t all = s.range_query(first);
  const kstage_token_t t = s.token("t");
  s.write_f32(all, t, 1, std::vector<float>(kN, 1.f));
  s.seal(1);
  // A 50% mask write at 2: its seal makes the column's first stamp table (kN bytes).
  const std::vector<uint64_t> mask((kN + 63) / 64, 0xAAAAAAAAAAAAAAAAull);
  s.write_f32(all, t, 2, std::vector<float>(kN, 2.f), 1, mask.data());
  require_seal_fails_then_succeeds(s, all, t, 2, kN / 2);
  // Applied, stamps and all.
  const auto got = scalars(s, all, t);
  size_t wrong = 0;
  for (uint64_t i = 0; i < kN; ++i) wrong += got.at(first + i) != (i % 2 ? 2.f : 1.f);
  REQUIRE(wrong == 0);
  REQUIRE(s.changed(all, t, 2, 2).size() == kN / 2);
}

TEST_CASE("an adopted sparse write whose seal runs out of memory keeps its tensor for the retry",
          "[oom][managed]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 200000;
  const kstage_path_t first = s.range("/am", "p", 0, kN);
  const kstage_query_t all = s.range_query(first);
  const kstage_token_t t = s.token("t");
  s.write_f32(all, t, 1, std::vector<float>(kN, 1.f));
  s.seal(1);
  // The source, handed over: a host column keeps it until the seal has read it.
  static int deleted;
  deleted = 0;
  std::vector<float> values(kN);
  for (uint64_t i = 0; i < kN; ++i) values[i] = float(i);
  int64_t shape[1] = {int64_t(kN)};
  DLManagedTensorVersioned m{};
  m.version.major = DLPACK_MAJOR_VERSION;
  m.deleter = [](DLManagedTensorVersioned*) { ++deleted; };
  m.dl_tensor = tensor(values.data(), f32(), 1, shape);
  DLManagedTensorVersioned* list[1] = {&m};
  kstage_write_data_t w = kstage_write_data_init();
  w.managed_tensors = list;
  w.tensor_count = 1;
  const std::vector<uint64_t> mask((kN + 63) / 64, 0xAAAAAAAAAAAAAAAAull);
  w.count = kN;
  w.mask = mask.data();
  KS_OK(s.write(all, t, 2, w));
  REQUIRE(deleted == (kOnDevice ? 1 : 0));
  require_seal_fails_then_succeeds(s, all, t, 2, kN / 2);  // the column's first stamp table
  REQUIRE(deleted == 1);
  const auto got = scalars(s, all, t);
  size_t wrong = 0;
  for (uint64_t i = 0; i < kN; ++i) wrong += got.at(first + i) != (i % 2 ? float(i) : 1.f);
  REQUIRE(wrong == 0);
}

TEST_CASE("a ragged seal that runs out of host memory changes nothing and succeeds later",
          "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 50000;
  const kstage_path_t first = s.range("/r", "p", 0, kN);
  const kstage_query_t all = s.range_query(first);
  const kstage_token_t t = s.token("r");
  // Rows of 1-3 floats, one tensor each.
  auto write_rows = [&](uint64_t ordinal, float value, const uint64_t* mask) {
    std::vector<float> data;
    std::vector<int64_t> shapes(kN);
    for (uint64_t i = 0; i < kN; ++i) shapes[i] = int64_t(1 + i % 3);
    for (uint64_t i = 0; i < kN; ++i) data.insert(data.end(), size_t(shapes[i]), value);
    std::vector<DLTensor> rows(kN);
    size_t at = 0;
    for (uint64_t i = 0; i < kN; ++i) {
      rows[i] = tensor(data.data() + at, f32(), 1, &shapes[i]);
      at += size_t(shapes[i]);
    }
    kstage_write_data_t w = write_data(rows.data(), kN, true);
    if (mask) {
      w.count = kN;
      w.mask = mask;
    }
    KS_OK(s.write(all, t, ordinal, w));  // the rows are staged (copied) by the time this returns
  };
  write_rows(1, 1.f, nullptr);
  s.seal(1);
  const std::vector<uint64_t> mask((kN + 63) / 64, 0x00FF00FF00FF00FFull);
  write_rows(2, 2.f, mask.data());
  require_seal_fails_then_succeeds(s, all, t, 2, kN * 4);  // the seal's per-row tables: 8 B a row
  size_t wrong = 0;
  for (const auto& [p, v] : s.floats(all, t)) {
    const uint64_t i = p - first;
    const float want = (mask[i / 64] >> (i % 64)) & 1 ? 2.f : 1.f;
    wrong += v.size() != size_t(1 + i % 3) ||
             std::any_of(v.begin(), v.end(), [&](float f) { return f != want; });
  }
  REQUIRE(wrong == 0);
}

// The prims of a whole-range write hold their attribute count one byte per page of 2^16
// (core/attribute_counts.hpp); a delete of some of them makes their pages' bytes (64 KB each)
// before it changes anything. No memory for that: the delete's seal fails and changes nothing.
TEST_CASE("a delete whose attribute counts need memory changes nothing until it has it", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 3 << 16;  // three pages of ids
  const kstage_path_t first = s.range("/d", "p", 0, kN);
  const kstage_query_t all = s.range_query(first);
  const kstage_token_t t = s.token("t");
  s.write_f32(all, t, 1, std::vector<float>(kN, 1.f));
  s.seal(1);
  // A first delete (page 0), with memory: the column takes its per-prim tables, and page 0
  // its bytes. What the next delete needs beyond small allocations is then the counts' pages.
  REQUIRE(s.remove(s.query({first}), {t}, 2) == KSTAGE_OK);
  s.seal(2);
  kstage_query_t some = 0;
  KS_OK(kstage_query_range(s.stage, first, (1 << 16) + 5, 2, 1 << 16, &some));  // pages 1 and 2
  REQUIRE(s.remove(some, {t}, 3) == KSTAGE_OK);
  require_seal_fails_then_succeeds(s, all, t, 3, 1 << 15);
  REQUIRE(scalars(s, all, t).size() == kN - 3);
  const kstage_filter_t every_prim{};  // every prim that holds an attribute: not the three
  REQUIRE(s.filtered(every_prim).size() == kN - 3);
  REQUIRE(s.changed(all, t, 3, 3) ==
          std::vector<kstage_path_t>{first + (1 << 16) + 5, first + (2 << 16) + 5});
}

// A first write's prims gain an attribute count (core/attribute_counts.hpp: a page of 64 KB
// of bytes for prims that do not fill a page). No memory for it: the seal fails and changes
// nothing -- the column does not keep the prims either, so the retry counts them (a column
// that kept them would report no new prims at the retry, and they would never exist).
TEST_CASE("a first write whose attribute counts need memory changes nothing until it has it",
          "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 1000;
  const kstage_path_t first = s.range("/c", "p", 0, kN);
  const kstage_query_t run = s.range_query(first);  // the new prims are a run
  s.range("/c", "pad", 0, 1 << 16);  // ids of their own: the listed prims' ids are in another page
  std::vector<kstage_path_t> some;
  for (uint64_t i = 0; i < kN; i += 7) some.push_back(s.path("/c/list/" + std::to_string(i)));
  const kstage_query_t listed = s.query(some);  // the new prims are a list
  const kstage_token_t t = s.token("t"), u = s.token("u");
  s.write_f32(run, t, 1, std::vector<float>(kN, 1.f));
  require_seal_fails_then_succeeds(s, run, t, 1, 1 << 16);
  s.write_f32(listed, u, 1, std::vector<float>(some.size(), 2.f));
  require_seal_fails_then_succeeds(s, listed, u, 1, 1 << 16);
  const kstage_filter_t every_prim{};
  REQUIRE(s.filtered(every_prim).size() == kN + some.size());
  const auto ts = scalars(s, run, t), us = scalars(s, listed, u);
  REQUIRE(ts.size() == kN);
  REQUIRE(us.size() == some.size());
  for (const auto& [prim, v] : ts) REQUIRE(v == 1.f);
  for (const auto& [prim, v] : us) REQUIRE(v == 2.f);
  // Deleting them brings every count back to zero (none was counted twice).
  REQUIRE(s.remove(run, {}, 2) == KSTAGE_OK);
  REQUIRE(s.remove(listed, {}, 2) == KSTAGE_OK);
  s.seal(2);
  REQUIRE(s.filtered(every_prim).empty());
}

// A seal that gives new prims rows past the column's last one, then runs out of memory, takes
// those rows back: a zero-copy read's whole-column tensor is as long as the values it points
// at (it was as long as the rows the failed seal had added, past the end of the buffer).
TEST_CASE("a seal that runs out of memory after adding rows takes them back", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 200000;
  std::vector<kstage_path_t> old = s.paths("/g/old", kN);
  std::reverse(old.begin(), old.end());  // not in id order: the column keeps per-prim tables
  const kstage_query_t olds = s.query(old);
  const kstage_token_t t = s.token("t");
  s.write_f32(olds, t, 1, std::vector<float>(kN, 1.f));
  s.seal(1);
  // Ten new prims: their seal adds ten rows, then needs the column's first stamp table (a byte
  // per row), which fails.
  const kstage_query_t news = s.query(s.paths("/g/new", 10));
  s.write_f32(news, t, 2, std::vector<float>(10, 2.f));
  auto column_rows = [&]() {  // rows of the zero-copy whole-column tensor a read returns
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, olds, &t, 1, nullptr, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    REQUIRE(g.data.tensor_count == 1);  // the column itself (through an index_map or not)
    const int64_t rows = g.data.tensors[0].shape[0];
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
    return rows;
  };
  const kstage_filter_t every_prim{};
  {
    NoMemoryFrom guard(kN / 2);
    REQUIRE(kstage_advance_write_floor(s.stage, 2, &t, 1) == KSTAGE_OUT_OF_MEMORY);
  }
  REQUIRE(s.floor(t) == 1);
  REQUIRE(column_rows() == int64_t(kN));
  // The new prims' attribute counts, raised before the rows moved, were taken back: they do
  // not exist.
  REQUIRE(s.filtered(every_prim).size() == kN);
  s.seal(2, {t});
  REQUIRE(column_rows() == int64_t(kN + 10));
  REQUIRE(s.filtered(every_prim).size() == kN + 10);
  const auto got = scalars(s, news, t);
  REQUIRE(got.size() == 10);
  for (const auto& [prim, v] : got) REQUIRE(v == 2.f);
  // Counted once: deleting them leaves the old prims alone.
  REQUIRE(s.remove(news, {}, 3) == KSTAGE_OK);
  s.seal(3);
  REQUIRE(s.filtered(every_prim).size() == kN);
}

// A clone's seal gives the copies their rows as one tile of the column (and raises their
// attribute counts) before it needs the column's first stamp table, which fails: the tile and
// the counts go again, nothing of the copies is visible, and the same seal succeeds later.
TEST_CASE("a clone's seal that runs out of memory takes its tile and counts back", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 60000;
  const kstage_path_t first = s.range("/e", "env_", 0, kN + 1);
  const std::vector<kstage_path_t> source{first, s.path("/e/env_0/a"), s.path("/e/env_0/b")};
  const kstage_query_t q = s.query(source);
  const kstage_token_t t = s.token("t");
  s.write_f32(q, t, 1, {1.f, 2.f, 3.f});
  s.seal(1);
  kstage_op_t op = 0;
  KS_OK(kstage_clone_range(s.stage, first, first, 1, kN, 2, &op));
  finish(s, op);
  const kstage_query_t copies =
      s.query({first + kN, s.path("/e/env_" + std::to_string(kN) + "/a"), s.path("/e/env_7/b")});
  const kstage_filter_t every_prim{};
  const std::string before = s.fingerprint(copies, {t});
  {
    NoMemoryFrom guard(kN / 2);
    REQUIRE(kstage_advance_write_floor(s.stage, 2, &t, 1) == KSTAGE_OUT_OF_MEMORY);
  }
  REQUIRE(s.floor(t) == 1);
  REQUIRE(s.fingerprint(copies, {t}) == before);
  REQUIRE(s.filtered(every_prim).size() == source.size());
  s.seal(2, {t});
  REQUIRE(s.filtered(every_prim).size() == source.size() * (kN + 1));
  const auto got = scalars(s, copies, t);
  REQUIRE(got ==
          std::map<kstage_path_t, float>{{first + kN, 1.f},
                                         {s.path("/e/env_" + std::to_string(kN) + "/a"), 2.f},
                                         {s.path("/e/env_7/b"), 3.f}});
  // A copy deleted after: its row leaves (the tile is written out into the table first), the
  // others keep theirs.
  const kstage_query_t one = s.query({s.path("/e/env_7/b")});
  REQUIRE(s.remove(one, {}, 3) == KSTAGE_OK);
  s.seal(3);
  REQUIRE(s.filtered(every_prim).size() == source.size() * (kN + 1) - 1);
  const auto after = scalars(s, copies, t);
  REQUIRE(after.size() == 2);
  REQUIRE(after.at(first + kN) == 1.f);
}

// A batch write enqueues every attribute or none, whichever allocation fails: with the
// calling thread's allocations failing after the first k, for every k until the write goes
// through, the call fails with KSTAGE_OUT_OF_MEMORY and leaves the stage as it was (no new
// column, nothing pending), and the managed tensor among its sources is deleted once.
TEST_CASE("a batch write that runs out of memory anywhere enqueues nothing", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 64;
  const std::vector<kstage_path_t> prims = s.paths("/b", kN);
  const kstage_query_t q = s.query(prims);
  const kstage_token_t old_attr = s.token("old"), a = s.token("a"), b = s.token("b");
  s.write_f32(q, old_attr, 1, std::vector<float>(kN, 1.f));
  s.seal(1);
  const std::vector<kstage_token_t> attrs{old_attr, a, b};
  // The stage's contents (its floors aside: each attempt is sealed before the next).
  auto contents = [&]() {
    std::string c;
    for (kstage_token_t attr : attrs) {
      c += " attribute " + std::to_string(attr) + ":";
      for (auto& [p, bytes] : s.values(q, attr)) {
        c += " " + std::to_string(p) + "=";
        for (unsigned char x : bytes) c += std::to_string(int(x)) + ",";
      }
    }
    const std::string f = s.fingerprint(q, attrs);
    return c + f.substr(f.find(" prims"));  // the prims that exist
  };
  const std::string before = contents();
  std::vector<float> v0(kN, 2.f), v1(kN, 3.f), v2(kN * 3, 4.f);
  int64_t shape[1] = {int64_t(kN)};
  DLTensor t0 = tensor(v0.data(), f32(), 1, shape), t1 = tensor(v1.data(), f32(), 1, shape),
           t2 = tensor(v2.data(), f32(3), 1, shape);
  const kstage_write_data_t data[3] = {write_data(&t0), write_data(&t1), write_data(&t2)};
  long k = 0;
  uint64_t ordinal = 2;
  for (;; ++k, ++ordinal) {
    REQUIRE(k < 100000);
    kstage_op_t op = 0;
    kstage_status_t st;
    {
      NoMemoryAfter guard(k);
      try {
        st = kstage_write_attributes(s.stage, q, attrs.data(), data, 3, ordinal,
                                     KSTAGE_PRIM_MODE_UPSERT, &op);
      } catch (...) {
        countdown = -1;
        FAIL("kstage_write_attributes threw, its allocation " << k << " failing");
      }
    }
    if (st == KSTAGE_OK) {
      KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
      KS_OK(kstage_release_op(s.stage, op));
      break;
    }
    CAPTURE(k, kstage_last_error());
    REQUIRE(st == KSTAGE_OUT_OF_MEMORY);
    // Nothing enqueued: sealing the attempt's ordinal changes nothing.
    s.seal(ordinal);
    REQUIRE(contents() == before);
  }
  CAPTURE(k);
  REQUIRE(k > 3);  // the sweep went through allocations of the call
  s.seal(ordinal);
  for (const auto& [attr, want] : {std::pair{old_attr, 2.f}, std::pair{a, 3.f}}) {
    const auto got = scalars(s, q, attr);
    REQUIRE(got.size() == kN);
    for (const auto& [p, x] : got) REQUIRE(x == want);
  }
  REQUIRE(s.changed(q, b, ordinal, ordinal).size() == kN);
}

// An unmap commits every group it names or none, whichever allocation fails, and a failed one
// leaves its groups mapped for a retry: no column made by a failed call, no group committed
// twice or with its rows gone (a retry of a half-moved group crashed the next seal).
TEST_CASE("an unmap that runs out of memory anywhere commits nothing and can be retried", "[oom]") {
  const bool whole = GENERATE(true, false);  // kstage_unmap_attribute, else kstage_unmap_group
  CAPTURE(whole);
  Stage s(host_execution());
  const std::vector<kstage_path_t> prims = s.paths("/m", 4);
  const kstage_query_t q = s.query(prims);
  const kstage_token_t a = s.token("a");
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = a;
  d.dtype = f32();
  d.max_group_prims = 2;
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &d, 1, nullptr, 0, &m));
  kstage_map_group_info_t g[2];
  for (kstage_map_group_info_t& gi : g) {
    KS_OK(kstage_fetch_map_next(s.stage, m, 0, &gi));
    const DLTensor& t = gi.data.tensors[0];
    std::vector<float> rows(size_t(t.shape[0]));
    for (uint64_t i = 0; i < gi.prim_count; ++i)
      rows[gi.data.index_map ? gi.data.index_map[i] : i] = float(gi.prims[i]);
    host_write(static_cast<char*>(t.data) + t.byte_offset, rows.data(), rows.size() * sizeof(float),
               t.device);
  }
  kstage_op_t op = 0;
  auto unmap = [&](kstage_map_group_t group) {
    return whole ? kstage_unmap_attribute(s.stage, m, {0, 0}, &op)
                 : kstage_unmap_group(s.stage, m, group, {0, 0}, &op);
  };
  auto finish = [&]() {
    KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
    KS_OK(kstage_release_op(s.stage, op));
  };
  long k = 0;
  for (;; ++k) {
    REQUIRE(k < 100000);
    kstage_status_t st;
    {
      NoMemoryAfter guard(k);
      st = unmap(g[0].handle);
    }
    if (st == KSTAGE_OK) {
      finish();
      break;
    }
    CAPTURE(k, kstage_last_error());
    REQUIRE(st == KSTAGE_OUT_OF_MEMORY);
    // No column 'a' yet: a map of it as float64 is accepted (and dropped).
    kstage_map_desc_t other = d;
    other.dtype = DLDataType{kDLFloat, 64, 1};
    kstage_map_t probe = 0;
    KS_OK(kstage_map_attribute(s.stage, q, &other, 2, nullptr, 0, &probe));
    KS_OK(kstage_release_map(s.stage, probe));
  }
  CAPTURE(k);
  REQUIRE(k > 2);
  if (!whole) {
    REQUIRE(unmap(g[1].handle) == KSTAGE_OK);
    finish();
  }
  s.seal(1);
  const auto got = scalars(s, q, a);
  REQUIRE(got.size() == 4);
  for (const auto& [p, x] : got) REQUIRE(x == float(p));
}

namespace {
// The mutations of the seal sweep below, submitted to `s` (the same ids in every stage made so):
// fixed-size "t" and ragged "r" over 60 prims -- first writes, new prims through an index_map,
// a mask, deletes, rows re-added beside new ones -- at ordinals 1..5.
struct SealSweep {
  std::vector<kstage_path_t> all;
  kstage_query_t every = 0;
  kstage_token_t t = 0, r = 0;
  static constexpr uint64_t kLast = 5;

  explicit SealSweep(Stage& s) {
    std::vector<kstage_path_t> base = s.paths("/ss/p", 40), fresh = s.paths("/ss/n", 10),
                               later = s.paths("/ss/l", 10);
    std::reverse(base.begin(), base.end());  // not in id order: per-prim tables from the start
    all = base;
    all.insert(all.end(), fresh.begin(), fresh.end());
    all.insert(all.end(), later.begin(), later.end());
    every = s.query(all);
    t = s.token("t");
    r = s.token("r");
    const kstage_query_t q_base = s.query(base), q_fresh = s.query(fresh);
    const kstage_query_t q_some = s.query({base[3], base[7], base[11], base[19], base[30]});
    const kstage_query_t q_mixed =
        s.query({base[7], later[0], base[19], later[1], later[2], base[30]});
    auto f32s = [](size_t n, float v0) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = v0 + float(i);
      return v;
    };
    auto ragged = [&](kstage_query_t q, size_t n, uint64_t ordinal, float v0) {
      std::vector<float> data;
      std::vector<int64_t> shapes(n);
      for (size_t i = 0; i < n; ++i) {
        shapes[i] = int64_t(i % 4);
        for (int64_t e = 0; e < shapes[i]; ++e) data.push_back(v0 + float(i) + 0.25f * float(e));
      }
      std::vector<DLTensor> rows(n);
      size_t at = 0;
      for (size_t i = 0; i < n; ++i) {
        rows[i] = tensor(data.data() + at, f32(), 1, &shapes[i]);
        at += size_t(shapes[i]);
      }
      KS_OK(s.write(q, r, ordinal, write_data(rows.data(), n, true)));
    };
    s.write_f32(q_base, t, 1, f32s(40, 100.f));
    ragged(q_base, 40, 1, 1000.f);
    {  // new prims through an index_map (source rows reversed)
      std::vector<float> src = f32s(10, 200.f);
      uint32_t map[10];
      for (uint32_t i = 0; i < 10; ++i) map[i] = 9 - i;
      int64_t shape[1] = {10};
      DLTensor tensor_ = tensor(src.data(), f32(), 1, shape);
      kstage_write_data_t w = write_data(&tensor_);
      w.count = 10;
      w.index_map = map;
      KS_OK(s.write(q_fresh, t, 2, w));
    }
    ragged(q_fresh, 10, 2, 2000.f);
    const uint64_t mask = 0x00F0F0F0F0F0F0F0ull;  // some of the 40
    s.write_f32(q_base, t, 3, f32s(40, 300.f), 1, &mask);
    REQUIRE(s.remove(q_some, {t, r}, 4) == KSTAGE_OK);
    s.write_f32(q_mixed, t, 5, f32s(6, 500.f));
    ragged(q_mixed, 6, 5, 5000.f);
  }
};
}  // namespace

// A seal applies its mutations one at a time; whichever allocation fails, the attribute's floor
// stops below the mutation that failed, and the stage reads exactly what a stage sealed to that
// floor without failures reads. With the calling thread's allocations failing after the first k,
// for every k, until the seal goes through (fixed-size, then ragged).
TEST_CASE("a seal that runs out of memory anywhere stops at a floor it has reached exactly",
          "[oom]") {
  const kstage_host_execution_t exec = host_execution();
  // What each attribute reads at each floor (the other one unsealed, then sealed to the end).
  Stage ref(exec);
  SealSweep rs(ref);
  std::map<std::pair<kstage_token_t, uint64_t>, std::string> expect;
  for (kstage_token_t a : {rs.t, rs.r})
    for (uint64_t f = 0; f <= SealSweep::kLast; ++f) {
      if (f > 0) ref.seal(f, {a});
      expect[{a, f}] = ref.fingerprint(rs.every, {a});
    }
  Stage s(exec);
  SealSweep ss(s);
  REQUIRE(ss.t == rs.t);
  REQUIRE(ss.all == rs.all);
  for (kstage_token_t a : {ss.t, ss.r}) {
    long k = 0;
    for (;; ++k) {
      REQUIRE(k < 100000);
      kstage_status_t st;
      {
        NoMemoryAfter guard(k);
        st = kstage_advance_write_floor(s.stage, SealSweep::kLast, &a, 1);
      }
      if (st == KSTAGE_OK) break;
      CAPTURE(a, k, kstage_last_error());
      REQUIRE(st == KSTAGE_OUT_OF_MEMORY);
      const uint64_t f = s.floor(a);
      REQUIRE(f < SealSweep::kLast);
      REQUIRE(s.fingerprint(ss.every, {a}) == expect[{a, f}]);
    }
    CAPTURE(a, k);
    REQUIRE(k > 3);
    REQUIRE(s.fingerprint(ss.every, {a}) == expect[{a, SealSweep::kLast}]);
  }
}

// A range query's read group makes its `prims` array when it is fetched (8 bytes a prim). No
// memory for it: the fetch fails with KSTAGE_OUT_OF_MEMORY and takes nothing off the read, and
// the next fetch returns that same group.
TEST_CASE("a fetch that cannot make its group's prims array takes nothing", "[oom]") {
  Stage s(host_execution());
  constexpr uint64_t kN = 100000;
  const kstage_path_t first = s.range("/f", "p", 0, kN);
  const kstage_query_t all = s.range_query(first);
  const kstage_token_t t = s.token("t");
  std::vector<float> v(kN);
  for (uint64_t i = 0; i < kN; ++i) v[i] = float(i);
  s.write_f32(all, t, 1, v);
  s.seal(1);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.max_group_prims = kN / 2;  // two groups of 50000 prims: 400 KB of ids each
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, all, &t, 1, &d, &r));
  kstage_read_group_t g{};
  {
    NoMemoryFrom guard(kN);
    REQUIRE(kstage_fetch_read_next(s.stage, r, 0, &g) == KSTAGE_OUT_OF_MEMORY);
  }
  uint64_t seen = 0;
  for (;;) {
    const kstage_status_t st = kstage_fetch_read_next(s.stage, r, 0, &g);
    if (st == KSTAGE_END_OF_ITERATION) break;
    KS_OK(st);
    REQUIRE(g.prim_count == kN / 2);
    for (uint64_t k = 0; k < g.prim_count; ++k) REQUIRE(g.prims[k] == first + seen + k);
    const std::vector<float> got = group_floats(g, 0, size_t(g.prim_count));
    for (uint64_t k = 0; k < g.prim_count; ++k) REQUIRE(got[k] == float(seen + k));
    seen += g.prim_count;
    KS_OK(kstage_release_group(s.stage, g.handle));
  }
  REQUIRE(seen == kN);  // both groups, the first one included
  KS_OK(kstage_release_read(s.stage, r));
}
