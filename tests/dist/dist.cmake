# Ring attention's tests (sdpa::dist), run under mpirun on this machine with 2
# and 4 ranks; skipped with a message without MPI. The netns test runs two
# ranks in two network namespaces joined by a veth pair (TCP between them).
if(NOT TARGET sdpa_dist)
  message(STATUS "ring attention tests skipped: need MPI (apt-get install libopenmpi-dev openmpi-bin)")
  return()
endif()
if(NOT MPIEXEC_EXECUTABLE)
  message(STATUS "ring attention tests skipped: need mpirun (apt-get install openmpi-bin)")
  return()
endif()
add_executable(ring_test ${CMAKE_CURRENT_LIST_DIR}/ring_test.cpp)
target_link_libraries(ring_test PRIVATE sdpa_dist sdpa_test_support)
# Open MPI refuses root without --allow-run-as-root and more ranks than cores
# without --oversubscribe; both are harmless otherwise.
set(SDPA_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --mca btl self,vader,tcp)
foreach(np 2 4)
  add_test(NAME ring_np${np} COMMAND ${SDPA_MPIRUN} -np ${np} $<TARGET_FILE:ring_test>)
  set_tests_properties(ring_np${np} PROPERTIES LABELS dist TIMEOUT 120 ENVIRONMENT "OMPI_MCA_rmaps_base_oversubscribe=1")
endforeach()
# Across two network namespaces over TCP (root only; skipped otherwise).
add_test(NAME ring_netns COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/netns_test.sh ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:ring_test>)
set_tests_properties(ring_netns PROPERTIES LABELS dist TIMEOUT 150 SKIP_RETURN_CODE 77 RUN_SERIAL ON)

# mpirun -np P sdpa run --ring against sdpa run.
if(TARGET sdpa_cli)
  add_executable(ring_cli_test ${CMAKE_CURRENT_LIST_DIR}/ring_cli_test.cpp)
  target_link_libraries(ring_cli_test PRIVATE sdpa_test_support GTest::gtest_main)
  target_compile_definitions(ring_cli_test PRIVATE SDPA_CLI="$<TARGET_FILE:sdpa_cli>" SDPA_MPIEXEC="${MPIEXEC_EXECUTABLE}")
  add_dependencies(ring_cli_test sdpa_cli)
  gtest_discover_tests(ring_cli_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "dist;cli" TIMEOUT 120)
endif()
