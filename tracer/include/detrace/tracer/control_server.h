// ControlServer: the Unix-socket end of `detrace attach` inside a traced process. One small
// thread accepts connections, checks each peer's uid (SO_PEERCRED; control_protocol.h's
// checkPeer), reads one request line, hands it to the handler and writes the reply.
//
// It runs inside someone else's process, so: the thread blocks every signal (the host's signals
// go to the host's threads), every socket is close-on-exec, replies are sent with MSG_NOSIGNAL (a
// vanished client never raises SIGPIPE in the host), reads have a deadline and a length cap, one
// client is served at a time, and nothing throws out of the thread. Plain C++ (no CUDA): the CPU
// tests run it for real.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <sys/types.h>

#include "detrace/base/status.h"
#include "detrace/tracer/control_protocol.h"

namespace detrace::tracer {

struct ControlServerOptions {
  std::string dir;        // private directory for the socket (made 0700 if missing)
  pid_t pid = 0;          // names the socket: <dir>/<pid>.sock
  uid_t allowed_uid = 0;  // the only uid that may connect (the process's own)
  int read_timeout_ms = 2000;
  // Answers a request; runs on the server's thread. Exceptions become error replies.
  std::function<control::Reply(const control::Request&)> handler;
  // Where refusals and failures are reported (one line each); default: stderr with "detrace:".
  std::function<void(const std::string&)> log;
};

class ControlServer {
 public:
  // Makes the directory private (ensurePrivateDirectory), binds the socket (mode 0600), listens
  // and starts the thread. A stale socket of a dead process with the same pid is replaced.
  static Result<std::unique_ptr<ControlServer>> start(ControlServerOptions options);
  ~ControlServer();  // stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& path() const;
  // Stops the thread, closes the socket and removes its file. Idempotent.
  void stop();
  // The same, waiting for the thread at most `limit`: false if a request was still being answered
  // then. The thread is left to end by itself, so the server must then never be destroyed.
  bool stop(std::chrono::milliseconds limit);
  // In a child after fork(): the thread did not survive and the socket belongs to the parent.
  // Closes this process's copies of the descriptors without touching the socket file.
  void abandonAfterFork();

  class Impl;

 private:
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace detrace::tracer
