// SPDX-License-Identifier: Apache-2.0
// Clone workloads (issue #47): kstage_clone_range of a source to N members of a path range, next
// to what a user writes without it, in the same run:
//
//   clone_<source>             timed: kstage_clone_range (the source to env_1 .. env_N) +
//                              kstage_wait + release op + the seal of the clone's ordinal
//                              (kstage_advance_write_floor, every attribute): until the copies
//                              are readable.
//   clone_<source>_read_write  the read-and-write route through the C API, timed the same way
//                              until the copies are readable: the copies' paths interned (one
//                              kstage_intern_paths call of their strings, made untimed), the
//                              source's attributes read (one kstage_read_attributes, compact: the
//                              source's rows only), then per attribute one kstage_write_attribute
//                              (UPSERT) of those rows to every copy that holds it, through a
//                              query of the copies and an index_map pointing every copy's row at
//                              its source row + wait + release, and the seal.
//
// Sources (the same column kinds in both; every value deterministic):
//   env   /World/envs/env_0, the 20-prim robot of scene.hpp (env root, Robot, base, arm, legs,
//         hand, finger, camera), 40 attributes: every prim a local matrix (omni:xform, float64 x
//         16) and one more -- 6 a velocity (float32 x 3), 6 an orientation (float32 x 4), 6 a
//         prim type (usd-prim-type, TOKEN_ID uint64), 2 a ragged points row (float32 x 3, 48 and
//         24 points): 3,640 B of values per copy;
//   prim  /World/envs/env_0 alone holding one attribute of each kind (prim type, matrix,
//         velocity, orientation, 8 points): 260 B per copy.
// The targets are members 1 .. N of the range /World/envs/env_{0..N} (kstage_intern_path_range).
// Each run starts from a stage where no target exists: a fresh stage per run, made in before()
// (untimed: create, the range, the source's paths, its attributes written and sealed), the
// previous run's stage destroyed first.
//
// Baselines: memcpy of exactly the bytes a clone produces (N x the source's value bytes: the
// harness's memcpy at the case's payload, same run), and the read-and-write route above (a
// kstage workload of its own, measured right after the clone at the same N and exec; report.py
// pairs them). Payload (docs/performance.md "Bytes"): N x the source's value bytes.
//
// Shapes of their own (WorkloadDef::own_shapes): env to 64, 1,024 and 4,096 targets, prim to
// 1e6; --smoke: 64 and 1,000. The device grids (run_clone_device) run the same workloads on
// device columns against a device-to-device copy of the same bytes.
#include "context.hpp"
#include "scene.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace kperf {

