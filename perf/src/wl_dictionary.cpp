// SPDX-License-Identifier: Apache-2.0
// The path dictionary at scale: interning `rows` new paths "/world/particles/p<i>" into a
// fresh stage, one kstage_intern_path call each (intern_path) or one kstage_intern_paths
// call (intern_paths_bulk). The rate column is paths per second; the extras record the
// resident memory the stage gained per path (bytes_per_path, from /proc/self/statm around
// the first run). perf/report.py holds them to the targets of the compact dictionary:
// <= 0.3 us per intern and <= 48 bytes per path at 1e7 paths.
#include "context.hpp"

#include <algorithm>
#include <cstring>

namespace kperf {
namespace {

class Intern final : public Instance {
 public:
  Intern(Context& cx, const Shape& s, bool bulk) : cx_(cx), n_(s.rows), bulk_(bulk) {}
  ~Intern() override {
    if (stage_) kstage_destroy(stage_);
  }
  void prepare() override {
    names_ = path_names("/world/particles/p", n_);
    ids_.assign(n_, 0);
  }
  void before() override {
    if (stage_) KP_CHECK(kstage_destroy(stage_));
    kstage_config_t c = kstage_config_init();
    c.host_execution =
        cx_.exec() == Exec::Serial ? KSTAGE_HOST_EXECUTION_SERIAL : KSTAGE_HOST_EXECUTION_PARALLEL;
    KP_CHECK(kstage_create(&c, &stage_));
    rss_before_ = resident_bytes();
  }
  void run() override {
    if (bulk_) {
      KP_CHECK(kstage_intern_paths(stage_, names_.names.data(), nullptr, n_, ids_.data()));
    } else {
      for (uint64_t i = 0; i < n_; ++i)
        KP_CHECK(kstage_intern_path(stage_, names_.names[i], KSTAGE_NUL_TERMINATED, &ids_[i]));
    }
  }
  void after() override {
    const double gained = resident_bytes() - rss_before_;
    if (first_) bytes_per_path_ = std::max(0.0, gained) / double(n_);
    first_ = false;
  }
  std::string verify() override {
    for (uint64_t i = 0; i < n_; i += std::max<uint64_t>(1, n_ / 1000)) {
      const char* s = nullptr;
      KP_CHECK(kstage_path_string(stage_, ids_[i], &s, nullptr));
      if (std::strcmp(s, names_.names[i]) != 0)
        return std::string("path ") + names_.names[i] + " reads back as " + s;
    }
    for (uint64_t i = 1; i < n_; ++i)
      if (ids_[i] != ids_[i - 1] + 1) return "sibling paths did not get consecutive ids";
    return "";
  }
  double payload_bytes() const override { return 0; }
  double items() const override { return double(n_); }
  std::vector<std::pair<std::string, double>> extras() const override {
    return {{"bytes_per_path", bytes_per_path_}};
  }

 private:
  Context& cx_;
  uint64_t n_;
  bool bulk_;
  PathNames names_;
  std::vector<kstage_path_t> ids_;
  kstage_stage_t stage_ = 0;
  double rss_before_ = 0, bytes_per_path_ = 0;
  bool first_ = true;
};

void reg(const char* name, const char* desc, bool bulk) {
  WorkloadDef d;
  d.name = name;
  d.family = "dictionary";
  d.description = desc;
  d.big_ok = true;
  // Paths are one shape: only float32 x 1 of the grid.
  d.applies = [](const Shape& s) { return s.dtype == DType::F32 && s.lanes == 1; };
  d.working_set = [](const Shape& s) { return 100.0 * double(s.rows); };  // names + the tree
  d.payload_estimate = [](const Shape&) { return 0.0; };
  d.make = [bulk](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
    return std::make_unique<Intern>(cx, s, bulk);
  };
  RegisterWorkload{std::move(d)};
}

const bool registered = [] {
  reg("intern_path",
      "intern `rows` new paths /world/particles/p<i>, one kstage_intern_path call each", false);
  reg("intern_paths_bulk", "the same paths in one kstage_intern_paths call", true);
  return true;
}();

}  // namespace
}  // namespace kperf
