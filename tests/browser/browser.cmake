# Explorer tests, included from tests/CMakeLists.txt.
#
# browser_explorer: `sdpa serve` driven by headless Chromium through Selenium
# (tests/browser/explorer_test.py). Added only where `sdpa serve` is built and
# a Python with Selenium and chromedriver are found, e.g. on Debian:
#   apt-get install -y chromium chromium-driver python3-selenium

# A Python that can import selenium: SDPA_BROWSER_PYTHON, else SDPA_TEST_PYTHON
# (.venv sees Debian's python3-selenium), else the first python3 on PATH that can.
set(SDPA_BROWSER_PYTHON "" CACHE FILEPATH "Python with Selenium for the browser test (empty: search PATH)")
set(_sdpa_browser_python "")
if(SDPA_BROWSER_PYTHON)
  set(_sdpa_candidates "${SDPA_BROWSER_PYTHON}")
else()
  set(_sdpa_candidates "")
  if(SDPA_TEST_PYTHON)
    list(APPEND _sdpa_candidates "${SDPA_TEST_PYTHON}")
  endif()
  string(REPLACE ":" ";" _sdpa_path "$ENV{PATH}")
  foreach(dir IN LISTS _sdpa_path)
    if(dir AND EXISTS "${dir}/python3" AND NOT IS_DIRECTORY "${dir}/python3")
      list(APPEND _sdpa_candidates "${dir}/python3")
    endif()
  endforeach()
endif()
foreach(candidate IN LISTS _sdpa_candidates)
  execute_process(COMMAND "${candidate}" -c "import selenium" RESULT_VARIABLE _sdpa_rc OUTPUT_QUIET ERROR_QUIET)
  if(_sdpa_rc EQUAL 0)
    set(_sdpa_browser_python "${candidate}")
    break()
  endif()
endforeach()
find_program(SDPA_CHROMEDRIVER chromedriver)

if(NOT TARGET sdpa_explorer OR NOT TARGET PkgConfig::SDPA_HTTPLIB)
  message(STATUS "browser test skipped: sdpa serve is not built")
elseif(NOT _sdpa_browser_python)
  message(STATUS "browser test skipped: no python3 that can `import selenium` (apt-get install python3-selenium)")
elseif(NOT SDPA_CHROMEDRIVER)
  message(STATUS "browser test skipped: chromedriver not found (apt-get install chromium chromium-driver)")
else()
  message(STATUS "browser test: ${_sdpa_browser_python} with ${SDPA_CHROMEDRIVER}")
  add_test(NAME browser_explorer
           COMMAND "${_sdpa_browser_python}" ${CMAKE_CURRENT_LIST_DIR}/explorer_test.py
                   --sdpa $<TARGET_FILE:sdpa_cli> --chromedriver "${SDPA_CHROMEDRIVER}"
                   --screenshots ${CMAKE_CURRENT_BINARY_DIR}/browser)
  set_tests_properties(browser_explorer PROPERTIES TIMEOUT 120 LABELS "cli;browser")
endif()
