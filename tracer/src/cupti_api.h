// The CUPTI functions the tracer uses, loaded with dlopen at InitializeInjection.
//
// Why not link libcupti: the tracer is also LD_PRELOADed into every process the recorded command
// spawns (shells, compilers, data loaders). Linking CUPTI would load it into all of them and pin
// one CUPTI build; loading it only when the CUDA driver calls InitializeInjection keeps the
// preload inert elsewhere. Search order: $DETRACE_CUPTI_LIB, an already loaded libcupti, then
// libcupti.so.13 on the loader path, then the CUDA toolkit detrace was built with.
#pragma once

#include <cupti.h>

#include <string>

namespace detrace::tracer {

struct CuptiApi {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiEnableDomain) enable_domain = nullptr;
  decltype(&cuptiActivityEnable) activity_enable = nullptr;
  decltype(&cuptiActivityDisable) activity_disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivitySetAttribute) set_attribute = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetDeviceId) device_id = nullptr;
  decltype(&cuptiGetStreamIdEx) stream_id = nullptr;
  decltype(&cuptiGetVersion) version = nullptr;
  decltype(&cuptiGetGraphNodeId) graph_node_id = nullptr;  // optional: nullptr if absent
  decltype(&cuptiGetContextId) context_id = nullptr;       // optional: nullptr if absent
  std::string path;  // the file loaded

  // Loads CUPTI; false (with `error` set) if it cannot be found or lacks a function.
  bool load(std::string& error);
  // "CUPTI_ERROR_..." text of a result.
  const char* errorText(CUptiResult r) const;
};

}  // namespace detrace::tracer
