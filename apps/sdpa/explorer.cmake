# The explorer behind `sdpa serve` and `sdpa stats`: its dependencies and the
# page (web/) embedded into the binary at build time. Included from
# apps/sdpa/CMakeLists.txt after sdpa_cli is defined.
find_package(nlohmann_json 3 REQUIRED GLOBAL)
find_package(PkgConfig REQUIRED)
# Debian's cpp-httplib is a compiled library; its pkg-config file carries the
# feature macros the header must be compiled with.
pkg_check_modules(SDPA_HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)

set(SDPA_WEB_DIR ${PROJECT_SOURCE_DIR}/web)
set(SDPA_WEB_FILES index.html style.css app.js favicon.svg)
set(SDPA_WEB_INPUTS ${SDPA_WEB_FILES})
list(TRANSFORM SDPA_WEB_INPUTS PREPEND ${SDPA_WEB_DIR}/)
list(JOIN SDPA_WEB_FILES "," SDPA_WEB_FILE_LIST)
set(SDPA_WEB_ASSETS_CPP ${CMAKE_CURRENT_BINARY_DIR}/generated/web_assets.cpp)
add_custom_command(
  OUTPUT ${SDPA_WEB_ASSETS_CPP}
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${SDPA_WEB_DIR} -DFILES=${SDPA_WEB_FILE_LIST}
          -DOUTPUT=${SDPA_WEB_ASSETS_CPP} -P ${SDPA_WEB_DIR}/embed.cmake
  DEPENDS ${SDPA_WEB_INPUTS} ${SDPA_WEB_DIR}/embed.cmake
  COMMENT "Embedding the explorer page (web/)"
  VERBATIM)

# The embedded page plus everything explorer_api.cpp, serve.cpp and stats.cpp
# need; the explorer tests link it too (their explorer_api.cpp comes from
# tests/browser/browser.cmake).
add_library(sdpa_explorer STATIC ${SDPA_WEB_ASSETS_CPP})
target_include_directories(sdpa_explorer PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(sdpa_explorer PUBLIC sdpa::sdpa nlohmann_json::nlohmann_json PkgConfig::SDPA_HTTPLIB
                                           Threads::Threads)
target_link_libraries(sdpa_cli PRIVATE sdpa_explorer)
