// SPDX-License-Identifier: Apache-2.0
// kstage_perf_adios2: the ADIOS2 bridge against ADIOS2 used directly (issue 30, part 5).
//
// For N prims (a path range /sim/p[0, N)) holding one sealed float32 x 3 attribute:
//   checkpoint   kstage_adios2_checkpoint(stage, file): one full BP5 step (paths, schema,
//                values), against ADIOS2 writing the same {N, 3} array from the client's memory
//                (BP5, one step, Put deferred, EndStep, Close) -- what a code without kstage
//                writes for the same state.
//   restart      kstage_adios2_restart into a fresh stage (its creation not timed): paths
//                interned, column made, values written and sealed, against ADIOS2 reading the
//                {N, 3} array into memory allocated for it (the restart's buffer: not
//                pre-touched, as a restarting code's is not).
// Runs alternate (kstage, direct, kstage, ...) so that drifts of the VM's disk and page cache
// hit both; each figure is the median of its runs. Files go to --dir (default: the results
// folder); both write the same bytes of values to the same file system.
//
// Results: <out>/adios2.csv (workload, rows, kstage_s, direct_s, ratio = direct_s / kstage_s,
// so that >= 1 means kstage is as fast); perf/report.py holds the ratios to >= 0.9x.
//
//   kstage_perf_adios2 [--smoke | --quick | --full] [--rows N] [--reps R] --out DIR [--dir DIR]
#include "harness.hpp"  // the suite's clock and deterministic data (its inline parts only)

#include <kstage/kstage_adios2.h>

#include <adios2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using kperf::Clock;
using kperf::seconds_since;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "kstage_perf_adios2: %s\n", what.c_str());
  std::exit(1);
}
void check(kstage_status_t st, const char* call) {
  if (st != KSTAGE_OK) die(std::string(call) + ": " + kstage_last_error());
}
void check_bridge(kstage_status_t st, const char* call) {
  if (st != KSTAGE_OK) die(std::string(call) + ": " + kstage_adios2_last_error());
}

// The source state: a stage with the range and one sealed float32 x 3 column.
struct Source {
  uint64_t n = 0;
  std::vector<float> values;  // also the direct writer's client memory
  kstage_stage_t stage = 0;
  explicit Source(uint64_t rows) : n(rows), values(size_t(rows) * 3) {
    kperf::fill_values(values.data(), n, 3, 1);
    kstage_config_t c = kstage_config_init();
    check(kstage_create(&c, &stage), "kstage_create");
    kstage_path_t first = 0;
    check(kstage_intern_path_range(stage, "/sim", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0, n, &first),
          "kstage_intern_path_range");
    kstage_query_t q = 0;
    check(kstage_query_range(stage, first, 0, 0, 0, &q), "kstage_query_range");
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
    check(kstage_write_attribute(stage, q, pos, 1, &d, KSTAGE_PRIM_MODE_UPSERT, &op), "kstage_write_attribute");
    check(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE), "kstage_wait");
    check(kstage_release_op(stage, op), "kstage_release_op");
    check(kstage_advance_write_floor(stage, 1, &pos, 1), "kstage_advance_write_floor");
    check(kstage_query_release(stage, q), "kstage_query_release");
  }
  ~Source() { kstage_destroy(stage); }
};

// ADIOS2 used directly: one step with the {N, 3} array.
void direct_write(adios2::ADIOS& ad, const std::string& file, const Source& s, int run) {
  adios2::IO io = ad.DeclareIO("direct_write_" + std::to_string(run));
  io.SetEngine("BP5");
  auto var = io.DefineVariable<float>("pos", {s.n, 3}, {0, 0}, {s.n, 3});
  adios2::Engine e = io.Open(file, adios2::Mode::Write);
  e.BeginStep();
  e.Put(var, s.values.data());
  e.EndStep();
  e.Close();
  ad.RemoveIO(io.Name());
}

// ADIOS2 used directly: the array read back into memory allocated for it.
float* direct_read(adios2::ADIOS& ad, const std::string& file, uint64_t n, int run) {
  adios2::IO io = ad.DeclareIO("direct_read_" + std::to_string(run));
  io.SetEngine("BP5");
  adios2::Engine e = io.Open(file, adios2::Mode::Read);
  e.BeginStep();
  auto var = io.InquireVariable<float>("pos");
  if (!var || var.Shape() != adios2::Dims{n, 3}) die("the direct file has no {N, 3} 'pos'");
  float* out = static_cast<float*>(std::malloc(size_t(n) * 12));
  e.Get(var, out, adios2::Mode::Deferred);
  e.EndStep();
  e.Close();
  ad.RemoveIO(io.Name());
  return out;
}

