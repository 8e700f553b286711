// SPDX-License-Identifier: Apache-2.0
// The emulated runtime is as strict as CUDA (kstage_emulated.h), and the GPU
// backend (backends/gpu/, which the emulated device runs) is
// correct under those rules: stream-ordered reuse, pageable copies, copy
// kinds, asynchronous faults and launch failures, events across ordinals,
// allocation failures and missing pools, empty tensors, and stage lanes.
// Each rule has a case that fails on a runtime that breaks it, and each
// backend defect it found a case that fails before its fix.
#include "emulated/device_support.hpp"

#include <kstage/kstage_arrow.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

using namespace kstage_test;
using namespace kstage_device_test;

namespace {

// The violation handler's messages while a case runs.
std::mutex g_violations_mutex;
std::vector<std::string> g_violations;
void record_violation(const char* message) {
  std::lock_guard lock(g_violations_mutex);
  g_violations.emplace_back(message);
}
struct CatchViolations {
  CatchViolations() : previous(kstage_emulated_set_violation_handler(record_violation)) {
    std::lock_guard lock(g_violations_mutex);
    g_violations.clear();
  }
  ~CatchViolations() { kstage_emulated_set_violation_handler(previous); }
  std::vector<std::string> seen() {
    std::lock_guard lock(g_violations_mutex);
    return g_violations;
  }
  kstage_emulated_violation_fn previous;
};

// A write of the device tensor `src` through an index_map (a gather kernel at the call).
kstage_status_t gather_write(DeviceStage& s, kstage_query_t q, kstage_token_t a, uint64_t ordinal,
                             const DLTensor& src, const std::vector<uint32_t>& index_map,
                             kstage_op_t* op) {
  kstage_write_data_t w = write_data(&src);
  w.index_map = index_map.data();
  w.count = index_map.size();
  return kstage_write_attribute(s.stage, q, a, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, op);
}

std::string op_error(DeviceStage& s, kstage_op_t op) {
  const char* message = nullptr;
  KS_OK(kstage_op_error(s.stage, op, &message));
  return message ? message : "";
}

}  // namespace

TEST_CASE("emulated runtime: a pageable source is read at the call, pinned memory in stream order",
          "[device][runtime]") {
  DeviceFloats dev(0, {0, 0, 0, 0});
  const uintptr_t stream = kstage_emulated_stream_create(0);
  SECTION("pageable: the values at the call") {
    std::vector<float> host = {1, 2, 3, 4};
    kstage_emulated_stream_hold(stream);
    REQUIRE(kstage_emulated_memcpy_async(stream, dev.p, host.data(), 16) == 0);
    host = {9, 9, 9, 9};  // after the call, before the stream reaches the copy
    kstage_emulated_stream_release(stream);
    kstage_emulated_stream_synchronize(stream);
    REQUIRE(dev.get() == std::vector<float>{1, 2, 3, 4});
  }
  SECTION("pinned: the values when the stream reaches the copy") {
    auto* pinned = static_cast<float*>(kstage_emulated_host_malloc(16));
    REQUIRE(pinned != nullptr);
    std::fill(pinned, pinned + 4, 1.f);
    kstage_emulated_stream_hold(stream);
    REQUIRE(kstage_emulated_memcpy_async(stream, dev.p, pinned, 16) == 0);
    std::fill(pinned, pinned + 4, 7.f);
    kstage_emulated_stream_release(stream);
    kstage_emulated_stream_synchronize(stream);
    REQUIRE(dev.get() == std::vector<float>{7, 7, 7, 7});
    kstage_emulated_host_free(pinned);
  }
  SECTION("to pageable memory: done when the call returns") {
    DeviceFloats full(0, {5, 6, 7, 8});
    KernelDelay slow(20000);
    std::vector<float> host(4, 0.f);
    REQUIRE(kstage_emulated_memcpy_async(stream, host.data(), full.p, 16) == 0);
    REQUIRE(host == std::vector<float>{5, 6, 7, 8});  // no synchronisation in between
  }
  kstage_emulated_stream_destroy(stream);
}

TEST_CASE("emulated runtime: a copy whose kind contradicts its pointers fails and copies nothing",
          "[device][runtime]") {
  DeviceFloats a(0, {1, 2, 3, 4}), b(0, {0, 0, 0, 0});
  std::vector<float> host = {5, 5, 5, 5};
  const uintptr_t stream = kstage_emulated_stream_create(0);
  REQUIRE(kstage_emulated_memcpy_kind_async(stream, b.p, a.p, 16, KSTAGE_EMULATED_HOST_TO_DEVICE) !=
          0);
  REQUIRE(kstage_emulated_memcpy_kind_async(stream, b.p, host.data(), 16,
                                            KSTAGE_EMULATED_DEVICE_TO_DEVICE) != 0);
  REQUIRE(kstage_emulated_memcpy_kind_async(stream, host.data(), b.p, 16,
                                            KSTAGE_EMULATED_HOST_TO_DEVICE) != 0);
  kstage_emulated_stream_synchronize(stream);
  REQUIRE(b.get() == std::vector<float>{0, 0, 0, 0});
  REQUIRE(host == std::vector<float>{5, 5, 5, 5});
  REQUIRE(kstage_emulated_memcpy_kind_async(stream, b.p, a.p, 16,
                                            KSTAGE_EMULATED_DEVICE_TO_DEVICE) == 0);
  kstage_emulated_stream_synchronize(stream);
  REQUIRE(b.get() == std::vector<float>{1, 2, 3, 4});
  kstage_emulated_stream_destroy(stream);
}

