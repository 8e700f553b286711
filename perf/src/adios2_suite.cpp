// SPDX-License-Identifier: Apache-2.0
// kstage_perf_adios2: the ADIOS2 bridge against ADIOS2 used directly (issue 30, part 5).
//
// For N prims (a path range /sim/p[0, N)) holding one sealed float32 x 3 attribute:
//   checkpoint   kstage_adios2_checkpoint(stage, file): one full BP5 step (paths, schema,
//                values), against ADIOS2 writing the same {N, 3} array from the client's memory
//                (BP5, one step, Put deferred, EndStep, Close) -- what a code without kstage
//                writes for the same state.
//   checkpoint_durable   the same kstage checkpoint (which flushes its files and folder to
//                stable storage and seals them with a manifest: docs/adios2.md), against ADIOS2
//                writing the same array and then flushing its files and folder (fsync) -- what a
//                code without kstage must do for a checkpoint as durable. (`checkpoint` above
//                compares it with ADIOS2 leaving the bytes in the page cache.)
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
//                      [--transports]   (also ADIOS2's direct read through stdio vs POSIX: printed)
#include "adios2_source.hpp"  // the source state, its check, medians
#include "harness.hpp"        // the suite's clock (its inline parts only)

#include <kstage/kstage_adios2.h>

#include <adios2.h>

#include <fcntl.h>
#include <unistd.h>

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

using kperf_adios2::check;
using kperf_adios2::die;
using kperf_adios2::median;
using kperf_adios2::Source;
using kperf_adios2::verify_stage;

void check_bridge(kstage_status_t st, const char* call) {
  if (st != KSTAGE_OK) die(std::string(call) + ": " + kstage_adios2_last_error());
}

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

// What makes a folder durable (fsync of each file, the folder, its parent): the direct write's
// share of what kstage_adios2_checkpoint does.
void sync(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) die("fsync of " + path + " failed");
  ::close(fd);
}
void sync_folder(const std::string& folder) {
  for (const auto& e : std::filesystem::directory_iterator(folder))
    if (e.is_regular_file()) sync(e.path().string());
  sync(folder);
  sync(std::filesystem::path(folder).parent_path().string());
}

// ADIOS2 used directly: the array read back into memory allocated for it. `stdio`: through
// ADIOS2's stdio transport, as the bridge's readers read (--transports; else its default, POSIX).
float* direct_read(adios2::ADIOS& ad, const std::string& file, uint64_t n, int run,
                   bool stdio = false) {
  adios2::IO io = ad.DeclareIO("direct_read_" + std::to_string(run) + (stdio ? "_stdio" : ""));
  io.SetEngine("BP5");
  if (stdio) io.AddTransport("File", {{"Library", "stdio"}});
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

}  // namespace

[[noreturn]] void kperf_adios2::die(const std::string& what) {
  std::fprintf(stderr, "kstage_perf_adios2: %s\n", what.c_str());
  std::exit(1);
}

