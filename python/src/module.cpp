// SPDX-License-Identifier: Apache-2.0
// kstage._kstage: the Python extension over the C API (nanobind). python/kstage/__init__.py
// re-exports it as the `kstage` package.
#include "binding.hpp"

#include <algorithm>
#include <string_view>

namespace nb = nanobind;

NB_MODULE(_kstage, m) {
  m.doc() =
      "kstage's C API for Python: stages, queries, writes, reads and maps, with DLPack both ways.";
  kstage_py::register_errors(m);
  kstage_py::register_stage(m);
  nb::handle stage_class = m.attr("Stage");
  kstage_py::register_tensor(m);
  kstage_py::register_write(m, stage_class);
  kstage_py::register_read(m, stage_class);
  kstage_py::register_map(m, stage_class);
  kstage_py::register_scene(m, stage_class);
  kstage_py::register_log(m);
  m.def(
      "version", [] { return kstage_version(); },
      "The version of the libkstage this module runs against (kstage_version()).");
  m.def(
      "transfer_counts",
      [] {
        uint64_t up = 0, down = 0, index = 0;
        kstage_py::check(kstage_transfer_counts(&up, &down, &index));
        return nb::make_tuple(up, down, index);
      },
      "(host_to_device, device_to_host, index_uploads) copies enqueued so far, process-wide.");
  m.def(
      "build_info",
      [] {
        const char* text = nullptr;
        kstage_py::check(kstage_build_info(&text));
        nb::dict info;  // the C text's "key: value" lines, in order
        for (std::string_view rest = text; !rest.empty();) {
          const size_t end = std::min(rest.find('\n'), rest.size());
          const std::string_view line = rest.substr(0, end);
          rest.remove_prefix(std::min(end + 1, rest.size()));
          const size_t colon = line.find(": ");
          if (colon == std::string_view::npos) continue;
          info[nb::str(line.data(), colon)] =
              nb::str(line.data() + colon + 2, line.size() - colon - 2);
        }
        return info;
      },
      nb::sig("def build_info() -> dict[str, str]"),
      "How libkstage was built and what it runs on (kstage_build_info): kstage, kokkos_built, "
      "kokkos_running, host_execution, host_threads, backends, devices.");
}
