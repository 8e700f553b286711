// SPDX-License-Identifier: Apache-2.0
// Reads: latest and change-range reads, tombstones, group lifetime across
// later seals (copy-on-write), target devices, compact vs zero-copy groups,
// and the read/group handle protocol.
#include "support.hpp"

#include <set>

using namespace kstage_test;

namespace {

// Array write: one float32 tensor per prim.
void write_arrays(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                  std::vector<std::vector<float>> rows) {
  std::vector<int64_t> shapes(rows.size());
  std::vector<DLTensor> ts(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    shapes[i] = int64_t(rows[i].size());
    ts[i] = tensor(rows[i].data(), f32(), 1, &shapes[i]);
  }
  kstage_write_data_t w = write_data(ts.data(), ts.size(), true);
  KS_OK(s.write(q, attr, ordinal, w));
}

kstage_read_desc_t range(uint64_t begin, uint64_t end) {
  kstage_read_desc_t d = kstage_read_desc_init();
  d.change_range = true;
  d.range_begin = begin;
  d.range_end = end;
  return d;
}

std::vector<float> floats_of(const Group& g) {
  std::vector<float> out;
  for (auto& v : g.values)
    for (float f : as_floats(v)) out.push_back(f);
  return out;
}

// Opens a read of one attribute and fetches its first group, leaving both held.
kstage_read_group_t hold(Stage& s, kstage_query_t q, kstage_token_t attr, kstage_read_t* read) {
  KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, nullptr, read));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, *read, 0, &g));
  return g;
}

}  // namespace

TEST_CASE("a latest read gives one group per attribute, prims in query order", "[read]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), b = s.token("b");
  auto p = s.paths("/p", 5);
  KS_OK(try_write(s, s.query({p[3], p[1], p[0], p[2]}), a, 1, {3.f, 1.f, 0.f, 2.f}));
  KS_OK(try_write(s, s.query({p[1], p[4]}), b, 1, {11.f, 14.f}));
  s.seal(1);

  kstage_query_t q = s.query({p[4], p[2], p[0], p[1], p[3]});
  auto g = s.read(q, {a, b});
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].attribute == a);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[2], p[0], p[1], p[3]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{2.f, 0.f, 1.f, 3.f});
  REQUIRE(g[1].attribute == b);
  REQUIRE(g[1].prims == std::vector<kstage_path_t>{p[4], p[1]});
  REQUIRE(floats_of(g[1]) == std::vector<float>{14.f, 11.f});
  for (const Group& x : g) {
    REQUIRE_FALSE(x.is_delete);
    REQUIRE_FALSE(x.is_array);
    REQUIRE(x.dtype.code == kDLFloat);
    REQUIRE(x.dtype.bits == 32);
    REQUIRE(x.dtype.lanes == 1);
    REQUIRE(x.semantic == KSTAGE_SEMANTIC_NONE);
    REQUIRE(x.ordinal == 1);
  }
  // Attribute order of the request decides group order.
  g = s.read(q, {b, a});
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].attribute == b);
  REQUIRE(g[1].attribute == a);
}

TEST_CASE("explicit path queries may name prims that do not exist yet", "[read][query]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  kstage_path_t now = s.path("/now"), later = s.path("/later"), never = s.path("/never");
  kstage_query_t q = s.query({later, now, never});
  kstage_query_t only_future = s.query({later, never});
  KS_OK(try_write(s, s.query({now}), a, 1, {1.f}));
  s.seal(1);
  auto g = s.read(q, {a});
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{now});
  REQUIRE(s.read(only_future, {a}).empty());

  KS_OK(try_write(s, s.query({later}), a, 2, {2.f}));
  s.seal(2);
  g = s.read(q, {a});  // the same handle now sees it
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{later, now});
  REQUIRE(floats_of(g[0]) == std::vector<float>{2.f, 1.f});
  g = s.read(only_future, {a});
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{later});
}

TEST_CASE("change-range reads return the prims whose last change is in the range",
          "[read][change_range]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/c", 6);
  kstage_query_t all = s.query(p);
  KS_OK(try_write(s, all, a, 1, {10.f, 11.f, 12.f, 13.f, 14.f, 15.f}));
  KS_OK(try_write(s, s.query({p[1], p[2]}), a, 2, {21.f, 22.f}));
  KS_OK(try_write(s, s.query({p[2], p[3]}), a, 3, {32.f, 33.f}));
  KS_OK(try_write(s, s.query({p[4]}), a, 4, {44.f}));
  KS_OK(try_write(s, s.query({p[5]}), a, 5, {55.f}));
  s.seal(5);

  kstage_query_t q03 = s.query({p[3], p[0], p[2], p[1]});
  kstage_read_desc_t d = range(2, 3);
  auto g = s.read(q03, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE_FALSE(g[0].is_delete);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[3], p[2], p[1]});  // query order
  REQUIRE(floats_of(g[0]) == std::vector<float>{33.f, 32.f, 21.f});     // current values
  REQUIRE(g[0].ordinal == 5);

  // [1, 1] is answerable only for prims that did not change after 1.
  d = range(1, 1);
  g = s.read(s.query({p[0]}), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[0]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{10.f});
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, q03, &a, 1, &d, &r), KSTAGE_OUT_OF_RANGE,
           "after the range end 1");

  d = range(3, 3);
  g = s.read(q03, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[3], p[2]});

  // Prims of the query changed at 4 (and 5): the range cannot be answered.
  d = range(2, 3);
  KS_FAILS(kstage_read_attributes(s.stage, s.query({p[0], p[4]}), &a, 1, &d, &r),
           KSTAGE_OUT_OF_RANGE, "prim '/c_4' changed again at ordinal 4");
  KS_FAILS(kstage_read_attributes(s.stage, all, &a, 1, &d, &r), KSTAGE_OUT_OF_RANGE,
           "after the range end 3");
  d = range(1, 4);
  KS_FAILS(kstage_read_attributes(s.stage, all, &a, 1, &d, &r), KSTAGE_OUT_OF_RANGE,
           "prim '/c_5' changed again at ordinal 5");
  REQUIRE(r == 0);

  d = range(2, 4);
  g = s.read(s.query({p[0], p[1], p[2], p[3], p[4]}), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[1], p[2], p[3], p[4]});
  d = range(1, 5);
  g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == p);
  REQUIRE(floats_of(g[0]) == std::vector<float>{10.f, 21.f, 32.f, 33.f, 44.f, 55.f});
  // A range after every change: nothing changed, no group, no error.
  d = range(6, 9);
  REQUIRE(s.read(all, {a}, &d).empty());
  // The range may reach past the floor.
  d = range(5, 100);
  g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[5]});
}