TEST_CASE("emulated runtime: an event recorded on one ordinal orders a stream of the other",
          "[device][runtime]") {
  DeviceFloats on1(1, {0, 0, 0, 0});
  const uintptr_t s0 = kstage_emulated_stream_create(0), s1 = kstage_emulated_stream_create(1);
  const uintptr_t e = kstage_emulated_event_create();
  std::atomic<int> ran{0};
  kstage_emulated_stream_hold(s0);
  kstage_emulated_event_record(e, s0);
  kstage_emulated_stream_wait_event(s1, e);
  REQUIRE(kstage_emulated_launch_host_func(
              s1, [](void* p) { static_cast<std::atomic<int>*>(p)->store(1); }, &ran) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(ran.load() == 0);
  REQUIRE(kstage_emulated_event_query(e) == 0);
  kstage_emulated_stream_release(s0);
  kstage_emulated_stream_synchronize(s1);
  REQUIRE(ran.load() == 1);
  kstage_emulated_event_destroy(e);
  kstage_emulated_stream_destroy(s0);
  kstage_emulated_stream_destroy(s1);
}

// Defect 1: map buffers come from the stream-ordered allocator, usable only in the stage's
// stream order; a map that handed them out at once let the host's fill be overwritten by the
// allocator's fresh-block fill still queued behind the stage's work.
TEST_CASE("gpu backend: map groups are safe to fill at once, from the host or any stream",
          "[device][runtime][map]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(64);
  kstage_token_t a = s.token("a");
  std::vector<float> v(64, 1.f);
  int64_t shape[1] = {64};
  DLTensor t = tensor(v.data(), f32(), 1, shape);
  finish(s, write_op(s, q, a, 1, t));
  s.seal(1);
  // The stage's stream waits on a producer held back for 30 ms when the map opens.
  DeviceFloats src(0, v);
  const uintptr_t producer = kstage_emulated_stream_create(0);
  kstage_emulated_stream_hold(producer);
  kstage_op_t busy = write_op(s, q, a, 2, src.t, kstage_device_sync_t{producer, 0});
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    kstage_emulated_stream_release(producer);
  });
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = a;
  d.dtype = f32();
  d.prim_mode = KSTAGE_PRIM_MODE_UPDATE;
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(s.stage, q, &d, 3, nullptr, 0, &m));
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(s.stage, m, 0, &g));
  REQUIRE(g.data.device_sync.stream == 0);
  REQUIRE(g.data.device_sync.event == 0);
  std::vector<float> filled(64);
  for (size_t i = 0; i < filled.size(); ++i) filled[i] = float(i);
  kstage_emulated_memcpy(g.data.tensors[0].data, filled.data(), sizeof(float) * 64);
  kstage_op_t op = 0;
  KS_OK(kstage_unmap_group(s.stage, m, g.handle, kstage_device_sync_t{0, 0}, &op));
  releaser.join();
  finish(s, op);
  finish(s, busy);
  KS_OK(kstage_release_map(s.stage, m));
  s.seal(3);
  std::vector<float> got = read_back(s, q, a).values;
  std::sort(got.begin(), got.end());
  REQUIRE(got == filled);  // every value the host wrote, none of the allocator's marker
  kstage_emulated_stream_destroy(producer);
}

// After a reset, the device works again for a new stage.
static void recovers(kstage_host_execution_t exec) {
  kstage_emulated_device_reset(0);
  DeviceStage fresh(kDev0, exec);
  kstage_query_t q = fresh.query(4);
  kstage_token_t a = fresh.token("a");
  DeviceFloats src(0, {1, 2, 3, 4});
  finish(fresh, write_op(fresh, q, a, 1, src.t));
  fresh.seal(1);
  REQUIRE(read_back(fresh, q, a).values == std::vector<float>{1, 2, 3, 4});
}

// Defect 2: a fault in a kernel or copy was reported as success (the completion cleared the
// error), and the calls after it went on as if the device were fine.
TEST_CASE("gpu backend: a copy that faults fails its op with DEVICE_ERROR, and the calls after it",
          "[device][runtime][fault]") {
  ResetDevice reset;
  const kstage_host_execution_t exec = host_execution();
  {
    DeviceStage s(kDev0, exec);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_COPY, 1) == 1);
    KernelDelay slow(20000);  // the fault happens after the call has returned
    kstage_op_t op = write_op(s, q, a, 1, src.t);
    REQUIRE(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_DEVICE_ERROR);
    REQUIRE(std::string(kstage_last_error()).find("an illegal memory access was encountered") !=
            std::string::npos);
    REQUIRE(op_error(s, op).find("illegal memory access") != std::string::npos);
    KS_OK(kstage_release_op(s.stage, op));
    REQUIRE(kstage_emulated_device_status(0) != 0);
    // The context is faulty: the next call that needs the device says so.
    kstage_op_t next = 0;
    kstage_write_data_t w = write_data(&src.t);
    KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &next),
             KSTAGE_DEVICE_ERROR, "illegal memory access");
  }
  recovers(exec);
}

TEST_CASE(
    "gpu backend: a kernel that faults fails its op with DEVICE_ERROR, and the calls after it",
    "[device][runtime][fault]") {
  ResetDevice reset;
  const kstage_host_execution_t exec = host_execution();
  {
    DeviceStage s(kDev0, exec);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_KERNEL, 1) == 1);
    KernelDelay slow(20000);  // the fault happens after the call has returned
    kstage_op_t op = 0;
    KS_OK(gather_write(s, q, a, 1, src.t, {3, 2, 1, 0}, &op));
    REQUIRE(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_DEVICE_ERROR);
    REQUIRE(op_error(s, op).find("emulated device 0") != std::string::npos);
    KS_OK(kstage_release_op(s.stage, op));
    kstage_read_desc_t d = kstage_read_desc_init();
    kstage_read_t r = 0;
    KS_FAILS(kstage_read_attributes(s.stage, q, &a, 1, &d, &r), KSTAGE_DEVICE_ERROR,
             "illegal memory access");
  }
  recovers(exec);
}

// #52, defect 7: a library handed the stage's device memory (ADIOS2's GPU copies) does not check
// its own device calls; kstage_device_check is how its caller finds a fault afterwards.
TEST_CASE("kstage_device_check reports a fault of the device the stage's work ran on",
          "[device][runtime][fault]") {
  ResetDevice reset;
  const kstage_host_execution_t exec = host_execution();
  {
    DeviceStage s(kDev0, exec);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    KS_OK(kstage_device_check(s.stage, kDev0));                // a healthy device
    KS_OK(kstage_device_check(s.stage, DLDevice{kDLCPU, 0}));  // host memory: nothing to check
    KS_FAILS(kstage_device_check(s.stage, DLDevice{KSTAGE_EMULATED_DEVICE_TYPE, 7}),
             KSTAGE_INVALID_ARGUMENT, "7");
    KS_FAILS(kstage_device_check(0, kDev0), KSTAGE_INVALID_HANDLE, "");
    REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_COPY, 1) == 1);
    KernelDelay slow(20000);  // the fault happens after the write's call has returned
    kstage_op_t op = write_op(s, q, a, 1, src.t);
    // Not waited for (as a library's own device work is not): the check waits and reports it.
    KS_FAILS(kstage_device_check(s.stage, kDev0), KSTAGE_DEVICE_ERROR, "illegal memory access");
    REQUIRE(kstage_emulated_device_status(0) != 0);
    KS_OK(kstage_release_op(s.stage, op));
  }
  recovers(exec);
}

