// SPDX-License-Identifier: Apache-2.0
// Device residency on the emulated device (backends/emulated): the sync
// rules of kstage_device_sync_t, ops that complete with their device work,
// copies across sides, residency choices, lifetimes with work in flight,
// and the emulated device's own checks. Every case runs once per host
// execution space.
#include "emulated/device_support.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

using namespace kstage_test;
using namespace kstage_device_test;

TEST_CASE("a write ordered after a producer event does not read its data before the event",
          "[device][sync]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  DeviceFloats src(0, {1, 1, 1, 1});
  // The producer: a held stream that will overwrite the source, then record.
  const std::vector<float> fresh = {5, 6, 7, 8};
  finish_after_held_producer(
      s, 0, src.p, fresh.data(), 4 * sizeof(float),
      [&](kstage_device_sync_t sync) { return write_op(s, q, a, 1, src.t, sync); },
      [&](kstage_op_t op, kstage_device_sync_t sync) {
        // A stream wait, not a host block: the call returned, the op is not done.
        REQUIRE(std::string(kstage_last_error()).find("still running") != std::string::npos);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        REQUIRE(kstage_wait(s.stage, op, 1000000) == KSTAGE_TIMEOUT);
        const char* message = nullptr;
        KS_OK(kstage_op_error(s.stage, op, &message));  // an op in flight answers too
        REQUIRE(kstage_emulated_event_query(sync.event) == 0);
      });
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == fresh);  // the data after the event, never before
}

TEST_CASE("a producer stream alone orders the write after all its work", "[device][sync]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(3);
  kstage_token_t a = s.token("a");
  DeviceFloats src(0, {0, 0, 0});
  const uintptr_t producer = kstage_emulated_stream_create(0);
  const std::vector<float> fresh = {3, 2, 1};
  kstage_emulated_stream_hold(producer);
  kstage_emulated_memcpy_async(producer, src.p, fresh.data(), 3 * sizeof(float));
  kstage_op_t op = write_op(s, q, a, 1, src.t, kstage_device_sync_t{producer, 0});
  REQUIRE(kstage_wait(s.stage, op, 0) == KSTAGE_TIMEOUT);
  kstage_emulated_stream_release(producer);
  finish(s, op);
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == fresh);
  kstage_emulated_stream_destroy(producer);
}

TEST_CASE("device_sync handles the device does not know are INVALID_ARGUMENT naming the field",
          "[device][sync]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(2);
  kstage_token_t a = s.token("a");
  DeviceFloats src(0, {1, 2});
  kstage_write_data_t w = write_data(&src.t);
  w.device_sync = kstage_device_sync_t{0, 0xdead1};
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT,
           "device_sync.event 0xdead1: emulated refused it: invalid resource handle");
  w.device_sync = kstage_device_sync_t{0xbeef1, 0};
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "device_sync.stream 0xbeef1: emulated refused it");
  finish(s, write_op(s, q, a, 1, src.t));
  s.seal(1);
  kstage_read_desc_t d = kstage_read_desc_init();
  d.device_sync = kstage_device_sync_t{0, 0x1231};
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, &d, &r), KSTAGE_INVALID_ARGUMENT,
           "desc.device_sync.event 0x1231");
  // A read of the device column to the host is host data: {0, 0} only.
  d.target_device = kHost;
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, &d, &r), KSTAGE_INVALID_ARGUMENT,
           "desc.device_sync is {stream 0x0, event 0x1231} but the data is host memory");
}

TEST_CASE("a read group's event signals only once the group's data is there", "[device][sync]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(64);
  kstage_token_t a = s.token("a");
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  int64_t shape[1] = {64};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  finish(s, write_op(s, q, a, 1, t));
  KernelDelay slow(30000);  // the seal's and the read's kernels take 30 ms each
  s.seal(1);
  const uintptr_t mine = kstage_emulated_event_create();
  kstage_read_desc_t d = kstage_read_desc_init();
  d.compact = true;
  d.device_sync = kstage_device_sync_t{0, mine};  // recorded after the producing work
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));  // never blocks
  REQUIRE(g.data.tensors[0].device.device_type == kDev0.device_type);
  REQUIRE(g.data.device_sync.event != 0);
  REQUIRE(g.data.device_sync.stream != 0);
  REQUIRE(kstage_emulated_event_query(g.data.device_sync.event) == 0);
  REQUIRE(kstage_emulated_event_query(mine) == 0);
  kstage_emulated_event_synchronize(mine);
  REQUIRE(kstage_emulated_event_query(g.data.device_sync.event) == 1);
  REQUIRE(group_floats(g, 0, 64) == v);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  kstage_emulated_event_destroy(mine);
  // With the work done, a new read's data is complete: {0, 0}.
  kstage_emulated_set_kernel_delay_us(0);
  const ReadBack again = read_back(s, q, a);
  REQUIRE(again.sync.event == 0);
  REQUIRE(again.values == v);
}

