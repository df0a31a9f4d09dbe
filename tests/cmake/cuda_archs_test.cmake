# cmake -DSOURCE_DIR=... -DWORK_DIR=... -P cuda_archs_test.cmake: checks
# keel_resolve_cuda_archs (cmake/CudaArchs.cmake) with stand-in nvidia-smi programs.
include(${SOURCE_DIR}/cmake/CudaArchs.cmake)
file(MAKE_DIRECTORY ${WORK_DIR})

function(expect spec smi want_archs want_reason)
  keel_resolve_cuda_archs("${spec}" "${smi}" archs reason)
  if(NOT archs STREQUAL want_archs)
    message(FATAL_ERROR "spec '${spec}' smi '${smi}': archs '${archs}', want '${want_archs}'")
  endif()
  if(NOT reason MATCHES "${want_reason}")
    message(FATAL_ERROR "spec '${spec}': reason '${reason}' lacks '${want_reason}'")
  endif()
endfunction()

function(fake_smi name body)
  file(WRITE ${WORK_DIR}/${name} "#!/bin/sh\n${body}\n")
  file(CHMOD ${WORK_DIR}/${name} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
endfunction()

fake_smi(two_h200 "printf '9.0\\n9.0\\n'")
fake_smi(mixed "printf '8.6\\n12.0\\n'")
fake_smi(no_driver "echo 'NVIDIA-SMI has failed' >&2; exit 9")
fake_smi(no_gpu "exit 0")

# One H200 twice: sm_90 once, and the message says why.
expect(auto ${WORK_DIR}/two_h200 "90" "GPUs present")
expect(auto ${WORK_DIR}/mixed "86;120" "GPUs present")
# No driver, no GPU, no nvidia-smi at all: the fat list.
expect(auto ${WORK_DIR}/no_driver "80;86;89;90;100;120" "no GPU visible")
expect(auto ${WORK_DIR}/no_gpu "80;86;89;90;100;120" "no GPU visible")
expect(auto "" "80;86;89;90;100;120" "no GPU visible")
# Asked for: all (any case) is the fat list even with a GPU; a list is taken as given.
expect(all ${WORK_DIR}/two_h200 "80;86;89;90;100;120" "KEEL_CUDA_ARCHS=all")
expect(ALL ${WORK_DIR}/two_h200 "80;86;89;90;100;120" "KEEL_CUDA_ARCHS=all")
expect("80;90" ${WORK_DIR}/mixed "80;90" "as asked")
message(STATUS "cuda archs: all cases pass")