namespace {

// ---- the sources -----------------------------------------------------------------------------
enum Col : int { kType, kXform, kVelocity, kOrient, kPoints, kCols };

struct ColumnDef {
  const char* name;
  DLDataType dtype;
  kstage_semantic_t semantic;
  bool is_array;
};
const ColumnDef kColumn[kCols] = {
    {KSTAGE_PRIM_TYPE, {kDLUInt, 64, 1}, KSTAGE_SEMANTIC_TOKEN_ID, false},
    {KSTAGE_LOCAL_MATRIX, {kDLFloat, 64, 16}, KSTAGE_SEMANTIC_MATRIX, false},
    {"physics:velocity", {kDLFloat, 32, 3}, KSTAGE_SEMANTIC_VECTOR, false},
    {"xformOp:orient", {kDLFloat, 32, 4}, KSTAGE_SEMANTIC_QUATERNION, false},
    {"points", {kDLFloat, 32, 3}, KSTAGE_SEMANTIC_POINT, true},
};
// Bytes of one element (a fixed row, or one point of a ragged row).
size_t elem_bytes(int c) { return size_t(kColumn[c].dtype.bits) / 8 * kColumn[c].dtype.lanes; }

// The env's second attribute per robot prim (each also holds a matrix): 6 prim types, 6
// velocities, 6 orientations, 2 ragged points rows.
constexpr int kEnvExtra[kRobotPrims] = {kType,     kType,   kVelocity, kVelocity, kOrient,
                                        kVelocity, kOrient, kVelocity, kOrient,   kType,
                                        kVelocity, kOrient, kPoints,   kType,     kVelocity,
                                        kOrient,   kOrient, kType,     kType,     kPoints};
const char* const kTypeNames[] = {"Xform", "Articulation", "Camera", "RigidBody"};
int type_of(int j) { return j == 0 ? 0 : j == 1 ? 1 : j == 18 ? 2 : 3; }

struct CloneSource {
  bool env = true;
  int prims = 0;
  std::vector<std::string> rel;     // below the env root ("" for the root)
  std::vector<int> holders[kCols];  // prims holding column c, ascending
  std::vector<uint64_t> points;     // per prim: its points (its kPoints row)
  int attributes = 0;               // (prim, attribute) pairs
  double bytes = 0;                 // value bytes of one copy
};

CloneSource make_source(bool env) {
  CloneSource s;
  s.env = env;
  s.prims = env ? kRobotPrims : 1;
  s.points.assign(size_t(s.prims), 0);
  for (int j = 0; j < s.prims; ++j) {
    s.rel.push_back(robot_path(j));
    if (env) {
      s.holders[kXform].push_back(j);
      s.holders[kEnvExtra[j]].push_back(j);
      if (kEnvExtra[j] == kPoints) s.points[size_t(j)] = j == 12 ? 48 : 24;
    } else {
      for (int c = 0; c < kCols; ++c) s.holders[c].push_back(j);
      s.points[size_t(j)] = 8;
    }
  }
  for (int c = 0; c < kCols; ++c) {
    s.attributes += int(s.holders[c].size());
    for (int j : s.holders[c])
      s.bytes += double(elem_bytes(c)) * double(kColumn[c].is_array ? s.points[size_t(j)] : 1);
  }
  return s;
}

// Prim j's value of column c (host bytes); prim types name the stage's tokens `types`.
std::vector<unsigned char> source_value(int c, int j, const CloneSource& s,
                                        const std::vector<kstage_token_t>& types) {
  std::vector<unsigned char> v(elem_bytes(c) *
                               size_t(kColumn[c].is_array ? s.points[size_t(j)] : 1));
  switch (c) {
    case kType: {
      const uint64_t t = types[size_t(type_of(j))];
      std::memcpy(v.data(), &t, sizeof t);
      break;
    }
    case kXform: {
      double m[16];
      scene_local(uint64_t(j), 0, m);
      std::memcpy(v.data(), m, sizeof m);
      break;
    }
    default: {  // float32 x 3 or x 4: one velocity or orientation, or the points of a row
      const int lanes = c == kOrient ? 4 : 3;
      std::vector<float> f(v.size() / sizeof(float));
      fill_values(f.data(), f.size() / size_t(lanes), lanes,
                  c == kPoints ? uint64_t(100 + j) : uint64_t(3 + j * 7 + c));
      std::memcpy(v.data(), f.data(), v.size());
      break;
    }
  }
  return v;
}

// The strings of the copies' paths below the targets: "/World/envs/env_<t><rel[j]>" for t in
// 1..n, j in 1..prims-1 (the targets themselves are range members: no strings).
PathNames copy_names(const CloneSource& s, uint64_t n) {
  PathNames p;
  std::vector<size_t> at;
  for (uint64_t t = 1; t <= n; ++t)
    for (int j = 1; j < s.prims; ++j) {
      at.push_back(p.chars.size());
      const std::string name = "/World/envs/env_" + std::to_string(t) + s.rel[size_t(j)];
      p.chars.insert(p.chars.end(), name.c_str(), name.c_str() + name.size() + 1);
    }
  for (size_t a : at) p.names.push_back(p.chars.data() + a);
  return p;
}

// Medians of named phases, in µs.
struct Phases {
  std::vector<std::string> names;
  std::vector<std::vector<double>> t;
  explicit Phases(std::vector<std::string> n) : names(std::move(n)), t(names.size()) {}
  void add(const std::vector<Clock::time_point>& at) {
    for (size_t k = 0; k + 1 < at.size() && k < t.size(); ++k)
      t[k].push_back(std::chrono::duration<double>(at[k + 1] - at[k]).count());
  }
  void clear() {
    for (auto& v : t) v.clear();
  }
  std::vector<std::pair<std::string, double>> medians_us() const {
    std::vector<std::pair<std::string, double>> out;
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k].empty()) continue;
      std::vector<double> v = t[k];
      std::sort(v.begin(), v.end());
      out.emplace_back(names[k], 1e6 * v[v.size() / 2]);
    }
    return out;
  }
};