TEST_CASE("kstage_wait returns TIMEOUT for a slow op, then its outcome", "[device][ops]") {
  std::vector<float> v = {1, 2, 3, 4,
                          5, 6, 7, 8};  // outlives the stage: an op is released in flight
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(8);
  kstage_token_t a = s.token("a");
  int64_t shape[1] = {8};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  KernelDelay slow(50000);
  kstage_op_t op = write_op(s, q, a, 1, t);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(kstage_wait(s.stage, op, 2000000) == KSTAGE_TIMEOUT);  // 2 ms
  REQUIRE(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(2));
  // Release one op in flight, wait for another.
  kstage_op_t other = write_op(s, q, s.token("b"), 1, t);
  KS_OK(kstage_release_op(s.stage, other));
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_wait(s.stage, op, 0));  // done stays done
  KS_OK(kstage_release_op(s.stage, op));
  KS_FAILS(kstage_wait(s.stage, op, 0), KSTAGE_INVALID_HANDLE, "op");
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == v);
}

namespace {
std::atomic<int> g_deleted{0};
struct Producer {
  static void deleter(DLManagedTensorVersioned* self) {
    kstage_emulated_free(self->dl_tensor.data);
    delete[] self->dl_tensor.shape;
    delete self;
    g_deleted.fetch_add(1);
  }
  // A managed float32 tensor of `values` in device memory of `ordinal`.
  static DLManagedTensorVersioned* make(int32_t ordinal, const std::vector<float>& values) {
    auto* m = new DLManagedTensorVersioned{};
    m->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m->deleter = deleter;
    void* p = kstage_emulated_malloc(ordinal, values.size() * sizeof(float));
    kstage_emulated_memcpy(p, values.data(), values.size() * sizeof(float));
    m->dl_tensor = tensor(p, f32(), 1, new int64_t[1]{int64_t(values.size())}, nullptr,
                          DLDevice{kDev0.device_type, ordinal});
    return m;
  }
};
}  // namespace

TEST_CASE(
    "device producers: a dense managed write is adopted, a sparse one copied, each deleted once",
    "[device][lifetime]") {
  g_deleted = 0;
  const size_t live = kstage_emulated_live_bytes(0);
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DLManagedTensorVersioned* dense = Producer::make(0, {1, 2, 3, 4});
    const void* dense_memory = dense->dl_tensor.data;
    kstage_write_data_t w = kstage_write_data_init();
    w.managed_tensors = &dense;
    w.tensor_count = 1;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    REQUIRE(g_deleted == 0);  // adopted: the pending write holds it
    s.seal(1);
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, nullptr, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    REQUIRE(g.data.tensors[0].data == dense_memory);  // zero-copy on the device
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));

    DLManagedTensorVersioned* sparse = Producer::make(0, {9, 8});
    uint32_t index_map[2] = {1, 0};
    w.managed_tensors = &sparse;
    w.index_map = index_map;
    w.count = 2;
    KS_OK(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    REQUIRE(g_deleted == 1);  // copied: deleted once the device copied it
    s.seal(2);
    REQUIRE(read_back(s, q, a).values == std::vector<float>{8, 9, 3, 4});
  }
  REQUIRE(g_deleted == 2);
  REQUIRE(kstage_emulated_live_bytes(0) == live);
}

