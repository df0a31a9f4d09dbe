#include "exec/parallel/nccl_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace keel::parallel::nccl {

namespace {

void *open_first(const char *env, const std::vector<const char *> &names, std::string &tried) {
  std::vector<const char *> order;
  if (const char *p = std::getenv(env); p && *p) order.push_back(p);
  order.insert(order.end(), names.begin(), names.end());
  for (const char *n : order) {
    // RTLD_GLOBAL: NCCL itself resolves CUDA runtime symbols at run time.
    if (void *h = ::dlopen(n, RTLD_NOW | RTLD_GLOBAL)) return h;
    const char *e = ::dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (e ? e : n);
  }
  return nullptr;
}

template <typename F>
void bind(void *lib, const char *name, F &fn, std::string &missing) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
}

}  // namespace

std::shared_ptr<const Api> try_load(std::string *why) {
  std::string tried;
  void *nccl = open_first("KEEL_NCCL_LIBRARY", {"libnccl.so.2", "libnccl.so"}, tried);
  if (!nccl) {
    if (why) *why = "cannot load libnccl.so.2 (set KEEL_NCCL_LIBRARY): " + tried;
    return nullptr;
  }
  tried.clear();
  void *rt = open_first("KEEL_CUDART_LIBRARY",
                        {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}, tried);
  if (!rt) {
    if (why) *why = "cannot load the CUDA runtime (set KEEL_CUDART_LIBRARY): " + tried;
    return nullptr;
  }
  auto api = std::make_shared<Api>();
  std::string missing;
  bind(nccl, "ncclGetVersion", api->GetVersion, missing);
  bind(nccl, "ncclGetUniqueId", api->GetUniqueId, missing);
  bind(nccl, "ncclCommInitRankConfig", api->CommInitRankConfig, missing);
  bind(nccl, "ncclAllReduce", api->AllReduce, missing);
  bind(nccl, "ncclBroadcast", api->Broadcast, missing);
  bind(nccl, "ncclCommGetAsyncError", api->CommGetAsyncError, missing);
  bind(nccl, "ncclCommAbort", api->CommAbort, missing);
  bind(nccl, "ncclCommDestroy", api->CommDestroy, missing);
  bind(nccl, "ncclGetErrorString", api->GetErrorString, missing);
  bind(rt, "cudaGetDeviceCount", api->GetDeviceCount, missing);
  bind(rt, "cudaSetDevice", api->SetDevice, missing);
  bind(rt, "cudaMalloc", api->Malloc, missing);
  bind(rt, "cudaFree", api->Free, missing);
  bind(rt, "cudaMemcpy", api->Memcpy, missing);
  bind(rt, "cudaStreamCreate", api->StreamCreate, missing);
  bind(rt, "cudaStreamDestroy", api->StreamDestroy, missing);
  bind(rt, "cudaStreamQuery", api->StreamQuery, missing);
  bind(rt, "cudaGetErrorString", api->CudaGetErrorString, missing);
  if (!missing.empty()) {
    if (why) *why = "NCCL or CUDA runtime without " + missing;
    return nullptr;
  }
  if (api->GetVersion(&api->version) != kNcclSuccess || api->version < 21800) {
    if (why) *why = "NCCL " + std::to_string(api->version) + " is older than 2.18";
    return nullptr;
  }
  return api;
}

std::shared_ptr<const Api> load() {
  std::string why;
  auto api = try_load(&why);
  if (!api) throw Error(ErrorCode::kUnavailable, "nccl: " + why);
  return api;
}

}  // namespace keel::parallel::nccl