TEST_CASE("change-range reads after dense ticks", "[read][change_range]") {
  // A write of every row records its ordinal once for the column; reads of a
  // range that holds it, or that ends after the column's last change, take
  // shortcuts that must give what the per-prim rules give.
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/d", 5);
  kstage_query_t all = s.query(p);
  kstage_query_t tail = s.query({p[4], p[2], p[3]});
  KS_OK(try_write(s, all, a, 1, {1, 1, 1, 1, 1}));
  KS_OK(try_write(s, all, a, 2, {2, 2, 2, 2, 2}));
  s.seal(2);
  kstage_read_desc_t d = range(2, 2);
  auto g = s.read(tail, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[4], p[2], p[3]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{2, 2, 2});
  d = range(1, 1);
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, tail, &a, 1, &d, &r), KSTAGE_OUT_OF_RANGE,
           "changed again at ordinal 2");
  d = range(3, 7);
  REQUIRE(s.read(all, {a}, &d).empty());

  // A partial tick after the dense one: [2, 2] is no longer answerable for it.
  KS_OK(try_write(s, s.query({p[3]}), a, 3, {3}));
  s.seal(3);
  d = range(2, 2);
  KS_FAILS(kstage_read_attributes(s.stage, tail, &a, 1, &d, &r), KSTAGE_OUT_OF_RANGE,
           "prim '/d_3' changed again at ordinal 3");
  g = s.read(s.query({p[0], p[1]}), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[0], p[1]});
  d = range(3, 3);
  g = s.read(tail, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[3]});
  d = range(2, 3);
  g = s.read(tail, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(floats_of(g[0]) == std::vector<float>{2, 2, 3});

  // A delete, then a dense write of the others: the tombstone is in the range
  // for a query that names the deleted prim.
  KS_OK(s.remove(s.query({p[1]}), {a}, 4));
  KS_OK(try_write(s, s.query({p[0], p[2], p[3], p[4]}), a, 5, {5, 5, 5, 5}));
  s.seal(5);
  d = range(4, 5);
  g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[0], p[2], p[3], p[4]});
  REQUIRE(g[1].is_delete);
  REQUIRE(g[1].prims == std::vector<kstage_path_t>{p[1]});
  d = range(5, 5);
  g = s.read(tail, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(floats_of(g[0]) == std::vector<float>{5, 5, 5});
}

TEST_CASE("change ordinals survive thousands of sparse ticks", "[read][change_range]") {
  // Rows record their last change as a small stamp into a table of ordinals
  // that is compacted as ticks accumulate (past 4096 distinct ordinals for a
  // small column); every row must keep its exact last-change ordinal.
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/k", 3);
  kstage_query_t all = s.query(p);
  kstage_query_t first = s.query({p[0]});
  kstage_query_t second = s.query({p[1]});
  KS_OK(try_write(s, all, a, 1, {0, 0, 0}));
  KS_OK(try_write(s, second, a, 2, {2}));
  s.seal(2);
  constexpr uint64_t kTicks = 9000;
  for (uint64_t t = 3; t < 3 + kTicks; ++t) {
    KS_OK(try_write(s, first, a, t, {float(t)}));
    s.seal(t);
  }
  const uint64_t last = 2 + kTicks;
  kstage_read_desc_t d = range(last, last);
  auto g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[0]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{float(last)});
  d = range(2, 2);
  g = s.read(second, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[1]});
  d = range(1, 1);
  g = s.read(s.query({p[2]}), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[2]});
  d = range(2, last - 1);
  g = s.read(s.query({p[1], p[2]}), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[1]});
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, all, &a, 1, &d, &r), KSTAGE_OUT_OF_RANGE,
           "prim '/k_0' changed again at ordinal " + std::to_string(last));
}

