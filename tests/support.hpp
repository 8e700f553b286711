// SPDX-License-Identifier: Apache-2.0
// Test support: a stage per host execution space, tensor builders, and a
// read-only fingerprint of the sealed state so a test can check that a
// rejected call left the stage exactly as it was.
#pragma once

#include <kstage/kstage.h>
// A program always on the emulated device (tests/emulated) is a program of a build that has it.
#if defined(KSTAGE_TEST_ON_EMULATED_DEVICE) && !defined(KSTAGE_TEST_EMULATED_DEVICE)
#define KSTAGE_TEST_EMULATED_DEVICE 1
#endif
#if defined(KSTAGE_TEST_ON_CUDA_DEVICE)
#include <cuda_runtime_api.h>
#elif defined(KSTAGE_TEST_EMULATED_DEVICE)
#include "backends/emulated/kstage_emulated.h"
#endif

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace kstage_test {

// The residency under test, in the spirit of Kokkos' per-backend test
// category files: columns on the host, on the emulated device, or on a CUDA
// GPU. The stage's config.residency puts every new column there, host tensors
// are copied in, and group data is copied back out through the device (after
// the group's event) before the test looks at it.
//
// - A build with the emulated device (KSTAGE_TEST_EMULATED_DEVICE): one
//   program per concept, on the host -- or on emulated device N when it runs
//   with KSTAGE_TEST_EMULATED_ORDINAL=N (0 or 1). The emulated device is a
//   runtime table of the GPU backend, so nothing needs a second build: ctest
//   registers each program once on the host ("<concept>: ") and once per
//   emulated ordinal ("emulated <concept>@N: ", kstage_emulated_discover_tests).
//   tests/emulated programs (KSTAGE_TEST_ON_EMULATED_DEVICE) are always on the
//   emulated device, at ordinal 0 unless the variable says 1.
// - A CUDA build: kstage_test_<concept>_cuda (KSTAGE_TEST_ON_CUDA_DEVICE), on
//   CUDA device 0, run by scripts/gpu-check.sh.
#if defined(KSTAGE_TEST_EMULATED_DEVICE)
// The emulated ordinal under test, or -1 for the host.
inline int32_t test_emulated_ordinal() {
  static const int32_t ordinal = [] {
    const char* e = std::getenv("KSTAGE_TEST_EMULATED_ORDINAL");
    if (e == nullptr || *e == 0) {
#if defined(KSTAGE_TEST_ON_EMULATED_DEVICE)
      return 0;
#else
      return -1;
#endif
    }
    return std::atoi(e) == 1 ? 1 : 0;
  }();
  return ordinal;
}
inline const bool kOnDevice = test_emulated_ordinal() >= 0;
inline const DLDevice kResidency =
    kOnDevice ? DLDevice{DLDeviceType(KSTAGE_EMULATED_DEVICE_TYPE), test_emulated_ordinal()}
              : DLDevice{kDLCPU, 0};
inline bool is_test_device(DLDevice d) { return d.device_type == KSTAGE_EMULATED_DEVICE_TYPE; }
inline void device_memcpy(void* dst, const void* src, size_t bytes) {
  kstage_emulated_memcpy(dst, src, bytes);
}
#elif defined(KSTAGE_TEST_ON_CUDA_DEVICE)
constexpr bool kOnDevice = true;
constexpr DLDevice kResidency = {kDLCUDA, 0};
inline bool is_test_device(DLDevice d) {
  return d.device_type == kDLCUDA || d.device_type == kDLCUDAManaged;
}
inline void device_memcpy(void* dst, const void* src, size_t bytes) {
  REQUIRE(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) == cudaSuccess);
}
#else
constexpr bool kOnDevice = false;
constexpr DLDevice kResidency = {kDLCPU, 0};
#endif

