// SPDX-License-Identifier: Apache-2.0
// DLPack export of a read group's tensors. The export holds the group's
// snapshot buffer, so the data outlives kstage_release_group and any later
// seal until the consumer calls the deleter.
#pragma once

#include "core/stage.hpp"

namespace kstage::core {

// The tensors of a read or map group and the buffer they point into.
struct ExportSource {
  const std::vector<DLTensor>* tensors = nullptr;
  BufferPtr buffer;
  bool shares_storage = false;  // a zero-copy read: the column's own storage
  bool is_delete = false;       // a tombstone group (no tensors)
  // Set for an export to a consumer stream: the deleter releases `buffer` after the work
  // enqueued on `release_stream` by then (kstage_group_export_on_stream).
  std::shared_ptr<const StreamRelease> release;
  uintptr_t release_stream = 0;
};
ExportSource export_source(const ReadGroup& group);

Result<DLManagedTensorVersioned*> export_group_versioned(const ExportSource& group, uint64_t index,
                                                         uint64_t flags);
Result<DLManagedTensor*> export_group_legacy(const ExportSource& group, uint64_t index,
                                             uint64_t flags);

// The group's index map (prim i's row of its tensor) as a read-only one-dimensional uint32
// tensor of its prim count, in the memory that holds it: the group's device for a read that
// asked for device index maps of a device column (ReadGroup::device_index), else the host. It
// keeps the map alive until its deleter runs, released after `stream`'s work as `group` says
// (kstage_group_export_index_map).
Result<DLManagedTensorVersioned*> export_index_map(const ReadGroup& g, const ExportSource& group);

}  // namespace kstage::core