TEST_CASE("destroying a stage with device work in flight loses nothing and leaks nothing",
          "[device][lifetime]") {
  g_deleted = 0;
  const size_t live = kstage_emulated_live_bytes(0);
  {
    KernelDelay slow(20000);
    std::vector<float> v(16, 2.f);  // a client tensor: valid until the op completes
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(16);
    kstage_token_t a = s.token("a"), b = s.token("b");
    int64_t shape[1] = {16};
    DLTensor t = tensor(v.data(), f32(), 1, shape);
    KS_OK(kstage_release_op(s.stage, write_op(s, q, a, 1, t)));
    // A copied managed write whose copy is still queued when the stage goes.
    DLManagedTensorVersioned* m = Producer::make(0, std::vector<float>(8, 1.f));
    uint32_t index_map[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    kstage_write_data_t w = kstage_write_data_init();
    w.managed_tensors = &m;
    w.tensor_count = 1;
    w.index_map = index_map;
    w.count = 8;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, b, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    KS_OK(kstage_advance_write_floor(s.stage, 1, nullptr, 0));  // seal kernels queued too
    REQUIRE(g_deleted == 0);
    // kstage_destroy with everything in flight (and the op never released).
  }
  REQUIRE(g_deleted == 1);
  REQUIRE(kstage_emulated_live_bytes(0) == live);
}

TEST_CASE("residency: config, write and map name it; else the data's device",
          "[device][residency]") {
  SECTION("{0, 0}: host data makes a host column, device data a device column") {
    DeviceStage s(DLDevice{DLDeviceType(0), 0});
    kstage_query_t q = s.query(2);
    std::vector<float> v = {1, 2};
    int64_t shape[1] = {2};
    DLTensor host = tensor(v.data(), f32(), 1, shape);
    DeviceFloats dev(1, {3, 4});
    finish(s, write_op(s, q, s.token("h"), 1, host));
    finish(s, write_op(s, q, s.token("d"), 1, dev.t));
    s.seal(1);
    REQUIRE(read_back(s, q, s.token("h")).device.device_type == kDLCPU);
    const ReadBack d = read_back(s, q, s.token("d"));
    REQUIRE(d.device.device_type == kDev1.device_type);
    REQUIRE(d.device.device_id == 1);
    REQUIRE(d.values == std::vector<float>{3, 4});
  }
  SECTION("a write's residency wins over the data's and the config's") {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(2);
    std::vector<float> v = {1, 2};
    int64_t shape[1] = {2};
    DLTensor host = tensor(v.data(), f32(), 1, shape);
    kstage_write_data_t w = write_data(&host);
    w.residency = kDev1;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, s.token("a"), 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    s.seal(1);
    const ReadBack r = read_back(s, q, s.token("a"));
    REQUIRE(r.device.device_id == 1);
    REQUIRE(r.values == v);
  }
  SECTION("a residency the build or the process lacks is refused by kstage_create") {
    kstage_config_t c = kstage_config_init();
    kstage_stage_t st = 0;
    c.residency = DLDevice{kDev0.device_type, 2};
    KS_FAILS(kstage_create(&c, &st), KSTAGE_INVALID_ARGUMENT,
             "device kDLExtDev:2 does not exist: the process has 2 emulated device(s)");
    c.residency = DLDevice{kDLCUDA, 0};
    KS_FAILS(kstage_create(&c, &st), KSTAGE_NOT_SUPPORTED, "(backends: host, emulated)");
  }
}

TEST_CASE("copies across sides: each path, and reads on the column's device and on another",
          "[device][copies]") {
  uint64_t h2d0 = 0, d2h0 = 0, h2d = 0, d2h = 0;
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  SECTION("device data into a host column: copied down") {
    DeviceStage s(kHost);
    kstage_query_t q = s.query(6);
    kstage_token_t a = s.token("a");
    DeviceFloats dev(0, v);
    finish(s, write_op(s, q, a, 1, dev.t));
    s.seal(1);
    const ReadBack r = read_back(s, q, a);
    REQUIRE(r.device.device_type == kDLCPU);
    REQUIRE(r.sync.event == 0);
    REQUIRE(r.values == v);
    kstage_read_desc_t d = kstage_read_desc_init();
    d.target_device = kDev1;  // a host column read onto a device
    const ReadBack up = read_back(s, q, a, d);
    REQUIRE(up.device.device_type == kDev1.device_type);
    REQUIRE(up.device.device_id == 1);
    REQUIRE(up.values == v);
  }
  SECTION("device data into a device column: no host round trip") {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(6);
    kstage_token_t a = s.token("a");
    DeviceFloats dev(0, v);
    kstage_emulated_copy_counts(0, &h2d0, &d2h0);
    uint64_t total_up0 = 0, total_down0 = 0, uploads0 = 0;
    KS_OK(kstage_transfer_counts(&total_up0, &total_down0, &uploads0));
    const uint64_t emulated_uploads0 = kstage_emulated_upload_count(0);
    finish(s, write_op(s, q, a, 1, dev.t));
    s.seal(1);
    uint32_t index_map[3] = {5, 0, 2};
    kstage_write_data_t w = write_data(&dev.t);
    w.index_map = index_map;
    w.count = 3;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    s.seal(2);
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;
    const ReadBack r = read_back(s, q, a, d);
    kstage_emulated_copy_counts(0, &h2d, &d2h);
    REQUIRE(h2d == h2d0);
    REQUIRE(d2h == d2h0);
    // The process-wide counts of the C API agree (every device backend feeds them).
    uint64_t total_up = 0, total_down = 0, uploads = 0;
    KS_OK(kstage_transfer_counts(&total_up, &total_down, &uploads));
    REQUIRE(total_up == total_up0);
    REQUIRE(total_down == total_down0);
    REQUIRE(uploads - uploads0 == kstage_emulated_upload_count(0) - emulated_uploads0);
    REQUIRE(uploads > uploads0);  // the index_map at least
    REQUIRE(r.values ==
            std::vector<float>{6, 1, 3, 4, 5, 6});  // element i <- source row index_map[i]
    d.target_device = kHost;                        // a read may ask for the host: one copy down
    const ReadBack down = read_back(s, q, a, d);
    REQUIRE(down.device.device_type == kDLCPU);
    REQUIRE(down.sync.event == 0);
    REQUIRE(down.values == r.values);
    d.target_device = kDev1;  // or another device
    REQUIRE(read_back(s, q, a, d).values == r.values);
  }
  SECTION("host data into a device column: one copy up per dense write") {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(6);
    kstage_token_t a = s.token("a");
    int64_t shape[1] = {6};
    DLTensor t = tensor(const_cast<float*>(v.data()), f32(), 1, shape);
    kstage_emulated_copy_counts(0, &h2d0, &d2h0);
    uint64_t up0 = 0, down0 = 0;
    KS_OK(kstage_transfer_counts(&up0, &down0, nullptr));
    finish(s, write_op(s, q, a, 1, t));
    kstage_emulated_copy_counts(0, &h2d, &d2h);
    REQUIRE(h2d == h2d0 + 1);
    REQUIRE(d2h == d2h0);
    uint64_t up = 0, down = 0;
    KS_OK(kstage_transfer_counts(&up, &down, nullptr));
    REQUIRE(up == up0 + 1);
    REQUIRE(down == down0);
    s.seal(1);
    REQUIRE(read_back(s, q, a).values == v);
  }
}

TEST_CASE("kstage_group_sync orders a consumer's stream and event after the group's data",
          "[device][sync][read]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(256);
  kstage_token_t a = s.token("a");
  std::vector<float> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) + 0.5f;
  DeviceFloats src(0, v);
  finish(s, write_op(s, q, a, 1, src.t));
  s.seal(1);
  const uintptr_t consumer = kstage_emulated_stream_create(0);
  const uintptr_t consumed = kstage_emulated_event_create();
  {
    KernelDelay slow(20000);  // the group's copy is still running when the consumer enqueues
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    REQUIRE(g.data.device_sync.event != 0);  // produced by work in flight
    KS_OK(kstage_group_sync(s.stage, g.handle, kstage_device_sync_t{consumer, consumed}));
    // The consumer reads on its own stream, with no host wait in between.
    std::vector<float> out(v.size(), -1.f);
    kstage_emulated_memcpy_async(consumer, out.data(), g.data.tensors[0].data,
                                 v.size() * sizeof(float));
    kstage_emulated_stream_synchronize(consumer);
    REQUIRE(out == v);
    kstage_emulated_event_synchronize(consumed);
    REQUIRE(kstage_emulated_event_query(consumed) == 1);
    // A handle the device does not know is refused, naming the field.
    KS_FAILS(kstage_group_sync(s.stage, g.handle, kstage_device_sync_t{0, 0x7777}),
             KSTAGE_INVALID_ARGUMENT,
             "consumer.event 0x7777: emulated refused it: invalid resource handle");
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
  }
  kstage_emulated_event_destroy(consumed);
  kstage_emulated_stream_destroy(consumer);
}