// `bytes` bytes at `p` on `device`, brought to the host (a device copy for
// device memory: the test never dereferences it).
inline std::vector<unsigned char> host_copy(const void* p, size_t bytes, DLDevice device) {
  std::vector<unsigned char> out(bytes);
  if (bytes == 0) return out;
#if defined(KSTAGE_TEST_EMULATED_DEVICE) || defined(KSTAGE_TEST_ON_CUDA_DEVICE)
  if (is_test_device(device)) {
    device_memcpy(out.data(), p, bytes);
    return out;
  }
#endif
  (void)device;
  std::memcpy(out.data(), p, bytes);
  return out;
}

// Writes `bytes` from host memory into `dst` on `device` (a device copy for
// device memory, as a producer kernel would).
inline void host_write(void* dst, const void* src, size_t bytes, DLDevice device) {
  if (bytes == 0) return;
#if defined(KSTAGE_TEST_EMULATED_DEVICE) || defined(KSTAGE_TEST_ON_CUDA_DEVICE)
  if (is_test_device(device)) {
    device_memcpy(dst, src, bytes);
    return;
  }
#endif
  (void)device;
  std::memcpy(dst, src, bytes);
}

// Waits for a group's event (device data), as a consumer must.
inline void wait_for(const kstage_device_sync_t& sync) {
#if defined(KSTAGE_TEST_EMULATED_DEVICE)
  if (sync.event) kstage_emulated_event_synchronize(sync.event);  // host groups carry none
#elif defined(KSTAGE_TEST_ON_CUDA_DEVICE)
  if (sync.event) cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(sync.event));
#else
  (void)sync;  // host data: {0, 0}, checked in test_devices (no REQUIRE: threads call this)
#endif
}

// The first `n` floats of a tensor (host or device memory), on the host.
inline std::vector<float> tensor_floats(const DLTensor& t, size_t n) {
  std::vector<float> f(n);
  if (n == 0) return f;
  const auto bytes =
      host_copy(static_cast<const char*>(t.data) + t.byte_offset, n * sizeof(float), t.device);
  std::memcpy(f.data(), bytes.data(), bytes.size());
  return f;
}

// The first `n` floats of tensor `i` of a read group, on the host.
inline std::vector<float> group_floats(const kstage_read_group_t& g, size_t i, size_t n) {
  wait_for(g.data.device_sync);
  return tensor_floats(g.data.tensors[i], n);
}

// Every engine test runs once per host execution space: Serial and the parallel one, where
// the build's Kokkos has one (without, PARALLEL is Serial, and one run is the same as two).
inline kstage_host_execution_t host_execution() {
#if defined(KSTAGE_TEST_SERIAL_HOST_ONLY)
  return KSTAGE_HOST_EXECUTION_SERIAL;
#else
  return GENERATE(as<kstage_host_execution_t>{}, KSTAGE_HOST_EXECUTION_SERIAL,
                  KSTAGE_HOST_EXECUTION_PARALLEL);
#endif
}

