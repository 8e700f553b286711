# Driver for the package_downstream test (cmake -P). See tests/package/CMakeLists.txt.
cmake_minimum_required(VERSION 3.25)

foreach(_v KSTAGE_BINARY_DIR INSTALL_PREFIX SOURCE_DIR WORK_DIR EXPECTED_VERSION)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "run_downstream.cmake: -D${_v}=... is required")
  endif()
endforeach()

function(_run what)
  string(REPLACE ";" " " _pretty "${ARGN}")
  message(STATUS "[package_downstream] ${what}: ${_pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "[package_downstream] ${what} failed (exit ${_rc})")
  endif()
endfunction()

# (a) install the built kstage into a private prefix
file(REMOVE_RECURSE "${INSTALL_PREFIX}" "${WORK_DIR}")
set(_config_args "")
if(CONFIG)
  set(_config_args --config "${CONFIG}")
endif()
_run("install" "${CMAKE_COMMAND}" --install "${KSTAGE_BINARY_DIR}" --prefix "${INSTALL_PREFIX}" ${_config_args})

# (b) configure and build the downstream project against it: the C program, then (in a project
# of its own) the kokkos_bridge program
string(REPLACE "|" ";" _prefix_path "${INSTALL_PREFIX}|${PREFIX_PATH}")
set(_variants c bridge)
if(FORTRAN)
  list(APPEND _variants fortran)
endif()
if(ADIOS2)
  list(APPEND _variants adios2)
endif()
foreach(_variant IN LISTS _variants)
  set(_work "${WORK_DIR}/${_variant}")
  set(_cfg
    -S "${SOURCE_DIR}" -B "${_work}"
    "-DCMAKE_PREFIX_PATH=${_prefix_path}"
    "-DKSTAGE_EXPECTED_VERSION=${EXPECTED_VERSION}"
    "-DKSTAGE_EXPECTED_BACKENDS=${EXPECTED_BACKENDS}")
  if(_variant STREQUAL "bridge")
    list(APPEND _cfg -DKSTAGE_DOWNSTREAM_BRIDGE=ON)
  elseif(_variant STREQUAL "fortran")
    list(APPEND _cfg -DKSTAGE_DOWNSTREAM_FORTRAN=ON)
  elseif(_variant STREQUAL "adios2")
    list(APPEND _cfg -DKSTAGE_DOWNSTREAM_ADIOS2=ON)
  endif()
  if(GENERATOR)
    list(APPEND _cfg -G "${GENERATOR}")
  endif()
  if(CONFIG)
    list(APPEND _cfg "-DCMAKE_BUILD_TYPE=${CONFIG}")
  endif()
  foreach(_pair "Kokkos_DIR=Kokkos_DIR" "dlpack_DIR=dlpack_DIR"
                "C_COMPILER=CMAKE_C_COMPILER" "CXX_COMPILER=CMAKE_CXX_COMPILER"
                "Fortran_COMPILER=CMAKE_Fortran_COMPILER"
                "C_FLAGS=CMAKE_C_FLAGS" "CXX_FLAGS=CMAKE_CXX_FLAGS" "Fortran_FLAGS=CMAKE_Fortran_FLAGS"
                "EXE_LINKER_FLAGS=CMAKE_EXE_LINKER_FLAGS")
    string(REPLACE "=" ";" _pair "${_pair}")
    list(GET _pair 0 _in)
    list(GET _pair 1 _out)
    if(_in MATCHES "^Fortran_" AND NOT _variant STREQUAL "fortran")
      continue()  # only the Fortran project enables Fortran
    endif()
    if(DEFINED ${_in} AND NOT "${${_in}}" STREQUAL "" AND NOT "${${_in}}" MATCHES "-NOTFOUND$")
      list(APPEND _cfg "-D${_out}=${${_in}}")
    endif()
  endforeach()
  _run("configure downstream (${_variant})" "${CMAKE_COMMAND}" ${_cfg})
  _run("build downstream (${_variant})" "${CMAKE_COMMAND}" --build "${_work}" ${_config_args})
endforeach()

# (b') the same C (and Fortran) programs built by a plain Makefile with pkg-config's flags, the
# way a code without CMake builds against kstage (tests/package/make)
set(_make_out "${WORK_DIR}/make")
file(MAKE_DIRECTORY "${_make_out}")
set(_make_vars "PKG_CONFIG_PATH=${INSTALL_PREFIX}/${LIBDIR}/pkgconfig" "CC=${C_COMPILER}"
               "CFLAGS=${C_FLAGS}" "LDFLAGS=${EXE_LINKER_FLAGS}")
set(_make_args "OUT=${_make_out}" "PKG_CONFIG=${PKG_CONFIG}")
if(FORTRAN)
  list(APPEND _make_vars "FC=${Fortran_COMPILER}")
  list(APPEND _make_args FORTRAN=1 "FFLAGS=${Fortran_FLAGS}")
endif()
_run("build with make and pkg-config" "${CMAKE_COMMAND}" -E env ${_make_vars}
     "${MAKE_PROGRAM}" -f "${MAKE_DIR}/Makefile" ${_make_args})

# (c) run them (not where they would need a GPU this machine lacks: RUN=OFF)
if(DEFINED RUN AND NOT RUN)
  message(STATUS "[package_downstream] built, not run (RUN=OFF)")
  return()
endif()
set(_programs c/kstage_downstream bridge/kstage_downstream_bridge make/kstage_make_c)
if(FORTRAN)
  list(APPEND _programs fortran/kstage_downstream_fortran make/kstage_make_fortran)
endif()
if(ADIOS2)
  list(APPEND _programs adios2/kstage_downstream_adios2)
endif()
foreach(_name IN LISTS _programs)
  get_filename_component(_dir "${_name}" DIRECTORY)
  get_filename_component(_exe_name "${_name}" NAME)
  set(_exe "${WORK_DIR}/${_name}")
  if(NOT EXISTS "${_exe}" AND CONFIG AND EXISTS "${WORK_DIR}/${_dir}/${CONFIG}/${_exe_name}")
    set(_exe "${WORK_DIR}/${_dir}/${CONFIG}/${_exe_name}")
  endif()
  if(_exe_name STREQUAL "kstage_downstream_adios2")
    _run("run ${_exe_name}" "${_exe}" "${WORK_DIR}/downstream-checkpoint.bp")
  else()
    _run("run ${_exe_name}" "${_exe}")
  endif()
endforeach()
# The installed kstage-info runs from the prefix (its RUNPATH finds the installed libkstage).
_run("run the installed kstage-info" "${INSTALL_PREFIX}/bin/kstage-info")
message(STATUS "[package_downstream] OK")
