// SPDX-License-Identifier: Apache-2.0
// Device types and kstage_device_sync_t where every column lives on the
// host: pinned host memory (kDLCUDAHost, kDLROCMHost) is host memory, and
// host work takes {0, 0} and gives {0, 0} -- any other sync is rejected,
// naming the field, and leaves the stage as it was (docs/design.md,
// "Synchronisation").
#include "support.hpp"

using namespace kstage_test;

namespace {

constexpr kstage_device_sync_t kNoSync{0, 0};
const kstage_device_sync_t kSyncs[] = {{0, 0x7}, {1, 0}, {0xdead0, 0xbeef0}};

struct Fixture : SealedColumn {
  Fixture() : SealedColumn("/dev") {}
  std::string state() { return s.fingerprint(q, {x}); }
};

std::string hex(uintptr_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", (unsigned long long)v);
  return b;
}

}  // namespace

TEST_CASE("pinned host memory is written as host memory, to new and existing columns",
          "[devices][write]") {
  Stage s(host_execution());
  auto prims = s.paths("/pinned", 4);
  kstage_query_t q = s.query(prims);
  for (DLDeviceType type : {kDLCUDAHost, kDLROCMHost}) {
    INFO("device type " << type);
    kstage_token_t a = s.token(type == kDLCUDAHost ? "cuda_host" : "rocm_host");
    const uint64_t base = type == kDLCUDAHost ? 10 : 20;  // seals move every floor
    std::vector<float> first = {1, 2, 3, 4}, second = {5, 6, 7, 8};
    int64_t shape[1] = {4};
    DLTensor t = tensor(first.data(), f32(), 1, shape, nullptr, DLDevice{type, 0});
    KS_OK(s.write(q, a, base, write_data(&t)));  // creates the column
    s.seal(base);
    REQUIRE(s.floats(q, a) ==
            std::map<kstage_path_t, std::vector<float>>{
                {prims[0], {1}}, {prims[1], {2}}, {prims[2], {3}}, {prims[3], {4}}});
    t.data = second.data();
    KS_OK(s.write(q, a, base + 1, write_data(&t)));  // into the existing host column
    s.seal(base + 1);
    REQUIRE(s.floats(q, a) ==
            std::map<kstage_path_t, std::vector<float>>{
                {prims[0], {5}}, {prims[1], {6}}, {prims[2], {7}}, {prims[3], {8}}});
    // Reads of a host column are on the CPU.
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(s.stage, q, &a, 1, nullptr, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(s.stage, r, 0, &g));
    REQUIRE(g.data.tensors[0].device.device_type == kDLCPU);
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
  }
}

TEST_CASE("a write of host data into a host column takes device_sync {0, 0}",
          "[devices][sync][write][errors]") {
  Fixture f;
  const std::string before = f.state();
  for (const kstage_device_sync_t& sync : kSyncs) {
    INFO("sync " << sync.stream << ", " << sync.event);
    kstage_write_data_t w = write_data(&f.t);
    w.device_sync = sync;
    KS_FAILS(f.s.write(f.q, f.x, 2, w), KSTAGE_INVALID_ARGUMENT,
             "device_sync is {stream " + hex(sync.stream) + ", event " + hex(sync.event) + "}");
    // A new column too, and pinned host memory too.
    DLTensor pinned = f.t;
    pinned.device = DLDevice{kDLCUDAHost, 0};
    w.tensors = &pinned;
    KS_FAILS(f.s.write(f.q, f.s.token("fresh"), 2, w), KSTAGE_INVALID_ARGUMENT,
             "host work takes {0, 0}");
    // In a batch, the message names the descriptor.
    kstage_write_data_t batch[2] = {write_data(&f.t), write_data(&f.t)};
    batch[1].device_sync = sync;
    const kstage_token_t attrs[2] = {f.x, f.s.token("y")};
    kstage_op_t op = 0;
    KS_FAILS(
        kstage_write_attributes(f.s.stage, f.q, attrs, batch, 2, 2, KSTAGE_PRIM_MODE_UPSERT, &op),
        KSTAGE_INVALID_ARGUMENT, "data[1] ('y'): device_sync is");
  }
  REQUIRE(f.state() == before);
  kstage_write_data_t w = write_data(&f.t);
  w.device_sync = kNoSync;
  KS_OK(f.s.write(f.q, f.x, 2, w));
}