TEST_CASE("device groups export as DLPack on their device; exports outlive the stage",
          "[device][dlpack]") {
  DLManagedTensorVersioned* e = nullptr;
  std::vector<float> v = {7, 8, 9};
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(3);
    kstage_token_t a = s.token("a");
    int64_t shape[1] = {3};
    DLTensor t = tensor(v.data(), f32(), 1, shape);
    finish(s, write_op(s, q, a, 1, t));
    s.seal(1);
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, nullptr, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    KS_OK(kstage_group_export(s.stage, g.handle, 0, 0, &e));
    REQUIRE(e->dl_tensor.device.device_type == kDev0.device_type);
    REQUIRE(e->dl_tensor.device.device_id == 0);
    REQUIRE(e->dl_tensor.data == g.data.tensors[0].data);
    wait_for(g.data.device_sync);
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
  }
  std::vector<float> out(3);
  kstage_emulated_memcpy(out.data(), e->dl_tensor.data, sizeof(float) * 3);
  REQUIRE(out == v);
  e->deleter(e);
}

namespace {
std::atomic<int> g_violations{0};
void count_violation(const char*) { g_violations.fetch_add(1); }
}  // namespace

TEST_CASE("the emulated device checks its launches and poisons its memory", "[device][checks]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  SECTION("a tensor whose DLDevice is not where its data is: refused, naming both") {
    // Claims device memory but points at the host.
    std::vector<float> host = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    DLTensor liar = tensor(host.data(), f32(), 1, shape, nullptr, kDev0);
    kstage_op_t op = 0;
    kstage_write_data_t w = write_data(&liar);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT,
             "DLDevice says kDLExtDev:0 but the data pointer is host memory");
    // Device 1's memory labelled device 0 (never assumed to be device 0).
    DeviceFloats on1(1, host);
    on1.t.device = kDev0;
    w = write_data(&on1.t);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT,
             "DLDevice says device_id 0 but the data pointer is memory of emulated device 1");
    REQUIRE(scalars(s, q, a).empty());  // nothing was written
  }
  SECTION("a kernel handed host memory calls the violation handler") {
    // Only the first and last row tensors of a batch are asked where they
    // live: a host row between them reaches the kernel, which the device's
    // launch check reports.
    kstage_token_t r = s.token("ragged");
    DeviceFloats row0(0, {1, 2}), row2(0, {5, 6});
    std::vector<float> host = {3, 4};
    int64_t two[1] = {2};
    DLTensor rows[3] = {row0.t, tensor(host.data(), f32(), 1, two, nullptr, kDev0), row2.t};
    kstage_query_t q3 = s.query(3);
    kstage_write_data_t w = write_data(rows, 3, true);
    g_violations = 0;
    kstage_emulated_violation_fn old = kstage_emulated_set_violation_handler(count_violation);
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q3, r, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    kstage_emulated_set_violation_handler(old);
    REQUIRE(g_violations == 1);
  }
#if defined(__SANITIZE_ADDRESS__)
  SECTION("under ASan, device memory is poisoned while no device work runs") {
    std::vector<float> v = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    DLTensor t = tensor(v.data(), f32(), 1, shape);
    finish(s, write_op(s, q, a, 1, t));
    s.seal(1);
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, nullptr, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    wait_for(g.data.device_sync);
    REQUIRE(__asan_address_is_poisoned(g.data.tensors[0].data));
    REQUIRE(group_floats(g, 0, 4) == v);  // a device copy may read it
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
  }
#endif
}

