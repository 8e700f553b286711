// SPDX-License-Identifier: Apache-2.0
// Several threads on one stage: writers, a sealer and readers running at
// once; concurrent interning; concurrent create/destroy of separate stages;
// two threads releasing the same handle.
//
// Catch2 assertions are not thread-safe, so worker threads record failures
// in an Errors list that the main thread checks after joining.
#include "support.hpp"
#include "thread_support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

using namespace kstage_test;

namespace {

// Two threads start `fn` at (nearly) the same instant.
class StartLine {
 public:
  explicit StartLine(int n) : n_(n) {}
  void arrive() {
    ready_.fetch_add(1);
    while (ready_.load() < n_) std::this_thread::yield();
  }

 private:
  const int n_;
  std::atomic<int> ready_{0};
};

// --- the writers / sealer / readers scenario ------------------------------

constexpr int kWriters = 4;
constexpr int kPrimsPerWriter = 32;
constexpr uint64_t kTicks = 120;
constexpr int kReaders = 2;

// The value writer w writes at tick t, lane l of every one of its prims (and
// "mass" = w*10000 + t*10 + 9). Exact in float32.
float encode(int w, uint64_t t, int lane) { return float(w * 10000 + int(t) * 10 + lane); }
struct Decoded {
  int writer;
  uint64_t tick;
};
bool decode(const float* v, int lanes, Decoded& out) {
  const int base = int(v[0]);
  if (float(base) != v[0] || base % 10 != 0) return false;
  for (int l = 1; l < lanes; ++l)
    if (v[l] != float(base + l)) return false;  // lanes from one (writer, tick)
  out.writer = base / 10000;
  out.tick = uint64_t(base % 10000) / 10;
  return true;
}

// A group's content copied out: prims and the per-prim float values.
struct Snapshot {
  std::vector<kstage_path_t> prims;
  std::vector<std::vector<float>> values;
  bool operator==(const Snapshot& o) const { return prims == o.prims && values == o.values; }
};

bool snapshot(const kstage_read_group_t& g, Snapshot& s, Errors& errors) {
  s.prims.assign(g.prims, g.prims + g.prim_count);
  s.values.clear();
  if (g.is_delete || g.is_array || g.data.tensor_count != 1 || g.data.count != g.prim_count) {
    errors.add("unexpected group shape: is_delete " + std::to_string(g.is_delete) +
               " tensor_count " + std::to_string(g.data.tensor_count));
    return false;
  }
  const DLTensor& t = g.data.tensors[0];
  const int lanes = g.dtype.lanes;
  if (t.ndim != 1 || t.dtype.code != kDLFloat || t.dtype.bits != 32 || t.dtype.lanes != lanes) {
    errors.add("unexpected tensor layout");
    return false;
  }
  const float* base =
      reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset);
  for (uint64_t i = 0; i < g.prim_count; ++i) {
    const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
    if (int64_t(row) >= t.shape[0]) {
      errors.add("row " + std::to_string(row) + " outside shape " + std::to_string(t.shape[0]));
      return false;
    }
    s.values.emplace_back(base + row * lanes, base + (row + 1) * lanes);
  }
  return true;
}

struct Scenario {
  Stage& s;
  kstage_token_t points = 0, mass = 0;
  std::vector<std::vector<kstage_path_t>> owned;  // per writer
  std::unordered_map<kstage_path_t, int> owner;
  std::vector<kstage_path_t> all;
  std::atomic<uint64_t> submitted[kWriters];
  std::atomic<uint64_t> sealed{0};
  std::atomic<bool> done{false};
  Errors errors;
  std::atomic<uint64_t> reads_latest{0}, reads_range{0}, reads_exact{0}, out_of_range{0},
      held_checked{0};

  explicit Scenario(Stage& stage) : s(stage) {
    points = s.token("points");
    mass = s.token("mass");
    for (int w = 0; w < kWriters; ++w) {
      owned.push_back(s.paths("/writer" + std::to_string(w) + "/p", kPrimsPerWriter));
      for (kstage_path_t p : owned.back()) {
        owner[p] = w;
        all.push_back(p);
      }
      submitted[w].store(0);
    }
  }

