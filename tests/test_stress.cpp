// SPDX-License-Identifier: Apache-2.0
// A writer, a sealer, readers and a releaser on one stage at once, checked
// against a host model of the sealed state. Built for the tsan preset: the
// groups a reader fetches are released by another thread (the releaser)
// while the sealer writes the column in place, which is exactly the
// reader -> writer hand-off that must be a release/acquire pair (a relaxed
// use_count() check let ThreadSanitizer report a race here, in 4 runs of 5;
// the tsan preset runs it on every CI run). It also checks
// copy-on-write from the outside: a held group's values never change, also
// after its read was released, and an export outlives its group.
#include "support.hpp"
#include "thread_support.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <thread>

using namespace kstage_test;

namespace {

constexpr uint32_t kPrims = 256;
constexpr uint64_t kOrdinals = 1500;
constexpr int kLanes = 4;

// Write k touches prim i: every prim at 1, then about 40% of them, so most
// seals are sparse and go into the column's buffer in place.
bool touches(uint64_t k, uint32_t i) { return k == 1 || (i * 7 + k) % 5 < 2; }

float value(uint64_t k, uint32_t i, int lane) {
  const float v[kLanes] = {float(k), float(i), float(k * 1000 + i), -float(k)};
  return v[lane];
}

// The model: prim i's value once the floor is `floor` (>= 1).
uint64_t last_write(uint32_t i, uint64_t floor) {
  for (uint64_t k = floor; k > 1; --k)
    if (touches(k, i)) return k;
  return 1;
}

// Checks rows of a fixed-size float32 x 4 group against the model at `floor`.
// `index_map` may be null (row i is prim i's); prims[i] is the path of prim
// index prim_index(prims[i]).
template <class PrimIndex>
void check_rows(Errors& errors, const char* who, const float* rows, const uint32_t* index_map,
                const kstage_path_t* prims, uint64_t n, uint64_t floor, PrimIndex prim_index) {
  for (uint64_t j = 0; j < n; ++j) {
    const uint32_t i = prim_index(prims[j]);
    const uint64_t k = last_write(i, floor);
    const float* v = rows + kLanes * (index_map ? index_map[j] : j);
    for (int l = 0; l < kLanes; ++l)
      if (v[l] != value(k, i, l)) {
        CHECK_T(errors, v[l] == value(k, i, l),
                who << ": prim " << i << " lane " << l << " at floor " << floor << " holds " << v[l]
                    << ", the model " << value(k, i, l));
        return;
      }
  }
}

// A fetched group on its way from a reader to the releaser.
struct Held {
  kstage_read_group_t group{};
  DLManagedTensorVersioned* exported = nullptr;  // an export of it, or null
};

class Handoff {
 public:
  void push(Held h) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(h);
    }
    cv_.notify_one();
  }
  // False once closed and drained.
  bool pop(Held& h) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return false;
    h = items_.front();
    items_.pop_front();
    return true;
  }
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Held> items_;
  bool closed_ = false;
};

}  // namespace

