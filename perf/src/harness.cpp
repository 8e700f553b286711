// SPDX-License-Identifier: Apache-2.0
// kstage_perf: grid loop, timing, CSV output, command line.
#include "harness.hpp"

#include "context.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace kperf {

// ---- registry --------------------------------------------------------------------------------
std::vector<WorkloadDef>& workload_registry() {
  static std::vector<WorkloadDef> r;
  return r;
}
std::vector<BaselineDef>& baseline_registry() {
  static std::vector<BaselineDef> r;
  return r;
}
RegisterWorkload::RegisterWorkload(WorkloadDef d) { workload_registry().push_back(std::move(d)); }
RegisterBaseline::RegisterBaseline(BaselineDef d) { baseline_registry().push_back(std::move(d)); }

const BaselineDef* find_baseline(const std::string& key, const std::string& impl, Exec exec) {
  for (const auto& b : baseline_registry())
    if (b.key == key && b.impl == impl && b.exec == exec) return &b;
  return nullptr;
}

// ---- data helpers ----------------------------------------------------------------------------
std::vector<uint32_t> random_permutation(uint64_t n, uint64_t seed) {
  std::vector<uint32_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = uint32_t(i);
  std::mt19937_64 rng(seed);
  for (uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng() % i]);
  return p;
}

std::vector<uint64_t> random_mask(uint64_t n, double p, uint64_t seed) {
  std::vector<uint64_t> m((n + 63) / 64, 0);
  const uint64_t k = uint64_t(std::llround(p * double(n)));
  std::vector<uint32_t> idx(n);
  for (uint64_t i = 0; i < n; ++i) idx[i] = uint32_t(i);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < k; ++i) {
    std::swap(idx[i], idx[i + rng() % (n - i)]);
    m[idx[i] >> 6] |= uint64_t(1) << (idx[i] & 63);
  }
  return m;
}

std::vector<uint64_t> ragged_lengths(const std::string& dist, uint64_t n, uint64_t seed) {
  std::vector<uint64_t> len(n);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; ++i) {
    if (dist == "mean4") len[i] = 1 + rng() % 7;          // uniform [1, 7]
    else if (dist == "mean64") len[i] = 1 + rng() % 127;  // uniform [1, 127]
    else len[i] = 1024 / (1 + rng() % 1024);              // skewed: 1024/k, k in [1, 1024]
  }
  return len;
}

std::string ragged_params(const std::string& dist) {
  if (dist == "mean4") return "len=uniform[1,7]";
  if (dist == "mean64") return "len=uniform[1,127]";
  return "len=1024/uniform[1,1024]";
}

HostBuf::HostBuf(size_t b) : bytes(b) {
  p = std::aligned_alloc(64, std::max<size_t>((b + 63) / 64 * 64, 64));
  if (!p) throw std::bad_alloc();
}
HostBuf& HostBuf::operator=(HostBuf&& o) noexcept {
  if (this != &o) {
    std::free(p);
    p = o.p;
    bytes = o.bytes;
    o.p = nullptr;
    o.bytes = 0;
  }
  return *this;
}
HostBuf::~HostBuf() { std::free(p); }

void touch(void* p, size_t bytes) {
  auto* c = static_cast<volatile char*>(p);
  for (size_t i = 0; i < bytes; i += 4096) c[i] = 0;
  if (bytes) c[bytes - 1] = 0;
}

double resident_bytes() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return double(resident) * 4096.0;
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double peak_resident_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) * 1024.0;
  return 0;
}

void reset_peak_resident() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

PathNames path_names(const std::string& prefix, uint64_t n) {
  PathNames p;
  std::vector<size_t> at(n);
  for (uint64_t i = 0; i < n; ++i) {
    at[i] = p.chars.size();
    const std::string name = prefix + std::to_string(i);
    p.chars.insert(p.chars.end(), name.c_str(), name.c_str() + name.size() + 1);
  }
  p.names.resize(n);
  for (uint64_t i = 0; i < n; ++i) p.names[i] = p.chars.data() + at[i];
  return p;
}

namespace {
Options g_options;
}
const Options& options() { return g_options; }

void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("kstage_perf: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(2);
}

