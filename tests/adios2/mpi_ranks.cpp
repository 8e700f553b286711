// SPDX-License-Identifier: Apache-2.0
// The ADIOS2 bridge on MPI ranks (kstage/kstage_adios2_mpi.h), run by mpirun (tests/adios2/
// CMakeLists.txt, label mpi):
//
//   kstage_test_adios2_mpi write <file> <ticks>        on W ranks
//     each rank's stage holds its part of a decomposed model (below); a full step, then one
//     incremental step per tick (particles moved, migrated between ranks, deleted) to <file>,
//     and at the end a checkpoint of every rank's stage to <file>.ckpt;
//   kstage_test_adios2_mpi read <file> <writers> <ticks>       on any number Q of ranks
//     reads the steps, in order, into each rank's stage, and after each checks it against the
//     model: reading rank q must hold exactly what writers [W q / Q, W (q + 1) / Q) held;
//   kstage_test_adios2_mpi restart <file>.ckpt <writers> <ticks>   on any number of ranks
//     the same for kstage_adios2_restart_mpi of the checkpoint;
//   kstage_test_adios2_mpi serial <file> <writers> <ticks>     one process, the serial API
//     reads the steps and restarts the checkpoint: one reader holds every writer's prims;
//   kstage_test_adios2_mpi errors <dir>                 on 2 or 3 ranks
//     a failure on one rank fails the call on every rank, naming the rank, and leaves every
//     stage as it was; a prim two writers wrote fails its reader, naming it; a checkpoint of
//     the ranks with a flipped byte is refused on every rank by its manifest (#50).
//
// The model: N particles "/particles/p<i>" (writer rank r interns the path range of p<lo_r> ..
// p<N-1>, overlapping its neighbours' ranges: a reader of several writers' blocks meets ranges
// it cannot make as ranges) with "id" (uint64), "position" (float32 x 3, POINT), "neighbours"
// (int32 array, 0 to 3 entries) and, for even i, "charge" (float64: not every path holds it);
// and walls "/walls/w<k>" (explicit paths) on rank 0 only, with "label" (uint8 array: only
// rank 0 has that column) and a position. Tick t (ordinal t + 1) moves, migrates to the next
// rank and deletes particles by functions of (i, t), so any rank can say who holds what.
#include <kstage/kstage_adios2_mpi.h>

#include "stage_state.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

int g_rank = 0, g_size = 1;

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, detail.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

#define CHECK(call)                                                                            \
  do {                                                                                         \
    kstage_status_t st_ = (call);                                                              \
    if (st_ != KSTAGE_OK)                                                                      \
      die(#call, std::string(kstage_status_string(st_)) + ": " + kstage_last_error() + " | " + \
                     kstage_adios2_last_error());                                              \
  } while (0)

// ---- the model
// -----------------------------------------------------------------------------------
constexpr uint64_t kParticles = 300;
constexpr uint64_t kWalls = 4;

struct Model {
  int writers = 1;
  uint64_t ticks = 1;
  int owner0(uint64_t i) const { return int(i * uint64_t(writers) / kParticles); }
  uint64_t first_of(int r) const {  // the first particle rank r owns at tick 0
    uint64_t i = 0;
    while (i < kParticles && owner0(i) < r) ++i;
    return i;
  }
  uint64_t deleted_at(uint64_t i) const { return i % 37 == 5 ? 1 + (i / 37) % ticks : 0; }
  static bool moves(uint64_t i, uint64_t t) { return t > 0 && (i + t) % 5 == 0; }
  static bool migrates(uint64_t i, uint64_t t) { return t > 0 && (3 * i + t) % 11 == 0; }
  // Who holds particle i after tick t (-1: deleted).
  int owner(uint64_t i, uint64_t t) const {
    int o = owner0(i);
    for (uint64_t k = 1; k <= t; ++k) {
      if (deleted_at(i) == k) return -1;
      if (migrates(i, k)) o = (o + 1) % writers;
    }
    return o;
  }
  static uint64_t last_move(uint64_t i, uint64_t t) {
    for (uint64_t k = t; k > 0; --k)
      if (moves(i, k)) return k;
    return 0;
  }
  static std::vector<float> position(uint64_t i, uint64_t t) {
    return {float(i), float(last_move(i, t)), float(i) * 0.5f + float(last_move(i, t))};
  }
  static std::vector<int32_t> neighbours(uint64_t i) {
    std::vector<int32_t> n;
    for (uint64_t k = 1; k <= i % 4; ++k) n.push_back(int32_t(i + k));
    return n;
  }
  static std::string particle(uint64_t i) { return "/particles/p" + std::to_string(i); }
  static std::string wall(uint64_t k) { return "/walls/w" + std::to_string(k); }
  static std::string label(uint64_t k) { return "wall-" + std::to_string(k); }