TEST_CASE("gpu backend: a launch refused at launch is DEVICE_ERROR and leaves the stage usable",
          "[device][runtime][fault]") {
  ResetDevice reset;
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  DeviceFloats src(0, {1, 2, 3, 4});
  REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_LAUNCH, 1) == 1);
  kstage_op_t op = 0;
  KS_FAILS(gather_write(s, q, a, 1, src.t, {3, 2, 1, 0}, &op), KSTAGE_DEVICE_ERROR,
           "too many resources requested for launch");
  REQUIRE(kstage_emulated_device_status(0) == 0);  // not sticky
  KS_OK(gather_write(s, q, a, 1, src.t, {3, 2, 1, 0}, &op));
  finish(s, op);
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == std::vector<float>{4, 3, 2, 1});
}

// Defect 8: a failed allocation left the runtime's last error set, so the next launch check
// reported it; and where pools are unsupported nothing could be allocated at all.
TEST_CASE("gpu backend: a failed allocation leaves no error behind", "[device][runtime][memory]") {
  ResetDevice reset;
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  DeviceFloats src(0, {1, 2, 3, 4});
  REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_ALLOC, 1) == 1);
  kstage_write_data_t w = write_data(&src.t);
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_OUT_OF_MEMORY, "emulated device 0: allocation of 16 bytes failed: out of memory");
  // The next call launches a kernel: its launch check must not see the allocation's error.
  KS_OK(gather_write(s, q, a, 1, src.t, {3, 2, 1, 0}, &op));
  finish(s, op);
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == std::vector<float>{4, 3, 2, 1});
}

TEST_CASE("gpu backend: without memory pools, plain allocations freed after their work",
          "[device][runtime][memory]") {
  ResetDevice reset;
  const size_t before = kstage_emulated_live_bytes(0);
  kstage_emulated_set_pools_supported(0, 0);
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    for (uint64_t ordinal = 1; ordinal <= 3; ++ordinal) {
      kstage_op_t op = 0;
      KS_OK(gather_write(s, q, a, ordinal, src.t, {3, 2, 1, 0}, &op));
      finish(s, op);
      s.seal(ordinal);
    }
    kstage_read_desc_t d = kstage_read_desc_init();
    d.target_device = kDev0;
    REQUIRE(read_back(s, q, a, d).values == std::vector<float>{4, 3, 2, 1});
  }
  REQUIRE(kstage_emulated_live_bytes(0) == before);  // every plain allocation freed
}

// Defect 7: a pageable host source with a producer event was copied up with only a stream
// wait, but a runtime may read pageable memory at the call, before the producer ran.
TEST_CASE("gpu backend: a pageable host source is read after its producer's event",
          "[device][runtime][sync]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  std::vector<float> host = {0, 0, 0, 0};
  const uintptr_t producer = kstage_emulated_stream_create(0);
  const uintptr_t done = kstage_emulated_event_create();
  kstage_emulated_stream_hold(producer);
  REQUIRE(kstage_emulated_launch_host_func(
              producer,
              [](void* p) {
                float* f = static_cast<float*>(p);
                for (int i = 0; i < 4; ++i) f[i] = float(i + 1);
              },
              host.data()) == 0);
  kstage_emulated_event_record(done, producer);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    kstage_emulated_stream_release(producer);
  });
  int64_t shape[1] = {4};
  DLTensor t = tensor(host.data(), f32(), 1, shape);
  kstage_op_t op = write_op(s, q, a, 1, t, kstage_device_sync_t{producer, done});
  releaser.join();
  finish(s, op);
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == std::vector<float>{1, 2, 3, 4});
  kstage_emulated_event_destroy(done);
  kstage_emulated_stream_destroy(producer);
}

// Defect 6: copies within the backend said device-to-device, while the backend reads pinned
// host memory in place too.
TEST_CASE("gpu backend: pinned host tensors are staged on the device with the right copy kind",
          "[device][runtime]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  auto* pinned = static_cast<float*>(kstage_emulated_host_malloc(16));
  REQUIRE(pinned != nullptr);
  for (int i = 0; i < 4; ++i) pinned[i] = float(10 + i);
  int64_t shape[1] = {4};
  DLTensor t = tensor(pinned, f32(), 1, shape, nullptr, DLDevice{kDLCUDAHost, 0});
  finish(s, write_op(s, q, a, 1, t));
  s.seal(1);
  REQUIRE(read_back(s, q, a).values == std::vector<float>{10, 11, 12, 13});
  // Pageable memory labelled pinned is refused by name.
  std::vector<float> pageable(4, 1.f);
  t.data = pageable.data();
  kstage_write_data_t w = write_data(&t);
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT, "DLDevice says kDLCUDAHost but the data pointer is not pinned");
  kstage_emulated_host_free(pinned);
}

// Defect 10: zero-row device tensors were refused, their pointer (null or one past an
// allocation) checked though no byte is addressed: a ragged row of no elements, say.
TEST_CASE("gpu backend: an empty device tensor is not checked for its pointer",
          "[device][runtime]") {
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(2);
  kstage_token_t a = s.token("a");
  float host_byte[1] = {0};
  DeviceFloats row(0, {5, 6});
  int64_t none[1] = {0};
  // Row 0 has no elements and a pointer that is not device memory; row 1 is on the device.
  DLTensor rows[2] = {tensor(host_byte + 1, f32(), 1, none, nullptr, kDev0), row.t};
  kstage_write_data_t w = write_data(rows, 2, true);
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  finish(s, op);
  s.seal(1);
  const auto values = s.floats(q, a);
  REQUIRE(values.at(s.prims[0]).empty());
  REQUIRE(values.at(s.prims[1]) == std::vector<float>{5, 6});
  // A tensor that addresses bytes is still checked.
  std::vector<float> host = {1, 2};
  int64_t two[1] = {2};
  DLTensor labelled[2] = {tensor(host.data(), f32(), 1, two, nullptr, kDev0), row.t};
  kstage_write_data_t bad = write_data(labelled, 2, true);
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 2, &bad, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_INVALID_ARGUMENT,
           "DLDevice says kDLExtDev:0 but the data pointer is host memory");
}

