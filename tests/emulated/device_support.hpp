// SPDX-License-Identifier: Apache-2.0
// What the emulated-device test programs share: stages on a device, device
// memory holding values, reading a group back, slow kernels, and the device-sync
// scenario (an op ordered after a held producer).
#pragma once

#include "support.hpp"

#include "backends/emulated/kstage_emulated.h"

#include <cstddef>
#include <cstdint>
#include <utility>

namespace kstage_device_test {
using namespace kstage_test;

inline constexpr DLDevice kDev0 = {DLDeviceType(KSTAGE_EMULATED_DEVICE_TYPE), 0};
inline constexpr DLDevice kDev1 = {DLDeviceType(KSTAGE_EMULATED_DEVICE_TYPE), 1};
inline constexpr DLDevice kHost = {kDLCPU, 0};

// A stage whose new columns live on `residency` ({0, 0}: where the data
// lives), and the prims of its last query(n).
struct DeviceStage : Stage {
  explicit DeviceStage(DLDevice residency) : Stage(host_execution(), &residency) {}
  DeviceStage(DLDevice residency, kstage_host_execution_t exec) : Stage(exec, &residency) {}
  kstage_query_t query(size_t n) {
    prims = paths("/p", n);
    return Stage::query(prims);
  }
  std::vector<kstage_path_t> prims;
};

// Device memory holding `values`, freed with the object.
struct DeviceFloats {
  DeviceFloats(int32_t ordinal, const std::vector<float>& values) : n(values.size()) {
    p = static_cast<float*>(kstage_emulated_malloc(ordinal, n * sizeof(float)));
    REQUIRE(p != nullptr);
    kstage_emulated_memcpy(p, values.data(), n * sizeof(float));
    shape[0] = int64_t(n);
    t = tensor(p, f32(), 1, shape, nullptr, DLDevice{kDev0.device_type, ordinal});
  }
  ~DeviceFloats() { kstage_emulated_free(p); }
  std::vector<float> get() const {
    std::vector<float> out(n);
    kstage_emulated_memcpy(out.data(), p, n * sizeof(float));
    return out;
  }
  float* p = nullptr;
  size_t n;
  int64_t shape[1] = {0};
  DLTensor t{};
};

// One fixed-size group of `a`, read with `desc`, copied to the host after its
// event; also reports the group's device and sync.
struct ReadBack {
  std::vector<float> values;  // in prim order
  DLDevice device{};
  kstage_device_sync_t sync{};
};
inline ReadBack read_back(DeviceStage& s, kstage_query_t q, kstage_token_t a,
                          kstage_read_desc_t desc = kstage_read_desc_init()) {
  kstage_read_t r = 0;
  KS_OK(kstage_read_attributes(s.stage, q, &a, 1, &desc, &r));
  kstage_read_group_t g{};
  KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
  ReadBack out;
  out.device = g.data.tensors[0].device;
  out.sync = g.data.device_sync;
  const size_t rows = size_t(g.data.tensors[0].shape[0]) * g.dtype.lanes;
  const std::vector<float> all = group_floats(g, 0, rows);
  for (uint64_t i = 0; i < g.prim_count; ++i)
    out.values.push_back(all[g.data.index_map ? g.data.index_map[i] : i]);
  KS_OK(kstage_release_group(s.stage, g.handle));
  KS_OK(kstage_release_read(s.stage, r));
  return out;
}

// Resets both emulated ordinals when a case ends: no injected fault or missing pool leaks into the
// next case.
struct ResetDevice {
  ~ResetDevice() {
    kstage_emulated_device_reset(0);
    kstage_emulated_device_reset(1);
  }
};

// Restores the default kernel delay when a case ends, whatever happens.
struct KernelDelay {
  explicit KernelDelay(uint32_t us) { kstage_emulated_set_kernel_delay_us(us); }
  ~KernelDelay() { kstage_emulated_set_kernel_delay_us(0); }
};

// A producer's stream on `ordinal`, held back from the start until release() -- or the end of
// its scope, so that a failed check leaves no stage waiting on it -- and an event of its own.
struct HeldProducer {
  explicit HeldProducer(int32_t ordinal)
      : stream(kstage_emulated_stream_create(ordinal)), event(kstage_emulated_event_create()) {
    kstage_emulated_stream_hold(stream);
  }
  ~HeldProducer() {
    release();
    kstage_emulated_event_destroy(event);
    kstage_emulated_stream_destroy(stream);
  }
  HeldProducer(const HeldProducer&) = delete;
  HeldProducer& operator=(const HeldProducer&) = delete;
  void release() {
    if (held) kstage_emulated_stream_release(stream);
    held = false;
  }
  uintptr_t stream, event;
  bool held = true;
};

// The device-sync scenario: a producer on a held stream of `ordinal` copies `bytes` from
// `values` to the device memory `dst` and records its event; `submit(sync)` hands the stage an
// op ordered after it (sync = {stream, event}) and returns the op. While the producer is held
// the op is not done -- the stage waits on the device, the call does not block the host --
// and `while_held(op, sync)` may check more; released, the op is finished. The caller then
// checks that what it reads back is the producer's values, never what `dst` held before.
template <class Submit, class WhileHeld>
void finish_after_held_producer(Stage& s, int32_t ordinal, void* dst, const void* values,
                                size_t bytes, Submit&& submit, WhileHeld&& while_held) {
  HeldProducer producer(ordinal);
  REQUIRE(kstage_emulated_memcpy_async(producer.stream, dst, values, bytes) == 0);
  kstage_emulated_event_record(producer.event, producer.stream);
  const kstage_device_sync_t sync{producer.stream, producer.event};
  const kstage_op_t op = submit(sync);
  REQUIRE(kstage_wait(s.stage, op, 0) == KSTAGE_TIMEOUT);
  while_held(op, sync);
  producer.release();
  finish(s, op);
}
template <class Submit>
void finish_after_held_producer(Stage& s, int32_t ordinal, void* dst, const void* values,
                                size_t bytes, Submit&& submit) {
  finish_after_held_producer(s, ordinal, dst, values, bytes, std::forward<Submit>(submit),
                             [](kstage_op_t, kstage_device_sync_t) {});
}

}  // namespace kstage_device_test