  void writer(int w) {
    kstage_query_t q = 0;
    if (!errors.ok(kstage_query_paths(s.stage, owned[w].data(), owned[w].size(), &q),
                   "query_paths"))
      return;
    const int n = kPrimsPerWriter;
    std::vector<float> pos(size_t(n) * 3), m(n);
    for (uint64_t t = 1; t <= kTicks; ++t) {
      for (int i = 0; i < n; ++i) {
        for (int l = 0; l < 3; ++l) pos[size_t(i) * 3 + l] = encode(w, t, l);
        m[i] = encode(w, t, 9);
      }
      // Alternate the canonical layout (N,) lanes 3 and the convenience (N,3).
      int64_t canon[1] = {n}, conv[2] = {n, 3}, mshape[1] = {n};
      DLTensor tensors[2] = {
          t % 2 ? tensor(pos.data(), f32(3), 1, canon) : tensor(pos.data(), f32(), 2, conv),
          tensor(m.data(), f32(), 1, mshape)};
      kstage_write_data_t data[2] = {write_data(&tensors[0]), write_data(&tensors[1])};
      data[0].semantic = KSTAGE_SEMANTIC_POINT;
      const kstage_token_t attrs[2] = {points, mass};
      kstage_op_t op = 0;
      // INSERT the first time, UPDATE afterwards (the prims exist in the projected state).
      const kstage_prim_mode_t mode = t == 1 ? KSTAGE_PRIM_MODE_INSERT : KSTAGE_PRIM_MODE_UPDATE;
      if (!errors.ok(kstage_write_attributes(s.stage, q, attrs, data, 2, t, mode, &op),
                     "write_attributes"))
        break;
      errors.ok(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE), "wait");
      errors.ok(kstage_release_op(s.stage, op), "release_op");
      submitted[w].store(t);
      if (t % 16 == 0) std::this_thread::yield();
    }
    errors.ok(kstage_query_release(s.stage, q), "query_release");
  }

  void sealer() {
    for (uint64_t f = 1; f <= kTicks; ++f) {
      for (int w = 0; w < kWriters; ++w)
        while (submitted[w].load() < f) {
          if (errors.count() > 0) {
            done.store(true);
            return;
          }
          std::this_thread::yield();
        }
      if (!errors.ok(kstage_advance_write_floor(s.stage, f, nullptr, 0), "advance_write_floor"))
        break;
      sealed.store(f);
      if (f % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    done.store(true);
  }

  // Checks a value group of `attr` against the invariants; returns its ordinal.
  void check_group(const kstage_read_group_t& g, const Snapshot& snap, uint64_t min_tick,
                   uint64_t exact_tick) {
    const int lanes = g.attribute == points ? 3 : 1;
    CHECK_T(errors, g.dtype.lanes == lanes, "lanes " << g.dtype.lanes);
    CHECK_T(errors, g.prim_count == all.size(),
            "prim_count " << g.prim_count << " ordinal " << g.ordinal);
    // The sealer publishes `sealed` just after its advance returns.
    CHECK_T(errors, g.ordinal <= sealed.load() + 1 && g.ordinal <= kTicks, "ordinal " << g.ordinal);
    for (size_t i = 0; i < snap.prims.size(); ++i) {
      const kstage_path_t p = snap.prims[i];
      CHECK_T(errors, p == all[i], "prim order at " << i);
      auto it = owner.find(p);
      if (it == owner.end()) {
        errors.add("unknown prim " + std::to_string(p));
        continue;
      }
      Decoded d{};
      if (g.attribute == points) {
        if (!decode(snap.values[i].data(), 3, d)) {
          errors.add("torn or foreign float3 at prim " + std::to_string(p) + ": " +
                     std::to_string(snap.values[i][0]) + "," + std::to_string(snap.values[i][1]) +
                     "," + std::to_string(snap.values[i][2]));
          continue;
        }
      } else {
        const float v = snap.values[i][0];
        const int base = int(v) - 9;
        d.writer = base / 10000;
        d.tick = uint64_t(base % 10000) / 10;
        CHECK_T(errors, v == encode(d.writer, d.tick, 9), "mass value " << v);
      }
      CHECK_T(errors, d.writer == it->second,
              "prim " << p << " owned by " << it->second << " holds writer " << d.writer);
      // Never a value above the snapshot's floor (unsealed), never below the range.
      CHECK_T(errors, d.tick <= g.ordinal,
              "tick " << d.tick << " above the group ordinal " << g.ordinal);
      CHECK_T(errors, d.tick >= min_tick,
              "tick " << d.tick << " below the range begin " << min_tick);
      // Every prim is written at every tick, so the latest sealed value is the floor's.
      CHECK_T(errors, d.tick == g.ordinal,
              "tick " << d.tick << " is not the group ordinal " << g.ordinal);
      if (exact_tick)
        CHECK_T(errors, d.tick == exact_tick, "tick " << d.tick << " != " << exact_tick);
    }
  }

  struct Held {
    kstage_read_group_t g;
    Snapshot snap;
  };

  void release_held(std::deque<Held>& held, size_t keep) {
    while (held.size() > keep) {
      Held& h = held.front();
      Snapshot again;
      if (snapshot(h.g, again, errors))
        CHECK_T(errors, again == h.snap,
                "a held group of ordinal " << h.g.ordinal << " changed while held");
      errors.ok(kstage_release_group(s.stage, h.g.handle), "release_group");
      held_checked.fetch_add(1);
      held.pop_front();
    }
  }

  void reader(int id) {
    kstage_query_t q = 0;
    if (!errors.ok(kstage_query_paths(s.stage, all.data(), all.size(), &q), "reader query")) return;
    std::deque<Held> held;
    std::mt19937 rng(uint32_t(id) * 7919u + 1u);
    uint64_t last_ordinal = 0;
    for (uint64_t iter = 0;; ++iter) {
      const bool finishing = done.load();
      uint64_t floor = 0;
      if (!errors.ok(kstage_get_write_floor(s.stage, points, &floor), "get_write_floor")) break;
      const int kind = int(iter % 3);
      kstage_read_desc_t desc = kstage_read_desc_init();
      desc.compact = rng() % 2 == 0;
      uint64_t min_tick = 0, exact = 0;
      if (kind == 1) {  // everything that changed since a little before the floor
        desc.change_range = true;
        desc.range_begin = floor > 3 ? floor - rng() % 4 : 1;
        desc.range_end = UINT64_MAX;
        min_tick = desc.range_begin;
      } else if (kind == 2) {  // exactly the floor's ordinal: OK or OUT_OF_RANGE
        desc.change_range = true;
        desc.range_begin = desc.range_end = floor;
        exact = floor;
      }
      const kstage_token_t attrs[2] = {points, mass};
      kstage_read_t r = 0;
      kstage_status_t st = kstage_read_attributes(s.stage, q, attrs, 2, &desc, &r);
      if (kind == 2 && st == KSTAGE_OUT_OF_RANGE) {
        // Only if a seal happened after we looked at the floor.
        const std::string msg = kstage_last_error();
        uint64_t now = 0;
        errors.ok(kstage_get_write_floor(s.stage, points, &now), "get_write_floor");
        CHECK_T(
            errors, now > floor,
            "OUT_OF_RANGE for [" << floor << "," << floor << "] but the floor is still " << now);
        CHECK_T(errors, msg.find("changed again at ordinal") != std::string::npos, msg);
        out_of_range.fetch_add(1);
        continue;
      }
      if (!errors.ok(st, "read_attributes")) break;
      (kind == 0 ? reads_latest : kind == 1 ? reads_range : reads_exact).fetch_add(1);
      std::vector<uint64_t> ordinals;
      for (;;) {
        kstage_read_group_t g{};
        st = kstage_fetch_read_next(s.stage, r, 0, &g);
        if (st == KSTAGE_END_OF_ITERATION) break;
        if (!errors.ok(st, "fetch_read_next")) break;
        CHECK_T(errors, !g.is_delete, "a tombstone group without deletions");
        CHECK_T(errors, g.attribute == attrs[ordinals.size() < 2 ? ordinals.size() : 1],
                "group order: attribute " << g.attribute);
        CHECK_T(errors, g.ordinal >= floor,
                "group ordinal " << g.ordinal << " below the floor seen before " << floor);
        CHECK_T(errors, g.ordinal >= last_ordinal,
                "ordinal went back from " << last_ordinal << " to " << g.ordinal);
        if (exact)
          CHECK_T(errors, g.ordinal == exact, "exact range read has ordinal " << g.ordinal);
        ordinals.push_back(g.ordinal);
        Held h{g, {}};
        if (snapshot(g, h.snap, errors)) check_group(g, h.snap, min_tick, exact);
        held.push_back(std::move(h));
      }
      errors.ok(kstage_release_read(s.stage, r), "release_read");
      // Both attributes come from one snapshot: same ordinal, both or none.
      if (floor > 0)
        CHECK_T(errors, ordinals.size() == 2,
                "groups: " << ordinals.size() << " at floor " << floor);
      if (ordinals.size() == 2)
        CHECK_T(errors, ordinals[0] == ordinals[1], ordinals[0] << " vs " << ordinals[1]);
      if (!ordinals.empty()) last_ordinal = ordinals[0];
      // Keep a few groups pinned across later seals; check them on release.
      release_held(held, rng() % 7);
      if ((finishing && iter >= 2) || errors.count() > 0) break;  // at least one read of each kind
      if (iter % 4 == 0) std::this_thread::yield();
    }
    release_held(held, 0);
    CHECK_T(errors, last_ordinal == kTicks || errors.count() > 0,
            "reader ended at ordinal " << last_ordinal);
    errors.ok(kstage_query_release(s.stage, q), "reader query release");
  }
};

}  // namespace