// Defect 5: an index upload freed its host copy as soon as the asynchronous copy was
// enqueued; the runtime may read a pageable source until the copy completes. The emulated
// runtime checks that under AddressSanitizer (the asan preset).
TEST_CASE("gpu backend: index uploads keep their host copy until the copy is done",
          "[device][runtime][memory]") {
  CatchViolations violations;
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(256);
  kstage_token_t a = s.token("a");
  std::vector<float> values(256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
  DeviceFloats src(0, values);
  std::vector<uint32_t> reversed(256);
  for (size_t i = 0; i < reversed.size(); ++i) reversed[i] = uint32_t(255 - i);
  KernelDelay slow(5000);  // the upload is still queued when the call returns
  kstage_op_t op = 0;
  KS_OK(gather_write(s, q, a, 1, src.t, reversed, &op));
  finish(s, op);
  kstage_emulated_set_kernel_delay_us(0);
  s.seal(1);
  std::vector<float> want(values.rbegin(), values.rend());
  REQUIRE(read_back(s, q, a).values == want);
  REQUIRE(violations.seen().empty());
}

// Defect 9: every stage made a stream and a Kokkos instance (a device-wide synchronisation on
// CUDA with Kokkos 3.4) and destroyed them after; a device's lanes are now kept for reuse.
TEST_CASE("gpu backend: a new stage reuses the lane an earlier stage gave back",
          "[device][runtime]") {
  auto stream_of = [](DeviceStage& s) {
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    std::vector<float> v = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    DLTensor t = tensor(v.data(), f32(), 1, shape);
    finish(s, write_op(s, q, a, 1, t));
    s.seal(1);
    KernelDelay slow(20000);  // the read's copy up is pending: the group carries the stream
    kstage_read_desc_t d = kstage_read_desc_init();
    d.target_device = kDev0;
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    const uintptr_t stream = g.data.device_sync.stream;
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
    return stream;
  };
  uintptr_t first = 0, second = 0;
  {
    DeviceStage s(kHost);
    first = stream_of(s);
  }
  {
    DeviceStage s(kHost);
    second = stream_of(s);
  }
  REQUIRE(first != 0);
  REQUIRE(second == first);
}

namespace {
std::vector<float> iota_floats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(i);
  return v;
}

// A stage on ordinal 0 holding column "a" (0, 1, 2, ...) and column "b" (-1 everywhere) of n
// prims, sealed at 1. compact_read() reads one of them into a buffer of the read's own, which an
// export alone holds once the group and the read are released.
struct ColumnsAB {
  explicit ColumnsAB(size_t count) : n(count), va(iota_floats(count)), s(kDev0) {
    q = s.query(n);
    a = s.token("a");
    b = s.token("b");
    std::vector<float> a_in = va, vb(n, -1.f);
    int64_t shape[1] = {int64_t(n)};
    DLTensor ta = tensor(a_in.data(), f32(), 1, shape), tb = tensor(vb.data(), f32(), 1, shape);
    finish(s, write_op(s, q, a, 1, ta));
    finish(s, write_op(s, q, b, 1, tb));
    s.seal(1);
  }
  // wait = false: a consumer that orders itself on a stream (the export's consumer stream).
  void compact_read(kstage_token_t attr, kstage_read_t* r, kstage_read_group_t* g,
                    bool wait = true) {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;
    KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, &d, r));
    KS_OK(kstage_fetch_read_next(s.stage, *r, 0, g));
    if (wait) wait_for(g->data.device_sync);
  }
  size_t n;
  std::vector<float> va;  // "a"'s values
  DeviceStage s;
  kstage_query_t q = 0;
  kstage_token_t a = 0, b = 0;
};

}  // namespace

// Defect 4: an export's memory was freed in kstage's stream order only, while PyTorch and CuPy
// call DLPack deleters without synchronising their stream: the next allocation on kstage's
// stream could reuse the memory while the consumer still read it.
TEST_CASE("gpu backend: an export to a consumer stream is released after that stream's work",
          "[device][runtime][dlpack]") {
  ColumnsAB c(64);
  DeviceStage& s = c.s;
  const kstage_query_t q = c.q;
  const kstage_token_t a = c.a;
  auto compact_read = [&](kstage_token_t attr, kstage_read_t* r, kstage_read_group_t* g) {
    c.compact_read(attr, r, g, /*wait=*/false);  // the export orders its consumer stream
  };
  const uintptr_t consumer = kstage_emulated_stream_create(0);
  auto* out = static_cast<float*>(kstage_emulated_host_malloc(64 * sizeof(float)));
  REQUIRE(out != nullptr);
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  compact_read(a, &r, &g);
  DLManagedTensorVersioned* e = nullptr;
  KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, consumer, &e));
  // The consumer reads the export on its stream, held back, and lets it go at once.
  kstage_emulated_stream_hold(consumer);
  REQUIRE(kstage_emulated_memcpy_async(consumer, out, e->dl_tensor.data, 64 * sizeof(float)) == 0);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  e->deleter(e);
  // kstage's next allocations of that size on its stream: they must not get that memory yet.
  kstage_read_t r2 = 0;
  kstage_read_group_t g2{};
  compact_read(c.b, &r2, &g2);
  wait_for(g2.data.device_sync);
  kstage_emulated_stream_release(consumer);
  kstage_emulated_stream_synchronize(consumer);
  REQUIRE(std::vector<float>(out, out + 64) == c.va);
  KS_OK(kstage_release_group(s.stage, g2.handle));
  KS_OK(kstage_release_read(s.stage, r2));
  // A host group takes stream 0 only; a stream the device does not know is refused.
  kstage_read_desc_t host = kstage_read_desc_init();
  host.target_device = kHost;
  kstage_read_t r3 = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &host, &r3));
  kstage_read_group_t g3{};
  KS_OK(kstage_fetch_read_next(s.stage, r3, 0, &g3));
  KS_FAILS(kstage_group_export_on_stream(s.stage, g3.handle, 0, 0, consumer, &e),
           KSTAGE_INVALID_ARGUMENT, "the group's data is host memory");
  DLManagedTensor* legacy = nullptr;
  KS_FAILS(kstage_group_export_legacy_on_stream(s.stage, g3.handle, 0, 0, consumer, &legacy),
           KSTAGE_INVALID_ARGUMENT, "the group's data is host memory");
  REQUIRE(legacy == nullptr);
  KS_OK(kstage_release_group(s.stage, g3.handle));
  KS_OK(kstage_release_read(s.stage, r3));
  compact_read(a, &r, &g);
  KS_FAILS(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, 0xbad0, &e),
           KSTAGE_INVALID_ARGUMENT, "consumer.stream 0xbad0");
  // The legacy form: the same ordering, the same release.
  KS_OK(kstage_group_export_legacy_on_stream(s.stage, g.handle, 0, 0, consumer, &legacy));
  REQUIRE(legacy->dl_tensor.data == g.data.tensors[0].data);
  REQUIRE(legacy->dl_tensor.device.device_type == kDev0.device_type);
  legacy->deleter(legacy);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  kstage_emulated_host_free(out);
  kstage_emulated_stream_destroy(consumer);
}

