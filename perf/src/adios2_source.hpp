// SPDX-License-Identifier: Apache-2.0
// What the ADIOS2 benchmarks share (adios2_suite.cpp, adios2_mpi_suite.cpp): the source state --
// a stage whose path range /sim/p[first, first + n) holds one sealed float32 x 3 attribute
// "pos", with the same values in client memory for ADIOS2 used directly --, the check that a
// restarted stage holds it, and the median of a workload's runs.
#pragma once

#include "harness.hpp"  // deterministic data (its inline parts only)

#include <kstage/kstage.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace kperf_adios2 {

// Each benchmark's own way to stop (a message, then exit or MPI_Abort).
[[noreturn]] void die(const std::string& what);

inline void check(kstage_status_t st, const char* call) {
  if (st != KSTAGE_OK) die(std::string(call) + ": " + kstage_last_error());
}

struct Source {
  uint64_t n = 0, first_row = 0;
  std::vector<float> values;  // also the direct writer's client memory
  kstage_stage_t stage = 0;
  Source(uint64_t rows, uint64_t first) : n(rows), first_row(first), values(size_t(rows) * 3) {
    kperf::fill_values(values.data(), n, 3, 1 + first);
    kstage_config_t c = kstage_config_init();
    check(kstage_create(&c, &stage), "kstage_create");
    kstage_path_t p0 = 0;
    check(kstage_intern_path_range(stage, "/sim", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED,
                                   first, n, &p0),
          "kstage_intern_path_range");
    kstage_query_t q = 0;
    check(kstage_query_range(stage, p0, 0, 0, 0, &q), "kstage_query_range");
    kstage_token_t pos = 0;
    check(kstage_intern_token(stage, "pos", KSTAGE_NUL_TERMINATED, &pos), "kstage_intern_token");
    int64_t shape[1] = {int64_t(n)};
    DLTensor t{};
    t.data = values.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = DLDataType{kDLFloat, 32, 3};
    t.shape = shape;
    kstage_write_data_t d = kstage_write_data_init();
    d.tensors = &t;
    d.tensor_count = 1;
    d.semantic = KSTAGE_SEMANTIC_POINT;
    kstage_op_t op = 0;
    check(kstage_write_attribute(stage, q, pos, 1, &d, KSTAGE_PRIM_MODE_UPSERT, &op),
          "kstage_write_attribute");
    check(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE), "kstage_wait");
    check(kstage_release_op(stage, op), "kstage_release_op");
    check(kstage_advance_write_floor(stage, 1, &pos, 1), "kstage_advance_write_floor");
    check(kstage_query_release(stage, q), "kstage_query_release");
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;
  ~Source() { kstage_destroy(stage); }
};

// A restarted stage holds the source's prims, with its values (a compact host read); "" if so.
inline std::string verify_stage(kstage_stage_t stage, const Source& s) {
  kstage_token_t pos = 0;
  check(kstage_intern_token(stage, "pos", KSTAGE_NUL_TERMINATED, &pos), "kstage_intern_token");
  kstage_attribute_info_t info = kstage_attribute_info_init();
  check(kstage_attribute_info(stage, pos, &info), "kstage_attribute_info");
  if (info.prim_count != s.n)
    return "restart: " + std::to_string(info.prim_count) + " prims, not " + std::to_string(s.n);
  kstage_path_t first = 0;  // the restart interned the range: the same range again is it
  check(kstage_intern_path_range(stage, "/sim", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED,
                                 s.first_row, s.n, &first),
        "kstage_intern_path_range");
  kstage_query_t q = 0;
  check(kstage_query_range(stage, first, 0, 0, 0, &q), "kstage_query_range");
  kstage_read_desc_t rd = kstage_read_desc_init();
  rd.compact = 1;
  kstage_read_t r = 0;
  check(kstage_read_attributes(stage, q, &pos, 1, &rd, &r), "kstage_read_attributes");
  std::string error;
  uint64_t seen = 0;
  kstage_read_group_t g;
  kstage_status_t st;
  while ((st = kstage_fetch_read_next(stage, r, KSTAGE_TIMEOUT_INFINITE, &g)) == KSTAGE_OK) {
    const DLTensor& t = g.data.tensors[0];
    const float* v =
        reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset);
    for (uint64_t i = 0; i < g.prim_count && error.empty(); ++i)
      if (std::memcmp(v + i * 3, s.values.data() + (g.prims[i] - first) * 3, 12) != 0)
        error = "restart: prim " + std::to_string(s.first_row + g.prims[i] - first) + " differs";
    seen += g.prim_count;
    kstage_release_group(stage, g.handle);
  }
  if (st != KSTAGE_END_OF_ITERATION) check(st, "kstage_fetch_read_next");
  kstage_release_read(stage, r);
  kstage_query_release(stage, q);
  if (error.empty() && seen != s.n)
    error = "restart: " + std::to_string(seen) + " prims read, not " + std::to_string(s.n);
  return error;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace kperf_adios2
