// detrace as an NCCL profiler plugin (API v5, NCCL 2.28): NCCL loads the tracer library named by
// NCCL_PROFILER_PLUGIN and calls it for every collective and point-to-point operation with the
// algorithm, protocol and channel count it chose. Those choices are not in any API argument, and
// kernel names do not carry the protocol reliably, so this is the only sound source for them.
//
// The plugin only describes what NCCL chose and hands it to a sink that the tracer installs; it keeps
// no state per operation. Runs on NCCL's threads: no allocation per event, no exceptions, always
// returns success (a profiler must never change NCCL's behaviour).
#pragma once

#include <cstddef>
#include <cstdint>

namespace detrace::tracer {

struct NcclChoice {
  uint64_t comm_id = 0;     // NCCL's communicator id (the same on every rank)
  int rank = -1;            // this rank in the communicator
  int nranks = -1;
  bool p2p = false;         // Send/Recv rather than a collective
  uint64_t seq = 0;         // NCCL's per-communicator collective sequence number (collectives)
  const char* func = "";    // "AllReduce", "Send", ... (static strings owned by NCCL)
  const char* datatype = "";
  const char* algo = "";    // "Ring", "Tree", ... ("" for p2p)
  const char* proto = "";   // "LL", "LL128", "Simple" ("" for p2p)
  size_t count = 0;
  int root_or_peer = -1;
  int channels = -1;
  int warps = -1;
  const void* send = nullptr;
  const void* recv = nullptr;
};

// Called for every operation NCCL profiles; must not throw. nullptr disables reporting.
using NcclChoiceSink = void (*)(const NcclChoice& choice) noexcept;
void setNcclChoiceSink(NcclChoiceSink sink);

// Communicator facts from the plugin's init, for rank discovery.
using NcclCommSink = void (*)(uint64_t comm_id, int rank, int nranks) noexcept;
void setNcclCommSink(NcclCommSink sink);

// How often NCCL initialized the plugin (once per communicator): 0 in a process that made NCCL
// calls means NCCL never loaded it (an NCCL without API v5, before 2.28, or another plugin named
// by NCCL_PROFILER_PLUGIN), and its calls carry no algorithm, protocol or channel count.
int64_t ncclProfilerInits() noexcept;

}  // namespace detrace::tracer
