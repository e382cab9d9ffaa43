# The Python for the Python-driven parts (the ONNX conformance, browser and
# Python package tests, and the sdpa._sdpa extension of an ordinary build):
# SDPA_PYTHON3 if given, else the virtual environment scripts/setup makes
# (.venv, from Debian's python3 with its site packages), else python3 on PATH;
# none with CMAKE_DISABLE_FIND_PACKAGE_Python3.
set(SDPA_PYTHON3 "" CACHE FILEPATH "Python for the Python-driven tests and the extension (empty: .venv/bin/python3, else PATH)")
set(SDPA_TEST_PYTHON "")
if(CMAKE_DISABLE_FIND_PACKAGE_Python3)
elseif(SDPA_PYTHON3)
  set(SDPA_TEST_PYTHON "${SDPA_PYTHON3}")
elseif(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python3)
  set(SDPA_TEST_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python3")
else()
  find_program(SDPA_PATH_PYTHON3 python3)
  if(SDPA_PATH_PYTHON3)
    set(SDPA_TEST_PYTHON "${SDPA_PATH_PYTHON3}")
  endif()
endif()