TEST_CASE("gpu backend: an export to a consumer stream may outlive its stage",
          "[device][runtime][dlpack]") {
  const size_t before = kstage_emulated_live_bytes(0);
  const uintptr_t consumer = kstage_emulated_stream_create(0);
  DLManagedTensorVersioned* e = nullptr;
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(16);
    kstage_token_t a = s.token("a");
    std::vector<float> v(16, 3.f);
    int64_t shape[1] = {16};
    DLTensor t = tensor(v.data(), f32(), 1, shape);
    finish(s, write_op(s, q, a, 1, t));
    s.seal(1);
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, consumer, &e));
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
  }
  // The stage is gone; the consumer still reads the export, then lets it go.
  std::vector<float> out(16, 0.f);
  REQUIRE(kstage_emulated_memcpy_async(consumer, out.data(), e->dl_tensor.data,
                                       sizeof(float) * 16) == 0);
  REQUIRE(out == std::vector<float>(16, 3.f));
  e->deleter(e);  // waits for the consumer's stream (nothing reaps a queue any more): no leak
  REQUIRE(kstage_emulated_live_bytes(0) == before);
  kstage_emulated_stream_destroy(consumer);
}

// Issue #52, defect 3: releases after consumers' streams shared the stage's retire queue, which
// was reaped up to its first unfinished entry: one held consumer held back every release queued
// behind it, and destroying the stage waited for the consumer's stream (a hang while it is held).
namespace {
// Whether `done()` holds within about 5 s, calling `poke()` (work that reaps) in between: no
// wait of these cases can hang.
template <class Poke, class Done>
bool eventually(Poke&& poke, Done&& done) {
  for (int i = 0; i < 5000 && !done(); ++i) {
    poke();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}
// A stage on ordinal 0 with `values` in column "a" of n prims, sealed.
struct ExportStage {
  explicit ExportStage(const std::vector<float>& values) : s(kDev0) {
    q = s.query(values.size());
    a = s.token("a");
    int64_t shape[1] = {int64_t(values.size())};
    std::vector<float> v = values;
    DLTensor t = tensor(v.data(), f32(), 1, shape);
    finish(s, write_op(s, q, a, 1, t));
    s.seal(1);
  }
  // A compact read of "a" exported to `consumer`'s stream; the read and group released.
  DLManagedTensorVersioned* export_to(uintptr_t consumer) {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;  // a buffer of the read's own, held by the export only
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &d, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    DLManagedTensorVersioned* e = nullptr;
    KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, consumer, &e));
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
    return e;
  }
  // A read to the host: it fences the device, which reaps.
  void poke() {
    kstage_read_desc_t host = kstage_read_desc_init();
    host.target_device = kHost;
    (void)read_back(s, q, a, host);
  }
  DeviceStage s;
  kstage_query_t q = 0;
  kstage_token_t a = 0;
};
}  // namespace

TEST_CASE("gpu backend: a held consumer stream holds back no other release",
          "[device][runtime][dlpack]") {
  const std::vector<float> va = iota_floats(1024);
  ExportStage x(va);
  const uintptr_t held = kstage_emulated_stream_create(0);
  const uintptr_t other = kstage_emulated_stream_create(0);
  auto* out = static_cast<float*>(kstage_emulated_host_malloc(va.size() * sizeof(float)));
  REQUIRE(out != nullptr);
  x.poke();
  const size_t base = kstage_emulated_live_bytes(0);
  // The first consumer reads its export on a held stream and lets it go at once.
  DLManagedTensorVersioned* first = x.export_to(held);
  kstage_emulated_stream_hold(held);
  REQUIRE(kstage_emulated_memcpy_async(held, out, first->dl_tensor.data,
                                       va.size() * sizeof(float)) == 0);
  first->deleter(first);
  x.poke();
  const size_t with_first = kstage_emulated_live_bytes(0);
  CHECK(with_first > base);
  // The second consumer's stream is done with its export: released behind the first, it is
  // reaped all the same (before the fix it waited for the held stream).
  DLManagedTensorVersioned* second = x.export_to(other);
  x.poke();
  CHECK(kstage_emulated_live_bytes(0) > with_first);
  second->deleter(second);
  kstage_emulated_stream_synchronize(other);
  CHECK(eventually([&] { x.poke(); }, [&] { return kstage_emulated_live_bytes(0) <= with_first; }));
  // The held one is not: its memory is still in use, and its reader still reads it whole.
  CHECK(kstage_emulated_live_bytes(0) == with_first);
  kstage_emulated_stream_release(held);
  kstage_emulated_stream_synchronize(held);
  CHECK(std::vector<float>(out, out + va.size()) == va);
  CHECK(eventually([&] { x.poke(); }, [&] { return kstage_emulated_live_bytes(0) <= base; }));
  kstage_emulated_host_free(out);
  kstage_emulated_stream_destroy(other);
  kstage_emulated_stream_destroy(held);
}