// ---- a source in a stage of its own ----------------------------------------------------------
// A fresh stage holding the source (written at ordinal 1, sealed) and the range env_{0..n}; the
// clone or the read-and-write route writes at ordinal 2. `config` says the host execution and
// residency (a device grid's: the columns on its device).
class CloneStage {
 public:
  static constexpr uint64_t kCopyOrdinal = 2;

  CloneStage(const CloneSource& s, uint64_t targets, const kstage_config_t& config)
      : s_(s), n_(targets) {
    KP_CHECK(kstage_create(&config, &stage_));
    try {
      build();
    } catch (...) {
      kstage_destroy(stage_);
      throw;
    }
  }
  ~CloneStage() {
    if (stage_) kstage_destroy(stage_);  // queries, reads and columns with it
  }
  CloneStage(const CloneStage&) = delete;
  CloneStage& operator=(const CloneStage&) = delete;

  // kstage_clone_range to every target + wait + release + seal; `at` gets the phase bounds
  // (start, after the call, after the wait, after the seal).
  void clone(std::vector<Clock::time_point>& at) {
    at.assign(1, Clock::now());
    kstage_op_t op = 0;
    KP_CHECK(kstage_clone_range(stage_, source(), first_, 1, n_, kCopyOrdinal, &op));
    at.push_back(Clock::now());
    const kstage_status_t st = kstage_wait(stage_, op, KSTAGE_TIMEOUT_INFINITE);
    kstage_release_op(stage_, op);
    if (st != KSTAGE_OK) throw_kstage(st, "kstage_wait (clone)");
    at.push_back(Clock::now());
    KP_CHECK(kstage_advance_write_floor(stage_, kCopyOrdinal, nullptr, 0));
    at.push_back(Clock::now());
  }