int main(int argc, char** argv) {
  uint64_t rows = 10'000'000;
  int reps = 5;
  std::string out, dir;
  bool transports = false;  // also ADIOS2's direct read through stdio against POSIX (printed)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) die(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--smoke") rows = 10'000, reps = 1;
    else if (a == "--quick") rows = 1'000'000, reps = 3;
    else if (a == "--full") rows = 10'000'000, reps = 5;
    else if (a == "--rows") rows = uint64_t(std::stod(value()));
    else if (a == "--reps") reps = std::max(1, std::stoi(value()));
    else if (a == "--out") out = value();
    else if (a == "--dir") dir = value();
    else if (a == "--transports") transports = true;
    else die("unknown argument '" + a + "'");
  }
  if (out.empty()) die("--out DIR is required");
  if (dir.empty()) dir = out + "/adios2-files";
  std::filesystem::create_directories(out);
  std::filesystem::create_directories(dir);
  const std::string kfile = dir + "/kstage.bp", dfile = dir + "/direct.bp";

  Source src(rows, 0);
  adios2::ADIOS ad;
  std::vector<double> t_ck, t_dw, t_dd, t_rs, t_dr, t_ds;
  std::string error;
  for (int run = 0; run <= reps; ++run) {  // run 0 warms the page cache and the libraries
    auto t0 = Clock::now();
    check_bridge(kstage_adios2_checkpoint(src.stage, kfile.c_str()), "kstage_adios2_checkpoint");
    const double ck = seconds_since(t0);
    t0 = Clock::now();
    direct_write(ad, dfile, src, run);
    const double dw = seconds_since(t0);
    t0 = Clock::now();
    direct_write(ad, dfile, src, 1000 + run);
    sync_folder(dfile);
    const double dd = seconds_since(t0);

    kstage_stage_t fresh = 0;
    kstage_config_t c = kstage_config_init();
    check(kstage_create(&c, &fresh), "kstage_create");
    t0 = Clock::now();
    check_bridge(kstage_adios2_restart(fresh, kfile.c_str(), nullptr), "kstage_adios2_restart");
    const double rs = seconds_since(t0);
    if (run == 0) error = verify_stage(fresh, src);
    kstage_destroy(fresh);
    // (--transports: the same read through stdio, before the POSIX one in odd runs, after it in
    // even ones)
    double ds = 0;
    auto stdio_read = [&] {
      t0 = Clock::now();
      float* b = direct_read(ad, dfile, rows, run, true);
      ds = seconds_since(t0);
      if (run == 0 && std::memcmp(b, src.values.data(), size_t(rows) * 12) != 0)
        die("the direct read through stdio differs from what was written");
      std::free(b);
    };
    if (transports && run % 2 == 1) stdio_read();
    t0 = Clock::now();
    float* back = direct_read(ad, dfile, rows, run);
    const double dr = seconds_since(t0);
    if (run == 0 && error.empty() && std::memcmp(back, src.values.data(), size_t(rows) * 12) != 0)
      error = "the direct read differs from what was written";
    std::free(back);
    if (!error.empty()) die(error);
    if (transports && run % 2 == 0) stdio_read();
    if (run == 0) continue;
    if (transports) t_ds.push_back(ds);
    t_ck.push_back(ck), t_dw.push_back(dw), t_dd.push_back(dd), t_rs.push_back(rs),
        t_dr.push_back(dr);
  }

  std::ofstream csv(out + "/adios2.csv");
  csv << "workload,rows,dtype,lanes,reps,kstage_s,direct_s,ratio,payload_bytes\n";
  const double payload = double(rows) * 12;
  auto row = [&](const char* name, const std::vector<double>& k, const std::vector<double>& d) {
    const double ks = median(k), ds = median(d);
    csv << name << ',' << rows << ",float32,3," << k.size() << ',' << ks << ',' << ds << ','
        << ds / ks << ',' << payload << '\n';
    std::printf(
        "%-18s rows=%llu  kstage %.4f s (%.2f GB/s)  direct ADIOS2 %.4f s (%.2f GB/s)  ratio "
        "%.2fx\n",
        name, (unsigned long long)rows, ks, payload / ks * 1e-9, ds, payload / ds * 1e-9, ds / ks);
  };
  row("checkpoint", t_ck, t_dw);
  row("checkpoint_durable", t_ck, t_dd);
  row("restart", t_rs, t_dr);
  if (transports)  // printed only: ADIOS2 alone, its stdio transport against POSIX
    std::printf(
        "direct read: POSIX %.4f s (min %.4f), stdio %.4f s (min %.4f): stdio/POSIX %.2fx\n",
        median(t_dr), *std::min_element(t_dr.begin(), t_dr.end()), median(t_ds),
        *std::min_element(t_ds.begin(), t_ds.end()), median(t_ds) / median(t_dr));
  std::filesystem::remove_all(dir);
  return 0;
}
