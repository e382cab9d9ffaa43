# Ring attention's tests (sdpa::dist), run under mpirun on this machine with 2
# and 4 ranks; skipped with a message without MPI. The netns test runs two
# ranks in two network namespaces joined by a veth pair (TCP between them).
if(NOT TARGET sdpa_dist)
  message(STATUS "ring attention tests skipped: need MPI (apt-get install libopenmpi-dev openmpi-bin)")
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
