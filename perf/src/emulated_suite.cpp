// SPDX-License-Identifier: Apache-2.0
// `kstage_perf --device emulated`: the device-map forms of the GPU grid's sparse writes on the
// emulated device (a test build's KSTAGE_EMULATED_DEVICE), to show that the paths run and what
// they cost there. Reported, not held to a target: the emulated device is Kokkos::Serial on a
// worker thread, not a GPU.
//   write_index_map         random index_map write, the map in host memory (checked on the
//                           host, uploaded) + wait + seal
//   write_index_map_device  the same map already in device memory (read in place, checked on
//                           the device, an 8-byte report read back) + wait + seal
//   write_index_map64_device  the same map as int64 entries in device memory (index_map64,
//                           torch's index dtype: read as int64, a 16-byte report) + wait + seal
//   write_mask_50           50% mask write, the mask in host memory + wait + seal
//   write_mask_device       the same mask in device memory (its words read back by the seal)
//   write_index_map_call    the call alone of write_index_map, issued behind a queued dense
//                           write slowed to about 2 ms per copy (kernel delay): the index check
//                           on the host, the map staged in pinned memory, the work enqueued
//   write_index_map_done    the same write from its call until it is done: the queued work,
//                           then its upload and gather (device time); write_index_map_call's
//                           ratio to it shows enqueue << device time, and its note counts the
//                           copies from pageable memory behind queued work (issue #52 defect 2:
//                           where CUDA may block the call until the queue drains; 0 expected)
// Each sample's column is read back and checked against the gather. Then the scene workloads
// of the GPU grid (perf/src/wl_scene.cpp, run_scene_device): world transforms (FULL, and
// INCREMENTAL after 1% of the roots moved) of float64 x 16 columns on the emulated device next
// to a device-to-device copy of the same bytes, each result checked on a sample of prims; and
// the clone workloads (perf/src/wl_clone.cpp, run_clone_device): kstage_clone_range + wait + seal
// of device columns next to the read-and-write route and a device-to-device copy of the bytes the
// clone produces, every copy checked.
// Results: <out>/emulated_results.csv and a table on stdout.
#include "harness.hpp"

#include "context.hpp"
#include "scene.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#if defined(KSTAGE_PERF_EMULATED)
#include "backends/emulated/kstage_emulated.h"
#endif

