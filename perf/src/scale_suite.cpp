// SPDX-License-Identifier: Apache-2.0
// `kstage_perf --scale`: kstage at simulation scale (issue 16). For each prim count N, a fresh
// stage runs the scale workload once, step by step:
//   names        the prims: a path range /sim/particles/p[0, N) (kind "range"), or N explicit
//                paths /sim/particles/p<i> in one kstage_intern_paths call (kinds "explicit"
//                and "shuffled")
//   query        kstage_query_range over the range in order, or kstage_query_paths: of the
//                paths in the order interned ("explicit": consecutive ids, which kstage keeps
//                as a run, as for a range), or in a random order ("shuffled": a list of ids,
//                and a column with per-prim row tables)
//   write_seal   a dense float32 x 3 write of every prim + wait + seal (the column's first write)
//   mask_seal    a 1% mask write + wait + seal
//   read_latest  a zero-copy latest read in groups of 2^20 prims: read + fetch + release
//   read_change  a change-range read of the mask tick: read + fetch + release
//   adopt_seal   a first dense write of a second column from a managed tensor (ownership handed
//                over: the stage adopts the buffer as the column, no copy) + wait + seal
// and records each step's time and the stage's memory: the resident memory the process gained
// since just before the stage was made (the source tensor and mask are made before that), and
// its peak (VmHWM, reset with /proc/self/clear_refs); both are taken before adopt_seal, whose
// buffer was the client's. memcpy of the payload is timed in the same run twice: between warm
// buffers, and into freshly allocated memory -- the copy any first write of a client's array
// must make (on this machine most of that time is the kernel's first touch of each page).
// Results: <out>/scale.csv; perf/report.py plots bytes and seconds per prim against N and holds
// the 1e8-prim range to its targets: stage memory <= 1.5x the payload, and first dense write +
// seal >= 0.7x memcpy, stated there against memcpy into fresh memory with the warm-buffer ratio
// printed beside it (issue 16 asked for ">= 0.7x memcpy"; against warm buffers a copying first
// write cannot reach it, see docs/performance.md).
#include "context.hpp"

#include <kstage/dlpack.hpp>

#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace kperf {
namespace {

struct Row {
  std::string kind;
  uint64_t n = 0;
  double payload = 0;  // bytes of one float32 x 3 column
  double t_names = 0, t_query = 0, t_write_seal = 0, t_mask_seal = 0, t_read_latest = 0,
         t_read_change = 0, t_adopt_seal = 0, t_memcpy = 0, t_memcpy_fresh = 0;
  double stage_bytes = 0, peak_bytes = 0;
  uint64_t changed = 0;
  std::string error;
};

Row run_one(const std::string& kind, uint64_t n, Exec exec) {
  Row row;
  row.kind = kind;
  row.n = n;
  row.payload = double(n) * 12.0;
  // Client data first (not the stage's memory): the source, a 1% mask, and for explicit names
  // the strings.
  HostBuf src(size_t(n) * 12), copy(size_t(n) * 12);
  fill_values(src.as<float>(), n, 3, 1);
  touch(copy.p, copy.bytes);
  const std::vector<uint64_t> mask = random_mask(n, 0.01, 0x5CA1E);
  PathNames names;
  std::vector<kstage_path_t> ids;
  if (kind != "range") {
    names = path_names("/sim/particles/p", n);
    ids.resize(n);
  }
  {  // memcpy of the payload, warm buffers: the same run's roof
    std::memcpy(copy.p, src.p, src.bytes);
    const auto t0 = Clock::now();
    std::memcpy(copy.p, src.p, src.bytes);
    row.t_memcpy = seconds_since(t0);
  }
  {  // memcpy into fresh memory: what a plain copy of a first write costs
    const auto t0 = Clock::now();
    HostBuf fresh(src.bytes);
    std::memcpy(fresh.p, src.p, src.bytes);
    row.t_memcpy_fresh = seconds_since(t0);
  }
  // A second column's data, a View handed over as a managed tensor at adopt_seal.
  Kokkos::View<float* [3], Kokkos::HostSpace> velocity_data(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "scale::velocity"), n);
  fill_values(velocity_data.data(), n, 3, 2);

