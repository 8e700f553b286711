// SPDX-License-Identifier: Apache-2.0
// Arrow C Device Data Interface export of a read group (include/kstage/kstage_arrow.h): the
// group's column as an Arrow array -- primitive, FixedSizeList, LargeList or LargeString by its
// schema -- optionally with a "path" column, each node releasable on its own, the group's data
// kept alive until the last node is released.
#pragma once

#include "core/stage.hpp"

#include <kstage/kstage_arrow.h>

namespace kstage::core {

// What the export needs besides the group: the attribute's name (the field's), and the prims'
// path strings (KSTAGE_ARROW_PATH_STRINGS).
struct ArrowNames {
  std::string attribute;
  std::function<std::string(uint64_t)> path;
};

// Fills `schema` and `array` (only on success) from group `g`.
Status export_group_arrow(const ReadGroup& g, const ArrowNames& names, uint64_t flags,
                          ArrowSchema* schema, ArrowDeviceArray* array);

// A record batch (a struct array) of a read: row i is query prim i, one column per attribute
// (named attribute_names[k]) after an optional path column; `groups` are the read's.
Status export_read_arrow(const PrimSeq& query, const std::vector<const ReadGroup*>& groups,
                         const std::vector<uint64_t>& attributes,
                         const std::vector<std::string>& attribute_names, const ArrowNames& names,
                         uint64_t flags, ArrowSchema* schema, ArrowDeviceArray* array);

}  // namespace kstage::core
