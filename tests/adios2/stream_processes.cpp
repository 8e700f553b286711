// SPDX-License-Identifier: Apache-2.0
// Two processes coupled by an SST stream on loopback (the test adios2_sst_stream runs both, with a
// time limit, through run_stream.cmake):
//   kstage_test_adios2_stream writer <name> <ticks> <checksum-file>
//     a stage of 2000 particles (a path range) and a label column on explicit paths; a full
//     step, then one incremental step per tick (a few particles moved, one deleted, one label
//     rewritten); the checksum of its final state goes to <checksum-file> before the stream ends;
//   kstage_test_adios2_stream reader <name> <checksum-file>
//     rebuilds a stage from the steps, in order, and checks that its checksum is the writer's.
#include <kstage/kstage_adios2.h>

#include "stage_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

#define CHECK(call)                                                               \
  do {                                                                            \
    kstage_status_t st_ = (call);                                                 \
    if (st_ != KSTAGE_OK) {                                                       \
      std::fprintf(stderr, "%s: %s: %s | %s\n", #call, kstage_status_string(st_), \
                   kstage_last_error(), kstage_adios2_last_error());              \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

// SST on loopback only, sockets (WAN) transport; the writer waits for its reader.
const char* kParameters[] = {
    "DataTransport",         "WAN", "ControlInterface", "lo", "DataInterface", "lo",
    "RendezvousReaderCount", "1",   "OpenTimeoutSecs",  "60", nullptr};

// FNV-1a over every attribute's schema, floor and every prim's path and bytes, in name order.
uint64_t checksum(kstage_stage_t s) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  for (const auto& [name, c] : kstage_adios2_test::stage_state(s).columns) {
    mix(name.data(), name.size());
    mix(&c.dtype, sizeof c.dtype);
    mix(&c.floor, sizeof c.floor);
    for (const auto& [path, bytes] : c.values) {
      mix(path.data(), path.size());
      mix(bytes.data(), bytes.size());
    }
  }
  return h;
}

void write_f32(kstage_stage_t s, kstage_query_t q, kstage_token_t t, uint64_t ordinal,
               std::vector<float>& v, uint16_t lanes, kstage_semantic_t semantic) {
  int64_t shape[1] = {int64_t(v.size() / lanes)};
  DLTensor tensor{v.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, lanes}, shape, nullptr, 0};
  kstage_write_data_t w = kstage_write_data_init();
  w.tensors = &tensor;
  w.tensor_count = 1;
  w.semantic = semantic;
  kstage_op_t op = 0;
  CHECK(kstage_write_attribute(s, q, t, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  CHECK(kstage_wait(s, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(s, op));
}

int writer(const char* name, int ticks, const char* checksum_file) {
  const uint64_t n = 2000;
  kstage_stage_t s = 0;
  CHECK(kstage_create(nullptr, &s));
  kstage_token_t pos = 0, label = 0;
  CHECK(kstage_intern_token(s, "position", KSTAGE_NUL_TERMINATED, &pos));
  CHECK(kstage_intern_token(s, "label", KSTAGE_NUL_TERMINATED, &label));
  kstage_path_t first = 0;
  CHECK(kstage_intern_path_range(s, "/sim", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0, n,
                                 &first));
  kstage_query_t all = 0;
  CHECK(kstage_query_range(s, first, 0, 0, 0, &all));
  std::vector<float> p(n * 3);
  for (size_t i = 0; i < p.size(); ++i) p[i] = float(i) * 0.01f;
  write_f32(s, all, pos, 1, p, 3, KSTAGE_SEMANTIC_POINT);
  const char* walls[2] = {"/walls/north", "/walls/south"};
  kstage_path_t wall_ids[2];
  CHECK(kstage_intern_paths(s, walls, nullptr, 2, wall_ids));
  kstage_query_t wq = 0;
  CHECK(kstage_query_paths(s, wall_ids, 2, &wq));
  std::vector<float> labels = {1.f, 2.f};
  write_f32(s, wq, label, 1, labels, 1, KSTAGE_SEMANTIC_NONE);
  CHECK(kstage_advance_write_floor(s, 1, nullptr, 0));
  // What the ticks' steps cover: every particle (those deleted too, for their tombstones) and
  // the walls.
  std::vector<kstage_path_t> ids;
  for (uint64_t i = 0; i < n; ++i) ids.push_back(first + i);
  ids.insert(ids.end(), wall_ids, wall_ids + 2);
  kstage_query_t everything = 0;
  CHECK(kstage_query_paths(s, ids.data(), ids.size(), &everything));

  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  d.engine = "SST";
  d.parameters = kParameters;
  kstage_adios2_stream_t w = 0;
  CHECK(kstage_adios2_open(name, &d, &w));
  kstage_filter_t every{};
  kstage_query_t existing = 0;
  CHECK(kstage_query_filter(s, &every, &existing));
  CHECK(kstage_adios2_write_step(w, s, existing, nullptr, 0, nullptr));
  CHECK(kstage_query_release(s, existing));
  for (int k = 1; k <= ticks; ++k) {
    const uint64_t ordinal = uint64_t(k) + 1;
    std::vector<kstage_path_t> moved;
    for (uint64_t i = 0; i < 20; ++i) moved.push_back(first + (uint64_t(k) * 37 + i * 91) % n);
    std::sort(moved.begin(), moved.end());
    moved.erase(std::unique(moved.begin(), moved.end()), moved.end());
    kstage_query_t mq = 0;
    CHECK(kstage_query_paths(s, moved.data(), moved.size(), &mq));
    std::vector<float> v(moved.size() * 3, float(k));
    write_f32(s, mq, pos, ordinal, v, 3, KSTAGE_SEMANTIC_POINT);
    CHECK(kstage_query_release(s, mq));
    kstage_path_t gone = first + n - uint64_t(k);
    kstage_query_t dq = 0;
    CHECK(kstage_query_paths(s, &gone, 1, &dq));
    kstage_op_t op = 0;
    CHECK(kstage_delete_attributes(s, dq, nullptr, 0, ordinal, &op));
    CHECK(kstage_wait(s, op, KSTAGE_TIMEOUT_INFINITE));
    CHECK(kstage_release_op(s, op));
    CHECK(kstage_query_release(s, dq));
    std::vector<float> l = {float(k * 10)};
    kstage_query_t lq = 0;
    CHECK(kstage_query_paths(s, &wall_ids[k % 2], 1, &lq));
    write_f32(s, lq, label, ordinal, l, 1, KSTAGE_SEMANTIC_NONE);
    CHECK(kstage_query_release(s, lq));
    CHECK(kstage_advance_write_floor(s, ordinal, nullptr, 0));
    kstage_adios2_step_desc_t sd = kstage_adios2_step_desc_init();
    sd.change_range = true;
    sd.range_begin = sd.range_end = ordinal;
    CHECK(kstage_adios2_write_step(w, s, everything, nullptr, 0, &sd));
  }
  std::ofstream(checksum_file) << checksum(s) << "\n";
  CHECK(kstage_adios2_close(w));
  std::printf("writer: %d ticks streamed\n", ticks);
  CHECK(kstage_destroy(s));
  return 0;
}

int reader(const char* name, const char* checksum_file) {
  kstage_stage_t s = 0;
  CHECK(kstage_create(nullptr, &s));
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  d.mode = KSTAGE_ADIOS2_READ;
  d.engine = "SST";
  d.parameters = kParameters;
  kstage_adios2_stream_t r = 0;
  CHECK(kstage_adios2_open(name, &d, &r));
  uint64_t ordinal = 0, steps = 0;
  kstage_status_t st;
  while ((st = kstage_adios2_read_step(r, s, uint64_t(60) * 1000000000ull, &ordinal)) == KSTAGE_OK)
    ++steps;
  if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  CHECK(kstage_adios2_close(r));
  uint64_t expected = 0;
  std::ifstream(checksum_file) >> expected;
  const uint64_t got = checksum(s);
  std::printf("reader: %llu steps, last ordinal %llu, checksum %llu (writer %llu)\n",
              (unsigned long long)steps, (unsigned long long)ordinal, (unsigned long long)got,
              (unsigned long long)expected);
  CHECK(kstage_destroy(s));
  return got == expected && expected != 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc == 5 && std::strcmp(argv[1], "writer") == 0)
    return writer(argv[2], std::atoi(argv[3]), argv[4]);
  if (argc == 4 && std::strcmp(argv[1], "reader") == 0) return reader(argv[2], argv[3]);
  std::fprintf(stderr,
               "usage: %s writer <name> <ticks> <checksum-file> | reader <name> <checksum-file>\n",
               argv[0]);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "stream_processes: %s\n", e.what());
  return 1;
}
