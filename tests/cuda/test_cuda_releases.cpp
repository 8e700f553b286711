// SPDX-License-Identifier: Apache-2.0
// Releases ordered after work kstage does not run, on a real GPU, with the other side's stream
// held (held_stream.hpp; tests/emulated/test_gpu_runtime.cpp and test_device_sync.cpp have the
// same rules on the emulated device): a map given up while its producer still writes it
// (kstage_release_map_after) frees its buffers only after the producer; an export to a consumer
// stream is released after that stream's read, holding back nothing of the stage's own, nor its
// destroy; a release that names no stream (DLPack stream -1, an Arrow device array) returns only
// once the consumer's queued read has run. Each case checks the values the other side read or
// wrote, so memory taken early shows as wrong values, not as a crash.
// Built by the cuda preset, run by scripts/gpu-check.sh. Host C++ (g++).
#include "cuda/cuda_support.hpp"

#include <kstage/kstage_arrow.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

using namespace kstage_cuda_test;

namespace {

constexpr size_t kRows = size_t(1) << 16;

std::vector<float> iota(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(i % 1000);
  return v;
}

// A stage on the GPU with columns a (0..999 repeated) and b (all -1) of kRows prims, sealed;
// reads of one column compact (a buffer of the read's own, of the same size for either).
struct ColumnsAB {
  ColumnsAB() : s(KSTAGE_HOST_EXECUTION_DEFAULT, &kGpu), va(iota(kRows)) {
    q = s.query(s.paths("/p", kRows));
    a = s.token("a");
    b = s.token("b");
    GpuFloats src_a(va), src_b(std::vector<float>(kRows, -1.f));
    finish_bounded(s, write_op(s, q, a, 1, src_a.t));
    finish_bounded(s, write_op(s, q, b, 1, src_b.t));
    s.seal(1);
    // A first read of each: the columns' row maps go up now (they stay on the device) and the
    // staging block is cached, so that a read while a stream is held allocates no pinned memory
    // (a page-locked allocation keeps CUDA from running work queued after it beside work queued
    // before it: the held stream's kernel).
    for (kstage_token_t attr : {a, b}) {
      kstage_read_t r = 0;
      kstage_read_group_t g{};
      compact_read(attr, &r, &g);
      KS_OK(kstage_release_group(s.stage, g.handle));
      KS_OK(kstage_release_read(s.stage, r));
    }
  }
  // A compact read of `attr` on the device, its data there (a bounded wait).
  void compact_read(kstage_token_t attr, kstage_read_t* r, kstage_read_group_t* g) {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = true;
    KS_OK(kstage_read_attributes(s.stage, q, &attr, 1, &d, r));
    KS_OK(kstage_fetch_read_next(s.stage, *r, 0, g));
    REQUIRE(g->data.tensors[0].device.device_type == kDLCUDA);
    REQUIRE(group_ready(g->data.device_sync));
  }
  DLManagedTensorVersioned* export_a(uintptr_t consumer) {
    kstage_read_t r = 0;
    kstage_read_group_t g{};
    compact_read(a, &r, &g);
    DLManagedTensorVersioned* e = nullptr;
    KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, consumer, &e));
    KS_OK(kstage_release_group(s.stage, g.handle));
    KS_OK(kstage_release_read(s.stage, r));
    return e;
  }
  Stage s;
  std::vector<float> va;
  kstage_query_t q = 0;
  kstage_token_t a = 0, b = 0;
};

}  // namespace