TEST_CASE("row stamps widen past 256 and 65536 live change ordinals", "[read][change_range]") {
  // Each row's last change is a stamp of 1 byte while the column's ordinal table has at most 256
  // entries, then 2, then 4 (StampTable). Here every row keeps its own ordinal, so no compaction
  // can keep the stamps narrow: both widenings happen, and every row keeps its exact ordinal.
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  constexpr size_t kRows = 66000;  // past 65536 distinct live ordinals
  auto p = s.paths("/w", kRows);
  kstage_query_t all = s.query(p);
  KS_OK(try_write(s, all, a, 1, std::vector<float>(kRows, 0.0f)));
  s.seal(1);
  for (size_t t = 0; t < kRows; ++t) {
    const uint64_t ordinal = 2 + t;
    KS_OK(try_write(s, s.query({p[t]}), a, ordinal, {float(t)}));
    s.seal(ordinal);
  }
  // The prims changed in [begin, end], read over p[0 .. end - 2] (a change-range read refuses
  // prims that changed again after its end).
  auto rows_in = [&](uint64_t begin, uint64_t end) {
    kstage_read_desc_t d = range(begin, end);
    const size_t upto = std::min<size_t>(end - 1, kRows);
    auto g = s.read(s.query(std::vector<kstage_path_t>(p.begin(), p.begin() + upto)), {a}, &d);
    REQUIRE(g.size() <= 1);
    return g.empty() ? Group{} : g[0];
  };
  for (size_t edge : {size_t(0), size_t(254), size_t(255), size_t(256), size_t(65534),
                      size_t(65535), size_t(65536), kRows - 1}) {
    const size_t lo = edge == 0 ? 0 : edge - 1, hi = std::min(edge + 1, kRows - 1);
    auto g = rows_in(2 + lo, 2 + hi);
    std::vector<kstage_path_t> want(p.begin() + lo, p.begin() + hi + 1);
    REQUIRE(g.prims == want);
    std::vector<float> values;
    for (size_t t = lo; t <= hi; ++t) values.push_back(float(t));
    REQUIRE(floats_of(g) == values);
  }
  REQUIRE(rows_in(1, 1 + kRows).prims.size() == kRows);
  REQUIRE(rows_in(2 + kRows, 2 + kRows).prims.size() == 0);
}

TEST_CASE("row stamps narrow again when a compaction leaves few live ordinals",
          "[read][change_range]") {
  // 300 rows with distinct live ordinals widen the stamps to 2 bytes; one write of rows 1..299
  // leaves two live ordinals, and the ticks on row 0 that follow outgrow the table (4096
  // entries): the compaction keeps three ordinals and narrows the stamps back to 1 byte. Every
  // row must still read back with its exact last change.
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  constexpr size_t kRows = 300;
  auto p = s.paths("/n", kRows);
  kstage_query_t all = s.query(p);
  KS_OK(try_write(s, all, a, 1, std::vector<float>(kRows, 0.0f)));
  s.seal(1);
  uint64_t ordinal = 1;
  for (size_t t = 0; t < kRows; ++t) {
    KS_OK(try_write(s, s.query({p[t]}), a, ++ordinal, {float(t)}));
    s.seal(ordinal);
  }
  const uint64_t rest_at = ++ordinal;
  KS_OK(try_write(s, s.query(std::vector<kstage_path_t>(p.begin() + 1, p.end())), a, rest_at,
                  std::vector<float>(kRows - 1, -1.0f)));
  s.seal(rest_at);
  kstage_query_t first = s.query({p[0]});
  for (int k = 0; k < 4200; ++k) {
    ++ordinal;
    KS_OK(try_write(s, first, a, ordinal, {float(ordinal)}));
    s.seal(ordinal);
  }
  kstage_read_desc_t d = range(rest_at, rest_at);
  auto g = s.read(s.query(std::vector<kstage_path_t>(p.begin() + 1, p.end())), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>(p.begin() + 1, p.end()));
  REQUIRE(floats_of(g[0]) == std::vector<float>(kRows - 1, -1.0f));
  d = range(ordinal, ordinal);
  g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[0]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{float(ordinal)});
  d = range(rest_at + 1, ordinal - 1);
  g = s.read(s.query(std::vector<kstage_path_t>(p.begin() + 1, p.end())), {a}, &d);
  REQUIRE(g.empty());
}

