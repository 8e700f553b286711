/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Particles on MPI ranks: a 1-D domain decomposition of examples/c/particles.
 *
 *   mpirun -n P kstage_example_mpi_particles [-n N] [-t T] [-f PERCENT] [-c C] [-v]
 *          [--residency cpu|cuda|rocm] [--gpu-aware-mpi auto|yes|no]
 *          [--checkpoint FILE --every K] [--restart FILE]
 *
 * The box is [0, P) x [0, 1) x [0, 1), periodic; rank r owns the slab
 * x in [r, r + 1). Each rank starts with N particles (global ids r*N .. r*N+N-1,
 * paths "/particles/p<global id>") and owns a kstage stage holding its
 * particles' "gid" (uint64), "position" (float32 x 3, POINT) and "velocity"
 * (float32 x 3, VECTOR). Ordinal 1 is the initial state; tick k = 1..T uses
 * ordinals 2k (the move) and 2k + 1 (the migration):
 *
 *   move       read the rank's particles from its stage (zero-copy), move about
 *              PERCENT % of them (which ones and how is a function of the
 *              particle's id and the tick, so any process can replay it) and
 *              write the moved ones back at 2k -- odd ticks with a mask over
 *              all of the rank's particles, even ticks with an index_map over
 *              just the moved ones -- then seal 2k;
 *   migrate    a change-range read [2k, 2k] of "position" finds what moved,
 *              and of that, what left the rank's slab (a move of up to one
 *              slab width; crossing the periodic boundary counts as leaving,
 *              so on one rank particles migrate to the rank itself). A compact
 *              read of the leavers, in destination order, gives buffers that
 *              MPI_Alltoallv sends as they are (no packing). Arrivals come in:
 *              their ids into a buffer that becomes a managed tensor (the
 *              stage owns it from then on), their positions and velocities
 *              straight into the buffers of kstage_map_attribute, which
 *              kstage_unmap_attribute commits (no copy on the way). The
 *              leavers are deleted at home (kstage_delete_attributes with no
 *              attribute: tombstones), all at 2k + 1, then 2k + 1 is sealed.
 *
 * Beside the stages, the same program runs a plain-array model of the same
 * simulation: each rank's particles in plain arrays, moved by the same
 * function, migrated by a plain MPI code (scan, pack, MPI_Alltoallv,
 * compact, append). Every tick the counts of moved, sent and received
 * particles must agree; every C ticks (and at the end) the global particle
 * count must equal P*N on both sides, and each rank's count and checksum of
 * (id, position, velocity) must equal its model's. Any mismatch is reported
 * and the program exits non-zero. At the end rank 0 prints the migration
 * throughput of both sides (particles sent per second, per rank).
 *
 * MPI and kstage together: MPI_Init_thread first (MPI_THREAD_FUNNELED is
 * enough: kstage is called from the main thread only, and kstage's own
 * threads never call MPI), then kstage_create. --residency cuda puts the
 * stage's columns on GPU {kDLCUDA, local rank} (the rank's index among the
 * ranks of its node, from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)); kstage
 * initialises Kokkos on that GPU. A GPU-aware MPI (--gpu-aware-mpi) is then
 * given the device buffers of the read and map groups; without one, reads
 * land on the host (target_device kDLCPU) and arrivals go in as host
 * managed tensors. See docs/mpi.md.
 *
 * Checkpoints (where kstage's ADIOS2 bridge has its MPI form, KSTAGE_EXAMPLE_WITH_ADIOS2_MPI):
 * --checkpoint FILE --every K writes every rank's stage after every K-th tick as one BP5 step,
 * each rank its block (kstage_adios2_checkpoint_mpi), to FILE.0 and FILE.1 in turn; rank 0 then
 * names the complete one in FILE (a one-line file renamed over FILE). --restart FILE reads it
 * back on the same number of ranks (kstage_adios2_restart_mpi: each rank its own block), rebuilds
 * the plain model from each rank's restored stage, and runs the ticks after the checkpoint's;
 * moves and migrations are functions of (id, tick), so the restarted run ends where the
 * uninterrupted one does.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include <kstage/kstage.h>
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2_MPI
#include <kstage/kstage_adios2_mpi.h>
#endif
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h> /* MPIX_Query_cuda_support (Open MPI) */
#endif
#ifdef KSTAGE_EXAMPLE_CUDART
#include <cuda_runtime_api.h> /* waiting for a device read group's event */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- errors -------------------------------------------------------------------- */

static int g_rank = 0, g_nranks = 1;

#define FAIL(...)                                         \
  do {                                                    \
    fprintf(stderr, "[rank %d] mpi-particles: ", g_rank); \
    fprintf(stderr, __VA_ARGS__);                         \
    fprintf(stderr, "\n");                                \
    fflush(stderr);                                       \
    MPI_Abort(MPI_COMM_WORLD, 1);                         \
    exit(1); /* not reached */                            \
  } while (0)

#define CHECK(call)                                                                   \
  do {                                                                                \
    kstage_status_t st_ = (call);                                                     \
    if (st_ != KSTAGE_OK)                                                             \
      FAIL("%s failed (line %d): %s: %s", #call, __LINE__, kstage_status_string(st_), \
           kstage_last_error());                                                      \
  } while (0)

#define MPI_CHECK(call)                                       \
  do {                                                        \
    int rc_ = (call);                                         \
    if (rc_ != MPI_SUCCESS) {                                 \
      char msg_[MPI_MAX_ERROR_STRING];                        \
      int len_ = 0;                                           \
      MPI_Error_string(rc_, msg_, &len_);                     \
      FAIL("%s failed (line %d): %s", #call, __LINE__, msg_); \
    }                                                         \
  } while (0)

static void* xmalloc(size_t bytes) {
  /* 64-byte aligned (as kstage's own buffers); never NULL. */
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = aligned_alloc(64, rounded ? rounded : 64);
  if (!p) FAIL("out of memory (%zu bytes)", bytes);
  return p;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the simulation (shared by the stage side and the plain model) ----------- */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static float unit_float(uint64_t h) { return (float)(h >> 40) / 16777216.0f; } /* [0, 1) */

static uint64_t g_move_threshold; /* a particle moves at tick k iff its hash is below this */

static int is_mover(uint64_t gid, uint64_t tick) {
  return mix64(gid * 0x100000001B3ull ^ mix64(tick)) < g_move_threshold;
}

/* One step of a moving particle: a new x velocity of up to one slab width per
 * tick, small kicks in y and z. x is left unwrapped (the migration wraps it),
 * y and z wrap into [0, 1). */
static void move_particle(uint64_t gid, uint64_t tick, float* p, float* v) {
  const uint64_t h = mix64(gid ^ mix64(tick + 0x5151u));
  v[0] = 2.0f * unit_float(h) - 1.0f;
  v[1] += 0.01f * (unit_float(mix64(h + 1)) - 0.5f);
  v[2] += 0.01f * (unit_float(mix64(h + 2)) - 0.5f);
  p[0] += v[0];
  p[1] += v[1];
  p[1] -= floorf(p[1]);
  p[2] += v[2];
  p[2] -= floorf(p[2]);
}

/* x wrapped into the periodic box [0, P). */
static float wrap_x(float x) {
  const float box = (float)g_nranks;
  if (x < 0.0f) x += box;
  else if (x >= box) x -= box;
  if (x < 0.0f || x >= box) x = 0.0f; /* rounding at the edges */
  return x;
}
static int owner_of(float x) { /* x already wrapped */
  int r = (int)x;
  return r < 0 ? 0 : r >= g_nranks ? g_nranks - 1 : r;
}
/* The rank a particle at x goes to, or -1 if it stays here. */
static int destination(float x) {
  const float w = wrap_x(x);
  const int d = owner_of(w);
  return (w != x || d != g_rank) ? d : -1;
}

static void initial_particle(uint64_t gid, float* p, float* v) {
  const uint64_t h = mix64(gid ^ 0xC0FFEEull);
  p[0] = (float)g_rank + unit_float(h);
  if (owner_of(p[0]) != g_rank) p[0] = (float)g_rank;
  p[1] = unit_float(mix64(h + 1));
  p[2] = unit_float(mix64(h + 2));
  v[0] = 0.0f;
  v[1] = 0.02f * (unit_float(mix64(h + 3)) - 0.5f);
  v[2] = 0.02f * (unit_float(mix64(h + 4)) - 0.5f);
}

/* Order-independent checksum term of one particle (summed mod 2^64). */
static uint64_t particle_hash(uint64_t gid, const float* p, const float* v) {
  uint32_t bits[6];
  uint64_t h = mix64(gid);
  int c;
  memcpy(bits, p, 3 * sizeof(float));
  memcpy(bits + 3, v, 3 * sizeof(float));
  for (c = 0; c < 6; ++c) h = mix64(h ^ ((uint64_t)bits[c] << (c % 2 ? 32 : 0)));
  return h;
}

/* ---- the plain-array model (and the plain MPI baseline) ------------------------ */

typedef struct model_t {
  uint64_t n, cap;
  uint64_t* gid;
  float *pos, *vel; /* 3 per particle */
  /* exchange scratch */
  uint64_t* sgid;
  float *spos, *svel;
  int* dest;
  uint64_t scap;
} model_t;

static void model_reserve(model_t* m, uint64_t n) {
  if (n <= m->cap) return;
  uint64_t cap = m->cap ? m->cap : 1024;
  while (cap < n) cap *= 2;
  uint64_t* g = xmalloc(cap * sizeof(uint64_t));
  float* p = xmalloc(cap * 3 * sizeof(float));
  float* v = xmalloc(cap * 3 * sizeof(float));
  if (m->n) {
    memcpy(g, m->gid, m->n * sizeof(uint64_t));
    memcpy(p, m->pos, m->n * 3 * sizeof(float));
    memcpy(v, m->vel, m->n * 3 * sizeof(float));
  }
  free(m->gid);
  free(m->pos);
  free(m->vel);
  m->gid = g;
  m->pos = p;
  m->vel = v;
  m->cap = cap;
}

static uint64_t model_move(model_t* m, uint64_t tick) {
  uint64_t i, moved = 0;
  for (i = 0; i < m->n; ++i)
    if (is_mover(m->gid[i], tick)) {
      move_particle(m->gid[i], tick, &m->pos[3 * i], &m->vel[3 * i]);
      ++moved;
    }
  return moved;
}

/* The plain MPI exchange: scan every particle, pack the leavers by
 * destination, MPI_Alltoallv, compact what stays, append what arrives. */
static void model_migrate(model_t* m, uint64_t* sent, uint64_t* received) {
  const int P = g_nranks;
  int *scount = calloc((size_t)P, sizeof(int)), *rcount = calloc((size_t)P, sizeof(int));
  int *sdisp = calloc((size_t)P, sizeof(int)), *rdisp = calloc((size_t)P, sizeof(int));
  int *s3 = calloc((size_t)P, sizeof(int)), *r3 = calloc((size_t)P, sizeof(int));
  int *sd3 = calloc((size_t)P, sizeof(int)), *rd3 = calloc((size_t)P, sizeof(int));
  int* fill = calloc((size_t)P, sizeof(int));
  uint64_t i, keep = 0, leavers = 0, arrivals = 0;
  int d;
  if (!scount || !rcount || !sdisp || !rdisp || !s3 || !r3 || !sd3 || !rd3 || !fill)
    FAIL("out of memory");
  if (m->scap < m->n) {
    free(m->sgid);
    free(m->spos);
    free(m->svel);
    free(m->dest);
    m->scap = m->cap;
    m->sgid = xmalloc(m->scap * sizeof(uint64_t));
    m->spos = xmalloc(m->scap * 3 * sizeof(float));
    m->svel = xmalloc(m->scap * 3 * sizeof(float));
    m->dest = xmalloc(m->scap * sizeof(int));
  }
  for (i = 0; i < m->n; ++i) {
    m->dest[i] = destination(m->pos[3 * i]);
    if (m->dest[i] >= 0) ++scount[m->dest[i]], ++leavers;
  }
  for (d = 1; d < P; ++d) sdisp[d] = sdisp[d - 1] + scount[d - 1];
  for (i = 0; i < m->n; ++i) {
    const int to = m->dest[i];
    if (to >= 0) {
      const int slot = sdisp[to] + fill[to]++;
      m->sgid[slot] = m->gid[i];
      memcpy(&m->spos[3 * (size_t)slot], &m->pos[3 * i], 3 * sizeof(float));
      memcpy(&m->svel[3 * (size_t)slot], &m->vel[3 * i], 3 * sizeof(float));
    } else {
      if (keep != i) {
        m->gid[keep] = m->gid[i];
        memcpy(&m->pos[3 * keep], &m->pos[3 * i], 3 * sizeof(float));
        memcpy(&m->vel[3 * keep], &m->vel[3 * i], 3 * sizeof(float));
      }
      ++keep;
    }
  }
  MPI_CHECK(MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD));
  for (d = 0; d < P; ++d) {
    if (d > 0) rdisp[d] = rdisp[d - 1] + rcount[d - 1];
    arrivals += (uint64_t)rcount[d];
    s3[d] = 3 * scount[d], r3[d] = 3 * rcount[d], sd3[d] = 3 * sdisp[d], rd3[d] = 3 * rdisp[d];
  }
  m->n = keep;
  model_reserve(m, keep + arrivals);
  MPI_CHECK(MPI_Alltoallv(m->sgid, scount, sdisp, MPI_UINT64_T, m->gid + keep, rcount, rdisp,
                          MPI_UINT64_T, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Alltoallv(m->spos, s3, sd3, MPI_FLOAT, m->pos + 3 * keep, r3, rd3, MPI_FLOAT,
                          MPI_COMM_WORLD));
  MPI_CHECK(MPI_Alltoallv(m->svel, s3, sd3, MPI_FLOAT, m->vel + 3 * keep, r3, rd3, MPI_FLOAT,
                          MPI_COMM_WORLD));
  for (i = keep; i < keep + arrivals; ++i) m->pos[3 * i] = wrap_x(m->pos[3 * i]);
  m->n = keep + arrivals;
  *sent = leavers;
  *received = arrivals;
  free(scount), free(rcount), free(sdisp), free(rdisp);
  free(s3), free(r3), free(sd3), free(rd3), free(fill);
}

static uint64_t model_checksum(const model_t* m) {
  uint64_t i, sum = 0;
  for (i = 0; i < m->n; ++i) sum += particle_hash(m->gid[i], &m->pos[3 * i], &m->vel[3 * i]);
  return sum;
}

/* ---- the stage side ------------------------------------------------------------ */

typedef struct side_t {
  kstage_stage_t stage;
  kstage_token_t t_gid, t_pos, t_vel;
  kstage_query_t mine; /* the rank's particles (filter: HAS gid), refreshed after each seal */
  DLDevice residency;  /* {0,0}: host */
  int device_columns;  /* columns live on a GPU */
  int gpu_aware_mpi;   /* device buffers may go to MPI */
  /* scratch */
  float *pos_full, *vel_full, *pos_moved, *vel_moved;
  uint64_t* mask;
  uint32_t *moved_idx, *index_map;
  kstage_path_t* paths;
  uint64_t cap;
  /* counters */
  uint64_t zero_copy_sends, packed_sends, map_receives, managed_receives;
  double phase[8]; /* seconds spent in each step of side_migrate (-v prints them) */
} side_t;

static const char* const kPhaseNames[8] = {"change-range read",
                                           "compact read of leavers",
                                           "counts + ids exchanged",
                                           "deletes at home",
                                           "arrivals: paths + ids written",
                                           "positions/velocities received + unmapped",
                                           "seal",
                                           "membership query + cleanup"};
#define PHASE_END(s, k, tp)          \
  do {                               \
    const double t_ = now_seconds(); \
    (s)->phase[k] += t_ - (tp);      \
    (tp) = t_;                       \
  } while (0)

/* One read group per attribute, viewed row by row. */
typedef struct view_t {
  kstage_read_group_t g;
  const char* base;
  size_t row_bytes;
  int present;
} view_t;

static const void* view_row(const view_t* v, uint64_t i) {
  const uint64_t r = v->g.data.index_map ? v->g.data.index_map[i] : i;
  return v->base + r * v->row_bytes;
}

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

/* Wait until a read group's data is complete (device groups carry an event). */
static void wait_group(const kstage_read_group_t* g) {
  if (g->data.device_sync.event == 0) return;
#ifdef KSTAGE_EXAMPLE_CUDART
  if (cudaEventSynchronize((cudaEvent_t)g->data.device_sync.event) != cudaSuccess)
    FAIL("cudaEventSynchronize on a read group's event failed");
#else
  FAIL(
      "a read group on a device carries an event, and this build has no CUDA runtime to wait "
      "on it (build with the CUDA toolkit, or read to the host)");
#endif
}

/* Read `n` attributes of `query` and keep their groups (at most one value
 * group per attribute; tombstones are an error unless tombstones_ok). */
static kstage_read_t read_views(side_t* s, kstage_query_t query, const kstage_token_t* attrs, int n,
                                const kstage_read_desc_t* desc, view_t* views) {
  kstage_read_t read = 0;
  kstage_read_group_t g;
  kstage_status_t st;
  int a;
  memset(views, 0, (size_t)n * sizeof(view_t));
  CHECK(kstage_read_attributes(s->stage, query, attrs, (uint64_t)n, desc, &read));
  while ((st = kstage_fetch_read_next(s->stage, read, 0, &g)) == KSTAGE_OK) {
    for (a = 0; a < n && attrs[a] != g.attribute; ++a) {
    }
    if (a == n || g.is_delete || views[a].present)
      FAIL("unexpected read group (attribute %llu, delete %d, a second group %d)",
           (unsigned long long)g.attribute, (int)g.is_delete, a < n ? views[a].present : 0);
    views[a].g = g;
    views[a].present = 1;
    views[a].base = (const char*)g.data.tensors[0].data + g.data.tensors[0].byte_offset;
    views[a].row_bytes = (size_t)g.dtype.bits / 8 * g.dtype.lanes;
    wait_group(&g);
  }
  if (st != KSTAGE_END_OF_ITERATION) CHECK(st);
  return read;
}

static void release_views(side_t* s, kstage_read_t read, view_t* views, int n) {
  int a;
  for (a = 0; a < n; ++a)
    if (views[a].present) CHECK(kstage_release_group(s->stage, views[a].g.handle));
  CHECK(kstage_release_read(s->stage, read));
}

/* Reads that the host computes on: zero-copy from host columns, else copied down. */
static kstage_read_desc_t host_read_desc(const side_t* s) {
  kstage_read_desc_t d = kstage_read_desc_init();
  if (s->device_columns) d.target_device.device_type = kDLCPU;
  return d;
}

static void side_reserve(side_t* s, uint64_t n) {
  if (n <= s->cap) return;
  uint64_t cap = s->cap ? s->cap : 1024;
  while (cap < n) cap *= 2;
  free(s->pos_full), free(s->vel_full), free(s->pos_moved), free(s->vel_moved);
  free(s->mask), free(s->moved_idx), free(s->index_map), free(s->paths);
  s->pos_full = xmalloc(cap * 3 * sizeof(float));
  s->vel_full = xmalloc(cap * 3 * sizeof(float));
  s->pos_moved = xmalloc(cap * 3 * sizeof(float));
  s->vel_moved = xmalloc(cap * 3 * sizeof(float));
  s->mask = xmalloc((cap + 63) / 64 * sizeof(uint64_t));
  s->moved_idx = xmalloc(cap * sizeof(uint32_t));
  s->index_map = xmalloc(cap * sizeof(uint32_t));
  s->paths = xmalloc(cap * sizeof(kstage_path_t));
  s->cap = cap;
}

static void refresh_mine(side_t* s) {
  kstage_filter_t f;
  memset(&f, 0, sizeof f);
  f.has_attributes = &s->t_gid;
  f.has_attribute_count = 1;
  if (s->mine) CHECK(kstage_query_release(s->stage, s->mine));
  s->mine = 0;
  CHECK(kstage_query_filter(s->stage, &f, &s->mine));
}

static uint64_t mine_count(const side_t* s) {
  uint64_t n = 0;
  CHECK(kstage_query_count(s->stage, s->mine, &n));
  return n;
}

static void wait_op(side_t* s, kstage_op_t op) {
  kstage_status_t st = kstage_wait(s->stage, op, KSTAGE_TIMEOUT_INFINITE);
  if (st != KSTAGE_OK) {
    const char* msg = "";
    kstage_op_error(s->stage, op, &msg);
    FAIL("op failed: %s: %s", kstage_status_string(st), msg);
  }
  CHECK(kstage_release_op(s->stage, op));
}

/* Path ids of particles gids[0..n) ("/particles/p<gid>"), interned in one call (one lock for the
 * batch, not one per particle). */
static void intern_particles(side_t* s, const uint64_t* gids, uint64_t n, kstage_path_t* out) {
  enum { NAME = 32 };
  char* names;
  const char** strings;
  uint64_t i;
  if (n == 0) return;
  names = xmalloc(n * NAME);
  strings = xmalloc(n * sizeof(char*));
  for (i = 0; i < n; ++i) {
    snprintf(names + i * NAME, NAME, "/particles/p%llu", (unsigned long long)gids[i]);
    strings[i] = names + i * NAME;
  }
  CHECK(kstage_intern_paths(s->stage, strings, NULL, n, out));
  free((void*)strings);
  free(names);
}

/* Ordinal 1: the rank's initial particles (the same as the model's). */
static void side_init(side_t* s, const model_t* m) {
  kstage_query_t q = 0;
  kstage_token_t attrs[3];
  kstage_write_data_t data[3];
  DLTensor t[3];
  int64_t shape[1];
  kstage_op_t op = 0;
  int a;
  side_reserve(s, m->n);
  intern_particles(s, m->gid, m->n, s->paths);
  CHECK(kstage_query_paths(s->stage, s->paths, m->n, &q));
  shape[0] = (int64_t)m->n;
  t[0] = host_tensor(m->gid, shape, kDLUInt, 64, 1);
  t[1] = host_tensor(m->pos, shape, kDLFloat, 32, 3);
  t[2] = host_tensor(m->vel, shape, kDLFloat, 32, 3);
  attrs[0] = s->t_gid, attrs[1] = s->t_pos, attrs[2] = s->t_vel;
  for (a = 0; a < 3; ++a) {
    data[a] = kstage_write_data_init();
    data[a].tensors = &t[a];
    data[a].tensor_count = 1;
    data[a].residency = s->residency; /* {0,0}: the stage's (config) residency */
  }
  data[0].semantic = KSTAGE_SEMANTIC_NONE;
  data[1].semantic = KSTAGE_SEMANTIC_POINT;
  data[2].semantic = KSTAGE_SEMANTIC_VECTOR;
  CHECK(kstage_write_attributes(s->stage, q, attrs, data, 3, 1, KSTAGE_PRIM_MODE_INSERT, &op));
  wait_op(s, op);
  CHECK(kstage_query_release(s->stage, q));
  CHECK(kstage_advance_write_floor(s->stage, 1, NULL, 0));
  refresh_mine(s);
}

/* The move at ordinal 2k: returns how many particles moved. */
static uint64_t side_move(side_t* s, uint64_t tick) {
  const uint64_t ordinal = 2 * tick;
  const kstage_token_t attrs[3] = {s->t_gid, s->t_pos, s->t_vel};
  const kstage_read_desc_t desc = host_read_desc(s);
  const int use_mask = tick % 2 == 1;
  view_t v[3];
  kstage_read_t read;
  kstage_query_t target = s->mine;
  kstage_write_data_t data[2];
  DLTensor t[2];
  int64_t shape[1];
  kstage_op_t op = 0;
  uint64_t n = mine_count(s), moved = 0, i;
  int a;
  if (n == 0) return 0;
  side_reserve(s, n);
  read = read_views(s, s->mine, attrs, 3, &desc, v);
  for (a = 0; a < 3; ++a)
    if (!v[a].present || v[a].g.prim_count != n)
      FAIL("tick %llu: the read of the rank's %llu particles returned %llu rows of attribute %d",
           (unsigned long long)tick, (unsigned long long)n,
           (unsigned long long)(v[a].present ? v[a].g.prim_count : 0), a);
  if (use_mask) memset(s->mask, 0, (n + 63) / 64 * sizeof(uint64_t));
  for (i = 0; i < n; ++i) {
    const uint64_t gid = *(const uint64_t*)view_row(&v[0], i);
    float p[3], w[3];
    if (!is_mover(gid, tick)) continue;
    memcpy(p, view_row(&v[1], i), sizeof p);
    memcpy(w, view_row(&v[2], i), sizeof w);
    move_particle(gid, tick, p, w);
    if (use_mask) {
      /* Row i of the full-size arrays; only the masked rows are read. */
      memcpy(&s->pos_full[3 * i], p, sizeof p);
      memcpy(&s->vel_full[3 * i], w, sizeof w);
      s->mask[i / 64] |= 1ull << (i % 64);
    } else {
      memcpy(&s->pos_moved[3 * moved], p, sizeof p);
      memcpy(&s->vel_moved[3 * moved], w, sizeof w);
      s->moved_idx[moved] = (uint32_t)i;
    }
    ++moved;
  }
  if (!use_mask) {
    /* A query over just the moved particles (in the rank's order); their
     * rows go out in reverse order, and index_map says which row is whose. */
    for (i = 0; i < moved; ++i) {
      s->paths[i] = v[0].g.prims[s->moved_idx[i]];
      s->index_map[i] = (uint32_t)(moved - 1 - i);
    }
    for (i = 0; i < moved / 2; ++i) { /* reverse the rows in place */
      const uint64_t j = moved - 1 - i;
      float tmp[3];
      memcpy(tmp, &s->pos_moved[3 * i], sizeof tmp);
      memcpy(&s->pos_moved[3 * i], &s->pos_moved[3 * j], sizeof tmp);
      memcpy(&s->pos_moved[3 * j], tmp, sizeof tmp);
      memcpy(tmp, &s->vel_moved[3 * i], sizeof tmp);
      memcpy(&s->vel_moved[3 * i], &s->vel_moved[3 * j], sizeof tmp);
      memcpy(&s->vel_moved[3 * j], tmp, sizeof tmp);
    }
  }
  release_views(s, read, v, 3);
  if (moved > 0) {
    for (a = 0; a < 2; ++a) {
      data[a] = kstage_write_data_init();
      data[a].tensors = &t[a];
      data[a].tensor_count = 1;
    }
    data[0].semantic = KSTAGE_SEMANTIC_POINT;
    data[1].semantic = KSTAGE_SEMANTIC_VECTOR;
    if (use_mask) {
      shape[0] = (int64_t)n;
      t[0] = host_tensor(s->pos_full, shape, kDLFloat, 32, 3);
      t[1] = host_tensor(s->vel_full, shape, kDLFloat, 32, 3);
      data[0].count = data[1].count = n;
      data[0].mask = data[1].mask = s->mask;
    } else {
      CHECK(kstage_query_paths(s->stage, s->paths, moved, &target));
      shape[0] = (int64_t)moved;
      t[0] = host_tensor(s->pos_moved, shape, kDLFloat, 32, 3);
      t[1] = host_tensor(s->vel_moved, shape, kDLFloat, 32, 3);
      data[0].count = data[1].count = moved;
      data[0].index_map = data[1].index_map = s->index_map;
    }
    CHECK(kstage_write_attributes(s->stage, target, &attrs[1], data, 2, ordinal,
                                  KSTAGE_PRIM_MODE_UPDATE, &op));
    wait_op(s, op);
    if (target != s->mine) CHECK(kstage_query_release(s->stage, target));
  }
  CHECK(kstage_advance_write_floor(s->stage, ordinal, NULL, 0));
  return moved;
}

/* DLPack managed tensor over a malloc'd host buffer: the stage frees it. */
typedef struct owned_t {
  struct DLManagedTensorVersioned m;
  int64_t shape[1];
} owned_t;

static void owned_deleter(struct DLManagedTensorVersioned* self) {
  owned_t* o = (owned_t*)self->manager_ctx;
  free(o->m.dl_tensor.data);
  free(o);
}

static struct DLManagedTensorVersioned* owned_tensor(void* data, uint64_t rows, uint8_t code,
                                                     uint8_t bits, uint16_t lanes) {
  owned_t* o = xmalloc(sizeof *o);
  memset(o, 0, sizeof *o);
  o->shape[0] = (int64_t)rows;
  o->m.version.major = DLPACK_MAJOR_VERSION;
  o->m.version.minor = DLPACK_MINOR_VERSION;
  o->m.manager_ctx = o;
  o->m.deleter = owned_deleter;
  o->m.dl_tensor = host_tensor(data, o->shape, code, bits, lanes);
  return &o->m;
}

/* Write a received host buffer (rows of the arrival query) as a managed tensor. */
static void write_managed(side_t* s, kstage_query_t q, kstage_token_t attr, kstage_semantic_t sem,
                          void* buf, uint64_t rows, uint8_t code, uint8_t bits, uint16_t lanes,
                          uint64_t ordinal, kstage_prim_mode_t mode) {
  struct DLManagedTensorVersioned* mt = owned_tensor(buf, rows, code, bits, lanes);
  kstage_write_data_t d = kstage_write_data_init();
  kstage_op_t op = 0;
  d.managed_tensors = &mt;
  d.tensor_count = 1;
  d.semantic = sem;
  CHECK(kstage_write_attribute(s->stage, q, attr, ordinal, &d, mode, &op));
  wait_op(s, op);
  ++s->managed_receives;
}

/* The send buffer of one attribute: the compact read group's own tensor when
 * it holds the leavers in destination order (zero copy), else a packed copy. */
static const void* send_buffer(side_t* s, const view_t* v, uint64_t leavers,
                               const kstage_path_t* paths, void** packed) {
  const DLTensor* t;
  uint64_t i;
  *packed = NULL;
  if (leavers == 0) return NULL;
  if (!v->present)
    FAIL("the compact read of %llu leavers returned no group", (unsigned long long)leavers);
  t = &v->g.data.tensors[0];
  if (v->g.prim_count == leavers && v->g.data.index_map == NULL && t->ndim == 1 &&
      (t->strides == NULL || t->strides[0] == 1) &&
      (t->device.device_type == kDLCPU || s->gpu_aware_mpi) &&
      memcmp(v->g.prims, paths, leavers * sizeof(kstage_path_t)) == 0) {
    ++s->zero_copy_sends;
    return v->base;
  }
  if (t->device.device_type != kDLCPU)
    FAIL("a leaver read landed on device %d and MPI is not GPU-aware", (int)t->device.device_type);
  /* Pack: rows in the order of `paths` (not expected with kstage's compact reads). */
  *packed = xmalloc(leavers * v->row_bytes);
  for (i = 0; i < leavers; ++i) {
    uint64_t j;
    for (j = 0; j < v->g.prim_count && v->g.prims[j] != paths[i]; ++j) {
    }
    if (j == v->g.prim_count)
      FAIL("leaver %llu missing from its read group", (unsigned long long)i);
    memcpy((char*)*packed + i * v->row_bytes, view_row(v, j), v->row_bytes);
  }
  ++s->packed_sends;
  return *packed;
}

typedef struct exchange_t {
  int *scount, *rcount, *sdisp, *rdisp, *s3, *r3, *sd3, *rd3;
} exchange_t;

/* The migration at ordinal 2k + 1. Returns the number of particles sent. */
static uint64_t side_migrate(side_t* s, uint64_t tick, uint64_t moved_expected,
                             uint64_t* received) {
  const uint64_t ord_move = 2 * tick, ordinal = 2 * tick + 1;
  const int P = g_nranks;
  const kstage_token_t attrs[3] = {s->t_gid, s->t_pos, s->t_vel};
  kstage_read_desc_t desc = host_read_desc(s);
  view_t changed, out[3];
  kstage_read_t read = 0, out_read = 0;
  kstage_query_t leavers_q = 0, arrivals_q = 0;
  exchange_t x;
  int* dest;
  int d;
  uint64_t i, n_changed, leavers = 0, arrivals = 0;
  kstage_path_t *changed_paths, *leaver_paths;
  const void* sendbuf[3] = {NULL, NULL, NULL};
  void* packed[3] = {NULL, NULL, NULL};
  uint64_t* gid_in;
  static char dummy[64];
  double tp = now_seconds();

  x.scount = calloc((size_t)P, sizeof(int)), x.rcount = calloc((size_t)P, sizeof(int));
  x.sdisp = calloc((size_t)P, sizeof(int)), x.rdisp = calloc((size_t)P, sizeof(int));
  x.s3 = calloc((size_t)P, sizeof(int)), x.r3 = calloc((size_t)P, sizeof(int));
  x.sd3 = calloc((size_t)P, sizeof(int)), x.rd3 = calloc((size_t)P, sizeof(int));
  if (!x.scount || !x.rcount || !x.sdisp || !x.rdisp || !x.s3 || !x.r3 || !x.sd3 || !x.rd3)
    FAIL("out of memory");

  /* 1. What moved at 2k, and where it goes: a change-range read. */
  desc.change_range = true;
  desc.range_begin = ord_move;
  desc.range_end = ord_move;
  read = read_views(s, s->mine, &s->t_pos, 1, &desc, &changed);
  n_changed = changed.present ? changed.g.prim_count : 0;
  if (n_changed != moved_expected)
    FAIL("tick %llu: the change range [%llu, %llu] holds %llu particles, %llu moved",
         (unsigned long long)tick, (unsigned long long)ord_move, (unsigned long long)ord_move,
         (unsigned long long)n_changed, (unsigned long long)moved_expected);
  dest = xmalloc((n_changed ? n_changed : 1) * sizeof(int));
  changed_paths = xmalloc((n_changed ? n_changed : 1) * sizeof(kstage_path_t));
  leaver_paths = xmalloc((n_changed ? n_changed : 1) * sizeof(kstage_path_t));
  for (i = 0; i < n_changed; ++i) {
    const float* p = view_row(&changed, i);
    dest[i] = destination(p[0]);
    changed_paths[i] = changed.g.prims[i];
    if (dest[i] >= 0) ++x.scount[dest[i]], ++leavers;
  }
  release_views(s, read, &changed, 1);
  for (d = 1; d < P; ++d) x.sdisp[d] = x.sdisp[d - 1] + x.scount[d - 1];
  {
    int* fill = calloc((size_t)P, sizeof(int));
    if (!fill) FAIL("out of memory");
    for (i = 0; i < n_changed; ++i)
      if (dest[i] >= 0) leaver_paths[x.sdisp[dest[i]] + fill[dest[i]]++] = changed_paths[i];
    free(fill);
  }

  PHASE_END(s, 0, tp);
  /* 2. The leavers in destination order, compact: these buffers are sent as they are. */
  if (leavers > 0) {
    kstage_read_desc_t cd = kstage_read_desc_init();
    cd.compact = true;
    if (s->device_columns && !s->gpu_aware_mpi) cd.target_device.device_type = kDLCPU;
    CHECK(kstage_query_paths(s->stage, leaver_paths, leavers, &leavers_q));
    out_read = read_views(s, leavers_q, attrs, 3, &cd, out);
    for (d = 0; d < 3; ++d) sendbuf[d] = send_buffer(s, &out[d], leavers, leaver_paths, &packed[d]);
  }

  PHASE_END(s, 1, tp);
  /* 3. Counts, then the ids (they name the arrivals' paths). */
  MPI_CHECK(MPI_Alltoall(x.scount, 1, MPI_INT, x.rcount, 1, MPI_INT, MPI_COMM_WORLD));
  for (d = 0; d < P; ++d) {
    if (d > 0) x.rdisp[d] = x.rdisp[d - 1] + x.rcount[d - 1];
    arrivals += (uint64_t)x.rcount[d];
    x.s3[d] = 3 * x.scount[d], x.r3[d] = 3 * x.rcount[d];
    x.sd3[d] = 3 * x.sdisp[d], x.rd3[d] = 3 * x.rdisp[d];
  }
  gid_in = xmalloc((arrivals ? arrivals : 1) * sizeof(uint64_t));
  MPI_CHECK(MPI_Alltoallv(sendbuf[0] ? sendbuf[0] : dummy, x.scount, x.sdisp, MPI_UINT64_T, gid_in,
                          x.rcount, x.rdisp, MPI_UINT64_T, MPI_COMM_WORLD));

  PHASE_END(s, 2, tp);
  /* 4. Home: the leavers go (tombstones), before anything arrives (on one
   *    rank a particle can leave and come back in the same tick). */
  if (leavers > 0) {
    kstage_op_t op = 0;
    CHECK(kstage_delete_attributes(s->stage, leavers_q, NULL, 0, ordinal, &op));
    wait_op(s, op);
  }

  PHASE_END(s, 3, tp);
  /* 5. Arrivals: ids as a managed tensor (INSERT creates the prims), then
   *    positions and velocities received straight into map buffers. */
  if (arrivals > 0) {
    side_reserve(s, arrivals);
    intern_particles(s, gid_in, arrivals, s->paths);
    CHECK(kstage_query_paths(s->stage, s->paths, arrivals, &arrivals_q));
    write_managed(s, arrivals_q, s->t_gid, KSTAGE_SEMANTIC_NONE, gid_in, arrivals, kDLUInt, 64, 1,
                  ordinal, KSTAGE_PRIM_MODE_INSERT);
    gid_in = NULL; /* the stage's now */
  } else {
    free(gid_in);
    gid_in = NULL;
  }
  PHASE_END(s, 4, tp);
  for (d = 1; d < 3; ++d) {
    const kstage_token_t attr = attrs[d];
    const kstage_semantic_t sem = d == 1 ? KSTAGE_SEMANTIC_POINT : KSTAGE_SEMANTIC_VECTOR;
    /* Positions are wrapped into the box on arrival (host code): on a GPU
     * column they arrive in host memory; velocities need no fix-up. */
    const int via_map = arrivals > 0 && (!s->device_columns || (s->gpu_aware_mpi && d == 2));
    kstage_map_t map = 0;
    kstage_map_group_info_t mg;
    float* recv = NULL;
    float* staging = NULL;
    memset(&mg, 0, sizeof mg);
    if (via_map) {
      kstage_map_desc_t md = kstage_map_desc_init();
      kstage_status_t st;
      md.attribute = attr;
      md.semantic = sem;
      md.dtype.code = kDLFloat;
      md.dtype.bits = 32;
      md.dtype.lanes = 3;
      md.prim_mode = KSTAGE_PRIM_MODE_UPDATE; /* the ids' INSERT made them */
      CHECK(kstage_map_attribute(s->stage, arrivals_q, &md, ordinal, NULL, 0, &map));
      CHECK(kstage_fetch_map_next(s->stage, map, 0, &mg));
      if (mg.prim_count != arrivals)
        FAIL("a map of %llu arrivals gave a group of %llu", (unsigned long long)arrivals,
             (unsigned long long)mg.prim_count);
      st = kstage_fetch_map_next(s->stage, map, 0, &(kstage_map_group_info_t){0});
      if (st != KSTAGE_END_OF_ITERATION)
        FAIL("a map of one group gave a second one (%s)", kstage_status_string(st));
      recv = (float*)((char*)mg.data.tensors[0].data + mg.data.tensors[0].byte_offset);
      if (mg.data.tensors[0].device.device_type != kDLCPU && !s->gpu_aware_mpi)
        FAIL("a map buffer on device %d, and MPI is not GPU-aware",
             (int)mg.data.tensors[0].device.device_type);
      if (mg.data.index_map) { /* rows not in prim order: receive, then place them (host only) */
        if (mg.data.tensors[0].device.device_type != kDLCPU)
          FAIL("a device map group with an index_map: this example places rows on the host only");
        staging = xmalloc(arrivals * 3 * sizeof(float));
      }
    } else if (arrivals > 0) {
      recv = xmalloc(arrivals * 3 * sizeof(float));
    }
    MPI_CHECK(MPI_Alltoallv(sendbuf[d] ? sendbuf[d] : dummy, x.s3, x.sd3, MPI_FLOAT,
                            staging ? staging
                            : recv  ? recv
                                    : (float*)dummy,
                            x.r3, x.rd3, MPI_FLOAT, MPI_COMM_WORLD));
    if (staging) {
      for (i = 0; i < arrivals; ++i)
        memcpy(&recv[3 * (uint64_t)mg.data.index_map[i]], &staging[3 * i], 3 * sizeof(float));
      free(staging);
    }
    if (d == 1)
      for (i = 0; i < arrivals; ++i) recv[3 * i] = wrap_x(recv[3 * i]);
    if (via_map) {
      kstage_op_t op = 0;
      kstage_device_sync_t none = {0, 0};
      CHECK(kstage_unmap_attribute(s->stage, map, none, &op));
      wait_op(s, op);
      ++s->map_receives;
    } else if (arrivals > 0) {
      write_managed(s, arrivals_q, attr, sem, recv, arrivals, kDLFloat, 32, 3, ordinal,
                    KSTAGE_PRIM_MODE_UPDATE);
    }
  }

  PHASE_END(s, 5, tp);
  /* 6. Seal the tick; the rank's particles are now what the filter says. */
  CHECK(kstage_advance_write_floor(s->stage, ordinal, NULL, 0));
  PHASE_END(s, 6, tp);
  if (leavers > 0) {
    release_views(s, out_read, out, 3);
    CHECK(kstage_query_release(s->stage, leavers_q));
  }
  if (arrivals_q) CHECK(kstage_query_release(s->stage, arrivals_q));
  refresh_mine(s);
  for (d = 0; d < 3; ++d) free(packed[d]);
  free(dest), free(changed_paths), free(leaver_paths);
  free(x.scount), free(x.rcount), free(x.sdisp), free(x.rdisp);
  free(x.s3), free(x.r3), free(x.sd3), free(x.rd3);
  PHASE_END(s, 7, tp);
  *received = arrivals;
  return leavers;
}

static uint64_t side_checksum(side_t* s, uint64_t* count) {
  const kstage_token_t attrs[3] = {s->t_gid, s->t_pos, s->t_vel};
  const kstage_read_desc_t desc = host_read_desc(s);
  view_t v[3];
  kstage_read_t read;
  uint64_t n = mine_count(s), i, sum = 0;
  int a;
  *count = n;
  if (n == 0) return 0;
  read = read_views(s, s->mine, attrs, 3, &desc, v);
  for (a = 0; a < 3; ++a)
    if (!v[a].present || v[a].g.prim_count != n)
      FAIL("checksum read: %llu particles, attribute %d has %llu rows", (unsigned long long)n, a,
           (unsigned long long)(v[a].present ? v[a].g.prim_count : 0));
  for (i = 0; i < n; ++i)
    sum +=
        particle_hash(*(const uint64_t*)view_row(&v[0], i), view_row(&v[1], i), view_row(&v[2], i));
  release_views(s, read, v, 3);
  return sum;
}

/* ---- conservation ---------------------------------------------------------------- */

static void check_conservation(side_t* s, const model_t* m, uint64_t tick, uint64_t total) {
  uint64_t count = 0, local[4], global[4];
  const uint64_t sum = side_checksum(s, &count);
  local[0] = count;
  local[1] = m->n;
  local[2] = sum;
  local[3] = model_checksum(m);
  MPI_CHECK(MPI_Allreduce(local, global, 4, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
  if (local[0] != local[1] || local[2] != local[3])
    FAIL(
        "tick %llu: conservation check failed on this rank: the stage holds %llu particles "
        "(checksum %016llx), the model %llu (checksum %016llx)",
        (unsigned long long)tick, (unsigned long long)local[0], (unsigned long long)local[2],
        (unsigned long long)local[1], (unsigned long long)local[3]);
  if (global[0] != total || global[1] != total || global[2] != global[3])
    FAIL(
        "tick %llu: global conservation check failed: %llu particles in the stages, %llu in the "
        "model, %llu at the start; checksums %016llx (stages) and %016llx (model)",
        (unsigned long long)tick, (unsigned long long)global[0], (unsigned long long)global[1],
        (unsigned long long)total, (unsigned long long)global[2], (unsigned long long)global[3]);
  if (g_rank == 0)
    printf("  tick %4llu: %llu particles on %d rank(s), checksum %016llx: stages = model\n",
           (unsigned long long)tick, (unsigned long long)global[0], g_nranks,
           (unsigned long long)global[2]);
}

/* ---- checkpoints (the ADIOS2 bridge on MPI ranks) --------------------------------- */

#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2_MPI
#define ACHECK(call)                                                                  \
  do {                                                                                \
    kstage_status_t st_ = (call);                                                     \
    if (st_ != KSTAGE_OK)                                                             \
      FAIL("%s failed (line %d): %s: %s", #call, __LINE__, kstage_status_string(st_), \
           kstage_adios2_last_error());                                               \
  } while (0)

/* Checkpoint number `count`: every rank's stage into FILE.<count % 2>, then rank 0 names it in
 * FILE (written aside and renamed over FILE: FILE always names a complete checkpoint). */
static void write_checkpoint(side_t* s, const char* file, uint64_t count, uint64_t tick) {
  char dir[4096], tmp[4096];
  FILE* f;
  snprintf(dir, sizeof dir, "%s.%d", file, (int)(count % 2));
  snprintf(tmp, sizeof tmp, "%s.tmp", file);
  ACHECK(kstage_adios2_checkpoint_mpi(s->stage, dir, MPI_COMM_WORLD));
  if (g_rank == 0) {
    f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", dir) < 0 || fclose(f) != 0 || rename(tmp, file) != 0)
      FAIL("cannot name the checkpoint in %s", file);
    printf("  checkpoint at tick %llu in %s\n", (unsigned long long)tick, dir);
    fflush(stdout);
  }
}

/* The restart: the checkpoint FILE names into every rank's stage; the model from each rank's
 * restored particles. Returns the checkpoint's tick. */
static uint64_t restart_from(side_t* s, model_t* m, const char* file) {
  const kstage_token_t attrs[3] = {s->t_gid, s->t_pos, s->t_vel};
  const kstage_read_desc_t desc = host_read_desc(s);
  char dir[4096] = {0};
  FILE* f = fopen(file, "r");
  uint64_t ordinal = 0, n, i;
  size_t len;
  view_t v[3];
  kstage_read_t read;
  int a;
  if (!f || !fgets(dir, (int)sizeof dir, f)) FAIL("%s names no checkpoint", file);
  fclose(f);
  len = strlen(dir);
  while (len > 0 && (dir[len - 1] == '\n' || dir[len - 1] == '\r')) dir[--len] = '\0';
  ACHECK(kstage_adios2_restart_mpi(s->stage, dir, MPI_COMM_WORLD, &ordinal));
  if (ordinal < 1 || ordinal % 2 == 0)
    FAIL("the checkpoint in %s is at ordinal %llu, not at the end of a tick", dir,
         (unsigned long long)ordinal);
  refresh_mine(s);
  n = mine_count(s);
  model_reserve(m, n);
  m->n = n;
  side_reserve(s, n);
  if (n > 0) {
    read = read_views(s, s->mine, attrs, 3, &desc, v);
    for (a = 0; a < 3; ++a)
      if (!v[a].present || v[a].g.prim_count != n)
        FAIL("the checkpoint in %s lacks an attribute of a particle", dir);
    for (i = 0; i < n; ++i) {
      memcpy(&m->gid[i], view_row(&v[0], i), sizeof(uint64_t));
      memcpy(&m->pos[3 * i], view_row(&v[1], i), 3 * sizeof(float));
      memcpy(&m->vel[3 * i], view_row(&v[2], i), 3 * sizeof(float));
      /* Each rank gets its own block back only on the number of ranks that wrote it. */
      if (owner_of(m->pos[3 * i]) != g_rank)
        FAIL(
            "particle %llu of the checkpoint in %s is not in rank %d's slab: restart on the number "
            "of ranks that wrote it",
            (unsigned long long)m->gid[i], dir, g_rank);
    }
    release_views(s, read, v, 3);
  }
  if (g_rank == 0)
    printf("  restarted from %s at tick %llu\n", dir, (unsigned long long)((ordinal - 1) / 2));
  return (ordinal - 1) / 2;
}
#endif

/* ---- command line ------------------------------------------------------------------ */

static void usage(const char* argv0) {
  if (g_rank == 0)
    fprintf(
        stderr,
        "usage: mpirun -n P %s [-n particles per rank] [-t ticks] [-f percent moving per tick]\n"
        "       [-c check every C ticks] [--residency cpu|cuda|rocm] [--gpu-aware-mpi "
        "auto|yes|no]\n"
        "       [--checkpoint FILE --every K] [--restart FILE] (with the ADIOS2 bridge's MPI "
        "form)\n"
        "       [-v: where rank 0's migration time goes]\n",
        argv0);
}

static int parse_u64(const char* s, unsigned long long lo, unsigned long long hi,
                     unsigned long long* out) {
  char* end = NULL;
  unsigned long long v;
  if (!s || !*s || *s == '-') return 0;
  v = strtoull(s, &end, 10);
  if (*end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* Whether the MPI library can take GPU memory: 1 yes, 0 no or unknown. */
static int mpi_cuda_aware(void) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#else
  return 0;
#endif
}

int main(int argc, char** argv) {
  unsigned long long n_arg = 100000, t_arg = 20, c_arg = 5;
  double f_arg = 5.0;
  const char* residency_arg = "cpu";
  const char* gpu_aware_arg = "auto";
  const char* checkpoint_arg = NULL; /* --checkpoint FILE */
  const char* restart_arg = NULL;    /* --restart FILE */
  unsigned long long every_arg = 0;  /* --every K */
  uint64_t first_tick = 1;
  int provided = 0, local_rank = 0, verbose = 0, a;
  MPI_Comm node;
  kstage_config_t config;
  side_t s;
  model_t m;
  uint64_t tick, i, total;
  uint64_t moved_sum = 0, sent_sum = 0, recv_sum = 0;
  double t_move = 0, t_mig = 0, t_model_move = 0, t_model_mig = 0, t0, t_start;

  /* MPI first (kstage is called from this thread only: FUNNELED is enough). */
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "mpi-particles: MPI_Init_thread failed\n");
    return 1;
  }
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g_nranks));
  if (provided < MPI_THREAD_FUNNELED)
    FAIL("MPI provides thread level %d, below MPI_THREAD_FUNNELED", provided);
  /* The rank's index on its node: which GPU it drives. */
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  MPI_CHECK(MPI_Comm_free(&node));

  for (a = 1; a < argc; ++a) {
    const char* opt = argv[a];
    const char* val = a + 1 < argc ? argv[a + 1] : NULL;
    int ok = val != NULL;
    if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
      usage(argv[0]);
      MPI_Finalize();
      return 0;
    } else if (strcmp(opt, "-v") == 0) {
      verbose = 1;
      continue;
    } else if (strcmp(opt, "-n") == 0) ok = ok && parse_u64(val, 1, 0x7FFFFFFFull / 8, &n_arg);
    else if (strcmp(opt, "-t") == 0) ok = ok && parse_u64(val, 1, 1000000ull, &t_arg);
    else if (strcmp(opt, "-c") == 0) ok = ok && parse_u64(val, 1, 1000000ull, &c_arg);
    else if (strcmp(opt, "-f") == 0) {
      char* end = NULL;
      ok = ok && (f_arg = strtod(val, &end), *end == '\0' && f_arg >= 0.0 && f_arg <= 100.0);
    } else if (strcmp(opt, "--residency") == 0) {
      ok = ok && (strcmp(val, "cpu") == 0 || strcmp(val, "cuda") == 0 || strcmp(val, "rocm") == 0);
      residency_arg = val;
    } else if (strcmp(opt, "--checkpoint") == 0) {
      checkpoint_arg = val;
    } else if (strcmp(opt, "--restart") == 0) {
      restart_arg = val;
    } else if (strcmp(opt, "--every") == 0) {
      ok = ok && parse_u64(val, 1, 1000000ull, &every_arg);
    } else if (strcmp(opt, "--gpu-aware-mpi") == 0) {
      ok = ok && (strcmp(val, "auto") == 0 || strcmp(val, "yes") == 0 || strcmp(val, "no") == 0);
      gpu_aware_arg = val;
    } else ok = 0;
    if (!ok) {
      usage(argv[0]);
      MPI_Finalize();
      return 2;
    }
    ++a;
  }
  if ((checkpoint_arg != NULL) != (every_arg != 0)) {
    if (g_rank == 0)
      fprintf(stderr, "mpi-particles: --checkpoint FILE and --every K go together\n");
    MPI_Finalize();
    return 2;
  }
#ifndef KSTAGE_EXAMPLE_WITH_ADIOS2_MPI
  if (checkpoint_arg || restart_arg) {
    if (g_rank == 0)
      fprintf(stderr,
              "mpi-particles: --checkpoint and --restart need kstage's ADIOS2 bridge with MPI (an "
              "MPI ADIOS2)\n");
    MPI_Finalize();
    return 2;
  }
#endif
  if ((unsigned long long)g_nranks * n_arg > 0xFFFFFFFFull)
    FAIL("%d ranks x %llu particles: at most 2^32 particles in all", g_nranks, n_arg);
  g_move_threshold =
      f_arg >= 100.0 ? UINT64_MAX : (uint64_t)(f_arg / 100.0 * 18446744073709551616.0);
  total = (uint64_t)g_nranks * n_arg;

  /* The stage, on the rank's device. */
  memset(&s, 0, sizeof s);
  memset(&m, 0, sizeof m);
  config = kstage_config_init();
  if (strcmp(residency_arg, "cuda") == 0 || strcmp(residency_arg, "rocm") == 0) {
    int device = local_rank;
#ifdef KSTAGE_EXAMPLE_CUDART
    int devices = 0;
    if (strcmp(residency_arg, "cuda") == 0 && cudaGetDeviceCount(&devices) == cudaSuccess &&
        devices > 0)
      device = local_rank % devices; /* more ranks than GPUs on a node: share them */
#endif
    config.residency.device_type = strcmp(residency_arg, "cuda") == 0 ? kDLCUDA : kDLROCM;
    config.residency.device_id = device;
    s.device_columns = 1;
  }
  s.residency = config.residency;
  s.gpu_aware_mpi = s.device_columns && (strcmp(gpu_aware_arg, "yes") == 0 ||
                                         (strcmp(gpu_aware_arg, "auto") == 0 && mpi_cuda_aware()));
#ifndef KSTAGE_EXAMPLE_CUDART
  if (s.gpu_aware_mpi)
    FAIL(
        "--gpu-aware-mpi needs the CUDA runtime to wait on device read groups; this build has "
        "none");
#endif
  CHECK(kstage_create(&config, &s.stage));
  CHECK(kstage_intern_token(s.stage, "gid", KSTAGE_NUL_TERMINATED, &s.t_gid));
  CHECK(kstage_intern_token(s.stage, "position", KSTAGE_NUL_TERMINATED, &s.t_pos));
  CHECK(kstage_intern_token(s.stage, "velocity", KSTAGE_NUL_TERMINATED, &s.t_vel));

  /* The initial particles: the model's arrays, then the same into the stage. */
  model_reserve(&m, n_arg);
  m.n = n_arg;
  for (i = 0; i < n_arg; ++i) {
    m.gid[i] = (uint64_t)g_rank * n_arg + i;
    initial_particle(m.gid[i], &m.pos[3 * i], &m.vel[3 * i]);
  }
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2_MPI
  if (restart_arg) /* the checkpoint's state instead of the initial one */
    first_tick = restart_from(&s, &m, restart_arg) + 1;
  else
#endif
    side_init(&s, &m);
  if (g_rank == 0) {
    printf(
        "kstage %u.%u.%u MPI particles example: %d rank(s), %llu particles per rank, %llu ticks, "
        "%.3g%% moving per tick\n",
        KSTAGE_VERSION_MAJOR, KSTAGE_VERSION_MINOR, KSTAGE_VERSION_PATCH, g_nranks, n_arg, t_arg,
        f_arg);
    printf(
        "  MPI thread level %d (FUNNELED = %d); residency %s (device id = local rank); "
        "GPU-aware MPI: %s (MPI library says %s)\n",
        provided, MPI_THREAD_FUNNELED, residency_arg, s.gpu_aware_mpi ? "used" : "not used",
        mpi_cuda_aware() ? "yes" : "no or unknown");
  }
  check_conservation(&s, &m, first_tick - 1, total);

  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  t_start = now_seconds();
  for (tick = first_tick; tick <= t_arg; ++tick) {
    uint64_t moved, sent, recvd, model_moved, model_sent, model_recvd;
    t0 = now_seconds();
    moved = side_move(&s, tick);
    t_move += now_seconds() - t0;
    MPI_CHECK(
        MPI_Barrier(MPI_COMM_WORLD)); /* time the exchanges, not the waits for the slowest move */
    t0 = now_seconds();
    sent = side_migrate(&s, tick, moved, &recvd);
    t_mig += now_seconds() - t0;

    t0 = now_seconds();
    model_moved = model_move(&m, tick);
    t_model_move += now_seconds() - t0;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t0 = now_seconds();
    model_migrate(&m, &model_sent, &model_recvd);
    t_model_mig += now_seconds() - t0;

    if (moved != model_moved || sent != model_sent || recvd != model_recvd)
      FAIL(
          "tick %llu: the stage moved %llu, sent %llu, received %llu particles; the model %llu, "
          "%llu, %llu",
          (unsigned long long)tick, (unsigned long long)moved, (unsigned long long)sent,
          (unsigned long long)recvd, (unsigned long long)model_moved,
          (unsigned long long)model_sent, (unsigned long long)model_recvd);
    moved_sum += moved;
    sent_sum += sent;
    recv_sum += recvd;
    if (tick % c_arg == 0 || tick == t_arg) check_conservation(&s, &m, tick, total);
#ifdef KSTAGE_EXAMPLE_WITH_ADIOS2_MPI
    if (checkpoint_arg && tick % every_arg == 0)
      write_checkpoint(&s, checkpoint_arg, tick / every_arg, tick);
#endif
  }

  /* The report: per rank, then the whole run. */
  {
    double mine[6], *all = NULL;
    int r;
    mine[0] = (double)sent_sum;
    mine[1] = t_mig;
    mine[2] = t_model_mig;
    mine[3] = (double)moved_sum;
    mine[4] = t_move;
    mine[5] = (double)recv_sum;
    if (g_rank == 0) {
      all = malloc((size_t)g_nranks * sizeof mine);
      if (!all) FAIL("out of memory");
    }
    MPI_CHECK(MPI_Gather(mine, 6, MPI_DOUBLE, all, 6, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (g_rank == 0) {
      double kmin = 0, bmin = 0, ksum = 0, bsum = 0;
      printf("  run: %.2f s for %llu ticks (both sides, with checks)\n", now_seconds() - t_start,
             t_arg);
      for (r = 0; r < g_nranks; ++r) {
        const double* x = all + 6 * r;
        const double kr = x[1] > 0 ? x[0] / x[1] : 0, br = x[2] > 0 ? x[0] / x[2] : 0;
        printf(
            "  rank %d: moved %.0f, sent %.0f, received %.0f; migration %.4f s kstage, %.4f s "
            "plain MPI; %.3g vs %.3g particles/s migrated\n",
            r, x[3], x[0], x[5], x[1], x[2], kr, br);
        ksum += kr, bsum += br;
        kmin = r == 0 || kr < kmin ? kr : kmin;
        bmin = r == 0 || br < bmin ? br : bmin;
      }
      printf(
          "  sends zero-copy from read groups: %llu (packed: %llu) on rank 0; arrivals into map "
          "buffers: %llu, as managed tensors: %llu\n",
          (unsigned long long)s.zero_copy_sends, (unsigned long long)s.packed_sends,
          (unsigned long long)s.map_receives, (unsigned long long)s.managed_receives);
      if (verbose) {
        printf("  rank 0's kstage migration, by step:");
        for (r = 0; r < 8; ++r) printf("%s %s %.4f s", r ? "," : "", kPhaseNames[r], s.phase[r]);
        printf("\n");
      }
      printf(
          "migration throughput per rank (mean over %d rank(s)): kstage %.3g particles/s, plain "
          "MPI arrays %.3g particles/s (kstage/plain %.2f); rank 0's move step %.3g s/tick with "
          "kstage "
          "(read, move, write, seal), %.3g s/tick on plain arrays\n",
          g_nranks, ksum / g_nranks, bsum / g_nranks, bsum > 0 ? ksum / bsum : 0.0,
          t_move / (double)t_arg, t_model_move / (double)t_arg);
      printf("mpi-particles: OK\n");
      free(all);
    }
  }

  CHECK(kstage_query_release(s.stage, s.mine));
  CHECK(kstage_destroy(s.stage));
  free(s.pos_full), free(s.vel_full), free(s.pos_moved), free(s.vel_moved);
  free(s.mask), free(s.moved_idx), free(s.index_map), free(s.paths);
  free(m.gid), free(m.pos), free(m.vel), free(m.sgid), free(m.spos), free(m.svel), free(m.dest);
  MPI_CHECK(MPI_Finalize());
  return 0;
}
