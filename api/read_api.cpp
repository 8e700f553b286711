// SPDX-License-Identifier: Apache-2.0
// Reads and read groups. The read session is the engine's (core/read_session.hpp); these calls
// name reads and their groups and copy descriptors out.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"

using namespace kstage;
using namespace kstage::capi;

extern "C" {

kstage_status_t kstage_read_attributes(kstage_stage_t stage, kstage_query_t query,
                                       const kstage_token_t* attributes, uint64_t n,
                                       const kstage_read_desc_t* desc, kstage_read_t* read) {
  return with_stage("kstage::read_attributes", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(read, "read"));
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s.queries, query, Kind::Query));
    kstage_read_desc_t d = kstage_read_desc_init();  // NULL: the latest values
    if (desc) {
      KSTAGE_ASSIGN_OR_RETURN(d, read_descriptor(desc, "desc"));
    }
    std::shared_ptr<core::ReadSession> r;
    KSTAGE_ASSIGN_OR_RETURN(r, s.engine->open_read(prims, attributes, n, d));
    *read = s.reads.add(Kind::Read, std::move(r));
    return Status::OK();
  });
}

kstage_status_t kstage_fetch_read_next(kstage_stage_t stage, kstage_read_t read,
                                       uint64_t timeout_ns, kstage_read_group_t* group) {
  (void)timeout_ns;  // never waits: the groups are built when the read opens
  return with_stage("kstage::fetch_read_next", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(group, "group"));
    std::shared_ptr<core::ReadSession> r;
    KSTAGE_ASSIGN_OR_RETURN(r, lookup(s.reads, read, Kind::Read));
    std::shared_ptr<core::ReadGroup> g = r->next();
    if (!g)
      return error(KSTAGE_END_OF_ITERATION, "read %llu has no more groups",
                   (unsigned long long)read);
    g->desc.handle = s.groups.add(Kind::Group, g);
    *group = g->desc;
    return Status::OK();
  });
}

kstage_status_t kstage_release_group(kstage_stage_t stage, kstage_group_t group) {
  return with_stage(stage,
                    [&](StageEntry& s) -> Status { return release(s.groups, group, Kind::Group); });
}

kstage_status_t kstage_group_prim_progression(kstage_stage_t stage, kstage_group_t group,
                                              uint64_t* first, uint64_t* stride) {
  return with_stage("kstage::group_prim_progression", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(first, "first"));
    KSTAGE_RETURN_NOT_OK(need(stride, "stride"));
    std::shared_ptr<core::ReadGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(g, lookup(s.groups, group, Kind::Group));
    uint64_t f = 0, k = 0;
    if (!g->prim_progression(f, k))
      return error(KSTAGE_NOT_FOUND, "the prims of group %llu are not a progression",
                   (unsigned long long)group);
    *first = f;
    *stride = k;
    return Status::OK();
  });
}

kstage_status_t kstage_release_read(kstage_stage_t stage, kstage_read_t read) {
  return with_stage(stage,
                    [&](StageEntry& s) -> Status { return release(s.reads, read, Kind::Read); });
}

}  // extern "C"

// ---- DLPack export ------------------------------------------------------------

#include "core/group_export.hpp"

namespace {
// The export of a group (`make(group, source, index, flags)`), to a consumer's stream when
// `stream` is not 0: ordered after the group's data, released after the consumer's work (host
// groups: stream 0 only, checked by sync_consumer). KSTAGE_STREAM_UNORDERED: nothing ordered,
// a device group released after the whole device (a host group: as 0). The plain exports are
// stream 0.
template <class Export, class Out>
kstage_status_t export_on_stream(const char* region, kstage_stage_t stage, kstage_group_t group,
                                 uint64_t index, uint64_t flags, uintptr_t stream, Out** tensor,
                                 Export make) {
  return with_stage(region, stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(tensor, "tensor"));
    std::shared_ptr<core::ReadGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(g, lookup(s.groups, group, Kind::Group));
    core::ExportSource source = core::export_source(*g);
    if (stream == KSTAGE_STREAM_UNORDERED) {
      if (g->device) {
        source.release = g->device->stream_release();
        source.release_stream = stream;
      }
    } else if (stream != 0) {
      KSTAGE_RETURN_NOT_OK(s.engine->sync_consumer(*g, kstage_device_sync_t{stream, 0}));
      if (g->device) {
        source.release = g->device->stream_release();
        source.release_stream = stream;
      }
    }
    KSTAGE_ASSIGN_OR_RETURN(*tensor, make(*g, source, index, flags));
    return Status::OK();
  });
}
// A tensor export as export_on_stream's `make`.
template <class F>
auto tensor_export(F export_tensor) {
  return [export_tensor](const core::ReadGroup&, const core::ExportSource& source, uint64_t index,
                         uint64_t flags) { return export_tensor(source, index, flags); };
}
}  // namespace

extern "C" {

kstage_status_t kstage_group_export(kstage_stage_t stage, kstage_group_t group, uint64_t index,
                                    uint64_t flags, struct DLManagedTensorVersioned** tensor) {
  return export_on_stream("kstage::group_export", stage, group, index, flags, 0, tensor,
                          tensor_export(core::export_group_versioned));
}

kstage_status_t kstage_group_export_legacy(kstage_stage_t stage, kstage_group_t group,
                                           uint64_t index, uint64_t flags,
                                           DLManagedTensor** tensor) {
  return export_on_stream("kstage::group_export_legacy", stage, group, index, flags, 0, tensor,
                          tensor_export(core::export_group_legacy));
}

kstage_status_t kstage_group_export_on_stream(kstage_stage_t stage, kstage_group_t group,
                                              uint64_t index, uint64_t flags, uintptr_t stream,
                                              DLManagedTensorVersioned** tensor) {
  return export_on_stream("kstage::group_export_on_stream", stage, group, index, flags, stream,
                          tensor, tensor_export(core::export_group_versioned));
}

kstage_status_t kstage_group_export_legacy_on_stream(kstage_stage_t stage, kstage_group_t group,
                                                     uint64_t index, uint64_t flags,
                                                     uintptr_t stream, DLManagedTensor** tensor) {
  return export_on_stream("kstage::group_export_legacy_on_stream", stage, group, index, flags,
                          stream, tensor, tensor_export(core::export_group_legacy));
}

kstage_status_t kstage_group_export_index_map(kstage_stage_t stage, kstage_group_t group,
                                              uintptr_t stream, DLManagedTensorVersioned** tensor) {
  return export_on_stream("kstage::group_export_index_map", stage, group, 0, 0, stream, tensor,
                          [](const core::ReadGroup& g, const core::ExportSource& source, uint64_t,
                             uint64_t) { return core::export_index_map(g, source); });
}

kstage_status_t kstage_group_sync(kstage_stage_t stage, kstage_group_t group,
                                  kstage_device_sync_t consumer) {
  return with_stage("kstage::group_sync", stage, [&](StageEntry& s) -> Status {
    std::shared_ptr<core::ReadGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(g, lookup(s.groups, group, Kind::Group));
    return s.engine->sync_consumer(*g, consumer);
  });
}

}  // extern "C"