TEST_CASE(
    "cuda: a map released after its producer frees its buffers only after the producer's "
    "copy",
    "[cuda][map][sync]") {
  ColumnsAB c;
  kstage_map_desc_t d = kstage_map_desc_init();
  kstage_token_t m_attr = c.s.token("m");
  d.attribute = m_attr;
  d.dtype = f32();
  kstage_map_t m = 0;
  KS_OK(kstage_map_attribute(c.s.stage, c.q, &d, 2, nullptr, 0, &m));
  kstage_map_group_info_t g{};
  KS_OK(kstage_fetch_map_next(c.s.stage, m, 0, &g));
  REQUIRE(g.data.tensors[0].device.device_type == kDLCUDA);
  PinnedArray<float> fill(std::vector<float>(kRows, -7.f));
  kstage_read_t r = 0;
  kstage_read_group_t rg{};
  {
    HeldStream producer;
    REQUIRE(producer.error() == "");
    // The producer's copy into the map's buffer waits behind the hold; the map is given up now.
    REQUIRE(cudaMemcpyAsync(g.data.tensors[0].data, fill.p, kRows * sizeof(float),
                            cudaMemcpyHostToDevice, producer.stream()) == cudaSuccess);
    KS_OK(kstage_release_map_after(c.s.stage, m, kstage_device_sync_t{producer.handle(), 0}));
    // A compact read of b after it, the same size, on the stage's stream: the stage's stream
    // waits for the producer (a stream wait, not a host block), so it is not done while the
    // producer is held, and its buffer cannot be the map's.
    kstage_read_desc_t rd = kstage_read_desc_init();
    rd.compact = true;
    KS_OK(kstage_read_attributes(c.s.stage, c.q, &c.b, 1, &rd, &r));
    KS_OK(kstage_fetch_read_next(c.s.stage, r, 0, &rg));
    REQUIRE(rg.data.device_sync.event != 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(busy(reinterpret_cast<cudaEvent_t>(rg.data.device_sync.event)));
    CHECK_FALSE(producer.timed_out());
  }
  REQUIRE(group_ready(rg.data.device_sync));
  // The producer's late copy did not land in the read's buffer.
  CHECK(tensor_floats(rg.data.tensors[0], kRows) == std::vector<float>(kRows, -1.f));
  KS_OK(kstage_release_group(c.s.stage, rg.handle));
  KS_OK(kstage_release_read(c.s.stage, r));
  kstage_attribute_info_t info = kstage_attribute_info_init();
  CHECK(kstage_attribute_info(c.s.stage, m_attr, &info) == KSTAGE_NOT_FOUND);  // nothing committed
}

TEST_CASE(
    "cuda: an export to a held consumer stream is released after its read, holding back "
    "nothing of the stage's",
    "[cuda][dlpack][sync]") {
  ColumnsAB c;
  PinnedArray<float> out(std::vector<float>(kRows, 0.f));
  {
    HeldStream consumer;
    REQUIRE(consumer.error() == "");
    DLManagedTensorVersioned* e = c.export_a(consumer.handle());
    REQUIRE(e->dl_tensor.device.device_type == kDLCUDA);
    REQUIRE(cudaMemcpyAsync(out.p, e->dl_tensor.data, kRows * sizeof(float), cudaMemcpyDeviceToHost,
                            consumer.stream()) == cudaSuccess);
    e->deleter(e);  // as torch and CuPy do: right after enqueueing the read
    // kstage's next allocations of that size, and their work, go on meanwhile.
    for (int i = 0; i < 3; ++i) {
      kstage_read_t r = 0;
      kstage_read_group_t g{};
      c.compact_read(c.b, &r, &g);  // (a bounded wait for its data: REQUIREs it is there)
      KS_OK(kstage_release_group(c.s.stage, g.handle));
      KS_OK(kstage_release_read(c.s.stage, r));
    }
    CHECK(busy(consumer.stream()));  // still reading
    CHECK_FALSE(consumer.timed_out());
    consumer.release();
    REQUIRE(wait_for(consumer.stream(), kWaitLimit));
  }
  CHECK(out.get() == c.va);  // never b's -1
}

TEST_CASE(
    "cuda: destroying a stage does not wait for a held consumer stream, nor frees what it "
    "reads",
    "[cuda][dlpack][sync]") {
  auto c = std::make_unique<ColumnsAB>();
  const std::vector<float> va = c->va;
  PinnedArray<float> out(std::vector<float>(kRows, 0.f));
  std::atomic<bool> destroyed{false};
  {
    HeldStream consumer;
    REQUIRE(consumer.error() == "");
    DLManagedTensorVersioned* e = c->export_a(consumer.handle());
    REQUIRE(cudaMemcpyAsync(out.p, e->dl_tensor.data, kRows * sizeof(float), cudaMemcpyDeviceToHost,
                            consumer.stream()) == cudaSuccess);
    e->deleter(e);
    // Destroyed on a thread of its own: a destroy that waits for the consumer fails the case
    // (the hold lasts 4 s) instead of hanging it.
    std::thread destroyer([&] {
      c.reset();
      destroyed.store(true);
    });
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2000);
    while (!destroyed.load() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool returned = destroyed.load();
    CHECK(busy(consumer.stream()));
    CHECK_FALSE(consumer.timed_out());
    consumer.release();
    destroyer.join();
    CHECK(returned);
    REQUIRE(wait_for(consumer.stream(), kWaitLimit));
  }
  CHECK(out.get() == va);
  // The orphaned release is reaped by a later stage's work; nothing is left waiting.
  ColumnsAB later;
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  later.compact_read(later.a, &r, &g);
  KS_OK(kstage_release_group(later.s.stage, g.handle));
  KS_OK(kstage_release_read(later.s.stage, r));
}

// Issue #52, defect 8 with a held consumer: an export whose release names no stream waits for
// the whole device. `make` exports a compact read of a and returns its data and its release;
// the consumer reads that data on a held stream and releases at once; a helper lets the stream
// go after 200 ms. The release must return only after the consumer's read, and kstage's next
// compact read (same size) must not take the memory from under it.
namespace {
void release_while_held_consumer_reads(
    const std::function<
        std::pair<const void*, std::function<void()>>(Stage&, const kstage_read_group_t&)>& make) {
  ColumnsAB c;
  kstage_read_t r = 0;
  kstage_read_group_t g{};
  c.compact_read(c.a, &r, &g);
  std::pair<const void*, std::function<void()>> exported = make(c.s, g);
  KS_OK(kstage_release_group(c.s.stage, g.handle));
  KS_OK(kstage_release_read(c.s.stage, r));
  PinnedArray<float> out(std::vector<float>(kRows, 0.f));
  cudaEvent_t read_done = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&read_done, cudaEventDisableTiming) == cudaSuccess);
  {
    HeldStream consumer;
    REQUIRE(consumer.error() == "");
    REQUIRE(cudaMemcpyAsync(out.p, exported.first, kRows * sizeof(float), cudaMemcpyDeviceToHost,
                            consumer.stream()) == cudaSuccess);
    REQUIRE(cudaEventRecord(read_done, consumer.stream()) == cudaSuccess);
    kstage_read_t r2 = 0;
    kstage_read_group_t g2{};
    {
      DelayedRelease helper(consumer, std::chrono::milliseconds(200));
      exported.second();  // right after the consumer enqueued its read
      CHECK(wait_for(read_done, std::chrono::milliseconds(0)));  // done before it returned
      c.compact_read(c.b, &r2, &g2);  // kstage's next allocation of that size
    }
    CHECK_FALSE(consumer.timed_out());
    KS_OK(kstage_release_group(c.s.stage, g2.handle));
    KS_OK(kstage_release_read(c.s.stage, r2));
    REQUIRE(wait_for(consumer.stream(), kWaitLimit));
  }
  CHECK(out.get() == c.va);
  (void)cudaEventDestroy(read_done);
}
}  // namespace

