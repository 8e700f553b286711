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
#include "harness.hpp"  // the suite's clock and deterministic data (its inline parts only)

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

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "kstage_perf_adios2_mpi: rank %d: %s\n", g_rank, what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}
void check(kstage_status_t st, const char* call) {
  if (st != KSTAGE_OK) die(std::string(call) + ": " + kstage_last_error());
}
void check_bridge(kstage_status_t st, const char* call) {
  if (st != KSTAGE_OK) die(std::string(call) + ": " + kstage_adios2_last_error());
}

// This rank's source state: its range of prims and one sealed float32 x 3 column.
struct Source {
  uint64_t n = 0, first_row = 0;
  std::vector<float> values;  // also the direct writer's client memory
  kstage_stage_t stage = 0;
  Source(uint64_t rows, uint64_t first) : n(rows), first_row(first), values(size_t(rows) * 3) {
    kperf::fill_values(values.data(), n, 3, 1 + first);
    kstage_config_t c = kstage_config_init();
    check(kstage_create(&c, &stage), "kstage_create");
    kstage_path_t p0 = 0;
    check(kstage_intern_path_range(stage, "/sim", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, first, n, &p0),
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
    check(kstage_write_attribute(stage, q, pos, 1, &d, KSTAGE_PRIM_MODE_UPSERT, &op), "kstage_write_attribute");
    check(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE), "kstage_wait");
    check(kstage_release_op(stage, op), "kstage_release_op");
    check(kstage_advance_write_floor(stage, 1, &pos, 1), "kstage_advance_write_floor");
    check(kstage_query_release(stage, q), "kstage_query_release");
  }
  ~Source() { kstage_destroy(stage); }
};

void direct_write(adios2::ADIOS& ad, const std::string& file, const Source& s, uint64_t total, int run) {
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

float* direct_read(adios2::ADIOS& ad, const std::string& file, const Source& s, uint64_t total, int run) {
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

// The restarted stage holds this rank's prims, with its values (a compact host read).
std::string verify_stage(kstage_stage_t stage, const Source& s) {
  kstage_token_t pos = 0;
  check(kstage_intern_token(stage, "pos", KSTAGE_NUL_TERMINATED, &pos), "kstage_intern_token");
  kstage_attribute_info_t info = kstage_attribute_info_init();
  check(kstage_attribute_info(stage, pos, &info), "kstage_attribute_info");
  if (info.prim_count != s.n) return "restart: " + std::to_string(info.prim_count) + " prims, not " + std::to_string(s.n);
  kstage_path_t first = 0;
  check(kstage_intern_path_range(stage, "/sim", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED, s.first_row, s.n,
                                 &first),
        "kstage_intern_path_range");
  kstage_query_t q = 0;
  check(kstage_query_range(stage, first, 0, 0, 0, &q), "kstage_query_range");
  kstage_read_desc_t rd = kstage_read_desc_init();
  rd.compact = 1;
  kstage_read_t r = 0;
  check(kstage_read_attributes(stage, q, &pos, 1, &rd, &r), "kstage_read_attributes");
  std::string error;
  kstage_read_group_t g;
  while (kstage_fetch_read_next(stage, r, KSTAGE_TIMEOUT_INFINITE, &g) == KSTAGE_OK) {
    const DLTensor& t = g.data.tensors[0];
    const float* v = reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset);
    for (uint64_t i = 0; i < g.prim_count && error.empty(); ++i)
      if (std::memcmp(v + i * 3, s.values.data() + (g.prims[i] - first) * 3, 12) != 0)
        error = "restart: prim " + std::to_string(s.first_row + g.prims[i] - first) + " differs";
    kstage_release_group(stage, g.handle);
  }
  kstage_release_read(stage, r);
  kstage_query_release(stage, q);
  return error;
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  uint64_t rows = 10'000'000;
  int reps = 5;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { if (i + 1 >= argc) die(a + " needs a value"); return std::string(argv[++i]); };
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
      check_bridge(kstage_adios2_checkpoint_mpi(src.stage, kfile.c_str(), MPI_COMM_WORLD), "kstage_adios2_checkpoint_mpi");
    });
    const double dw = timed([&] { direct_write(ad, dfile, src, total, r); });
    kstage_stage_t fresh = 0;
    kstage_config_t c = kstage_config_init();
    check(kstage_create(&c, &fresh), "kstage_create");
    const double rs = timed([&] {
      check_bridge(kstage_adios2_restart_mpi(fresh, kfile.c_str(), MPI_COMM_WORLD, nullptr), "kstage_adios2_restart_mpi");
    });
    if (r == 0) {
      const std::string error = verify_stage(fresh, src);
      if (!error.empty()) die(error);
    }
    kstage_destroy(fresh);
    float* back = nullptr;
    const double dr = timed([&] { back = direct_read(ad, dfile, src, total, r); });
    if (r == 0 && std::memcmp(back, src.values.data(), size_t(n) * 12) != 0) die("the direct read differs");
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
      csv << name << ',' << g_size << ',' << total << ",float32,3," << k.size() << ',' << ks << ',' << ds << ','
          << ds / ks << ',' << payload << '\n';
      std::printf("%-10s ranks=%d rows=%llu  kstage %.4f s (%.2f GB/s)  direct ADIOS2 %.4f s (%.2f GB/s)  ratio %.2fx\n",
                  name, g_size, (unsigned long long)total, ks, payload / ks * 1e-9, ds, payload / ds * 1e-9, ds / ks);
    };
    row("checkpoint", t_ck, t_dw);
    row("restart", t_rs, t_dr);
    std::filesystem::remove_all(dir);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int rc = run(argc, argv);
  MPI_Finalize();
  return rc;
}