#define KS_OK(expr)                                                                    \
  do {                                                                                 \
    kstage_status_t _st = (expr);                                                      \
    INFO(#expr << " -> " << kstage_status_string(_st) << ": " << kstage_last_error()); \
    REQUIRE(_st == KSTAGE_OK);                                                         \
  } while (0)

// Checks the status and that the thread's last error mentions `needle`.
#define KS_FAILS(expr, code, needle)                                                   \
  do {                                                                                 \
    kstage_status_t _st = (expr);                                                      \
    INFO(#expr << " -> " << kstage_status_string(_st) << ": " << kstage_last_error()); \
    REQUIRE(_st == (code));                                                            \
    REQUIRE(std::string(kstage_last_error()).find(needle) != std::string::npos);       \
  } while (0)

inline DLTensor tensor(void* data, DLDataType dtype, int ndim, int64_t* shape,
                       int64_t* strides = nullptr, DLDevice device = {kDLCPU, 0}) {
  DLTensor t{};
  t.data = data;
  t.device = device;
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = 0;
  return t;
}

constexpr DLDataType f32(uint16_t lanes = 1) { return DLDataType{kDLFloat, 32, lanes}; }
constexpr DLDataType f64(uint16_t lanes = 1) { return DLDataType{kDLFloat, 64, lanes}; }
constexpr DLDataType i32(uint16_t lanes = 1) { return DLDataType{kDLInt, 32, lanes}; }
constexpr DLDataType u8(uint16_t lanes = 1) { return DLDataType{kDLUInt, 8, lanes}; }
constexpr DLDataType u64(uint16_t lanes = 1) { return DLDataType{kDLUInt, 64, lanes}; }

inline kstage_write_data_t write_data(const DLTensor* tensors, uint64_t n = 1,
                                      bool is_array = false) {
  kstage_write_data_t w = kstage_write_data_init();
  w.tensors = tensors;
  w.tensor_count = n;
  w.is_array = is_array;
  return w;
}

// One read group, copied out so the test can release it at once.
struct Group {
  kstage_token_t attribute = 0;
  std::vector<kstage_path_t> prims;
  uint64_t ordinal = 0;
  bool is_delete = false, is_array = false;
  kstage_semantic_t semantic = 0;
  DLDataType dtype{};
  // Per prim, in group order: the prim's value bytes.
  std::vector<std::vector<unsigned char>> values;
  bool had_index_map = false;
};

inline std::vector<float> as_floats(const std::vector<unsigned char>& bytes) {
  std::vector<float> f(bytes.size() / sizeof(float));
  if (!bytes.empty()) std::memcpy(f.data(), bytes.data(), bytes.size());
  return f;
}

class Stage {
 public:
  // `residency`: config.residency (null: the residency under test).
  explicit Stage(kstage_host_execution_t exec = KSTAGE_HOST_EXECUTION_DEFAULT,
                 const DLDevice* residency = nullptr) {
    kstage_config_t config = kstage_config_init();
    config.host_execution = exec;
    if (residency) {
      config.residency = *residency;
    } else if (kOnDevice) {
      config.residency = kResidency;
    }
    KS_OK(kstage_create(&config, &stage));
  }
  ~Stage() {
    if (stage) kstage_destroy(stage);
  }
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  kstage_token_t token(const char* s) {
    kstage_token_t t = 0;
    KS_OK(kstage_intern_token(stage, s, KSTAGE_NUL_TERMINATED, &t));
    return t;
  }
  kstage_path_t path(const std::string& s) {
    kstage_path_t p = 0;
    KS_OK(kstage_intern_path(stage, s.c_str(), s.size(), &p));
    return p;
  }
  std::string path_string(kstage_path_t p) {
    const char* s = nullptr;
    KS_OK(kstage_path_string(stage, p, &s, nullptr));
    return s;
  }
  // Paths "/<prefix>_<i>" for i in [0, n).
  std::vector<kstage_path_t> paths(const std::string& prefix, size_t n) {
    std::vector<kstage_path_t> v;
    for (size_t i = 0; i < n; ++i) v.push_back(path(prefix + "_" + std::to_string(i)));
    return v;
  }
  kstage_query_t query(const std::vector<kstage_path_t>& p) {
    kstage_query_t q = 0;
    KS_OK(kstage_query_paths(stage, p.data(), p.size(), &q));
    return q;
  }
  // The prims of a query, in its order.
  std::vector<kstage_path_t> prims_of(kstage_query_t q) {
    kstage_path_list_t list = 0;
    KS_OK(kstage_query_get_paths(stage, q, &list));
    const kstage_path_t* ids = nullptr;
    uint64_t n = 0;
    KS_OK(kstage_path_list_get(stage, list, &ids, &n));
    std::vector<kstage_path_t> out(ids, ids + n);
    KS_OK(kstage_path_list_release(stage, list));
    return out;
  }
  // The paths kstage_query_hierarchy answers for `prim` (which must exist), span by span.
  std::vector<kstage_path_t> related(kstage_path_t prim, kstage_relation_t relation) {
    kstage_query_t q = query({prim});
    kstage_hierarchy_t h = 0;
    KS_OK(kstage_query_hierarchy(stage, q, relation, &h));
    const kstage_hierarchy_item_t* items = nullptr;
    const kstage_path_span_t* spans = nullptr;
    uint64_t n_items = 0, n_spans = 0;
    KS_OK(kstage_hierarchy_get(stage, h, &items, &n_items, &spans, &n_spans));
    REQUIRE(n_items == 1);
    REQUIRE(items[0].status == KSTAGE_OK);
    std::vector<kstage_path_t> out;
    for (uint64_t k = 0; k < items[0].span_count; ++k) {
      const kstage_path_span_t& sp = spans[items[0].span_offset + k];
      for (uint64_t i = 0; i < sp.count; ++i) out.push_back(sp.first + i);
    }
    KS_OK(kstage_hierarchy_release(stage, h));
    KS_OK(kstage_query_release(stage, q));
    return out;
  }
  // The prims kstage_query_filter selects (latest sealed state), in path-id order.
  std::vector<kstage_path_t> filtered(const kstage_filter_t& f) {
    kstage_query_t q = 0;
    KS_OK(kstage_query_filter(stage, &f, &q));
    std::vector<kstage_path_t> out = prims_of(q);
    KS_OK(kstage_query_release(stage, q));
    return out;
  }
  // Writes and checks the op completes OK; returns the call's status.
  kstage_status_t write(kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                        const kstage_write_data_t& w,
                        kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT) {
    kstage_op_t op = 0;
    kstage_status_t st = kstage_write_attribute(stage, q, attr, ordinal, &w, mode, &op);
    if (st == KSTAGE_OK) {
      REQUIRE(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE) == KSTAGE_OK);
      REQUIRE(kstage_release_op(stage, op) == KSTAGE_OK);
    }
    return st;
  }
  // Fixed-size float32 write of `values` (rows x lanes) to the query's prims; with `mask`
  // (bit i of word i / 64), a masked write of the rows whose bit is set.
  void write_f32(kstage_query_t q, kstage_token_t attr, uint64_t ordinal, std::vector<float> values,
                 uint16_t lanes = 1, const uint64_t* mask = nullptr) {
    int64_t shape[1] = {int64_t(values.size() / lanes)};
    DLTensor t = tensor(values.data(), f32(lanes), 1, shape);
    kstage_write_data_t w = write_data(&t);
    if (mask) {
      w.count = uint64_t(shape[0]);
      w.mask = mask;
    }
    KS_OK(write(q, attr, ordinal, w));
  }
  // The range <parent>/<prefix><begin> ... (count paths); its first id.
  kstage_path_t range(const char* parent, const char* prefix, uint64_t begin, uint64_t count) {
    kstage_path_t first = 0;
    KS_OK(kstage_intern_path_range(stage, parent, KSTAGE_NUL_TERMINATED, prefix,
                                   KSTAGE_NUL_TERMINATED, begin, count, &first));
    REQUIRE(first != 0);
    return first;
  }
  // The query over every path of the range whose first id is `first`, in order.
  kstage_query_t range_query(kstage_path_t first) {
    kstage_query_t q = 0;
    KS_OK(kstage_query_range(stage, first, 0, 0, 0, &q));
    return q;
  }
  // The prims of `q` whose `attr` changed in [begin, end] (a change-range read), sorted.
  std::vector<kstage_path_t> changed(kstage_query_t q, kstage_token_t attr, uint64_t begin,
                                     uint64_t end) {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.change_range = true;
    d.range_begin = begin;
    d.range_end = end;
    std::vector<kstage_path_t> seen;
    for (const Group& g : read(q, {attr}, &d))
      seen.insert(seen.end(), g.prims.begin(), g.prims.end());
    std::sort(seen.begin(), seen.end());
    return seen;
  }
  kstage_status_t remove(kstage_query_t q, std::vector<kstage_token_t> attrs, uint64_t ordinal) {
    kstage_op_t op = 0;
    kstage_status_t st =
        kstage_delete_attributes(stage, q, attrs.data(), attrs.size(), ordinal, &op);
    if (st == KSTAGE_OK) REQUIRE(kstage_release_op(stage, op) == KSTAGE_OK);
    return st;
  }
  void seal(uint64_t ordinal, std::vector<kstage_token_t> attrs = {}) {
    KS_OK(kstage_advance_write_floor(stage, ordinal, attrs.data(), attrs.size()));
  }
  uint64_t floor(kstage_token_t attr = 0) {
    uint64_t f = 0;
    KS_OK(kstage_get_write_floor(stage, attr, &f));
    return f;
  }

  // Reads every group, copying values out, and releases everything.
  std::vector<Group> read(kstage_query_t q, std::vector<kstage_token_t> attrs,
                          const kstage_read_desc_t* desc = nullptr) {
    kstage_read_t r = 0;
    KS_OK(kstage_read_attributes(stage, q, attrs.data(), attrs.size(), desc, &r));
    std::vector<Group> out;
    for (;;) {
      kstage_read_group_t g{};
      kstage_status_t st = kstage_fetch_read_next(stage, r, 0, &g);
      if (st == KSTAGE_END_OF_ITERATION) break;
      KS_OK(st);
      out.push_back(copy_group(g));
      KS_OK(kstage_release_group(stage, g.handle));
    }
    KS_OK(kstage_release_read(stage, r));
    return out;
  }

  static Group copy_group(const kstage_read_group_t& g) {
    Group c;
    c.attribute = g.attribute;
    c.prims.assign(g.prims, g.prims + g.prim_count);
    c.ordinal = g.ordinal;
    c.is_delete = g.is_delete;
    c.is_array = g.is_array;
    c.semantic = g.semantic;
    c.dtype = g.dtype;
    c.had_index_map = g.data.index_map != nullptr;
    REQUIRE(g.data.count == g.prim_count);
    if (g.is_delete) {
      REQUIRE(g.data.tensor_count == 0);
      return c;
    }
    const size_t tuple = size_t(g.dtype.bits / 8) * g.dtype.lanes;
    wait_for(g.data.device_sync);
    // A fixed-size group's tensor comes to the host in one copy (one per row would be a
    // device round trip per prim), then is cut into rows.
    std::vector<unsigned char> whole;
    if (!g.is_array && g.prim_count > 0) {
      REQUIRE(g.data.tensor_count == 1);
      const DLTensor& t = g.data.tensors[0];
      whole = host_copy(static_cast<const unsigned char*>(t.data) + t.byte_offset,
                        size_t(t.shape[0]) * tuple, t.device);
    }
    for (uint64_t i = 0; i < g.prim_count; ++i) {
      if (!g.is_array) {
        const DLTensor& t = g.data.tensors[0];
        REQUIRE(t.ndim == 1);
        REQUIRE(t.dtype.lanes == g.dtype.lanes);
        const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
        REQUIRE(int64_t(row) < t.shape[0]);
        c.values.emplace_back(whole.begin() + ptrdiff_t(row * tuple),
                              whole.begin() + ptrdiff_t((row + 1) * tuple));
      } else {
        const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
        REQUIRE(row < g.data.tensor_count);
        const DLTensor& t = g.data.tensors[row];
        REQUIRE(t.ndim == 1);
        const unsigned char* p = static_cast<const unsigned char*>(t.data) + t.byte_offset;
        c.values.push_back(host_copy(p, size_t(t.shape[0]) * tuple, t.device));
      }
    }
    return c;
  }

  // Sealed values of `attr` per prim (prims without it are absent).
  std::map<kstage_path_t, std::vector<unsigned char>> values(kstage_query_t q,
                                                             kstage_token_t attr) {
    std::map<kstage_path_t, std::vector<unsigned char>> m;
    for (const Group& g : read(q, {attr}))
      for (size_t i = 0; i < g.prims.size(); ++i) m[g.prims[i]] = g.values[i];
    return m;
  }
  std::map<kstage_path_t, std::vector<float>> floats(kstage_query_t q, kstage_token_t attr) {
    std::map<kstage_path_t, std::vector<float>> m;
    for (auto& [p, bytes] : values(q, attr)) {
      m[p] = as_floats(bytes);
    }
    return m;
  }

  // Everything a reader can observe: floors, and sealed values of `attrs`
  // for `q`, plus which prims exist.
  // Everything a rejected call must leave as it was, as text: "global F;", " floor A=F;" per
  // attribute followed by " prim:b,b,...," for each prim of `q` holding it (by prim), then
  // " prims" and the existing prims. Built without a map or a string per value (the tests call
  // this on 1e5-prim stages, under sanitizers, many times).
  std::string fingerprint(kstage_query_t q, const std::vector<kstage_token_t>& attrs) {
    std::string s;
    auto num = [&](uint64_t v) {
      char buf[24];
      const auto r = std::to_chars(buf, buf + sizeof buf, v);
      s.append(buf, r.ptr);
    };
    s += "global ";
    num(floor(0));
    s += ';';
    for (kstage_token_t a : attrs) {
      s += " floor ";
      num(a);
      s += '=';
      num(floor(a));
      s += ';';
      // (prim, first byte, byte count) of every value, into one byte array.
      std::vector<std::tuple<kstage_path_t, size_t, size_t>> rows;
      std::vector<unsigned char> bytes;
      kstage_read_t r = 0;
      KS_OK(kstage_read_attributes(stage, q, &a, 1, nullptr, &r));
      kstage_read_group_t g{};
      while (kstage_fetch_read_next(stage, r, 0, &g) == KSTAGE_OK) {
        wait_for(g.data.device_sync);
        const size_t tuple = size_t(g.dtype.bits / 8) * g.dtype.lanes;
        std::vector<unsigned char> whole;  // a fixed-size group's tensor, in one copy
        if (!g.is_array && g.prim_count > 0) {
          const DLTensor& t = g.data.tensors[0];
          whole = host_copy(static_cast<const unsigned char*>(t.data) + t.byte_offset,
                            size_t(t.shape[0]) * tuple, t.device);
        }
        for (uint64_t i = 0; i < g.prim_count; ++i) {
          const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
          const size_t at = bytes.size();
          if (!g.is_array) {
            bytes.insert(bytes.end(), whole.begin() + ptrdiff_t(row * tuple),
                         whole.begin() + ptrdiff_t((row + 1) * tuple));
          } else {
            const DLTensor& t = g.data.tensors[row];
            const auto v = host_copy(static_cast<const unsigned char*>(t.data) + t.byte_offset,
                                     size_t(t.shape[0]) * tuple, t.device);
            bytes.insert(bytes.end(), v.begin(), v.end());
          }
          rows.emplace_back(g.prims[i], at, bytes.size() - at);
        }
        KS_OK(kstage_release_group(stage, g.handle));
      }
      KS_OK(kstage_release_read(stage, r));
      std::sort(rows.begin(), rows.end());
      for (const auto& [p, at, n] : rows) {
        s += ' ';
        num(p);
        s += ':';
        for (size_t k = 0; k < n; ++k) {
          num(bytes[at + k]);
          s += ',';
        }
      }
    }
    kstage_filter_t all{};
    kstage_query_t existing = 0;
    KS_OK(kstage_query_filter(stage, &all, &existing));
    kstage_path_list_t list = 0;
    KS_OK(kstage_query_get_paths(stage, existing, &list));
    const kstage_path_t* ids = nullptr;
    uint64_t n = 0;
    KS_OK(kstage_path_list_get(stage, list, &ids, &n));
    s += " prims";
    for (uint64_t i = 0; i < n; ++i) {
      s += ' ';
      num(ids[i]);
    }
    KS_OK(kstage_path_list_release(stage, list));
    KS_OK(kstage_query_release(stage, existing));
    return s;
  }

  kstage_stage_t stage = 0;
};

// A stage with one float32 column "x" = {1, 2, 3} over the prims
// "<prefix>_0..2" (query q), sealed at ordinal 1: the state that tests of
// rejected calls compare against.
struct SealedColumn {
  explicit SealedColumn(const std::string& prefix)
      : prims(s.paths(prefix, 3)), q(s.query(prims)), x(s.token("x")) {
    KS_OK(s.write(q, x, 1, write_data(&t)));
    s.seal(1);
  }
  Stage s{host_execution()};
  std::vector<kstage_path_t> prims;
  kstage_query_t q;
  kstage_token_t x;
  std::vector<float> values = {1, 2, 3};
  int64_t shape[1] = {3};
  DLTensor t = tensor(values.data(), f32(), 1, shape);
};

// One float per prim: the sealed values of `attr` over `q` (prims without it absent).
// A write of one tensor, UPSERT, ordered after `sync`: returns its op, which
// may still be running (finish waits for it).
inline kstage_op_t write_op(Stage& s, kstage_query_t q, kstage_token_t a, uint64_t ordinal,
                            const DLTensor& t, kstage_device_sync_t sync = {0, 0}) {
  kstage_write_data_t w = write_data(&t);
  w.device_sync = sync;
  kstage_op_t op = 0;
  KS_OK(kstage_write_attribute(s.stage, q, a, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  return op;
}

// Waits for an op and releases it.
inline void finish(Stage& s, kstage_op_t op) {
  KS_OK(kstage_wait(s.stage, op, KSTAGE_TIMEOUT_INFINITE));
  KS_OK(kstage_release_op(s.stage, op));
}

inline std::map<kstage_path_t, float> scalars(Stage& s, kstage_query_t q, kstage_token_t attr) {
  std::map<kstage_path_t, float> m;
  for (auto& [p, f] : s.floats(q, attr)) {
    REQUIRE(f.size() == 1);
    m[p] = f[0];
  }
  return m;
}

// A one-lane float32 write of `values` at `ordinal`; returns the call's status.
inline kstage_status_t try_write(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                                 std::vector<float> values,
                                 kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT) {
  int64_t shape[1] = {int64_t(values.size())};
  DLTensor t = tensor(values.data(), f32(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  return s.write(q, attr, ordinal, w, mode);
}

// One uint64 id per row (fixed-size, lanes 1) with `semantic` (TOKEN_ID, PATH_ID): a write of
// `ids` at `ordinal`; returns the call's status.
inline kstage_status_t write_ids(Stage& s, kstage_query_t q, kstage_token_t attr, uint64_t ordinal,
                                 std::vector<uint64_t> ids, kstage_semantic_t semantic) {
  int64_t shape[1] = {int64_t(ids.size())};
  DLTensor t = tensor(ids.data(), u64(), 1, shape);
  kstage_write_data_t w = write_data(&t);
  w.semantic = semantic;
  return s.write(q, attr, ordinal, w);
}

// Rows of uint64 ids (an array column, a tensor per row; a row may be empty) with `semantic`.
inline kstage_status_t write_id_rows(Stage& s, kstage_query_t q, kstage_token_t attr,
                                     uint64_t ordinal, std::vector<std::vector<uint64_t>> rows,
                                     kstage_semantic_t semantic) {
  std::vector<int64_t> shapes(rows.size());
  std::vector<DLTensor> t;
  for (size_t i = 0; i < rows.size(); ++i) {
    shapes[i] = int64_t(rows[i].size());
    t.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), u64(), 1, &shapes[i]));
  }
  kstage_write_data_t w = write_data(t.data(), t.size(), true);
  w.semantic = semantic;
  return s.write(q, attr, ordinal, w);
}

}  // namespace kstage_test