  // The read-and-write route (see the top of the file); `at`: start, after the paths are
  // interned, after the read, after the writes, after the seal.
  void read_write(const PathNames& names, std::vector<Clock::time_point>& at) {
    at.assign(1, Clock::now());
    const size_t below = names.names.size();
    copies_.resize(below);
    if (below > 0)
      KP_CHECK(kstage_intern_paths(stage_, names.names.data(), nullptr, below, copies_.data()));
    at.push_back(Clock::now());
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;  // the source's rows only, in its prims' order
    kstage_read_t read = 0;
    KP_CHECK(kstage_read_attributes(stage_, source_query_, tokens_, kCols, &d, &read));
    std::vector<kstage_read_group_t> groups;
    kstage_status_t st;
    kstage_read_group_t g;
    while ((st = kstage_fetch_read_next(stage_, read, 0, &g)) == KSTAGE_OK) groups.push_back(g);
    struct Release {  // also when a call below throws
      kstage_stage_t stage;
      kstage_read_t read;
      std::vector<kstage_read_group_t>& groups;
      ~Release() {
        for (const kstage_read_group_t& x : groups) kstage_release_group(stage, x.handle);
        kstage_release_read(stage, read);
      }
    } release{stage_, read, groups};
    if (st != KSTAGE_END_OF_ITERATION) throw_kstage(st, "kstage_fetch_read_next");
    at.push_back(Clock::now());
    std::vector<kstage_path_t> ids;
    std::vector<uint32_t> index;
    for (const kstage_read_group_t& grp : groups) {
      if (grp.is_delete || grp.prim_count == 0) continue;
      const uint64_t sp = grp.prim_count, count = n_ * sp;
      kstage_query_t q = 0;
      if (s_.prims == 1) {
        KP_CHECK(kstage_query_range(stage_, first_, 1, n_, 0, &q));
      } else {
        ids.resize(count);
        for (uint64_t k = 0; k < sp; ++k) {
          const int j = index_of_.at(grp.prims[k]);
          for (uint64_t t = 1; t <= n_; ++t) ids[(t - 1) * sp + k] = copy(t, j);
        }
        KP_CHECK(kstage_query_paths(stage_, ids.data(), count, &q));
      }
      index.resize(count);
      for (uint64_t t = 0; t < n_; ++t)
        for (uint64_t k = 0; k < sp; ++k) index[t * sp + k] = uint32_t(k);
      kstage_write_data_t w = kstage_write_data_init();
      w.semantic = grp.semantic;
      w.tensors = grp.data.tensors;
      w.tensor_count = grp.data.tensor_count;
      w.count = count;
      w.index_map = index.data();
      w.is_array = grp.is_array;
      w.device_sync = grp.data.device_sync;
      kstage_op_t op = 0;
      st = kstage_write_attribute(stage_, q, grp.attribute, kCopyOrdinal, &w,
                                  KSTAGE_PRIM_MODE_UPSERT, &op);
      if (st == KSTAGE_OK) {
        st = kstage_wait(stage_, op, KSTAGE_TIMEOUT_INFINITE);
        kstage_release_op(stage_, op);
      }
      kstage_query_release(stage_, q);
      if (st != KSTAGE_OK) throw_kstage(st, "kstage_write_attribute (the copies)");
    }
    at.push_back(Clock::now());
    KP_CHECK(kstage_advance_write_floor(stage_, kCopyOrdinal, nullptr, 0));
    at.push_back(Clock::now());
  }

  // Every copy of every source prim holds exactly the source's values, read back through the
  // C API (on the host). "" or the first mismatch.
  std::string verify(const PathNames& names) {
    const size_t below = names.names.size();
    copies_.resize(below);
    if (below > 0)  // the copies' ids (interned already: the same ids come back)
      KP_CHECK(kstage_intern_paths(stage_, names.names.data(), nullptr, below, copies_.data()));
    std::unordered_map<kstage_path_t, int> prim_of;  // copy id -> source prim
    prim_of.reserve(size_t(n_) * size_t(s_.prims));
    for (uint64_t t = 1; t <= n_; ++t)
      for (int j = 0; j < s_.prims; ++j) prim_of.emplace(copy(t, j), j);
    if (prim_of.size() != size_t(n_) * size_t(s_.prims))
      return "the copies' paths are not distinct";
    for (int c = 0; c < kCols; ++c) {
      const std::vector<int>& h = s_.holders[c];
      std::vector<std::vector<unsigned char>> want(size_t(s_.prims));
      for (int j : h) want[size_t(j)] = source_value(c, j, s_, types_);
      std::vector<kstage_path_t> ids;
      for (uint64_t t = 1; t <= n_; ++t)
        for (int j : h) ids.push_back(copy(t, j));
      kstage_query_t q = 0;
      KP_CHECK(kstage_query_paths(stage_, ids.data(), ids.size(), &q));
      kstage_read_desc_t d = kstage_read_desc_init();
      d.target_device = DLDevice{kDLCPU, 0};
      std::string bad;
      uint64_t seen = 0;
      const size_t eb = elem_bytes(c);
      try {
        read_groups(stage_, q, tokens_[c], &d, [&](const kstage_read_group_t& g) {
          if (!bad.empty()) return;
          if (g.is_delete) {
            bad = "a tombstone group";
            return;
          }
          for (uint64_t i = 0; i < g.prim_count && bad.empty(); ++i, ++seen) {
            if (seen >= ids.size() || g.prims[i] != ids[seen]) {
              bad = "the read's prim " + std::to_string(seen) + " is not the expected copy";
              break;
            }
            const std::vector<unsigned char>& w = want[size_t(prim_of.at(g.prims[i]))];
            const unsigned char* v = nullptr;
            size_t len = 0;
            if (kColumn[c].is_array) {
              const DLTensor& t = g.data.tensors[i];
              v = static_cast<const unsigned char*>(t.data) + t.byte_offset;
              len = size_t(t.ndim == 1 ? t.shape[0] : 0) * eb;
            } else {
              const DLTensor& t = g.data.tensors[0];
              const uint64_t row = g.data.index_map ? g.data.index_map[i] : i;
              v = static_cast<const unsigned char*>(t.data) + t.byte_offset + row * eb;
              len = eb;
            }
            if (len != w.size() || (len > 0 && std::memcmp(v, w.data(), len) != 0))
              bad = "copy " + std::to_string(seen) + " of " + kColumn[c].name +
                    " differs from its source";
          }
        });
      } catch (...) {
        kstage_query_release(stage_, q);
        throw;
      }
      KP_CHECK(kstage_query_release(stage_, q));
      if (!bad.empty()) return std::string(kColumn[c].name) + ": " + bad;
      if (seen != ids.size())
        return std::string(kColumn[c].name) + ": the copies hold " + std::to_string(seen) +
               " rows, expected " + std::to_string(ids.size());
    }
    return "";
  }