TEST_CASE("gpu backend: destroying a stage does not wait for a held consumer stream",
          "[device][runtime][dlpack]") {
  const std::vector<float> va = iota_floats(1024);
  const size_t before = kstage_emulated_live_bytes(0);
  const uintptr_t held = kstage_emulated_stream_create(0);
  auto* out = static_cast<float*>(kstage_emulated_host_malloc(va.size() * sizeof(float)));
  REQUIRE(out != nullptr);
  auto x = std::make_unique<ExportStage>(va);
  DLManagedTensorVersioned* e = x->export_to(held);
  kstage_emulated_stream_hold(held);
  REQUIRE(kstage_emulated_memcpy_async(held, out, e->dl_tensor.data, va.size() * sizeof(float)) ==
          0);
  e->deleter(e);
  // Destroyed on a thread of its own, so that a destroy that waits for the held stream fails the
  // case instead of hanging it.
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    x.reset();
    destroyed.store(true);
  });
  const bool returned = eventually([] {}, [&] { return destroyed.load(); });
  // Not freed early: the held reader's memory is still in use.
  const size_t after = kstage_emulated_live_bytes(0);
  kstage_emulated_stream_release(held);
  destroyer.join();
  CHECK(returned);
  CHECK(after > before);
  kstage_emulated_stream_synchronize(held);
  CHECK(std::vector<float>(out, out + va.size()) == va);
  // The orphaned release is reaped by the next reap of any stage once its event completes.
  CHECK(eventually([&] { ExportStage{std::vector<float>(4, 1.f)}.poke(); },
                   [&] { return kstage_emulated_live_bytes(0) <= before; }));
  kstage_emulated_host_free(out);
  kstage_emulated_stream_destroy(held);
}

// Issue #52, defect 8: an Arrow device array's release and a DLPack export for a consumer that
// names no stream (`__dlpack__(stream=-1)`) freed their memory on kstage's stream at once, while
// the consumer may release right after enqueueing its reads on a stream kstage never learns (the
// Arrow interface names none; -1 names none): kstage's next allocation of that size could take
// the memory before the consumer had read it. Such a release now waits for the whole device.
namespace {
// `make(stage, group)` exports a compact read of "a" (then released) and returns the export's
// data and its release. The consumer reads that data on its stream, held, and lets the export go
// at once; a helper lets the stream run a little later. The release must not return before the
// consumer's read has run, and the compact read of "b" after it (same size, kstage's stream)
// must not take the memory from under the consumer.
template <class Make>
void release_while_consumer_reads(Make&& make) {
  ColumnsAB c(1024);
  DeviceStage& s = c.s;
  const size_t n = c.n;
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  c.compact_read(c.a, &r, &g);
  std::pair<const void*, std::function<void()>> exported = make(s, g);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));

  const uintptr_t consumer = kstage_emulated_stream_create(0);
  const uintptr_t read_done = kstage_emulated_event_create();
  auto* out = static_cast<float*>(kstage_emulated_host_malloc(n * sizeof(float)));
  REQUIRE(out != nullptr);
  kstage_emulated_stream_hold(consumer);
  REQUIRE(kstage_emulated_memcpy_async(consumer, out, exported.first, n * sizeof(float)) == 0);
  kstage_emulated_event_record(read_done, consumer);
  // Lets the consumer's stream go after a while, whatever the release does (no case hangs).
  std::thread helper([consumer] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kstage_emulated_stream_release(consumer);
  });
  exported.second();  // the release, right after the consumer enqueued its read
  const bool read_before_release_returned = kstage_emulated_event_query(read_done) == 1;
  kstage_read_t r2 = 0;
  kstage_read_group_t g2{};
  c.compact_read(c.b, &r2, &g2);
  helper.join();
  kstage_emulated_stream_synchronize(consumer);
  CHECK(read_before_release_returned);
  CHECK(std::vector<float>(out, out + n) == c.va);  // never "b"'s -1, nor the allocator's marker
  KS_OK(kstage_release_group(s.stage, g2.handle));
  KS_OK(kstage_release_read(s.stage, r2));
  kstage_emulated_host_free(out);
  kstage_emulated_event_destroy(read_done);
  kstage_emulated_stream_destroy(consumer);
}
}  // namespace

TEST_CASE("gpu backend: an Arrow device array's release waits for the consumer's device work",
          "[device][runtime][arrow]") {
  release_while_consumer_reads([](DeviceStage& s, const kstage_read_group_t& g) {
    auto schema = std::make_shared<ArrowSchema>();
    auto array = std::make_shared<ArrowDeviceArray>();
    KS_OK(kstage_group_export_arrow(s.stage, g.handle, 0, schema.get(), array.get()));
    REQUIRE(array->device_type == ARROW_DEVICE_EXT_DEV);
    REQUIRE(array->array.n_buffers == 2);
    // Zero-copy: the values are the group's own buffer, which the array keeps.
    REQUIRE(array->array.buffers[1] == g.data.tensors[0].data);
    std::function<void()> release = [schema, array] {
      schema->release(schema.get());
      array->array.release(&array->array);
    };
    return std::make_pair(array->array.buffers[1], release);
  });
}

TEST_CASE("gpu backend: a DLPack export for no consumer stream is released after the device",
          "[device][runtime][dlpack]") {
  SECTION("versioned") {
    release_while_consumer_reads([](DeviceStage& s, const kstage_read_group_t& g) {
      DLManagedTensorVersioned* e = nullptr;
      KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, KSTAGE_STREAM_UNORDERED, &e));
      return std::make_pair(static_cast<const void*>(e->dl_tensor.data),
                            std::function<void()>([e] { e->deleter(e); }));
    });
  }
  SECTION("legacy") {
    release_while_consumer_reads([](DeviceStage& s, const kstage_read_group_t& g) {
      DLManagedTensor* e = nullptr;
      KS_OK(kstage_group_export_legacy_on_stream(s.stage, g.handle, 0, 0, KSTAGE_STREAM_UNORDERED,
                                                 &e));
      return std::make_pair(static_cast<const void*>(e->dl_tensor.data),
                            std::function<void()>([e] { e->deleter(e); }));
    });
  }
}

