# The Python package's pytest suite, run against the package assembled in the
# build tree (python/CMakeLists.txt), with the Python that built it. Skipped
# with a message when the extension is not built or pytest is missing; the
# tests that need torch skip themselves when it is not installed.
if(NOT SDPA_PYTHON_PACKAGE_DIR)
  message(STATUS "python test: skipped (the sdpa Python package is not built)")
  return()
endif()
execute_process(COMMAND "${SDPA_TEST_PYTHON}" -c "import pytest" RESULT_VARIABLE _sdpa_no_pytest
                OUTPUT_QUIET ERROR_QUIET)
if(_sdpa_no_pytest)
  message(STATUS "python test: skipped (pytest is not installed for ${SDPA_TEST_PYTHON}: sh scripts/setup --test)")
  return()
endif()
add_test(NAME python_package
         COMMAND "${SDPA_TEST_PYTHON}" -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(python_package PROPERTIES
  ENVIRONMENT "PYTHONPATH=${SDPA_PYTHON_PACKAGE_DIR};OMP_NUM_THREADS=2"
  LABELS python TIMEOUT 900)
