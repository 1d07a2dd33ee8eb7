// The control protocol of `detrace attach`. See control_protocol.h.
#include "detrace/tracer/control_protocol.h"

#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace detrace::tracer::control {
namespace {

constexpr std::string_view kSpace = " \t\r\n";

bool plainByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("._:/,+@-", c) != nullptr;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string_view trimLine(std::string_view line) {
  while (!line.empty() && kSpace.find(line.back()) != std::string_view::npos) line.remove_suffix(1);
  while (!line.empty() && kSpace.find(line.front()) != std::string_view::npos)
    line.remove_prefix(1);
  return line;
}

// Splits "a b  c" into words.
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    size_t start = line.find_first_not_of(kSpace, i);
    if (start == std::string_view::npos) break;
    size_t end = line.find_first_of(kSpace, start);
    if (end == std::string_view::npos) end = line.size();
    out.push_back(line.substr(start, end - start));
    i = end;
  }
  return out;
}

// "key=value" with the value decoded.
Result<std::pair<std::string, std::string>> keyValue(std::string_view word) {
  size_t eq = word.find('=');
  if (eq == 0 || eq == std::string_view::npos) {
    return makeError(ErrorCode::kInvalidArgument, "expected key=value, got '{}'", word);
  }
  DETRACE_ASSIGN_OR_RETURN(std::string value, decodeValue(word.substr(eq + 1)));
  return std::pair{std::string(word.substr(0, eq)), std::move(value)};
}

}  // namespace

const char* verbName(Verb verb) {
  switch (verb) {
    case Verb::kStart:
      return "start";
    case Verb::kStop:
      return "stop";
    case Verb::kStatus:
      return "status";
  }
  return "status";
}

Result<Verb> parseVerb(std::string_view text) {
  for (Verb v : {Verb::kStart, Verb::kStop, Verb::kStatus}) {
    if (text == verbName(v)) return v;
  }
  return makeError(ErrorCode::kInvalidArgument, "unknown action '{}': use start, stop or status",
                   text);
}

