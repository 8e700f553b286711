// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/adios2.hpp
 * \brief The C++ form of the ADIOS2 bridge's checkpoints (kstage/kstage_adios2.h): checkpoint,
 * restart (with its manifest policy), and the durable pointer procedure.
 *
 * Not part of kstage.hpp (the bridge is its own library): include it and link kstage::adios2.
 * Header-only over the C calls; every rule of kstage_adios2.h holds as written there. Errors,
 * as kstage.hpp's: a `kstage::Status&` overload that never throws, and a throwing one (declared
 * with exceptions) -- each with kstage_adios2_last_error()'s message.
 */
#ifndef KSTAGE_HPP_ADIOS2_HPP_
#define KSTAGE_HPP_ADIOS2_HPP_

#include <kstage/hpp/status.hpp>
#include <kstage/kstage_adios2.h>

#include <cstdint>
#include <string>

namespace kstage {
/// \brief The ADIOS2 bridge's checkpoints in C++ (kstage/kstage_adios2.h).
namespace adios2 {

/// Whether a restart checks the folder's manifest (kstage_adios2_manifest_t).
enum class Manifest : kstage_adios2_manifest_t {
  Default = KSTAGE_ADIOS2_MANIFEST_DEFAULT,       ///< checked where present, a warning where not
  IfPresent = KSTAGE_ADIOS2_MANIFEST_IF_PRESENT,  ///< checked where present, silently
  Required = KSTAGE_ADIOS2_MANIFEST_REQUIRED      ///< verified restarts only
};

namespace detail {
inline bool check(kstage_status_t code, Status& st) {
  if (code == KSTAGE_OK) {
    if (!st.ok()) st = Status();
    return true;
  }
  st = Status(code, kstage_adios2_last_error());
  return false;
}
}  // namespace detail

/// A checkpoint of every attribute of every prim, flushed and sealed (kstage_adios2_checkpoint).
inline void checkpoint(kstage_stage_t stage, const std::string& path, Status& st) {
  detail::check(kstage_adios2_checkpoint(stage, path.c_str()), st);
}
/// A restart from the BP5 folder at `path`, its manifest checked as `manifest` says
/// (kstage_adios2_restart_ex); the last step's ordinal (0 on failure).
inline uint64_t restart(kstage_stage_t stage, const std::string& path, Manifest manifest,
                        Status& st) {
  kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
  d.manifest = static_cast<kstage_adios2_manifest_t>(manifest);
  uint64_t ordinal = 0;
  return detail::check(kstage_adios2_restart_ex(stage, path.c_str(), &d, &ordinal), st) ? ordinal
                                                                                        : 0;
}
/// A checkpoint made the latest, durably (kstage_adios2_checkpoint_latest).
inline void checkpoint_latest(kstage_stage_t stage, const std::string& pointer, Status& st) {
  detail::check(kstage_adios2_checkpoint_latest(stage, pointer.c_str()), st);
}
/// A restart from the checkpoint `pointer` names, verified (kstage_adios2_restart_latest); its
/// ordinal (0 on failure).
inline uint64_t restart_latest(kstage_stage_t stage, const std::string& pointer, Status& st) {
  uint64_t ordinal = 0;
  return detail::check(kstage_adios2_restart_latest(stage, pointer.c_str(), &ordinal), st) ? ordinal
                                                                                           : 0;
}

#if KSTAGE_CPP_EXCEPTIONS
/// As checkpoint(kstage_stage_t, const std::string&, Status&), throwing kstage::Error.
inline void checkpoint(kstage_stage_t stage, const std::string& path) {
  Status st;
  checkpoint(stage, path, st);
  kstage::detail::raise_if(st);
}
/// As restart(kstage_stage_t, const std::string&, Manifest, Status&), throwing kstage::Error.
inline uint64_t restart(kstage_stage_t stage, const std::string& path,
                        Manifest manifest = Manifest::Default) {
  Status st;
  const uint64_t ordinal = restart(stage, path, manifest, st);
  kstage::detail::raise_if(st);
  return ordinal;
}
/// As checkpoint_latest(kstage_stage_t, const std::string&, Status&), throwing kstage::Error.
inline void checkpoint_latest(kstage_stage_t stage, const std::string& pointer) {
  Status st;
  checkpoint_latest(stage, pointer, st);
  kstage::detail::raise_if(st);
}
/// As restart_latest(kstage_stage_t, const std::string&, Status&), throwing kstage::Error.
inline uint64_t restart_latest(kstage_stage_t stage, const std::string& pointer) {
  Status st;
  const uint64_t ordinal = restart_latest(stage, pointer, st);
  kstage::detail::raise_if(st);
  return ordinal;
}
#endif

}  // namespace adios2
}  // namespace kstage

#endif  // KSTAGE_HPP_ADIOS2_HPP_
