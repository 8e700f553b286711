// SPDX-License-Identifier: Apache-2.0
// Writing and checking a BP5 folder's manifest (manifest.hpp; the format in docs/adios2.md).
#include "adios2/manifest.hpp"

#include "adios2/bridge.hpp"
#include "adios2/checksum.hpp"
#include "adios2/durable.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <future>
#include <map>
#include <sstream>

namespace kstage::adios2_bridge {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMagic = "kstage-manifest 1";
// A manifest is a few lines a file: one larger than this is not one (a damaged or foreign file
// is not read whole into memory).
constexpr uint64_t kMaxManifestBytes = 16u << 20;

struct FileEntry {
  uint64_t size = 0;
  uint64_t checksum = 0;
};

// The size and XXH3-64 of a file, read in large blocks (the checksum runs at memory speed: the
// read is what costs).
FileEntry digest(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(KSTAGE_OP_FAILED, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::vector<unsigned char> buffer(size_t(4) << 20);
  FileEntry e;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(KSTAGE_OP_FAILED, "cannot read '%s': %s", path.c_str(), std::strerror(errno));
    if (n == 0) break;
    XXH3_64bits_update(&state, buffer.data(), size_t(n));
    e.size += uint64_t(n);
  }
  e.checksum = XXH3_64bits_digest(&state);
  return e;
}

// The folder's entries (not the manifest, nor a manifest being written), by name: its regular
// files, and -- `everything` -- whatever else is in it (a restart refuses what the manifest does
// not list; a seal lists regular files only).
std::map<std::string, std::string> files_of(const std::string& folder, bool everything = false) {
  std::map<std::string, std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kManifestName, 0) == 0) continue;
    std::error_code type_ec;
    if (!everything && !entry.is_regular_file(type_ec)) continue;
    files[name] = entry.path().string();
  }
  if (ec) fail(KSTAGE_OP_FAILED, "cannot list '%s': %s", folder.c_str(), ec.message().c_str());
  return files;
}

