// SPDX-License-Identifier: Apache-2.0
// The one way a C entry point runs: the body returns a kstage::Status; the
// guard records a failure's message as the thread's last error and turns any
// exception into a status, so nothing ever crosses the C ABI.
#pragma once

#include "api/handles.hpp"
#include "core/profiling_region.hpp"
#include "core/status.hpp"

#include <utility>

namespace kstage::capi {

// Records `message` + `detail` as the thread's last error (empty when there is no memory for
// it) and returns `code`. Never throws: it runs in the handlers of out-of-memory failures,
// where building a std::string for it could throw again.
kstage_status_t fail(kstage_status_t code, const char* message, const char* detail = "") noexcept;
inline kstage_status_t fail(kstage_status_t code, const std::string& message) noexcept {
  return fail(code, message.c_str());
}

template <class Body>
kstage_status_t guard(Body&& body) noexcept {
  try {
    Status st = body();
    return st.ok() ? KSTAGE_OK : fail(st.code(), st.message());
  } catch (const DeviceFault& e) {
    return fail(KSTAGE_DEVICE_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return fail(KSTAGE_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(KSTAGE_INTERNAL, "internal error: ", e.what());
  } catch (...) {
    return fail(KSTAGE_INTERNAL, "internal error: unknown exception");
  }
}

// guard() inside the Kokkos Tools region `region` ("kstage::<operation>",
// core/profiling_region.hpp): the entry points that do work.
template <class Body>
kstage_status_t guard(const char* region, Body&& body) noexcept {
  core::ProfilingRegion scope(region);
  return guard(std::forward<Body>(body));
}

// How the entry points that name a stage open: guard() (inside `region` for the calls that do
// work), then the stage's lookup -- the call's first check, so a stage that is not live is
// reported before anything else -- then `body(StageEntry&)`. (The writes alone judge their
// descriptors first: mutation_api.cpp.) The lookup's reference keeps the stage and the handles
// it issued alive while the body runs, even if another thread destroys the stage meanwhile.
template <class Body>
kstage_status_t with_stage(kstage_stage_t stage, Body&& body) noexcept {
  return guard([&]() -> Status {
    std::shared_ptr<StageEntry> s;
    KSTAGE_ASSIGN_OR_RETURN(s, find_stage(stage));
    return body(*s);
  });
}
template <class Body>
kstage_status_t with_stage(const char* region, kstage_stage_t stage, Body&& body) noexcept {
  core::ProfilingRegion scope(region);
  return with_stage(stage, std::forward<Body>(body));
}

// Out-parameter check shared by every entry point.
inline Status need(const void* p, const char* name) {
  if (p == nullptr) return error(KSTAGE_INVALID_ARGUMENT, "%s is NULL", name);
  return Status::OK();
}

}  // namespace kstage::capi