TEST_CASE("index arrays reach the device once per call; a cached row map is uploaded once",
          "[device][uploads]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(64);
  kstage_token_t a = s.token("a");
  std::vector<float> v(64, 1.f);
  int64_t shape[1] = {64};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  finish(s, write_op(s, q, a, 1, t));
  s.seal(1);
  // Another order of the same prims: every tick scatters through its row map.
  const std::vector<kstage_path_t> rev(s.prims.rbegin(), s.prims.rend());
  kstage_query_t qr = s.Stage::query(rev);
  std::vector<uint64_t> uploads;
  for (uint64_t tick = 2; tick < 6; ++tick) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(tick * 100 + i);
    finish(s, write_op(s, qr, a, tick, t));
    s.seal(tick);
    uploads.push_back(kstage_emulated_upload_count(0));
  }
  // The first tick uploads the row map; the next ones reuse it.
  REQUIRE(uploads[1] == uploads[0]);
  REQUIRE(uploads[3] == uploads[0]);
  const ReadBack r = read_back(s, qr, a);
  REQUIRE(r.values == v);
  // A caller's index_map is uploaded once per write, not per row.
  uint32_t index_map[4] = {3, 2, 1, 0};
  kstage_write_data_t w = write_data(&t);
  w.index_map = index_map;
  w.count = 4;
  DeviceFloats dev(0, std::vector<float>(64, 7.f));
  w.tensors = &dev.t;
  const uint64_t before = kstage_emulated_upload_count(0);
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, a, 6, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  finish(s, op);
  REQUIRE(kstage_emulated_upload_count(0) == before + 1);
}

TEST_CASE("device sources: masks, index maps and ragged rows on the device", "[device][sparse]") {
  const DLDevice residency = GENERATE(kDev0, kHost);
  DeviceStage s(residency);
  kstage_query_t q = s.query(6);
  kstage_token_t a = s.token("a"), r = s.token("rows");
  DeviceFloats base(0, {0, 1, 2, 3, 4, 5});
  finish(s, write_op(s, q, a, 1, base.t));
  s.seal(1);
  SECTION("a mask writes the selected elements, source row i for element i") {
    DeviceFloats src(0, {10, 11, 12, 13, 14, 15});
    uint64_t mask = 0b101010;
    kstage_write_data_t w = write_data(&src.t);
    w.mask = &mask;
    w.count = 6;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    s.seal(2);
    REQUIRE(read_back(s, q, a).values == std::vector<float>{0, 11, 2, 13, 4, 15});
  }
  SECTION("ragged rows: one device tensor per row, and one packed tensor") {
    DeviceFloats r0(0, {1}), r1(0, {2, 3}), r2(0, {});
    DLTensor rows[3] = {r0.t, r1.t, r2.t};
    kstage_write_data_t w = write_data(rows, 3, true);
    w.count = 3;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, r, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    DeviceFloats packed(0, {7, 7, 8, 8, 9, 9});
    uint32_t index_map[3] = {2, 1, 0};
    kstage_write_data_t p = write_data(&packed.t, 1, true);
    p.index_map = index_map;
    p.count = 3;
    // Fresh prims 3..5 get rows cut from the packed tensor, in reverse.
    const std::vector<kstage_path_t> all = s.prims;
    kstage_query_t qt = s.Stage::query({all.begin() + 3, all.end()});
    KS_OK(kstage_write_attribute(s.stage, qt, r, 2, &p, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
    s.seal(2);
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = GENERATE(false, true);
    kstage_read_t rd = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &r, 1, &d, &rd));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, rd, 0, &g));
    REQUIRE(g.prim_count == 6);
    std::vector<std::vector<float>> got;
    for (uint64_t i = 0; i < 6; ++i) {
      const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
      got.push_back(group_floats(g, row, size_t(g.data.tensors[row].shape[0])));
    }
    REQUIRE(got == std::vector<std::vector<float>>{{1}, {2, 3}, {}, {9, 9}, {8, 8}, {7, 7}});
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, rd));
  }
}

TEST_CASE("an unmap is ordered after the producer's event; device map buffers give {0, 0}",
          "[device][sync][map]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = a;
  d.dtype = f32();
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &d, 1, nullptr, 0, &m));
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(s.stage, m, 0, &g));
  REQUIRE(g.data.tensors[0].device.device_type == kDev0.device_type);
  REQUIRE(g.data.device_sync.stream == 0);
  REQUIRE(g.data.device_sync.event == 0);
  // The producer fills the buffer on its own stream, held back for now.
  const std::vector<float> values = {4, 3, 2, 1};
  finish_after_held_producer(
      s, 0, g.data.tensors[0].data, values.data(), 16,
      [&](kstage_device_sync_t sync) {
        kstage_op_t op = 0;
        KS_OK(kstage_unmap_group(s.stage, m, g.handle, sync, &op));
        return op;
      },
      [&](kstage_op_t, kstage_device_sync_t) {
        s.seal(1);  // the seal's kernels queue behind the producer too
      });
  REQUIRE(read_back(s, q, a).values == values);
  KS_OK(kstage_release_map(s.stage, m));
}