TEST_CASE("change-range reads after sparse ticks", "[read][change_range]") {
  // When one sparse write is the only change since the range's beginning and
  // the query is the column in row order, the read answers from that write's
  // rows instead of scanning; every other case scans. Both must agree.
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/s", 8);
  kstage_query_t all = s.query(p);
  kstage_query_t shuffled = s.query({p[6], p[1], p[4]});
  std::vector<float> base(8);
  for (size_t i = 0; i < 8; ++i) base[i] = float(i);
  KS_OK(try_write(s, all, a, 1, base));
  s.seal(1);
  auto changed = [&](kstage_query_t q, uint64_t b, uint64_t e) {
    kstage_read_desc_t d = range(b, e);
    std::vector<kstage_path_t> out;
    for (const auto& g : s.read(q, {a}, &d)) {
      REQUIRE_FALSE(g.is_delete);
      out.insert(out.end(), g.prims.begin(), g.prims.end());
    }
    return out;
  };
  // A mask tick through the column-ordered query.
  uint64_t mask[1] = {(1u << 2) | (1u << 5) | (1u << 7)};
  std::vector<float> src(8, 50.f);
  int64_t shape[1] = {8};
  DLTensor t = tensor(src.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.count = 8;
  w.mask = mask;
  KS_OK(s.write(all, a, 2, w));
  s.seal(2);
  REQUIRE(changed(all, 2, 2) == std::vector<kstage_path_t>{p[2], p[5], p[7]});
  REQUIRE(changed(all, 2, 9) == std::vector<kstage_path_t>{p[2], p[5], p[7]});
  REQUIRE(changed(all, 1, 2) == p);  // the range reaches the dense write
  REQUIRE(changed(shuffled, 2, 2).empty());

  // A write through a query in another order: rows out of row order, the
  // answer in query (= row) order.
  KS_OK(try_write(s, shuffled, a, 3, {60.f, 61.f, 64.f}));
  s.seal(3);
  REQUIRE(changed(all, 3, 3) == std::vector<kstage_path_t>{p[1], p[4], p[6]});
  REQUIRE(changed(all, 2, 3) == std::vector<kstage_path_t>{p[1], p[2], p[4], p[5], p[6], p[7]});
  REQUIRE(changed(shuffled, 3, 3) == std::vector<kstage_path_t>{p[6], p[1], p[4]});
  kstage_read_desc_t d = range(3, 3);
  auto g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(floats_of(g[0]) == std::vector<float>{61.f, 64.f, 60.f});

  // Two writes at one ordinal: both count.
  KS_OK(try_write(s, s.query({p[0]}), a, 4, {70.f}));
  KS_OK(try_write(s, s.query({p[3]}), a, 4, {73.f}));
  s.seal(4);
  REQUIRE(changed(all, 4, 4) == std::vector<kstage_path_t>{p[0], p[3]});

  // After a delete, the deleted prim's tombstone is part of the answer.
  KS_OK(try_write(s, s.query({p[2]}), a, 5, {82.f}));
  REQUIRE(s.remove(s.query({p[7]}), {a}, 6) == KSTAGE_OK);
  s.seal(6);
  d = range(5, 6);
  g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[2]});
  REQUIRE(g[1].is_delete);
  REQUIRE(g[1].prims == std::vector<kstage_path_t>{p[7]});
}

TEST_CASE("change-range reads report deletions as tombstone groups",
          "[read][change_range][delete]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/t", 4);
  kstage_query_t all = s.query(p);
  KS_OK(try_write(s, all, a, 1, {1.f, 2.f, 3.f, 4.f}));
  KS_OK(try_write(s, s.query({p[0]}), a, 2, {20.f}));
  KS_OK(s.remove(s.query({p[2], p[1]}), {a}, 3));
  KS_OK(try_write(s, s.query({p[3]}), a, 4, {40.f}));
  s.seal(5);

  kstage_read_desc_t d = range(3, 5);
  auto g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 2);
  REQUIRE_FALSE(g[0].is_delete);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[3]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{40.f});
  REQUIRE(g[1].is_delete);
  REQUIRE(g[1].attribute == a);
  REQUIRE(g[1].prims == std::vector<kstage_path_t>{p[1], p[2]});  // query order
  REQUIRE(g[1].values.empty());

  // Raw view of the tombstone: no tensors, data.count == prim_count.
  {
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, all, &a, 1, &d, &r));
    kstage_read_group_t v{}, t{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &v));
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &t));
    REQUIRE(t.is_delete);
    REQUIRE(t.prim_count == 2);
    REQUIRE(t.data.count == 2);
    REQUIRE(t.data.tensor_count == 0);
    REQUIRE(t.data.tensors == nullptr);
    REQUIRE(t.data.index_map == nullptr);
    REQUIRE(t.data.mask == nullptr);
    REQUIRE(t.attribute == a);
    REQUIRE(t.handle != v.handle);
    kstage_read_group_t none{};
    KS_FAILS(kstage_fetch_read_next(s.stage, r, 0, &none), KSTAGE_END_OF_ITERATION,
             "no more groups");
    KS_OK(kstage_release_group(s.stage, v.handle));
    KS_OK(kstage_release_group(s.stage, t.handle));
    KS_OK(kstage_release_read(s.stage, r));
  }

  // Only tombstones in the range: no value group.
  d = range(3, 3);
  g = s.read(s.query({p[0], p[1], p[2]}), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].is_delete);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[1], p[2]});
  // The deletion at 3 is a change after [1, 2].
  d = range(1, 2);
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, s.query({p[0], p[1]}), &a, 1, &d, &r),
           KSTAGE_OUT_OF_RANGE, "prim '/t_1' changed again at ordinal 3");
  // A range after the deletion: no tombstone.
  d = range(4, 5);
  g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE_FALSE(g[0].is_delete);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[3]});
  // The latest read has no trace of the deleted prims.
  g = s.read(all, {a});
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[0], p[3]});

  // Written again at 6: p_1 is a value again, only p_2 stays a tombstone.
  KS_OK(try_write(s, s.query({p[1]}), a, 6, {61.f}));
  s.seal(6);
  d = range(3, 6);
  g = s.read(all, {a}, &d);
  REQUIRE(g.size() == 2);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[1], p[3]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{61.f, 40.f});
  REQUIRE(g[1].is_delete);
  REQUIRE(g[1].prims == std::vector<kstage_path_t>{p[2]});
}

TEST_CASE("a change range with begin > end is rejected", "[read][change_range][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  kstage_query_t q = s.query(s.paths("/p", 2));
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  s.seal(1);
  kstage_read_desc_t d = range(4, 3);
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, &d, &r), KSTAGE_INVALID_ARGUMENT,
           "change range [4, 3] is empty (begin > end)");
  REQUIRE(r == 0);
  d = range(3, 3);  // a single ordinal is fine
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
  KS_OK(kstage_release_read(s.stage, r));
  // begin > end is harmless when change_range is false.
  d = range(4, 3);
  d.change_range = false;
  REQUIRE(s.read(q, {a}, &d).size() == 1);
}

