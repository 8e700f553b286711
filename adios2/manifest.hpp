// SPDX-License-Identifier: Apache-2.0
// The manifest that seals a BP5 folder the bridge wrote (docs/adios2.md, "The manifest"): every
// file of the folder with its size and XXH3-64, the steps, the kstage and ADIOS2 versions, and a
// last line that is the XXH3-64 of all the lines before it. It is written last, atomically and
// durably, after the folder's files are flushed; a restart checks it before ADIOS2 opens
// anything, so that ADIOS2 -- whose BP5 reader crashes or waits forever on some damaged files
// and keeps no checksums -- is only ever handed a folder whose every byte is the one written.
#pragma once

#include <kstage/kstage_adios2.h>

#include <cstdint>
#include <map>
#include <string>

namespace kstage::adios2_bridge {

inline constexpr const char* kManifestName = "kstage.manifest";

// What the manifest records about a folder's steps.
struct SealFacts {
  uint64_t steps = 0;
  uint64_t last_ordinal = 0;
};

// Flushes every file of `folder` and the folder itself, then writes its manifest (atomically,
// durably). OP_FAILED naming the file that cannot be read, flushed or written.
void seal_folder(const std::string& folder, const SealFacts& facts);

// Checks the folder at `path` against its manifest before ADIOS2 opens it. With a manifest:
// OP_FAILED naming the file and what differs (missing, not in the manifest, its size, its
// checksum, a damaged manifest). Without one: `policy` REQUIRED is INVALID_ARGUMENT; otherwise a
// WARNING on the "adios2" log channel (`what` names the call) when `warn_if_absent`, and false.
// True when the manifest was there and every file matched.
// `sizes` (may be NULL) receives each file's size, by name, when the manifest matched.
bool verify_folder(const std::string& path, kstage_adios2_manifest_t policy, bool warn_if_absent,
                   const char* what, std::map<std::string, uint64_t>* sizes = nullptr);

// Before a step of a checked folder is read: every file still at least its size when checked
// (ADIOS2's read of a block past a file's end waits forever). OP_FAILED naming the file.
void check_extents(const std::string& folder, const std::map<std::string, uint64_t>& sizes,
                   const char* what);

}  // namespace kstage::adios2_bridge
