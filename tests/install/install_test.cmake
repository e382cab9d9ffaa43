# Depending on sdpa from outside, as a user would (tests/install/run.cmake):
#   install_consumer     installs this build into a temporary prefix, then builds
#                        and runs tests/install/consumer against it with
#                        find_package(sdpa CONFIG) and with pkg-config
#   subproject_consumer  builds the consumer with sdpa as a FetchContent
#                        subproject, shared, with every optional package hidden,
#                        and checks that libsdpa.so exports only namespace sdpa
# Both are labelled `install` (a sanitizer build leaves them out).
set(_sdpa_install_args
  -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DBUILD_DIR=${PROJECT_BINARY_DIR}
  -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/install_work -DCXX=${CMAKE_CXX_COMPILER}
  -DGENERATOR=${CMAKE_GENERATOR})
add_test(NAME install_consumer
         COMMAND ${CMAKE_COMMAND} ${_sdpa_install_args} -DMODE=install -P ${CMAKE_CURRENT_LIST_DIR}/run.cmake)
add_test(NAME subproject_consumer
         COMMAND ${CMAKE_COMMAND} ${_sdpa_install_args} -DMODE=subproject -P ${CMAKE_CURRENT_LIST_DIR}/run.cmake)
set_tests_properties(install_consumer subproject_consumer PROPERTIES LABELS install TIMEOUT 900)
