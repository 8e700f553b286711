// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/kstage.hpp
 * \brief The kstage C++ API: RAII handles over the C API, and Kokkos Views in
 * and out.
 *
 * Header-only, over the C API (`kstage.h`) alone: it works with any build of
 * libkstage and adds no semantics. Every rule of kstage.h holds as written
 * there; this header only spares C++ code the descriptors, the release calls
 * and the DLTensor bookkeeping. Views go in and out through the DLPack bridge
 * (`dlpack.hpp`), so link `kstage::kokkos_bridge`.
 *
 * Handles. `Stage`, `PathList`, `Query`, `Read`, `ReadGroup`, `Map`, `Op` own
 * one C handle each and release it exactly once, in their destructor (or
 * `reset()`); they are move-only, and a moved-from object is empty (`!obj`).
 * Releasing after the stage was destroyed is harmless (the C call reports a
 * stale handle, which the destructor ignores). `MapGroup` owns nothing: its
 * memory belongs to its `Map`. `Stage::borrow` and `Query::borrow` wrap
 * handles that C code owns, for codes that mix the two; they release nothing.
 *
 * Errors, two ways (as std::filesystem does it):
 * - every call has an overload taking a trailing `kstage::Status&`: it never
 *   throws (a failure leaves the status code and `kstage_last_error()` in the
 *   Status and returns an empty object; a success resets it to OK), for code
 *   built with -fno-exceptions;
 * - the overloads without it throw `kstage::Error` (status + message) and are
 *   declared only when exceptions are enabled. Iterating a Read or a Map with
 *   range-for is of this kind; `next(group, status)` is the other.
 *
 * Views. `write` takes any Kokkos View of rank 1-3 in any enabled memory space
 * (LayoutRight, LayoutLeft or LayoutStride): its trailing extents fold into
 * lanes as kstage.h says, so a `View<float*[3]>` of N rows writes a float32 x
 * 3 column. `ReadGroup::view<const float*[3]>(i)` returns an unmanaged View of
 * the group's tensor in the memory space asked for (default Kokkos::HostSpace):
 * a value type, rank, fixed extent, layout or memory space that does not fit
 * the tensor is an error naming both, never a copy. The View aliases the group's
 * memory (the column's storage for a zero-copy read): keep the group alive
 * while it is used.
 *
 * The API is written in parts, one header each under kstage/hpp/ (status.hpp: errors;
 * span.hpp: spans; options.hpp: dtype_of, options, path ranges and filters; handles.hpp:
 * PathList, Query, Op; read.hpp: Read, ReadGroup; map.hpp: Map, MapGroup; write.hpp:
 * WriteBatch; scene.hpp: Hierarchy, FilterEx; stage.hpp: Stage, build_info; log.hpp:
 * set_log_callback, flush_log, log_message). Include this header, which includes them all.
 */
#ifndef KSTAGE_KSTAGE_HPP_
#define KSTAGE_KSTAGE_HPP_

#include <kstage/dlpack.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <kstage/hpp/handles.hpp>
#include <kstage/hpp/log.hpp>
#include <kstage/hpp/map.hpp>
#include <kstage/hpp/options.hpp>
#include <kstage/hpp/read.hpp>
#include <kstage/hpp/scene.hpp>
#include <kstage/hpp/span.hpp>
#include <kstage/hpp/stage.hpp>
#include <kstage/hpp/status.hpp>
#include <kstage/hpp/write.hpp>

#endif  // KSTAGE_KSTAGE_HPP_