  // What writers [b0, b1) held after tick t, as stage_state() reads it.
  kstage_adios2_test::StageState held(int b0, int b1, uint64_t t) const {
    using Column = kstage_adios2_test::StageState::Column;
    kstage_adios2_test::StageState s;
    auto column = [&](const char* name, DLDataType d, bool is_array,
                      kstage_semantic_t sem) -> Column& {
      Column& c = s.columns[name];
      c.dtype = d;
      c.is_array = is_array;
      c.semantic = sem;
      c.floor = t + 1;
      return c;
    };
    auto bytes = [](const auto& v) {
      const auto* p = reinterpret_cast<const unsigned char*>(v.data());
      return std::vector<unsigned char>(p, p + v.size() * sizeof(v[0]));
    };
    if (b1 <= b0) return s;
    // Every writer has the particle columns (each owns particles at tick 0); only rank 0 walls.
    Column& id = column("id", {kDLUInt, 64, 1}, false, KSTAGE_SEMANTIC_NONE);
    Column& pos = column("position", {kDLFloat, 32, 3}, false, KSTAGE_SEMANTIC_POINT);
    Column& nb = column("neighbours", {kDLInt, 32, 1}, true, KSTAGE_SEMANTIC_NONE);
    Column& ch = column("charge", {kDLFloat, 64, 1}, false, KSTAGE_SEMANTIC_NONE);
    for (uint64_t i = 0; i < kParticles; ++i) {
      const int o = owner(i, t);
      if (o < b0 || o >= b1) continue;
      const std::string p = particle(i);
      id.values[p] = bytes(std::vector<uint64_t>{i});
      pos.values[p] = bytes(position(i, t));
      nb.values[p] = bytes(neighbours(i));
      if (i % 2 == 0) ch.values[p] = bytes(std::vector<double>{double(i) * 0.25});
    }
    if (b0 == 0) {
      Column& label_column = column("label", {kDLUInt, 8, 1}, true, KSTAGE_SEMANTIC_NONE);
      for (uint64_t k = 0; k < kWalls; ++k) {
        const std::string l = label(k);
        label_column.values[wall(k)] = bytes(l);
        pos.values[wall(k)] = bytes(std::vector<float>{float(k), float(k), float(k)});
      }
    }
    return s;
  }
};

// ---- writing a rank's part
// -----------------------------------------------------------------------
struct Tokens {
  kstage_token_t id = 0, position = 0, neighbours = 0, charge = 0, label = 0;
  explicit Tokens(kstage_stage_t s) {
    CHECK(kstage_intern_token(s, "id", KSTAGE_NUL_TERMINATED, &id));
    CHECK(kstage_intern_token(s, "position", KSTAGE_NUL_TERMINATED, &position));
    CHECK(kstage_intern_token(s, "neighbours", KSTAGE_NUL_TERMINATED, &neighbours));
    CHECK(kstage_intern_token(s, "charge", KSTAGE_NUL_TERMINATED, &charge));
    CHECK(kstage_intern_token(s, "label", KSTAGE_NUL_TERMINATED, &label));
  }
};

