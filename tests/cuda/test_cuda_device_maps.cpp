// SPDX-License-Identifier: Apache-2.0
// Index maps and masks on a real GPU (kstage_write_data_t::selection_device, kstage.h "Device
// index maps"; tests/emulated/test_device_maps.cpp has the same rules on the emulated device):
// uint32 and int64 device maps gathered in place, checked on the device with the check's report
// the one copy down, a bad entry failing the op and never applied; a device map or mask filled
// by a producer still running (a held stream) read only after its event; a host map behind such
// a producer uploaded without the call waiting (from pinned memory, over 64 MiB too); a read's
// index map in device memory, exported as kDLCUDA and released after a held consumer's read.
// Built by the cuda preset, run by scripts/gpu-check.sh. Host C++ (g++).
#include "cuda/cuda_support.hpp"

#include <climits>
#include <string>
#include <thread>

using namespace kstage_cuda_test;

namespace {

// A stage with column x (f32, on the GPU) holding 1..5 at ordinal 1, sealed.
struct Sealed {
  Sealed() : s(KSTAGE_HOST_EXECUTION_DEFAULT, &kGpu), x(s.token("x")) {
    prims = s.paths("/p", 5);
    q = s.query(prims);
    GpuFloats init({1, 2, 3, 4, 5});
    finish_bounded(s, write_op(s, q, x, 1, init.t));
    s.seal(1);
  }
  std::vector<float> values() { return host_values(s, q, x); }
  Stage s;
  std::vector<kstage_path_t> prims;
  kstage_query_t q = 0;
  kstage_token_t x;
};

// A write of `src` through a device selection: index_map (uint32), index_map64 or mask words.
kstage_write_data_t gather(const DLTensor& src, const uint32_t* map, uint64_t n) {
  kstage_write_data_t w = write_data(&src);
  w.index_map = map;
  w.count = n;
  w.selection_device = kGpu;
  return w;
}
kstage_write_data_t gather64(const DLTensor& src, const int64_t* map, uint64_t n) {
  kstage_write_data_t w = write_data(&src);
  w.index_map64 = map;
  w.count = n;
  w.selection_device = kGpu;
  return w;
}
kstage_write_data_t masked(const DLTensor& src, const uint64_t* words, uint64_t n) {
  kstage_write_data_t w = write_data(&src);
  w.mask = words;
  w.count = n;
  w.selection_device = kGpu;
  return w;
}

kstage_op_t submit(Stage& s, kstage_query_t q, kstage_token_t a, uint64_t ordinal,
                   const kstage_write_data_t& w) {
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, a, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  return op;
}

}  // namespace

TEST_CASE(
    "cuda: uint32 and int64 device index maps are gathered in place; the check's report is "
    "the one copy down",
    "[cuda][device_maps]") {
  GpuFloats src({10, 20, 30, 40});
  GpuArray<uint32_t> map32({3, 0, 2, 2, 1});
  GpuArray<int64_t> map64({1, 1, 0, 3, 2});
  for (int bits : {32, 64}) {
    INFO(bits << "-bit map");
    Sealed f;
    const Counts before = Counts::now();
    const kstage_op_t op = submit(
        f.s, f.q, f.x, 2, bits == 32 ? gather(src.t, map32.p, 5) : gather64(src.t, map64.p, 5));
    finish_bounded(f.s, op);
    const Counts after = Counts::now();
    // No upload and no data copy up (the map and the source are device memory); down, only the
    // check's report, once the op is done.
    CHECK(after.uploads == before.uploads);
    CHECK(after.up == before.up);
    CHECK(after.down == before.down + 1);
    f.s.seal(2);
    CHECK(f.values() == (bits == 32 ? std::vector<float>{40, 10, 30, 30, 20}
                                    : std::vector<float>{20, 20, 10, 40, 30}));
  }
}