// ---- measurement -----------------------------------------------------------------------------
namespace {

// --filter: the workloads whose name contains it; "TEXT$", those whose name ends with TEXT
// (clone_env$ is clone_env without clone_env_read_write).
bool filter_matches(const std::string& filter, const std::string& name) {
  if (filter.empty()) return true;
  if (filter.back() != '$') return name.find(filter) != std::string::npos;
  const size_t n = filter.size() - 1;
  return name.size() >= n && name.compare(name.size() - n, n, filter, 0, n) == 0;
}

struct Measurement {
  std::string status = "ok";  // ok | verify-failed | error | skipped | pending
  std::string note;
  int reps = 0, inner = 1;
  double median = 0, min = 0, max = 0, payload = 0, items = 0;
  double case_seconds = 0;          // wall time of the whole case (prepare, runs, verify)
  double rss_mib = 0, hwm_mib = 0;  // process VmRSS right after the case, and VmHWM so far
  Clock::time_point when{};         // when it was measured
  double gbps() const { return status == "ok" && median > 0 ? payload / median / 1e9 : 0; }
  std::vector<std::pair<std::string, double>> extras;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Instances whose run() may be repeated without before()/after() (baselines) are batched
// into `inner` calls per timed sample when one call is too short to time on its own.
Measurement measure_runs(Instance& inst, bool repeatable) {
  const Options& o = options();
  Measurement m;
  try {
    inst.prepare();
    inst.before();
    auto t0 = Clock::now();
    inst.run();
    double first = seconds_since(t0);
    inst.after();
    const std::string bad = inst.verify();
    if (!bad.empty()) {
      m.status = "verify-failed";
      m.note = bad;
      return m;
    }
    auto warm = [&] {  // an un-timed run; returns its seconds
      inst.before();
      t0 = Clock::now();
      inst.run();
      const double s = seconds_since(t0);
      first = std::min(first, s);
      inst.after();
      return s;
    };
    for (int w = 1; w < o.warmup; ++w) warm();
    // Then the instance's own warm-up (none in smoke mode).
    const double extra = o.mode == Mode::Smoke ? 0 : inst.extra_warmup_seconds();
    double warm_s = 0;
    for (int w = 0; w < Instance::kMaxExtraWarmup && warm_s < extra; ++w) warm_s += warm();
    inst.warmed();
    if (repeatable && first < 20e-6)
      m.inner = int(std::min(10000.0, std::ceil(20e-6 / std::max(first, 1e-9))));
    const double per_sample = std::max(first * m.inner, 1e-9);
    m.reps = int(std::clamp(std::ceil(o.target_seconds / per_sample), double(o.min_reps),
                            double(o.max_reps)));
    std::vector<double> times;
    times.reserve(size_t(m.reps));
    for (int r = 0; r < m.reps; ++r) {
      inst.before();
      t0 = Clock::now();
      for (int k = 0; k < m.inner; ++k) inst.run();
      times.push_back(seconds_since(t0) / m.inner);
      inst.after();
    }
    m.median = median_of(times);
    m.min = *std::min_element(times.begin(), times.end());
    m.max = *std::max_element(times.begin(), times.end());
    m.payload = inst.payload_bytes();
    m.items = inst.items();
    m.extras = inst.extras();
  } catch (const std::exception& e) {
    m.status = "error";
    m.note = e.what();
  }
  return m;
}

// VmRSS and VmHWM of this process, MiB.
std::pair<double, double> rss_now() {
  constexpr double kMiB = 1024.0 * 1024.0;
  return {resident_bytes() / kMiB, peak_resident_bytes() / kMiB};
}

Measurement measure(Instance& inst, bool repeatable) {
  const auto t0 = Clock::now();
  Measurement m = measure_runs(inst, repeatable);
  m.case_seconds = seconds_since(t0);
  m.when = Clock::now();
  std::tie(m.rss_mib, m.hwm_mib) = rss_now();
  return m;
}

std::string fmt_rows(uint64_t n) {
  char b[32];
  const double e = std::log10(double(n));
  if (n >= 1000 && std::fabs(e - std::round(e)) < 1e-9)
    std::snprintf(b, sizeof b, "1e%d", int(std::round(e)));
  else std::snprintf(b, sizeof b, "%llu", (unsigned long long)n);
  return b;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::string num(double v) {
  if (v == 0) return "0";
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// ---- the run ---------------------------------------------------------------------------------
class Runner {
 public:
  explicit Runner(const Options& o) : o_(o) {}
  int run();

 private:
  struct Row {
    std::string workload, family, impl, exec, params, loop_key, numpy_key, status, note;
    Shape shape;
    bool has_shape = true;
    Measurement m;
    double ratio_memcpy = 0, ratio_loop = 0;
    double memcpy_gbps = 0, loop_gbps = 0;  // the same-run baselines the ratios use
  };
  void write_row(const Row& r);
  void print_row(const Row& r);
  bool selected(const WorkloadDef& d, const Shape& s) const;
  const Measurement& memcpy_at(double bytes, const Shape& s);
  const Measurement* loop_for(const std::string& key, const Shape& s, const std::string& params);
  Measurement measure_loop(const BaselineDef& b, const std::string& key, const Shape& s,
                           const std::string& params);
  void shape_baselines(const Shape& s);
  // One kstage case: its baselines, then the workload, its ratios, its row. `base_bytes`: what
  // the context's stage already holds (the working-set cap counts it).
  void measure_case(const WorkloadDef& d, Context& cx, const Shape& s, Exec exec, double base_bytes,
                    bool payload_cap);
  void own_shape_workloads();
  // The row of a kstage case, its identity filled in.
  static Row case_row(const WorkloadDef& d, const Shape& s, Exec exec) {
    Row r;
    r.workload = d.name;
    r.family = d.family;
    r.impl = "kstage";
    r.exec = exec_name(exec);
    r.params = d.params;
    r.loop_key = d.loop_key;
    r.numpy_key = d.numpy_key;
    r.shape = s;
    return r;
  }
  void plan_numpy(const std::string& key, const Shape& s, const std::string& params);
  double baseline_ws(const BaselineDef& b, const Shape& s) const {
    return b.working_set ? b.working_set(s) : 2.0 * double(s.dense_bytes());
  }

  const Options& o_;
  std::ofstream csv_, plan_;
  std::map<long long, Measurement> memcpy_;
  std::map<std::string, Measurement> loops_;
  std::set<std::string> planned_;
  int ok_ = 0, failed_ = 0, skipped_ = 0;
  std::vector<std::string> failures_;
};

bool Runner::selected(const WorkloadDef& d, const Shape& s) const {
  if (d.own_shapes) return false;  // measured at its own shapes (own_shape_workloads)
  if (!filter_matches(o_.filter, d.name)) return false;
  if (d.applies && !d.applies(s)) return false;
  if (o_.big_rows_min && s.rows >= o_.big_rows_min && !d.big_ok) return false;
  if (o_.mode == Mode::Quick && d.quick_max_rows && s.rows > d.quick_max_rows) return false;
  if (d.max_rows && s.rows > d.max_rows && o_.rows_explicit == false) return false;
  return true;
}

void Runner::write_row(const Row& r) {
  const Measurement& m = r.m;
  const double gbps = m.median > 0 ? m.payload / m.median / 1e9 : 0;
  const double rate = m.median > 0 && m.items > 0 ? m.items / m.median : 0;
  std::string note = r.note.empty() ? m.note : r.note;
  for (const auto& [k, v] : m.extras) note += (note.empty() ? "" : "; ") + k + "=" + num(v);
  csv_ << (o_.mode == Mode::Quick   ? "quick"
           : o_.mode == Mode::Smoke ? "smoke"
                                    : "full")
       << ',' << r.workload << ',' << r.family << ',' << r.impl << ',' << r.exec << ','
       << (r.has_shape ? std::to_string(r.shape.rows) : "") << ','
       << (r.has_shape ? std::to_string(r.shape.lanes) : "") << ','
       << (r.has_shape ? dtype_name(r.shape.dtype) : "") << ','
       << (r.has_shape ? std::to_string(r.shape.row_bytes()) : "") << ',' << csv_escape(r.params)
       << ',' << num(m.payload) << ',' << num(m.items) << ',' << m.reps << ',' << m.inner << ','
       << num(m.median) << ',' << num(m.min) << ',' << num(m.max) << ',' << num(gbps) << ','
       << num(rate) << ',' << (r.family == "particles" ? "ticks/s" : "rows/s") << ',' << r.loop_key
       << ',' << r.numpy_key << ',' << num(r.memcpy_gbps) << ',' << num(r.loop_gbps) << ','
       << num(r.ratio_memcpy) << ',' << num(r.ratio_loop) << ','
       << (r.status.empty() ? m.status : r.status) << ',' << num(m.case_seconds) << ','
       << num(m.rss_mib) << ',' << num(m.hwm_mib) << ',' << csv_escape(note) << '\n';
  csv_.flush();
}

void Runner::print_row(const Row& r) {
  const Measurement& m = r.m;
  const std::string status = r.status.empty() ? m.status : r.status;
  char shape[64] = "";
  if (r.has_shape)
    std::snprintf(shape, sizeof shape, "%5s %sx%-2d", fmt_rows(r.shape.rows).c_str(),
                  r.shape.dtype == DType::F32 ? "f32" : "f64", r.shape.lanes);
  std::string name = r.impl == "kstage" ? r.workload : r.impl + ":" + r.workload;
  if (status != "ok") {
    std::printf("  %-34s %-8s %s  %s%s%s\n", name.c_str(), r.exec.c_str(), shape,
                status == "pending" ? "SKIP (not implemented)" : status.c_str(),
                (r.note.empty() && m.note.empty()) ? "" : ": ",
                (r.note.empty() ? m.note : r.note).c_str());
  } else {
    const double gbps = m.median > 0 ? m.payload / m.median / 1e9 : 0;
    std::printf("  %-34s %-8s %s %8.3f GB/s %10.3f us", name.c_str(), r.exec.c_str(), shape, gbps,
                m.median * 1e6);
    if (r.ratio_memcpy > 0) std::printf("  memcpy %.2fx", r.ratio_memcpy);
    if (r.ratio_loop > 0) std::printf("  loop %.2fx", r.ratio_loop);
    if (r.family == "particles" && m.median > 0 && m.items > 0)
      std::printf("  %.1f ticks/s", m.items / m.median);
    std::printf("\n");
  }
  std::fflush(stdout);
}

const Measurement& Runner::memcpy_at(double bytes, const Shape&) {
  const long long key = (long long)std::llround(bytes);
  // Re-measured when the cached figure is older than a few seconds: the machine's load
  // changes, and a ratio should compare numbers taken close together.
  auto it = memcpy_.find(key);
  if (it != memcpy_.end() &&
      std::chrono::duration<double>(Clock::now() - it->second.when).count() < 5.0)
    return it->second;
  if (it != memcpy_.end()) memcpy_.erase(it);
  // A payload whose two buffers exceed the working-set cap (the 1e7-prim scene tree's 384 B per
  // prim: 3.8 GB) is compared with memcpy's bandwidth at the largest size that fits a quarter of
  // the cap (1.5 GiB by default: far past any cache, where memcpy's bandwidth no longer depends
  // on the size); only its GB/s is used, never its time.
  const double cap_bytes = std::floor(o_.mem_cap_bytes / 4 / double(1 << 20)) * double(1 << 20);
  const double bytes_at = 2.0 * double(key) > o_.mem_cap_bytes ? cap_bytes : double(key);
  Measurement m;
  if (bytes_at < 1) {
    m.status = "skipped";
  } else {
    auto inst = make_memcpy(size_t(std::max<double>(bytes_at, 1)), false);
    m = measure(*inst, true);
    if (bytes_at != double(key))
      m.note = "memcpy of " + num(bytes_at) + " B: the bandwidth of the " + num(double(key)) +
               " B payload";
  }
  return memcpy_.emplace(key, m).first->second;
}

const Measurement* Runner::loop_for(const std::string& key, const Shape& s,
                                    const std::string& params) {
  if (key.empty()) return nullptr;
  const std::string id = key + "|" + std::to_string(s.rows) + "|" + dtype_name(s.dtype) + "|" +
                         std::to_string(s.lanes);
  auto it = loops_.find(id);
  if (it != loops_.end()) return &it->second;
  const BaselineDef* b = find_baseline(key, "serial_loop", Exec::Serial);
  if (!b) die("no serial_loop baseline registered for key '%s'", key.c_str());
  const Measurement m = measure_loop(*b, key, s, params);
  // Where the same loop is registered under OpenMP, it is measured right after: the ceiling
  // that 2 threads give this machine now (reported next to kstage's parallel figures).
  if (const BaselineDef* p = find_baseline(key, "omp_loop", Exec::Parallel))
    measure_loop(*p, key, s, params);
  // And its two-pass form where one is registered (a gather into a staging buffer, then a
  // scatter: the floor of a sealed write, report.py).
  const std::string two_pass = key + "_two_pass";
  if (const BaselineDef* p = find_baseline(two_pass, "omp_loop", Exec::Parallel))
    measure_loop(*p, two_pass, s, params);
  return &loops_.emplace(id, m).first->second;
}

Measurement Runner::measure_loop(const BaselineDef& b, const std::string& key, const Shape& s,
                                 const std::string& params) {
  Row r;
  r.workload = key;
  r.family = "baseline";
  r.impl = b.impl;
  r.exec = b.exec == Exec::Parallel ? "parallel" : "serial";
  r.params = params;
  r.shape = s;
  r.numpy_key = key;
  const double ws = baseline_ws(b, s);
  if (ws > o_.mem_cap_bytes) {
    r.status = "skipped";
    r.note = "working set " + num(ws / (1ull << 30)) + " GiB > cap";
    r.m.status = "skipped";
  } else {
    auto inst = b.make(s);
    r.m = measure(*inst, true);
  }
  if (r.m.status == "ok") {
    const Measurement& mc = memcpy_at(r.m.payload, s);
    r.memcpy_gbps = mc.gbps();
    if (r.memcpy_gbps > 0) r.ratio_memcpy = r.m.gbps() / r.memcpy_gbps;
  } else if (r.m.status != "skipped") {
    ++failed_;
    failures_.push_back(b.impl + ":" + key + " " + fmt_rows(s.rows) + ": " + r.m.note);
  }
  write_row(r);
  print_row(r);
  return r.m;
}

void Runner::plan_numpy(const std::string& key, const Shape& s, const std::string& params) {
  if (key.empty()) return;
  const std::string id = key + "|" + std::to_string(s.rows) + "|" + dtype_name(s.dtype) + "|" +
                         std::to_string(s.lanes);
  if (!planned_.insert(id).second) return;
  plan_ << key << ',' << s.rows << ',' << s.lanes << ',' << dtype_name(s.dtype) << ','
        << csv_escape(params) << '\n';
  plan_.flush();
}

// The memory limit at this shape: memcpy, memcpy into fresh memory, Kokkos::deep_copy.
void Runner::shape_baselines(const Shape& s) {
  struct Item {
    const char* key;
    const char* impl;
    Exec exec;
  };
  const Item items[] = {{"memcpy", "memcpy", Exec::Serial},
                        {"memcpy_alloc", "memcpy", Exec::Serial},
                        {"deep_copy", "deep_copy", Exec::Serial},
                        {"deep_copy", "deep_copy", Exec::Parallel}};
  for (const Item& it : items) {
    const BaselineDef* b = find_baseline(it.key, it.impl, it.exec);
    if (!b) continue;
    Row r;
    r.workload = it.key;
    r.family = "baseline";
    r.impl = it.impl;
    r.exec = exec_name(it.exec);
    r.shape = s;
    const double ws = baseline_ws(*b, s);
    if (ws > o_.mem_cap_bytes) {
      r.status = "skipped";
      r.note = "working set " + num(ws / (1ull << 30)) + " GiB > cap";
      r.m.status = "skipped";
    } else if (std::string(it.key) == "memcpy") {
      r.m = memcpy_at(double(s.dense_bytes()), s);
    } else {
      auto inst =
          std::string(it.key) == "memcpy_alloc" ? make_memcpy(s.dense_bytes(), true) : b->make(s);
      r.m = measure(*inst, true);
      if (r.m.status == "ok") {
        r.memcpy_gbps = memcpy_at(r.m.payload, s).gbps();
        if (r.memcpy_gbps > 0) r.ratio_memcpy = r.m.gbps() / r.memcpy_gbps;
      }
    }
    if (r.m.status != "ok" && r.m.status != "skipped") {
      ++failed_;
      failures_.push_back(std::string(it.impl) + ":" + it.key + ": " + r.m.note);
    }
    write_row(r);
    print_row(r);
  }
  plan_numpy("copy", s, "");
}

void Runner::measure_case(const WorkloadDef& d, Context& cx, const Shape& s, Exec exec,
                          double base_bytes, bool payload_cap) {
  Row r = case_row(d, s, exec);
  const double ws = d.working_set ? d.working_set(s) : 4.0 * double(s.dense_bytes());
  const double total = base_bytes + ws;
  const double payload_est = d.payload_estimate ? d.payload_estimate(s) : double(s.dense_bytes());
  if (total > o_.mem_cap_bytes) {
    r.status = "skipped";
    r.note = "working set ~" + num(total / (1ull << 30)) + " GiB > cap";
  } else if (payload_cap && o_.case_payload_cap > 0 && payload_est > o_.case_payload_cap &&
             !(d.big_ok && o_.big_rows_min && s.rows >= o_.big_rows_min)) {
    r.status = "skipped";
    r.note = "payload ~" + num(payload_est / 1e6) + " MB > quick-mode cap";
  }
  if (!r.status.empty()) {
    r.m.status = "skipped";
    ++skipped_;
    write_row(r);
    if (o_.verbose) print_row(r);
    return;
  }
  // Baselines of this shape first, so they are measured next to the kstage number.
  const Measurement* loop = loop_for(d.loop_key, s, d.params);
  plan_numpy(d.numpy_key, s, d.params);
  {
    auto inst = d.make(cx, s);
    r.m = measure(*inst, false);
  }
  if (r.m.status == "ok") {
    ++ok_;
    r.memcpy_gbps = memcpy_at(r.m.payload, s).gbps();
    if (r.memcpy_gbps > 0) r.ratio_memcpy = r.m.gbps() / r.memcpy_gbps;
    if (loop) r.loop_gbps = loop->gbps();
    if (r.loop_gbps > 0) r.ratio_loop = r.m.gbps() / r.loop_gbps;
  } else {
    ++failed_;
    failures_.push_back(d.name + " " + exec_name(exec) + " " + fmt_rows(s.rows) + " " +
                        dtype_name(s.dtype) + "x" + std::to_string(s.lanes) + ": " + r.m.note);
  }
  write_row(r);
  print_row(r);
}

// Workloads with shapes of their own (WorkloadDef::own_shapes), after the grid: per row count,
// per host execution space, each workload in a fresh stage of its own.
void Runner::own_shape_workloads() {
  std::map<uint64_t, std::vector<std::pair<const WorkloadDef*, Shape>>> by_rows;
  for (const WorkloadDef& d : workload_registry()) {
    if (d.pending || !d.own_shapes) continue;
    if (!filter_matches(o_.filter, d.name)) continue;
    for (const Shape& s : d.own_shapes(o_)) by_rows[s.rows].emplace_back(&d, s);
  }
  for (const auto& [rows, cases] : by_rows) {
    std::printf("\n== rows %s (workloads with shapes of their own) ==\n", fmt_rows(rows).c_str());
    for (Exec exec : o_.execs) {
      std::printf("  -- kstage, host execution %s: a stage of its own per workload\n",
                  exec_name(exec));
      for (const auto& [d, s] : cases) {
        std::unique_ptr<Context> cx;
        try {
          cx = std::make_unique<Context>(exec, 0);
        } catch (const std::exception& e) {
          ++failed_;
          failures_.push_back(std::string("context ") + exec_name(exec) + ": " + e.what());
          continue;
        }
        measure_case(*d, *cx, s, exec, 0, false);
      }
    }
  }
}

int Runner::run() {
  mkdir(o_.out_dir.c_str(), 0755);
  csv_.open(o_.out_dir + "/results.csv");
  plan_.open(o_.out_dir + "/numpy_plan.csv");
  if (!csv_ || !plan_) die("cannot write into %s", o_.out_dir.c_str());
  csv_ << "mode,workload,family,impl,exec,rows,lanes,dtype,row_bytes,params,payload_bytes,items,"
          "reps,inner,median_s,min_s,max_s,gbps,rate,rate_unit,loop_key,numpy_key,memcpy_gbps,"
          "loop_gbps,ratio_memcpy,ratio_loop,status,case_s,rss_mib,hwm_mib,note\n";
  plan_ << "key,rows,lanes,dtype,params\n";
  const auto t_start = Clock::now();

  // Pending workloads first: they have no shape.
  for (const WorkloadDef& d : workload_registry()) {
    if (!d.pending) continue;
    if (!filter_matches(o_.filter, d.name)) continue;
    Row r;
    r.workload = d.name;
    r.family = d.family;
    r.impl = "kstage";
    r.exec = "-";
    r.params = d.params;
    r.has_shape = false;
    r.status = "pending";
    r.note = d.pending_reason;
    write_row(r);
    print_row(r);
  }

  for (uint64_t rows : o_.rows) {
    std::vector<Shape> shapes;
    for (DType dt : o_.dtypes)
      for (int l : o_.lanes) shapes.push_back(Shape{rows, dt, l});
    // Largest rows first inside a context: the biggest columns are created while the
    // stage holds the fewest.
    std::sort(shapes.begin(), shapes.end(),
              [](const Shape& a, const Shape& b) { return a.row_bytes() > b.row_bytes(); });
    bool any = false;
    for (const Shape& s : shapes)
      for (const WorkloadDef& d : workload_registry()) any = any || (!d.pending && selected(d, s));
    if (!any) continue;
    std::printf("\n== rows %s ==\n", fmt_rows(rows).c_str());
    for (const Shape& s : shapes) shape_baselines(s);

    for (Exec exec : o_.execs) {
      const double book = Context::bookkeeping_bytes(rows);
      if (book > o_.mem_cap_bytes) {
        for (const Shape& s : shapes)
          for (const WorkloadDef& d : workload_registry()) {
            if (d.pending || !selected(d, s)) continue;
            Row r = case_row(d, s, exec);
            r.status = "skipped";
            r.note = "stage bookkeeping alone ~" + num(book / (1ull << 30)) +
                     " GiB > cap (dictionary ~100 B/path)";
            r.m.status = "skipped";
            write_row(r);
            ++skipped_;
          }
        std::printf("  kstage %-8s rows %s: skipped (stage bookkeeping ~%.1f GiB > cap %.1f GiB)\n",
                    exec_name(exec), fmt_rows(rows).c_str(), book / (1ull << 30),
                    o_.mem_cap_bytes / (1ull << 30));
        continue;
      }
      std::unique_ptr<Context> cx;
      try {
        cx = std::make_unique<Context>(exec, rows);
      } catch (const std::exception& e) {
        ++failed_;
        failures_.push_back(std::string("context ") + exec_name(exec) + " " + fmt_rows(rows) +
                            ": " + e.what());
        std::printf("  context %s rows %s: ERROR %s\n", exec_name(exec), fmt_rows(rows).c_str(),
                    e.what());
        continue;
      }
      std::printf("  -- kstage, host execution %s: stage with %s prims (interned in %.2f s)\n",
                  exec_name(exec), fmt_rows(rows).c_str(), cx->setup_seconds());
      for (const Shape& s : shapes)
        for (const WorkloadDef& d : workload_registry())
          if (!d.pending && selected(d, s))
            measure_case(d, *cx, s, exec, book + cx->column_bytes(), true);
    }
  }
  own_shape_workloads();

  const double total_s = seconds_since(t_start);
  const long hwm_kb = long(peak_resident_bytes() / 1024);
  {
    std::ofstream meta(o_.out_dir + "/meta.txt");
    char host[256] = "?";
    gethostname(host, sizeof host);
    const std::time_t now = std::time(nullptr);
    char when[64];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    meta << "mode="
         << (o_.mode == Mode::Quick   ? "quick"
             : o_.mode == Mode::Smoke ? "smoke"
                                      : "full")
         << "\nfinished=" << when << "\nhost=" << host
         << "\nnproc=" << sysconf(_SC_NPROCESSORS_ONLN)
         << "\nkokkos_host_concurrency=" << Kokkos::DefaultHostExecutionSpace().concurrency()
         << "\nkstage_version=" << kstage_version() << "\nseconds=" << num(total_s)
         << "\npeak_rss_mib=" << num(double(hwm_kb) / 1024) << "\ncases_ok=" << ok_
         << "\ncases_failed=" << failed_ << "\ncases_skipped=" << skipped_
         << "\nmem_cap_gib=" << num(o_.mem_cap_bytes / (1ull << 30)) << "\n";
  }
  std::printf(
      "\nkstage_perf: %d kstage cases measured, %d skipped (memory cap), %d failed, in %.1f s "
      "(peak RSS %.0f MiB)\n",
      ok_, skipped_, failed_, total_s, double(hwm_kb) / 1024);
  for (const WorkloadDef& d : workload_registry())
    if (d.pending)
      std::printf("SKIP (not implemented)  %s: %s\n", d.name.c_str(), d.pending_reason.c_str());
  for (const std::string& f : failures_) std::printf("FAILED  %s\n", f.c_str());
  std::printf("results: %s/results.csv\n", o_.out_dir.c_str());
  return failed_ ? 1 : 0;
}

// ---- command line ----------------------------------------------------------------------------
void usage() {
  std::printf(
      "usage: kstage_perf [--quick | --full | --smoke] [options]\n"
      "  --quick          short grid (rows 1e3,1e5,1e6 + 1e7 for dense cases; lanes 1,3; float32)\n"
      "  --full           the whole grid (rows 1e3..1e8; lanes 1,3,16; float32, float64) "
      "[default]\n"
      "  --smoke          one tiny size per workload, 1 rep: checks that everything runs and "
      "verifies\n"
      "  --out DIR        results folder (default ./kstage-perf-results)\n"
      "  --filter TEXT    only workloads whose name contains TEXT (TEXT$: ends with TEXT)\n"
      "  --rows LIST      row counts, e.g. 1e3,1e6   --lanes LIST   --dtypes f32,f64\n"
      "  --exec LIST      serial,parallel (default both)\n"
      "  --reps MIN[,MAX] repetitions per case      --seconds S   timed seconds per case\n"
      "  --mem-cap-gib G  working-set cap (default 6)\n"
      "  --list           list the registered workloads and baselines\n"
      "  --device cuda    the GPU grid on CUDA columns instead (perf/src/device_suite.cpp; a CUDA "
      "build)\n"
      "  --device emulated  the device-map writes on the emulated device, reported without "
      "targets\n"
      "                   (perf/src/emulated_suite.cpp; a build with KSTAGE_EMULATED_DEVICE)\n"
      "  --scale          the scale workload at 1e3..1e8 prims, ranges and explicit paths "
      "(perf/src/scale_suite.cpp;\n"
      "                   --rows picks the counts, --exec the host execution; --smoke: 1e3 and "
      "1e4)\n"
      "  -v               also print skipped cases\n"
      "Kokkos options (--kokkos-threads=N, ...) are passed to Kokkos::initialize.\n");
}

template <class T, class F>
std::vector<T> parse_list(const std::string& s, F&& conv) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(conv(item));
  return out;
}

void list_registry() {
  std::printf("workloads:\n");
  for (const WorkloadDef& d : workload_registry())
    std::printf("  %-32s %-9s %s%s%s\n", d.name.c_str(), d.family.c_str(),
                d.pending ? "[pending: not implemented in kstage yet] " : "", d.description.c_str(),
                d.params.empty() ? "" : (" (" + d.params + ")").c_str());
  std::printf("baselines:\n");
  for (const BaselineDef& b : baseline_registry())
    std::printf("  %-12s %-24s %-8s %s\n", b.impl.c_str(), b.key.c_str(), exec_name(b.exec),
                b.description.c_str());
}

}  // namespace
}  // namespace kperf

int main(int argc, char** argv) {
  using namespace kperf;
  Options& o = g_options;
  bool list = false;
  std::string rows_arg, lanes_arg, dtypes_arg, exec_arg, reps_arg, device;
  bool scale = false;
  double seconds = -1, cap = -1;
  std::vector<char*> kokkos_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--quick") o.mode = Mode::Quick;
    else if (a == "--full") o.mode = Mode::Full;
    else if (a == "--smoke") o.mode = Mode::Smoke;
    else if (a == "--out") o.out_dir = value();
    else if (a == "--filter") o.filter = value();
    else if (a == "--rows") rows_arg = value();
    else if (a == "--lanes") lanes_arg = value();
    else if (a == "--dtypes") dtypes_arg = value();
    else if (a == "--exec") exec_arg = value();
    else if (a == "--reps") reps_arg = value();
    else if (a == "--seconds") seconds = std::atof(value().c_str());
    else if (a == "--mem-cap-gib") cap = std::atof(value().c_str());
    else if (a == "--list") list = true;
    else if (a == "--device") device = value();
    else if (a == "--scale") scale = true;
    else if (a == "-v") o.verbose = true;
    else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a.rfind("--kokkos", 0) == 0) kokkos_args.push_back(argv[i]);
    else {
      usage();
      die("unknown argument '%s'", a.c_str());
    }
  }
  if (list) {
    list_registry();
    return 0;
  }
  switch (o.mode) {
    case Mode::Quick:
      // 3e6 rows (36 MB at float32 x 3: beyond the 32 MiB L3 cache and glibc's mmap threshold)
      // for the dense cases; 1e7 would need 10-20 s per stage just to intern the paths.
      o.rows = {1000, 100000, 1000000, 3000000};
      o.big_rows_min = 3000000;
      o.lanes = {1, 3};
      o.dtypes = {DType::F32};
      o.warmup = 1;
      o.min_reps = 3;
      o.max_reps = 25;
      o.target_seconds = 0.03;
      o.case_payload_cap = 40e6;  // not applied to the dense cases at the big row count
      o.particles_pairs = 5;
      break;
    case Mode::Full:
      o.rows = {1000, 10000, 100000, 1000000, 10000000, 100000000};
      o.lanes = {1, 3, 16};
      o.dtypes = {DType::F32, DType::F64};
      o.warmup = 2;
      o.min_reps = 5;
      o.max_reps = 50;
      o.target_seconds = 0.15;
      o.particles_pairs = 25;
      break;
    case Mode::Smoke:
      o.rows = {1000};
      o.lanes = {1, 3, 16};
      o.dtypes = {DType::F32, DType::F64};
      o.warmup = 0;
      o.min_reps = o.max_reps = 1;
      o.target_seconds = 0;
      o.particles_pairs = 2;
      break;
  }
  if (!rows_arg.empty()) {
    o.rows = parse_list<uint64_t>(rows_arg, [](const std::string& s) {
      const double v = std::atof(s.c_str());
      if (!(v >= 1 && v < 4.3e9)) die("bad row count '%s'", s.c_str());
      return uint64_t(std::llround(v));
    });
    o.big_rows_min = 0;
    o.rows_explicit = true;
  }
  if (!lanes_arg.empty())
    o.lanes = parse_list<int>(lanes_arg, [](const std::string& s) {
      const int v = std::atoi(s.c_str());
      if (v < 1 || v > 64) die("bad lane count '%s'", s.c_str());
      return v;
    });
  if (!dtypes_arg.empty())
    o.dtypes = parse_list<DType>(dtypes_arg, [](const std::string& s) {
      if (s == "f32" || s == "float32") return DType::F32;
      if (s == "f64" || s == "float64") return DType::F64;
      die("bad dtype '%s' (f32 or f64)", s.c_str());
    });
  if (!exec_arg.empty())
    o.execs = parse_list<Exec>(exec_arg, [](const std::string& s) {
      if (s == "serial") return Exec::Serial;
      if (s == "parallel") return Exec::Parallel;
      die("bad exec '%s' (serial or parallel)", s.c_str());
    });
  if (!reps_arg.empty()) {
    auto r = parse_list<int>(
        reps_arg, [](const std::string& s) { return std::max(1, std::atoi(s.c_str())); });
    o.min_reps = r[0];
    o.max_reps = r.size() > 1 ? std::max(r[0], r[1]) : r[0];
  }
  if (seconds >= 0) o.target_seconds = seconds;
  if (cap > 0) o.mem_cap_bytes = cap * double(1ull << 30);
  if (o.out_dir.empty()) o.out_dir = "kstage-perf-results";

  // The application initialises Kokkos (for the deep_copy baselines); kstage then uses it
  // and leaves finalisation to us. Every stage is destroyed before Kokkos::finalize.
  int kargc = int(kokkos_args.size());
  Kokkos::initialize(kargc, kokkos_args.data());
  int rc;
  if (!device.empty()) {
    rc = device == "emulated" ? run_emulated_suite(o) : run_device_suite(device, o);
  } else if (scale) {
    rc = run_scale_suite(o);
  } else {
    std::printf("kstage_perf: kstage %u, mode %s, Kokkos host concurrency %d, out %s\n",
                kstage_version(),
                o.mode == Mode::Quick   ? "quick"
                : o.mode == Mode::Smoke ? "smoke"
                                        : "full",
                Kokkos::DefaultHostExecutionSpace().concurrency(), o.out_dir.c_str());
    Runner runner(o);
    rc = runner.run();
  }
  Kokkos::finalize();
  return rc;
}
