// SPDX-License-Identifier: Apache-2.0
// kstage performance suite: the harness.
//
// A *workload* is registered once (a WorkloadDef in a registry) and measured for every
// *shape* (rows, dtype, lanes) of the run's grid that it applies to, and for every host
// execution space (kstage workloads). Each measurement goes through an Instance:
//
//   prepare()   untimed, once: buffers, base column state
//   before()    untimed, before every timed run
//   run()       TIMED (std::chrono::steady_clock)
//   after()     untimed, after every timed run (e.g. seal a write that was timed alone)
//   verify()    untimed, once, after the first run: checks the data; "" when correct
//
// Baselines (memcpy, Kokkos::deep_copy, plain serial loops) are registered the same way
// under a *baseline key*; a kstage workload names the serial-loop key and the numpy key it
// is compared with. numpy runs in a separate process (perf/numpy_baseline.py) from the
// numpy_plan.csv this program writes; perf/report.py merges everything.
#pragma once

#include <kstage/kstage.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace kperf {

// ---- shapes ----------------------------------------------------------------------------------
enum class DType { F32, F64 };
inline const char* dtype_name(DType d) { return d == DType::F32 ? "float32" : "float64"; }
inline size_t dtype_bytes(DType d) { return d == DType::F32 ? 4 : 8; }

struct Shape {
  uint64_t rows = 0;
  DType dtype = DType::F32;
  int lanes = 1;
  size_t row_bytes() const { return dtype_bytes(dtype) * size_t(lanes); }
  uint64_t dense_bytes() const { return rows * row_bytes(); }
};

enum class Exec { Serial, Parallel, None };
inline const char* exec_name(Exec e) {
  return e == Exec::Serial ? "serial" : e == Exec::Parallel ? "parallel" : "-";
}

// ---- run options -----------------------------------------------------------------------------
enum class Mode { Quick, Full, Smoke };

struct Options {
  Mode mode = Mode::Full;
  std::string out_dir;         // results folder
  std::string filter;          // substring filter on workload names ("" = all)
  std::vector<uint64_t> rows;  // row counts of the grid
  bool rows_explicit = false;  // --rows given: per-workload row limits do not apply
  std::vector<int> lanes;
  std::vector<DType> dtypes;
  std::vector<Exec> execs{Exec::Serial, Exec::Parallel};
  uint64_t big_rows_min = 0;  // quick: rows >= this only for workloads marked `big_ok`
  double mem_cap_bytes = 6.0 * (1ull << 30);
  double case_payload_cap = 0;  // quick: skip cases whose payload exceeds this (0 = none)
  int warmup = 1;
  int min_reps = 5, max_reps = 200;
  double target_seconds = 0.3;  // timed seconds per case (reps adapt between min and max)
  int particles_pairs = 25;     // particles: tick pairs measured
  bool verbose = false;
};

// ---- instances and workload definitions ---------------------------------------------------------
class Instance {
 public:
  virtual ~Instance() = default;
  virtual void prepare() {}
  virtual void before() {}
  virtual void run() = 0;
  virtual void after() {}
  // "" when the data is right; otherwise what is wrong. Called once, after the first run.
  virtual std::string verify() = 0;
  // Payload bytes one run() moves (the bandwidth convention of docs/performance.md).
  virtual double payload_bytes() const = 0;
  // Logical items one run() handles (rows, or ticks for particles); for the rate column.
  virtual double items() const { return 0; }
  // Measurements an instance wants to add besides its timing (name, value) pairs.
  virtual std::vector<std::pair<std::string, double>> extras() const { return {}; }
  // Seconds of un-timed runs, beyond the mode's warm-up, that this instance needs to reach its
  // steady state (at most kMaxExtraWarmup runs; none in smoke mode). 0: the mode's warm-up.
  virtual double extra_warmup_seconds() const { return 0; }
  // Called once after the warm-up, before the timed runs (what an instance records per run
  // then covers the timed runs only).
  virtual void warmed() {}
  static constexpr int kMaxExtraWarmup = 12;
};

class Context;  // a stage with n prims, per (exec, rows); see context.hpp

struct WorkloadDef {
  std::string name;             // "write_index_map_random"
  std::string family;           // write, seal, read, change, ragged, particles, map, dlpack
  std::string description;      // one line, for --list and docs/performance.md
  std::string params;           // e.g. "p=0.05", "stride=4", "len=uniform[1,7]"
  std::string loop_key;         // serial-loop baseline compared against ("" = none)
  std::string numpy_key;        // numpy baseline compared against ("" = none)
  bool big_ok = false;          // quick mode: also measured at the big row counts
  uint64_t quick_max_rows = 0;  // quick mode: not measured above this row count (0 = no limit)
  uint64_t max_rows = 0;        // any mode: not measured above this row count (0 = no limit)
  bool pending = false;         // not implemented in kstage yet: printed as SKIP
  std::string pending_reason;
  // Which shapes it applies to (default: all).
  std::function<bool(const Shape&)> applies;
  // Bytes this workload needs at a shape beyond its context (for the memory cap).
  std::function<double(const Shape&)> working_set;
  // Payload bytes of one run at a shape, estimated before running (quick mode's payload cap);
  // default: rows * row_bytes.
  std::function<double(const Shape&)> payload_estimate;
  // kstage workloads: make an instance bound to a context.
  std::function<std::unique_ptr<Instance>(Context&, const Shape&)> make;
  // Workloads measured at shapes of their own instead of the grid's (the scene trees of
  // perf/src/wl_scene.cpp: 81,920-prim robot forests, 1e6 / 1e7-prim random trees, float64 x 16):
  // the shapes for the run's options. Each (shape, exec) gets a stage of its own, a Context
  // with no /p paths (the instance makes its own), destroyed after the case; `working_set`
  // must then count the stage too.
  std::function<std::vector<Shape>(const Options&)> own_shapes;
};