TEST_CASE(
    "a map released after its producer frees its buffers only once the producer's work has run",
    "[device][sync][map]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  const kstage_token_t a = s.token("a"), b = s.token("b");
  DeviceFloats src(0, {1, 2, 3, 4});
  finish(s, write_op(s, q, b, 1, src.t));
  s.seal(1);
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = a;
  d.dtype = f32();
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &d, 2, nullptr, 0, &m));
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(s.stage, m, 0, &g));
  // A producer fills the buffer on its own stream, held back; then gives the map up.
  const uintptr_t producer = kstage_emulated_stream_create(0);
  const std::vector<float> values = {4, 3, 2, 1};
  kstage_emulated_stream_hold(producer);
  kstage_emulated_memcpy_async(producer, g.data.tensors[0].data, values.data(), 16);
  KS_OK(kstage_release_map_after(s.stage, m, kstage_device_sync_t{producer, 0}));
  // The stage's stream waits for the producer (a stream wait, not a host block): work the stage
  // enqueues after the release -- a compact read of another column -- is not done while the
  // producer is held, so the buffer's free (before it) is not either.
  kstage_read_desc_t rd = kstage_read_desc_init();
  rd.compact = true;
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &b, 1, &rd, &r));
  kstage_read_group_t rg{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &rg));
  REQUIRE(rg.data.device_sync.event != 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(kstage_emulated_event_query(rg.data.device_sync.event) == 0);
  kstage_emulated_stream_release(producer);
  kstage_emulated_event_synchronize(rg.data.device_sync.event);
  REQUIRE(group_floats(rg, 0, 4) == std::vector<float>({1, 2, 3, 4}));
  KS_OK(kstage_release_group(s.stage, rg.handle));
  KS_OK(kstage_release_read(s.stage, r));
  kstage_emulated_stream_destroy(producer);
  kstage_attribute_info_t info = kstage_attribute_info_init();
  REQUIRE(kstage_attribute_info(s.stage, a, &info) == KSTAGE_NOT_FOUND);  // nothing committed
}

TEST_CASE("one reader event covers every column of a read, on any device", "[device][sync]") {
  DeviceStage s(DLDevice{DLDeviceType(0), 0});
  kstage_query_t q = s.query(32);
  const kstage_token_t attrs[3] = {s.token("on0"), s.token("on1"), s.token("host")};
  std::vector<float> v(32, 3.f);
  int64_t shape[1] = {32};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  for (int k = 0; k < 3; ++k) {
    kstage_write_data_t w = write_data(&t);
    w.residency = k == 0 ? kDev0 : k == 1 ? kDev1 : kHost;
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, attrs[k], 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    finish(s, op);
  }
  KernelDelay slow(20000);
  s.seal(1);
  const uintptr_t mine = kstage_emulated_event_create();
  kstage_read_desc_t d = kstage_read_desc_init();
  d.compact = true;
  d.device_sync = kstage_device_sync_t{0, mine};
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, attrs, 3, &d, &r));
  std::vector<kstage_read_group_t> groups;
  for (kstage_read_group_t g{}; kstage_fetch_read_next(s.stage, r, 0, &g) == KSTAGE_OK;)
    groups.push_back(g);
  REQUIRE(groups.size() == 3);
  kstage_emulated_event_synchronize(mine);
  for (const kstage_read_group_t& g : groups) {
    if (g.data.device_sync.event)
      REQUIRE(kstage_emulated_event_query(g.data.device_sync.event) == 1);
    REQUIRE(group_floats(g, 0, 32) == v);
    KS_OK(kstage_release_group(s.stage, g.handle));
  }
  KS_OK(kstage_release_read(s.stage, r));
  kstage_emulated_event_destroy(mine);
}

TEST_CASE("a read onto a device with a bad event is rejected and frees nothing in use",
          "[device][sync]") {
  DeviceStage s(kHost);
  kstage_query_t q = s.query(16);
  kstage_token_t a = s.token("a");
  std::vector<float> v(16, 1.f);
  int64_t shape[1] = {16};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  finish(s, write_op(s, q, a, 1, t));
  s.seal(1);
  KernelDelay slow(20000);  // the copy up is still queued when the call fails
  kstage_read_desc_t d = kstage_read_desc_init();
  d.target_device = kDev0;
  d.device_sync = kstage_device_sync_t{0, 0x1231};
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, &d, &r), KSTAGE_INVALID_ARGUMENT,
           "desc.device_sync.event 0x1231");
  kstage_emulated_set_kernel_delay_us(0);
  // The column's storage is written in place next (nobody holds it).
  for (float& x : v) x = 2.f;
  finish(s, write_op(s, q, a, 2, t));
  s.seal(2);
  kstage_read_desc_t up = kstage_read_desc_init();
  up.target_device = kDev0;
  REQUIRE(read_back(s, q, a, up).values == v);
}

TEST_CASE("host data a device produces: staging on the host waits for the producer",
          "[device][sync]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  // Pinned memory a device copy fills (a kDLCUDAHost tensor must be pinned: the emulated
  // runtime knows, as CUDA's does).
  struct Pinned {
    float* p = static_cast<float*>(kstage_emulated_host_malloc(4 * sizeof(float)));
    ~Pinned() { kstage_emulated_host_free(p); }
    float* data() const { return p; }
  } host;
  std::fill(host.p, host.p + 4, 0.f);
  const std::vector<float> fresh = {1, 2, 3, 4};
  const uintptr_t producer = kstage_emulated_stream_create(0);
  const uintptr_t done = kstage_emulated_event_create();
  SECTION("a sparse write is staged on the host after the event") {
    kstage_emulated_stream_hold(producer);
    kstage_emulated_memcpy_async(producer, host.data(), fresh.data(), 16);
    kstage_emulated_event_record(done, producer);
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      kstage_emulated_stream_release(producer);
    });
    int64_t shape[1] = {4};
    DLTensor t = tensor(host.data(), f32(), 1, shape, nullptr, DLDevice{kDLCUDAHost, 0});
    uint32_t index_map[4] = {3, 2, 1, 0};
    kstage_write_data_t w = write_data(&t);
    w.index_map = index_map;
    w.count = 4;
    w.device_sync = kstage_device_sync_t{producer, done};
    kstage_op_t op = 0;
    KS_OK(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
    releaser.join();
    finish(s, op);
    s.seal(1);
    REQUIRE(read_back(s, q, a).values == std::vector<float>{4, 3, 2, 1});
  }
  SECTION("a write rejected by its shape returns at once, whatever the producer") {
    kstage_emulated_stream_hold(producer);
    kstage_emulated_event_record(done, producer);
    int64_t shape[1] = {3};  // 3 rows for 4 prims
    DLTensor t = tensor(host.data(), f32(), 1, shape, nullptr, DLDevice{kDLCUDAHost, 0});
    kstage_write_data_t w = write_data(&t);
    w.device_sync = kstage_device_sync_t{producer, done};
    kstage_op_t op = 0;
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
             KSTAGE_INVALID_ARGUMENT, "3 source row(s)");
    kstage_emulated_stream_release(producer);
  }
  kstage_emulated_event_destroy(done);
  kstage_emulated_stream_destroy(producer);
}

