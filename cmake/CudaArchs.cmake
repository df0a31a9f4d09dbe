# Which CUDA architectures to compile (issue 31, item 12). Every architecture is a full
# pass of nvcc over every kernel, so the fat list of six takes 45+ minutes on two cores.
#
#   KEEL_CUDA_ARCHS=auto (the default): the GPUs present, as `nvidia-smi` reports their
#     compute capability ("9.0" -> 90), each once; the fat list when no GPU is visible
#     (a build machine without a GPU, a container without the driver).
#   KEEL_CUDA_ARCHS=all: the fat list (a binary to package for other machines).
#   KEEL_CUDA_ARCHS="80;90": exactly those.
# -D wins over the environment variable of the same name. The configure step says which
# it chose and why.
set(KEEL_CUDA_FAT_ARCHS "80;86;89;90;100;120")

# keel_resolve_cuda_archs(SPEC SMI OUT_ARCHS OUT_REASON): SPEC is auto, all or a list;
# SMI the nvidia-smi program (empty when there is none).
function(keel_resolve_cuda_archs spec smi out_archs out_reason)
  string(TOLOWER "${spec}" lower)
  if(lower STREQUAL "all")
    set(${out_archs} "${KEEL_CUDA_FAT_ARCHS}" PARENT_SCOPE)
    set(${out_reason} "all architectures (KEEL_CUDA_ARCHS=all)" PARENT_SCOPE)
    return()
  endif()
  if(NOT lower STREQUAL "auto" AND NOT lower STREQUAL "")
    set(${out_archs} "${spec}" PARENT_SCOPE)
    set(${out_reason} "as asked (KEEL_CUDA_ARCHS=${spec})" PARENT_SCOPE)
    return()
  endif()
  set(found "")
  if(smi)
    execute_process(COMMAND ${smi} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 20)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" lines "${caps}")
      foreach(line IN LISTS lines)
        string(STRIP "${line}" line)
        if(line MATCHES "^([0-9]+)\\.([0-9]+)$")
          list(APPEND found "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
        endif()
      endforeach()
      list(REMOVE_DUPLICATES found)
    endif()
  endif()
  if(found)
    set(${out_archs} "${found}" PARENT_SCOPE)
    set(${out_reason}
        "the GPUs present (nvidia-smi); -DKEEL_CUDA_ARCHS=all builds for every GPU" PARENT_SCOPE)
  else()
    set(${out_archs} "${KEEL_CUDA_FAT_ARCHS}" PARENT_SCOPE)
    set(${out_reason} "all architectures: no GPU visible to nvidia-smi" PARENT_SCOPE)
  endif()
endfunction()