TEST_CASE("cuda: a DLPack export for no consumer stream is released after a held consumer's read",
          "[cuda][dlpack][sync]") {
  release_while_held_consumer_reads([](Stage& s, const kstage_read_group_t& g) {
    DLManagedTensorVersioned* e = nullptr;
    KS_OK(kstage_group_export_on_stream(s.stage, g.handle, 0, 0, KSTAGE_STREAM_UNORDERED, &e));
    REQUIRE(e->dl_tensor.device.device_type == kDLCUDA);
    return std::make_pair(static_cast<const void*>(e->dl_tensor.data),
                          std::function<void()>([e] { e->deleter(e); }));
  });
}

TEST_CASE("cuda: an Arrow device array is released after a held consumer's read",
          "[cuda][arrow][sync]") {
  release_while_held_consumer_reads([](Stage& s, const kstage_read_group_t& g) {
    auto schema = std::make_shared<ArrowSchema>();
    auto array = std::make_shared<ArrowDeviceArray>();
    KS_OK(kstage_group_export_arrow(s.stage, g.handle, 0, schema.get(), array.get()));
    REQUIRE(array->device_type == ARROW_DEVICE_CUDA);
    REQUIRE(array->array.n_buffers == 2);
    return std::make_pair(array->array.buffers[1], std::function<void()>([schema, array] {
                            schema->release(schema.get());
                            array->array.release(&array->array);
                          }));
  });
}