TEST_CASE("a read of host columns takes device_sync {0, 0} and gives {0, 0}",
          "[devices][sync][read][errors]") {
  Fixture f;
  for (bool compact : {false, true}) {
    INFO("compact " << compact);
    for (const kstage_device_sync_t& sync : kSyncs) {
      kstage_read_desc_t d = kstage_read_desc_init();
      d.compact = compact;
      d.device_sync = sync;
      kstage_read_t r = 0;
      KS_FAILS(kstage_read_attributes(f.s.stage, f.q, &f.x, 1, &d, &r), KSTAGE_INVALID_ARGUMENT,
               "desc.device_sync is {stream " + hex(sync.stream) + ", event " + hex(sync.event) +
                   "} but the data is host memory");
      REQUIRE(r == 0);
      d.target_device = DLDevice{kDLCPU, 0};  // the host asked for explicitly: the same
      KS_FAILS(kstage_read_attributes(f.s.stage, f.q, &f.x, 1, &d, &r), KSTAGE_INVALID_ARGUMENT,
               "desc.device_sync");
    }
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = compact;
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(f.s.stage, f.q, &f.x, 1, &d, &r));
    kstage_read_group_t g{};
    KS_OK(kstage_fetch_read_next(f.s.stage, r, 0, &g));
    REQUIRE(g.data.device_sync.stream == 0);
    REQUIRE(g.data.device_sync.event == 0);
    // A consumer of host data has nothing to wait for: {0, 0} only, as everywhere on the host.
    KS_OK(kstage_group_sync(f.s.stage, g.handle, kNoSync));
    for (const kstage_device_sync_t& sync : kSyncs)
      KS_FAILS(kstage_group_sync(f.s.stage, g.handle, sync), KSTAGE_INVALID_ARGUMENT,
               "consumer is {stream " + hex(sync.stream) + ", event " + hex(sync.event) +
                   "} but the group's data is host memory");
    KS_OK(kstage_release_group(f.s.stage, g.handle));
    KS_FAILS(kstage_group_sync(f.s.stage, g.handle, kNoSync), KSTAGE_INVALID_HANDLE, "group");
    KS_OK(kstage_release_read(f.s.stage, r));
  }
}

TEST_CASE("unmapping host buffers takes done_sync {0, 0}; a rejected unmap keeps the map",
          "[devices][sync][map][errors]") {
  Fixture f;
  const std::string before = f.state();
  kstage_map_desc_t d = kstage_map_desc_init();
  d.attribute = f.x;
  d.dtype = f32();
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(f.s.stage, f.q, &d, 2, nullptr, 0, &m));
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(f.s.stage, m, 0, &g));
  REQUIRE(g.data.device_sync.stream == 0);  // host buffers: nothing to wait for
  REQUIRE(g.data.device_sync.event == 0);
  float* rows = static_cast<float*>(g.data.tensors[0].data);
  for (uint64_t i = 0; i < g.prim_count; ++i)
    rows[g.data.index_map ? g.data.index_map[i] : i] = 40.f + float(i);
  kstage_op_t op = 0;
  for (const kstage_device_sync_t& sync : kSyncs) {
    KS_FAILS(kstage_unmap_group(f.s.stage, m, g.handle, sync, &op), KSTAGE_INVALID_ARGUMENT,
             "done_sync is {stream " + hex(sync.stream) + ", event " + hex(sync.event) +
                 "} but the data is host memory");
    KS_FAILS(kstage_unmap_attribute(f.s.stage, m, sync, &op), KSTAGE_INVALID_ARGUMENT, "done_sync");
  }
  REQUIRE(op == 0);
  REQUIRE(f.state() == before);  // nothing was committed
  // The group is still mapped, and the map open: {0, 0} commits it.
  KS_OK(kstage_unmap_attribute(f.s.stage, m, kNoSync, &op));
  KS_OK(kstage_release_op(f.s.stage, op));
  f.s.seal(2);
  REQUIRE(f.s.floats(f.q, f.x) == std::map<kstage_path_t, std::vector<float>>{
                                      {f.prims[0], {40}}, {f.prims[1], {41}}, {f.prims[2], {42}}});
}

TEST_CASE("the host is device 0: other CPU ordinals are refused, naming the device",
          "[devices][residency]") {
  kstage_config_t c = kstage_config_init();
  c.residency = DLDevice{kDLCPU, 1};
  kstage_stage_t st = 0;
  KS_FAILS(kstage_create(&c, &st), KSTAGE_INVALID_ARGUMENT,
           "device kDLCPU:1: the host is device 0");
  REQUIRE(st == 0);
  Fixture f;
  const std::string before = f.state();
  kstage_read_desc_t d = kstage_read_desc_init();
  d.target_device = DLDevice{kDLCPU, 2};
  kstage_read_t r = 0;
  KS_FAILS(kstage_read_attributes(f.s.stage, f.q, &f.x, 1, &d, &r), KSTAGE_INVALID_ARGUMENT,
           "device kDLCPU:2: the host is device 0");
  d.target_device = DLDevice{kDLCPU, 0};  // the host, named
  KS_OK(kstage_read_attributes(f.s.stage, f.q, &f.x, 1, &d, &r));
  KS_OK(kstage_release_read(f.s.stage, r));
  REQUIRE(f.state() == before);
}