void finish(kstage_stage_t s, kstage_op_t op) {
  CHECK(kstage_wait(s, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(s, op));
}

kstage_query_t query_of(kstage_stage_t s, const std::vector<std::string>& paths) {
  std::vector<const char*> texts;
  for (const std::string& p : paths) texts.push_back(p.c_str());
  std::vector<kstage_path_t> ids(paths.size());
  if (!paths.empty())
    CHECK(kstage_intern_paths(s, texts.data(), nullptr, texts.size(), ids.data()));
  kstage_query_t q = 0;
  CHECK(kstage_query_paths(s, ids.data(), ids.size(), &q));
  return q;
}

// One fixed-size write of `rows` rows of `dtype` to the prims at `paths`.
void write_rows(kstage_stage_t s, const std::vector<std::string>& paths, kstage_token_t t,
                uint64_t ordinal, void* data, DLDataType dtype, kstage_semantic_t semantic) {
  if (paths.empty()) return;
  kstage_query_t q = query_of(s, paths);
  int64_t shape[1] = {int64_t(paths.size())};
  DLTensor tensor{data, {kDLCPU, 0}, 1, dtype, shape, nullptr, 0};
  kstage_write_data_t w = kstage_write_data_init();
  w.tensors = &tensor;
  w.tensor_count = 1;
  w.semantic = semantic;
  kstage_op_t op = 0;
  CHECK(kstage_write_attribute(s, q, t, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  finish(s, op);
  CHECK(kstage_query_release(s, q));
}

// An array write: one row (`rows[k]`, of `dtype` elements) per path.
template <class T>
void write_array(kstage_stage_t s, const std::vector<std::string>& paths, kstage_token_t t,
                 uint64_t ordinal, std::vector<std::vector<T>>& rows, DLDataType dtype) {
  if (paths.empty()) return;
  kstage_query_t q = query_of(s, paths);
  std::vector<int64_t> shapes(rows.size());
  std::vector<DLTensor> tensors(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    shapes[k] = int64_t(rows[k].size());
    tensors[k] = DLTensor{rows[k].data(), {kDLCPU, 0}, 1, dtype, &shapes[k], nullptr, 0};
  }
  kstage_write_data_t w = kstage_write_data_init();
  w.tensors = tensors.data();
  w.tensor_count = tensors.size();
  w.is_array = true;
  kstage_op_t op = 0;
  CHECK(kstage_write_attribute(s, q, t, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  finish(s, op);
  CHECK(kstage_query_release(s, q));
}

// Particles `ids` arrive (or start) on this rank at `ordinal`, as they are after tick t.
void write_particles(kstage_stage_t s, const Tokens& tk, const std::vector<uint64_t>& ids,
                     uint64_t t, uint64_t ordinal) {
  std::vector<std::string> paths, even;
  std::vector<uint64_t> id_values;
  std::vector<float> pos;
  std::vector<double> charge;
  std::vector<std::vector<int32_t>> nb;
  for (uint64_t i : ids) {
    paths.push_back(Model::particle(i));
    id_values.push_back(i);
    const std::vector<float> p = Model::position(i, t);
    pos.insert(pos.end(), p.begin(), p.end());
    nb.push_back(Model::neighbours(i));
    if (i % 2 == 0) {
      even.push_back(Model::particle(i));
      charge.push_back(double(i) * 0.25);
    }
  }
  write_rows(s, paths, tk.id, ordinal, id_values.data(), {kDLUInt, 64, 1}, KSTAGE_SEMANTIC_NONE);
  write_rows(s, paths, tk.position, ordinal, pos.data(), {kDLFloat, 32, 3}, KSTAGE_SEMANTIC_POINT);
  write_array(s, paths, tk.neighbours, ordinal, nb, {kDLInt, 32, 1});
  write_rows(s, even, tk.charge, ordinal, charge.data(), {kDLFloat, 64, 1}, KSTAGE_SEMANTIC_NONE);
}

kstage_query_t everything(kstage_stage_t s) {
  kstage_filter_t all{};
  kstage_query_t q = 0;
  CHECK(kstage_query_filter(s, &all, &q));
  return q;
}

int write(const char* file, uint64_t ticks) {
  Model m{g_size, ticks};
  kstage_stage_t s = 0;
  CHECK(kstage_create(nullptr, &s));
  const Tokens tk(s);
  const uint64_t lo = m.first_of(g_rank);
  kstage_path_t first = 0;
  CHECK(kstage_intern_path_range(s, "/particles", KSTAGE_NUL_TERMINATED, "p", KSTAGE_NUL_TERMINATED,
                                 lo, kParticles - lo, &first));
  std::vector<uint64_t> mine;
  for (uint64_t i = 0; i < kParticles; ++i)
    if (m.owner0(i) == g_rank) mine.push_back(i);
  write_particles(s, tk, mine, 0, 1);
  if (g_rank == 0) {
    std::vector<std::string> walls;
    std::vector<std::vector<uint8_t>> labels;
    std::vector<float> pos;
    for (uint64_t k = 0; k < kWalls; ++k) {
      walls.push_back(Model::wall(k));
      const std::string l = Model::label(k);
      labels.emplace_back(l.begin(), l.end());
      pos.insert(pos.end(), {float(k), float(k), float(k)});
    }
    write_array(s, walls, tk.label, 1, labels, {kDLUInt, 8, 1});
    write_rows(s, walls, tk.position, 1, pos.data(), {kDLFloat, 32, 3}, KSTAGE_SEMANTIC_POINT);
  }
  CHECK(kstage_advance_write_floor(s, 1, nullptr, 0));

  kstage_adios2_stream_t w = 0;
  CHECK(kstage_adios2_open_mpi(file, nullptr, MPI_COMM_WORLD, &w));
  kstage_query_t q = everything(s);
  CHECK(kstage_adios2_write_step(w, s, q, nullptr, 0, nullptr));
  CHECK(kstage_query_release(s, q));
  for (uint64_t t = 1; t <= ticks; ++t) {
    const uint64_t ordinal = t + 1;
    std::vector<std::string> gone, moved;
    std::vector<uint64_t> arrived;
    std::vector<float> pos;
    for (uint64_t i = 0; i < kParticles; ++i) {
      const int before = m.owner(i, t - 1), now = m.owner(i, t);
      if (before == g_rank && now != g_rank)
        gone.push_back(Model::particle(i));  // deleted, or left
      if (before != g_rank && now == g_rank) arrived.push_back(i);
      if (before == g_rank && now == g_rank && Model::moves(i, t)) {
        moved.push_back(Model::particle(i));
        const std::vector<float> p = Model::position(i, t);
        pos.insert(pos.end(), p.begin(), p.end());
      }
    }
    write_rows(s, moved, tk.position, ordinal, pos.data(), {kDLFloat, 32, 3},
               KSTAGE_SEMANTIC_POINT);
    write_particles(s, tk, arrived, t, ordinal);
    if (!gone.empty()) {
      kstage_query_t g = query_of(s, gone);
      kstage_op_t op = 0;
      CHECK(kstage_delete_attributes(s, g, nullptr, 0, ordinal, &op));  // tombstones
      finish(s, op);
      CHECK(kstage_query_release(s, g));
    }
    CHECK(kstage_advance_write_floor(s, ordinal, nullptr, 0));
    // The step covers the prims that exist and those that just went (for their tombstones).
    std::vector<std::string> covered = gone;
    for (uint64_t i = 0; i < kParticles; ++i)
      if (m.owner(i, t) == g_rank) covered.push_back(Model::particle(i));
    if (g_rank == 0)
      for (uint64_t k = 0; k < kWalls; ++k) covered.push_back(Model::wall(k));
    kstage_query_t cq = query_of(s, covered);
    kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
    d.change_range = true;
    d.range_begin = d.range_end = ordinal;
    CHECK(kstage_adios2_write_step(w, s, cq, nullptr, 0, &d));
    CHECK(kstage_query_release(s, cq));
  }
  CHECK(kstage_adios2_close(w));
  if (!(kstage_adios2_test::stage_state(s) == m.held(g_rank, g_rank + 1, ticks)))
    die("write", "the writer's own stage is not the model's");
  CHECK(kstage_adios2_checkpoint_mpi(s, (std::string(file) + ".ckpt").c_str(), MPI_COMM_WORLD));
  CHECK(kstage_destroy(s));
  if (g_rank == 0) std::printf("write: %d ranks, %llu ticks\n", g_size, (unsigned long long)ticks);
  return 0;
}

// ---- reading
// ---------------------------------------------------------------------------------------
std::string describe(const kstage_adios2_test::StageState& got,
                     const kstage_adios2_test::StageState& want) {
  std::string out;
  for (const auto& [name, c] : want.columns) {
    auto it = got.columns.find(name);
    if (it == got.columns.end()) {
      out += " no column '" + name + "';";
      continue;
    }
    if (it->second.floor != c.floor)
      out += " '" + name + "' floor " + std::to_string(it->second.floor) + " not " +
             std::to_string(c.floor) + ";";
    if (it->second.values.size() != c.values.size())
      out += " '" + name + "' " + std::to_string(it->second.values.size()) + " prims not " +
             std::to_string(c.values.size()) + ";";
    else if (it->second.values != c.values) out += " '" + name + "' values differ;";
  }
  for (const auto& [name, c] : got.columns)
    if (!want.columns.count(name)) out += " extra column '" + name + "';";
  return out.empty() ? " (schemas differ)" : out;
}

void expect_state(kstage_stage_t s, const Model& m, int readers, int reader, uint64_t t,
                  const char* what) {
  const int b0 = int(uint64_t(m.writers) * uint64_t(reader) / uint64_t(readers));
  const int b1 = int(uint64_t(m.writers) * uint64_t(reader + 1) / uint64_t(readers));
  const kstage_adios2_test::StageState got = kstage_adios2_test::stage_state(s);
  kstage_adios2_test::StageState want = m.held(b0, b1, t);
  if (b1 <= b0) {
    // A reader of no blocks: the step's columns, empty, at the step's floors (label: rank 0's).
    for (const char* name : {"id", "position", "neighbours", "charge", "label"}) {
      auto full = m.held(0, m.writers, t).columns[name];
      full.values.clear();
      want.columns[name] = full;
    }
  }
  if (!(got == want))
    die(what, "after tick " + std::to_string(t) + ", reader " + std::to_string(reader) + " of " +
                  std::to_string(readers) + " (writers " + std::to_string(b0) + " .. " +
                  std::to_string(b1 - 1) + "):" + describe(got, want));
}

// Every step of stream `r` into `s`, each checked against the model (as reading rank `reader`
// of `readers`); the stream closed.
void read_all(kstage_adios2_stream_t r, kstage_stage_t s, const Model& m, int readers, int reader,
              const char* what) {
  uint64_t ordinal = 0, steps = 0;
  kstage_status_t st;
  while ((st = kstage_adios2_read_step(r, s, KSTAGE_TIMEOUT_INFINITE, &ordinal)) == KSTAGE_OK) {
    if (ordinal != steps + 1)
      die(what, "step " + std::to_string(steps) + " has ordinal " + std::to_string(ordinal));
    expect_state(s, m, readers, reader, steps, what);
    ++steps;
  }
  if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  if (steps != m.ticks + 1) die(what, std::to_string(steps) + " steps");
  CHECK(kstage_adios2_close(r));
}

int read(const char* file, int writers, uint64_t ticks) {
  const Model m{writers, ticks};
  kstage_stage_t s = 0;
  CHECK(kstage_create(nullptr, &s));
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  d.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t r = 0;
  CHECK(kstage_adios2_open_mpi(file, &d, MPI_COMM_WORLD, &r));
  read_all(r, s, m, g_size, g_rank, "read");
  CHECK(kstage_destroy(s));
  if (g_rank == 0)
    std::printf("read: %d ranks read %llu steps of %d writers\n", g_size,
                (unsigned long long)(ticks + 1), writers);
  return 0;
}

int restart(const char* file, int writers, uint64_t ticks) {
  const Model m{writers, ticks};
  kstage_stage_t s = 0;
  CHECK(kstage_create(nullptr, &s));
  uint64_t ordinal = 0;
  CHECK(kstage_adios2_restart_mpi(s, file, MPI_COMM_WORLD, &ordinal));
  if (ordinal != ticks + 1) die("restart", "ordinal " + std::to_string(ordinal));
  expect_state(s, m, g_size, g_rank, ticks, "restart");
  CHECK(kstage_destroy(s));
  if (g_rank == 0)
    std::printf("restart: %d ranks restarted a checkpoint of %d writers\n", g_size, writers);
  return 0;
}

// One process, the serial API: the steps, and the checkpoint, each into one stage.
int serial(const char* file, int writers, uint64_t ticks) {
  const Model m{writers, ticks};
  kstage_stage_t s = 0;
  CHECK(kstage_create(nullptr, &s));
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  d.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t r = 0;
  CHECK(kstage_adios2_open(file, &d, &r));
  read_all(r, s, m, 1, 0, "serial read");
  kstage_stage_t fresh = 0;
  CHECK(kstage_create(nullptr, &fresh));
  uint64_t ordinal = 0;
  CHECK(kstage_adios2_restart(fresh, (std::string(file) + ".ckpt").c_str(), &ordinal));
  if (ordinal != ticks + 1) die("serial restart", "ordinal " + std::to_string(ordinal));
  expect_state(fresh, m, 1, 0, ticks, "serial restart");
  CHECK(kstage_destroy(fresh));
  CHECK(kstage_destroy(s));
  std::printf("serial: one process read %llu steps and the checkpoint of %d writers\n",
              (unsigned long long)(ticks + 1), writers);
  return 0;
}

// ---- errors: one rank's failure is every rank's, and no stage changes
// ------------------------------
void expect_failure(kstage_status_t st, kstage_status_t want, const std::vector<const char*>& words,
                    const char* what) {
  if (st != want)
    die(what, std::string("returned ") + kstage_status_string(st) + ", not " +
                  kstage_status_string(want) + ": " + kstage_adios2_last_error());
  const std::string message = kstage_adios2_last_error();
  for (const char* w : words)
    if (message.find(w) == std::string::npos)
      die(what, "message '" + message + "' does not say '" + w + "'");
}

int errors(const char* dir) {
  const std::string base = std::string(dir) + "/";
  kstage_stage_t s = 0;
  CHECK(kstage_create(nullptr, &s));
  const Tokens tk(s);
  std::vector<uint64_t> mine = {uint64_t(g_rank) * 10, uint64_t(g_rank) * 10 + 1};
  write_particles(s, tk, mine, 0, 1);
  CHECK(kstage_advance_write_floor(s, 1, nullptr, 0));
  kstage_adios2_test::StageState before = kstage_adios2_test::stage_state(s);
  const char* last_rank = g_size == 2 ? "rank 1 of 2" : "rank 2 of 3";
  const bool failing = g_rank == g_size - 1;
  kstage_query_t q = everything(s);

  // (1) A write whose attribute is not a column on the last rank fails on every rank.
  kstage_adios2_stream_t w = 0;
  CHECK(kstage_adios2_open_mpi((base + "bad-attribute.bp").c_str(), nullptr, MPI_COMM_WORLD, &w));
  const kstage_token_t bad = failing ? tk.label : tk.position;  // no label column anywhere
  kstage_status_t st = kstage_adios2_write_step(w, s, q, &bad, 1, nullptr);
  if (st == KSTAGE_OK) die("errors (1)", "a write with no such column succeeded");
  if (failing) expect_failure(st, st, {"label"}, "errors (1)");
  else expect_failure(st, st, {"failed on", last_rank, "label"}, "errors (1)");
  // ... and the stream stays usable: the next step, right on every rank, is written.
  CHECK(kstage_adios2_write_step(w, s, q, &tk.position, 1, nullptr));
  CHECK(kstage_adios2_close(w));

  // (2) One attribute with two schemas on two ranks (on different prims): a column of each in
  // the step, read back into each reader's stage as two columns of the attribute.
  kstage_stage_t other = 0;
  CHECK(kstage_create(nullptr, &other));
  {
    const Tokens ot(other);
    std::vector<std::string> p = {Model::particle(uint64_t(g_rank))};
    float f = 1.0f;
    int32_t i = 1;
    if (g_rank == 0)
      write_rows(other, p, ot.charge, 1, &f, {kDLFloat, 32, 1}, KSTAGE_SEMANTIC_NONE);
    else write_rows(other, p, ot.charge, 1, &i, {kDLInt, 32, 1}, KSTAGE_SEMANTIC_NONE);
    CHECK(kstage_advance_write_floor(other, 1, nullptr, 0));
  }
  kstage_query_t oq = everything(other);
  CHECK(kstage_adios2_open_mpi((base + "two-schemas.bp").c_str(), nullptr, MPI_COMM_WORLD, &w));
  CHECK(kstage_adios2_write_step(w, other, oq, nullptr, 0, nullptr));
  CHECK(kstage_adios2_close(w));
  CHECK(kstage_query_release(other, oq));
  CHECK(kstage_destroy(other));
  {
    kstage_stage_t back = 0;
    CHECK(kstage_create(nullptr, &back));
    kstage_adios2_open_desc_t rd = kstage_adios2_open_desc_init();
    rd.mode = KSTAGE_ADIOS2_READ;
    kstage_adios2_stream_t r = 0;
    CHECK(kstage_adios2_open_mpi((base + "two-schemas.bp").c_str(), &rd, MPI_COMM_WORLD, &r));
    uint64_t ordinal = 0;
    CHECK(kstage_adios2_read_step(r, back, KSTAGE_TIMEOUT_INFINITE, &ordinal));
    CHECK(kstage_adios2_close(r));
    kstage_token_t charge = 0;
    CHECK(kstage_intern_token(back, "charge", KSTAGE_NUL_TERMINATED, &charge));
    // This rank reads its own writer's block (as many readers as writers): its prim, in the
    // schema this rank wrote it in.
    kstage_attribute_info_t info = kstage_attribute_info_init();
    CHECK(kstage_attribute_info(back, charge, &info));
    const uint8_t want = g_rank == 0 ? uint8_t(kDLFloat) : uint8_t(kDLInt);
    if (info.prim_count != 1 || info.dtype.code != want)
      die("errors (2)", "rank " + std::to_string(g_rank) + " read back " +
                            std::to_string(info.prim_count) + " prims of dtype code " +
                            std::to_string(int(info.dtype.code)));
    CHECK(kstage_destroy(back));
  }

  // (3) Change ranges that differ between the ranks.
  CHECK(kstage_adios2_open_mpi((base + "ranges.bp").c_str(), nullptr, MPI_COMM_WORLD, &w));
  kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
  d.change_range = true;
  d.range_begin = d.range_end = failing ? 2 : 1;
  expect_failure(kstage_adios2_write_step(w, s, q, nullptr, 0, &d), KSTAGE_INVALID_ARGUMENT,
                 {"change range differs"}, "errors (3)");
  CHECK(kstage_adios2_close(w));

  // (4) A checkpoint with no path on the last rank.
  const std::string ckpt = base + "checkpoint.bp";
  st = kstage_adios2_checkpoint_mpi(s, failing ? nullptr : ckpt.c_str(), MPI_COMM_WORLD);
  expect_failure(st, KSTAGE_INVALID_ARGUMENT,
                 failing ? std::vector<const char*>{"path is NULL"}
                         : std::vector<const char*>{"failed on", last_rank, "path is NULL"},
                 "errors (4)");

  // (5) A restart whose step does not fit the last rank's stage (its particles hold "id" as
  // float32 there, and a prim holds one value per attribute): every rank fails, every stage is
  // as it was. (The checkpoint is at ordinal 5, above the target's floor 1 on every rank.)
  CHECK(kstage_advance_write_floor(s, 5, nullptr, 0));
  before = kstage_adios2_test::stage_state(s);
  CHECK(kstage_adios2_checkpoint_mpi(s, ckpt.c_str(), MPI_COMM_WORLD));
  kstage_stage_t target = 0;
  CHECK(kstage_create(nullptr, &target));
  {
    kstage_token_t id = 0;
    CHECK(kstage_intern_token(target, "id", KSTAGE_NUL_TERMINATED, &id));
    std::vector<std::string> p = {"/elsewhere/x"};
    uint64_t u = 3;
    if (failing) {
      std::vector<std::string> every;
      for (uint64_t i = 0; i < kParticles; ++i) every.push_back(Model::particle(i));
      std::vector<float> f(kParticles, 3.0f);
      write_rows(target, every, id, 1, f.data(), {kDLFloat, 32, 1}, KSTAGE_SEMANTIC_NONE);
    } else {
      write_rows(target, p, id, 1, &u, {kDLUInt, 64, 1}, KSTAGE_SEMANTIC_NONE);
    }
    CHECK(kstage_advance_write_floor(target, 1, nullptr, 0));
  }
  const kstage_adios2_test::StageState target_before = kstage_adios2_test::stage_state(target);
  uint64_t ordinal = 0;
  st = kstage_adios2_restart_mpi(target, ckpt.c_str(), MPI_COMM_WORLD, &ordinal);
  expect_failure(st, KSTAGE_INVALID_ARGUMENT,
                 failing ? std::vector<const char*>{"'id'", "float32 x 1"}
                         : std::vector<const char*>{"failed on", last_rank, "'id'"},
                 "errors (5)");
  if (!(kstage_adios2_test::stage_state(target) == target_before))
    die("errors (5)", "a stage changed");
  CHECK(kstage_destroy(target));

  // (6) A prim two writers both wrote (a ghost copy), read by one reader of both blocks (rank 0
  // alone, with the serial API): the step fails naming the path, the stage gets no prim.
  {
    kstage_stage_t ghost = 0;
    CHECK(kstage_create(nullptr, &ghost));
    const Tokens gt(ghost);
    std::vector<std::string> p = {"/shared/ghost"};
    float xyz[3] = {1, 2, 3};
    write_rows(ghost, p, gt.position, 1, xyz, {kDLFloat, 32, 3}, KSTAGE_SEMANTIC_POINT);
    CHECK(kstage_advance_write_floor(ghost, 1, nullptr, 0));
    const std::string file = base + "ghost.bp";
    CHECK(kstage_adios2_checkpoint_mpi(ghost, file.c_str(), MPI_COMM_WORLD));
    CHECK(kstage_destroy(ghost));
    if (g_rank == 0) {
      kstage_stage_t one = 0;
      CHECK(kstage_create(nullptr, &one));
      expect_failure(kstage_adios2_restart(one, file.c_str(), &ordinal), KSTAGE_INVALID_ARGUMENT,
                     {"/shared/ghost", "repeats"}, "errors (6)");
      if (!kstage_adios2_test::stage_state(one).columns.empty())
        die("errors (6)", "the reader's stage has columns");
      CHECK(kstage_destroy(one));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // (7) An attribute every prim of the last rank holds and no prim of the others: its blocks
  // need positions on every rank (the last rank's alone would be "all of them, in order"), so a
  // reader of all the blocks (rank 0, the serial API) pairs each value with its own prim.
  {
    kstage_stage_t part = 0;
    CHECK(kstage_create(nullptr, &part));
    const Tokens pt(part);
    std::vector<std::string> p = {"/part/p" + std::to_string(g_rank)};
    float value = float(g_rank) + 0.5f;
    write_rows(part, p, failing ? pt.charge : pt.position, 1, &value, {kDLFloat, 32, 1},
               KSTAGE_SEMANTIC_NONE);
    CHECK(kstage_advance_write_floor(part, 1, nullptr, 0));
    const std::string file = base + "part.bp";
    CHECK(kstage_adios2_checkpoint_mpi(part, file.c_str(), MPI_COMM_WORLD));
    CHECK(kstage_destroy(part));
    if (g_rank == 0) {
      kstage_stage_t one = 0;
      CHECK(kstage_create(nullptr, &one));
      CHECK(kstage_adios2_restart(one, file.c_str(), &ordinal));
      const kstage_adios2_test::StageState got = kstage_adios2_test::stage_state(one);
      auto value_of = [](const std::vector<unsigned char>& b) {
        float f = 0;
        std::memcpy(&f, b.data(), sizeof f);
        return f;
      };
      const auto& charge = got.columns.at("charge").values;
      const auto& position = got.columns.at("position").values;
      const std::string last = "/part/p" + std::to_string(g_size - 1);
      if (charge.size() != 1 || !charge.count(last) ||
          value_of(charge.at(last)) != float(g_size - 1) + 0.5f)
        die("errors (7)", "'charge' is not the last rank's one prim's");
      if (position.size() != size_t(g_size - 1) || position.count(last))
        die("errors (7)", "'position' is not on the other ranks' prims");
      for (int r = 0; r + 1 < g_size; ++r)
        if (value_of(position.at("/part/p" + std::to_string(r))) != float(r) + 0.5f)
          die("errors (7)", "a value moved");
      CHECK(kstage_destroy(one));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // (8) Names that differ between the ranks; Inline on several ranks; no MPI communicator.
  expect_failure(kstage_adios2_open_mpi((base + (failing ? "other.bp" : "one.bp")).c_str(), nullptr,
                                        MPI_COMM_WORLD, &w),
                 KSTAGE_INVALID_ARGUMENT, {"one name on every rank", "other.bp"}, "errors (8)");
  {
    kstage_adios2_open_desc_t inl = kstage_adios2_open_desc_init();
    inl.engine = "Inline";
    expect_failure(kstage_adios2_open_mpi((base + "inline").c_str(), &inl, MPI_COMM_WORLD, &w),
                   KSTAGE_INVALID_ARGUMENT, {"Inline couples a writer and a reader in one process"},
                   "errors (8)");
  }
  expect_failure(kstage_adios2_open_mpi((base + "x.bp").c_str(), nullptr, MPI_COMM_NULL, &w),
                 KSTAGE_INVALID_ARGUMENT, {"MPI_COMM_NULL"}, "errors (8)");

  // (9) A checkpoint the ranks wrote, damaged (a byte of its data.0 flipped by rank 0): rank 0
  // checks its manifest before ADIOS2 opens it and every rank refuses it, naming the file, each
  // stage as it was (#50). The checkpoint of (5) was sealed at its close by rank 0.
  {
    const std::string data = ckpt + "/data.0";
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
      std::FILE* f = std::fopen(data.c_str(), "r+b");
      if (f == nullptr || std::fseek(f, 9, SEEK_SET) != 0) die("errors (9)", "cannot open data.0");
      const int c = std::fgetc(f);
      std::fseek(f, 9, SEEK_SET);
      std::fputc(c ^ 0x40, f);
      std::fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    kstage_stage_t fresh = 0;
    CHECK(kstage_create(nullptr, &fresh));
    st = kstage_adios2_restart_mpi(fresh, ckpt.c_str(), MPI_COMM_WORLD, &ordinal);
    expect_failure(st, KSTAGE_OP_FAILED,
                   g_rank == 0 ? std::vector<const char*>{"data.0", "does not match its manifest"}
                               : std::vector<const char*>{"failed on", "rank 0", "data.0"},
                   "errors (9)");
    if (!kstage_adios2_test::stage_state(fresh).columns.empty())
      die("errors (9)", "a refused restart wrote into the stage");
    CHECK(kstage_destroy(fresh));
    // ... and a reader opened on the ranks that asks for the check (desc.manifest).
    kstage_adios2_open_desc_t checked = kstage_adios2_open_desc_init();
    checked.mode = KSTAGE_ADIOS2_READ;
    checked.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
    kstage_adios2_stream_t r = 0;
    expect_failure(kstage_adios2_open_mpi(ckpt.c_str(), &checked, MPI_COMM_WORLD, &r),
                   KSTAGE_OP_FAILED,
                   g_rank == 0 ? std::vector<const char*>{"data.0", "does not match its manifest"}
                               : std::vector<const char*>{"failed on", "rank 0", "data.0"},
                   "errors (9)");
  }

  // (10) The MPI forms of restart_ex, checkpoint_latest and restart_latest (#50). The damaged
  // checkpoint of (9), with verified restarts only: refused on every rank.
  {
    kstage_adios2_restart_desc_t required = kstage_adios2_restart_desc_init();
    required.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
    kstage_stage_t fresh = 0;
    CHECK(kstage_create(nullptr, &fresh));
    st = kstage_adios2_restart_ex_mpi(fresh, ckpt.c_str(), &required, MPI_COMM_WORLD, &ordinal);
    expect_failure(st, KSTAGE_OP_FAILED,
                   g_rank == 0 ? std::vector<const char*>{"data.0", "does not match its manifest"}
                               : std::vector<const char*>{"failed on", "rank 0", "data.0"},
                   "errors (10)");
    // The pointer procedure on the ranks: each rank its block of <pointer>.0, then of .1; the
    // pointer (rank 0's) names the same checkpoint for every rank.
    const std::string pointer = base + "latest";
    if (g_rank == 0) std::remove(pointer.c_str());  // (a run before this one's)
    MPI_Barrier(MPI_COMM_WORLD);
    for (const char* want : {"latest.0", "latest.1"}) {
      CHECK(kstage_adios2_checkpoint_latest_mpi(s, pointer.c_str(), MPI_COMM_WORLD));
      char named[64] = {};
      if (g_rank == 0) {
        std::FILE* f = std::fopen(pointer.c_str(), "rb");
        if (f == nullptr || std::fgets(named, sizeof named, f) == nullptr)
          die("errors (10)", "cannot read the pointer");
        std::fclose(f);
      }
      MPI_Bcast(named, sizeof named, MPI_CHAR, 0, MPI_COMM_WORLD);
      if (std::string(named) != std::string(want) + "\n")
        die("errors (10)", std::string("the pointer names '") + named + "', not " + want);
      kstage_stage_t back = 0;
      CHECK(kstage_create(nullptr, &back));
      ordinal = 0;
      CHECK(kstage_adios2_restart_latest_mpi(back, pointer.c_str(), MPI_COMM_WORLD, &ordinal));
      uint64_t floor = 0;  // the checkpoint's ordinal: the stage's highest write floor
      for (const auto& [name, c] : before.columns) floor = std::max(floor, c.floor);
      if (ordinal != floor || !(kstage_adios2_test::stage_state(back) == before))
        die("errors (10)", std::string("restart_latest of ") + want + " is not the rank's stage");
      CHECK(kstage_destroy(back));
    }
    // The latest, damaged: refused on every rank; unsealed: refused as such on every rank.
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
      std::FILE* f = std::fopen((pointer + ".1/data.0").c_str(), "r+b");
      if (f == nullptr || std::fseek(f, 9, SEEK_SET) != 0) die("errors (10)", "cannot open data.0");
      const int c = std::fgetc(f);
      std::fseek(f, 9, SEEK_SET);
      std::fputc(c ^ 0x40, f);
      std::fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    st = kstage_adios2_restart_latest_mpi(fresh, pointer.c_str(), MPI_COMM_WORLD, &ordinal);
    expect_failure(st, KSTAGE_OP_FAILED,
                   g_rank == 0 ? std::vector<const char*>{"latest.1/data.0", "does not match"}
                               : std::vector<const char*>{"failed on", "rank 0", "data.0"},
                   "errors (10)");
    if (g_rank == 0) std::remove((pointer + ".1/kstage.manifest").c_str());
    MPI_Barrier(MPI_COMM_WORLD);
    st = kstage_adios2_restart_latest_mpi(fresh, pointer.c_str(), MPI_COMM_WORLD, &ordinal);
    expect_failure(st, KSTAGE_INVALID_ARGUMENT,
                   g_rank == 0 ? std::vector<const char*>{"latest.1", "has no manifest"}
                               : std::vector<const char*>{"failed on", "rank 0", "has no manifest"},
                   "errors (10)");
    if (!kstage_adios2_test::stage_state(fresh).columns.empty())
      die("errors (10)", "a refused restart wrote into the stage");
    CHECK(kstage_destroy(fresh));
  }

  CHECK(kstage_query_release(s, q));
  if (!(kstage_adios2_test::stage_state(s) == before)) die("errors", "the writers' stage changed");
  CHECK(kstage_destroy(s));
  if (g_rank == 0) std::printf("errors: %d ranks, every failure agreed\n", g_size);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int rc = 2;
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "write" && argc == 4) rc = write(argv[2], std::strtoull(argv[3], nullptr, 10));
    else if (mode == "read" && argc == 5)
      rc = read(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
    else if (mode == "restart" && argc == 5)
      rc = restart(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
    else if (mode == "serial" && argc == 5)
      rc = serial(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
    else if (mode == "errors" && argc == 3 && g_size >= 2 && g_size <= 3) rc = errors(argv[2]);
    else std::fprintf(stderr, "usage: see tests/adios2/mpi_ranks.cpp\n");
  } catch (const std::exception& e) {
    die("exception", e.what());
  }
  MPI_Finalize();
  return rc;
}
