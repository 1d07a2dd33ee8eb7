#include "cupti_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace detrace::tracer {
namespace {

void* openCupti(std::string& path) {
  if (const char* env = std::getenv("DETRACE_CUPTI_LIB"); env && *env) {
    path = env;
    return dlopen(env, RTLD_NOW | RTLD_LOCAL);
  }
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
      path = name;
      return h;
    }
  }
  for (const char* name : {"libcupti.so.13", DETRACE_CUPTI_DEFAULT_PATH}) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
      path = name;
      return h;
    }
  }
  path = DETRACE_CUPTI_DEFAULT_PATH;
  return nullptr;
}

}  // namespace

bool CuptiApi::load(std::string& error) {
  void* h = openCupti(path);
  if (h == nullptr) {
    const char* why = dlerror();
    error = "cannot load CUPTI (" + path + (why ? std::string(": ") + why : std::string()) +
            "); set DETRACE_CUPTI_LIB to libcupti.so";
    return false;
  }
  bool ok = true;
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (fn == nullptr) {
      ok = false;
      error = path + " lacks " + name;
    }
  };
  get(subscribe, "cuptiSubscribe");
  get(unsubscribe, "cuptiUnsubscribe");
  get(enable_callback, "cuptiEnableCallback");
  get(enable_domain, "cuptiEnableDomain");
  get(activity_enable, "cuptiActivityEnable");
  get(activity_disable, "cuptiActivityDisable");
  get(register_callbacks, "cuptiActivityRegisterCallbacks");
  get(set_attribute, "cuptiActivitySetAttribute");
  get(next_record, "cuptiActivityGetNextRecord");
  get(dropped_records, "cuptiActivityGetNumDroppedRecords");
  get(flush_all, "cuptiActivityFlushAll");
  get(timestamp, "cuptiGetTimestamp");
  get(result_string, "cuptiGetResultString");
  get(device_id, "cuptiGetDeviceId");
  get(stream_id, "cuptiGetStreamIdEx");
  get(version, "cuptiGetVersion");
  // Optional: without it captured library ops are placed among replayed kernels by their digests.
  graph_node_id = reinterpret_cast<decltype(graph_node_id)>(dlsym(h, "cuptiGetGraphNodeId"));
  // Optional: without it a context's teardown writes every context's records held for ordering.
  context_id = reinterpret_cast<decltype(context_id)>(dlsym(h, "cuptiGetContextId"));
  return ok;
}

const char* CuptiApi::errorText(CUptiResult r) const {
  const char* s = nullptr;
  if (result_string == nullptr || result_string(r, &s) != CUPTI_SUCCESS || s == nullptr) {
    return "unknown CUPTI error";
  }
  return s;
}

}  // namespace detrace::tracer