TEST_CASE("a held group keeps its values across later seals", "[read][lifetime]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 4);
  kstage_query_t q = s.query(p);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f, 3.f, 4.f}));
  s.seal(1);

  kstage_read_t r = 0;
  kstage_read_group_t g = hold(s, q, a, &r);
  const void* data_before = g.data.tensors[0].data;
  // A full rewrite, a sparse rewrite, new prims, a delete: all sealed.
  KS_OK(try_write(s, q, a, 2, {10.f, 20.f, 30.f, 40.f}));
  s.seal(2);
  KS_OK(try_write(s, s.query({p[1], p[3]}), a, 3, {200.f, 400.f}));
  s.seal(3);
  KS_OK(try_write(s, s.query(s.paths("/more", 8)), a, 4, {5, 5, 5, 5, 5, 5, 5, 5}));
  KS_OK(s.remove(s.query({p[0]}), {a}, 4));
  s.seal(4);
  KS_OK(try_write(s, q, a, 5, {-1.f, -2.f, -3.f, -4.f}));
  s.seal(5);

  REQUIRE(g.data.tensors[0].data == data_before);
  Group held = Stage::copy_group(g);
  REQUIRE(held.prims == p);
  REQUIRE(floats_of(held) == std::vector<float>{1.f, 2.f, 3.f, 4.f});
  REQUIRE(held.ordinal == 1);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));

  REQUIRE(scalars(s, q, a) ==
          std::map<kstage_path_t, float>{{p[0], -1.f}, {p[1], -2.f}, {p[2], -3.f}, {p[3], -4.f}});
}

TEST_CASE("a held array group keeps its values across later seals", "[read][lifetime][array]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("arr");
  auto p = s.paths("/p", 3);
  kstage_query_t q = s.query(p);
  write_arrays(s, q, a, 1, {{1.f}, {2.f, 2.f}, {3.f, 3.f, 3.f}});
  s.seal(1);
  kstage_read_t r = 0;
  kstage_read_group_t g = hold(s, q, a, &r);
  // Same lengths (an in-place overwrite when nobody holds the buffer), then new lengths.
  write_arrays(s, q, a, 2, {{9.f}, {8.f, 8.f}, {7.f, 7.f, 7.f}});
  s.seal(2);
  write_arrays(s, s.query({p[1]}), a, 3, {{6.f, 6.f, 6.f, 6.f}});
  s.seal(3);
  Group held = Stage::copy_group(g);
  REQUIRE(held.is_array);
  REQUIRE(held.values.size() == 3);
  REQUIRE(as_floats(held.values[0]) == std::vector<float>{1.f});
  REQUIRE(as_floats(held.values[1]) == std::vector<float>{2.f, 2.f});
  REQUIRE(as_floats(held.values[2]) == std::vector<float>{3.f, 3.f, 3.f});
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  auto now = s.floats(q, a);
  REQUIRE(now[p[0]] == std::vector<float>{9.f});
  REQUIRE(now[p[1]] == std::vector<float>{6.f, 6.f, 6.f, 6.f});
  REQUIRE(now[p[2]] == std::vector<float>{7.f, 7.f, 7.f});
}

TEST_CASE("two readers hold groups from different snapshots", "[read][lifetime]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 3);
  kstage_query_t q = s.query(p), q1 = s.query({p[1]});
  KS_OK(try_write(s, q, a, 1, {1.f, 1.f, 1.f}));
  s.seal(1);
  kstage_read_t r1 = 0, r2 = 0;
  kstage_read_group_t g1 = hold(s, q, a, &r1);

  KS_OK(try_write(s, q1, a, 2, {2.f}));  // sparse: in place unless pinned
  s.seal(2);
  kstage_read_group_t g2 = hold(s, q, a, &r2);
  KS_OK(try_write(s, q1, a, 3, {3.f}));
  s.seal(3);
  REQUIRE(floats_of(Stage::copy_group(g1)) == std::vector<float>{1.f, 1.f, 1.f});
  REQUIRE(floats_of(Stage::copy_group(g2)) == std::vector<float>{1.f, 2.f, 1.f});
  REQUIRE(g1.ordinal == 1);
  REQUIRE(g2.ordinal == 2);

  KS_OK(kstage_release_group(s.stage, g1.handle));
  KS_OK(kstage_release_read(s.stage, r1));
  KS_OK(try_write(s, q1, a, 4, {4.f}));
  s.seal(4);
  REQUIRE(floats_of(Stage::copy_group(g2)) == std::vector<float>{1.f, 2.f, 1.f});
  KS_OK(kstage_release_group(s.stage, g2.handle));
  KS_OK(kstage_release_read(s.stage, r2));
  REQUIRE(scalars(s, q, a) ==
          std::map<kstage_path_t, float>{{p[0], 1.f}, {p[1], 4.f}, {p[2], 1.f}});
}