TEST_CASE("gpu backend: KSTAGE_STREAM_UNORDERED is no stream handle, and a host group's 0",
          "[device][runtime][dlpack]") {
  ColumnsAB c(64);
  DeviceStage& s = c.s;
  const kstage_query_t q = c.q;
  const kstage_token_t a = c.a;
  const std::vector<float>& va = c.va;
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  c.compact_read(a, &r, &g, /*wait=*/false);
  // Not taken for a stream to order (the runtime would refuse an unknown handle): the consumer
  // orders itself, after the group's own sync.
  DLManagedTensorVersioned* e = nullptr;
  KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, KSTAGE_STREAM_UNORDERED, &e));
  REQUIRE(e->dl_tensor.data == g.data.tensors[0].data);
  wait_for(g.data.device_sync);
  std::vector<float> out(64, 0.f);
  REQUIRE(kstage_emulated_memcpy(out.data(), e->dl_tensor.data, 64 * sizeof(float)) == 0);
  CHECK(out == va);
  e->deleter(e);  // nothing else on the device: returns at once
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  // A host group takes it as 0: nothing to order, nothing to wait for.
  kstage_read_desc_t host = kstage_read_desc_init();
  host.target_device = kHost;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &host, &r));
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, KSTAGE_STREAM_UNORDERED, &e));
  REQUIRE(e->dl_tensor.device.device_type == kDLCPU);
  CHECK(std::vector<float>(static_cast<float*>(e->dl_tensor.data),
                           static_cast<float*>(e->dl_tensor.data) + 64) == va);
  e->deleter(e);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
}

// Issue #52, defect 2: host index maps and ragged offsets were uploaded from a std::vector
// snapshot, pageable memory: behind unfinished work on the stage's stream CUDA may stage such a
// copy by waiting for the stream, so an indexed write blocked its caller until the stage's queue
// drained. Uploads now go through pinned blocks, recycled once their copies' events complete.
namespace {
// An indexed write of the device tensor `src` (a gather through `index_map`) ordered after
// `sync` (a producer's {stream, event}).
kstage_op_t gather_write_after(DeviceStage& s, kstage_query_t q, kstage_token_t a, uint64_t ordinal,
                               const DLTensor& src, const std::vector<uint32_t>& index_map,
                               kstage_device_sync_t sync) {
  kstage_write_data_t w = write_data(&src);
  w.index_map = index_map.data();
  w.count = index_map.size();
  w.device_sync = sync;
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, a, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  return op;
}
std::vector<uint32_t> reversed_indices(size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint32_t(n - 1 - i);
  return v;
}
}  // namespace

TEST_CASE("gpu backend: index uploads behind queued work are not copies from pageable memory",
          "[device][runtime][memory]") {
  CatchViolations violations;
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(256);
  kstage_token_t a = s.token("a");
  const std::vector<float> values = iota_floats(256);
  DeviceFloats src(0, values);
  const std::vector<uint32_t> reversed = reversed_indices(256);
  const uint64_t waits = kstage_emulated_pageable_waits(0);
  const uint64_t uploads = kstage_emulated_upload_count(0);
  // The stage's stream waits for a held producer: the write's index upload is queued behind it.
  HeldProducer producer(0);
  kstage_emulated_event_record(producer.event, producer.stream);
  const kstage_op_t op =
      gather_write_after(s, q, a, 1, src.t, reversed, {producer.stream, producer.event});
  REQUIRE(kstage_wait(s.stage, op, 0) == KSTAGE_TIMEOUT);
  CHECK(kstage_emulated_upload_count(0) > uploads);   // the index map did go up...
  CHECK(kstage_emulated_pageable_waits(0) == waits);  // ...from pinned memory
  producer.release();
  finish(s, op);
  s.seal(1);
  CHECK(read_back(s, q, a).values == std::vector<float>(values.rbegin(), values.rend()));
  CHECK(violations.seen().empty());
}

TEST_CASE("gpu backend: an upload's pinned block is reused only after its copy has run",
          "[device][runtime][memory]") {
  CatchViolations violations;
  DeviceStage s(kDev0);
  const size_t n = 512;
  kstage_query_t q = s.query(n);
  kstage_token_t a = s.token("a"), b = s.token("b");
  const std::vector<float> values = iota_floats(n);
  DeviceFloats src(0, values);
  std::vector<uint32_t> identity(n);
  for (size_t i = 0; i < n; ++i) identity[i] = uint32_t(i);
  const std::vector<uint32_t> reversed = reversed_indices(n);
  const uint64_t pinned = kstage_emulated_pinned_allocations();
  {
    // Two indexed writes queued behind a held producer: pinned memory is read in stream order,
    // so a block handed to the second upload before the first copy ran would give the first
    // write the second's index map.
    HeldProducer producer(0);
    kstage_emulated_event_record(producer.event, producer.stream);
    const kstage_device_sync_t sync{producer.stream, producer.event};
    const kstage_op_t first = gather_write_after(s, q, a, 1, src.t, reversed, sync);
    const kstage_op_t second = gather_write_after(s, q, b, 1, src.t, identity, sync);
    CHECK(kstage_emulated_pinned_allocations() == pinned + 2);  // one block each: both in flight
    producer.release();
    finish(s, first);
    finish(s, second);
  }
  s.seal(1);
  CHECK(read_back(s, q, a).values == std::vector<float>(values.rbegin(), values.rend()));
  CHECK(read_back(s, q, b).values == values);
  // Their copies done, the blocks come back: later uploads take them, none is allocated.
  for (int i = 0; i < 20; ++i)
    finish(s, gather_write_after(s, q, i % 2 ? a : b, uint64_t(2 + i), src.t,
                                 i % 2 ? identity : reversed, kstage_device_sync_t{0, 0}));
  CHECK(kstage_emulated_pinned_allocations() == pinned + 2);
  s.seal(21);
  CHECK(read_back(s, q, a).values == values);
  CHECK(read_back(s, q, b).values == std::vector<float>(values.rbegin(), values.rend()));
  CHECK(violations.seen().empty());
}