TEST_CASE(
    "cuda: a bad device index_map entry fails the op on the device, named with its value, "
    "and is never applied",
    "[cuda][device_maps]") {
  Sealed f;
  GpuFloats src({10, 20, 30, 40});
  kstage_op_t op = 0;
  // uint32: the first bad entry (2 of 2 and 4) and the transported row count are named.
  GpuArray<uint32_t> bad({0, 1, 7, 2, 9});
  op = submit(f.s, f.q, f.x, 2, gather(src.t, bad.p, 5));
  KS_FAILS(wait_op(f.s, op), KSTAGE_INVALID_ARGUMENT,
           "index_map[2] = 7 references a source row outside the transported row count 4 "
           "(shape[0] of the tensor)");
  const char* message = nullptr;
  KS_OK(kstage_op_error(f.s.stage, op, &message));
  CHECK(std::string(message).find("checked on the device") != std::string::npos);
  KS_OK(kstage_release_op(f.s.stage, op));
  // int64: negative and wider-than-32-bit entries are out of range too.
  struct Case {
    std::vector<int64_t> entries;
    const char* message;
  };
  const Case cases[] = {
      {{0, 1, -2, 9, 0},
       "index_map64[2] = -2 references a source row outside the transported "
       "row count 4 (shape[0] of the tensor); checked on the device"},
      {{0, int64_t(1) << 40, -1, 0, 0}, "index_map64[1] = 1099511627776 references"},
      {{0, 1, 2, 3, 4}, "index_map64[4] = 4 references"},
      {{INT64_MIN, 0, 0, 0, 0}, "index_map64[0] = -9223372036854775808 references"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    GpuArray<int64_t> bad64(c.entries);
    op = submit(f.s, f.q, f.x, 2, gather64(src.t, bad64.p, 5));
    KS_FAILS(wait_op(f.s, op), KSTAGE_INVALID_ARGUMENT, c.message);
    KS_OK(kstage_release_op(f.s.stage, op));
  }
  // A batch with one bad map applies none of its attributes.
  kstage_token_t v = f.s.token("v");
  GpuArray<uint32_t> good({0, 1, 2, 0, 1}), bad_v({0, 1, 2, 3, 1});
  GpuFloats three({10, 20, 30});
  kstage_write_data_t data[2] = {gather(three.t, good.p, 5), gather(three.t, bad_v.p, 5)};
  const kstage_token_t attrs[2] = {f.x, v};
  KS_OK(kstage_write_attributes(f.s.stage, f.q, attrs, data, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_FAILS(wait_op(f.s, op), KSTAGE_INVALID_ARGUMENT, "data[1] ('v'): index_map[3] = 3");
  KS_OK(kstage_release_op(f.s.stage, op));
  f.s.seal(2);
  CHECK(f.values() == std::vector<float>{1, 2, 3, 4, 5});
  CHECK(f.s.changed(f.q, f.x, 2, 2).empty());
  // A good write at the next ordinal is applied.
  GpuArray<uint32_t> fine({3, 3});
  finish_bounded(f.s, submit(f.s, f.q, f.x, 3, gather(src.t, fine.p, 2)));
  f.s.seal(3);
  CHECK(f.values() == std::vector<float>{40, 40, 3, 4, 5});
  CHECK(f.s.changed(f.q, f.x, 3, 3) == std::vector<kstage_path_t>{f.prims[0], f.prims[1]});
}

TEST_CASE("cuda: a device mask gathers its rows on the device; the seal reads its words back once",
          "[cuda][device_maps]") {
  Sealed f;
  GpuFloats src({10, 20, 30, 40, 50});
  GpuArray<uint64_t> mask({0b10110});  // elements 1, 2 and 4
  const Counts before = Counts::now();
  finish_bounded(f.s, submit(f.s, f.q, f.x, 2, masked(src.t, mask.p, 5)));
  const Counts written = Counts::now();
  CHECK(written.uploads == before.uploads);
  CHECK(written.up == before.up);
  CHECK(written.down == before.down);  // nothing read back by the write
  f.s.seal(2);
  CHECK(Counts::now().down == before.down + 1);  // the mask's word, for the host's tables
  CHECK(f.values() == std::vector<float>{1, 20, 30, 4, 50});
  CHECK(f.s.changed(f.q, f.x, 2, 2) ==
        std::vector<kstage_path_t>{f.prims[1], f.prims[2], f.prims[4]});
  // Two words, bits past count ignored.
  std::vector<float> many(70);
  for (size_t i = 0; i < many.size(); ++i) many[i] = float(i);
  GpuFloats big(many);
  Stage wide(KSTAGE_HOST_EXECUTION_DEFAULT, &kGpu);
  const std::vector<kstage_path_t> wp = wide.paths("/w", 70);
  kstage_query_t wq = wide.query(wp);
  kstage_token_t z = wide.token("z");
  GpuArray<uint64_t> two({uint64_t(1) << 63, ~uint64_t(0)});  // 63, 64..69
  finish_bounded(wide, submit(wide, wq, z, 1, masked(big.t, two.p, 70)));
  wide.seal(1);
  std::vector<kstage_path_t> expect = {wp[63]};
  for (size_t i = 64; i < 70; ++i) expect.push_back(wp[i]);
  CHECK(wide.changed(wq, z, 1, 1) == expect);
}

// The producer fills the selection on its own stream, held: the write's call returns at once,
// its op is not done while the producer is held, and what it applies is the producer's
// selection, not what the buffer held before.
TEST_CASE(
    "cuda: a device index map or mask a held producer is still filling is read after its "
    "event",
    "[cuda][device_maps][sync]") {
  for (const char* kind : {"index_map", "index_map64", "mask"}) {
    INFO(kind);
    const std::string k = kind;
    Stage s(KSTAGE_HOST_EXECUTION_DEFAULT, &kGpu);
    const std::vector<kstage_path_t> prims = s.paths("/p", 3);
    kstage_query_t q = s.query(prims);
    kstage_token_t x = s.token("x");
    GpuFloats src({10, 20, 30});
    GpuArray<uint32_t> map32({0, 0, 0});
    GpuArray<int64_t> map64({0, 0, 0});
    GpuArray<uint64_t> words({0b001});
    PinnedArray<uint32_t> fill32({2, 1, 0});
    PinnedArray<int64_t> fill64({2, 1, 0});
    PinnedArray<uint64_t> fill_words({0b110});
    cudaEvent_t produced = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming) == cudaSuccess);
    kstage_op_t op = 0;
    {
      HeldStream producer;
      REQUIRE(producer.error() == "");
      void* dst = k == "index_map" ? static_cast<void*>(map32.p)
                  : k == "mask"    ? static_cast<void*>(words.p)
                                   : static_cast<void*>(map64.p);
      const void* from = k == "index_map" ? static_cast<const void*>(fill32.p)
                         : k == "mask"    ? static_cast<const void*>(fill_words.p)
                                          : static_cast<const void*>(fill64.p);
      const size_t bytes = k == "index_map" ? 12 : k == "mask" ? 8 : 24;
      REQUIRE(cudaMemcpyAsync(dst, from, bytes, cudaMemcpyHostToDevice, producer.stream()) ==
              cudaSuccess);
      REQUIRE(cudaEventRecord(produced, producer.stream()) == cudaSuccess);
      kstage_write_data_t w = k == "index_map" ? gather(src.t, map32.p, 3)
                              : k == "mask"    ? masked(src.t, words.p, 3)
                                               : gather64(src.t, map64.p, 3);
      w.device_sync = {producer.handle(), reinterpret_cast<uintptr_t>(produced)};
      op = submit(s, q, x, 1, w);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CHECK(kstage_wait(s.stage, op, 0) == KSTAGE_TIMEOUT);
      CHECK_FALSE(producer.timed_out());
    }  // released
    finish_bounded(s, op);
    s.seal(1);
    if (k == "mask") {
      CHECK(s.changed(q, x, 1, 1) == std::vector<kstage_path_t>{prims[1], prims[2]});
    } else {
      CHECK(host_values(s, q, x) == std::vector<float>{30, 20, 10});
    }
    (void)cudaEventDestroy(produced);
  }
}

// Issue #52, defect 2 on the GPU: a host index map behind queued work goes up from pinned
// memory, so the call does not wait for the stage's queue -- here a producer held for up to 4 s.
// Also over 64 MiB (the staging cache's largest block): a pinned block of its own, the previous
// one freed.
TEST_CASE("cuda: a host index map behind a held producer is uploaded without the call waiting",
          "[cuda][device_maps][sync]") {
  for (size_t n : {size_t(1) << 20, (size_t(64) << 20) / sizeof(uint32_t) + 1024}) {
    INFO(n << " entries");
    Stage s(KSTAGE_HOST_EXECUTION_DEFAULT, &kGpu);
    kstage_path_t first = 0;
    KS_OK(kstage_intern_path_range(s.stage, "/", 1, "r", 1, 0, n, &first));
    kstage_query_t q = 0;
    KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &q));
    kstage_token_t x = s.token("x");
    GpuFloats src({10, 20, 30, 40});
    std::vector<uint32_t> map(n);
    for (size_t i = 0; i < n; ++i) map[i] = uint32_t(3 - i % 4);
    // A first write of the same map before the hold, not waited for through kstage (its copy
    // done: the device synchronised): its staging block is given back at the held write's first
    // reap -- up to 64 MiB cached and taken again; over it freed (cudaFreeHost) and a new one
    // pinned (cudaMallocHost), both inside the held call. Should either wait for the device,
    // the call takes as long as the hold.
    kstage_write_data_t w = write_data(&src.t);
    w.index_map = map.data();
    w.count = n;
    KS_OK(kstage_release_op(s.stage, submit(s, q, x, 1, w)));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    cudaEvent_t produced = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming) == cudaSuccess);
    kstage_op_t op = 0;
    std::chrono::steady_clock::duration call{};
    {
      HeldStream producer;
      REQUIRE(producer.error() == "");
      REQUIRE(cudaEventRecord(produced, producer.stream()) == cudaSuccess);
      w.device_sync = {producer.handle(), reinterpret_cast<uintptr_t>(produced)};
      const auto start = std::chrono::steady_clock::now();
      op = submit(s, q, x, 2, w);
      call = std::chrono::steady_clock::now() - start;
      CHECK(kstage_wait(s.stage, op, 0) == KSTAGE_TIMEOUT);
      CHECK_FALSE(producer.timed_out());  // (else the call may have waited for it)
    }
    CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(call).count() < 1000);
    finish_bounded(s, op);
    s.seal(2);
    const std::vector<float> got = host_values(s, q, x);
    REQUIRE(got.size() == n);
    for (size_t i : {size_t(0), size_t(1), size_t(2), size_t(3), n - 1})
      CHECK(got[i] == float(10 * (4 - i % 4)));
    (void)cudaEventDestroy(produced);
  }
}