namespace kperf {

#if !defined(KSTAGE_PERF_EMULATED)

int run_emulated_suite(const Options&) {
  std::fprintf(stderr,
               "kstage_perf: --device emulated: this build has no emulated device "
               "(KSTAGE_EMULATED_DEVICE=ON builds it)\n");
  return 2;
}

#else

namespace {

// Device memory of ordinal 0 holding `bytes` from `host`, freed with the object.
struct DeviceCopy {
  DeviceCopy(const void* host, size_t bytes)
      : p(kstage_emulated_malloc(0, std::max<size_t>(bytes, 1))) {
    if (!p) die("emulated suite: no device memory for %zu bytes", bytes);
    kstage_emulated_memcpy(p, host, bytes);
  }
  ~DeviceCopy() { kstage_emulated_free(p); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  void* p;
};

}  // namespace

int run_emulated_suite(const Options& o) {
  const std::vector<uint64_t> grid = o.rows_explicit ? o.rows
                                     : o.mode == Mode::Smoke
                                         ? std::vector<uint64_t>{10000}
                                         : std::vector<uint64_t>{100000, 1000000};
  const int reps = o.mode == Mode::Smoke ? 1 : o.mode == Mode::Quick ? 5 : 11;
  const int lanes = 3;
  std::printf("emulated device suite: float32 x %d, %d reps (median); not a GPU: no targets\n",
              lanes, reps);
  struct Row {
    Row(std::string n, uint64_t r, double s, std::string v = "", std::string w = "")
        : name(std::move(n)), rows(r), seconds(s), vs(std::move(v)), note(std::move(w)) {}
    std::string name;
    uint64_t rows;
    double seconds;
    std::string vs;  // the row of the same rows compared with (ratio = its time / this one's)
    std::string note;
  };
  std::vector<Row> rows_out;
  for (const uint64_t n : grid) {
    const size_t elems = size_t(n) * lanes, bytes = elems * sizeof(float);
    std::vector<float> h(elems);
    fill_values(h.data(), n, lanes, 1);
    const std::vector<uint32_t> perm = random_permutation(n, 7);
    const std::vector<uint64_t> mask = random_mask(n, 0.5, 9);
    const std::vector<int64_t> perm64(perm.begin(), perm.end());
    DeviceCopy src(h.data(), bytes), idx(perm.data(), n * sizeof(uint32_t)),
        idx64(perm64.data(), n * sizeof(int64_t)),
        dmask(mask.data(), mask.size() * sizeof(uint64_t));

    kstage_config_t config = kstage_config_init();
    config.residency = DLDevice{DLDeviceType(KSTAGE_EMULATED_DEVICE_TYPE), 0};
    kstage_stage_t stage = 0;
    KP_CHECK(kstage_create(&config, &stage));
    kstage_path_t first = 0;
    KP_CHECK(kstage_intern_path_range(stage, "/p", KSTAGE_NUL_TERMINATED, "", KSTAGE_NUL_TERMINATED,
                                      0, n, &first));
    kstage_query_t all = 0;
    KP_CHECK(kstage_query_range(stage, first, 0, 0, 0, &all));
    kstage_token_t attr = 0;
    KP_CHECK(kstage_intern_token(stage, "x", 1, &attr));
    int64_t shape[1] = {int64_t(n)};
    DLTensor t{};
    t.data = src.p;
    t.device = config.residency;
    t.ndim = 1;
    t.dtype = DLDataType{kDLFloat, 32, uint16_t(lanes)};
    t.shape = shape;
    uint64_t ordinal = 0;
    auto write_seal = [&](const kstage_write_data_t& w) {
      kstage_op_t op = 0;
      KP_CHECK(
          kstage_write_attribute(stage, all, attr, ++ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
      KP_CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
      KP_CHECK(kstage_release_op(stage, op));
      KP_CHECK(kstage_advance_write_floor(stage, ordinal, &attr, 1));
    };
    // The column after a gather through `perm` (then, `masked`, the mask's rows written over
    // it), read to the host and checked.
    auto verify = [&](const char* what, bool masked = false) {
      kstage_read_desc_t d = kstage_read_desc_init();
      d.target_device = DLDevice{kDLCPU, 0};
      kstage_read_t rd = 0;
      KP_CHECK(kstage_read_attributes(stage, all, &attr, 1, &d, &rd));
      kstage_read_group_t g{};
      KP_CHECK(kstage_fetch_read_next(stage, rd, 0, &g));
      const float* v = static_cast<const float*>(g.data.tensors[0].data);
      for (uint64_t i = 0; i < n; ++i) {
        const bool selected = masked && (mask[i / 64] >> (i % 64) & 1);
        const size_t row = selected ? size_t(i) : size_t(perm[i]);
        for (int l = 0; l < lanes; ++l)
          if (v[i * lanes + l] != h[row * lanes + l])
            die("emulated suite: %s: row %llu lane %d is %g, expected %g", what,
                (unsigned long long)i, l, double(v[i * lanes + l]), double(h[row * lanes + l]));
      }
      KP_CHECK(kstage_release_group(stage, g.handle));
      KP_CHECK(kstage_release_read(stage, rd));
    };
    kstage_write_data_t host_map = kstage_write_data_init();
    host_map.tensors = &t;
    host_map.tensor_count = 1;
    host_map.index_map = perm.data();
    host_map.count = n;
    rows_out.push_back({"write_index_map", n, median_seconds(reps, [&] { write_seal(host_map); })});
    verify("write_index_map");
    {
      kstage_write_data_t dense = kstage_write_data_init();
      dense.tensors = &t;
      dense.tensor_count = 1;
      std::vector<double> call, done;
      const uint64_t waits = kstage_emulated_pageable_waits(0);
      for (int r = 0; r <= reps; ++r) {  // the first is a warm-up
        kstage_emulated_set_kernel_delay_us(2000);
        kstage_op_t queued = 0, op = 0;
        KP_CHECK(kstage_write_attribute(stage, all, attr, ++ordinal, &dense,
                                        KSTAGE_PRIM_MODE_UPSERT, &queued));
        const auto t0 = Clock::now();
        KP_CHECK(kstage_write_attribute(stage, all, attr, ++ordinal, &host_map,
                                        KSTAGE_PRIM_MODE_UPSERT, &op));
        const double c = seconds_since(t0);
        KP_CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
        const double d = seconds_since(t0);
        kstage_emulated_set_kernel_delay_us(0);
        KP_CHECK(kstage_wait(stage, queued, KSTAGE_TIMEOUT_INFINITE));
        KP_CHECK(kstage_release_op(stage, queued));
        KP_CHECK(kstage_release_op(stage, op));
        KP_CHECK(kstage_advance_write_floor(stage, ordinal, &attr, 1));
        if (r > 0) call.push_back(c), done.push_back(d);
      }
      std::sort(call.begin(), call.end());
      std::sort(done.begin(), done.end());
      const unsigned long long staged_waits = kstage_emulated_pageable_waits(0) - waits;
      rows_out.push_back({"write_index_map_call", n, call[call.size() / 2], "write_index_map_done",
                          "pageable copies behind queued work: " + std::to_string(staged_waits)});
      rows_out.push_back({"write_index_map_done", n, done[done.size() / 2]});
      verify("write_index_map_call");
    }
    kstage_write_data_t device_map = host_map;
    device_map.index_map = static_cast<const uint32_t*>(idx.p);
    device_map.selection_device = config.residency;
    rows_out.push_back(
        {"write_index_map_device", n, median_seconds(reps, [&] { write_seal(device_map); })});
    verify("write_index_map_device");
    kstage_write_data_t device_map64 = host_map;
    device_map64.index_map = nullptr;
    device_map64.index_map64 = static_cast<const int64_t*>(idx64.p);
    device_map64.selection_device = config.residency;
    rows_out.push_back(
        {"write_index_map64_device", n, median_seconds(reps, [&] { write_seal(device_map64); })});
    verify("write_index_map64_device");
    kstage_write_data_t host_mask = kstage_write_data_init();
    host_mask.tensors = &t;
    host_mask.tensor_count = 1;
    host_mask.mask = mask.data();
    host_mask.count = n;
    rows_out.push_back({"write_mask_50", n, median_seconds(reps, [&] { write_seal(host_mask); })});
    verify("write_mask_50", true);
    kstage_write_data_t device_mask = host_mask;
    device_mask.mask = static_cast<const uint64_t*>(dmask.p);
    device_mask.selection_device = config.residency;
    rows_out.push_back(
        {"write_mask_device", n, median_seconds(reps, [&] { write_seal(device_mask); })});
    verify("write_mask_device", true);
    KP_CHECK(kstage_query_release(stage, all));
    KP_CHECK(kstage_destroy(stage));
  }
  // World transforms on device columns (the same workloads as the GPU grid's).
  {
    SceneDeviceOps ops;
    ops.residency = DLDevice{DLDeviceType(KSTAGE_EMULATED_DEVICE_TYPE), 0};
    ops.alloc = [](size_t bytes) {
      void* p = kstage_emulated_malloc(0, std::max<size_t>(bytes, 1));
      if (!p) die("emulated suite: no device memory for %zu bytes", bytes);
      return p;
    };
    ops.release = [](void* p) { kstage_emulated_free(p); };
    auto copy = [](void* dst, const void* src, size_t bytes) {
      if (kstage_emulated_memcpy(dst, src, bytes) != 0) die("emulated suite: memcpy failed");
    };
    ops.upload = copy;
    ops.copy = copy;
    for (const SceneDeviceRow& r : run_scene_device(ops, o, true, reps))
      rows_out.push_back({r.name, r.rows, r.seconds, r.vs, r.note});
    for (const SceneDeviceRow& r : run_clone_device(ops, o, true, reps))
      rows_out.push_back({r.name, r.rows, r.seconds, r.vs, r.note});
  }
  std::filesystem::create_directories(o.out_dir);
  std::ofstream csv(o.out_dir + "/emulated_results.csv");
  csv << "device,workload,rows,seconds,vs,ratio,note\n";
  std::printf("%-32s %10s %12s  %-24s %7s\n", "workload", "rows", "time", "vs", "ratio");
  for (const Row& r : rows_out) {
    double ratio = 0;
    for (const Row& b : rows_out)
      if (!r.vs.empty() && b.name == r.vs && b.rows == r.rows) ratio = b.seconds / r.seconds;
    std::printf("%-32s %10llu %10.3f ms  %-24s %7.2f  %s\n", r.name.c_str(),
                (unsigned long long)r.rows, r.seconds * 1e3, r.vs.c_str(), ratio, r.note.c_str());
    csv << "emulated," << r.name << ',' << r.rows << ',' << r.seconds << ',' << r.vs << ',' << ratio
        << ',' << r.note << '\n';
  }
  std::printf("emulated device suite: %s/emulated_results.csv\n", o.out_dir.c_str());
  return 0;
}

#endif  // KSTAGE_PERF_EMULATED

}  // namespace kperf
