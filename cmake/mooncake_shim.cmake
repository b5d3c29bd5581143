# SPDX-License-Identifier: Apache-2.0
#
# kvlink's Mooncake shim (src/store/mooncake/shim.h, docs/mooncake.md):
# with KVL_MOONCAKE_BUILD (Mooncake's build tree: configured with
# CMAKE_EXPORT_COMPILE_COMMANDS=ON and WITH_STORE_C_SHARED=ON, target
# mooncake_store_c built; its source tree is where that build says), this
# builds libkvlink_mooncake.so: Mooncake's client archives, whole, with its
# C API and the shim's functions exported and nothing else. One library, because
# a shim beside libmooncake_store.so would link Mooncake's static code (and
# its gflags flags) twice, which aborts at load.
#
# The shim is compiled with the defines, include paths and C++ options
# Mooncake compiled its client with (read from its compile_commands.json),
# so that the classes it uses have the layout the archives were built
# with. Nothing of Mooncake is copied into kvlink's tree.

set(mc_build "${KVL_MOONCAKE_BUILD}")
set(mc_commands "${mc_build}/compile_commands.json")
if(NOT EXISTS "${mc_commands}")
  message(FATAL_ERROR "KVL_MOONCAKE_BUILD=${mc_build} has no "
    "compile_commands.json: configure Mooncake with "
    "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON (docs/mooncake.md)")
endif()
file(READ "${mc_commands}" mc_json)
string(JSON mc_n LENGTH "${mc_json}")
math(EXPR mc_last "${mc_n} - 1")
set(mc_cmd "")
foreach(i RANGE ${mc_last})
  string(JSON f GET "${mc_json}" ${i} file)
  if(f MATCHES "mooncake-store/src/real_client\\.cpp$")
    string(JSON mc_cmd GET "${mc_json}" ${i} command)
    break()
  endif()
endforeach()
if(NOT mc_cmd)
  message(FATAL_ERROR "${mc_commands} does not compile "
    "mooncake-store/src/real_client.cpp: not a Mooncake Store build")
endif()
separate_arguments(mc_args UNIX_COMMAND "${mc_cmd}")
set(mc_defs "")
set(mc_incs "")
set(mc_opts "")
set(next_is "")
foreach(a ${mc_args})
  if(next_is STREQUAL "inc")
    list(APPEND mc_incs "${a}")
    set(next_is "")
  elseif(next_is STREQUAL "skip")
    set(next_is "")
  elseif(a MATCHES "^-D(.+)")
    list(APPEND mc_defs "${CMAKE_MATCH_1}")
  elseif(a MATCHES "^-I(.+)")
    list(APPEND mc_incs "${CMAKE_MATCH_1}")
  elseif(a STREQUAL "-isystem")
    set(next_is "inc")
  elseif(a STREQUAL "-o" OR a STREQUAL "-c")
    set(next_is "skip")
  elseif(a MATCHES "^-(std=|f)")
    list(APPEND mc_opts "${a}")
  endif()
endforeach()

set(mc_whole
  mooncake-store/src/libmooncake_store.a
  mooncake-common/src/libasio_static.a)
set(mc_rest
  mooncake-store/src/local_ssd/libmooncake_local_ssd.a
  mooncake-store/src/cachelib_memory_allocator/libcachelib_memory_allocator.a
  mooncake-transfer-engine/src/libtransfer_engine.a
  mooncake-common/src/libmooncake_common.a
  mooncake-transfer-engine/src/common/base/libbase.a)
set(mc_archives "")
foreach(a ${mc_whole} ${mc_rest})
  if(NOT EXISTS "${mc_build}/${a}")
    message(FATAL_ERROR "KVL_MOONCAKE_BUILD has no ${a}: build Mooncake's "
      "mooncake_store_c target first (docs/mooncake.md)")
  endif()
endforeach()
list(TRANSFORM mc_whole PREPEND "${mc_build}/")
list(TRANSFORM mc_rest PREPEND "${mc_build}/")

enable_language(CXX)
set(mc_map "${CMAKE_BINARY_DIR}/kvlink_mooncake.map")
file(WRITE "${mc_map}"
  "{\n  global:\n    mooncake_store_*;\n    kvl_mc_*;\n  local:\n    *;\n};\n")
add_library(kvlink_mooncake SHARED src/store/mooncake/shim.cpp)
target_compile_definitions(kvlink_mooncake PRIVATE ${mc_defs})
target_include_directories(kvlink_mooncake PRIVATE ${mc_incs})
target_compile_options(kvlink_mooncake PRIVATE ${mc_opts})
# Stripped in Release, as Mooncake's own library is: the archives' debug
# information is most of its size.
target_link_options(kvlink_mooncake PRIVATE
  "-Wl,--version-script=${mc_map}" "-Wl,--no-undefined"
  "$<$<CONFIG:Release>:-Wl,-s>")
target_link_libraries(kvlink_mooncake PRIVATE
  -Wl,--whole-archive ${mc_whole} -Wl,--no-whole-archive -Wl,--as-needed
  ${mc_rest} zstd ibverbs glog gflags jsoncpp yaml-cpp xxhash numa uring
  pthread dl)
set_target_properties(kvlink_mooncake PROPERTIES
  LINK_DEPENDS "${mc_map}")
install(TARGETS kvlink_mooncake LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
message(STATUS "kvlink: Mooncake shim library from ${mc_build}")