TEST_CASE("writers, a sealer and readers share one stage", "[threads][write][read][seal]") {
  Stage s(host_execution());
  Scenario sc(s);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) threads.emplace_back([&, w] { sc.writer(w); });
  for (int r = 0; r < kReaders; ++r) threads.emplace_back([&, r] { sc.reader(r); });
  threads.emplace_back([&] { sc.sealer(); });
  for (auto& t : threads) t.join();
  INFO(sc.errors.report());
  REQUIRE(sc.errors.count() == 0);
  INFO("latest " << sc.reads_latest << ", ranges " << sc.reads_range << ", exact " << sc.reads_exact
                 << ", out of range " << sc.out_of_range << ", held " << sc.held_checked);
  REQUIRE(sc.sealed.load() == kTicks);
  REQUIRE(sc.reads_latest.load() > 0);
  REQUIRE(sc.reads_range.load() > 0);
  REQUIRE(sc.held_checked.load() > 0);

  // The final state: every prim holds its writer's last tick, in both columns.
  REQUIRE(s.floor(0) == kTicks);
  kstage_query_t q = s.query(sc.all);
  auto pos = s.floats(q, sc.points);
  auto mass = s.floats(q, sc.mass);
  REQUIRE(pos.size() == sc.all.size());
  REQUIRE(mass.size() == sc.all.size());
  for (kstage_path_t p : sc.all) {
    const int w = sc.owner[p];
    REQUIRE(pos[p] ==
            std::vector<float>{encode(w, kTicks, 0), encode(w, kTicks, 1), encode(w, kTicks, 2)});
    REQUIRE(mass[p] == std::vector<float>{encode(w, kTicks, 9)});
  }
  // Exactly the last tick in the change range [T, T]; nothing after it.
  kstage_read_desc_t last = kstage_read_desc_init();
  last.change_range = true;
  last.range_begin = last.range_end = kTicks;
  auto groups = s.read(q, {sc.points}, &last);
  REQUIRE(groups.size() == 1);
  REQUIRE(groups[0].prims == sc.all);
  // An older range cannot be answered any more: every prim changed after it.
  last.range_begin = last.range_end = kTicks - 1;
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, q, &sc.points, 1, &last, &r), KSTAGE_OUT_OF_RANGE,
           "changed again at ordinal 120");
  KS_OK(kstage_query_release(s.stage, q));
}

