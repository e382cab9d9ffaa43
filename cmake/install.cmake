# Install rules: headers, the library, the `sdpa` binary, a CMake package
# (find_package(sdpa CONFIG) gives sdpa::sdpa) and a pkg-config file (sdpa.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SDPA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/sdpa CACHE STRING
    "Where sdpaConfig.cmake is installed, relative to the prefix")

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sdpa ${PROJECT_BINARY_DIR}/include/sdpa
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT sdpa_development
        FILES_MATCHING PATTERN "*.h" PATTERN "ring.h" EXCLUDE)
install(TARGETS sdpa EXPORT sdpaTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT sdpa_development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT sdpa_runtime NAMELINK_COMPONENT sdpa_development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT sdpa_runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET sdpa_cli)
  install(TARGETS sdpa_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT sdpa_runtime)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/sdpa
        COMPONENT sdpa_runtime)

install(EXPORT sdpaTargets NAMESPACE sdpa:: DESTINATION ${SDPA_INSTALL_CMAKEDIR}
        FILE sdpaTargets.cmake COMPONENT sdpa_development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sdpaConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/sdpaConfig.cmake
                              INSTALL_DESTINATION ${SDPA_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same MAJOR.MINOR is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sdpaConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sdpaConfig.cmake ${PROJECT_BINARY_DIR}/sdpaConfigVersion.cmake
        DESTINATION ${SDPA_INSTALL_CMAKEDIR} COMPONENT sdpa_development)

# pkg-config: a static libsdpa needs the thread library at link time.
get_target_property(_sdpa_type sdpa TYPE)
if(_sdpa_type STREQUAL "SHARED_LIBRARY")
  set(SDPA_PC_LIBS "-L\${libdir} -lsdpa")
  set(SDPA_PC_LIBS_PRIVATE "-pthread")
  set(SDPA_PC_CFLAGS "-I\${includedir} -DSDPA_SHARED_LIBRARY")
else()
  set(SDPA_PC_LIBS "-L\${libdir} -lsdpa -pthread")
  set(SDPA_PC_LIBS_PRIVATE "")
  set(SDPA_PC_CFLAGS "-I\${includedir}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(SDPA_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(SDPA_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(SDPA_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(SDPA_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# The prefix stays a placeholder here and is filled in at install time (below).
set(SDPA_PC_PREFIX "@SDPA_PC_PREFIX@")
configure_file(${PROJECT_SOURCE_DIR}/cmake/sdpa.pc.in ${PROJECT_BINARY_DIR}/sdpa.pc.configured @ONLY)
# The prefix is taken at install time, so `cmake --install --prefix P` is honoured.
install(CODE "
  file(READ \"${PROJECT_BINARY_DIR}/sdpa.pc.configured\" _sdpa_pc)
  string(REPLACE \"@SDPA_PC_PREFIX@\" \"\${CMAKE_INSTALL_PREFIX}\" _sdpa_pc \"\${_sdpa_pc}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/sdpa.pc\" \"\${_sdpa_pc}\")
" COMPONENT sdpa_development)
install(FILES ${PROJECT_BINARY_DIR}/sdpa.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT sdpa_development)
