/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Particles: a producer moves a subset of N particles every tick and hands
 * the new "position" (float32 x 3, POINT) and "velocity" (float32 x 3, VECTOR)
 * to a kstage stage; a consumer asks the stage what changed at that tick and
 * checks it against a host model of the simulation.
 *
 *   kstage_example_particles [-n N] [-t T] [-f PERCENT]
 *                            [--checkpoint FILE --every K] [--restart FILE] [--stream NAME]
 *   kstage_example_particles --receive NAME
 *
 * Ordinal 1 holds the initial state (every particle, INSERT). Tick k = 1..T
 * moves about PERCENT % of the particles (default 5) and writes them at
 * ordinal k + 1, both attributes in one kstage_write_attributes batch, then
 * seals that ordinal. Two ways to send a sparse update alternate:
 *   - mask ticks (odd k): the full N-row arrays go out with a mask over the
 *     query of all particles whose set bits are the moved ones; the other
 *     rows of the tensor are not read;
 *   - index_map ticks (even k): a query over just the moved particles (in
 *     particle order) and a compact M-row tensor of their values in a
 *     shuffled order; index_map[i] names the row holding query prim i.
 * The consumer then reads the change range [k + 1, k + 1] of "position" over
 * all particles: exactly the moved ones must come back, with exactly the
 * producer's values. At the end every particle's latest position and
 * velocity are checked, and a report is printed.
 *
 * Every tick draws its random numbers from a generator seeded by the tick's number, so a run
 * restarted at tick k continues exactly as the uninterrupted one would. Where kstage has its
 * ADIOS2 bridge (KSTAGE_EXAMPLE_WITH_ADIOS2): --checkpoint FILE --every K writes the stage as
 * a BP5 checkpoint after every K-th tick with kstage_adios2_checkpoint_latest: to FILE.0 or
 * FILE.1 (the one FILE does not name), flushed to disk and sealed by its manifest, and then
 * names it in FILE (a one-line file replaced atomically and durably), so that a run killed --
 * or a machine that loses power -- at any moment keeps its last complete checkpoint; --restart
 * FILE reads the checkpoint FILE names (kstage_adios2_restart_latest: its manifest checked
 * first) into a fresh stage and runs the ticks after it. The last line before the report is the
 * FNV-1a checksum of the final positions and velocities.
 *
 * Streaming (ADIOS2's SST engine, on loopback): --stream NAME sends the stage to another
 * process as a full step, then one incremental step per tick (the tick's change range: only
 * the moved particles' rows). With it, each tick also writes the checksum of the model's
 * state as attribute "checksum" (uint64) of the prim /run, so that the state a receiver
 * rebuilds can be checked against the sender's at every step. --receive NAME is that other
 * process: it rebuilds a stage from the steps, in order, checks each step's state against its
 * checksum, and prints the final checksum as the sender does.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime in strict C99 */

#include <kstage/kstage.h>
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
#include <kstage/kstage_adios2.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    kstage_status_t st_ = (call);                                                         \
    if (st_ != KSTAGE_OK) {                                                               \
      fprintf(stderr, "particles: %s failed: %s: %s\n", #call, kstage_status_string(st_), \
              kstage_last_error());                                                       \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* xorshift64*: deterministic, good enough for picking particles. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}
static float rng_unit(void) { return (float)(rng_next() >> 40) / (float)(1u << 24); } /* [0, 1) */
/* The generator of tick k (0: the initial state): a run restarted at a tick draws what the
 * uninterrupted run drew. */
static void rng_seed_tick(uint64_t k) {
  rng_state = 0x9E3779B97F4A7C15ull ^ (k * 0xD1B54A32D192ED03ull);
  if (rng_state == 0) rng_state = 1;
  rng_next();
}

static void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size);
  if (!p) {
    fprintf(stderr, "particles: out of memory (%zu x %zu bytes)\n", n, size);
    exit(1);
  }
  return p;
}

static int cmp_u32(const void* a, const void* b) {
  const uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return x < y ? -1 : x > y;
}

/* A canonical fixed-size host tensor: ndim 1, shape [rows], the dtype's lanes = tuple width. */
static DLTensor host_tensor(void* data, int64_t* shape, uint8_t code, uint8_t bits,
                            uint16_t lanes) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.shape = shape;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = lanes;
  return t;
}