TEST_CASE("threads writing through masks and index maps at once", "[threads][write][mask]") {
  // Masked writes resolve the mask in a scan and index_map writes validate in
  // a reduction, both launched outside the stage's lock: several threads must
  // be able to run them at once, on any host execution space (Kokkos 3.x
  // needs kstage to serialise these launches; see backends/host).
  Stage s(host_execution());
  constexpr int kThreads = 3;
  constexpr size_t kN = 4096;
  constexpr uint64_t kRounds = 60;
  std::vector<kstage_query_t> q(kThreads);
  std::vector<kstage_token_t> attr(kThreads);
  std::vector<std::vector<kstage_path_t>> paths(kThreads);
  for (int w = 0; w < kThreads; ++w) {
    paths[w] = s.paths("/mt" + std::to_string(w), kN);
    q[w] = s.query(paths[w]);
    attr[w] = s.token(("a" + std::to_string(w)).c_str());
  }
  Errors errors;
  StartLine start(kThreads);
  // Round r of thread w: a mask write of value r (alternate elements, the
  // pattern flipping each round), then an index_map write of every element
  // from a reversed source, sealed; the last round leaves known values.
  auto body = [&](int w) {
    std::vector<float> v(kN);
    std::vector<uint64_t> mask(kN / 64);
    std::vector<uint32_t> reversed(kN);
    for (size_t i = 0; i < kN; ++i) reversed[i] = uint32_t(kN - 1 - i);
    start.arrive();
    for (uint64_t r = 1; r <= kRounds; ++r) {
      std::fill(v.begin(), v.end(), float(r));
      std::fill(mask.begin(), mask.end(), r % 2 ? 0x5555555555555555ull : 0xAAAAAAAAAAAAAAAAull);
      int64_t shape[1] = {int64_t(kN)};
      DLTensor t = tensor(v.data(), f32(), 1, shape);
      kstage_write_data_t d = write_data(&t);
      d.count = kN;
      d.mask = mask.data();
      kstage_op_t op = 0;
      const uint64_t masked_ordinal = 2 * r - 1, mapped_ordinal = 2 * r;
      if (!errors.ok(kstage_write_attribute(s.stage, q[w], attr[w], masked_ordinal, &d,
                                            KSTAGE_PRIM_MODE_UPSERT, &op),
                     "masked write"))
        return;
      errors.ok(kstage_release_op(s.stage, op), "release op");
      for (size_t i = 0; i < kN; ++i) v[i] = float(r * 100000 + i);
      kstage_write_data_t m = write_data(&t);
      m.count = kN;
      m.index_map = reversed.data();
      if (!errors.ok(kstage_write_attribute(s.stage, q[w], attr[w], mapped_ordinal, &m,
                                            KSTAGE_PRIM_MODE_UPSERT, &op),
                     "index_map write"))
        return;
      errors.ok(kstage_release_op(s.stage, op), "release op");
      if (!errors.ok(kstage_advance_write_floor(s.stage, mapped_ordinal, &attr[w], 1), "seal"))
        return;
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) threads.emplace_back(body, w);
  for (auto& t : threads) t.join();
  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  for (int w = 0; w < kThreads; ++w) {
    auto got = scalars(s, q[w], attr[w]);
    REQUIRE(got.size() == kN);
    for (size_t i = 0; i < kN; ++i)
      REQUIRE(got[paths[w][i]] == float(kRounds * 100000 + (kN - 1 - i)));
  }
}

TEST_CASE("threads interning the same strings get the same ids", "[threads][dictionary]") {
  Stage s(host_execution());
  constexpr int kThreads = 4, kStrings = 400;
  std::vector<std::string> tokens, paths;
  for (int i = 0; i < kStrings; ++i) {
    tokens.push_back("attr_" + std::to_string(i));
    paths.push_back("/scene/group_" + std::to_string(i % 17) + "/prim_" + std::to_string(i));
  }
  std::vector<std::vector<uint64_t>> token_ids(kThreads, std::vector<uint64_t>(kStrings)),
      path_ids(kThreads, std::vector<uint64_t>(kStrings));
  Errors errors;
  StartLine start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<int> order(kStrings);
      for (int i = 0; i < kStrings; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(t) + 11u));
      start.arrive();
      for (int round = 0; round < 3; ++round)
        for (int i : order) {
          uint64_t tok = 0, path = 0;
          if (!errors.ok(kstage_intern_token(s.stage, tokens[i].c_str(), tokens[i].size(), &tok),
                         "intern_token") ||
              !errors.ok(
                  kstage_intern_path(s.stage, paths[i].c_str(), KSTAGE_NUL_TERMINATED, &path),
                  "intern_path"))
            return;
          if (round > 0) {
            CHECK_T(errors, tok == token_ids[t][i], "token id of '" << tokens[i] << "' changed");
            CHECK_T(errors, path == path_ids[t][i], "path id of '" << paths[i] << "' changed");
          }
          token_ids[t][i] = tok;
          path_ids[t][i] = path;
          // Strings come back right while others intern.
          const char* str = nullptr;
          size_t len = 0;
          if (errors.ok(kstage_path_string(s.stage, path, &str, &len), "path_string"))
            CHECK_T(errors, std::string(str, len) == paths[i], "path string " << str);
        }
    });
  for (auto& t : threads) t.join();
  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  for (int t = 1; t < kThreads; ++t) {
    REQUIRE(token_ids[t] == token_ids[0]);
    REQUIRE(path_ids[t] == path_ids[0]);
  }
  REQUIRE(std::set<uint64_t>(token_ids[0].begin(), token_ids[0].end()).size() == kStrings);
  REQUIRE(std::set<uint64_t>(path_ids[0].begin(), path_ids[0].end()).size() == kStrings);
  for (int i = 0; i < kStrings; ++i) {
    REQUIRE(token_ids[0][i] != 0);
    REQUIRE(s.token(tokens[i].c_str()) == token_ids[0][i]);
    REQUIRE(s.path(paths[i]) == path_ids[0][i]);
    const char* str = nullptr;
    KS_OK(kstage_token_string(s.stage, token_ids[0][i], &str, nullptr));
    REQUIRE(std::string(str) == tokens[i]);
  }
}