// Defect 2's rest: an upload over the staging cache's largest block (64 MiB: an index map of
// over 16M entries) still went from a pageable snapshot, so such a write behind queued work
// could block its caller until the stage's queue drained. It goes through a pinned block of its
// own now, freed (not cached) once its copy has run; smaller uploads keep their cached blocks.
TEST_CASE("gpu backend: an index upload over 64 MiB behind queued work is staged in pinned memory",
          "[device][runtime][memory]") {
  CatchViolations violations;
  DeviceStage s(kDev0);
  // 16M + 1024 prims (a path range: interning them one by one would take longer than the case).
  const size_t n = (size_t(64) << 20) / sizeof(uint32_t) + 1024;
  kstage_path_t first = 0;
  KS_OK(kstage_intern_path_range(s.stage, "/", 1, "big", 3, 0, n, &first));
  kstage_query_t q = 0;
  KS_OK(kstage_query_range(s.stage, first, 0, 0, 0, &q));
  kstage_query_t few = s.query(4);
  kstage_token_t a = s.token("a"), b = s.token("b");
  DeviceFloats src(0, {10, 20, 30, 40});
  std::vector<uint32_t> big(n);
  for (size_t i = 0; i < n; ++i) big[i] = uint32_t(3 - i % 4);
  const std::vector<uint32_t> small = {0, 1, 2, 3};
  // A small upload first: its block stays cached for the small writes after the big one.
  finish(s, gather_write_after(s, few, b, 1, src.t, small, kstage_device_sync_t{0, 0}));
  const uint64_t waits = kstage_emulated_pageable_waits(0);
  const uint64_t pinned = kstage_emulated_pinned_allocations();
  const size_t pinned_bytes = kstage_emulated_pinned_live_bytes();
  for (uint64_t ordinal : {uint64_t(1), uint64_t(2)}) {
    INFO("big write " << ordinal);
    kstage_op_t op = 0;
    {
      HeldProducer producer(0);
      kstage_emulated_event_record(producer.event, producer.stream);
      op = gather_write_after(s, q, a, ordinal, src.t, big, {producer.stream, producer.event});
      REQUIRE(kstage_wait(s.stage, op, 0) == KSTAGE_TIMEOUT);
      CHECK(kstage_emulated_pageable_waits(0) == waits);                // from pinned memory...
      CHECK(kstage_emulated_pinned_allocations() == pinned + ordinal);  // ...a block of its own
      CHECK(kstage_emulated_pinned_live_bytes() >= pinned_bytes + n * sizeof(uint32_t));
    }
    finish(s, op);
    // Its copy done, the block is freed, not cached; the small writes take the cached block.
    CHECK(eventually(
        [&] {
          finish(s, gather_write_after(s, few, b, 1, src.t, small, {0, 0}));
        },
        [&] { return kstage_emulated_pinned_live_bytes() <= pinned_bytes; }));
    CHECK(kstage_emulated_pinned_allocations() == pinned + ordinal);
  }
  s.seal(2);
  kstage_read_desc_t host = kstage_read_desc_init();
  host.target_device = kHost;
  const std::vector<float> got = read_back(s, q, a, host).values;
  REQUIRE(got.size() == n);
  for (size_t i : {size_t(0), size_t(1), size_t(2), size_t(3), n - 2, n - 1})
    CHECK(got[i] == float(10 * (4 - i % 4)));
  CHECK(violations.seen().empty());
}

TEST_CASE(
    "emulated runtime: a global-mode graph capture refuses the legacy stream and a device "
    "wait",
    "[runtime][capture]") {
  const uintptr_t side = kstage_emulated_stream_create(0);
  const uintptr_t event = kstage_emulated_event_create();
  std::vector<float> host(4, 1.f);
  auto* pinned = static_cast<float*>(kstage_emulated_host_malloc(4 * sizeof(float)));
  REQUIRE(pinned != nullptr);
  // Other streams, the per-thread default stream included, are not touched by a capture.
  kstage_emulated_capture_begin();
  REQUIRE(kstage_emulated_memcpy_async(side, pinned, host.data(), 4 * sizeof(float)) == 0);
  kstage_emulated_event_record(event, 2);
  kstage_emulated_stream_synchronize(side);
  CHECK(kstage_emulated_capture_end() == 0);
  // The legacy stream is: refused, and the capture is invalid.
  kstage_emulated_capture_begin();
  CHECK(kstage_emulated_memcpy_async(1, pinned, host.data(), 4 * sizeof(float)) != 0);
  CHECK(kstage_emulated_capture_end() != 0);
  // Outside a capture it works again; the next capture starts valid.
  CHECK(kstage_emulated_memcpy_async(1, pinned, host.data(), 4 * sizeof(float)) == 0);
  kstage_emulated_stream_synchronize(1);
  kstage_emulated_capture_begin();
  CHECK(kstage_emulated_capture_end() == 0);
  kstage_emulated_host_free(pinned);
  kstage_emulated_event_destroy(event);
  kstage_emulated_stream_destroy(side);
}

// Issue #52, defect 6: an export's deleter recorded its event on the legacy default stream for a
// consumer that named the per-thread default stream (2): legacy-stream work from a deleter that
// runs while the user captures a CUDA graph in global mode (torch.cuda.graph) is refused by CUDA
// and invalidates the capture. The event now goes on the stream the consumer named.
TEST_CASE("gpu backend: a deleter records on the consumer's per-thread stream, also in a capture",
          "[device][runtime][dlpack][capture]") {
  ColumnsAB c(256);
  DeviceStage& s = c.s;
  const size_t n = c.n;
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  c.compact_read(c.a, &r, &g);
  DLManagedTensorVersioned* e = nullptr;
  KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, 2, &e));  // ordered on stream 2
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  auto* out = static_cast<float*>(kstage_emulated_host_malloc(n * sizeof(float)));
  REQUIRE(out != nullptr);
  // The consumer reads on its per-thread stream, held, then lets the export go while a graph is
  // captured elsewhere in the process.
  kstage_emulated_stream_hold(2);
  REQUIRE(kstage_emulated_memcpy_async(2, out, e->dl_tensor.data, n * sizeof(float)) == 0);
  kstage_emulated_capture_begin();
  e->deleter(e);
  const int capture = kstage_emulated_capture_end();
  // Still released after the consumer's read: kstage's next allocation does not take it.
  kstage_read_t r2 = 0;
  kstage_read_group_t g2{};
  c.compact_read(c.b, &r2, &g2);
  kstage_emulated_stream_release(2);
  kstage_emulated_stream_synchronize(2);
  CHECK(capture == 0);  // the capture stayed valid
  CHECK(std::vector<float>(out, out + n) == c.va);
  KS_OK(kstage_release_group(s.stage, g2.handle));
  KS_OK(kstage_release_read(s.stage, r2));
  kstage_emulated_host_free(out);
}