std::string read_small_file(const std::string& path, const std::string& folder) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec)
    fail(KSTAGE_OP_FAILED, "cannot read the manifest of '%s': %s", folder.c_str(),
         ec.message().c_str());
  if (size > kMaxManifestBytes)
    fail(KSTAGE_OP_FAILED, "the manifest of '%s' is %llu bytes, not a kstage manifest",
         folder.c_str(), (unsigned long long)size);
  std::string text(size, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(KSTAGE_OP_FAILED, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, &text[done], text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

bool parse_hex64(const std::string& text, uint64_t& value) {
  if (text.size() != 16) return false;
  value = 0;
  for (char c : text) {
    int d = 0;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    value = value << 4 | uint64_t(d);
  }
  return true;
}

}  // namespace

void seal_folder(const std::string& folder, const SealFacts& facts) {
  const std::map<std::string, std::string> files = files_of(folder);
  // The files' bytes and the folder's entries first: the manifest must never name bytes that a
  // power loss could still take away. The checksums are read from the page cache meanwhile, on
  // another thread (the flush waits for the disk; the hash for memory): the seal costs about
  // the flush alone.
  std::future<std::vector<FileEntry>> digests = std::async(std::launch::async, [&files] {
    std::vector<FileEntry> out;
    out.reserve(files.size());
    for (const auto& entry : files) out.push_back(digest(entry.second));
    return out;
  });
  try {
    sync_folder_tree(folder);
  } catch (...) {
    try {
      digests.get();
    } catch (...) {
    }
    throw;
  }
  const std::vector<FileEntry> entries = digests.get();
  std::ostringstream text;
  text << kMagic << '\n'
       << "kstage " << KSTAGE_VERSION_MAJOR << '.' << KSTAGE_VERSION_MINOR << '.'
       << KSTAGE_VERSION_PATCH << '\n'
       << "adios2 " << ADIOS2_VERSION_STR << '\n'
       << "engine BP5\n"
       << "steps " << facts.steps << '\n'
       << "last_ordinal " << facts.last_ordinal << '\n';
  size_t i = 0;
  for (const auto& entry : files) {
    const FileEntry& e = entries[i++];
    text << "file " << e.size << ' ' << hex64(e.checksum) << ' ' << entry.first << '\n';
  }
  std::string body = text.str();
  body += "seal " + hex64(xxh3(body.data(), body.size())) + "\n";
  replace_file_durably((fs::path(folder) / kManifestName).string(), body);
}

void check_extents(const std::string& folder, const std::map<std::string, uint64_t>& sizes,
                   const char* what) {
  for (const auto& [name, size] : sizes) {
    const std::string file = (fs::path(folder) / name).string();
    std::error_code ec;
    const uint64_t now = fs::file_size(file, ec);
    if (ec || now < size)
      fail(KSTAGE_OP_FAILED,
           "%s: '%s' is %s, %llu bytes when its manifest was checked: cut since, refused before "
           "ADIOS2 reads past its end",
           what, file.c_str(), ec ? "gone" : (std::to_string(now) + " bytes now").c_str(),
           (unsigned long long)size);
  }
}

bool verify_folder(const std::string& path, kstage_adios2_manifest_t policy, bool warn_if_absent,
                   const char* what, std::map<std::string, uint64_t>* sizes) {
  std::error_code ec;
  const std::string manifest = (fs::path(path) / kManifestName).string();
  if (!fs::is_regular_file(manifest, ec)) {
    if (policy == KSTAGE_ADIOS2_MANIFEST_REQUIRED)
      fail(KSTAGE_INVALID_ARGUMENT,
           "%s: '%s' has no manifest (%s): not a sealed kstage checkpoint, and the caller asked "
           "for verified restarts only",
           what, path.c_str(), kManifestName);
    if (warn_if_absent && fs::exists(path, ec))
      note(KSTAGE_LOG_WARNING,
           "%s: '%s' has no manifest (%s; a file written before kstage 0.4's manifests, or not by "
           "kstage): read as it is, unchecked",
           what, path.c_str(), kManifestName);
    return false;
  }
  const std::string text = read_small_file(manifest, path);
  // The seal: the last line, the XXH3-64 of every byte before it.
  const size_t seal_at = text.rfind("seal ");
  uint64_t seal = 0;
  if (seal_at == std::string::npos || (seal_at != 0 && text[seal_at - 1] != '\n') ||
      text.size() != seal_at + 5 + 16 + 1 || text.back() != '\n' ||
      !parse_hex64(text.substr(seal_at + 5, 16), seal) || xxh3(text.data(), seal_at) != seal ||
      text.rfind(kMagic, 0) != 0)
    fail(KSTAGE_OP_FAILED,
         "%s: the manifest of '%s' is damaged (its seal does not match its content): the "
         "checkpoint cannot be trusted",
         what, path.c_str());
  std::map<std::string, FileEntry> listed;
  std::istringstream lines(text.substr(0, seal_at));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("file ", 0) != 0) continue;
    std::istringstream fields(line.substr(5));
    FileEntry e;
    std::string checksum, name;
    const bool numbers = static_cast<bool>(fields >> e.size >> checksum);
    fields.get();  // the space before the name (a name may hold spaces)
    std::getline(fields, name);
    if (!numbers || name.empty() || !parse_hex64(checksum, e.checksum))
      fail(KSTAGE_OP_FAILED, "%s: the manifest of '%s' has a malformed line '%s'", what,
           path.c_str(), line.c_str());
    listed[name] = e;
  }
  const std::map<std::string, std::string> present = files_of(path, true);
  // Names and sizes first (cheap: no file read), then the checksums.
  for (const auto& [name, e] : listed) {
    auto it = present.find(name);
    if (it == present.end())
      fail(KSTAGE_OP_FAILED, "%s: '%s' lacks its file '%s', which its manifest lists", what,
           path.c_str(), name.c_str());
    const uint64_t size = fs::file_size(it->second, ec);
    if (ec)
      fail(KSTAGE_OP_FAILED, "%s: cannot read the size of '%s': %s", what, it->second.c_str(),
           ec.message().c_str());
    if (size != e.size)
      fail(KSTAGE_OP_FAILED,
           "%s: '%s' is %llu bytes, its manifest says %llu (cut short, or from another "
           "checkpoint)",
           what, it->second.c_str(), (unsigned long long)size, (unsigned long long)e.size);
  }
  for (const auto& [name, file] : present)
    if (listed.count(name) == 0)
      fail(KSTAGE_OP_FAILED, "%s: '%s' is in '%s' but not in its manifest (from another write?)",
           what, name.c_str(), path.c_str());
  for (const auto& [name, e] : listed) {
    const std::string& file = present.at(name);
    const FileEntry got = digest(file);
    if (got.size != e.size || got.checksum != e.checksum)
      fail(KSTAGE_OP_FAILED,
           "%s: '%s' does not match its manifest: XXH3-64 %s, the manifest says %s (damaged, or "
           "from another checkpoint)",
           what, file.c_str(), hex64(got.checksum).c_str(), hex64(e.checksum).c_str());
  }
  if (sizes)
    for (const auto& [name, e] : listed) (*sizes)[name] = e.size;
  return true;
}

}  // namespace kstage::adios2_bridge
