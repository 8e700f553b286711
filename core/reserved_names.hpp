// SPDX-License-Identifier: Apache-2.0
// The reserved attribute names of kstage.h (those of the system kstage follows): what a write or
// map of one must be. usd-prim-type and usd-schemas are ordinary columns whose schema is fixed;
// usd-path, usd-parent and usd-children name the hierarchy itself in filters (derived from
// paths), so nobody writes them.
#pragma once

#include "core/column.hpp"

#include <string_view>

namespace kstage::core {

// OK for any name but a reserved one; for usd-prim-type / usd-schemas, INVALID_ARGUMENT naming
// the name and the schema it must have unless `s` is it; NOT_SUPPORTED for the derived names.
// The one check of writes (core/transport.cpp, where a write's schema is decided) and maps
// (Stage::open_map).
Status check_reserved_name(std::string_view name, const Schema& s);

}  // namespace kstage::core