// Found by tests/test_managed.cpp's large index_map case: freeing a block of 1 MB or more gave
// its pages back with MADV_DONTNEED over [start, start + size), which the kernel rounds up to
// whole pages, so the first bytes of the next block (1,536 of them after a 1,600,000-byte
// block) read as zeros -- a column written twice lost its first rows.
TEST_CASE("freeing a large device block leaves its neighbours' bytes alone", "[device][arena]") {
  for (const size_t bytes : {size_t(1600000), size_t(1120000), size_t(1) << 20, size_t(3) << 20}) {
    CAPTURE(bytes);
    auto* a = static_cast<unsigned char*>(kstage_emulated_malloc(0, bytes));
    auto* b = static_cast<unsigned char*>(kstage_emulated_malloc(0, 8192));
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    std::vector<unsigned char> ones(8192, 1), back(8192, 0);
    kstage_emulated_memcpy(b, ones.data(), ones.size());
    kstage_emulated_free(a);
    kstage_emulated_memcpy(back.data(), b, back.size());
    REQUIRE(back == ones);
    kstage_emulated_free(b);
  }
}

TEST_CASE("a device column written twice keeps every row", "[device][arena]") {
  DeviceStage s(kDev0);
  const size_t n = 200000;  // float32 x 2: 1.6 MB per buffer, not a whole number of pages
  const kstage_query_t q = s.query(n);
  const kstage_token_t t = s.token("t");
  for (uint64_t ordinal = 1; ordinal <= 3; ++ordinal) {
    std::vector<float> v(2 * n);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i + ordinal);
    s.write_f32(q, t, ordinal, v, 2);
    s.seal(ordinal);
    const auto got = s.floats(q, t);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i)
      wrong += got.at(s.prims[i]) != std::vector<float>{v[2 * i], v[2 * i + 1]};
    CAPTURE(ordinal);
    REQUIRE(wrong == 0);
  }
}

// kstage_op_sync: a producer ordered, on the device, after the op's consumption of its buffers.
TEST_CASE("kstage_op_sync orders a producer's stream and event after a write's copies",
          "[device][sync][op_sync]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  DeviceFloats src(0, {1, 1, 1, 1});
  const uintptr_t reuse = kstage_emulated_stream_create(0);  // the producer's next work
  const uintptr_t consumed = kstage_emulated_event_create();
  const uintptr_t after = kstage_emulated_event_create();
  const std::vector<float> fresh = {5, 6, 7, 8};
  finish_after_held_producer(
      s, 0, src.p, fresh.data(), 4 * sizeof(float),
      [&](kstage_device_sync_t sync) { return write_op(s, q, a, 1, src.t, sync); },
      [&](kstage_op_t op, kstage_device_sync_t) {
        // The write's copy waits for the held producer: the event and the stream wait too.
        KS_OK(kstage_op_sync(s.stage, op, kstage_device_sync_t{reuse, consumed}));
        kstage_emulated_event_record(after, reuse);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        REQUIRE(kstage_emulated_event_query(consumed) == 0);
        REQUIRE(kstage_emulated_event_query(after) == 0);
        REQUIRE(kstage_wait(s.stage, op, 0) == KSTAGE_TIMEOUT);
      });
  kstage_emulated_event_synchronize(consumed);
  kstage_emulated_event_synchronize(after);
  // The producer may now reuse its buffer: the seal reads the stage's own copy.
  const std::vector<float> later = {0, 0, 0, 0};
  kstage_emulated_memcpy(src.p, later.data(), 4 * sizeof(float));
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == fresh);
  kstage_emulated_event_destroy(after);
  kstage_emulated_event_destroy(consumed);
  kstage_emulated_stream_destroy(reuse);
}

