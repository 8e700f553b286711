// SPDX-License-Identifier: Apache-2.0
// kstage._adios2: the ADIOS2 bridge (include/kstage/kstage_adios2.h) for Python, built where the
// bridge is (python/CMakeLists.txt). Each call returns its status (and its out-value); the
// Python layer, kstage/adios2.py, raises kstage's exception for it with last_error().
// Where the bridge has its MPI form (KSTAGE_PY_ADIOS2_MPI), the *_mpi calls take a communicator
// as its Fortran handle (mpi4py's Comm.py2f()), which MPI_Comm_f2c turns back into an MPI_Comm.
#include <kstage/kstage_adios2.h>
#ifdef KSTAGE_PY_ADIOS2_MPI
#include <kstage/kstage_adios2_mpi.h>
#endif

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;

NB_MODULE(_adios2, m) {
  m.doc() = "kstage's ADIOS2 bridge (kstage_adios2.h); use it through kstage.adios2.";
  m.def(
      "last_error", [] { return std::string(kstage_adios2_last_error()); },
      "kstage_adios2_last_error(): this thread's message for its last failed call.");
  // comm: -1 for this process alone (kstage_adios2_open), else a communicator's Fortran handle.
  m.def(
      "open",
      [](const std::string& name, int mode, const std::string& engine,
         const std::vector<std::string>& parameters, uint64_t inline_writer, int64_t comm) {
        std::vector<const char*> p;
        p.reserve(parameters.size() + 1);
        for (const std::string& s : parameters) p.push_back(s.c_str());
        p.push_back(nullptr);
        kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
        d.mode = mode;
        d.engine = engine.c_str();
        d.parameters = p.data();
        d.inline_writer = inline_writer;
        kstage_adios2_stream_t s = 0;
        nb::gil_scoped_release gil;
#ifdef KSTAGE_PY_ADIOS2_MPI
        if (comm >= 0) {
          const kstage_status_t st =
              kstage_adios2_open_mpi(name.c_str(), &d, MPI_Comm_f2c(MPI_Fint(comm)), &s);
          return std::make_pair(int(st), s);
        }
#else
        (void)comm;
#endif
        const kstage_status_t st = kstage_adios2_open(name.c_str(), &d, &s);
        return std::make_pair(int(st), s);
      },
      nb::arg("name"), nb::arg("mode"), nb::arg("engine"), nb::arg("parameters"),
      nb::arg("inline_writer"), nb::arg("comm") = -1);
#ifdef KSTAGE_PY_ADIOS2_MPI
  m.attr("has_mpi") = true;
  m.def("checkpoint_mpi", [](uint64_t stage, const std::string& path, int64_t comm) {
    nb::gil_scoped_release gil;
    return int(kstage_adios2_checkpoint_mpi(stage, path.c_str(), MPI_Comm_f2c(MPI_Fint(comm))));
  });
  m.def("restart_mpi", [](uint64_t stage, const std::string& path, int64_t comm) {
    uint64_t ordinal = 0;
    nb::gil_scoped_release gil;
    const kstage_status_t st =
        kstage_adios2_restart_mpi(stage, path.c_str(), MPI_Comm_f2c(MPI_Fint(comm)), &ordinal);
    return std::make_pair(int(st), ordinal);
  });
  m.def("restart_ex_mpi", [](uint64_t stage, const std::string& path, int manifest, int64_t comm) {
    kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
    d.manifest = manifest;
    uint64_t ordinal = 0;
    nb::gil_scoped_release gil;
    const kstage_status_t st = kstage_adios2_restart_ex_mpi(stage, path.c_str(), &d,
                                                            MPI_Comm_f2c(MPI_Fint(comm)), &ordinal);
    return std::make_pair(int(st), ordinal);
  });
  m.def("checkpoint_latest_mpi", [](uint64_t stage, const std::string& pointer, int64_t comm) {
    nb::gil_scoped_release gil;
    return int(
        kstage_adios2_checkpoint_latest_mpi(stage, pointer.c_str(), MPI_Comm_f2c(MPI_Fint(comm))));
  });
  m.def("restart_latest_mpi", [](uint64_t stage, const std::string& pointer, int64_t comm) {
    uint64_t ordinal = 0;
    nb::gil_scoped_release gil;
    const kstage_status_t st = kstage_adios2_restart_latest_mpi(
        stage, pointer.c_str(), MPI_Comm_f2c(MPI_Fint(comm)), &ordinal);
    return std::make_pair(int(st), ordinal);
  });
#else
  m.attr("has_mpi") = false;
#endif
  m.def("close", [](uint64_t stream) {
    nb::gil_scoped_release gil;
    return int(kstage_adios2_close(stream));
  });
  m.def("write_step",
        [](uint64_t stream, uint64_t stage, uint64_t query, const std::vector<uint64_t>& attributes,
           bool change_range, uint64_t begin, uint64_t end) {
          kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
          d.change_range = change_range;
          d.range_begin = begin;
          d.range_end = end;
          nb::gil_scoped_release gil;
          return int(kstage_adios2_write_step(stream, stage, query, attributes.data(),
                                              attributes.size(), &d));
        });
  m.def("read_step", [](uint64_t stream, uint64_t stage, uint64_t timeout_ns) {
    uint64_t ordinal = 0;
    nb::gil_scoped_release gil;
    const kstage_status_t st = kstage_adios2_read_step(stream, stage, timeout_ns, &ordinal);
    return std::make_pair(int(st), ordinal);
  });
  m.def("checkpoint", [](uint64_t stage, const std::string& path) {
    nb::gil_scoped_release gil;
    return int(kstage_adios2_checkpoint(stage, path.c_str()));
  });
  m.def("restart", [](uint64_t stage, const std::string& path) {
    uint64_t ordinal = 0;
    nb::gil_scoped_release gil;
    const kstage_status_t st = kstage_adios2_restart(stage, path.c_str(), &ordinal);
    return std::make_pair(int(st), ordinal);
  });
  // manifest: a kstage_adios2_manifest_t (0 default, 1 if present, 2 required).
  m.def("restart_ex", [](uint64_t stage, const std::string& path, int manifest) {
    kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
    d.manifest = manifest;
    uint64_t ordinal = 0;
    nb::gil_scoped_release gil;
    const kstage_status_t st = kstage_adios2_restart_ex(stage, path.c_str(), &d, &ordinal);
    return std::make_pair(int(st), ordinal);
  });
  m.def("checkpoint_latest", [](uint64_t stage, const std::string& pointer) {
    nb::gil_scoped_release gil;
    return int(kstage_adios2_checkpoint_latest(stage, pointer.c_str()));
  });
  m.def("restart_latest", [](uint64_t stage, const std::string& pointer) {
    uint64_t ordinal = 0;
    nb::gil_scoped_release gil;
    const kstage_status_t st = kstage_adios2_restart_latest(stage, pointer.c_str(), &ordinal);
    return std::make_pair(int(st), ordinal);
  });
}