 private:
  kstage_path_t source() const { return first_; }
  // The copy of source prim j for target t (1..n).
  kstage_path_t copy(uint64_t t, int j) const {
    return j == 0 ? first_ + t : copies_[(t - 1) * uint64_t(s_.prims - 1) + uint64_t(j - 1)];
  }

  // The range, the source's paths, its attributes written from host memory (a new column is
  // made on the stage's residency) and sealed at ordinal 1.
  void build() {
    KP_CHECK(kstage_intern_path_range(stage_, "/World/envs", KSTAGE_NUL_TERMINATED, "env_",
                                      KSTAGE_NUL_TERMINATED, 0, n_ + 1, &first_));
    std::vector<kstage_path_t> prims(size_t(s_.prims), first_);
    for (int j = 1; j < s_.prims; ++j) {
      const std::string p = "/World/envs/env_0" + s_.rel[size_t(j)];
      KP_CHECK(kstage_intern_path(stage_, p.c_str(), p.size(), &prims[size_t(j)]));
    }
    for (int j = 0; j < s_.prims; ++j) index_of_.emplace(prims[size_t(j)], j);
    for (int c = 0; c < kCols; ++c)
      KP_CHECK(kstage_intern_token(stage_, kColumn[c].name, KSTAGE_NUL_TERMINATED, &tokens_[c]));
    for (const char* t : kTypeNames) {
      types_.push_back(0);
      KP_CHECK(kstage_intern_token(stage_, t, KSTAGE_NUL_TERMINATED, &types_.back()));
    }
    KP_CHECK(kstage_query_paths(stage_, prims.data(), prims.size(), &source_query_));
    for (int c = 0; c < kCols; ++c) {
      const std::vector<int>& h = s_.holders[c];
      std::vector<kstage_path_t> ids;
      std::vector<std::vector<unsigned char>> rows;
      for (int j : h) {
        ids.push_back(prims[size_t(j)]);
        rows.push_back(source_value(c, j, s_, types_));
      }
      std::vector<unsigned char> packed;
      std::vector<int64_t> shapes;
      std::vector<DLTensor> tensors;
      if (kColumn[c].is_array) {
        shapes.resize(rows.size());
        for (size_t k = 0; k < rows.size(); ++k) shapes[k] = int64_t(s_.points[size_t(h[k])]);
      } else {
        for (const auto& r : rows) packed.insert(packed.end(), r.begin(), r.end());
        shapes.push_back(int64_t(rows.size()));
      }
      for (size_t k = 0; k < shapes.size(); ++k) {
        DLTensor t{};
        t.data = kColumn[c].is_array ? static_cast<void*>(rows[k].data()) : packed.data();
        t.device = DLDevice{kDLCPU, 0};
        t.ndim = 1;
        t.shape = &shapes[k];
        t.dtype = kColumn[c].dtype;
        tensors.push_back(t);
      }
      kstage_query_t q = 0;
      KP_CHECK(kstage_query_paths(stage_, ids.data(), ids.size(), &q));
      kstage_write_data_t w = kstage_write_data_init();
      w.semantic = kColumn[c].semantic;
      w.tensors = tensors.data();
      w.tensor_count = tensors.size();
      w.is_array = kColumn[c].is_array;
      kstage_op_t op = 0;
      kstage_status_t st =
          kstage_write_attribute(stage_, q, tokens_[c], 1, &w, KSTAGE_PRIM_MODE_UPSERT, &op);
      if (st == KSTAGE_OK) {
        st = kstage_wait(stage_, op, KSTAGE_TIMEOUT_INFINITE);
        kstage_release_op(stage_, op);
      }
      kstage_query_release(stage_, q);
      if (st != KSTAGE_OK) throw_kstage(st, "kstage_write_attribute (the source)");
    }
    KP_CHECK(kstage_advance_write_floor(stage_, 1, nullptr, 0));
  }

