// SPDX-License-Identifier: Apache-2.0
// The "device" channel's messages (kstage.h, "Logging"), each provoked on the emulated device:
// a fault in device work (an ERROR, also when nobody waits for the op), a launch the runtime
// refuses (an ERROR), no stream-ordered memory pools (one WARNING per stage and device), and a
// producer's event waited for on the host instead of the device (an INFO naming the attribute).
#include "emulated/device_support.hpp"
#include "log_support.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace kstage_test;
using namespace kstage_device_test;

namespace {

std::string describe(const std::vector<LogEntry>& entries) {
  std::string s;
  for (const LogEntry& e : entries)
    s += "[" + std::to_string(e.severity) + "] " + e.channel + ": " + e.message + "\n";
  return s;
}

}  // namespace

TEST_CASE("a device fault is an ERROR on the device channel, also with no wait for its op",
          "[log][device][fault]") {
  ResetDevice reset;
  LogRecorder r;
  Recording on(r, KSTAGE_LOG_OFF, "device=debug");
  KS_OK(on.status);
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_COPY, 1) == 1);
    KernelDelay slow(20000);  // the fault happens after the call has returned
    kstage_op_t op = write_op(s, q, a, 1, src.t);
    KS_OK(kstage_release_op(s.stage, op));  // nobody waits for it
    // The second write is enqueued before the fault happens; the stage finds out when it is
    // destroyed, which no call reports.
    kstage_op_t next = 0;
    kstage_write_data_t w = write_data(&src.t);
    (void)kstage_write_attribute(s.stage, q, a, 2, &w, KSTAGE_PRIM_MODE_UPSERT, &next);
  }
  KS_OK(kstage_flush_log());
  INFO(describe(r.entries()));
  // Said where kstage first sees it: the failed op's completion ("device work failed"), the
  // next enqueue the faulty context refuses, or the stage's destruction draining its stream.
  const std::vector<LogEntry> faults = r.find("device", "emulated device 0: ");
  REQUIRE(faults.size() >= 1);
  REQUIRE(faults[0].severity == KSTAGE_LOG_ERROR);
  REQUIRE(faults[0].message.find("an illegal memory access was encountered") != std::string::npos);
}

TEST_CASE("a failed op's device fault is said once, naming the device and the error",
          "[log][device][fault]") {
  ResetDevice reset;
  LogRecorder r;
  Recording on(r, KSTAGE_LOG_ERROR);
  KS_OK(on.status);
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_COPY, 1) == 1);
    KernelDelay slow(20000);
    kstage_op_t op = write_op(s, q, a, 1, src.t);
    REQUIRE(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_DEVICE_ERROR);
    REQUIRE(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_DEVICE_ERROR);
    KS_OK(kstage_release_op(s.stage, op));
  }
  KS_OK(kstage_flush_log());
  INFO(describe(r.entries()));
  const std::vector<LogEntry> faults = r.find("device", "emulated device 0: device work failed");
  REQUIRE(faults.size() == 1);
  REQUIRE(faults[0].severity == KSTAGE_LOG_ERROR);
  REQUIRE(faults[0].message.find("an illegal memory access was encountered") != std::string::npos);
  REQUIRE(faults[0].message.find("KSTAGE_DEVICE_ERROR") != std::string::npos);
}

TEST_CASE("a launch the runtime refuses is an ERROR on the device channel",
          "[log][device][fault]") {
  ResetDevice reset;
  LogRecorder r;
  Recording on(r, KSTAGE_LOG_ERROR);
  KS_OK(on.status);
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("a");
  DeviceFloats src(0, {1, 2, 3, 4});
  REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_LAUNCH, 1) == 1);
  std::vector<uint32_t> reversed = {3, 2, 1, 0};
  kstage_write_data_t w = write_data(&src.t);
  w.index_map = reversed.data();
  w.count = reversed.size();
  kstage_op_t op = 0;
  KS_FAILS(kstage_write_attribute(s.stage, q, a, 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op),
           KSTAGE_DEVICE_ERROR, "too many resources requested for launch");
  KS_OK(kstage_flush_log());
  INFO(describe(r.entries()));
  const std::vector<LogEntry> refused = r.find("device", "emulated device 0: ");
  REQUIRE(refused.size() == 1);
  REQUIRE(refused[0].severity == KSTAGE_LOG_ERROR);
  REQUIRE(refused[0].message.find("too many resources requested for launch") != std::string::npos);
}