  // Free heap memory of earlier runs back to the system first: else the stage's allocations
  // reuse it without growing the resident set, and its memory reads low.
  malloc_trim(0);
  reset_peak_resident();
  const double base = resident_bytes(), base_peak = peak_resident_bytes();
  kstage_config_t c = kstage_config_init();
  c.host_execution =
      exec == Exec::Serial ? KSTAGE_HOST_EXECUTION_SERIAL : KSTAGE_HOST_EXECUTION_PARALLEL;
  kstage_stage_t stage = 0;
  KP_CHECK(kstage_create(&c, &stage));
  try {
    auto t0 = Clock::now();
    kstage_path_t first = 0;
    if (kind == "range") {
      KP_CHECK(kstage_intern_path_range(stage, "/sim/particles", KSTAGE_NUL_TERMINATED, "p",
                                        KSTAGE_NUL_TERMINATED, 0, n, &first));
    } else {
      KP_CHECK(kstage_intern_paths(stage, names.names.data(), nullptr, n, ids.data()));
    }
    row.t_names = seconds_since(t0);
    kstage_query_t q = 0;
    if (kind == "shuffled") {
      std::mt19937_64 rng(0x5EED);
      std::shuffle(ids.begin(), ids.end(), rng);
    }
    t0 = Clock::now();
    if (kind == "range") KP_CHECK(kstage_query_range(stage, first, 0, 0, 0, &q));
    else KP_CHECK(kstage_query_paths(stage, ids.data(), n, &q));
    row.t_query = seconds_since(t0);
    ids = {};

    kstage_token_t attr = 0;
    KP_CHECK(kstage_intern_token(stage, "position", KSTAGE_NUL_TERMINATED, &attr));
    int64_t shape[1] = {int64_t(n)};
    const DLTensor t = make_tensor(src.p, DType::F32, 3, shape);
    kstage_write_data_t d = kstage_write_data_init();
    d.tensors = &t;
    d.tensor_count = 1;
    d.semantic = KSTAGE_SEMANTIC_POINT;
    auto write_seal = [&](uint64_t ordinal) {
      kstage_op_t op = 0;
      KP_CHECK(kstage_write_attribute(stage, q, attr, ordinal, &d, KSTAGE_PRIM_MODE_UPSERT, &op));
      KP_CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
      KP_CHECK(kstage_release_op(stage, op));
      KP_CHECK(kstage_advance_write_floor(stage, ordinal, &attr, 1));
    };
    t0 = Clock::now();
    write_seal(1);
    row.t_write_seal = seconds_since(t0);
    d.count = n;
    d.mask = mask.data();
    t0 = Clock::now();
    write_seal(2);
    row.t_mask_seal = seconds_since(t0);

    auto read = [&](const kstage_read_desc_t* desc) {
      uint64_t prims = 0;
      read_groups(stage, q, attr, desc,
                  [&](const kstage_read_group_t& g) { prims += g.prim_count; });
      return prims;
    };
    // Groups of at most 2^20 prims: a reader of 1e8 prims holds one group's prim ids at a time.
    kstage_read_desc_t latest_desc = kstage_read_desc_init();
    latest_desc.max_group_prims = uint64_t(1) << 20;
    t0 = Clock::now();
    const uint64_t latest = read(&latest_desc);
    row.t_read_latest = seconds_since(t0);
    kstage_read_desc_t desc = kstage_read_desc_init();
    desc.change_range = true;
    desc.range_begin = desc.range_end = 2;
    t0 = Clock::now();
    row.changed = read(&desc);
    row.t_read_change = seconds_since(t0);
    uint64_t selected = 0;
    for (uint64_t w : mask) selected += uint64_t(__builtin_popcountll(w));
    if (latest != n) row.error = "the latest read returned " + std::to_string(latest) + " prims";
    if (row.changed != selected)
      row.error = "the change-range read returned " + std::to_string(row.changed) +
                  " prims, the mask " + std::to_string(selected);
    row.stage_bytes = resident_bytes() - base;
    row.peak_bytes = peak_resident_bytes() - base_peak;

    kstage_token_t velocity = 0;
    KP_CHECK(kstage_intern_token(stage, "velocity", KSTAGE_NUL_TERMINATED, &velocity));
    // The export holds the View from here on, and the stage the export from the call on.
    DLManagedTensorVersioned* handed = kstage::export_dlpack_versioned(velocity_data);
    velocity_data = {};
    kstage_write_data_t a = kstage_write_data_init();
    a.managed_tensors = &handed;
    a.tensor_count = 1;
    t0 = Clock::now();
    kstage_op_t op = 0;
    KP_CHECK(kstage_write_attribute(stage, q, velocity, 3, &a, KSTAGE_PRIM_MODE_UPSERT, &op));
    KP_CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
    KP_CHECK(kstage_release_op(stage, op));
    KP_CHECK(kstage_advance_write_floor(stage, 3, &velocity, 1));
    row.t_adopt_seal = seconds_since(t0);
    KP_CHECK(kstage_query_release(stage, q));
  } catch (const KstageError& e) {
    row.error = e.what();
  }
  KP_CHECK(kstage_destroy(stage));
  return row;
}

}  // namespace