TEST_CASE("threads interning names, batches and ranges at once agree on every id",
          "[threads][dictionary][ranges]") {
  Stage s(host_execution());
  constexpr int kThreads = 4, kNames = 300;
  // Names under one parent: some a range will cover ("/r/p<i>"), some not ("/r/x<i>", "/s/p<i>").
  std::vector<std::string> names;
  for (int i = 0; i < kNames; ++i) {
    names.push_back("/r/p" + std::to_string(i));
    names.push_back("/r/x" + std::to_string(i));
    names.push_back("/s/p" + std::to_string(i) + "/v");
  }
  std::vector<std::vector<uint64_t>> ids(kThreads, std::vector<uint64_t>(names.size()));
  kstage_status_t range_status = KSTAGE_OK;
  kstage_path_t range_first = 0;
  Errors errors;
  StartLine start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<size_t> order(names.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(t) * 7u + 3u));
      start.arrive();
      if (t == 0) {  // a range over the same names, racing the others: made, or refused by name
        range_status = kstage_intern_path_range(s.stage, "/r", KSTAGE_NUL_TERMINATED, "p",
                                                KSTAGE_NUL_TERMINATED, 0, kNames, &range_first);
        if (range_status != KSTAGE_OK && range_status != KSTAGE_ALREADY_EXISTS)
          errors.ok(range_status, "intern_path_range");
      }
      if (t == 1) {  // a batch
        std::vector<const char*> ptrs;
        for (size_t i : order) ptrs.push_back(names[i].c_str());
        std::vector<kstage_path_t> got(ptrs.size());
        if (!errors.ok(kstage_intern_paths(s.stage, ptrs.data(), nullptr, ptrs.size(), got.data()),
                       "intern_paths"))
          return;
        for (size_t k = 0; k < order.size(); ++k) ids[t][order[k]] = got[k];
        return;
      }
      for (size_t i : order) {
        uint64_t id = 0;
        if (!errors.ok(kstage_intern_path(s.stage, names[i].c_str(), KSTAGE_NUL_TERMINATED, &id),
                       "intern_path"))
          return;
        ids[t][i] = id;
        const char* str = nullptr;
        if (errors.ok(kstage_path_string(s.stage, id, &str, nullptr), "path_string"))
          CHECK_T(errors, names[i] == str, "path string " << str << " for " << names[i]);
      }
    });
  for (auto& t : threads) t.join();
  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  for (int t = 0; t < kThreads; ++t) REQUIRE(ids[t] == ids[1]);
  if (range_status == KSTAGE_OK) {
    // The range came first for every member: they are its members, in order.
    for (int i = 0; i < kNames; ++i) REQUIRE(ids[1][size_t(3 * i)] == range_first + uint64_t(i));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    REQUIRE(s.path(names[i]) == ids[1][i]);
    REQUIRE(s.path_string(ids[1][i]) == names[i]);
  }
  REQUIRE(std::set<uint64_t>(ids[1].begin(), ids[1].end()).size() == names.size());
}

