// SPDX-License-Identifier: Apache-2.0
#include "core/group_export.hpp"

#include "core/backend.hpp"

namespace kstage::core {
namespace {

// What one export owns: the snapshot buffer and the shape/strides arrays.
struct ExportContext {
  BufferPtr buffer;
  std::shared_ptr<const std::vector<uint32_t>> host_index;  // an exported host index map
  int64_t shape[2];
  int64_t strides[2];
  std::shared_ptr<const StreamRelease> after;  // releases after the consumer's stream, when set
  uintptr_t after_stream = 0;

  // A buffer is released only while Kokkos runs; after Kokkos::finalize it must
  // not be released any more, so a late deleter frees only the context's
  // storage (no destructors run) and leaks the buffer on purpose.
  static void release(ExportContext* ctx) {
    if (kokkos_is_running()) {
      if (ctx->after) ctx->after->release_after(std::move(ctx->buffer), ctx->after_stream);
      delete ctx;
    } else {
      ::operator delete(static_cast<void*>(ctx));
    }
  }
};

Status check(const ExportSource& g, uint64_t index, uint64_t flags) {
  const uint64_t known = KSTAGE_EXPORT_READ_ONLY | KSTAGE_EXPORT_CONSUMER_READS_ONLY;
  if (flags & ~known)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "flags 0x%llx has unknown bits (only KSTAGE_EXPORT_READ_ONLY and "
                 "KSTAGE_EXPORT_CONSUMER_READS_ONLY)",
                 (unsigned long long)flags);
  if (g.is_delete)
    return error(KSTAGE_INVALID_ARGUMENT, "a tombstone group has no tensors to export");
  if (index >= g.tensors->size())
    return error(KSTAGE_INVALID_ARGUMENT,
                 "tensor index %llu is out of range: the group has %zu tensor(s)",
                 (unsigned long long)index, g.tensors->size());
  return Status::OK();
}

// Fills `out` from the group's canonical tensor, with lanes as a trailing axis.
std::unique_ptr<ExportContext> fill(const ExportSource& g, uint64_t index, DLTensor& out) {
  const DLTensor& t = (*g.tensors)[index];
  auto ctx = std::make_unique<ExportContext>();
  ctx->buffer = g.buffer;
  ctx->after = g.release;
  ctx->after_stream = g.release_stream;
  const int64_t rows = t.shape[0];
  const int64_t lanes = t.dtype.lanes;
  out = t;
  out.dtype.lanes = 1;
  ctx->shape[0] = rows;
  if (lanes > 1) {
    out.ndim = 2;
    ctx->shape[1] = lanes;
    ctx->strides[0] = lanes;
    ctx->strides[1] = 1;
  } else {
    out.ndim = 1;
    ctx->strides[0] = 1;
  }
  out.shape = ctx->shape;
  out.strides = ctx->strides;
  if (rows == 0) out.data = nullptr;
  return ctx;
}

}  // namespace

ExportSource export_source(const ReadGroup& g) {
  ExportSource s;
  s.tensors = &g.tensors;
  s.buffer = g.pinned;
  s.shares_storage = !g.owns_buffer;
  s.is_delete = g.desc.is_delete;
  return s;
}

Result<DLManagedTensorVersioned*> export_group_versioned(const ExportSource& g, uint64_t index,
                                                         uint64_t flags) {
  KSTAGE_RETURN_NOT_OK(check(g, index, flags));
  if (flags & KSTAGE_EXPORT_CONSUMER_READS_ONLY)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "KSTAGE_EXPORT_CONSUMER_READS_ONLY is for kstage_group_export_legacy; a versioned "
                 "export says read-only itself (KSTAGE_EXPORT_READ_ONLY)");
  auto out = std::make_unique<DLManagedTensorVersioned>();
  auto ctx = fill(g, index, out->dl_tensor);
  out->version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  // A zero-copy group is the column's storage: never writable by a consumer.
  const bool read_only = g.shares_storage || (flags & KSTAGE_EXPORT_READ_ONLY);
  out->flags = read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  out->manager_ctx = ctx.release();
  out->deleter = [](DLManagedTensorVersioned* self) {
    ExportContext::release(static_cast<ExportContext*>(self->manager_ctx));
    delete self;
  };
  return out.release();
}

Result<DLManagedTensor*> export_group_legacy(const ExportSource& g, uint64_t index,
                                             uint64_t flags) {
  KSTAGE_RETURN_NOT_OK(check(g, index, flags));
  // A legacy DLManagedTensor cannot say read-only: only the caller's promise
  // that its consumer never writes lets read-only memory out that way.
  const bool promised = (flags & KSTAGE_EXPORT_CONSUMER_READS_ONLY) != 0;
  if (g.shares_storage && !promised)
    return error(KSTAGE_NOT_SUPPORTED,
                 "this group shares the column's storage (zero-copy read), so it exports only "
                 "read-only, which a legacy DLManagedTensor cannot signal; use "
                 "kstage_group_export, read with compact = true, or pass "
                 "KSTAGE_EXPORT_CONSUMER_READS_ONLY for a consumer that never writes");
  if ((flags & KSTAGE_EXPORT_READ_ONLY) && !promised)
    return error(KSTAGE_NOT_SUPPORTED,
                 "KSTAGE_EXPORT_READ_ONLY needs kstage_group_export (a legacy DLManagedTensor "
                 "cannot signal read-only), or KSTAGE_EXPORT_CONSUMER_READS_ONLY with it");
  auto out = std::make_unique<DLManagedTensor>();
  auto ctx = fill(g, index, out->dl_tensor);
  out->manager_ctx = ctx.release();
  out->deleter = [](DLManagedTensor* self) {
    ExportContext::release(static_cast<ExportContext*>(self->manager_ctx));
    delete self;
  };
  return out.release();
}

Result<DLManagedTensorVersioned*> export_index_map(const ReadGroup& g, const ExportSource& group) {
  if (g.desc.is_delete)
    return error(KSTAGE_INVALID_ARGUMENT, "a tombstone group has no index_map to export");
  if (g.desc.data.index_map == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "the group has no index_map: its tensor's rows are its prims, in order");
  auto out = std::make_unique<DLManagedTensorVersioned>();
  auto ctx = std::make_unique<ExportContext>();
  if (g.device_index) {
    ctx->buffer = g.device_index;
    ctx->after = group.release;
    ctx->after_stream = group.release_stream;
  } else {
    ctx->host_index = g.index_map;
  }
  ctx->shape[0] = int64_t(g.desc.prim_count);
  ctx->strides[0] = 1;
  DLTensor& t = out->dl_tensor;
  t.data = g.desc.prim_count > 0 ? const_cast<uint32_t*>(g.desc.data.index_map) : nullptr;
  t.device = g.device_index ? g.tensors[0].device : DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLUInt, 32, 1};
  t.shape = ctx->shape;
  t.strides = ctx->strides;
  t.byte_offset = 0;
  out->version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  out->flags = DLPACK_FLAG_BITMASK_READ_ONLY;  // the column's row map, shared
  out->manager_ctx = ctx.release();
  out->deleter = [](DLManagedTensorVersioned* self) {
    ExportContext::release(static_cast<ExportContext*>(self->manager_ctx));
    delete self;
  };
  return out.release();
}

}  // namespace kstage::core
