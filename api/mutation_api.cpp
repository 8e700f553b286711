// SPDX-License-Identifier: Apache-2.0
// Writes, deletes, write floors and ops.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"
#include "core/managed_tensors.hpp"

using namespace kstage;
using namespace kstage::capi;

namespace {

kstage_status_t write(const char* region, kstage_stage_t stage, kstage_query_t query,
                      const kstage_token_t* attributes, const kstage_write_data_t* data, uint64_t n,
                      uint64_t ordinal, kstage_prim_mode_t prim_mode, kstage_op_t* op) {
  core::ProfilingRegion scope(region);  // the managed tensors' intake included
  // Owns the managed tensors from the first instruction: whatever is
  // rejected below (a bad descriptor layout included), each deleter still
  // runs exactly once.
  std::vector<kstage_write_data_t> descs;
  Status layout;
  std::shared_ptr<core::ManagedTensors> managed;  // (shared now: deferring it cannot fail later)
  try {
    layout = read_write_descriptors(data, n, descs);
    managed = std::make_shared<core::ManagedTensors>(descs.data(), descs.size());
  } catch (...) {
    return fail(KSTAGE_OUT_OF_MEMORY, "out of memory taking the managed tensors");
  }
  // Not with_stage(): a bad descriptor layout is reported before a stage that is not live.
  return guard([&]() -> Status {
    KSTAGE_RETURN_NOT_OK(layout);
    KSTAGE_RETURN_NOT_OK(managed->check());
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s->queries, query, Kind::Query));
    auto slot = s->ops.reserve(Kind::Op);  // before the write: nothing after it can fail
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, s->engine->write(prims, attributes, data ? descs.data() : nullptr, n,
                                                ordinal, prim_mode, managed.get()));
    // Tensors the stage did not adopt are released once the device has
    // copied them (at once for host work).
    if (!o->done()) s->engine->defer(o->work, std::move(managed));
    *op = slot.fill(std::move(o));
    return Status::OK();
  });
}

}  // namespace

extern "C" {

kstage_status_t kstage_write_attribute(kstage_stage_t stage, kstage_query_t query,
                                       kstage_token_t attribute, uint64_t ordinal,
                                       const kstage_write_data_t* data,
                                       kstage_prim_mode_t prim_mode, kstage_op_t* op) {
  return write("kstage::write_attribute", stage, query, &attribute, data, 1, ordinal, prim_mode,
               op);
}

kstage_status_t kstage_write_attributes(kstage_stage_t stage, kstage_query_t query,
                                        const kstage_token_t* attributes,
                                        const kstage_write_data_t* data, uint64_t n,
                                        uint64_t ordinal, kstage_prim_mode_t prim_mode,
                                        kstage_op_t* op) {
  return write("kstage::write_attributes", stage, query, attributes, data, n, ordinal, prim_mode,
               op);
}

kstage_status_t kstage_delete_attributes(kstage_stage_t stage, kstage_query_t query,
                                         const kstage_token_t* attributes, uint64_t n,
                                         uint64_t ordinal, kstage_op_t* op) {
  return with_stage("kstage::delete_attributes", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s.queries, query, Kind::Query));
    auto slot = s.ops.reserve(Kind::Op);  // before the delete: nothing after it can fail
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, s.engine->remove(prims, attributes, n, ordinal));
    *op = slot.fill(std::move(o));
    return Status::OK();
  });
}

kstage_status_t kstage_advance_write_floor(kstage_stage_t stage, uint64_t ordinal,
                                           const kstage_token_t* attributes, uint64_t n) {
  return with_stage("kstage::advance_write_floor", stage, [&](StageEntry& s) -> Status {
    return s.engine->advance_write_floor(ordinal, attributes, n);
  });
}

kstage_status_t kstage_get_write_floor(kstage_stage_t stage, kstage_token_t attribute,
                                       uint64_t* ordinal) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(ordinal, "ordinal"));
    KSTAGE_ASSIGN_OR_RETURN(*ordinal, s.engine->write_floor(attribute));
    return Status::OK();
  });
}

kstage_status_t kstage_wait(kstage_stage_t stage, kstage_op_t op, uint64_t timeout_ns) {
  return with_stage("kstage::wait", stage, [&](StageEntry& s) -> Status {
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, lookup(s.ops, op, Kind::Op));
    // The lookup's reference keeps the op (and its completions) alive even
    // if another thread releases the handle meanwhile.
    if (!o->wait(timeout_ns))
      return error(KSTAGE_TIMEOUT, "op %llu: its device work is still running after %llu ns",
                   (unsigned long long)op, (unsigned long long)timeout_ns);
    s.engine->reap_deferred();  // what the op's work read is released now
    return o->outcome();
  });
}

kstage_status_t kstage_op_sync(kstage_stage_t stage, kstage_op_t op,
                               kstage_device_sync_t consumer) {
  return with_stage("kstage::op_sync", stage, [&](StageEntry& s) -> Status {
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, lookup(s.ops, op, Kind::Op));
    return s.engine->sync_op(*o, consumer);
  });
}

kstage_status_t kstage_op_error(kstage_stage_t stage, kstage_op_t op, const char** message) {
  return with_stage(stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(message, "message"));
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, lookup(s.ops, op, Kind::Op));
    // The device's failure once the work is known to have failed (kept by the op).
    if (o->status == KSTAGE_OK && o->done()) {
      const Status st = o->outcome();
      if (!st.ok()) {
        *message = st.message().c_str();  // the op keeps `st`'s state
        return Status::OK();
      }
    }
    *message = o->message.c_str();
    return Status::OK();
  });
}

kstage_status_t kstage_release_op(kstage_stage_t stage, kstage_op_t op) {
  return with_stage(stage, [&](StageEntry& s) -> Status { return release(s.ops, op, Kind::Op); });
}

}  // extern "C"