  const CloneSource& s_;
  uint64_t n_;
  kstage_stage_t stage_ = 0;
  kstage_path_t first_ = 0;
  kstage_query_t source_query_ = 0;
  kstage_token_t tokens_[kCols] = {};
  std::vector<kstage_token_t> types_;
  std::unordered_map<kstage_path_t, int> index_of_;  // source prim id -> j
  std::vector<kstage_path_t> copies_;                // (t - 1) * (prims - 1) + j - 1
};

kstage_config_t host_config(Exec exec) {
  kstage_config_t c = kstage_config_init();
  c.host_execution =
      exec == Exec::Serial ? KSTAGE_HOST_EXECUTION_SERIAL : KSTAGE_HOST_EXECUTION_PARALLEL;
  return c;
}

const char* source_name(bool env) { return env ? "env" : "prim"; }

// ---- kstage workloads ------------------------------------------------------------------------
class CloneInstance final : public Instance {
 public:
  CloneInstance(Context& cx, const Shape& s, bool env, bool read_write)
      : exec_(cx.exec()),
        env_(env),
        read_write_(read_write),
        n_(s.rows),
        phases_(read_write ? std::vector<std::string>{"intern_us", "read_us", "write_us", "seal_us"}
                           : std::vector<std::string>{"call_us", "wait_us", "seal_us"}) {}

