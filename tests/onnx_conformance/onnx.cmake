# ONNX's own Attention node tests run against `sdpa onnx` (run_conformance.py
# next to this file generates them with the onnx package at test time).
# Registered only when `python3` can import onnx and numpy at configure time.
find_program(SDPA_PYTHON3 python3)
set(_sdpa_onnx_ok FALSE)
if(SDPA_PYTHON3)
  execute_process(COMMAND ${SDPA_PYTHON3} -c "import onnx, numpy"
                  RESULT_VARIABLE _sdpa_onnx_rc OUTPUT_QUIET ERROR_QUIET)
  if(_sdpa_onnx_rc EQUAL 0)
    set(_sdpa_onnx_ok TRUE)
  endif()
endif()
if(_sdpa_onnx_ok)
  add_test(NAME onnx_conformance
           COMMAND ${SDPA_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/run_conformance.py $<TARGET_FILE:sdpa_cli>)
  set_tests_properties(onnx_conformance PROPERTIES TIMEOUT 600 LABELS onnx)
else()
  message(STATUS "ONNX conformance test skipped: pip install onnx numpy")
endif()