TEST_CASE(
    "cuda: a read's index map in device memory, exported as kDLCUDA, released after a held "
    "consumer's read",
    "[cuda][device_maps][dlpack]") {
  Sealed f;
  // The query in reverse: a zero-copy group needs an index map (prim i is row 4 - i).
  const std::vector<kstage_path_t> reversed(f.prims.rbegin(), f.prims.rend());
  kstage_query_t rq = f.s.query(reversed);
  kstage_read_desc_t on_device = kstage_read_desc_init();
  on_device.device_index_map = true;
  on_device.max_group_prims = 2;  // the second group's slice of the map: rows 2, 1
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(f.s.stage, rq, &f.x, 1, &on_device, &r));
  kstage_read_group_t g{}, g2{};
  KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g));
  KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g2));
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, g2.data.index_map) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(attributes.device == 0);
  DLManagedTensorVersioned* e = nullptr;
  KS_OK(kstage_group_export_index_map(f.s.stage, g2.handle, 0, &e));
  CHECK(e->dl_tensor.data == g2.data.index_map);
  CHECK(e->dl_tensor.device.device_type == kDLCUDA);
  CHECK(e->dl_tensor.device.device_id == 0);
  CHECK(e->dl_tensor.ndim == 1);
  CHECK(e->dl_tensor.shape[0] == 2);
  CHECK(e->dl_tensor.dtype.code == kDLUInt);
  CHECK(e->dl_tensor.dtype.bits == 32);
  CHECK(e->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
  REQUIRE(group_ready(g2.data.device_sync));
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_group(f.s.stage, g2.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  // The map outlives its group and read.
  std::vector<uint32_t> part(2);
  REQUIRE(cudaMemcpy(part.data(), e->dl_tensor.data, 8, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(part == std::vector<uint32_t>{2, 1});
  e->deleter(e);

  // To a consumer's stream, held: ordered after the group; released only after the consumer's
  // read, however much the stage allocates and rewrites meanwhile.
  PinnedArray<uint32_t> out({9, 9, 9, 9, 9});
  GpuFloats again({6, 7, 8, 9, 10});
  on_device.max_group_prims = 0;
  {
    HeldStream consumer;
    REQUIRE(consumer.error() == "");
    KS_OK(kstage_read_attributes(f.s.stage, rq, &f.x, 1, &on_device, &r));
    KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g));
    KS_OK(kstage_group_export_index_map(f.s.stage, g.handle, consumer.handle(), &e));
    REQUIRE(cudaMemcpyAsync(out.p, e->dl_tensor.data, 5 * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                            consumer.stream()) == cudaSuccess);
    KS_OK(kstage_release_group(f.s.stage, g.handle));
    KS_OK(kstage_release_read(f.s.stage, r));
    e->deleter(e);
    // The stage goes on, allocating on its stream: a new x (its cached row map dropped),
    // sealed, read on the device (not waited for here: tests/cuda/test_cuda_releases.cpp checks
    // that a held consumer holds back none of the stage's work).
    const kstage_op_t op = write_op(f.s, f.q, f.x, 2, again.t);
    kstage_read_desc_t fresh = kstage_read_desc_init();
    fresh.device_index_map = true;
    KS_OK(kstage_read_attributes(f.s.stage, rq, &f.x, 1, &fresh, &r));
    KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g));
    KS_OK(kstage_release_group(f.s.stage, g.handle));
    KS_OK(kstage_release_read(f.s.stage, r));
    CHECK(busy(consumer.stream()));  // still reading
    CHECK_FALSE(consumer.timed_out());
    consumer.release();
    REQUIRE(wait_for(consumer.stream(), kWaitLimit));
    finish_bounded(f.s, op);
  }
  CHECK(out.get() == std::vector<uint32_t>{4, 3, 2, 1, 0});
  f.s.seal(2);
  CHECK(f.values() == std::vector<float>{6, 7, 8, 9, 10});

  // A read that did not ask: a host map, exported as host memory.
  kstage_read_desc_t plain = kstage_read_desc_init();
  KS_OK(kstage_read_attributes(f.s.stage, rq, &f.x, 1, &plain, &r));
  KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g));
  KS_OK(kstage_group_export_index_map(f.s.stage, g.handle, 0, &e));
  CHECK(e->dl_tensor.device.device_type == kDLCPU);
  KS_OK(kstage_release_group(f.s.stage, g.handle));
  KS_OK(kstage_release_read(f.s.stage, r));
  const auto* rows = static_cast<const uint32_t*>(e->dl_tensor.data);
  CHECK(std::vector<uint32_t>(rows, rows + 5) == std::vector<uint32_t>{4, 3, 2, 1, 0});
  e->deleter(e);
}