TEST_CASE("without memory pools the fallback to plain allocations is one WARNING",
          "[log][device][memory]") {
  ResetDevice reset;
  LogRecorder r;
  Recording on(r, KSTAGE_LOG_WARNING);
  KS_OK(on.status);
  kstage_emulated_set_pools_supported(0, 0);
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    for (uint64_t ordinal = 1; ordinal <= 3; ++ordinal) {
      finish(s, write_op(s, q, a, ordinal, src.t));
      s.seal(ordinal);
    }
  }
  KS_OK(kstage_flush_log());
  INFO(describe(r.entries()));
  const std::vector<LogEntry> fallback =
      r.find("device", "emulated device 0: the runtime has no stream-ordered memory pools");
  REQUIRE(fallback.size() == 1);
  REQUIRE(fallback[0].severity == KSTAGE_LOG_WARNING);
  REQUIRE(fallback[0].message.find("plain allocations") != std::string::npos);
}

TEST_CASE("a producer's event waited for on the host, not the device, is an INFO",
          "[log][device][sync]") {
  LogRecorder r;
  Recording on(r, KSTAGE_LOG_OFF, "device=info");
  KS_OK(on.status);
  DeviceStage s(kDev0);
  kstage_query_t q = s.query(4);
  kstage_token_t a = s.token("velocity");
  std::vector<float> host = {1, 2, 3, 4};  // pageable: the runtime reads it at the call
  HeldProducer producer(0);
  kstage_emulated_event_record(producer.event, producer.stream);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    producer.release();
  });
  int64_t shape[1] = {4};
  DLTensor t = tensor(host.data(), f32(), 1, shape);
  kstage_op_t op = write_op(s, q, a, 1, t, kstage_device_sync_t{producer.stream, producer.event});
  releaser.join();
  finish(s, op);
  // The same write without a producer: the device path, nothing said.
  finish(s, write_op(s, q, a, 2, t));
  KS_OK(kstage_flush_log());
  INFO(describe(r.entries()));
  const std::vector<LogEntry> waits = r.find("device", "write of 'velocity' to ");
  REQUIRE(waits.size() == 1);
  REQUIRE(waits[0].severity == KSTAGE_LOG_INFO);
  REQUIRE(waits[0].message.find("device 0: the host waits for the producer's event") !=
          std::string::npos);
  REQUIRE(waits[0].message.find("pageable host memory") != std::string::npos);
}

TEST_CASE("device messages are not formatted or delivered when the channel is off",
          "[log][device][fault]") {
  ResetDevice reset;
  LogRecorder r;
  Recording on(r, KSTAGE_LOG_DEBUG, "device=off");
  KS_OK(on.status);
  {
    DeviceStage s(kDev0);
    kstage_query_t q = s.query(4);
    kstage_token_t a = s.token("a");
    DeviceFloats src(0, {1, 2, 3, 4});
    REQUIRE(kstage_emulated_inject_fault(0, KSTAGE_EMULATED_FAULT_COPY, 1) == 1);
    KernelDelay slow(20000);
    kstage_op_t op = write_op(s, q, a, 1, src.t);
    REQUIRE(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_DEVICE_ERROR);
  }
  KS_OK(kstage_flush_log());
  REQUIRE(r.find("device").empty());
  REQUIRE(r.find("stage").size() == 2);  // created, destroyed: the other channels still speak
}