// The restarted stage's values equal the source's (a compact host read).
std::string verify_stage(kstage_stage_t stage, const Source& s) {
  kstage_token_t pos = 0;
  check(kstage_intern_token(stage, "pos", KSTAGE_NUL_TERMINATED, &pos), "kstage_intern_token");
  kstage_path_t first = 0;  // the restart interned the range: the same range again is it
  check(kstage_intern_path_range(stage, "/sim", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, 0, s.n, &first),
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
    const float* v = reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset);
    for (uint64_t i = 0; i < g.prim_count && error.empty(); ++i) {
      const uint64_t row = g.prims[i] - first;
      const uint64_t at = g.data.index_map ? g.data.index_map[i] : i;
      if (std::memcmp(v + at * 3, s.values.data() + row * 3, 12) != 0) error = "restart: prim " + std::to_string(row) + " differs";
    }
    seen += g.prim_count;
    kstage_release_group(stage, g.handle);
  }
  if (st != KSTAGE_END_OF_ITERATION) check(st, "kstage_fetch_read_next");
  kstage_release_read(stage, r);
  kstage_query_release(stage, q);
  if (error.empty() && seen != s.n) error = "restart: " + std::to_string(seen) + " prims read, not " + std::to_string(s.n);
  return error;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t rows = 10'000'000;
  int reps = 5;
  std::string out, dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { if (i + 1 >= argc) die(a + " needs a value"); return std::string(argv[++i]); };
    if (a == "--smoke") rows = 10'000, reps = 1;
    else if (a == "--quick") rows = 1'000'000, reps = 3;
    else if (a == "--full") rows = 10'000'000, reps = 5;
    else if (a == "--rows") rows = uint64_t(std::stod(value()));
    else if (a == "--reps") reps = std::max(1, std::stoi(value()));
    else if (a == "--out") out = value();
    else if (a == "--dir") dir = value();
    else die("unknown argument '" + a + "'");
  }
  if (out.empty()) die("--out DIR is required");
  if (dir.empty()) dir = out + "/adios2-files";
  std::filesystem::create_directories(out);
  std::filesystem::create_directories(dir);
  const std::string kfile = dir + "/kstage.bp", dfile = dir + "/direct.bp";

  Source src(rows);
  adios2::ADIOS ad;
  std::vector<double> t_ck, t_dw, t_rs, t_dr;
  std::string error;
  for (int run = 0; run <= reps; ++run) {  // run 0 warms the page cache and the libraries
    auto t0 = Clock::now();
    check_bridge(kstage_adios2_checkpoint(src.stage, kfile.c_str()), "kstage_adios2_checkpoint");
    const double ck = seconds_since(t0);
    t0 = Clock::now();
    direct_write(ad, dfile, src, run);
    const double dw = seconds_since(t0);

    kstage_stage_t fresh = 0;
    kstage_config_t c = kstage_config_init();
    check(kstage_create(&c, &fresh), "kstage_create");
    t0 = Clock::now();
    check_bridge(kstage_adios2_restart(fresh, kfile.c_str(), nullptr), "kstage_adios2_restart");
    const double rs = seconds_since(t0);
    if (run == 0) error = verify_stage(fresh, src);
    kstage_destroy(fresh);
    t0 = Clock::now();
    float* back = direct_read(ad, dfile, rows, run);
    const double dr = seconds_since(t0);
    if (run == 0 && error.empty() && std::memcmp(back, src.values.data(), size_t(rows) * 12) != 0)
      error = "the direct read differs from what was written";
    std::free(back);
    if (!error.empty()) die(error);
    if (run == 0) continue;
    t_ck.push_back(ck), t_dw.push_back(dw), t_rs.push_back(rs), t_dr.push_back(dr);
  }

  std::ofstream csv(out + "/adios2.csv");
  csv << "workload,rows,dtype,lanes,reps,kstage_s,direct_s,ratio,payload_bytes\n";
  const double payload = double(rows) * 12;
  auto row = [&](const char* name, const std::vector<double>& k, const std::vector<double>& d) {
    const double ks = median(k), ds = median(d);
    csv << name << ',' << rows << ",float32,3," << k.size() << ',' << ks << ',' << ds << ',' << ds / ks << ',' << payload << '\n';
    std::printf("%-10s rows=%llu  kstage %.4f s (%.2f GB/s)  direct ADIOS2 %.4f s (%.2f GB/s)  ratio %.2fx\n", name,
                (unsigned long long)rows, ks, payload / ks * 1e-9, ds, payload / ds * 1e-9, ds / ks);
  };
  row("checkpoint", t_ck, t_dw);
  row("restart", t_rs, t_dr);
  std::filesystem::remove_all(dir);
  return 0;
}
