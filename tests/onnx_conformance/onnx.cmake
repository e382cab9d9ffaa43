# ONNX's own Attention node tests run against `sdpa onnx` (run_conformance.py
# next to this file generates them with the onnx package at test time).
# Registered only when SDPA_TEST_PYTHON (tests/CMakeLists.txt) can import onnx and
# numpy at configure time; `sh scripts/setup --test` installs them into .venv.
set(_sdpa_onnx_ok FALSE)
if(SDPA_TEST_PYTHON)
  execute_process(COMMAND ${SDPA_TEST_PYTHON} -c "import onnx, numpy"
                  RESULT_VARIABLE _sdpa_onnx_rc OUTPUT_QUIET ERROR_QUIET)
  if(_sdpa_onnx_rc EQUAL 0)
    set(_sdpa_onnx_ok TRUE)
  endif()
endif()
if(_sdpa_onnx_ok)
  add_test(NAME onnx_conformance
           COMMAND ${SDPA_TEST_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/run_conformance.py $<TARGET_FILE:sdpa_cli>)
  set_tests_properties(onnx_conformance PROPERTIES TIMEOUT 600 LABELS "cli;onnx")
else()
  message(STATUS "ONNX conformance test skipped: no python3 with onnx and numpy "
                 "(sh scripts/setup --test puts them in .venv)")
endif()
