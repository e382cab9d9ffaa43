# The explorer behind `sdpa serve` and `sdpa stats`: its dependencies and the
# page (web/) embedded into the binary at build time. Included from
# apps/sdpa/CMakeLists.txt after sdpa_cli is defined.
#
#   nlohmann-json           sdpa stats, and the explorer's JSON API
#   + cpp-httplib           sdpa serve
# A part whose packages are missing is replaced by a command that says how to
# get it (explorer_missing.cpp).
find_package(nlohmann_json 3 QUIET GLOBAL)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  # Debian's cpp-httplib is a compiled library; its pkg-config file carries the
  # feature macros the header must be compiled with.
  pkg_check_modules(SDPA_HTTPLIB QUIET IMPORTED_TARGET GLOBAL cpp-httplib)
endif()

set(_sdpa_have_stats ${nlohmann_json_FOUND})
if(nlohmann_json_FOUND AND SDPA_HTTPLIB_FOUND)
  set(_sdpa_have_serve TRUE)
else()
  set(_sdpa_have_serve FALSE)
endif()

if(NOT _sdpa_have_stats)
  message(STATUS "sdpa serve and sdpa stats skipped: need nlohmann-json and cpp-httplib "
                 "(apt-get install nlohmann-json3-dev libcpp-httplib-dev)")
elseif(NOT _sdpa_have_serve)
  message(STATUS "sdpa serve skipped: needs cpp-httplib (apt-get install libcpp-httplib-dev)")
endif()
if(NOT _sdpa_have_stats OR NOT _sdpa_have_serve)
  target_sources(sdpa_cli PRIVATE ${CMAKE_CURRENT_LIST_DIR}/explorer_missing.cpp)
  target_compile_definitions(sdpa_cli PRIVATE
    SDPA_HAVE_STATS=$<BOOL:${_sdpa_have_stats}> SDPA_HAVE_SERVE=$<BOOL:${_sdpa_have_serve}>)
endif()
if(NOT _sdpa_have_stats)
  return()
endif()

set(SDPA_WEB_DIR ${PROJECT_SOURCE_DIR}/web)
# Every file the page loads; web/embed.cmake gives each its content type.
set(SDPA_WEB_FILES
  index.html style.css favicon.svg
  main.js i18n.js strings.en.js strings.ko.js util.js state.js
  scaling.js story.js growth.js map.js head.js myths.js
  minilm-head.json
  hangul-subset.woff2 hangul-subset.OFL.txt)
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

# The explorer's JSON API and the embedded page; `sdpa stats`, `sdpa serve` and
# the explorer tests link it.
add_library(sdpa_explorer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/explorer_api.cpp   # the endpoints and the routing
  ${CMAKE_CURRENT_LIST_DIR}/json_fields.cpp    # request fields, checked
  ${CMAKE_CURRENT_LIST_DIR}/work_gate.cpp      # admission of the costly endpoints
  ${CMAKE_CURRENT_LIST_DIR}/host_check.cpp     # the Host-header guard
  ${SDPA_WEB_ASSETS_CPP})
target_include_directories(sdpa_explorer PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(sdpa_explorer PUBLIC sdpa_teaching sdpa::internal nlohmann_json::nlohmann_json Threads::Threads)
target_link_libraries(sdpa_cli PRIVATE sdpa_explorer)
target_sources(sdpa_cli PRIVATE ${CMAKE_CURRENT_LIST_DIR}/stats.cpp)
if(_sdpa_have_serve)
  target_sources(sdpa_cli PRIVATE ${CMAKE_CURRENT_LIST_DIR}/serve.cpp)
  target_link_libraries(sdpa_cli PRIVATE PkgConfig::SDPA_HTTPLIB)
endif()
