// SPDX-License-Identifier: Apache-2.0
// kstage_perf_adios2_mpi: the ADIOS2 bridge on MPI ranks against ADIOS2 used directly on the
// same ranks (issue 30: the MPI form). Run by mpirun on P ranks:
//
// For N prims in all (rank r holds the path range /sim/p[r n, (r + 1) n), n = N / P) holding
// one sealed float32 x 3 attribute:
//   checkpoint   kstage_adios2_checkpoint_mpi(stage, file, comm): one full BP5 step, each rank
//                its block of every array (paths, schema, values), against ADIOS2 on the same
//                communicator writing the same global {N, 3} array, each rank its {n, 3} block
//                from its client memory (BP5, Put deferred, EndStep, Close);
//   restart      kstage_adios2_restart_mpi on the same P ranks into fresh stages, against each
//                rank reading its block of the array into memory allocated for it.
// A figure is the time from a barrier before the call to a barrier after it on every rank (the
// slowest rank's), the median of the runs; runs alternate kstage and direct. Rank 0 writes
// <out>/adios2_mpi.csv (workload, ranks, rows, kstage_s, direct_s, ratio = direct_s /
// kstage_s) and prints the ratios.
//
//   mpirun -n P kstage_perf_adios2_mpi [--smoke | --quick | --full] [--rows N] [--reps R] --out DIR
#include "adios2_source.hpp"  // the source state, its check, medians
#include "harness.hpp"        // the suite's clock (its inline parts only)

#include <kstage/kstage_adios2_mpi.h>

#include <adios2.h>
#include <mpi.h>

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

int g_rank = 0, g_size = 1;

using kperf_adios2::check;
using kperf_adios2::die;
using kperf_adios2::median;
using kperf_adios2::Source;
using kperf_adios2::verify_stage;

void check_bridge(kstage_status_t st, const char* call) {
  if (st != KSTAGE_OK) die(std::string(call) + ": " + kstage_adios2_last_error());
}

void direct_write(adios2::ADIOS& ad, const std::string& file, const Source& s, uint64_t total,
                  int run) {
  adios2::IO io = ad.DeclareIO("direct_write_" + std::to_string(run));
  io.SetEngine("BP5");
  auto var = io.DefineVariable<float>("pos", {total, 3}, {s.first_row, 0}, {s.n, 3});
  adios2::Engine e = io.Open(file, adios2::Mode::Write);
  e.BeginStep();
  e.Put(var, s.values.data());
  e.EndStep();
  e.Close();
  ad.RemoveIO(io.Name());
}

float* direct_read(adios2::ADIOS& ad, const std::string& file, const Source& s, uint64_t total,
                   int run) {
  adios2::IO io = ad.DeclareIO("direct_read_" + std::to_string(run));
  io.SetEngine("BP5");
  adios2::Engine e = io.Open(file, adios2::Mode::Read);
  e.BeginStep();
  auto var = io.InquireVariable<float>("pos");
  if (!var || var.Shape() != adios2::Dims{total, 3}) die("the direct file has no {N, 3} 'pos'");
  var.SetSelection({{s.first_row, 0}, {s.n, 3}});
  float* out = static_cast<float*>(std::malloc(size_t(s.n) * 12));
  e.Get(var, out, adios2::Mode::Deferred);
  e.EndStep();
  e.Close();
  ad.RemoveIO(io.Name());
  return out;
}

// The slowest rank's time of `body`, from a barrier before it to a barrier after it.
template <class F>
double timed(F&& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  body();
  MPI_Barrier(MPI_COMM_WORLD);
  return seconds_since(t0);
}

int run(int argc, char** argv) {
  uint64_t rows = 10'000'000;
  int reps = 5;
  std::string out;
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
    else die("unknown argument '" + a + "'");
  }
  if (out.empty()) die("--out DIR is required");
  const std::string dir = out + "/adios2-mpi-files";
  if (g_rank == 0) {
    std::filesystem::create_directories(out);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string kfile = dir + "/kstage.bp", dfile = dir + "/direct.bp";
  const uint64_t n = rows / uint64_t(g_size), total = n * uint64_t(g_size);

  Source src(n, n * uint64_t(g_rank));
  adios2::ADIOS ad(MPI_COMM_WORLD);
  std::vector<double> t_ck, t_dw, t_rs, t_dr;
  for (int r = 0; r <= reps; ++r) {  // run 0 warms the page cache and the libraries
    const double ck = timed([&] {
      check_bridge(kstage_adios2_checkpoint_mpi(src.stage, kfile.c_str(), MPI_COMM_WORLD),
                   "kstage_adios2_checkpoint_mpi");
    });
    const double dw = timed([&] { direct_write(ad, dfile, src, total, r); });
    kstage_stage_t fresh = 0;
    kstage_config_t c = kstage_config_init();
    check(kstage_create(&c, &fresh), "kstage_create");
    const double rs = timed([&] {
      check_bridge(kstage_adios2_restart_mpi(fresh, kfile.c_str(), MPI_COMM_WORLD, nullptr),
                   "kstage_adios2_restart_mpi");
    });
    if (r == 0) {
      const std::string error = verify_stage(fresh, src);
      if (!error.empty()) die(error);
    }
    kstage_destroy(fresh);
    float* back = nullptr;
    const double dr = timed([&] { back = direct_read(ad, dfile, src, total, r); });
    if (r == 0 && std::memcmp(back, src.values.data(), size_t(n) * 12) != 0)
      die("the direct read differs");
    std::free(back);
    if (r == 0) continue;
    t_ck.push_back(ck), t_dw.push_back(dw), t_rs.push_back(rs), t_dr.push_back(dr);
  }
  if (g_rank == 0) {
    std::ofstream csv(out + "/adios2_mpi.csv");
    csv << "workload,ranks,rows,dtype,lanes,reps,kstage_s,direct_s,ratio,payload_bytes\n";
    const double payload = double(total) * 12;
    auto row = [&](const char* name, const std::vector<double>& k, const std::vector<double>& d) {
      const double ks = median(k), ds = median(d);
      csv << name << ',' << g_size << ',' << total << ",float32,3," << k.size() << ',' << ks << ','
          << ds << ',' << ds / ks << ',' << payload << '\n';
      std::printf(
          "%-10s ranks=%d rows=%llu  kstage %.4f s (%.2f GB/s)  direct ADIOS2 %.4f s (%.2f GB/s)  "
          "ratio %.2fx\n",
          name, g_size, (unsigned long long)total, ks, payload / ks * 1e-9, ds, payload / ds * 1e-9,
          ds / ks);
    };
    row("checkpoint", t_ck, t_dw);
    row("restart", t_rs, t_dr);
    std::filesystem::remove_all(dir);
  }
  return 0;
}

}  // namespace

[[noreturn]] void kperf_adios2::die(const std::string& what) {
  std::fprintf(stderr, "kstage_perf_adios2_mpi: rank %d: %s\n", g_rank, what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int rc = run(argc, argv);
  MPI_Finalize();
  return rc;
}