int run_scale_suite(const Options& o) {
  std::vector<uint64_t> counts;
  if (o.rows_explicit) {
    counts = o.rows;
  } else if (o.mode == Mode::Smoke) {
    counts = {1000, 10000};
  } else if (o.mode == Mode::Quick) {
    counts = {1000, 100000, 1000000, 10000000};
  } else {
    counts = {1000, 10000, 100000, 1000000, 10000000, 100000000};
  }
  const Exec exec = o.execs.empty() ? Exec::Parallel : o.execs.back();
  std::filesystem::create_directories(o.out_dir);
  const std::string path = o.out_dir + "/scale.csv";
  std::ofstream csv(path);
  csv << "kind,n,exec,payload_bytes,stage_bytes,peak_bytes,bytes_per_prim,t_names,t_query,t_write_"
         "seal,"
         "t_mask_seal,t_read_latest,t_read_change,t_adopt_seal,t_memcpy,t_memcpy_fresh,write_seal_"
         "vs_memcpy,"
         "write_seal_vs_fresh_memcpy,error\n";
  std::printf(
      "kstage_perf --scale: %s host execution; stage memory = resident memory gained since the "
      "stage was made\n",
      exec_name(exec));
  std::printf("  %-8s %10s %10s %10s %8s %9s %9s %9s %9s %9s %9s %9s %7s %7s\n", "kind", "prims",
              "payload", "stage", "B/prim", "names s", "query s", "write+seal", "mask+seal",
              "latest s", "change s", "adopt s", "vs cpy", "fresh");
  int failures = 0;
  for (const std::string kind : {"explicit", "shuffled", "range"}) {
    for (uint64_t n : counts) {
      if (kind != "range" && n > 10000000 && !o.rows_explicit)
        continue;                                        // ~5 GB of strings and ids
      if (kind == "shuffled" && n > 10000000) continue;  // the same dictionary as "explicit"
      const Row r = run_one(kind, n, exec);
      const double ratio = r.t_write_seal > 0 ? r.t_memcpy / r.t_write_seal : 0;
      const double fresh_ratio = r.t_write_seal > 0 ? r.t_memcpy_fresh / r.t_write_seal : 0;
      const double bpp = (r.stage_bytes - r.payload) / double(n);
      std::printf(
          "  %-8s %10llu %8.1fMB %8.1fMB %8.1f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.6f %6.2fx "
          "%6.2fx%s%s\n",
          kind.c_str(), (unsigned long long)n, r.payload / 1e6, r.stage_bytes / 1e6, bpp, r.t_names,
          r.t_query, r.t_write_seal, r.t_mask_seal, r.t_read_latest, r.t_read_change,
          r.t_adopt_seal, ratio, fresh_ratio, r.error.empty() ? "" : "  FAILED: ", r.error.c_str());
      csv << kind << ',' << n << ',' << exec_name(exec) << ',' << r.payload << ',' << r.stage_bytes
          << ',' << r.peak_bytes << ',' << bpp << ',' << r.t_names << ',' << r.t_query << ','
          << r.t_write_seal << ',' << r.t_mask_seal << ',' << r.t_read_latest << ','
          << r.t_read_change << ',' << r.t_adopt_seal << ',' << r.t_memcpy << ','
          << r.t_memcpy_fresh << ',' << ratio << ',' << fresh_ratio << ',' << '"' << r.error << '"'
          << '\n';
      if (!r.error.empty()) ++failures;
    }
  }
  std::printf("results: %s\n", path.c_str());
  return failures == 0 ? 0 : 1;
}

}  // namespace kperf
