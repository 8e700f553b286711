// SPDX-License-Identifier: Apache-2.0
#include "context.hpp"

#include <cstring>

namespace kperf {

void throw_kstage(kstage_status_t st, const char* call) {
  throw KstageError(std::string(call) + " failed: " + kstage_status_string(st) + ": " +
                    kstage_last_error());
}

DLTensor make_tensor(const void* data, DType dtype, int lanes, int64_t* shape) {
  DLTensor t;
  std::memset(&t, 0, sizeof t);
  t.data = const_cast<void*>(data);
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.shape = shape;
  t.dtype.code = kDLFloat;
  t.dtype.bits = uint8_t(dtype_bytes(dtype) * 8);
  t.dtype.lanes = uint16_t(lanes);
  return t;
}

Context::Context(Exec exec, uint64_t rows) : exec_(exec), rows_(rows) {
  const auto t0 = Clock::now();
  kstage_config_t config;
  config = kstage_config_init();
  config.host_execution =
      exec == Exec::Serial ? KSTAGE_HOST_EXECUTION_SERIAL : KSTAGE_HOST_EXECUTION_PARALLEL;
  KP_CHECK(kstage_create(&config, &stage_));
  paths_.resize(rows);
  char name[40];
  for (uint64_t i = 0; i < rows; ++i) {
    const int len = std::snprintf(name, sizeof name, "/p/%llu", (unsigned long long)i);
    KP_CHECK(kstage_intern_path(stage_, name, size_t(len), &paths_[i]));
  }
  setup_seconds_ = seconds_since(t0);
}

Context::~Context() {
  if (stage_) kstage_destroy(stage_);  // frees queries, columns and everything else
}

kstage_query_t Context::all() {
  if (!all_) KP_CHECK(kstage_query_paths(stage_, paths_.data(), paths_.size(), &all_));
  return all_;
}

const std::vector<uint32_t>& Context::shuffle_perm() {
  if (perm_.empty()) perm_ = random_permutation(rows_, 0x5EED0001);
  return perm_;
}

kstage_query_t Context::shuffled() {
  if (!shuffled_) {
    const auto& perm = shuffle_perm();
    std::vector<kstage_path_t> p(rows_);
    for (uint64_t i = 0; i < rows_; ++i) p[i] = paths_[perm[i]];
    KP_CHECK(kstage_query_paths(stage_, p.data(), p.size(), &shuffled_));
  }
  return shuffled_;
}

kstage_query_t Context::strided(uint64_t stride) {
  auto it = strided_.find(stride);
  if (it != strided_.end()) return it->second;
  std::vector<kstage_path_t> p;
  for (uint64_t i = 0; i < rows_; i += stride) p.push_back(paths_[i]);
  kstage_query_t q = 0;
  KP_CHECK(kstage_query_paths(stage_, p.data(), p.size(), &q));
  strided_[stride] = q;
  return q;
}

kstage_query_t Context::make_query(const std::vector<kstage_path_t>& p) {
  kstage_query_t q = 0;
  KP_CHECK(kstage_query_paths(stage_, p.data(), p.size(), &q));
  return q;
}

kstage_token_t Context::token(const std::string& name) {
  auto it = tokens_.find(name);
  if (it != tokens_.end()) return it->second;
  kstage_token_t t = 0;
  KP_CHECK(kstage_intern_token(stage_, name.c_str(), name.size(), &t));
  tokens_[name] = t;
  return t;
}

void Context::note_column(const std::string& attribute, double payload) {
  // Per-row maps of a column: row_of (4 B per path id, grown x2), prim_of_row, changed_at.
  const double bytes = payload + double(rows_) * 28.0;
  double& b = columns_[attribute];
  if (bytes > b) {
    column_bytes_ += bytes - b;
    b = bytes;
  }
}

void Context::write(kstage_query_t query, kstage_token_t attr, uint64_t ordinal,
                    const kstage_write_data_t& data, kstage_prim_mode_t mode) {
  kstage_op_t op = 0;
  KP_CHECK(kstage_write_attribute(stage_, query, attr, ordinal, &data, mode, &op));
  const kstage_status_t st = kstage_wait(stage_, op, KSTAGE_TIMEOUT_INFINITE);
  kstage_release_op(stage_, op);
  if (st != KSTAGE_OK) throw_kstage(st, "kstage_wait");
}

void Context::seal(uint64_t ordinal, kstage_token_t attr) {
  KP_CHECK(kstage_advance_write_floor(stage_, ordinal, &attr, 1));
}

double Context::bookkeeping_bytes(uint64_t rows) {
  // Measured on kstage 0.1 (VmRSS): interning costs ~100 B per path; a query over every prim
  // 8 B per prim plus a transient hash set of ~40 B per prim while it is built; the suite
  // keeps up to 3 queries. Per-column maps are counted by note_column.
  return double(rows) * (100.0 + 8.0 * 3 + 40.0);
}

}  // namespace kperf