TEST_CASE("writer, sealer, readers and a releaser: the sealed state matches the model",
          "[stress][threads][tsan]") {
  Stage s(host_execution());
  const std::vector<kstage_path_t> prims = s.paths("/stress", kPrims);
  const kstage_query_t q = s.query(prims);
  const kstage_token_t x = s.token("x");
  const kstage_path_t first = prims[0];
  auto prim_index = [first](kstage_path_t p) { return uint32_t(p - first); };
  for (uint32_t i = 0; i < kPrims; ++i) REQUIRE(prim_index(prims[i]) == i);  // ids are dense

  Errors errors;
  std::atomic<uint64_t> written{0}, sealed{0};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> reads{0}, exports{0};
  Handoff handoff;

  std::thread writer([&] {
    std::vector<float> rows(kPrims * kLanes);
    std::vector<uint64_t> mask((kPrims + 63) / 64);
    int64_t shape[1] = {kPrims};
    for (uint64_t k = 1; k <= kOrdinals && errors.count() == 0; ++k) {
      // Pace the writer by the readers, so that reads, releases and seals
      // really interleave (without this, one thread may finish first).
      while (k > 2 && reads.load() < k / 2 && errors.count() == 0) std::this_thread::yield();
      std::fill(mask.begin(), mask.end(), 0);
      for (uint32_t i = 0; i < kPrims; ++i) {
        for (int l = 0; l < kLanes; ++l) rows[i * kLanes + l] = value(k, i, l);
        if (touches(k, i)) mask[i / 64] |= uint64_t(1) << (i % 64);
      }
      DLTensor t = tensor(rows.data(), f32(kLanes), 1, shape);
      kstage_write_data_t w = write_data(&t);
      if (k > 1) {
        w.count = kPrims;
        w.mask = mask.data();
      }
      kstage_op_t op = 0;
      if (!errors.ok(kstage_write_attribute(s.stage, q, x, k, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
                     "write"))
        break;
      errors.ok(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE), "wait");
      errors.ok(kstage_release_op(s.stage, op), "release_op");
      written.store(k, std::memory_order_release);
    }
  });

  std::thread sealer([&] {
    uint64_t at = 0;
    while (at < kOrdinals && errors.count() == 0) {
      const uint64_t w = written.load(std::memory_order_acquire);
      if (w == at) {
        std::this_thread::yield();
        continue;
      }
      // Seal one ordinal at a time most of the time, so seals interleave
      // tightly with readers; every fourth seal catches up at once.
      at = (at % 4 == 3) ? w : at + 1;
      errors.ok(kstage_advance_write_floor(s.stage, at, &x, 1), "seal");
      sealed.store(at, std::memory_order_release);
    }
  });

  auto reader = [&](int id) {
    uint64_t n = 0;
    while (!done.load(std::memory_order_acquire) && errors.count() == 0) {
      if (sealed.load(std::memory_order_acquire) == 0) {
        std::this_thread::yield();
        continue;
      }
      kstage_read_t r = 0;
      if (!errors.ok(kstage_read_attributes(s.stage, q, &x, 1, nullptr, &r), "read")) break;
      Held h;
      if (!errors.ok(kstage_fetch_read_next(s.stage, r, 0, &h.group), "fetch")) break;
      const kstage_read_group_t& g = h.group;
      CHECK_T(errors, g.prim_count == kPrims && g.data.tensor_count == 1, "group shape");
      check_rows(errors, "reader", static_cast<const float*>(g.data.tensors[0].data),
                 g.data.index_map, g.prims, g.prim_count, g.ordinal, prim_index);
      if ((n++ + id) % 3 == 0) {
        errors.ok(kstage_group_export(s.stage, g.handle, 0, 0, &h.exported), "export");
        exports.fetch_add(1);
      }
      errors.ok(kstage_release_read(s.stage, r), "release_read");  // the group stays valid
      reads.fetch_add(1);
      handoff.push(h);
    }
  };
  std::thread reader0(reader, 0), reader1(reader, 1);

  // The releaser: re-checks each group (a held group never changes), then
  // releases it on this thread; an export is checked after its group is gone.
  uint64_t released = 0, deleted = 0;
  std::thread releaser([&] {
    Held h;
    while (handoff.pop(h)) {
      const kstage_read_group_t& g = h.group;
      check_rows(errors, "releaser", static_cast<const float*>(g.data.tensors[0].data),
                 g.data.index_map, g.prims, g.prim_count, g.ordinal, prim_index);
      // The export's layout is (rows, lanes) over the same rows, so the
      // group's index_map and prims still describe it.
      std::vector<kstage_path_t> ids(g.prims, g.prims + g.prim_count);
      std::vector<uint32_t> map;
      if (g.data.index_map) map.assign(g.data.index_map, g.data.index_map + g.prim_count);
      const uint64_t floor = g.ordinal;
      errors.ok(kstage_release_group(s.stage, g.handle), "release_group");
      ++released;
      if (h.exported) {
        check_rows(errors, "export", static_cast<const float*>(h.exported->dl_tensor.data),
                   map.empty() ? nullptr : map.data(), ids.data(), ids.size(), floor, prim_index);
        h.exported->deleter(h.exported);
        ++deleted;
      }
    }
  });

  writer.join();
  sealer.join();
  done.store(true, std::memory_order_release);
  reader0.join();
  reader1.join();
  handoff.close();
  releaser.join();

  INFO(errors.report());
  REQUIRE(errors.count() == 0);
  REQUIRE(sealed.load() == kOrdinals);
  REQUIRE(released == reads.load());
  REQUIRE(deleted == exports.load());
  REQUIRE(reads.load() > 0);

  // The final state, zero-copy and compact, is the model at the last ordinal.
  for (bool compact : {false, true}) {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = compact;
    auto groups = s.read(q, {x}, &d);
    REQUIRE(groups.size() == 1);
    REQUIRE(groups[0].ordinal == kOrdinals);
    for (size_t j = 0; j < groups[0].prims.size(); ++j) {
      const uint32_t i = prim_index(groups[0].prims[j]);
      const std::vector<float> got = as_floats(groups[0].values[j]);
      const uint64_t k = last_write(i, kOrdinals);
      REQUIRE(got ==
              std::vector<float>{value(k, i, 0), value(k, i, 1), value(k, i, 2), value(k, i, 3)});
    }
  }
}
