# kstage::fortran_adios2: module kstage_adios2 (fortran/kstage_adios2.f90), the ADIOS2 bridge's
# checkpoints and restarts for Fortran, in its own library libkstage_fortran_adios2, which links
# libkstage_fortran and libkstage_adios2. Included by the top-level CMakeLists.txt where both the
# Fortran module (KSTAGE_WITH_FORTRAN) and the bridge (KSTAGE_HAS_ADIOS2) are built: a build
# without ADIOS2 has neither this library nor its module. Its .mod files go to module kstage's
# directory, which fortran/CMakeLists.txt installs.
get_target_property(_kstage_fortran_modules kstage_fortran Fortran_MODULE_DIRECTORY)
add_library(kstage_fortran_adios2 "${PROJECT_SOURCE_DIR}/fortran/kstage_adios2.f90"
                                  "${PROJECT_SOURCE_DIR}/fortran/adios2_mpi.c")
add_library(kstage::fortran_adios2 ALIAS kstage_fortran_adios2)
set_target_properties(kstage_fortran_adios2 PROPERTIES
  Fortran_MODULE_DIRECTORY "${_kstage_fortran_modules}"
  VERSION ${PROJECT_VERSION}
  SOVERSION ${_kstage_soversion}
  EXPORT_NAME fortran_adios2
  INSTALL_RPATH "$ORIGIN")
target_link_libraries(kstage_fortran_adios2 PUBLIC kstage::fortran kstage::adios2)
# The MPI form (fortran/adios2_mpi.c: Fortran's communicator handles to C's) where the bridge has
# one; elsewhere the layer refuses a `comm` with KSTAGE_NOT_SUPPORTED.
if(KSTAGE_HAS_ADIOS2_MPI)
  target_compile_definitions(kstage_fortran_adios2 PRIVATE KSTAGE_FORTRAN_ADIOS2_MPI=1)
  target_link_libraries(kstage_fortran_adios2 PRIVATE MPI::MPI_C)
endif()
if(CMAKE_Fortran_COMPILER_ID STREQUAL "GNU")
  target_compile_options(kstage_fortran_adios2 PRIVATE
    $<$<COMPILE_LANGUAGE:Fortran>:-std=f2018 -Wall -Wextra -fimplicit-none>)
endif()
install(TARGETS kstage_fortran_adios2
        EXPORT kstageFortranAdios2Targets
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
# (its export set is installed with the others, in the top-level CMakeLists.txt)
