// The client side of `detrace attach`: finds the control sockets of a traced process (by pid) or
// of every live process of a run (by run directory) and sends them one request each. The traced
// side is tracer/src/control.h; the protocol is control_protocol.h.
#pragma once

#include <cstdint>
#include <utility>
#include <string>
#include <vector>

#include <sys/types.h>

#include "detrace/base/status.h"
#include "detrace/tracer/control_protocol.h"

namespace detrace::tracer {

struct AttachTarget {
  pid_t pid = 0;
  std::string socket;  // its control socket
};

struct AttachTargets {
  std::vector<AttachTarget> live;
  std::vector<pid_t> exited;  // processes of the run that left a pointer file and are gone
  // Running processes of the run that no longer listen on the socket their pointer file names:
  // they exec'd another program (whose socket comes at its first CUDA, NCCL or cuBLAS call).
  std::vector<pid_t> not_listening;
  std::vector<std::pair<pid_t, int64_t>> other_users;  // running processes of another uid: pid, uid
};

// "PID" or "RUN_DIR" to control sockets. Errors say what to do: no such process, a process of
// another user, a process that is not recorded or has no socket yet, a run with no live process.
Result<AttachTargets> findAttachTargets(const std::string& pid_or_run_dir);

// Sends one request and waits (at most timeout_ms) for the reply. A refusal by the process (an
// "error" reply) is a Reply with ok = false; failing to reach it is an error Status.
Result<control::Reply> sendControlRequest(const AttachTarget& target,
                                          const control::Request& request, int timeout_ms = 30000);

}  // namespace detrace::tracer