TEST_CASE("groups outlive their read handle", "[read][lifetime]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), b = s.token("b");
  auto p = s.paths("/p", 2);
  kstage_query_t q = s.query(p);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  KS_OK(try_write(s, q, b, 1, {3.f, 4.f}));
  s.seal(1);
  kstage_token_t ab[2] = {a, b};
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, ab, 2, nullptr, &r));
  kstage_read_group_t ga{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &ga));
  KS_OK(kstage_release_read(s.stage, r));  // b's group was never fetched
  kstage_read_group_t gb{};
  KS_FAILS(kstage_fetch_read_next(s.stage, r, 0, &gb), KSTAGE_INVALID_HANDLE, "read handle");
  KS_OK(try_write(s, q, a, 2, {10.f, 20.f}));
  s.seal(2);
  Group held = Stage::copy_group(ga);
  REQUIRE(held.attribute == a);
  REQUIRE(floats_of(held) == std::vector<float>{1.f, 2.f});
  KS_OK(kstage_release_group(s.stage, ga.handle));
}

TEST_CASE("reads onto a device this build lacks are refused", "[read][device]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 3);
  kstage_query_t q = s.query(p);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f, 3.f}));
  s.seal(1);
  kstage_read_desc_t d = kstage_read_desc_init();
  // Device types no build of this program has (a CUDA build has kDLCUDA).
#if defined(KSTAGE_TEST_ON_CUDA_DEVICE)
  const std::pair<DLDeviceType, const char*> absent[] = {{kDLOpenCL, "kDLOpenCL"},
                                                         {kDLROCM, "kDLROCM"}};
#else
  const std::pair<DLDeviceType, const char*> absent[] = {{kDLCUDA, "kDLCUDA"},
                                                         {kDLROCM, "kDLROCM"}};
#endif
  d.target_device = DLDevice{absent[0].first, 0};
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, &d, &r), KSTAGE_NOT_SUPPORTED,
           absent[0].second);
  d.target_device = DLDevice{absent[1].first, 1};
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, &d, &r), KSTAGE_NOT_SUPPORTED,
           absent[1].second);
  REQUIRE(r == 0);

  d.target_device = DLDevice{kDLCPU, 0};
  auto g = s.read(s.query({p[2], p[0]}), {a}, &d);
  REQUIRE(g.size() == 1);
  REQUIRE(g[0].prims == std::vector<kstage_path_t>{p[2], p[0]});
  REQUIRE(floats_of(g[0]) == std::vector<float>{3.f, 1.f});
  // The tensor is on the CPU.
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
  kstage_read_group_t raw{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &raw));
  REQUIRE(raw.data.tensors[0].device.device_type == kDLCPU);
  REQUIRE(raw.data.device_sync.stream == 0);
  REQUIRE(raw.data.device_sync.event == 0);
  KS_OK(kstage_release_group(s.stage, raw.handle));
  KS_OK(kstage_release_read(s.stage, r));
}

TEST_CASE("the read and group handle protocol", "[read][errors]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a"), nocol = s.token("no_column");
  auto p = s.paths("/p", 2);
  kstage_query_t q = s.query(p);
  KS_OK(try_write(s, q, a, 1, {1.f, 2.f}));
  s.seal(1);

  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, nullptr, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  kstage_read_group_t after{};
  after.prim_count = 99;
  for (int i = 0; i < 3; ++i)
    KS_FAILS(kstage_fetch_read_next(s.stage, r, 0, &after), KSTAGE_END_OF_ITERATION,
             "no more groups");
  REQUIRE(after.prim_count == 99);  // untouched
  KS_FAILS(kstage_fetch_read_next(s.stage, r, 0, nullptr), KSTAGE_INVALID_ARGUMENT,
           "group is NULL");
  // A group handle is not a read handle and vice versa.
  KS_FAILS(kstage_fetch_read_next(s.stage, g.handle, 0, &after), KSTAGE_INVALID_HANDLE,
           "read handle");
  KS_FAILS(kstage_release_group(s.stage, r), KSTAGE_INVALID_HANDLE, "group handle");
  KS_FAILS(kstage_release_read(s.stage, g.handle), KSTAGE_INVALID_HANDLE, "read handle");

  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_FAILS(kstage_release_group(s.stage, g.handle), KSTAGE_INVALID_HANDLE, "group handle");
  KS_OK(kstage_release_read(s.stage, r));
  KS_FAILS(kstage_release_read(s.stage, r), KSTAGE_INVALID_HANDLE, "read handle");
  KS_FAILS(kstage_fetch_read_next(s.stage, r, 0, &after), KSTAGE_INVALID_HANDLE, "read handle");
  KS_FAILS(kstage_release_group(s.stage, 0), KSTAGE_INVALID_HANDLE, "group handle");

  kstage_read_t none = 0;
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 0, nullptr, &none), KSTAGE_INVALID_ARGUMENT,
           "at least one attribute (n = 0");
  KS_FAILS(kstage_read_attributes(s.stage, q, nullptr, 1, nullptr, &none), KSTAGE_INVALID_ARGUMENT,
           "attributes NULL");
  kstage_token_t twice[3] = {a, nocol, a};
  KS_FAILS(kstage_read_attributes(s.stage, q, twice, 3, nullptr, &none), KSTAGE_INVALID_ARGUMENT,
           "attributes[2] ('a') repeats attributes[0]");
  const kstage_token_t bad = nocol + 500;
  kstage_token_t with_bad[2] = {a, bad};
  KS_FAILS(kstage_read_attributes(s.stage, q, with_bad, 2, nullptr, &none), KSTAGE_INVALID_ARGUMENT,
           "attributes[1] = " + std::to_string(bad) + " is not a token");
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, nullptr, nullptr), KSTAGE_INVALID_ARGUMENT,
           "read is NULL");
  KS_FAILS(kstage_read_attributes(s.stage, q + 777, &a, 1, nullptr, &none), KSTAGE_INVALID_HANDLE,
           "query handle");
  REQUIRE(none == 0);

  // An attribute that no column has: a valid read with no groups.
  KS_OK(kstage_read_attributes(s.stage, q, &nocol, 1, nullptr, &r));
  KS_FAILS(kstage_fetch_read_next(s.stage, r, 0, &after), KSTAGE_END_OF_ITERATION,
           "no more groups");
  KS_OK(kstage_release_read(s.stage, r));
  auto groups = s.read(q, {nocol, a});
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].attribute == a);
}

