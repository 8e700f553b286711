// SPDX-License-Identifier: Apache-2.0
// DLPack workloads: per-tensor latency of the bridge, which moves no payload.
//  - dlpack_roundtrip: kstage::export_dlpack_versioned of a Kokkos View, then
//    kstage::import_dlpack of that tensor, then dropping the import (the deleter runs).
//  - dlpack_group_export: kstage_group_export of a held read group, then the deleter.
// Each run() does kCalls of them; the rate column is tensors per second and the target
// (<= 1 us per tensor on the host) is read from it.
#include "context.hpp"

#include <kstage/dlpack.hpp>

namespace kperf {
namespace {

constexpr int kCalls = 1000;

class RoundTrip final : public Instance {
 public:
  explicit RoundTrip(const Shape& s) : view_("perf::dlpack", s.rows, size_t(s.lanes)) {}
  void run() override {
    for (int i = 0; i < kCalls; ++i) {
      DLManagedTensorVersioned* t = kstage::export_dlpack_versioned(view_);
      auto imported = kstage::import_dlpack<float**>(t);
      same_ = imported.view().data() == view_.data();
    }  // each import dies here: the export's deleter runs
  }
  std::string verify() override {
    return same_ ? "" : "the import does not alias the exported View";
  }
  double payload_bytes() const override { return 0; }
  double items() const override { return kCalls; }

 private:
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> view_;
  bool same_ = false;
};

class GroupExport final : public Instance {
 public:
  GroupExport(Context& cx, const Shape& s) : cx_(cx), s_(s) {}
  ~GroupExport() override {
    if (group_) kstage_release_group(cx_.stage(), group_);
    if (read_) kstage_release_read(cx_.stage(), read_);
  }
  void prepare() override {
    attr_ = cx_.token("dlpack_f32x" + std::to_string(s_.lanes));
    HostBuf b(s_.rows * size_t(s_.lanes) * sizeof(float));
    fill_values(b.as<float>(), s_.rows, s_.lanes, 3);
    int64_t shape[1] = {int64_t(s_.rows)};
    DLTensor t = make_tensor(b.p, DType::F32, s_.lanes, shape);
    kstage_write_data_t d = kstage_write_data_init();
    d.tensors = &t;
    d.tensor_count = 1;
    const uint64_t o = cx_.next_ordinal();
    cx_.write(cx_.all(), attr_, o, d);
    cx_.seal(o, attr_);
    KP_CHECK(kstage_read_attributes(cx_.stage(), cx_.all(), &attr_, 1, nullptr, &read_));
    kstage_read_group_t g;
    KP_CHECK(kstage_fetch_read_next(cx_.stage(), read_, 0, &g));
    group_ = g.handle;
    data_ = g.data.tensors[0].data;
  }
  void run() override {
    for (int i = 0; i < kCalls; ++i) {
      DLManagedTensorVersioned* t = nullptr;
      KP_CHECK(kstage_group_export(cx_.stage(), group_, 0, 0, &t));
      same_ = t->dl_tensor.data == data_;
      t->deleter(t);
    }
  }
  std::string verify() override { return same_ ? "" : "the export does not alias the group"; }
  double payload_bytes() const override { return 0; }
  double items() const override { return kCalls; }

 private:
  Context& cx_;
  Shape s_;
  kstage_token_t attr_ = 0;
  kstage_read_t read_ = 0;
  kstage_group_t group_ = 0;
  const void* data_ = nullptr;
  bool same_ = false;
};

const bool registered = [] {
  // Latency does not depend on the tensor's size: one float32 shape is enough.
  auto one_shape = [](const Shape& s) { return s.dtype == DType::F32 && s.rows <= 1000000; };
  WorkloadDef r;
  r.name = "dlpack_roundtrip";
  r.family = "dlpack";
  r.description = "export_dlpack_versioned(View) + import_dlpack + deleter, per tensor";
  r.params = "calls=1000";
  r.applies = one_shape;
  r.working_set = [](const Shape& s) { return double(s.dense_bytes()); };
  r.payload_estimate = [](const Shape&) { return 0.0; };
  r.make = [](Context&, const Shape& s) -> std::unique_ptr<Instance> {
    return std::make_unique<RoundTrip>(s);
  };
  RegisterWorkload{std::move(r)};
  WorkloadDef g;
  g.name = "dlpack_group_export";
  g.family = "dlpack";
  g.description = "kstage_group_export of a held read group + deleter, per tensor";
  g.params = "calls=1000";
  g.applies = one_shape;
  g.working_set = [](const Shape& s) { return 2.0 * double(s.dense_bytes()); };
  g.payload_estimate = [](const Shape&) { return 0.0; };
  g.make = [](Context& cx, const Shape& s) -> std::unique_ptr<Instance> {
    return std::make_unique<GroupExport>(cx, s);
  };
  RegisterWorkload{std::move(g)};
  return true;
}();

}  // namespace
}  // namespace kperf