  void prepare() override {
    src_ = make_source(env_);
    names_ = copy_names(src_, n_);
    if (read_write_) return;
    // Reported beside warm memcpy: memcpy of the same bytes into memory allocated for each call
    // (page faults included), as a first clone into a fresh stage writes fresh memory.
    auto m = make_memcpy(size_t(payload_bytes()), true);
    m->prepare();
    std::vector<double> t;
    for (int r = 0; r < 6; ++r) {
      const auto t0 = Clock::now();
      m->run();
      if (r > 0) t.push_back(seconds_since(t0));  // the first is a warm-up
    }
    std::sort(t.begin(), t.end());
    memcpy_fresh_gbps_ = payload_bytes() / t[t.size() / 2] / 1e9;
  }
  void before() override {
    stage_.reset();  // the previous run's copies go first
    const auto t0 = Clock::now();
    stage_ = std::make_unique<CloneStage>(src_, n_, host_config(exec_));
    setup_s_.push_back(seconds_since(t0));
    faults_before_ = minor_faults();
  }
  void after() override { fresh_pages_.push_back(double(minor_faults() - faults_before_)); }
  // A clone into a new stage writes memory the previous run's stage freed. On the 2-vCPU VM the
  // seal of 4,096 targets took 2.4-2.9 ms in the first runs and 1.1-1.3 ms from about the
  // tenth on, with no page fault and no system call between runs (the heap hands the same
  // memory back, and the cache keeps more of it run after run), while the memcpy it is
  // compared with copies between buffers warmed the same way: runs until this much time is
  // spent come first (a dozen at most: one of the route at 4,096 or 1e6 targets).
  double extra_warmup_seconds() const override { return 0.03; }
  void warmed() override {
    phases_.clear();
    fresh_pages_.clear();
  }
  void run() override {
    if (read_write_) stage_->read_write(names_, at_);
    else stage_->clone(at_);
    phases_.add(at_);
  }
  std::string verify() override { return stage_->verify(names_); }
  double payload_bytes() const override { return src_.bytes * double(n_); }
  double items() const override { return double(n_) * double(src_.prims); }  // prims created
  std::vector<std::pair<std::string, double>> extras() const override {
    std::vector<std::pair<std::string, double>> e{{"targets", double(n_)},
                                                  {"source_prims", double(src_.prims)},
                                                  {"source_attributes", double(src_.attributes)},
                                                  {"bytes_per_copy", src_.bytes}};
    for (const auto& kv : phases_.medians_us()) e.push_back(kv);
    std::vector<double> s = setup_s_;
    std::sort(s.begin(), s.end());
    if (!s.empty()) e.emplace_back("fresh_stage_ms_untimed", 1e3 * s[s.size() / 2]);
    if (memcpy_fresh_gbps_ > 0) e.emplace_back("memcpy_fresh_gbps", memcpy_fresh_gbps_);
    // Pages the timed region was given fresh by the kernel (median over the runs), next to the
    // pages of the values it produces: whether this run wrote fresh memory or memory the
    // allocator had from an earlier stage, which glibc's heap decides from what ran before
    // (report.py compares a clone that wrote fresh memory with memcpy into fresh memory).
    if (!fresh_pages_.empty()) {
      std::vector<double> f = fresh_pages_;
      std::sort(f.begin(), f.end());
      e.emplace_back("fresh_pages", f[f.size() / 2]);
      e.emplace_back("value_pages", std::ceil(payload_bytes() / 4096.0));
    }
    return e;
  }

 private:
  Exec exec_;
  bool env_, read_write_;
  uint64_t n_;
  CloneSource src_;
  PathNames names_;
  std::unique_ptr<CloneStage> stage_;
  std::vector<Clock::time_point> at_;
  Phases phases_;
  std::vector<double> setup_s_;
  double memcpy_fresh_gbps_ = 0;
  long faults_before_ = 0;
  std::vector<double> fresh_pages_;  // per timed run
};

// ---- registration ----------------------------------------------------------------------------
std::vector<uint64_t> clone_targets(const Options& o, bool env) {
  if (o.rows_explicit) return o.rows;
  if (o.mode == Mode::Smoke) return {env ? 64u : 1000u};
  if (env) return {64, 1024, 4096};
  return {1000000};
}

// Bytes of one case: the stage (paths ~100 B, per-row maps and query lists ~100 B per prim
// created), the values (the copies, the route's staged rows, the previous run's stage freed
// first) and the route's ids and index maps.
double clone_ws(const Shape& s, bool env) {
  const CloneSource src = make_source(env);
  return double(s.rows) * (double(src.prims) * 300.0 + 3.0 * src.bytes);
}

void reg_clone(bool env) {
  const std::string name = std::string("clone_") + source_name(env);
  const std::string params =
      env ? "source=20 prims 40 attributes (f64x16 x20; f32x3 x6; f32x4 x6; token x6; ragged "
            "f32x3 x2 of 48+24 points)"
          : "source=1 prim 5 attributes (f64x16; f32x3; f32x4; token; ragged f32x3 of 8 points)";
  for (bool rw : {false, true}) {
    WorkloadDef d;
    d.name = name + (rw ? "_read_write" : "");
    d.family = "scene";
    d.description = rw ? "the read-and-write route to N targets: intern the copies' paths, read "
                         "the source, one index_map write per attribute + wait, seal"
                       : "kstage_clone_range of the source to N targets + wait + seal";
    d.params = params;
    d.working_set = [env](const Shape& s) { return clone_ws(s, env); };
    d.own_shapes = [env](const Options& o) {
      std::vector<Shape> out;
      for (uint64_t r : clone_targets(o, env)) out.push_back(Shape{r, DType::F64, 16});
      return out;
    };
    d.make = [env, rw](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
      return std::make_unique<CloneInstance>(cx, s, env, rw);
    };
    RegisterWorkload{std::move(d)};
  }
}