TEST_CASE("compact reads equal zero-copy reads", "[read][compact]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("pos"), arr = s.token("arr");
  auto p = s.paths("/p", 5);
  kstage_query_t all = s.query(p);
  s.write_f32(all, a, 1, {0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f}, 2);
  write_arrays(s, all, arr, 1, {{0.f}, {1.f, 1.f}, {}, {3.f, 3.f, 3.f}, {4.f}});
  s.seal(1);

  kstage_read_desc_t compact = kstage_read_desc_init();
  compact.compact = true;
  for (kstage_query_t q : {all, s.query({p[3], p[1], p[4]}), s.query({p[2]})}) {
    for (kstage_token_t t : {a, arr}) {
      auto zc = s.read(q, {t});
      auto cp = s.read(q, {t}, &compact);
      REQUIRE(zc.size() == 1);
      REQUIRE(cp.size() == 1);
      REQUIRE(cp[0].prims == zc[0].prims);
      REQUIRE(cp[0].values == zc[0].values);
      REQUIRE_FALSE(cp[0].had_index_map);
    }
  }
  // Raw: the zero-copy group over a reordered subset is the whole column plus
  // an index_map; the compact one has exactly the prims' rows in order.
  kstage_query_t sub = s.query({p[3], p[1]});
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, sub, &a, 1, nullptr, &r));
  kstage_read_group_t zc{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &zc));
  REQUIRE(zc.data.index_map != nullptr);
  REQUIRE(zc.data.mask == nullptr);
  REQUIRE(zc.data.count == 2);
  REQUIRE(zc.data.tensor_count == 1);
  REQUIRE(zc.data.tensors[0].shape[0] >= 4);
  KS_OK(kstage_release_group(s.stage, zc.handle));
  KS_OK(kstage_release_read(s.stage, r));
  KS_OK(kstage_read_attributes(s.stage, sub, &a, 1, &compact, &r));
  kstage_read_group_t cp{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &cp));
  REQUIRE(cp.data.index_map == nullptr);
  REQUIRE(cp.data.tensors[0].ndim == 1);
  REQUIRE(cp.data.tensors[0].shape[0] == 2);
  REQUIRE(cp.data.tensors[0].dtype.lanes == 2);
  const std::vector<float> f = group_floats(cp, 0, 4);
  REQUIRE(f == std::vector<float>{3.f, 3.5f, 1.f, 1.5f});
  KS_OK(kstage_release_group(s.stage, cp.handle));
  KS_OK(kstage_release_read(s.stage, r));

  // Every prim in row order: the identity, so no index_map even zero-copy.
  auto whole = s.read(all, {a});
  REQUIRE(whole.size() == 1);
  REQUIRE_FALSE(whole[0].had_index_map);
}

TEST_CASE("a zero-copy read over a column with freed rows maps around them", "[read][delete]") {
  Stage s(host_execution());
  kstage_token_t a = s.token("a");
  auto p = s.paths("/p", 5);
  kstage_query_t all = s.query(p);
  KS_OK(try_write(s, all, a, 1, {0.f, 1.f, 2.f, 3.f, 4.f}));
  KS_OK(s.remove(s.query({p[2]}), {a}, 2));
  s.seal(2);

  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, all, &a, 1, nullptr, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  REQUIRE(g.prim_count == 4);
  REQUIRE(std::vector<kstage_path_t>(g.prims, g.prims + 4) ==
          std::vector<kstage_path_t>{p[0], p[1], p[3], p[4]});
  REQUIRE(g.data.index_map != nullptr);
  std::set<uint32_t> rows(g.data.index_map, g.data.index_map + 4);
  REQUIRE(rows.size() == 4);  // distinct rows
  const std::vector<float> f = group_floats(g, 0, size_t(g.data.tensors[0].shape[0]));
  std::vector<float> got;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(int64_t(g.data.index_map[i]) < g.data.tensors[0].shape[0]);
    got.push_back(f[g.data.index_map[i]]);
  }
  REQUIRE(got == std::vector<float>{0.f, 1.f, 3.f, 4.f});
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));

  // A new prim may take the freed row; values stay right.
  kstage_path_t extra = s.path("/extra");
  KS_OK(try_write(s, s.query({extra}), a, 3, {9.f}));
  s.seal(3);
  kstage_query_t q = s.query({extra, p[4], p[2], p[0]});
  auto zc = s.read(q, {a});
  REQUIRE(zc.size() == 1);
  REQUIRE(zc[0].prims == std::vector<kstage_path_t>{extra, p[4], p[0]});
  REQUIRE(floats_of(zc[0]) == std::vector<float>{9.f, 4.f, 0.f});
  kstage_read_desc_t compact = kstage_read_desc_init();
  compact.compact = true;
  auto cp = s.read(q, {a}, &compact);
  REQUIRE(cp.size() == 1);
  REQUIRE(cp[0].values == zc[0].values);
}

