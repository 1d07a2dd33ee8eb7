// The control protocol behind `detrace attach`: how a traced process is told to start or stop
// capturing, and who may tell it. Plain C++ (no sockets, no CUDA) so CPU tests drive every rule.
//
// One request per connection, one line each way, over a Unix stream socket:
//
//   request := verb *(" " key "=" value) "\n"      verb: start | stop | status
//                                                  start takes capture=meta|digest|full and
//                                                  window=UNIT:A:B (both optional)
//   reply   := "ok" *(" " key "=" value) "\n"      e.g. ok pid=41 state=capturing capture=digest
//            | "error " message "\n"               one sentence a user can act on
//
// Values are percent-encoded (%XX) outside [A-Za-z0-9._:/,+@-], so paths with spaces survive.
// Lines are at most kMaxLineBytes. A status reply carries protocol=kProtocolVersion; a client
// refuses a reply of another version.
//
// Where the socket lives: a private directory, $XDG_RUNTIME_DIR/detrace when XDG_RUNTIME_DIR is
// set (and absolute), else /tmp/detrace-<uid>; made mode 0700 and refused unless it is a real
// directory owned by the user with no group or other permissions (anyone else could then replace
// or reach the sockets). The socket is <dir>/<pid>.sock, mode 0600. The traced process also
// leaves RUN_DIR/proc-<pid>.dtrace-control naming its socket, so `detrace attach RUN_DIR`
// finds every process of a run.
//
// Who may connect: only the traced process's own user (SO_PEERCRED's uid); checkPeer() decides,
// and the server logs every refusal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/types.h>
#include <sys/un.h>

#include "detrace/base/status.h"

namespace detrace::tracer::control {

inline constexpr int kProtocolVersion = 1;
inline constexpr size_t kMaxLineBytes = 4096;
// Suffix of the file a traced process leaves in its run directory: proc-<pid><suffix>.
inline constexpr const char* kPointerSuffix = ".dtrace-control";

enum class Verb { kStart, kStop, kStatus };
const char* verbName(Verb verb);
Result<Verb> parseVerb(std::string_view text);

struct Request {
  Verb verb = Verb::kStatus;
  std::string capture;  // start: meta|digest|full; "" keeps the process's current level
  std::string window;   // start: UNIT:A:B counted from the start; "" records until stop
};

// Parses one request line (without or with its trailing newline).
Result<Request> parseRequest(std::string_view line);
// The request as one line, newline included.
std::string formatRequest(const Request& request);

struct Reply {
  bool ok = true;
  std::string error;  // when !ok
  std::vector<std::pair<std::string, std::string>> fields;

  static Reply failure(std::string message);
  // The value of `key`, "" if absent.
  std::string get(std::string_view key) const;
  void set(std::string key, std::string value);
};

std::string formatReply(const Reply& reply);
Result<Reply> parseReply(std::string_view line);

// %XX-encoding of a value (see above), and back; decode fails on a malformed escape.
std::string encodeValue(std::string_view value);
Result<std::string> decodeValue(std::string_view text);

// Whether a peer may control this process: only when it runs as the process's own user.
struct PeerDecision {
  bool allowed = false;
  std::string reason;  // why a refused peer was refused, for the log and the peer
};
PeerDecision checkPeer(uid_t peer_uid, pid_t peer_pid, uid_t own_uid);

// The private directory for the sockets of user `uid`: $XDG_RUNTIME_DIR/detrace when
// `xdg_runtime_dir` is set and absolute, else /tmp/detrace-<uid>.
std::string controlDirectory(uid_t uid, const char* xdg_runtime_dir);
// Whether `dir` may hold the private directory of `uid`'s sockets: an absolute directory of its
// own (or root's) that no other user may write to, unless sticky. Not another user's
// XDG_RUNTIME_DIR, kept by `su` without `-` or `sudo -E`: its owner could swap names in it.
bool runtimeDirectoryUsable(const char* dir, uid_t uid);
// Every place a socket of `uid` may be, without duplicates: the XDG one first (when set and
// usable), then /tmp/detrace-<uid>.
std::vector<std::string> controlDirectories(uid_t uid, const char* xdg_runtime_dir);
// <dir>/<pid>.sock
std::string socketPath(const std::string& dir, pid_t pid);
// The Unix socket address of `path`; an error naming the limit when it is too long.
Result<sockaddr_un> unixAddress(const std::string& path);
// RUN_DIR/proc-<pid>.dtrace-control
std::string pointerPath(const std::string& run_dir, pid_t pid);
// The pid in a pointer file's name ("proc-41.dtrace-control" -> 41), or -1.
pid_t pidOfPointerName(std::string_view file_name);

// Makes `dir` (mode 0700) if it is missing, then checks it: a real directory (not a symlink),
// owned by `uid`, with no group or other permission bits. The error says what is wrong.
Status ensurePrivateDirectory(const std::string& dir, uid_t uid);

}  // namespace detrace::tracer::control