/* float32 x 3 rows (positions, velocities). */
static DLTensor float3_tensor(float* data, int64_t* shape) {
  return host_tensor(data, shape, kDLFloat, 32, 3);
}

static void usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s [-n particles] [-t ticks] [-f percent moved per tick]\n"
          "          [--checkpoint FILE --every K] [--restart FILE] [--stream NAME]\n"
          "       %s --receive NAME\n",
          argv0, argv0);
}

/* FNV-1a over bytes. */
static uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
#define ACHECK(call)                                                                      \
  do {                                                                                    \
    kstage_status_t st_ = (call);                                                         \
    if (st_ != KSTAGE_OK) {                                                               \
      fprintf(stderr, "particles: %s failed: %s: %s\n", #call, kstage_status_string(st_), \
              kstage_adios2_last_error());                                                \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

/* The checkpoint FILE names. */
static void checkpoint_named(const char* file, char* dir, size_t capacity) {
  FILE* f = fopen(file, "r");
  size_t len;
  if (!f || !fgets(dir, (int)capacity, f)) {
    fprintf(stderr, "particles: %s names no checkpoint\n", file);
    exit(1);
  }
  fclose(f);
  len = strlen(dir);
  while (len > 0 && (dir[len - 1] == '\n' || dir[len - 1] == '\r')) dir[--len] = '\0';
}

/* A checkpoint of the run made the latest (docs/adios2.md, "A checkpoint that survives a
 * crash"): FILE names a complete checkpoint at every moment, or does not exist yet. */
static void write_checkpoint(kstage_stage_t stage, const char* file, uint64_t tick) {
  char dir[4096];
  ACHECK(kstage_adios2_checkpoint_latest(stage, file));
  checkpoint_named(file, dir, sizeof dir);
  printf("particles: checkpoint at tick %llu in %s\n", (unsigned long long)tick, dir);
  fflush(stdout);
}

/* SST on loopback only: the sockets (WAN) transport, control and data on lo. The sender waits
 * (up to a minute) for its one receiver, and the receiver for its sender. */
static const char* const sst_sender[] = {"DataTransport",
                                         "WAN",
                                         "ControlInterface",
                                         "lo",
                                         "DataInterface",
                                         "lo",
                                         "RendezvousReaderCount",
                                         "1",
                                         "OpenTimeoutSecs",
                                         "60",
                                         NULL};
static const char* const sst_receiver[] = {
    "ControlInterface", "lo", "DataInterface", "lo", "OpenTimeoutSecs", "60", NULL};

/* The checksum of a state: FNV-1a of every position, then every velocity, in particle order. */
static uint64_t state_checksum(const float* pos, const float* vel, uint64_t n) {
  uint64_t h = 1469598103934665603ull;
  h = fnv1a(h, pos, n * 3 * sizeof(float));
  return fnv1a(h, vel, n * 3 * sizeof(float));
}

/* The sender's checksum of the state it seals at `ordinal`, as /run's "checksum". */
static void write_state_checksum(kstage_stage_t stage, kstage_query_t run, kstage_token_t attr,
                                 uint64_t ordinal, uint64_t value) {
  int64_t shape[1] = {1};
  DLTensor t = host_tensor(&value, shape, kDLUInt, 64, 1);
  kstage_write_data_t w = kstage_write_data_init();
  kstage_op_t op = 0;
  w.tensors = &t;
  w.tensor_count = 1;
  CHECK(kstage_write_attribute(stage, run, attr, ordinal, &w, KSTAGE_PRIM_MODE_UPSERT, &op));
  CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
  CHECK(kstage_release_op(stage, op));
}

/* One step to the receiver: the full state, or the change range [ordinal, ordinal]. */
static void send_step(kstage_adios2_stream_t stream, kstage_stage_t stage, kstage_query_t query,
                      uint64_t ordinal, int incremental) {
  kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
  d.change_range = incremental != 0;
  d.range_begin = ordinal;
  d.range_end = ordinal;
  ACHECK(kstage_adios2_write_step(stream, stage, query, NULL, 0, &d));
}

/* The rows of `attr` over `query` (n prims, 3 lanes) into `out`, in query order. */
static uint64_t read_float3(kstage_stage_t stage, kstage_query_t query, kstage_token_t attr,
                            float* out, uint64_t n) {
  kstage_read_desc_t desc = kstage_read_desc_init();
  kstage_read_t read = 0;
  kstage_read_group_t g;
  kstage_status_t st;
  uint64_t seen = 0, i;
  desc.target_device.device_type = kDLCPU;
  CHECK(kstage_read_attributes(stage, query, &attr, 1, &desc, &read));
  while ((st = kstage_fetch_read_next(stage, read, KSTAGE_TIMEOUT_INFINITE, &g)) == KSTAGE_OK) {
    const DLTensor* t = &g.data.tensors[0];
    const float* base = (const float*)((const char*)t->data + t->byte_offset);
    for (i = 0; i < g.prim_count && seen + i < n; ++i) {
      const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
      memcpy(out + 3 * (seen + i), base + 3 * row, 3 * sizeof(float));
    }
    seen += g.prim_count;
    CHECK(kstage_release_group(stage, g.handle));
  }
  if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  CHECK(kstage_release_read(stage, read));
  return seen;
}

/* --receive NAME: a stage rebuilt from the sender's steps, each step's state checked. */
static int receive(const char* name) {
  kstage_stage_t stage = 0;
  kstage_adios2_stream_t stream = 0;
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  kstage_token_t position = 0, velocity = 0, checksum_attr = 0;
  kstage_path_t run = 0;
  float *pos = NULL, *vel = NULL;
  uint64_t steps = 0, n = 0, last = 0, checksum = 0;
  kstage_status_t st;
  CHECK(kstage_create(NULL, &stage));
  CHECK(kstage_intern_token(stage, "position", KSTAGE_NUL_TERMINATED, &position));
  CHECK(kstage_intern_token(stage, "velocity", KSTAGE_NUL_TERMINATED, &velocity));
  CHECK(kstage_intern_token(stage, "checksum", KSTAGE_NUL_TERMINATED, &checksum_attr));
  CHECK(kstage_intern_path(stage, "/run", KSTAGE_NUL_TERMINATED, &run));
  d.mode = KSTAGE_ADIOS2_READ;
  d.engine = "SST";
  d.parameters = sst_receiver;
  ACHECK(kstage_adios2_open(name, &d, &stream));
  for (;;) {
    uint64_t ordinal = 0, count = 0, sent = 0;
    kstage_filter_t particles;
    kstage_query_t q = 0, rq = 0;
    kstage_read_t read = 0;
    kstage_read_group_t g;
    st = kstage_adios2_read_step(stream, stage, KSTAGE_TIMEOUT_INFINITE, &ordinal);
    if (st == KSTAGE_END_OF_ITERATION) break;
    ACHECK(st);
    ++steps;
    /* The particles: the prims holding a position, in path-id order (the sender's order). */
    memset(&particles, 0, sizeof particles);
    particles.has_attributes = &position;
    particles.has_attribute_count = 1;
    CHECK(kstage_query_filter(stage, &particles, &q));
    CHECK(kstage_query_count(stage, q, &count));
    if (count != n) {
      free(pos);
      free(vel);
      n = count;
      pos = xcalloc(n * 3, sizeof(float));
      vel = xcalloc(n * 3, sizeof(float));
    }
    if (read_float3(stage, q, position, pos, n) != n ||
        read_float3(stage, q, velocity, vel, n) != n) {
      fprintf(stderr,
              "particles: receive: step at ordinal %llu: not every particle has both attributes\n",
              (unsigned long long)ordinal);
      return 1;
    }
    CHECK(kstage_query_release(stage, q));
    checksum = state_checksum(pos, vel, n);
    /* The sender's checksum of the same state. */
    CHECK(kstage_query_paths(stage, &run, 1, &rq));
    CHECK(kstage_read_attributes(stage, rq, &checksum_attr, 1, NULL, &read));
    if (kstage_fetch_read_next(stage, read, KSTAGE_TIMEOUT_INFINITE, &g) != KSTAGE_OK ||
        g.prim_count != 1) {
      fprintf(stderr, "particles: receive: step at ordinal %llu carries no checksum\n",
              (unsigned long long)ordinal);
      return 1;
    }
    memcpy(&sent, (const char*)g.data.tensors[0].data + g.data.tensors[0].byte_offset, sizeof sent);
    CHECK(kstage_release_group(stage, g.handle));
    CHECK(kstage_release_read(stage, read));
    CHECK(kstage_query_release(stage, rq));
    if (sent != checksum) {
      fprintf(stderr,
              "particles: receive: step at ordinal %llu: state %016llx, the sender's %016llx\n",
              (unsigned long long)ordinal, (unsigned long long)checksum, (unsigned long long)sent);
      return 1;
    }
    last = ordinal;
  }
  ACHECK(kstage_adios2_close(stream));
  CHECK(kstage_destroy(stage));
  free(pos);
  free(vel);
  if (steps == 0) {
    fprintf(stderr, "particles: receive: the stream ended before its first step\n");
    return 1;
  }
  printf(
      "particles: received %llu steps (last at ordinal %llu) of %llu particles, each equal to the "
      "sender's state\n",
      (unsigned long long)steps, (unsigned long long)last, (unsigned long long)n);
  printf("  checksum           %016llx (FNV-1a of the final positions and velocities)\n",
         (unsigned long long)checksum);
  printf("particles: receive OK\n");
  return 0;
}
#endif

static int parse_count(const char* s, unsigned long long max, unsigned long long* out) {
  char* end = NULL;
  unsigned long long v;
  if (!s || !*s || *s == '-') return 0;
  v = strtoull(s, &end, 10);
  if (*end != '\0' || v == 0 || v > max) return 0;
  *out = v;
  return 1;
}

int main(int argc, char** argv) {
  unsigned long long n_arg = 100000, t_arg = 50, f_arg = 5;
  uint64_t n, ticks, moved_per_tick, words, i, k;
  kstage_stage_t stage = 0;
  kstage_token_t attrs[2]; /* position, velocity */
  kstage_path_t* paths;
  kstage_query_t all = 0;
  float *pos, *vel, *pos_out, *vel_out;
  uint32_t *perm, *slot, *sorted, *index_map;
  uint64_t* mask;
  int64_t shape_all[1], shape_moved[1];
  DLTensor tensors[2];
  kstage_write_data_t data[2];
  kstage_op_t op = 0;
  double t_write = 0, t_read = 0, t0;
  uint64_t rows_written = 0, rows_read = 0, mask_ticks = 0, map_ticks = 0;
  unsigned long long every_arg = 0, tick_ms_arg = 0; /* --tick-ms: a pause per tick (tests) */
  const char* checkpoint = NULL;                     /* --checkpoint FILE */
  const char* restart = NULL;                        /* --restart FILE */
  uint64_t start_tick = 1, checksum = 1469598103934665603ull;
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
  const char* stream_name = NULL; /* --stream NAME */
  kstage_adios2_stream_t stream = 0;
  kstage_token_t checksum_attr = 0;
  kstage_path_t run_path = 0;
  kstage_query_t run = 0, streamed = 0; /* /run; the particles and /run */
  int sent_full = 0;
#endif
  uint64_t* swaps;
  int a;

  for (a = 1; a < argc; ++a) {
    unsigned long long* target = NULL;
    unsigned long long max = 0;
    if ((strcmp(argv[a], "--checkpoint") == 0 || strcmp(argv[a], "--restart") == 0 ||
         strcmp(argv[a], "--stream") == 0 || strcmp(argv[a], "--receive") == 0) &&
        a + 1 < argc) {
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
      if (strcmp(argv[a], "--receive") == 0) return receive(argv[a + 1]);
      if (argv[a][2] == 'c') checkpoint = argv[a + 1];
      else if (argv[a][3] == 'e') restart = argv[a + 1];
      else stream_name = argv[a + 1];
      ++a;
      continue;
#else
      fprintf(stderr,
              "particles: %s needs kstage's ADIOS2 bridge, which this build does not have\n",
              argv[a]);
      return 2;
#endif
    }
    if (strcmp(argv[a], "-n") == 0) target = &n_arg, max = 0xFFFFFFFFull;
    else if (strcmp(argv[a], "--every") == 0) target = &every_arg, max = 1000000ull;
    else if (strcmp(argv[a], "--tick-ms") == 0) target = &tick_ms_arg, max = 10000ull;
    else if (strcmp(argv[a], "-t") == 0) target = &t_arg, max = 1000000ull;
    else if (strcmp(argv[a], "-f") == 0) target = &f_arg, max = 100ull;
    else if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) {
      usage(argv[0]);
      return 0;
    }
    if (!target || a + 1 >= argc || !parse_count(argv[a + 1], max, target)) {
      usage(argv[0]);
      return 2;
    }
    ++a;
  }
  if ((checkpoint != NULL) != (every_arg != 0)) {
    fprintf(stderr, "particles: --checkpoint FILE and --every K go together\n");
    return 2;
  }
  n = n_arg;
  ticks = t_arg;
  moved_per_tick = n * f_arg / 100;
  if (moved_per_tick == 0) moved_per_tick = 1;
  words = (n + 63) / 64;

  pos = xcalloc(n * 3, sizeof(float)); /* the host model */
  vel = xcalloc(n * 3, sizeof(float));
  pos_out = xcalloc(n * 3, sizeof(float)); /* compact outgoing rows (index_map ticks) */
  vel_out = xcalloc(n * 3, sizeof(float));
  paths = xcalloc(n, sizeof(kstage_path_t));
  perm = xcalloc(n, sizeof(uint32_t));
  slot = xcalloc(n, sizeof(uint32_t));
  sorted = xcalloc(n, sizeof(uint32_t));
  index_map = xcalloc(n, sizeof(uint32_t));
  mask = xcalloc(words, sizeof(uint64_t));
  swaps = xcalloc(moved_per_tick, sizeof(uint64_t));

  /* ---- the stage, the names, the initial state at ordinal 1 ---------------- */
  CHECK(kstage_create(NULL, &stage));
  CHECK(kstage_intern_token(stage, "position", KSTAGE_NUL_TERMINATED, &attrs[0]));
  CHECK(kstage_intern_token(stage, "velocity", KSTAGE_NUL_TERMINATED, &attrs[1]));
  rng_seed_tick(0);
  for (i = 0; i < n; ++i) {
    char name[48];
    snprintf(name, sizeof name, "/particles/p%llu", (unsigned long long)i);
    CHECK(kstage_intern_path(stage, name, KSTAGE_NUL_TERMINATED, &paths[i]));
    perm[i] = (uint32_t)i;
    pos[3 * i + 0] = 10.f * rng_unit();
    pos[3 * i + 1] = 10.f * rng_unit();
    pos[3 * i + 2] = 10.f * rng_unit();
    vel[3 * i + 0] = rng_unit() - 0.5f;
    vel[3 * i + 1] = rng_unit() - 0.5f;
    vel[3 * i + 2] = rng_unit() - 0.5f;
  }
  CHECK(kstage_query_paths(stage, paths, n, &all));
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
  if (stream_name) {
    kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
    kstage_path_t* both = xcalloc(n + 1, sizeof(kstage_path_t));
    CHECK(kstage_intern_token(stage, "checksum", KSTAGE_NUL_TERMINATED, &checksum_attr));
    CHECK(kstage_intern_path(stage, "/run", KSTAGE_NUL_TERMINATED, &run_path));
    CHECK(kstage_query_paths(stage, &run_path, 1, &run));
    memcpy(both, paths, n * sizeof(kstage_path_t));
    both[n] = run_path;
    CHECK(kstage_query_paths(stage, both, n + 1, &streamed));
    free(both);
    d.engine = "SST";
    d.parameters = sst_sender;
    ACHECK(kstage_adios2_open(stream_name, &d, &stream)); /* waits for the receiver */
    printf("particles: streaming to %s\n", stream_name);
  }
#endif

  if (restart) {
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
    /* The stage of the last checkpoint, and the model from it. */
    char dir[4096];
    uint64_t ordinal = 0, restored = 0;
    kstage_read_t read = 0;
    kstage_read_group_t group;
    kstage_read_desc_t desc = kstage_read_desc_init();
    checkpoint_named(restart, dir, sizeof dir);
    ACHECK(kstage_adios2_restart_latest(stage, restart, &ordinal));
    start_tick = ordinal; /* tick k seals ordinal k + 1: the next tick is `ordinal` */
    desc.compact = true;
    desc.target_device.device_type = kDLCPU;
    CHECK(kstage_read_attributes(stage, all, attrs, 2, &desc, &read));
    while (kstage_fetch_read_next(stage, read, 0, &group) == KSTAGE_OK) {
      float* model = group.attribute == attrs[0] ? pos : vel;
      const DLTensor* t = &group.data.tensors[0];
      if (group.prim_count != n) {
        fprintf(stderr, "particles: the checkpoint in %s holds %llu particles, not %llu\n", dir,
                (unsigned long long)group.prim_count, (unsigned long long)n);
        return 1;
      }
      memcpy(model, (const char*)t->data + t->byte_offset, n * 3 * sizeof(float));
      ++restored;
      CHECK(kstage_release_group(stage, group.handle));
    }
    CHECK(kstage_release_read(stage, read));
    if (restored != 2) {
      fprintf(stderr, "particles: the checkpoint in %s lacks position or velocity\n", dir);
      return 1;
    }
    printf("particles: restarted from %s at tick %llu\n", dir, (unsigned long long)start_tick);
#endif
  } else {
    shape_all[0] = (int64_t)n;
    data[0] = kstage_write_data_init();
    data[1] = kstage_write_data_init();
    tensors[0] = float3_tensor(pos, shape_all);
    tensors[1] = float3_tensor(vel, shape_all);
    data[0].tensors = &tensors[0];
    data[0].tensor_count = 1;
    data[0].semantic = KSTAGE_SEMANTIC_POINT;
    data[1].tensors = &tensors[1];
    data[1].tensor_count = 1;
    data[1].semantic = KSTAGE_SEMANTIC_VECTOR;
    CHECK(kstage_write_attributes(stage, all, attrs, data, 2, 1, KSTAGE_PRIM_MODE_INSERT, &op));
    CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
    CHECK(kstage_release_op(stage, op));
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
    if (stream) write_state_checksum(stage, run, checksum_attr, 1, state_checksum(pos, vel, n));
#endif
    CHECK(kstage_advance_write_floor(stage, 1, NULL, 0));
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
    if (stream) {
      send_step(stream, stage, streamed, 1, 0);
      sent_full = 1;
    }
#endif
  }
  shape_all[0] = (int64_t)n;

  /* ---- the ticks -------------------------------------------------------------- */
  for (k = start_tick; k <= ticks; ++k) {
    const uint64_t ordinal = k + 1;
    const uint64_t m = moved_per_tick;
    const int use_mask = (k % 2) == 1;
    kstage_query_t target = all;
    kstage_read_desc_t desc;
    kstage_read_t read = 0;
    kstage_read_group_t group;
    kstage_status_t st;
    uint64_t seen = 0;

    /* Pick m distinct particles (partial Fisher-Yates): perm[0..m); the swaps are undone at
     * the end of the tick, so that every tick starts from the identity (a restarted run
     * needs nothing of the ticks before). */
    rng_seed_tick(k);
    for (i = 0; i < m; ++i) {
      const uint64_t j = i + rng_next() % (n - i);
      const uint32_t tmp = perm[i];
      perm[i] = perm[j];
      perm[j] = tmp;
      swaps[i] = j;
    }
    /* Move them: a small kick to the velocity, then a step. */
    for (i = 0; i < m; ++i) {
      const uint32_t p = perm[i];
      int c;
      vel[3 * p + 2] -= 0.0981f;
      for (c = 0; c < 3; ++c) {
        vel[3 * p + c] += 0.01f * (rng_unit() - 0.5f);
        pos[3 * p + c] += 0.1f * vel[3 * p + c];
      }
      sorted[i] = p;
    }
    qsort(sorted, (size_t)m, sizeof(uint32_t), cmp_u32); /* the moved ones, in particle order */

    data[0] = kstage_write_data_init();
    data[1] = kstage_write_data_init();
    data[0].semantic = KSTAGE_SEMANTIC_POINT;
    data[1].semantic = KSTAGE_SEMANTIC_VECTOR;
    if (use_mask) {
      /* The whole arrays; the mask selects the moved particles of `all`. */
      memset(mask, 0, words * sizeof(uint64_t));
      for (i = 0; i < m; ++i) mask[perm[i] / 64] |= 1ull << (perm[i] % 64);
      tensors[0] = float3_tensor(pos, shape_all);
      tensors[1] = float3_tensor(vel, shape_all);
      for (a = 0; a < 2; ++a) {
        data[a].count = n;
        data[a].mask = mask;
      }
      ++mask_ticks;
    } else {
      /* A query over just the moved particles, and their rows in perm
       * (shuffled) order: index_map[i] is the row of query prim i. */
      kstage_path_t* moved_paths = xcalloc(m, sizeof(kstage_path_t));
      for (i = 0; i < m; ++i) {
        const uint32_t p = perm[i];
        memcpy(&pos_out[3 * i], &pos[3 * p], 3 * sizeof(float));
        memcpy(&vel_out[3 * i], &vel[3 * p], 3 * sizeof(float));
        slot[p] = (uint32_t)i;
      }
      for (i = 0; i < m; ++i) {
        moved_paths[i] = paths[sorted[i]];
        index_map[i] = slot[sorted[i]];
      }
      CHECK(kstage_query_paths(stage, moved_paths, m, &target));
      free(moved_paths);
      shape_moved[0] = (int64_t)m;
      tensors[0] = float3_tensor(pos_out, shape_moved);
      tensors[1] = float3_tensor(vel_out, shape_moved);
      for (a = 0; a < 2; ++a) {
        data[a].count = m;
        data[a].index_map = index_map;
      }
      ++map_ticks;
    }
    data[0].tensors = &tensors[0];
    data[0].tensor_count = 1;
    data[1].tensors = &tensors[1];
    data[1].tensor_count = 1;

    /* Producer: one batch op for both attributes, then seal the tick. */
    t0 = now_seconds();
    CHECK(kstage_write_attributes(stage, target, attrs, data, 2, ordinal, KSTAGE_PRIM_MODE_UPDATE,
                                  &op));
    CHECK(kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE));
    CHECK(kstage_release_op(stage, op));
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
    if (stream)
      write_state_checksum(stage, run, checksum_attr, ordinal, state_checksum(pos, vel, n));
#endif
    CHECK(kstage_advance_write_floor(stage, ordinal, NULL, 0));
    t_write += now_seconds() - t0;
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
    /* The tick to the receiver: only what changed at it (the first step after a restart is
     * the whole state). */
    if (stream) {
      send_step(stream, stage, streamed, ordinal, sent_full);
      sent_full = 1;
    }
#endif
    rows_written += 2 * m;
    if (target != all) CHECK(kstage_query_release(stage, target));

    /* Consumer: what changed at this ordinal? Exactly the moved particles. */
    desc = kstage_read_desc_init();
    desc.change_range = true;
    desc.range_begin = ordinal;
    desc.range_end = ordinal;
    t0 = now_seconds();
    CHECK(kstage_read_attributes(stage, all, &attrs[0], 1, &desc, &read));
    while ((st = kstage_fetch_read_next(stage, read, 0, &group)) == KSTAGE_OK) {
      const DLTensor* t = &group.data.tensors[0];
      const float* base = (const float*)((const char*)t->data + t->byte_offset);
      if (group.is_delete || group.attribute != attrs[0] || group.dtype.lanes != 3 ||
          group.semantic != KSTAGE_SEMANTIC_POINT || group.ordinal != ordinal) {
        fprintf(stderr,
                "particles: tick %llu: unexpected group (delete %d, lanes %u, ordinal %llu)\n",
                (unsigned long long)k, (int)group.is_delete, (unsigned)group.dtype.lanes,
                (unsigned long long)group.ordinal);
        return 1;
      }
      for (i = 0; i < group.prim_count; ++i) {
        const uint64_t row = group.data.index_map ? group.data.index_map[i] : i;
        const float* v = base + 3 * row;
        const uint32_t p = seen + i < m ? sorted[seen + i] : 0;
        if (seen + i >= m || group.prims[i] != paths[p]) {
          fprintf(stderr, "particles: tick %llu: change %llu is not moved particle %llu\n",
                  (unsigned long long)k, (unsigned long long)(seen + i), (unsigned long long)p);
          return 1;
        }
        if (v[0] != pos[3 * p] || v[1] != pos[3 * p + 1] || v[2] != pos[3 * p + 2]) {
          fprintf(stderr,
                  "particles: tick %llu: particle %u reads (%g, %g, %g), expected (%g, %g, %g)\n",
                  (unsigned long long)k, (unsigned)p, v[0], v[1], v[2], pos[3 * p], pos[3 * p + 1],
                  pos[3 * p + 2]);
          return 1;
        }
      }
      seen += group.prim_count;
      CHECK(kstage_release_group(stage, group.handle));
    }
    if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
    CHECK(kstage_release_read(stage, read));
    t_read += now_seconds() - t0;
    rows_read += seen;
    if (seen != m) {
      fprintf(stderr, "particles: tick %llu: %llu particles reported as changed, %llu moved\n",
              (unsigned long long)k, (unsigned long long)seen, (unsigned long long)m);
      return 1;
    }
    for (i = m; i-- > 0;) { /* undo the swaps: perm is the identity again */
      const uint32_t tmp = perm[i];
      perm[i] = perm[swaps[i]];
      perm[swaps[i]] = tmp;
    }
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
    if (checkpoint && k % every_arg == 0) write_checkpoint(stage, checkpoint, k);
#endif
    if (tick_ms_arg) {
      struct timespec pause;
      pause.tv_sec = (time_t)(tick_ms_arg / 1000);
      pause.tv_nsec = (long)(tick_ms_arg % 1000) * 1000000L;
      nanosleep(&pause, NULL);
    }
  }

  /* ---- the final state: every particle, both attributes ------------------- */
  {
    kstage_read_t read = 0;
    kstage_read_group_t group;
    kstage_status_t st;
    uint64_t groups = 0;
    CHECK(kstage_read_attributes(stage, all, attrs, 2, NULL, &read));
    while ((st = kstage_fetch_read_next(stage, read, 0, &group)) == KSTAGE_OK) {
      const DLTensor* t = &group.data.tensors[0];
      const float* base = (const float*)((const char*)t->data + t->byte_offset);
      const float* model = group.attribute == attrs[0] ? pos : vel;
      if (group.prim_count != n || group.ordinal != ticks + 1) {
        fprintf(stderr, "particles: final read: %llu prims at ordinal %llu\n",
                (unsigned long long)group.prim_count, (unsigned long long)group.ordinal);
        return 1;
      }
      for (i = 0; i < n; ++i) {
        const uint64_t row = group.data.index_map ? group.data.index_map[i] : i;
        if (group.prims[i] != paths[i] ||
            memcmp(base + 3 * row, model + 3 * i, 3 * sizeof(float)) != 0) {
          fprintf(stderr, "particles: final %s of particle %llu does not match the model\n",
                  group.attribute == attrs[0] ? "position" : "velocity", (unsigned long long)i);
          return 1;
        }
      }
      ++groups;
      CHECK(kstage_release_group(stage, group.handle));
    }
    if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
    CHECK(kstage_release_read(stage, read));
    if (groups != 2) {
      fprintf(stderr, "particles: final read returned %llu groups, expected 2\n",
              (unsigned long long)groups);
      return 1;
    }
  }

  CHECK(kstage_query_release(stage, all));
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2
  if (stream) {
    ACHECK(kstage_adios2_close(stream)); /* the receiver's stream ends */
    CHECK(kstage_query_release(stage, run));
    CHECK(kstage_query_release(stage, streamed));
  }
#endif
  CHECK(kstage_destroy(stage));

  printf("kstage %u.%u.%u particles example\n", KSTAGE_VERSION_MAJOR, KSTAGE_VERSION_MINOR,
         KSTAGE_VERSION_PATCH);
  printf("  particles          %llu\n", (unsigned long long)n);
  printf("  ticks              %llu (%llu mask writes, %llu index_map writes)\n",
         (unsigned long long)ticks, (unsigned long long)mask_ticks, (unsigned long long)map_ticks);
  printf("  moved per tick     %llu (%.1f%%)\n", (unsigned long long)moved_per_tick,
         100.0 * (double)moved_per_tick / (double)n);
  printf("  producer           %llu rows written (position + velocity) in %.4f s: %.3g rows/s\n",
         (unsigned long long)rows_written, t_write,
         t_write > 0 ? (double)rows_written / t_write : 0.0);
  printf("  consumer           %llu rows read (position change ranges) in %.4f s: %.3g rows/s\n",
         (unsigned long long)rows_read, t_read, t_read > 0 ? (double)rows_read / t_read : 0.0);
  printf("  final state        %llu positions and velocities match the host model\n",
         (unsigned long long)n);
  checksum = fnv1a(checksum, pos, n * 3 * sizeof(float));
  checksum = fnv1a(checksum, vel, n * 3 * sizeof(float));
  printf("  checksum           %016llx (FNV-1a of the final positions and velocities)\n",
         (unsigned long long)checksum);
  printf("particles: OK\n");

  free(pos);
  free(vel);
  free(pos_out);
  free(vel_out);
  free(paths);
  free(perm);
  free(slot);
  free(sorted);
  free(index_map);
  free(mask);
  free(swaps);
  return 0;
}