TEST_CASE("max_group_prims splits a read into groups of consecutive prims, the same data as one",
          "[read][groups]") {
  // Every kind of group: zero-copy in row order (the tensor starts at the
  // group's first row), zero-copy through an index map (the group's slice of
  // it), compact, array rows, change ranges with their tombstone groups, a
  // read to the host. Concatenated, the parts are the unsplit read.
  Stage s(host_execution());
  kstage_token_t x = s.token("x"), r = s.token("r");
  auto p = s.paths("/g", 10);
  kstage_query_t in_order = s.query(p);  // consecutive ids: no list (a progression)
  kstage_query_t shuffled = s.query({p[7], p[2], p[9], p[0], p[5], p[1], p[8], p[3], p[6], p[4]});
  std::vector<float> v(10), w(10);
  for (int i = 0; i < 10; ++i) v[i] = float(i), w[i] = float(100 + i);
  s.write_f32(in_order, x, 1, v);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 10; ++i) rows.push_back(std::vector<float>(size_t(i % 4), float(i)));
  write_arrays(s, in_order, r, 1, rows);
  s.seal(1);
  s.write_f32(s.query({p[2], p[6], p[8]}), x, 2, {20, 60, 80});
  KS_OK(s.remove(s.query({p[4], p[5]}), {x, r}, 2));
  s.seal(2);

  for (kstage_query_t q : {in_order, shuffled}) {
    for (bool compact : {false, true}) {
      for (int which = 0; which < 3; ++which) {
        kstage_read_desc_t d = which == 0 ? kstage_read_desc_init() : range(which, 2);
        d.compact = compact;
        if (which == 2) d.target_device = DLDevice{kDLCPU, 0};
        INFO("query " << (q == in_order ? "in order" : "shuffled") << ", compact " << compact
                      << ", read " << which);
        const std::vector<Group> whole = s.read(q, {x, r}, &d);
        for (uint64_t per : {1, 3, 4, 10, 11}) {
          INFO("max_group_prims " << per);
          d.max_group_prims = per;
          const std::vector<Group> parts = s.read(q, {x, r}, &d);
          // Regroup the parts: consecutive parts of one kind (attribute, tombstone) make a whole.
          // Every part but the last of a whole holds exactly `per` prims.
          std::vector<Group> joined;
          for (size_t k = 0; k < parts.size(); ++k) {
            const Group& g = parts[k];
            const bool continues = k + 1 < parts.size() && parts[k + 1].attribute == g.attribute &&
                                   parts[k + 1].is_delete == g.is_delete;
            REQUIRE(!g.prims.empty());
            REQUIRE(g.prims.size() == (continues ? per : std::min<uint64_t>(g.prims.size(), per)));
            if (k > 0 && parts[k - 1].attribute == g.attribute &&
                parts[k - 1].is_delete == g.is_delete) {
              Group& j = joined.back();
              j.prims.insert(j.prims.end(), g.prims.begin(), g.prims.end());
              j.values.insert(j.values.end(), g.values.begin(), g.values.end());
            } else {
              joined.push_back(g);
            }
          }
          REQUIRE(joined.size() == whole.size());
          for (size_t k = 0; k < whole.size(); ++k) {
            REQUIRE(joined[k].attribute == whole[k].attribute);
            REQUIRE(joined[k].is_delete == whole[k].is_delete);
            REQUIRE(joined[k].ordinal == whole[k].ordinal);
            REQUIRE(joined[k].prims == whole[k].prims);
            REQUIRE(joined[k].values == whole[k].values);
          }
        }
      }
    }
  }
}

TEST_CASE("split read groups share one snapshot: later seals change none of them",
          "[read][groups]") {
  Stage s(host_execution());
  kstage_token_t x = s.token("x");
  auto p = s.paths("/s", 6);
  kstage_query_t q = s.query(p);
  s.write_f32(q, x, 1, {0, 1, 2, 3, 4, 5});
  s.seal(1);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.max_group_prims = 4;
  kstage_read_t read = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &x, 1, &d, &read));
  kstage_read_group_t first{};
  KS_OK(kstage_fetch_read_next(s.stage, read, 0, &first));
  s.write_f32(q, x, 2, {9, 9, 9, 9, 9, 9});  // in place, were nobody holding the buffer
  s.seal(2);
  kstage_read_group_t second{};
  KS_OK(kstage_fetch_read_next(s.stage, read, 0, &second));
  kstage_read_group_t none{};
  REQUIRE(kstage_fetch_read_next(s.stage, read, 0, &none) == KSTAGE_END_OF_ITERATION);
  KS_OK(kstage_release_read(s.stage, read));
  const Group a = Stage::copy_group(first), b = Stage::copy_group(second);
  REQUIRE(a.prims == std::vector<kstage_path_t>(p.begin(), p.begin() + 4));
  REQUIRE(b.prims == std::vector<kstage_path_t>(p.begin() + 4, p.end()));
  REQUIRE(floats_of(a) == std::vector<float>{0, 1, 2, 3});
  REQUIRE(floats_of(b) == std::vector<float>{4, 5});
  REQUIRE(a.ordinal == 1);
  REQUIRE(b.ordinal == 1);
  KS_OK(kstage_release_group(s.stage, first.handle));
  KS_OK(kstage_release_group(s.stage, second.handle));
  REQUIRE(s.floats(q, x).at(p[5]) == std::vector<float>{9});
}