TEST_CASE("threads create and destroy separate stages concurrently", "[threads][lifecycle]") {
  const kstage_host_execution_t exec = host_execution();
  constexpr int kThreads = 4, kStagesEach = 12;
  Errors errors;
  std::mutex handles_mutex;
  std::vector<kstage_stage_t> handles;
  // A stage that lives throughout and is used while the others come and go.
  Stage keeper(exec);
  auto kp = keeper.paths("/keep", 8);
  kstage_query_t kq = keeper.query(kp);
  kstage_token_t kattr = keeper.token("points");
  keeper.write_f32(kq, kattr, 1, std::vector<float>(24, 42.f), 3);
  keeper.seal(1);
  StartLine start(kThreads + 1);
  std::atomic<int> finished{0};
  std::atomic<int> keeper_reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      start.arrive();
      for (int k = 0; k < kStagesEach; ++k) {
        // Halfway, let the keeper read a few times, so its reads overlap this thread's work.
        if (k == kStagesEach / 2)
          while (keeper_reads.load() < 3 && errors.count() == 0) std::this_thread::yield();
        kstage_config_t config = kstage_config_init();
        config.host_execution = exec;
        kstage_stage_t st = 0;
        if (!errors.ok(kstage_create(&config, &st), "create")) break;
        {
          std::lock_guard lock(handles_mutex);
          handles.push_back(st);
        }
        // Use it: a value unique to (thread, k), written, sealed, read back.
        const float value = float(t * 1000 + k);
        kstage_token_t attr = 0;
        kstage_path_t paths[3];
        kstage_query_t q = 0;
        bool ok =
            errors.ok(kstage_intern_token(st, "points", KSTAGE_NUL_TERMINATED, &attr), "intern");
        for (int i = 0; ok && i < 3; ++i) {
          const std::string name = "/t" + std::to_string(t) + "/p" + std::to_string(i);
          ok = errors.ok(kstage_intern_path(st, name.c_str(), KSTAGE_NUL_TERMINATED, &paths[i]),
                         "intern_path");
        }
        ok = ok && errors.ok(kstage_query_paths(st, paths, 3, &q), "query_paths");
        std::vector<float> v(9, value);
        int64_t shape[1] = {3};
        DLTensor tn = tensor(v.data(), f32(3), 1, shape);
        kstage_write_data_t w = write_data(&tn);
        kstage_op_t op = 0;
        ok = ok &&
             errors.ok(kstage_write_attribute(st, q, attr, 1, &w, KSTAGE_PRIM_MODE_INSERT, &op),
                       "write");
        ok = ok && errors.ok(kstage_advance_write_floor(st, 1, nullptr, 0), "seal");
        kstage_read_t r = 0;
        kstage_read_group_t g{};
        ok = ok && errors.ok(kstage_read_attributes(st, q, &attr, 1, nullptr, &r), "read");
        ok = ok && errors.ok(kstage_fetch_read_next(st, r, 0, &g), "fetch");
        if (ok) {
          Snapshot snap;
          if (snapshot(g, snap, errors)) {
            CHECK_T(errors, snap.values.size() == 3, "rows " << snap.values.size());
            for (const auto& row : snap.values)
              CHECK_T(errors, row == std::vector<float>(3, value),
                      "stage of thread " << t << " #" << k << " reads " << row[0]);
          }
        }
        // Leave the op, the read and the group (every other time) to destroy.
        if (ok && k % 2 == 0) {
          errors.ok(kstage_release_group(st, g.handle), "release_group");
          errors.ok(kstage_release_read(st, r), "release_read");
          errors.ok(kstage_release_op(st, op), "release_op");
          errors.ok(kstage_query_release(st, q), "release_query");
        }
        errors.ok(kstage_destroy(st), "destroy");
        kstage_status_t again = kstage_destroy(st);
        CHECK_T(errors, again == KSTAGE_INVALID_HANDLE,
                "second destroy -> " << kstage_status_string(again));
        uint64_t f = 0;
        again = kstage_get_write_floor(st, 0, &f);
        CHECK_T(errors, again == KSTAGE_INVALID_HANDLE,
                "use after destroy -> " << kstage_status_string(again));
      }
      finished.fetch_add(1);
    });
  // Meanwhile the main thread keeps reading the keeper stage.
  start.arrive();
  while (finished.load() < kThreads) {
    kstage_read_t r = 0;
    kstage_read_group_t g{};
    if (!errors.ok(kstage_read_attributes(keeper.stage, kq, &kattr, 1, nullptr, &r), "keeper read"))
      break;
    if (errors.ok(kstage_fetch_read_next(keeper.stage, r, 0, &g), "keeper fetch")) {
      Snapshot snap;
      if (snapshot(g, snap, errors))
        for (const auto& row : snap.values)
          CHECK_T(errors, row == std::vector<float>(3, 42.f), "keeper reads " << row[0]);
      errors.ok(kstage_release_group(keeper.stage, g.handle), "keeper release group");
    }
    errors.ok(kstage_release_read(keeper.stage, r), "keeper release read");
    keeper_reads.fetch_add(1);
  }
  for (auto& t : threads) t.join();
  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  REQUIRE(keeper_reads.load() >= 3);
  REQUIRE(handles.size() == size_t(kThreads * kStagesEach));
  REQUIRE(std::set<kstage_stage_t>(handles.begin(), handles.end()).size() == handles.size());
  REQUIRE(std::find(handles.begin(), handles.end(), keeper.stage) == handles.end());
  REQUIRE(keeper.floats(kq, kattr).at(kp[7]) == std::vector<float>(3, 42.f));
}

namespace {

struct RaceResult {
  kstage_status_t status[2];
  std::string message[2];
};

// Runs `release` on two threads released from one start line.
template <class F>
RaceResult race(F release) {
  RaceResult r;
  StartLine start(2);
  auto body = [&](int i) {
    start.arrive();
    r.status[i] = release();
    r.message[i] = r.status[i] == KSTAGE_OK ? "" : kstage_last_error();
  };
  std::thread a(body, 0), b(body, 1);
  a.join();
  b.join();
  return r;
}

void expect_one_winner(const RaceResult& r, const char* kind) {
  INFO(kind << ": " << kstage_status_string(r.status[0]) << " / "
            << kstage_status_string(r.status[1]) << " (" << r.message[0] << r.message[1] << ")");
  const int ok = (r.status[0] == KSTAGE_OK) + (r.status[1] == KSTAGE_OK);
  REQUIRE(ok == 1);
  const int loser = r.status[0] == KSTAGE_OK ? 1 : 0;
  REQUIRE(r.status[loser] == KSTAGE_INVALID_HANDLE);
  REQUIRE(r.message[loser].find(kind) != std::string::npos);
}

}  // namespace