std::string encodeValue(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (plainByte(c)) {
      out += c;
    } else {
      auto b = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  return out;
}

Result<std::string> decodeValue(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    bool complete = i + 2 < text.size();
    int hi = complete ? hexDigit(text[i + 1]) : -1;
    int lo = complete ? hexDigit(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return makeError(ErrorCode::kInvalidArgument, "malformed %-escape in '{}'", text);
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Result<Request> parseRequest(std::string_view line) {
  if (line.size() > kMaxLineBytes) {
    return makeError(ErrorCode::kInvalidArgument, "request longer than {} bytes", kMaxLineBytes);
  }
  std::vector<std::string_view> w = words(trimLine(line));
  if (w.empty())
    return makeError(ErrorCode::kInvalidArgument, "empty request: send start, stop or status");
  Request r;
  DETRACE_ASSIGN_OR_RETURN(r.verb, parseVerb(w[0]));
  for (size_t i = 1; i < w.size(); ++i) {
    DETRACE_ASSIGN_OR_RETURN(auto kv, keyValue(w[i]));
    if (r.verb != Verb::kStart) {
      return makeError(ErrorCode::kInvalidArgument,
                       "{} takes no options ({} given); --capture and "
                       "--window go with start",
                       verbName(r.verb), kv.first);
    }
    if (kv.first == "capture") {
      r.capture = std::move(kv.second);
    } else if (kv.first == "window") {
      r.window = std::move(kv.second);
    } else {
      return makeError(ErrorCode::kInvalidArgument,
                       "unknown option '{}' (start takes capture and window)", kv.first);
    }
  }
  return r;
}

std::string formatRequest(const Request& request) {
  std::string out = verbName(request.verb);
  if (!request.capture.empty()) out += " capture=" + encodeValue(request.capture);
  if (!request.window.empty()) out += " window=" + encodeValue(request.window);
  out += '\n';
  return out;
}

Reply Reply::failure(std::string message) {
  Reply r;
  r.ok = false;
  r.error = std::move(message);
  return r;
}

std::string Reply::get(std::string_view key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return v;
  }
  return "";
}

void Reply::set(std::string key, std::string value) {
  for (auto& [k, v] : fields) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  fields.emplace_back(std::move(key), std::move(value));
}

std::string formatReply(const Reply& reply) {
  std::string out;
  if (!reply.ok) {
    out = "error ";
    for (char c : reply.error) out += (c == '\n' || c == '\r') ? ' ' : c;
    if (reply.error.empty()) out += "unknown error";
  } else {
    out = "ok";
    for (const auto& [k, v] : reply.fields) out += " " + k + "=" + encodeValue(v);
  }
  if (out.size() >= kMaxLineBytes && !reply.ok) {
    out.resize(kMaxLineBytes - 1);  // an error's text may be cut
  } else if (out.size() >= kMaxLineBytes) {
    // Never cut inside a field (the client would read a broken one as an error): the fields that
    // fit, in order, and a mark that some were left out.
    const std::string mark = " truncated=1";
    out = "ok";
    for (const auto& [k, v] : reply.fields) {
      std::string field = " " + k + "=" + encodeValue(v);
      if (out.size() + field.size() + mark.size() < kMaxLineBytes) out += field;
    }
    out += mark;
  }
  out += '\n';
  return out;
}

Result<Reply> parseReply(std::string_view line) {
  line = trimLine(line);
  if (line.rfind("error", 0) == 0 && (line.size() == 5 || line[5] == ' ')) {
    return Reply::failure(std::string(trimLine(line.substr(5))));
  }
  std::vector<std::string_view> w = words(line);
  if (w.empty() || w[0] != "ok") {
    return makeError(ErrorCode::kInvalidArgument, "not a detrace control reply: '{}'",
                     line.substr(0, 80));
  }
  Reply r;
  for (size_t i = 1; i < w.size(); ++i) {
    DETRACE_ASSIGN_OR_RETURN(auto kv, keyValue(w[i]));
    r.fields.push_back(std::move(kv));
  }
  return r;
}

PeerDecision checkPeer(uid_t peer_uid, pid_t peer_pid, uid_t own_uid) {
  if (peer_uid == own_uid) return {true, ""};
  return {false, fmt::format("uid {} (pid {}) may not control this process: only its own user "
                             "(uid {}) may",
                             peer_uid, peer_pid, own_uid)};
}

std::string controlDirectory(uid_t uid, const char* xdg_runtime_dir) {
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/') {
    std::string dir = xdg_runtime_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir + "/detrace";
  }
  return fmt::format("/tmp/detrace-{}", uid);
}

bool runtimeDirectoryUsable(const char* dir, uid_t uid) {
  struct stat st {};
  if (dir == nullptr || dir[0] != '/' || ::stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  // Another user's (a shell from su without -, sudo -E): they could swap our directory in it.
  if (st.st_uid != uid && st.st_uid != 0) return false;
  return (st.st_mode & 022) == 0 || (st.st_mode & S_ISVTX) != 0;  // or writable, but sticky
}

std::vector<std::string> controlDirectories(uid_t uid, const char* xdg_runtime_dir) {
  std::string tmp = controlDirectory(uid, nullptr);
  if (!runtimeDirectoryUsable(xdg_runtime_dir, uid)) return {tmp};
  std::vector<std::string> dirs = {controlDirectory(uid, xdg_runtime_dir)};
  if (dirs[0] != tmp) dirs.push_back(tmp);
  return dirs;
}

std::string socketPath(const std::string& dir, pid_t pid) {
  return fmt::format("{}/{}.sock", dir, pid);
}

Result<sockaddr_un> unixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return makeError(ErrorCode::kInvalidArgument,
                     "socket path {} is longer than {} bytes; set "
                     "XDG_RUNTIME_DIR to a shorter directory",
                     path, sizeof addr.sun_path - 1);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

std::string pointerPath(const std::string& run_dir, pid_t pid) {
  return fmt::format("{}/proc-{}{}", run_dir, pid, kPointerSuffix);
}

pid_t pidOfPointerName(std::string_view name) {
  std::string_view suffix = kPointerSuffix;
  if (name.rfind("proc-", 0) != 0 || name.size() <= 5 + suffix.size() ||
      name.substr(name.size() - suffix.size()) != suffix) {
    return -1;
  }
  std::string_view digits = name.substr(5, name.size() - 5 - suffix.size());
  if (digits.size() > 10) return -1;  // more than any pid_t
  int64_t pid = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    pid = pid * 10 + (c - '0');
  }
  return pid > 0 && pid <= std::numeric_limits<pid_t>::max() ? static_cast<pid_t>(pid) : -1;
}

Status ensurePrivateDirectory(const std::string& dir, uid_t uid) {
  const bool made = ::mkdir(dir.c_str(), 0700) == 0;
  if (!made && errno != EEXIST) {
    return makeError(ErrorCode::kIo, "cannot create {}: {}", dir, std::strerror(errno));
  }
  // Inspected and changed through one descriptor, never by path again: whoever can write the
  // parent could swap the name for a symlink in between.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return makeError(ErrorCode::kIo, "{} is not a directory (a symlink or a file); remove it", dir);
    }
    return makeError(ErrorCode::kIo, "cannot open {}: {}", dir, std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return makeError(ErrorCode::kIo, "cannot inspect {}: {}", dir, std::strerror(errno));
  }
  // mkdir's mode is masked by the umask: make a directory we just made exactly 0700.
  if (made && st.st_uid == uid && (st.st_mode & 0777) != 0700) {
    if (::fchmod(fd, 0700) != 0) {
      return makeError(ErrorCode::kIo, "cannot set the mode of {}: {}", dir, std::strerror(errno));
    }
    st.st_mode = (st.st_mode & ~07777) | 0700;
  }
  if (st.st_uid != uid) {
    return makeError(ErrorCode::kIo,
                     "{} belongs to uid {}, not to uid {}; remove it or set "
                     "XDG_RUNTIME_DIR to a directory of your own",
                     dir, st.st_uid, uid);
  }
  if ((st.st_mode & 077) != 0) {
    return makeError(ErrorCode::kIo,
                     "{} is accessible to other users (mode {:o}); run chmod 700 {}", dir,
                     st.st_mode & 0777, dir);
  }
  return Status::ok();
}

}  // namespace detrace::tracer::control
