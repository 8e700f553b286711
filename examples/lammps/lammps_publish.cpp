// SPDX-License-Identifier: Apache-2.0
// LAMMPS publishes its atoms into a kstage stage every N steps, on every MPI rank.
//
//   mpiexec -n 2 kstage_lammps_publish [--cells 10] [--steps 100] [--every 10]
//                                      [--mode publish|dump|none] [--dump-file F] [--check 1]
//
// A Lennard-Jones melt runs through LAMMPS's C library (library.h); `fix external ...
// pf/callback N 1` calls publish() every N steps with LAMMPS's own arrays. Each rank keeps one
// stage (kstage's MPI model) holding its local atoms: position, velocity, force, type and image
// flags, keyed by atom id -- the prims are the path range /lammps/atoms/atom_<id>, and the write
// maps the prims (in id order) to LAMMPS's rows with an int64 index map, reading LAMMPS's
// arrays in place (no copy is made to reorder them). Atoms that left the rank since the last
// publish (migrated, lost, deleted) are deleted from its stage. Sealed at timestep + 1.
//
// After each publish every rank reads its stage back and the ranks sum what they hold: rank 0
// prints one line per publish -- atoms, the sums of the ids and of their squares (every id
// 1..N exactly once over the ranks), and the sum of the squared positions -- which must not
// depend on the number of ranks; and each rank checks its stage against LAMMPS's local atoms.
// The last
// lines give the time spent in publish() against the run's (--mode dump: the same columns
// written by LAMMPS's `dump custom` instead; --mode none: neither, the step time alone).
#include <kstage/kstage.h>
#include <mpi.h>

