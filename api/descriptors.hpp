// SPDX-License-Identifier: Apache-2.0
// Extensible descriptors (kstage_config_t, kstage_write_data_t,
// kstage_read_desc_t, kstage_map_desc_t, kstage_filter_ex_t): the caller's struct, of the size
// its kstage.h declared, read into this library's struct. The rules are in
// kstage.h ("Versioning and compatibility"); this is the one place that
// applies them, so the engine only ever sees full, current structs.
#pragma once

#include "core/status.hpp"

#include <vector>

namespace kstage::capi {

// `what` names the argument in messages ("desc", "config").
Result<kstage_config_t> read_descriptor(const kstage_config_t* in, const char* what);
Result<kstage_read_desc_t> read_descriptor(const kstage_read_desc_t* in, const char* what);
Result<kstage_map_desc_t> read_descriptor(const kstage_map_desc_t* in, const char* what);
Result<kstage_transform_desc_t> read_descriptor(const kstage_transform_desc_t* in,
                                                const char* what);
Result<kstage_filter_ex_t> read_descriptor(const kstage_filter_ex_t* in, const char* what);

// A descriptor the library fills (kstage_attribute_info_t): exactly out->struct_size bytes,
// the released layouts they hold whole from `info`, zeros after (kstage.h's rule).
Status write_descriptor(const kstage_attribute_info_t& info, kstage_attribute_info_t* out,
                        const char* what);

// The `n` write descriptors at `in`, laid out with in[0]'s struct_size.
// `out` is filled even when the layout is rejected (with this library's
// struct size as the stride when in[0]'s is unusable), so that the caller can
// still take ownership of every managed tensor the descriptors name; the
// status says whether the layout was valid.
Status read_write_descriptors(const kstage_write_data_t* in, uint64_t n,
                              std::vector<kstage_write_data_t>& out);

}  // namespace kstage::capi
