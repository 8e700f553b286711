// SPDX-License-Identifier: Apache-2.0
// Making files durable (docs/adios2.md, "A checkpoint that survives a crash"): a file's bytes
// and a folder's entries reach stable storage only when fsync says so; a rename is atomic but,
// until its folder is synced, may be lost by a power loss -- or kept while the renamed file's
// bytes are lost, if they were never synced. So: sync the files, then the folder, then name
// them (rename), then sync the folder again.
//
// Two test hooks, read from the environment at each call (tests/adios2: the simulated power
// loss), never set in production:
//   KSTAGE_ADIOS2_DURABILITY_LOG=<file>   each sync and rename appended to <file> as a line
//                                         ("sync <path>", "rename <from> <to>"), in order
//   KSTAGE_ADIOS2_TEST_SKIP_FSYNC=1       the syncs are skipped (what a careless writer does)
#pragma once

#include <string>
#include <vector>

namespace kstage::adios2_bridge {

// fsync of a file's bytes, or of a folder's entries: OP_FAILED naming `path` if it fails.
void sync_path(const std::string& path);
// Every regular file directly in `folder`, `folder` itself and the folder holding it (whose
// entry names it), flushed concurrently (sync_paths): complete, every one, when this returns.
void sync_folder_tree(const std::string& folder);
// fsync of each of `paths`, on up to 8 threads at once: a journaling file system commits
// concurrent flushes together (one journal commit for several files, where one after the other
// each waits for its own). Returns when every flush has ended; the first that failed is
// OP_FAILED naming its path. Nothing is ordered among them: callers flush together only what
// may reach the disk in any order (a checkpoint's files and folders, before its manifest).
void sync_paths(const std::vector<std::string>& paths);
// `path`'s content replaced by `content` atomically and durably: written to a temporary file
// beside it, synced, renamed over `path`, and the folder synced. A reader sees the old content
// or the new, never a part; after a power loss, the same.
void replace_file_durably(const std::string& path, const std::string& content);
// The folder holding `path` ("." for a bare name).
std::string parent_folder(const std::string& path);

}  // namespace kstage::adios2_bridge