#define LAMMPS_LIB_MPI 1
#include <lammps/library.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// A kstage call that fails ends the program with kstage's message (an example: a real code
// would report and carry on, as the Python example does).
void check(kstage_status_t st, const char* what) {
  if (st != KSTAGE_OK) {
    std::fprintf(stderr, "lammps_publish: %s: %s: %s\n", what, kstage_status_string(st),
                 kstage_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

DLTensor host_tensor(void* data, int64_t* shape, DLDataTypeCode code, int bits, int lanes) {
  DLTensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.shape = shape;
  t.dtype.code = static_cast<uint8_t>(code);
  t.dtype.bits = static_cast<uint8_t>(bits);
  t.dtype.lanes = static_cast<uint16_t>(lanes);
  return t;
}

struct Publisher {
  void* lmp = nullptr;
  kstage_stage_t stage = 0;
  kstage_path_t first = 0;  // atom id t is prim first + t - 1
  int64_t natoms = 0;
  kstage_token_t attrs[5] = {};
  // Reused between publishes: no allocation once they have grown.
  std::vector<int64_t> order, ids, previous, gone, row_of;
  std::vector<kstage_path_t> paths;
  std::vector<int32_t> image3;
  double publish_seconds = 0.0, first_seconds = 0.0;
  int publishes = 0;
  int rank = 0;

  void intern() {
    check(kstage_intern_path_range(stage, "/lammps/atoms", KSTAGE_NUL_TERMINATED, "atom_",
                                   KSTAGE_NUL_TERMINATED, 1, static_cast<uint64_t>(natoms), &first),
          "intern the atom range");
    const char* names[5] = {"position", "velocity", "force", "type", "image"};
    for (int i = 0; i < 5; ++i)
      check(kstage_intern_token(stage, names[i], KSTAGE_NUL_TERMINATED, &attrs[i]), names[i]);
  }

  kstage_query_t query_of(const int64_t* sorted, size_t n) {
    kstage_query_t q = 0;
    if (n > 0 && sorted[n - 1] - sorted[0] == static_cast<int64_t>(n) - 1) {
      check(kstage_query_range(stage, first, static_cast<uint64_t>(sorted[0] - 1), n, 1, &q),
            "query a run of atoms");
      return q;
    }
    paths.resize(n);
    for (size_t i = 0; i < n; ++i) paths[i] = first + static_cast<uint64_t>(sorted[i] - 1);
    check(kstage_query_paths(stage, paths.data(), n, &q), "query the atoms");
    return q;
  }

  void publish(int64_t timestep, int nlocal, const int* tag, double** x) {
    const double t0 = seconds();
    const size_t n = static_cast<size_t>(nlocal);
    const uint64_t ordinal = static_cast<uint64_t>(timestep) + 1;
    // The prims in id order, each taking its LAMMPS row: ids are 1..natoms, so a counting pass
    // over the rank's id span orders them in O(n + span) (a comparison sort of 256,000 rows
    // cost more than the whole write).
    int64_t lo = natoms + 1, hi = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t id = tag[i];
      if (id < 1 || id > natoms) {
        std::fprintf(stderr,
                     "lammps_publish: atom id %" PRId64 " is beyond the range 1..%" PRId64 "\n", id,
                     natoms);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      lo = std::min(lo, id);
      hi = std::max(hi, id);
    }
    order.resize(n);
    ids.resize(n);
    if (n > 0) {
      row_of.assign(static_cast<size_t>(hi - lo + 1), -1);
      for (size_t i = 0; i < n; ++i)
        row_of[static_cast<size_t>(tag[i] - lo)] = static_cast<int64_t>(i);
      size_t k = 0;
      for (size_t j = 0; j < row_of.size(); ++j)
        if (row_of[j] >= 0) {
          order[k] = row_of[j];
          ids[k++] = lo + static_cast<int64_t>(j);
        }
    }
    std::vector<kstage_op_t> ops;
    if (n > 0) {
      auto** v = static_cast<double**>(lammps_extract_atom(lmp, "v"));
      auto** f = static_cast<double**>(lammps_extract_atom(lmp, "f"));
      auto* type = static_cast<int*>(lammps_extract_atom(lmp, "type"));
      auto* image = static_cast<int*>(lammps_extract_atom(lmp, "image"));
      // LAMMPS packs the image flags in one int (10 bits a dimension): unpacked here.
      image3.resize(3 * n);
      for (size_t i = 0; i < n; ++i) {
        const int img = image[i];
        image3[3 * i + 0] = (img & 1023) - 512;
        image3[3 * i + 1] = ((img >> 10) & 1023) - 512;
        image3[3 * i + 2] = (img >> 20) - 512;
      }
      int64_t shape[1] = {nlocal};
      DLTensor t[5] = {
          host_tensor(x[0], shape, kDLFloat, 64, 3), host_tensor(v[0], shape, kDLFloat, 64, 3),
          host_tensor(f[0], shape, kDLFloat, 64, 3), host_tensor(type, shape, kDLInt, 32, 1),
          host_tensor(image3.data(), shape, kDLInt, 32, 3)};
      const kstage_semantic_t semantics[5] = {KSTAGE_SEMANTIC_POINT, KSTAGE_SEMANTIC_VECTOR,
                                              KSTAGE_SEMANTIC_VECTOR, KSTAGE_SEMANTIC_NONE,
                                              KSTAGE_SEMANTIC_NONE};
      kstage_write_data_t data[5];
      for (int a = 0; a < 5; ++a) {
        data[a] = kstage_write_data_init();
        data[a].tensors = &t[a];
        data[a].tensor_count = 1;
        data[a].semantic = semantics[a];
        data[a].count = n;
        data[a].index_map64 = order.data();  // prim i (the i-th smallest id) is LAMMPS row order[i]
      }
      kstage_query_t q = query_of(ids.data(), n);
      kstage_op_t op = 0;
      check(
          kstage_write_attributes(stage, q, attrs, data, 5, ordinal, KSTAGE_PRIM_MODE_UPSERT, &op),
          "write the atoms");
      ops.push_back(op);
      check(kstage_query_release(stage, q), "release a query");
    }
    // The atoms this rank held last time and holds no more.
    gone.clear();
    std::set_difference(previous.begin(), previous.end(), ids.begin(), ids.end(),
                        std::back_inserter(gone));
    if (!gone.empty()) {
      kstage_query_t q = query_of(gone.data(), gone.size());
      kstage_op_t op = 0;
      check(kstage_delete_attributes(stage, q, nullptr, 0, ordinal, &op), "delete departed atoms");
      ops.push_back(op);
      check(kstage_query_release(stage, q), "release a query");
    }
    for (kstage_op_t op : ops) {
      check(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE), "wait");
      check(kstage_release_op(stage, op), "release an op");
    }
    check(kstage_advance_write_floor(stage, ordinal, nullptr, 0), "seal");
    previous.swap(ids);
    // The first publish creates every prim: counted apart from the steady state.
    (publishes == 0 ? first_seconds : publish_seconds) += seconds() - t0;
    ++publishes;
  }
};

void callback(void* ptr, int64_t timestep, int nlocal, int* tag, double** x, double** fext) {
  auto* p = static_cast<Publisher*>(ptr);
  for (int i = 0; i < nlocal; ++i) fext[i][0] = fext[i][1] = fext[i][2] = 0.0;
  p->publish(timestep, nlocal, tag, x);
}

// What this rank's stage holds, summed over the ranks: atoms, sum of ids and of their squares,
// sum of the squared positions; and the check of the stage against LAMMPS's local atoms.
struct Census {
  double atoms = 0, ids = 0, ids2 = 0, pos = 0;
};

Census census(Publisher& p, double** x, const int* tag, int nlocal) {
  kstage_query_t q = 0;
  kstage_filter_t filter;
  std::memset(&filter, 0, sizeof filter);
  check(kstage_intern_path(p.stage, "/lammps/atoms", KSTAGE_NUL_TERMINATED, &filter.path_prefix),
        "intern /lammps/atoms");
  check(kstage_query_filter(p.stage, &filter, &q), "query the stage's atoms");
  kstage_read_desc_t desc = kstage_read_desc_init();
  kstage_read_t read = 0;
  check(kstage_read_attributes(p.stage, q, &p.attrs[0], 1, &desc, &read), "read positions");
  Census mine;
  double lammps_pos = 0;
  // The squared distances from the origin: a sum that moves with every atom (a plain sum would
  // be N times the centre of mass, which a momentum-free melt keeps still between wraps) and
  // does not depend on which atom got which id (create_atoms numbers them per rank).
  for (int i = 0; i < nlocal; ++i)
    lammps_pos += x[i][0] * x[i][0] + x[i][1] * x[i][1] + x[i][2] * x[i][2];
  kstage_read_group_t g;
  while (kstage_fetch_read_next(p.stage, read, KSTAGE_TIMEOUT_INFINITE, &g) == KSTAGE_OK) {
    const auto* rows = static_cast<const double*>(g.data.tensors[0].data);
    for (uint64_t i = 0; i < g.prim_count; ++i) {
      const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
      const double id = static_cast<double>(g.prims[i] - p.first + 1);
      mine.atoms += 1;
      mine.ids += id;
      mine.ids2 += id * id;
      const double* r = rows + 3 * row;
      mine.pos += r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    }
    check(kstage_release_group(p.stage, g.handle), "release a group");
  }
  check(kstage_release_read(p.stage, read), "release the read");
  check(kstage_query_release(p.stage, q), "release the query");
  // The stage holds exactly LAMMPS's local atoms, at LAMMPS's positions.
  double local_ids = 0;
  for (int i = 0; i < nlocal; ++i) local_ids += tag[i];
  if (mine.atoms != nlocal || mine.ids != local_ids ||
      std::fabs(mine.pos - lammps_pos) > 1e-9 * std::max(1.0, std::fabs(lammps_pos))) {
    std::fprintf(stderr,
                 "lammps_publish: rank %d: the stage holds %.0f atoms (ids %.0f, positions %.17g), "
                 "LAMMPS %d (ids %.0f, positions %.17g)\n",
                 p.rank, mine.atoms, mine.ids, mine.pos, nlocal, local_ids, lammps_pos);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Census all;
  MPI_Allreduce(&mine, &all, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

const char* kMelt =
    "units lj\n"
    "atom_style atomic\n"
    "atom_modify map array sort 50 0.0\n"
    "lattice fcc 0.8442\n"
    "region box block 0 %d 0 %d 0 %d\n"
    "create_box 1 box\n"
    "create_atoms 1 box\n"
    "mass 1 1.0\n"
    "velocity all create 3.0 87287 loop geom\n"
    "pair_style lj/cut 2.5\n"
    "pair_coeff 1 1 1.0 1.0 2.5\n"
    "neighbor 0.3 bin\n"
    "neigh_modify every 20 delay 0 check no\n"
    "fix 1 all nve\n";

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int cells = 10, steps = 100, every = 10;
  std::string mode = "publish", dump_file = "atoms.dump";
  bool check_census = true;  // --check 0: no read-back between runs (for timings alone)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--cells") cells = std::atoi(argv[i + 1]);
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--every") every = std::atoi(argv[i + 1]);
    else if (k == "--mode") mode = argv[i + 1];
    else if (k == "--dump-file") dump_file = argv[i + 1];
    else if (k == "--check") check_census = std::atoi(argv[i + 1]) != 0;
    else {
      if (rank == 0) std::fprintf(stderr, "lammps_publish: unknown option %s\n", k.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  const char* lmp_args[] = {"lammps_publish", "-log", "none", "-screen", "none", "-nocite"};
  void* lmp = lammps_open(6, const_cast<char**>(lmp_args), MPI_COMM_WORLD, nullptr);
  char input[1024];
  std::snprintf(input, sizeof input, kMelt, cells, cells, cells);
  lammps_commands_string(lmp, input);

  Publisher pub;
  pub.lmp = lmp;
  pub.rank = rank;
  pub.natoms = static_cast<int64_t>(lammps_get_natoms(lmp));
  check(kstage_create(nullptr, &pub.stage), "create a stage");
  pub.intern();

  char command[512];
  if (mode == "publish") {
    std::snprintf(command, sizeof command, "fix ext all external pf/callback %d 1", every);
    lammps_command(lmp, command);
    lammps_set_fix_external_callback(lmp, "ext", callback, &pub);
  } else if (mode == "dump") {
    std::snprintf(command, sizeof command,
                  "dump d all custom %d %s id type x y z vx vy vz fx fy fz ix iy iz", every,
                  dump_file.c_str());
    lammps_command(lmp, command);
  } else if (mode != "none") {
    if (rank == 0) std::fprintf(stderr, "lammps_publish: --mode publish|dump|none\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  lammps_command(lmp, "run 0");
  double run = 0.0;  // LAMMPS's runs (publishes included), not the checks between them
  int done = 0;
  bool ok = true;
  while (done < steps) {
    std::snprintf(command, sizeof command, "run %d pre no post no", every);
    const double t0 = seconds();
    lammps_command(lmp, command);
    run += seconds() - t0;
    done += every;
    if (lammps_has_error(lmp)) {
      char message[1024];
      lammps_get_last_error_message(lmp, message, sizeof message);
      std::fprintf(stderr, "lammps_publish: LAMMPS: %s\n", message);
      ok = false;
      break;
    }
    if (mode == "publish" && check_census) {
      const int nlocal = lammps_extract_setting(lmp, "nlocal");
      auto** x = static_cast<double**>(lammps_extract_atom(lmp, "x"));
      auto* tag = static_cast<int*>(lammps_extract_atom(lmp, "id"));
      const Census c = census(pub, x, tag, nlocal);
      const double n = static_cast<double>(pub.natoms);
      if (c.atoms != n || c.ids != n * (n + 1) / 2 || c.ids2 != n * (n + 1) * (2 * n + 1) / 6)
        ok = false;
      if (rank == 0)
        std::printf("publish step %" PRId64 ": atoms %.0f ids %.0f ids2 %.0f positions %.12e\n",
                    static_cast<int64_t>(lammps_get_thermo(lmp, "step")), c.atoms, c.ids, c.ids2,
                    c.pos);
    }
  }
  double publish = pub.publish_seconds, run_max = run, publish_max = publish;
  MPI_Reduce(&run, &run_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&publish, &publish_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  double first_max = pub.first_seconds;
  MPI_Reduce(&pub.first_seconds, &first_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("mode %s ranks %d atoms %" PRId64 " steps %d every %d: run %.4f s", mode.c_str(),
                size, pub.natoms, steps, every, run_max);
    if (mode == "publish")
      std::printf(
          ", publish %.4f s (%d publishes after the first, %.2f%% of the run; the first, "
          "creating the prims: %.4f s)",
          publish_max, pub.publishes - 1, 100.0 * publish_max / run_max, first_max);
    std::printf("\n%s\n", ok ? "lammps_publish: OK" : "lammps_publish: FAILED");
  }
  check(kstage_destroy(pub.stage), "destroy the stage");
  lammps_close(lmp);
  MPI_Finalize();
  return ok ? 0 : 1;
}
