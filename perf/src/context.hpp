// SPDX-License-Identifier: Apache-2.0
// A Context is one kstage stage with `rows` prims (/p/0 ... /p/<rows-1>) created with one
// host execution space. Every kstage workload at that (exec, rows) runs in it; each
// (workload family, dtype, lanes) uses its own attribute. Everything goes through the
// public C API (kstage/kstage.h).
#pragma once

#include "harness.hpp"

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kperf {

// A kstage call failed: the message names the call and kstage's own message.
struct KstageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void throw_kstage(kstage_status_t st, const char* call);
#define KP_CHECK(call)                                             \
  do {                                                             \
    const kstage_status_t kp_st_ = (call);                         \
    if (kp_st_ != KSTAGE_OK) ::kperf::throw_kstage(kp_st_, #call); \
  } while (0)

// A canonical fixed-size tensor: ndim 1, shape [rows], dtype.lanes = lanes.
DLTensor make_tensor(const void* data, DType dtype, int lanes, int64_t* shape);

class Context {
 public:
  Context(Exec exec, uint64_t rows);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Exec exec() const { return exec_; }
  uint64_t rows() const { return rows_; }
  kstage_stage_t stage() const { return stage_; }
  double setup_seconds() const { return setup_seconds_; }

  const std::vector<kstage_path_t>& paths() const { return paths_; }
  kstage_query_t all();                         // every prim, in order
  kstage_query_t shuffled();                    // every prim, in shuffle_perm() order
  const std::vector<uint32_t>& shuffle_perm();  // shuffled()[i] = paths[perm[i]]
  kstage_query_t strided(uint64_t stride);      // prims 0, stride, 2*stride, ...
  kstage_query_t make_query(const std::vector<kstage_path_t>& paths);  // caller releases

  kstage_token_t token(const std::string& name);
  uint64_t next_ordinal() { return ++ordinal_; }

  // Bytes of column storage created in this stage so far (columns are never freed while
  // the stage lives), for the working-set cap.
  double column_bytes() const { return column_bytes_; }
  // Counts an attribute's storage (payload bytes plus its per-row maps) once.
  void note_column(const std::string& attribute, double payload);

  // Write one attribute (count 0: every prim of `query`) and wait; UPSERT unless told.
  void write(kstage_query_t query, kstage_token_t attr, uint64_t ordinal,
             const kstage_write_data_t& data, kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT);
  void seal(uint64_t ordinal, kstage_token_t attr);

  // Estimated bytes of the stage's own bookkeeping for `rows` prims (dictionary ~100 B per
  // path, query lists, per-row column maps), for the working-set cap.
  static double bookkeeping_bytes(uint64_t rows);

 private:
  Exec exec_;
  uint64_t rows_;
  kstage_stage_t stage_ = 0;
  double setup_seconds_ = 0;
  std::vector<kstage_path_t> paths_;
  kstage_query_t all_ = 0, shuffled_ = 0;
  std::vector<uint32_t> perm_;
  std::map<uint64_t, kstage_query_t> strided_;
  std::map<std::string, kstage_token_t> tokens_;
  std::map<std::string, double> columns_;
  double column_bytes_ = 0;
  uint64_t ordinal_ = 0;
};

// Reads `attr` of `query` with `desc` and calls f(group) for every group; releases all.
// Returns the number of groups.
template <class F>
uint64_t read_groups(kstage_stage_t stage, kstage_query_t query, kstage_token_t attr,
                     const kstage_read_desc_t* desc, F&& f) {
  kstage_read_t read = 0;
  KP_CHECK(kstage_read_attributes(stage, query, &attr, 1, desc, &read));
  kstage_read_group_t g;
  kstage_status_t st;
  uint64_t groups = 0;
  while ((st = kstage_fetch_read_next(stage, read, 0, &g)) == KSTAGE_OK) {
    ++groups;
    try {
      f(g);
    } catch (...) {
      kstage_release_group(stage, g.handle);
      kstage_release_read(stage, read);
      throw;
    }
    KP_CHECK(kstage_release_group(stage, g.handle));
  }
  if (st != KSTAGE_END_OF_ITERATION) throw_kstage(st, "kstage_fetch_read_next");
  KP_CHECK(kstage_release_read(stage, read));
  return groups;
}

// Checks a fixed-size group's value of prim i against expected(row_of_source, lane).
// Returns "" or the first mismatch.
template <class T, class Expected>
std::string check_fixed_group(const kstage_read_group_t& g, int lanes,
                              const std::vector<kstage_path_t>& want_prims, uint64_t first,
                              Expected&& expected) {
  if (g.is_delete) return "unexpected tombstone group";
  if (g.data.tensor_count != 1) return "fixed-size group without exactly one tensor";
  const DLTensor& t = g.data.tensors[0];
  if (t.dtype.lanes != lanes) return "group lanes differ from the column's";
  const T* base = reinterpret_cast<const T*>(static_cast<const char*>(t.data) + t.byte_offset);
  for (uint64_t i = 0; i < g.prim_count; ++i) {
    const uint64_t k = first + i;
    if (k >= want_prims.size()) return "more prims than expected";
    if (g.prims[i] != want_prims[k])
      return "prim " + std::to_string(k) + " of the read is not the expected prim";
    const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
    for (int l = 0; l < lanes; ++l) {
      const T v = base[row * uint64_t(lanes) + uint64_t(l)];
      const T e = T(expected(k, l));
      if (!(v == e))
        return "element " + std::to_string(k) + " lane " + std::to_string(l) + " reads " +
               std::to_string(double(v)) + ", expected " + std::to_string(double(e));
    }
  }
  return "";
}

}  // namespace kperf