const bool registered = [] {
  reg_clone(true);
  reg_clone(false);
  return true;
}();

}  // namespace

// ---- the device grids --------------------------------------------------------------------------
std::vector<SceneDeviceRow> run_clone_device(const SceneDeviceOps& ops, const Options& o,
                                             bool emulated, int reps) {
  (void)emulated;  // the same sizes on both
  std::vector<SceneDeviceRow> rows;
  kstage_config_t config = kstage_config_init();
  config.residency = ops.residency;
  for (bool env : {true, false}) {
    const CloneSource src = make_source(env);
    const std::string name = std::string("clone_") + source_name(env);
    for (uint64_t n : clone_targets(o, env)) {
      const PathNames names = copy_names(src, n);
      const double bytes = src.bytes * double(n);
      // Each run in a fresh stage (made untimed); the first is a warm-up, the last is checked.
      auto measure = [&](bool rw, Phases& phases) {
        std::vector<double> t;
        std::vector<Clock::time_point> at;
        std::unique_ptr<CloneStage> stage;
        for (int r = 0; r <= reps; ++r) {
          stage.reset();
          stage = std::make_unique<CloneStage>(src, n, config);
          if (rw) stage->read_write(names, at);
          else stage->clone(at);
          if (r > 0) {
            t.push_back(std::chrono::duration<double>(at.back() - at.front()).count());
            phases.add(at);
          }
        }
        if (std::string bad = stage->verify(names); !bad.empty())
          throw std::runtime_error(name + (rw ? "_read_write " : " ") + std::to_string(n) +
                                   " targets: " + bad);
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
      };
      Phases clone_phases({"call", "wait", "seal"});
      Phases rw_phases({"intern", "read", "write", "seal"});
      const double t_clone = measure(false, clone_phases);
      const double t_rw = measure(true, rw_phases);
      // The device-to-device copy of the same bytes.
      double t_copy = 0;
      {
        void* from = ops.alloc(size_t(bytes));
        void* to = ops.alloc(size_t(bytes));
        {
          std::vector<unsigned char> h(size_t(bytes), 0x5A);
          ops.upload(from, h.data(), h.size());
        }
        t_copy = median_seconds(reps, [&] { ops.copy(to, from, size_t(bytes)); });
        ops.release(from);
        ops.release(to);
      }
      auto split = [](const Phases& p) {
        std::string s;
        for (const auto& [k, v] : p.medians_us())
          s += (s.empty() ? "" : "; ") + k + " " + std::to_string(int64_t(v)) + " us";
        return s;
      };
      const std::string copy_name = "copy_d2d_" + name;
      const std::string rw_name = name + "_read_write";
      const std::string what = std::to_string(src.prims) + " prims x " + std::to_string(n) +
                               " targets; " + std::to_string(int64_t(src.bytes)) + " B per copy";
      rows.push_back({copy_name, n, t_copy, bytes, "", 0, what});
      rows.push_back({rw_name, n, t_rw, bytes, copy_name, 0, split(rw_phases)});
      rows.push_back(
          {name, n, t_clone, bytes, copy_name, env && n == 4096 ? 0.5 : 0, split(clone_phases)});
      // Same bytes: the ratio is the route's time / the clone's (>= 10).
      rows.push_back({name + "_vs_read_write", n, t_clone, bytes, rw_name, 10,
                      "read-and-write time / clone time"});
    }
  }
  return rows;
}

}  // namespace kperf
