# keel_module(NAME DEP...) makes the static library keel_NAME from src/<folder>/**.cpp.
# A module without sources yet becomes an INTERFACE library, so the graph stays whole.
#
# Each module sees only its own headers and those of its declared dependencies: its
# include root (build/include/NAME) holds a link to its own folder alone, and the roots
# of its dependencies come through linking (PUBLIC, so transitively). A wrong include
# fails to compile, as scripts/check_layering.py says it should.

# Modules that live inside another's folder (scripts/check_layering.py has the same map).
set(KEEL_NESTED_MODULES jinja=text/jinja ipc=engine/ipc tp=engine/tp cuda=exec/cuda)

# The folder under src/ of module NAME.
function(keel_module_dir name out)
  set(dir ${name})
  foreach(pair ${KEEL_NESTED_MODULES})
    string(REPLACE "=" ";" kv ${pair})
    list(GET kv 0 k)
    if(k STREQUAL name)
      list(GET kv 1 dir)
    endif()
  endforeach()
  set(${out} ${dir} PARENT_SCOPE)
endfunction()

# The nested module folders directly or deeply inside folder DIR (e.g. engine -> engine/ipc).
function(keel_nested_inside dir out)
  set(result)
  foreach(pair ${KEEL_NESTED_MODULES})
    string(REPLACE "=" ";" kv ${pair})
    list(GET kv 1 nested)
    if(nested MATCHES "^${dir}/")
      list(APPEND result ${nested})
    endif()
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Builds build/include/NAME/<dir>: a link to src/<dir>, or, where other modules nest
# inside it, a folder of links to its entries less those modules' folders. Returns the root.
function(keel_include_root name out)
  keel_module_dir(${name} dir)
  set(root ${CMAKE_BINARY_DIR}/include/${name})
  file(REMOVE_RECURSE ${root})
  get_filename_component(parent ${root}/${dir} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  keel_nested_inside(${dir} nested)
  if(NOT nested)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${dir} ${root}/${dir} SYMBOLIC)
  else()
    file(MAKE_DIRECTORY ${root}/${dir})
    # CONFIGURE_DEPENDS: a header added later gets its link at the next build.
    file(GLOB entries LIST_DIRECTORIES true CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${dir}/*)
    foreach(entry ${entries})
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/src ${entry})
      if(NOT rel IN_LIST nested)
        get_filename_component(leaf ${entry} NAME)
        file(CREATE_LINK ${entry} ${root}/${dir}/${leaf} SYMBOLIC)
      endif()
    endforeach()
  endif()
  set(${out} ${root} PARENT_SCOPE)
endfunction()

function(keel_module name)
  keel_module_dir(${name} dir)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${dir}/*.cpp)
  # Modules nested inside this folder are their own libraries.
  keel_nested_inside(${dir} nested)
  foreach(n ${nested})
    list(FILTER srcs EXCLUDE REGEX "/src/${n}/")
  endforeach()
  keel_include_root(${name} root)
  set(deps)
  foreach(d ${ARGN})
    list(APPEND deps keel_${d})
  endforeach()
  if(srcs)
    add_library(keel_${name} STATIC ${srcs})
    target_include_directories(keel_${name} PUBLIC ${root})
    target_link_libraries(keel_${name} PUBLIC ${deps} keel_deps)
  else()
    add_library(keel_${name} INTERFACE)
    target_include_directories(keel_${name} INTERFACE ${root})
    target_link_libraries(keel_${name} INTERFACE ${deps} keel_deps)
  endif()
  add_dependencies(keel_${name} keel_layering)
endfunction()
