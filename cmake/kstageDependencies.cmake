# kstage dependencies.
#
# Included from the top-level CMakeLists.txt (build mode) and from the installed
# kstageConfig.cmake (package mode: KSTAGE_DEPENDENCIES_PACKAGE_MODE is TRUE there).
#
#   Kokkos  >= 3.4   find_package(Kokkos) WITHOUT a version: Kokkos 3.x ships a SameMajorVersion
#                    version file, so a requested 3.4 would reject Kokkos 4.x/5.x. The version is
#                    checked on Kokkos_VERSION instead.
#   dlpack  >= 1.0   find_package(dlpack CONFIG) WITHOUT a version: Debian's libdlpack-dev 1.x
#                    still reports 0.6 in its CMake version file. The version is read from
#                    DLPACK_MAJOR_VERSION in the dlpack.h header that dlpack::dlpack points at.
#   Catch2  3        build mode only, when BUILD_TESTING is on.

set(KSTAGE_MIN_KOKKOS_VERSION 3.4)
set(KSTAGE_MIN_DLPACK_MAJOR 1)

# Sets <out_ok> to TRUE/FALSE and <out_msg> to a message naming the problem. With
# KSTAGE_DEPENDENCIES_WITHOUT_KOKKOS set (an installed shared kstage used without its Kokkos
# bridge), Kokkos is not checked.
function(_kstage_check_dependency_versions out_ok out_msg)
  if(KSTAGE_DEPENDENCIES_WITHOUT_KOKKOS)
  elseif(NOT DEFINED Kokkos_VERSION OR Kokkos_VERSION STREQUAL "")
    set(${out_ok} FALSE PARENT_SCOPE)
    set(${out_msg} "kstage: the Kokkos package found (Kokkos_DIR=${Kokkos_DIR}) does not set Kokkos_VERSION." PARENT_SCOPE)
    return()
  elseif(Kokkos_VERSION VERSION_LESS KSTAGE_MIN_KOKKOS_VERSION)
    set(${out_ok} FALSE PARENT_SCOPE)
    set(${out_msg} "kstage needs Kokkos >= ${KSTAGE_MIN_KOKKOS_VERSION}, found ${Kokkos_VERSION} (Kokkos_DIR=${Kokkos_DIR}). Point Kokkos_ROOT at a newer Kokkos, or run scripts/setup.sh." PARENT_SCOPE)
    return()
  endif()

  if(NOT TARGET dlpack::dlpack)
    set(${out_ok} FALSE PARENT_SCOPE)
    set(${out_msg} "kstage: the dlpack package (dlpack_DIR=${dlpack_DIR}) defines no dlpack::dlpack target." PARENT_SCOPE)
    return()
  endif()
  get_target_property(_dirs dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
  set(_header "")
  foreach(_d IN LISTS _dirs)
    if(EXISTS "${_d}/dlpack/dlpack.h")
      set(_header "${_d}/dlpack/dlpack.h")
      break()
    endif()
  endforeach()
  if(_header STREQUAL "")
    set(${out_ok} FALSE PARENT_SCOPE)
    set(${out_msg} "kstage: dlpack/dlpack.h not found in the include directories of dlpack::dlpack (${_dirs}; dlpack_DIR=${dlpack_DIR})." PARENT_SCOPE)
    return()
  endif()
  file(STRINGS "${_header}" _line REGEX "^[ \t]*#[ \t]*define[ \t]+DLPACK_MAJOR_VERSION[ \t]+[0-9]+")
  string(REGEX REPLACE ".*DLPACK_MAJOR_VERSION[ \t]+([0-9]+).*" "\\1" _major "${_line}")
  file(STRINGS "${_header}" _line REGEX "^[ \t]*#[ \t]*define[ \t]+DLPACK_MINOR_VERSION[ \t]+[0-9]+")
  string(REGEX REPLACE ".*DLPACK_MINOR_VERSION[ \t]+([0-9]+).*" "\\1" _minor "${_line}")
  if(NOT _major MATCHES "^[0-9]+$")
    set(${out_ok} FALSE PARENT_SCOPE)
    set(${out_msg} "kstage: no DLPACK_MAJOR_VERSION in ${_header}; kstage needs DLPack >= ${KSTAGE_MIN_DLPACK_MAJOR}.0 headers." PARENT_SCOPE)
    return()
  endif()
  if(_major LESS KSTAGE_MIN_DLPACK_MAJOR)
    set(${out_ok} FALSE PARENT_SCOPE)
    set(${out_msg} "kstage needs DLPack >= ${KSTAGE_MIN_DLPACK_MAJOR}.0 (DLManagedTensorVersioned), found ${_major}.${_minor} in ${_header}." PARENT_SCOPE)
    return()
  endif()
  set(KSTAGE_DLPACK_VERSION "${_major}.${_minor}" PARENT_SCOPE)
  set(KSTAGE_DLPACK_HEADER "${_header}" PARENT_SCOPE)
  set(${out_ok} TRUE PARENT_SCOPE)
  set(${out_msg} "" PARENT_SCOPE)
endfunction()

if(KSTAGE_DEPENDENCIES_PACKAGE_MODE)
  # ---- installed package (kstageConfig.cmake) -------------------------------------------------
  # The HINTS are the locations kstage was built against; Kokkos_ROOT / Kokkos_DIR /
  # CMAKE_PREFIX_PATH of the consuming project are searched before them.
  # Kokkos only where it is needed: a static kstage (Kokkos is linked into the program), or the
  # kokkos_bridge component (C++ with Views). A shared kstage used through its C API needs none.
  include(CMakeFindDependencyMacro)
  if(NOT KSTAGE_DEPENDENCIES_WITHOUT_KOKKOS)
    find_dependency(Kokkos HINTS ${KSTAGE_BUILT_WITH_Kokkos_DIR})
  endif()
  find_dependency(dlpack CONFIG HINTS ${KSTAGE_BUILT_WITH_dlpack_DIR})
  _kstage_check_dependency_versions(_kstage_deps_ok _kstage_deps_msg)
  if(NOT _kstage_deps_ok)
    set(kstage_FOUND FALSE)
    set(kstage_NOT_FOUND_MESSAGE "${_kstage_deps_msg}")
  endif()
  unset(_kstage_deps_ok)
  unset(_kstage_deps_msg)
else()
  # ---- building kstage ------------------------------------------------------------------------
  find_package(Kokkos REQUIRED)
  find_package(dlpack CONFIG REQUIRED)
  _kstage_check_dependency_versions(_kstage_deps_ok _kstage_deps_msg)
  if(NOT _kstage_deps_ok)
    message(FATAL_ERROR "${_kstage_deps_msg}")
  endif()
  message(STATUS "kstage: Kokkos ${Kokkos_VERSION} (devices: ${Kokkos_DEVICES}) from ${Kokkos_DIR}")
  # Kokkos 3.x without a parallel backend compiles its atomics, View reference counts included,
  # as plain loads and stores (KOKKOS_ENABLE_SERIAL_ATOMICS) unless it was configured with real
  # ones: then kstage may not be called from several threads at once.
  if(Kokkos_VERSION VERSION_LESS 4.0 AND
     NOT Kokkos_DEVICES MATCHES "OPENMP|THREADS|PTHREAD|CUDA|HIP|SYCL|OPENMPTARGET|HPX")
    find_file(_kstage_kokkos_config KokkosCore_config.h
              PATHS "${Kokkos_DIR}/../../../include" "${Kokkos_DIR}/../../include" NO_DEFAULT_PATH)
    set(_kstage_real_atomics FALSE)
    if(_kstage_kokkos_config)
      file(STRINGS "${_kstage_kokkos_config}" _line REGEX "define[ \t]+KOKKOS_ENABLE_(GNU|STD)_ATOMICS")
      if(_line)
        set(_kstage_real_atomics TRUE)
      endif()
    endif()
    if(NOT _kstage_real_atomics)
      message(WARNING "kstage: Kokkos ${Kokkos_VERSION} has no parallel backend, so its View "
                      "reference counts are not atomic (KOKKOS_ENABLE_SERIAL_ATOMICS): call kstage "
                      "from one thread at a time, or build Kokkos with -DKOKKOS_ENABLE_GNU_ATOMICS "
                      "(see README, 'Threads').")
    endif()
    unset(_kstage_kokkos_config CACHE)
  endif()
  message(STATUS "kstage: DLPack ${KSTAGE_DLPACK_VERSION} from ${KSTAGE_DLPACK_HEADER}")
  if(BUILD_TESTING)
    find_package(Catch2 3 REQUIRED)
    message(STATUS "kstage: Catch2 ${Catch2_VERSION} from ${Catch2_DIR}")
  endif()
endif()