TEST_CASE("kstage_op_sync after an unmap's producer, on a done op, and its refusals",
          "[device][sync][op_sync][map]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = a;
  d.dtype = f32();
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &d, 1, nullptr, 0, &m));
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(s.stage, m, 0, &g));
  const uintptr_t consumed = kstage_emulated_event_create();
  const std::vector<float> values = {4, 3, 2, 1};
  kstage_op_t unmap = 0;
  finish_after_held_producer(
      s, 0, g.data.tensors[0].data, values.data(), 16,
      [&](kstage_device_sync_t sync) {
        KS_OK(kstage_unmap_group(s.stage, m, g.handle, sync, &unmap));
        return unmap;
      },
      [&](kstage_op_t op, kstage_device_sync_t) {
        KS_OK(kstage_op_sync(s.stage, op, kstage_device_sync_t{0, consumed}));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        REQUIRE(kstage_emulated_event_query(consumed) == 0);  // the producer is held
      });
  kstage_emulated_event_synchronize(consumed);
  KS_OK(kstage_release_map(s.stage, m));
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == values);

  // An op whose work is done: the event is recorded after nothing pending, and completes.
  DeviceFloats src(0, {1, 2, 3, 4});
  kstage_op_t op = write_op(s, q, a, 2, src.t);
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  const uintptr_t done = kstage_emulated_event_create();
  KS_OK(kstage_op_sync(s.stage, op, kstage_device_sync_t{0, done}));
  kstage_emulated_event_synchronize(done);
  REQUIRE(kstage_emulated_event_query(done) == 1);
  KS_OK(kstage_op_sync(s.stage, op, kstage_device_sync_t{0, 0}));  // nothing to order
  // A consumer stream of another device waits across devices (as kstage_group_sync's).
  const uintptr_t other = kstage_emulated_stream_create(1);
  KS_OK(kstage_op_sync(s.stage, op, kstage_device_sync_t{other, 0}));
  kstage_emulated_stream_synchronize(other);
  // Handles the device does not know, named; a released or unknown op.
  KS_FAILS(kstage_op_sync(s.stage, op, kstage_device_sync_t{0, 0x7777}), KSTAGE_INVALID_ARGUMENT,
           "consumer.event 0x7777");
  KS_FAILS(kstage_op_sync(s.stage, op, kstage_device_sync_t{0x7777, 0}), KSTAGE_INVALID_ARGUMENT,
           "consumer.stream 0x7777");
  KS_OK(kstage_release_op(s.stage, op));
  KS_FAILS(kstage_op_sync(s.stage, op, kstage_device_sync_t{0, done}), KSTAGE_INVALID_HANDLE, "op");
  KS_FAILS(kstage_op_sync(s.stage, 0, kstage_device_sync_t{0, 0}), KSTAGE_INVALID_HANDLE, "op");
  KS_FAILS(kstage_op_sync(0, unmap, kstage_device_sync_t{0, 0}), KSTAGE_INVALID_HANDLE, "stage");
  KS_FAILS(kstage_op_sync(s.stage, unmap, kstage_device_sync_t{0, 0}), KSTAGE_INVALID_HANDLE,
           "op");  // released by the scenario
  kstage_emulated_stream_destroy(other);
  kstage_emulated_event_destroy(done);
  kstage_emulated_event_destroy(consumed);
}

TEST_CASE("kstage_op_sync: host ops take {0, 0}; an op on two devices takes a stream, no event",
          "[device][sync][op_sync]") {
  DeviceStage s(DLDevice{DLDeviceType(0), 0});  // each column where its data lives
  kstage_query_t q = s.query(4);
  const kstage_token_t h = s.token("h"), d0 = s.token("d0"), d1 = s.token("d1");
  const uintptr_t stream = kstage_emulated_stream_create(0);
  const uintptr_t event = kstage_emulated_event_create();
  // Host data into a host column; a delete (of device data too): no device work.
  std::vector<float> host = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  kstage_op_t op = write_op(s, q, h, 1, tensor(host.data(), f32(), 1, shape));
  KS_OK(kstage_op_sync(s.stage, op, kstage_device_sync_t{0, 0}));
  KS_FAILS(kstage_op_sync(s.stage, op, kstage_device_sync_t{stream, 0}), KSTAGE_INVALID_ARGUMENT,
           "consumer");
  KS_FAILS(kstage_op_sync(s.stage, op, kstage_device_sync_t{0, event}), KSTAGE_INVALID_ARGUMENT,
           "the op has no device work");
  finish(s, op);
  // One op writing a column on each device: a stream waits for both, an event cannot.
  DeviceFloats a0(0, {1, 2, 3, 4}), a1(1, {5, 6, 7, 8});
  const kstage_token_t attrs[2] = {d0, d1};
  kstage_write_data_t w[2] = {write_data(&a0.t), write_data(&a1.t)};
  KS_OK(kstage_write_attributes(s.stage, q, attrs, w, 2, 1, KSTAGE_PRIM_MODE_UPSERT, &op));
  KS_OK(kstage_op_sync(s.stage, op, kstage_device_sync_t{stream, 0}));
  KS_FAILS(kstage_op_sync(s.stage, op, kstage_device_sync_t{stream, event}),
           KSTAGE_INVALID_ARGUMENT, "the op's work ran on 2 devices");
  kstage_emulated_stream_synchronize(stream);
  finish(s, op);
  op = 0;
  KS_OK(kstage_delete_attributes(s.stage, q, &d0, 1, 2, &op));
  KS_FAILS(kstage_op_sync(s.stage, op, kstage_device_sync_t{stream, 0}), KSTAGE_INVALID_ARGUMENT,
           "consumer");
  finish(s, op);
  kstage_emulated_event_destroy(event);
  kstage_emulated_stream_destroy(stream);
}
