# Third-party libraries, all from Debian 12 (scripts/setup installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# Only the hub module (keel pull) links these: HTTPS downloads and their SHA-256.
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)

# One interface target that every module links, so a module needs no list of its own.
add_library(keel_deps INTERFACE)
target_link_libraries(keel_deps INTERFACE Threads::Threads nlohmann_json::nlohmann_json
                      PkgConfig::PCRE2 PkgConfig::UTF8PROC PkgConfig::XXHASH PkgConfig::ZSTD
                      PkgConfig::OPENBLAS)

# CUDA: compiled wherever nvcc is found, unless KEEL_CUDA=OFF.
set(KEEL_HAVE_CUDA OFF)
if(NOT KEEL_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(KEEL_HAVE_CUDA ON)
  elseif(KEEL_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KEEL_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "keel: CUDA backend ${KEEL_HAVE_CUDA}")
