# The API reference: `cmake --build <build> --target docs` runs Doxygen (Debian's doxygen
# package; scripts/setup.sh --docs installs it) over the public headers and writes HTML to
# <build>/docs/html/index.html.
#
# Warnings are errors (FAIL_ON_WARNINGS): an undocumented public function, type, field or macro
# fails the target, and with BUILD_TESTING the ctest `docs_reference` builds it (scripts/test.sh's
# default leg runs it with KSTAGE_REQUIRE_DOCS=ON, so a missing doxygen fails there too).
# kstage::detail, kstage::impl and KSTAGE_IMPL_* are implementation, not reference.
#
# Headers: include/kstage/kstage.h, kstage.hpp and the parts it includes (kstage/hpp/*.hpp,
# where the C++ API's classes are), dlpack.hpp -- and any header listed in
# KSTAGE_DOCS_EXTRA_HEADERS (a bridge's own header, once it exists).
include_guard(GLOBAL)

option(KSTAGE_REQUIRE_DOCS "Fail the configuration when Doxygen is not found (the docs target)" OFF)
find_package(Doxygen QUIET)
if(NOT DOXYGEN_FOUND)
  if(KSTAGE_REQUIRE_DOCS)
    message(FATAL_ERROR "kstage: KSTAGE_REQUIRE_DOCS is ON but doxygen was not found (scripts/setup.sh --docs)")
  endif()
  message(STATUS "kstage: doxygen not found: no docs target (scripts/setup.sh --docs installs it)")
  return()
endif()

file(GLOB _kstage_cpp_parts CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/include/kstage/hpp/*.hpp")
set(KSTAGE_DOCS_HEADERS
    "${PROJECT_SOURCE_DIR}/include/kstage/kstage.h"
    "${PROJECT_SOURCE_DIR}/include/kstage/kstage.hpp"
    ${_kstage_cpp_parts}
    "${PROJECT_SOURCE_DIR}/include/kstage/dlpack.hpp"
    "${PROJECT_SOURCE_DIR}/include/kstage/kstage_arrow.h"
    ${KSTAGE_DOCS_EXTRA_HEADERS})

set(DOXYGEN_PROJECT_NAME "kstage")
set(DOXYGEN_PROJECT_NUMBER "${PROJECT_VERSION}")
set(DOXYGEN_PROJECT_BRIEF "Kokkos-backed attribute columns, exchanged through DLPack")
set(DOXYGEN_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/docs")
set(DOXYGEN_GENERATE_HTML YES)
set(DOXYGEN_GENERATE_LATEX NO)
set(DOXYGEN_HAVE_DOT NO)
set(DOXYGEN_EXTRACT_ALL NO)
set(DOXYGEN_WARN_IF_UNDOCUMENTED YES)
set(DOXYGEN_WARN_IF_DOC_ERROR YES)
set(DOXYGEN_WARN_NO_PARAMDOC NO)
set(DOXYGEN_WARN_AS_ERROR FAIL_ON_WARNINGS)
set(DOXYGEN_QUIET YES)
set(DOXYGEN_FULL_PATH_NAMES NO)
set(DOXYGEN_JAVADOC_AUTOBRIEF YES)
set(DOXYGEN_OPTIMIZE_OUTPUT_FOR_C NO)
set(DOXYGEN_ENABLE_PREPROCESSING YES)
set(DOXYGEN_MACRO_EXPANSION YES)
# The API as a user's compiler sees it: exported functions, the C++ exceptions API on.
set(DOXYGEN_PREDEFINED "KSTAGE_API=" "KSTAGE_CPP_EXCEPTIONS=1")
set(DOXYGEN_EXCLUDE_SYMBOLS "kstage::detail" "kstage::impl" "detail" "impl" "KSTAGE_IMPL_*")
doxygen_add_docs(docs ${KSTAGE_DOCS_HEADERS}
                 WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}/include"
                 COMMENT "kstage API reference (Doxygen) -> ${PROJECT_BINARY_DIR}/docs/html/index.html")

if(BUILD_TESTING)
  add_test(NAME docs_reference
           COMMAND "${CMAKE_COMMAND}" --build "${PROJECT_BINARY_DIR}" --target docs)
  set_tests_properties(docs_reference PROPERTIES LABELS docs TIMEOUT 300)
endif()