TEST_CASE("two threads releasing the same handle: exactly one succeeds", "[threads][handles]") {
  Stage s(host_execution());
  auto prims = s.paths("/r", 4);
  kstage_token_t attr = s.token("points");
  kstage_query_t base = s.query(prims);
  s.write_f32(base, attr, 1, std::vector<float>(12, 3.f), 3);
  s.seal(1);
  std::vector<float> v(12, 4.f);
  int64_t shape[1] = {4};
  DLTensor t = tensor(v.data(), f32(3), 1, shape);
  kstage_write_data_t w = write_data(&t);
  for (int round = 0; round < 40; ++round) {
    kstage_query_t q = s.query(prims);
    expect_one_winner(race([&] { return kstage_query_release(s.stage, q); }), "query handle");

    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, base, &attr, 1, nullptr, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    expect_one_winner(race([&] { return kstage_release_group(s.stage, g.handle); }),
                      "group handle");
    expect_one_winner(race([&] { return kstage_release_read(s.stage, r); }), "read handle");

    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, base, attr, 2 + round, &w, KSTAGE_PRIM_MODE_UPDATE, &op));
    expect_one_winner(race([&] { return kstage_release_op(s.stage, op); }), "op handle");

    kstage_path_list_t list = 0;
    KS_OK(kstage_path_list_create(s.stage, prims.data(), prims.size(), &list));
    expect_one_winner(race([&] { return kstage_path_list_release(s.stage, list); }),
                      "path list handle");
    // With two references both releases succeed, and then the list is gone.
    KS_OK(kstage_path_list_create(s.stage, prims.data(), prims.size(), &list));
    KS_OK(kstage_path_list_retain(s.stage, list));
    RaceResult both = race([&] { return kstage_path_list_release(s.stage, list); });
    REQUIRE(both.status[0] == KSTAGE_OK);
    REQUIRE(both.status[1] == KSTAGE_OK);
    KS_FAILS(kstage_path_list_release(s.stage, list), KSTAGE_INVALID_HANDLE, "path list handle");

    // Retain racing the last release: either the retain wins (one reference
    // left) or the release wins (the retain fails); never a live list with 0.
    KS_OK(kstage_path_list_create(s.stage, prims.data(), prims.size(), &list));
    kstage_status_t st[2];
    StartLine start(2);
    std::thread a([&] {
      start.arrive();
      st[0] = kstage_path_list_retain(s.stage, list);
    });
    std::thread b([&] {
      start.arrive();
      st[1] = kstage_path_list_release(s.stage, list);
    });
    a.join();
    b.join();
    REQUIRE(st[1] == KSTAGE_OK);
    if (st[0] == KSTAGE_OK) {
      const kstage_path_t* ids = nullptr;
      uint64_t n = 0;
      KS_OK(kstage_path_list_get(s.stage, list, &ids, &n));
      REQUIRE(n == 4);
      KS_OK(kstage_path_list_release(s.stage, list));
    } else {
      REQUIRE(st[0] == KSTAGE_INVALID_HANDLE);
    }
    KS_FAILS(kstage_path_list_release(s.stage, list), KSTAGE_INVALID_HANDLE, "path list handle");

    // Two threads destroying the same stage.
    kstage_config_t config = kstage_config_init();
    kstage_stage_t doomed = 0;
    KS_OK(kstage_create(&config, &doomed));
    kstage_query_t dq = 0;
    KS_OK(kstage_query_paths(doomed, nullptr, 0, &dq));
    expect_one_winner(race([&] { return kstage_destroy(doomed); }), "stage handle");
  }
  // Everything raced above is gone; the stage itself is intact.
  s.seal(100);
  auto f = s.floats(base, attr);
  REQUIRE(f.size() == 4);
  REQUIRE(f[prims[0]] == std::vector<float>(3, 4.f));
  KS_OK(kstage_query_release(s.stage, base));
}

TEST_CASE("world transforms computed while other threads write and seal the local matrices",
          "[threads][world_transforms]") {
  Stage s(host_execution());
  const kstage_token_t local = s.token(KSTAGE_LOCAL_MATRIX);
  const kstage_token_t worlds[2] = {s.token("world_a"), s.token("world_b")};
  // 64 chains of 4: /e<i>/a/b/c, each link a translation by (1, 0, 0).
  std::vector<kstage_path_t> prims;
  for (int e = 0; e < 64; ++e) {
    std::string p = "/e" + std::to_string(e);
    for (int d = 0; d < 4; ++d, p += "/l") prims.push_back(s.path(p));
  }
  auto matrices = [](size_t n, double x) {
    std::vector<double> m(16 * n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      m[16 * i] = m[16 * i + 5] = m[16 * i + 10] = m[16 * i + 15] = 1;
      m[16 * i + 12] = x;
    }
    return m;
  };
  kstage_query_t all = s.query(prims);
  {
    std::vector<double> m = matrices(prims.size(), 1);
    int64_t shape[1] = {int64_t(prims.size())};
    DLTensor t = tensor(m.data(), f64(16), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = KSTAGE_SEMANTIC_MATRIX;
    KS_OK(s.write(all, local, 1, w));
  }
  s.seal(1);
  Errors errors;
  std::atomic<uint64_t> next_ordinal{2};
  auto computer = [&](int which) {
    kstage_transform_desc_t d = kstage_transform_desc_init();
    d.world = worlds[which];
    for (int k = 0; k < 20; ++k) {
      const uint64_t o = next_ordinal.fetch_add(1);
      kstage_op_t op = 0;
      const kstage_status_t st = kstage_compute_world_transforms(s.stage, &d, o, &op);
      // Another thread may have sealed past this ordinal first: then it is refused, whole.
      if (st == KSTAGE_WRITE_FLOOR_VIOLATION) continue;
      if (!errors.ok(st, "compute")) return;
      errors.ok(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE), "wait");
      errors.ok(kstage_release_op(s.stage, op), "release");
      errors.ok(kstage_advance_write_floor(s.stage, o, &d.world, 1), "seal world");
    }
  };
  auto writer = [&] {
    for (int k = 0; k < 20; ++k) {
      const uint64_t o = next_ordinal.fetch_add(1);
      std::vector<double> m = matrices(1, double(k));
      int64_t shape[1] = {1};
      DLTensor t = tensor(m.data(), f64(16), 1, shape);
      kstage_write_data_t w = write_data(&t);
      w.semantic = KSTAGE_SEMANTIC_MATRIX;
      kstage_query_t q = 0;
      const kstage_path_t p = prims[size_t(k) * 4 % prims.size()];
      if (!errors.ok(kstage_query_paths(s.stage, &p, 1, &q), "query")) return;
      kstage_op_t op = 0;
      const kstage_status_t st =
          kstage_write_attribute(s.stage, q, local, o, &w, KSTAGE_PRIM_MODE_UPSERT, &op);
      if (st != KSTAGE_WRITE_FLOOR_VIOLATION && errors.ok(st, "write")) {
        errors.ok(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE), "wait");
        errors.ok(kstage_release_op(s.stage, op), "release");
        errors.ok(kstage_advance_write_floor(s.stage, o, &local, 1), "seal local");
      }
      errors.ok(kstage_query_release(s.stage, q), "query release");
    }
  };
  std::thread a(computer, 0), b(computer, 1), c(writer);
  a.join();
  b.join();
  c.join();
  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  // Whatever interleaving happened, one more compute of each gives what the locals say.
  const uint64_t o = next_ordinal.fetch_add(1);
  s.seal(o - 1);
  for (kstage_token_t world : worlds) {
    kstage_transform_desc_t d = kstage_transform_desc_init();
    d.world = world;
    kstage_op_t op = 0;
    KS_OK(kstage_compute_world_transforms(s.stage, &d, o, &op));
    KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
    KS_OK(kstage_release_op(s.stage, op));
  }
  s.seal(o);
  const auto locals = s.values(all, local);
  for (kstage_token_t world : worlds) {
    const auto got = s.values(all, world);
    REQUIRE(got.size() == prims.size());
    for (size_t e = 0; e < 64; ++e) {
      double x = 0;
      for (size_t d = 0; d < 4; ++d) {
        const kstage_path_t p = prims[4 * e + d];
        double lx, wx;
        std::memcpy(&lx, locals.at(p).data() + 12 * sizeof(double), sizeof lx);
        std::memcpy(&wx, got.at(p).data() + 12 * sizeof(double), sizeof wx);
        x += lx;
        REQUIRE(wx == x);
      }
    }
  }
}