struct BaselineDef {
  std::string key;           // "memcpy", "copy", "gather_perm", ...
  std::string impl;          // "serial_loop", "memcpy", "deep_copy"
  Exec exec = Exec::Serial;  // deep_copy: Serial or Parallel (OpenMP)
  std::string description;
  std::function<double(const Shape&)> working_set;
  std::function<std::unique_ptr<Instance>(const Shape&)> make;
};

std::vector<WorkloadDef>& workload_registry();
// memcpy of `bytes` between warm buffers, or (fresh) into memory allocated for each call.
std::unique_ptr<Instance> make_memcpy(size_t bytes, bool fresh);
std::vector<BaselineDef>& baseline_registry();
const BaselineDef* find_baseline(const std::string& key, const std::string& impl, Exec exec);

struct RegisterWorkload {
  explicit RegisterWorkload(WorkloadDef d);
};
struct RegisterBaseline {
  explicit RegisterBaseline(BaselineDef d);
};

// ---- deterministic data ----------------------------------------------------------------------
inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Value of element (row, lane) of data set `salt`: exact in float32 and float64.
inline double value_of(uint64_t salt, uint64_t row, int lane) {
  const uint64_t h = mix64(salt * 0x100000001B3ull ^ (row * 131 + uint64_t(lane)));
  return double(h >> 40) / double(1u << 24) + double(salt % 7);  // 24-bit mantissa
}
template <class T>
void fill_values(T* p, uint64_t rows, int lanes, uint64_t salt) {
  for (uint64_t r = 0; r < rows; ++r)
    for (int l = 0; l < lanes; ++l) p[r * uint64_t(lanes) + uint64_t(l)] = T(value_of(salt, r, l));
}
std::vector<uint32_t> random_permutation(uint64_t n, uint64_t seed);
// Bit mask over n elements with each bit set with probability p (exactly round(p*n) bits).
std::vector<uint64_t> random_mask(uint64_t n, double p, uint64_t seed);
inline bool mask_bit(const uint64_t* m, uint64_t i) { return (m[i >> 6] >> (i & 63)) & 1u; }

// Ragged row lengths (elements) of a named distribution: "mean4", "mean64", "skewed".
std::vector<uint64_t> ragged_lengths(const std::string& dist, uint64_t n, uint64_t seed);
std::string ragged_params(const std::string& dist);

// ---- timing ----------------------------------------------------------------------------------
using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
// Median of `reps` timed runs of f (each ends with the work complete), after one warm-up.
template <class F>
double median_seconds(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Aligned, untouched host memory that is freed with free().
struct HostBuf {
  void* p = nullptr;
  size_t bytes = 0;
  HostBuf() = default;
  explicit HostBuf(size_t b);
  HostBuf(const HostBuf&) = delete;
  HostBuf& operator=(const HostBuf&) = delete;
  HostBuf(HostBuf&& o) noexcept : p(o.p), bytes(o.bytes) {
    o.p = nullptr;
    o.bytes = 0;
  }
  HostBuf& operator=(HostBuf&& o) noexcept;
  ~HostBuf();
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Prefault: write every page (so first-touch cost stays out of baselines).
void touch(void* p, size_t bytes);

// The process's resident memory in bytes (/proc/self/statm), and its peak (VmHWM), which
// reset_peak_resident() brings down to the current value (Linux >= 4.0).
double resident_bytes();
double peak_resident_bytes();
void reset_peak_resident();
// The process's minor page faults so far (getrusage): pages it was given, fresh, by the kernel
// (a first touch, or a populate ahead of one).
long minor_faults();

// n NUL-terminated paths "<prefix><i>" in one buffer: names[i] points into chars.
struct PathNames {
  std::vector<char> chars;
  std::vector<const char*> names;
};
PathNames path_names(const std::string& prefix, uint64_t n);

const Options& options();
// `--device NAME`: the GPU grid on that device's columns (perf/src/device_suite.cpp); Kokkos
// is initialised. Returns the exit code.
int run_device_suite(const std::string& device, const Options& o);
// `--device emulated`: the device-map writes on the emulated device (perf/src/emulated_suite.cpp).
int run_emulated_suite(const Options& o);
// `--scale`: the scale workload at prim counts up to 1e8 (perf/src/scale_suite.cpp).
int run_scale_suite(const Options& o);
[[noreturn]] void die(const char* fmt, ...);

// Calls f(TypeTag<T>{}, std::integral_constant<int, LANES>{}) for the shape's element type
// and lane count, LANES a compile-time constant for 1, 3 and 16 (0: run-time lanes).
template <class T>
struct TypeTag {
  using type = T;
};
template <class F>
auto dispatch(const Shape& s, F&& f) {
  auto by_lanes = [&](auto tag) {
    switch (s.lanes) {
      case 1: return f(tag, std::integral_constant<int, 1>{});
      case 3: return f(tag, std::integral_constant<int, 3>{});
      case 16: return f(tag, std::integral_constant<int, 16>{});
      default: return f(tag, std::integral_constant<int, 0>{});
    }
  };
  if (s.dtype == DType::F32) return by_lanes(TypeTag<float>{});
  return by_lanes(TypeTag<double>{});
}

}  // namespace kperf
