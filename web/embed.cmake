# Embeds the explorer's page into the `sdpa` binary: turns each file of web/
# into a byte array and writes a C++ source defining sdpa::explorer::assets().
#
#   cmake -DSOURCE_DIR=<web dir> -DFILES=index.html,style.css,... -DOUTPUT=<file.cpp> -P embed.cmake
#
# The output is rewritten only when its contents change.
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR FILES OUTPUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "," ";" files "${FILES}")

set(arrays "")
set(table "")
set(index 0)
foreach(name IN LISTS files)
  set(path "${SOURCE_DIR}/${name}")
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "embed.cmake: ${path} does not exist")
  endif()
  get_filename_component(ext "${name}" LAST_EXT)
  if(ext STREQUAL ".html")
    set(type "text/html; charset=utf-8")
  elseif(ext STREQUAL ".css")
    set(type "text/css; charset=utf-8")
  elseif(ext STREQUAL ".js")
    set(type "text/javascript; charset=utf-8")
  elseif(ext STREQUAL ".svg")
    set(type "image/svg+xml")
  elseif(ext STREQUAL ".png")
    set(type "image/png")
  elseif(ext STREQUAL ".json")
    set(type "application/json")
  elseif(ext STREQUAL ".woff2")
    set(type "font/woff2")
  elseif(ext STREQUAL ".txt")
    set(type "text/plain; charset=utf-8")
  else()
    message(FATAL_ERROR "embed.cmake: no content type for ${name}")
  endif()
  file(READ "${path}" hex HEX)
  file(SIZE "${path}" size)
  # "3c21" -> "0x3c,0x21," with a line break every 20 bytes.
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){20})" "\\1\n    " bytes "${bytes}")
  string(APPEND arrays "// ${name}\nconst unsigned char kFile${index}[] = {\n    ${bytes}0x00};\n\n")
  string(APPEND table "    {\"/${name}\", \"${type}\", {reinterpret_cast<const char*>(kFile${index}), ${size}}},\n")
  math(EXPR index "${index} + 1")
endforeach()

set(source "// Generated from web/ by web/embed.cmake; do not edit.
#include \"explorer_api.h\"

namespace sdpa::explorer {
namespace {

${arrays}}  // namespace

std::span<const Asset> assets() {
  static const Asset kAssets[] = {
${table}  };
  return kAssets;
}

}  // namespace sdpa::explorer
")

if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL source)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}.tmp" "${source}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