TEST_CASE("clones made while other threads write, seal and clone the same source",
          "[threads][clone]") {
  Stage s(host_execution());
  const kstage_token_t pos = s.token("pos");
  const kstage_path_t src = s.path("/src"), child = s.path("/src/a/b");
  kstage_query_t q = s.query({src, child});
  s.write_f32(q, pos, 1, {1, 2});
  s.seal(1);
  // Two cloners, 40 targets each (their own names), and a writer that rewrites and seals the
  // source: every copy holds one of the values the source had at some seal.
  Errors errors;
  std::atomic<uint64_t> next_ordinal{2};
  auto cloner = [&](int which) {
    for (int k = 0; k < 40; ++k) {
      const std::string name = "/copy" + std::to_string(which) + "_" + std::to_string(k);
      kstage_path_t t = 0;
      if (!errors.ok(kstage_intern_path(s.stage, name.c_str(), name.size(), &t), "intern")) return;
      const uint64_t o = next_ordinal.fetch_add(1);
      kstage_op_t op = 0;
      const kstage_status_t st = kstage_clone(s.stage, src, &t, 1, o, &op);
      if (st == KSTAGE_WRITE_FLOOR_VIOLATION) continue;  // sealed past by another thread
      if (!errors.ok(st, "clone")) return;
      errors.ok(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE), "wait");
      errors.ok(kstage_release_op(s.stage, op), "release");
      errors.ok(kstage_advance_write_floor(s.stage, o, nullptr, 0), "seal");
    }
  };
  auto writer = [&] {
    for (int k = 0; k < 40; ++k) {
      const uint64_t o = next_ordinal.fetch_add(1);
      std::vector<float> v = {float(10 * k), float(10 * k + 1)};
      int64_t shape[1] = {2};
      DLTensor t = tensor(v.data(), f32(), 1, shape);
      kstage_write_data_t w = write_data(&t);
      kstage_op_t op = 0;
      const kstage_status_t st =
          kstage_write_attribute(s.stage, q, pos, o, &w, KSTAGE_PRIM_MODE_UPSERT, &op);
      if (st == KSTAGE_WRITE_FLOOR_VIOLATION) continue;
      if (!errors.ok(st, "write")) return;
      errors.ok(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE), "wait");
      errors.ok(kstage_release_op(s.stage, op), "release");
      errors.ok(kstage_advance_write_floor(s.stage, o, nullptr, 0), "seal");
    }
  };
  std::thread a(cloner, 0), b(cloner, 1), c(writer);
  a.join();
  b.join();
  c.join();
  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  s.seal(next_ordinal.load());
  // Each copy that exists holds a pair the source held: (1, 2) or (10k, 10k + 1), root and
  // child from the same seal.
  size_t copies = 0;
  for (int which = 0; which < 2; ++which)
    for (int k = 0; k < 40; ++k) {
      const std::string name = "/copy" + std::to_string(which) + "_" + std::to_string(k);
      const kstage_path_t t = s.path(name), tc = s.path(name + "/a/b");
      kstage_query_t cq = s.query({t, tc});
      const auto v = s.floats(cq, pos);
      KS_OK(kstage_query_release(s.stage, cq));
      if (v.empty()) continue;
      ++copies;
      REQUIRE(v.size() == 2);
      const float root = v.at(t)[0], leaf = v.at(tc)[0];
      REQUIRE(leaf == root + 1);
      REQUIRE((root == 1 || (int(root) % 10 == 0 && root >= 0 && root < 400)));
    }
  CHECK(copies > 0);
  KS_OK(kstage_query_release(s.stage, q));
}
