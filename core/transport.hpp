// SPDX-License-Identifier: Apache-2.0
// Write transport: turns one kstage_write_data_t into validated, staged rows.
//
// Staging runs on the backend that can read the source (the column's when
// it can; else the source's own, then one transfer of the staged rows to the
// column's device). That backend's work is first ordered after the
// producer's device_sync.
//
// Everything the seed requires of a write is checked here, before the stage
// is touched: tensors vs managed tensors, tensor count for the kind, dtype
// and semantic against the column, count / index_map / mask consistency and
// bounds. The data is then copied ("staged") into a compact buffer on the
// column's residency, in logical order, so the caller's tensors are free as
// soon as the op completes and sealing is a single scatter (or no copy).
//
// stage_write runs as named phases (core/transport.cpp: decode the selection and the tensors,
// resolve residency, check rows, order the producer, move rows); the selection's decoding,
// checks and conversions are core/write_selection.hpp.
#pragma once

#include "core/column.hpp"
#include "core/managed_tensors.hpp"

#include <string>

namespace kstage::core {

struct WriteRequest {
  const kstage_write_data_t* data = nullptr;
  std::string attribute_name;  // for messages
  // The query's prims; the write addresses prims[0, count).
  PrimList prims;
  // The attribute's columns (schema, backend) when the call began: the write goes to the one its
  // schema keeps (keeps_schema), else makes a new column.
  std::vector<std::pair<Schema, Backend*>> existing;
  // Where a new column lives: the write's residency, else the stage's
  // config.residency; {0, 0}: where the data lives.
  DLDevice residency{};
  // The call's managed tensors: a dense fixed-size one may be adopted as the
  // staged buffer instead of copied (null: never adopt).
  ManagedTensors* managed = nullptr;
};

struct StagedWrite {
  Schema schema;               // the column's: as declared, with a NONE semantic kept's column's
  Backend* backend = nullptr;  // the column's residency
  StagedRows rows;
  // Host memory a copy to the column's device still reads: keep it until
  // the write's op completes.
  BufferPtr keep;
};

Result<StagedWrite> stage_write(const WriteRequest& request, BackendSet& backends);

// The DLTensors of a write's data, whichever array holds them (client, managed or legacy
// managed): an index into it, not a list of pointers (a ragged write has one per row).
struct WriteTensors {
  const kstage_write_data_t* d = nullptr;
  size_t n = 0;
  size_t size() const { return n; }
  const DLTensor* operator[](size_t i) const {
    return d->tensors           ? &d->tensors[i]
           : d->managed_tensors ? &d->managed_tensors[i]->dl_tensor
                                : &d->legacy_managed_tensors[i]->dl_tensor;
  }
};

// The tensors of a write's data, or an error naming the bad entry.
Result<WriteTensors> write_tensors(const kstage_write_data_t& data, const char* attr);

// Tensor i of a write's data as messages name it: "tensors[0]", "managed_tensors[2]".
std::string tensor_name(const kstage_write_data_t& data, size_t i);

}  // namespace kstage::core
