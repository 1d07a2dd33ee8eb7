// `detrace attach` and signal commits without a GPU: the control protocol, the private socket
// directory, the uid check, the socket server for real, the attach client, and the real tracer
// (libdetrace_tracer.so preloaded into a fake-NCCL program, tests/tracer/control_app.cc) paused,
// started, stopped and signalled.
#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cstring>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "detrace/base/held_fd.h"
#include "detrace/db/reader.h"
#include "detrace/tracer/attach.h"
#include "detrace/tracer/control_protocol.h"
#include "detrace/tracer/control_server.h"
#include "detrace/tracer/run_processes.h"

#include "../db/test_util.h"
#include "common/shell.h"

namespace detrace {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using tracer::ControlServer;
using tracer::ControlServerOptions;
namespace control = tracer::control;

// ---------------------------------------------------------------- protocol

TEST(ControlProtocol, RequestsRoundTrip) {
  control::Request r;
  r.verb = control::Verb::kStart;
  r.capture = "meta";
  r.window = "steps:0:3";
  std::string line = control::formatRequest(r);
  EXPECT_EQ(line, "start capture=meta window=steps:0:3\n");
  auto back = control::parseRequest(line);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->verb, control::Verb::kStart);
  EXPECT_EQ(back->capture, "meta");
  EXPECT_EQ(back->window, "steps:0:3");
  EXPECT_EQ(control::parseRequest("  status \r\n")->verb, control::Verb::kStatus);
  EXPECT_EQ(control::parseRequest("stop")->verb, control::Verb::kStop);
}

TEST(ControlProtocol, BadRequestsSayWhatIsAccepted) {
  auto unknown = control::parseRequest("pause");
  ASSERT_FALSE(unknown.isOk());
  EXPECT_NE(unknown.status().message().find("start, stop or status"), std::string::npos);
  auto stop_with_option = control::parseRequest("stop capture=meta");
  ASSERT_FALSE(stop_with_option.isOk());
  EXPECT_NE(stop_with_option.status().message().find("go with start"), std::string::npos);
  EXPECT_FALSE(control::parseRequest("start level=meta").isOk());
  EXPECT_FALSE(control::parseRequest("start capture").isOk());
  EXPECT_FALSE(control::parseRequest("start window=%4").isOk());
  EXPECT_FALSE(control::parseRequest("").isOk());
  EXPECT_FALSE(control::parseRequest(std::string(control::kMaxLineBytes + 1, 's')).isOk());
}

TEST(ControlProtocol, RepliesRoundTripWithAwkwardValues) {
  control::Reply r;
  r.set("pid", "41");
  r.set("trace", "/tmp/my run/proc-41.dtrace");
  r.set("window", "a=b%c");
  r.set("pid", "42");  // replaces
  std::string line = control::formatReply(r);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(line.find(' ', 3), line.find(" trace="));  // the space in the path is encoded
  auto back = control::parseReply(line);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_TRUE(back->ok);
  EXPECT_EQ(back->get("pid"), "42");
  EXPECT_EQ(back->get("trace"), "/tmp/my run/proc-41.dtrace");
  EXPECT_EQ(back->get("window"), "a=b%c");
  EXPECT_EQ(back->get("absent"), "");

  auto err = control::parseReply(control::formatReply(control::Reply::failure("no\nway")));
  ASSERT_TRUE(err.isOk());
  EXPECT_FALSE(err->ok);
  EXPECT_EQ(err->error, "no way");
  EXPECT_FALSE(control::parseReply("HTTP/1.1 200 OK").isOk());
}

TEST(ControlProtocol, ValueEncoding) {
  for (std::string v : {"", "plain-1.2:3/4,5+6@7_8", "sp ace", "%25", "\xff\x01=\n"}) {
    auto back = control::decodeValue(control::encodeValue(v));
    ASSERT_TRUE(back.isOk());
    EXPECT_EQ(*back, v);
  }
  EXPECT_EQ(control::encodeValue("a b"), "a%20b");
  EXPECT_FALSE(control::decodeValue("%zz").isOk());
  EXPECT_FALSE(control::decodeValue("abc%2").isOk());
}

// ---------------------------------------------------------------- who may connect

TEST(ControlAccess, OnlyTheProcesssOwnUserIsAllowed) {
  EXPECT_TRUE(control::checkPeer(1000, 77, 1000).allowed);
  control::PeerDecision other = control::checkPeer(1001, 77, 1000);
  EXPECT_FALSE(other.allowed);
  EXPECT_NE(other.reason.find("uid 1001"), std::string::npos) << other.reason;
  EXPECT_NE(other.reason.find("pid 77"), std::string::npos) << other.reason;
  EXPECT_NE(other.reason.find("uid 1000"), std::string::npos) << other.reason;
  EXPECT_FALSE(control::checkPeer(0, 1, 1000).allowed) << "root is another user too";
}

TEST(ControlAccess, SocketDirectories) {
  EXPECT_EQ(control::controlDirectory(1000, "/run/user/1000"), "/run/user/1000/detrace");
  EXPECT_EQ(control::controlDirectory(1000, "/run/user/1000/"), "/run/user/1000/detrace");
  EXPECT_EQ(control::controlDirectory(1000, nullptr), "/tmp/detrace-1000");
  EXPECT_EQ(control::controlDirectory(1000, "relative"), "/tmp/detrace-1000");
  EXPECT_EQ(control::controlDirectories(7, "/nonexistent").size(), 1u);
  EXPECT_EQ(control::controlDirectories(7, nullptr).size(), 1u);
  EXPECT_EQ(control::socketPath("/d", 41), "/d/41.sock");
  EXPECT_EQ(control::pointerPath("/run", 41), "/run/proc-41.dtrace-control");
  EXPECT_EQ(control::pidOfPointerName("proc-41.dtrace-control"), 41);
  EXPECT_EQ(control::pidOfPointerName("proc-41.dtrace"), -1);
  EXPECT_EQ(control::pidOfPointerName("proc-.dtrace-control"), -1);
  EXPECT_EQ(control::pidOfPointerName("proc-4x.dtrace-control"), -1);
  EXPECT_EQ(control::pidOfPointerName("proc-4294967297.dtrace-control"), -1) << "2^32 + 1 is not pid 1";
  EXPECT_EQ(control::pidOfPointerName("proc-99999999999.dtrace-control"), -1);
}

// A runtime directory holds the socket directory only where no other user can swap names in it:
// the user's own (or root's), not writable by others unless sticky. Another user's, as kept by
// `su` without `-`, is passed over for /tmp/detrace-<uid>.
TEST(ControlAccess, AnotherUsersOrAnOpenRuntimeDirectoryIsPassedOver) {
  TempDir tmp;
  const std::string own = tmp.file("xdg");
  ASSERT_EQ(::mkdir(own.c_str(), 0700), 0);
  const uid_t me = ::geteuid();
  EXPECT_EQ(control::controlDirectories(me, own.c_str()),
            (std::vector<std::string>{own + "/detrace", control::controlDirectory(me, nullptr)}));
  ASSERT_EQ(::chmod(own.c_str(), 0777), 0);
  EXPECT_EQ(control::controlDirectories(me, own.c_str()).size(), 1u) << "writable by anyone";
  ASSERT_EQ(::chmod(own.c_str(), 01777), 0);
  EXPECT_EQ(control::controlDirectories(me, own.c_str()).size(), 2u) << "sticky, as /tmp";
  ASSERT_EQ(::chmod(own.c_str(), 0700), 0);
  // Another user's: as root, give it away; else ask for a user it does not belong to.
  uid_t asker = me + 1;
  if (me == 0) {
    ASSERT_EQ(::chown(own.c_str(), 4242, static_cast<gid_t>(-1)), 0);
    asker = 7;
  }
  EXPECT_EQ(control::controlDirectories(asker, own.c_str()),
            std::vector<std::string>{control::controlDirectory(asker, nullptr)});
}

mode_t modeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

TEST(ControlAccess, PrivateDirectoryIsMadeAndChecked) {
  TempDir tmp;
  std::string dir = tmp.file("ctl");
  mode_t old_umask = ::umask(0);  // a careless umask must not widen the directory
  Status made = control::ensurePrivateDirectory(dir, ::geteuid());
  ::umask(old_umask);
  ASSERT_TRUE(made.isOk()) << made.message();
  EXPECT_EQ(modeOf(dir) & 0777, 0700u);
  EXPECT_TRUE(control::ensurePrivateDirectory(dir, ::geteuid()).isOk())
      << "an existing one is fine";

  Status wrong_owner = control::ensurePrivateDirectory(dir, ::geteuid() + 1);
  EXPECT_FALSE(wrong_owner.isOk());
  EXPECT_NE(wrong_owner.message().find("belongs to uid"), std::string::npos)
      << wrong_owner.message();

  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  Status open_dir = control::ensurePrivateDirectory(dir, ::geteuid());
  EXPECT_FALSE(open_dir.isOk());
  EXPECT_NE(open_dir.message().find("chmod 700"), std::string::npos) << open_dir.message();

  std::string link = tmp.file("link");
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  EXPECT_FALSE(control::ensurePrivateDirectory(link, ::geteuid()).isOk()) << "a symlink is refused";
  std::ofstream(tmp.file("file")) << "x";
  EXPECT_FALSE(control::ensurePrivateDirectory(tmp.file("file"), ::geteuid()).isOk());
}

// ---------------------------------------------------------------- the server, for real

// The address of the Unix socket at `path`.
sockaddr_un unixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  return addr;
}

// Connects to a Unix socket, sends `line` and returns the reply line ("" if none).
std::string talk(const std::string& path, const std::string& line) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un addr = unixAddress(path);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const timeval limit{10, 0};  // a server that never answers fails the test instead of hanging it
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  (void)::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
  std::string reply;
  char buf[256];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return reply;
}

struct ServerFixture {
  TempDir tmp;
  std::vector<control::Request> seen;
  std::vector<std::string> log;
  std::mutex mu;

  ControlServerOptions options(uid_t allowed) {
    ControlServerOptions o;
    o.dir = tmp.file("ctl");
    o.pid = 4242;
    o.allowed_uid = allowed;
    o.read_timeout_ms = 300;
    o.handler = [this](const control::Request& r) {
      std::lock_guard lk(mu);
      seen.push_back(r);
      control::Reply reply;
      reply.set("protocol", "1");
      reply.set("state", r.verb == control::Verb::kStart ? "capturing" : "paused");
      return reply;
    };
    o.log = [this](const std::string& line) {
      std::lock_guard lk(mu);
      log.push_back(line);
    };
    return o;
  }
};

TEST(ControlServer, ServesItsOwnUserWithA0600SocketInA0700Directory) {
  ServerFixture f;
  auto server = ControlServer::start(f.options(::geteuid()));
  ASSERT_TRUE(server.isOk()) << server.status().message();
  const std::string path = (*server)->path();
  EXPECT_EQ(path, f.tmp.file("ctl") + "/4242.sock");
  EXPECT_TRUE(S_ISSOCK(modeOf(path)));
  EXPECT_EQ(modeOf(path) & 0777, 0600u);
  EXPECT_EQ(modeOf(f.tmp.file("ctl")) & 0777, 0700u);

  auto reply = control::parseReply(talk(path, "start capture=meta\n"));
  ASSERT_TRUE(reply.isOk());
  EXPECT_TRUE(reply->ok);
  EXPECT_EQ(reply->get("state"), "capturing");
  auto bad = control::parseReply(talk(path, "frobnicate\n"));
  ASSERT_TRUE(bad.isOk());
  EXPECT_FALSE(bad->ok);
  EXPECT_NE(bad->error.find("unknown action"), std::string::npos);

  // A client that connects and says nothing is dropped after the read timeout; the next is served.
  int idle = ::socket(AF_UNIX, SOCK_STREAM, 0);
  const sockaddr_un addr = unixAddress(path);
  ASSERT_EQ(::connect(idle, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(control::parseReply(talk(path, "status\n"))->get("state"), "paused");
  ::close(idle);

  {
    std::lock_guard lk(f.mu);
    ASSERT_EQ(f.seen.size(), 2u);
    EXPECT_EQ(f.seen[0].capture, "meta");
    EXPECT_TRUE(f.log.empty());
  }
  (*server)->stop();
  EXPECT_FALSE(fs::exists(path)) << "stop removes the socket";
}

// The refusal path over a real socket: the server is told that only another uid may connect,
// so this test's own connection is the "other user" (no root needed).
TEST(ControlServer, RefusesOtherUsersAndLogsIt) {
  ServerFixture f;
  auto server = ControlServer::start(f.options(::geteuid() + 1));
  ASSERT_TRUE(server.isOk()) << server.status().message();
  auto reply = control::parseReply(talk((*server)->path(), "start\n"));
  ASSERT_TRUE(reply.isOk());
  EXPECT_FALSE(reply->ok);
  EXPECT_NE(reply->error.find("permission denied"), std::string::npos) << reply->error;
  std::lock_guard lk(f.mu);
  EXPECT_TRUE(f.seen.empty()) << "the handler never ran";
  ASSERT_EQ(f.log.size(), 1u);
  EXPECT_NE(f.log[0].find("refused a control connection"), std::string::npos) << f.log[0];
  EXPECT_NE(f.log[0].find("pid " + std::to_string(getpid())), std::string::npos) << f.log[0];
}

TEST(ControlServer, ReplacesAStaleSocketButNotALiveOne) {
  ServerFixture f;
  ASSERT_TRUE(control::ensurePrivateDirectory(f.tmp.file("ctl"), ::geteuid()).isOk());
  std::string path = f.tmp.file("ctl") + "/4242.sock";
  {  // a socket file whose process is gone
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    const sockaddr_un addr = unixAddress(path);
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
  }
  auto first = ControlServer::start(f.options(::geteuid()));
  ASSERT_TRUE(first.isOk()) << first.status().message();
  auto second = ControlServer::start(f.options(::geteuid()));
  ASSERT_FALSE(second.isOk());
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
  EXPECT_TRUE(fs::exists(path)) << "the live server's socket is untouched";
}

// The descriptor of this process that names the Unix socket bound at `path` (/proc/net/unix gives
// the socket's inode), or -1.
// `state`: "01" the listening socket, "03" a connection it accepted (which shows its path too).
int socketFdOf(const std::string& path, const std::string& state = "01") {
  std::ifstream table("/proc/net/unix");
  std::string line, inode;
  while (std::getline(table, line)) {
    if (line.size() > path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0) {
      std::istringstream fields(line);
      std::string field[7];  // Num RefCount Protocol Flags Type St Inode (then Path)
      for (std::string& f : field) fields >> f;
      if (field[5] == state) inode = field[6];
    }
  }
  if (inode.empty()) return -1;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(entry.path(), ec).string() == "socket:[" + inode + "]") {
      return std::stoi(entry.path().filename().string());
    }
  }
  return -1;
}

int listenAt(const std::string& path, int backlog = 4) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const sockaddr_un addr = unixAddress(path);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, backlog) != 0) return -1;
  return fd;
}

int connectTo(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un addr = unixAddress(path);
  (void)::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  return fd;
}

// A program that closes the control socket's descriptor and listens on the same number itself:
// the server must never accept the program's connections, nor close its socket.
TEST(ControlServer, NeverAcceptsOnASocketThatTheProgramPutOnItsNumber) {
  ServerFixture f;
  auto server = ControlServer::start(f.options(::geteuid()));
  ASSERT_TRUE(server.isOk()) << server.status().message();
  const int number = socketFdOf((*server)->path());
  ASSERT_GE(number, 0) << "the server's socket was not found in /proc/self/fd";

  const std::string theirs_path = f.tmp.file("program.sock");
  int theirs = listenAt(theirs_path);
  ASSERT_GE(theirs, 0);
  ASSERT_EQ(dup2(theirs, number), number);
  ::close(theirs);
  int their_client = connectTo(theirs_path);  // waits in the program's backlog
  int ours = connectTo((*server)->path());     // wakes the server's poll if it still sleeps
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto said = [&] {
    std::lock_guard lk(f.mu);
    return !f.log.empty();
  };
  while (!said() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard lk(f.mu);
    ASSERT_EQ(f.log.size(), 1u);
    EXPECT_NE(f.log[0].find("closed the control socket"), std::string::npos) << f.log[0];
    EXPECT_TRUE(f.seen.empty());
  }
  int accepted = ::accept4(number, nullptr, nullptr, SOCK_CLOEXEC);
  EXPECT_GE(accepted, 0) << "the program's connection was taken: " << std::strerror(errno);
  (*server)->stop();
  EXPECT_NE(fcntl(number, F_GETFD), -1) << "the program's socket was closed";
  for (int fd : {accepted, their_client, ours, number}) ::close(fd);
}

// The program closes the number of a connection the server is answering (a stop may take
// seconds) and puts a socket of its own there: the reply must not go to the program's socket,
// and the number must not be closed.
TEST(ControlServer, AnswersNoConnectionThatTheProgramPutOnItsNumber) {
  ServerFixture f;
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool entered = false, release = false;
  auto opts = f.options(::geteuid());
  opts.handler = [&](const control::Request&) {
    std::unique_lock lk(gate_mu);
    entered = true;
    gate_cv.notify_all();
    gate_cv.wait(lk, [&] { return release; });
    control::Reply reply;
    reply.set("state", "paused");
    return reply;
  };
  auto server = ControlServer::start(opts);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  int client = connectTo((*server)->path());
  ASSERT_EQ(::send(client, "status\n", 7, MSG_NOSIGNAL), 7);
  {
    std::unique_lock lk(gate_mu);
    ASSERT_TRUE(gate_cv.wait_for(lk, std::chrono::seconds(10), [&] { return entered; }));
  }
  const int number = socketFdOf((*server)->path(), "03");
  ASSERT_GE(number, 0) << "the server's connection was not found in /proc/self/fd";
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  ASSERT_EQ(dup2(pair[0], number), number);  // the program's socket on the connection's number
  {
    std::lock_guard lk(gate_mu);
    release = true;
    gate_cv.notify_all();
  }
  (*server)->stop();
  char buf[256];
  EXPECT_EQ(::recv(pair[1], buf, sizeof buf, MSG_DONTWAIT), -1) << "the reply went to the program's socket";
  EXPECT_NE(fcntl(number, F_GETFD), -1) << "the program's socket was closed";
  EXPECT_EQ(::recv(client, buf, sizeof buf, 0), 0) << "the client got a reply through a number it no longer had";
  for (int fd : {client, number, pair[0], pair[1]}) ::close(fd);
}

// The control server's wake pipe's write end (a pipe among the high descriptors), -1 if none.
int wakePipeWriteEnd() {
  int write_end = -1;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    std::error_code ec;
    const std::string target = fs::read_symlink(entry.path(), ec).string();
    if (fd >= highFdBase() && target.rfind("pipe:", 0) == 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY) {
      write_end = fd;
    }
  }
  return write_end;
}

// Puts a file of the program's own on `fd` (dup2 closes what was there); returns its path.
std::string takeDescriptor(const ServerFixture& f, int fd) {
  const std::string theirs = f.tmp.file("program.log");
  std::ofstream(theirs) << "the program's";
  int file = ::open(theirs.c_str(), O_WRONLY | O_CLOEXEC);
  EXPECT_EQ(dup2(file, fd), fd);
  ::close(file);
  return theirs;
}

// The program puts a file of its own on the wake pipe's write end: stop() must not write its wake
// byte into the program's file, nor close the number, and the thread still ends (its poll wakes
// within 100 ms to look at the stop).
TEST(ControlServer, StopsEvenWhenTheProgramTookItsWakePipe) {
  ServerFixture f;
  auto server = ControlServer::start(f.options(::geteuid()));
  ASSERT_TRUE(server.isOk()) << server.status().message();
  const int write_end = wakePipeWriteEnd();
  ASSERT_GE(write_end, 0) << "the wake pipe was not found among the high descriptors";
  const std::string theirs = takeDescriptor(f, write_end);
  const auto begun = std::chrono::steady_clock::now();
  EXPECT_TRUE((*server)->stop(std::chrono::seconds(5))) << "the thread did not end";
  EXPECT_LT(std::chrono::steady_clock::now() - begun, std::chrono::seconds(3));
  std::ifstream in(theirs);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "the program's");
  EXPECT_NE(fcntl(write_end, F_GETFD), -1) << "the program's descriptor was closed";
  ::close(write_end);
}

// The program closing the wake pipe's write end (here: a file of its own put on its number) does
// not end the control thread: clients are still answered, one after another, and it says why a
// stop may now take a second.
TEST(ControlServer, ServesOnWhenTheProgramTookItsWakePipe) {
  ServerFixture f;
  auto server = ControlServer::start(f.options(::geteuid()));
  ASSERT_TRUE(server.isOk()) << server.status().message();
  const std::string path = (*server)->path();
  const int write_end = wakePipeWriteEnd();
  ASSERT_GE(write_end, 0) << "the wake pipe was not found among the high descriptors";
  (void)takeDescriptor(f, write_end);
  for (int i = 0; i < 3; ++i) {
    auto reply = control::parseReply(talk(path, "status\n"));
    ASSERT_TRUE(reply.isOk()) << "request " << i << ": " << reply.status().message();
    EXPECT_TRUE(reply->ok) << i;
  }
  {
    std::lock_guard lk(f.mu);
    EXPECT_EQ(f.seen.size(), 3u);
    EXPECT_TRUE(std::any_of(f.log.begin(), f.log.end(),
                            [](const std::string& l) { return l.find("wake pipe") != std::string::npos; }));
  }
  EXPECT_TRUE((*server)->stop(std::chrono::seconds(5))) << "the thread did not end";
  ::close(write_end);
}

// A listening socket at `path` whose queue is full (a stopped process, or one filling it on
// purpose): connects until the kernel refuses more. Returns the listener and the connections.
std::vector<int> fullListenerAt(const std::string& path) {
  const int l = listenAt(path, /*backlog=*/0);
  if (l < 0) return {};
  std::vector<int> fds = {l};
  const sockaddr_un addr = unixAddress(path);
  for (int i = 0; i < 64; ++i) {
    int c = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (::connect(c, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(c);
      break;
    }
    fds.push_back(c);
  }
  return fds;
}

// Runs `work` on a thread of its own and says whether it ended within `limit` (a thread stuck in
// a blocking call is left behind, detached, so that the test fails instead of hanging).
bool endsWithin(std::chrono::milliseconds limit, std::function<void()> work) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([work = std::move(work), done] {
    work();
    done->store(true);
  }).detach();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done->load();
}

// Something listens at the process's socket path with a full queue: the server's check for a
// live listener runs on the program's thread (its first recorded call) and must not wait for a
// place in that queue. It finds the path in use at once.
TEST(ControlServer, AListenerWithAFullQueueAtItsPathIsInUseAndNotWaitedFor) {
  ServerFixture f;
  ASSERT_TRUE(control::ensurePrivateDirectory(f.tmp.file("ctl"), ::geteuid()).isOk());
  std::vector<int> squatter = fullListenerAt(f.tmp.file("ctl") + "/4242.sock");
  ASSERT_GE(squatter.size(), 2u);
  auto result = std::make_shared<Status>();
  auto opts = f.options(::geteuid());
  ASSERT_TRUE(endsWithin(std::chrono::seconds(5), [opts, result] {
    auto server = ControlServer::start(opts);
    *result = server.isOk() ? Status::ok() : server.status();
  })) << "ControlServer::start waited for the full listener";
  EXPECT_NE(result->message().find("in use"), std::string::npos) << result->message();
  for (int fd : squatter) ::close(fd);
}

// At the process's exit the server stops at once even while a client that connected says
// nothing (before, it waited out the client's read timeout); a request that did come from a
// client that has hung up since (it gave up waiting) is not carried out.
TEST(ControlServer, ASilentClientDoesNotHoldTheStopUpAndAGoneOnesRequestIsDropped) {
  ServerFixture f;
  auto opts = f.options(::geteuid());
  opts.read_timeout_ms = 20000;
  auto server = ControlServer::start(opts);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  int silent = connectTo((*server)->path());  // the server waits for its line
  int gone = connectTo((*server)->path());    // queued behind it
  ASSERT_EQ(::send(gone, "start\n", 6, MSG_NOSIGNAL), 6);
  ::close(gone);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::close(silent);  // the server moves on to the gone client's request
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::lock_guard lk(f.mu);
    EXPECT_TRUE(f.seen.empty()) << "the request of a client that had hung up was carried out";
  }
  int silent2 = connectTo((*server)->path());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE((*server)->stop(std::chrono::milliseconds(1500)))
      << "the stop waited for the silent client";
  ::close(silent2);
}

// A client that shuts its writing side after its request (socat, `nc -N`, a script's
// shutdown(SHUT_WR)) still reads the reply, its last line without a newline included; one that
// closes altogether is still dropped (ASilentClientDoesNotHoldTheStopUp... above).
TEST(ControlServer, AClientThatOnlyStopsSendingIsStillAnswered) {
  ServerFixture f;
  auto server = ControlServer::start(f.options(::geteuid()));
  ASSERT_TRUE(server.isOk()) << server.status().message();
  for (const std::string line : {"start capture=meta\n", "status"}) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_un addr = unixAddress((*server)->path());
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::send(fd, line.data(), line.size(), MSG_NOSIGNAL), static_cast<ssize_t>(line.size()));
    ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    std::string reply;
    char buf[256];
    for (int i = 0; i < 50; ++i) {  // 5 s at most
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      reply.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    auto parsed = control::parseReply(reply);
    ASSERT_TRUE(parsed.isOk()) << "no reply to '" << line << "': '" << reply << "'";
    EXPECT_TRUE(parsed->ok) << reply;
  }
  std::lock_guard lk(f.mu);
  ASSERT_EQ(f.seen.size(), 2u) << "both requests were carried out";
  EXPECT_EQ(f.seen[0].verb, control::Verb::kStart);
  EXPECT_EQ(f.seen[1].verb, control::Verb::kStatus);
}

TEST(ControlServer, ARequestTooLongIsAnsweredWithAnError) {
  ServerFixture f;
  auto server = ControlServer::start(f.options(::geteuid()));
  ASSERT_TRUE(server.isOk()) << server.status().message();
  auto reply = control::parseReply(talk((*server)->path(), "start window=" + std::string(6000, 'x') + "\n"));
  ASSERT_TRUE(reply.isOk()) << reply.status().message();
  EXPECT_FALSE(reply->ok);
  EXPECT_NE(reply->error.find("request too long"), std::string::npos) << reply->error;
}

// A reply longer than a line may be (a long window echoed back, %-escaped) keeps whole fields:
// those that fit, in order, and truncated=1; never a field cut in two, which the client would
// take for a malformed reply.
TEST(ControlProtocol, ALongReplyKeepsWholeFields) {
  control::Reply r;
  r.set("state", "capturing");
  r.set("window", std::string(1400, '<'));  // 3 bytes each once escaped
  r.set("pid", "42");
  const std::string line = control::formatReply(r);
  EXPECT_LE(line.size(), control::kMaxLineBytes);
  auto back = control::parseReply(line);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_TRUE(back->ok);
  EXPECT_EQ(back->get("state"), "capturing");
  EXPECT_EQ(back->get("pid"), "42");
  EXPECT_EQ(back->get("window"), "");
  EXPECT_EQ(back->get("truncated"), "1");
  auto error = control::parseReply(control::formatReply(control::Reply::failure(std::string(5000, 'e'))));
  ASSERT_TRUE(error.isOk());
  EXPECT_FALSE(error->ok) << "an error stays an error when cut";
}

// ---------------------------------------------------------------- the attach client

TEST(AttachClient, ClearErrors) {
  TempDir tmp;
  auto gone = tracer::findAttachTargets("999999999");
  ASSERT_FALSE(gone.isOk());
  EXPECT_NE(gone.status().message().find("no process"), std::string::npos)
      << gone.status().message();
  auto neither = tracer::findAttachTargets(tmp.file("nope"));
  ASSERT_FALSE(neither.isOk());
  EXPECT_NE(neither.status().message().find("neither a process id nor a run directory"),
            std::string::npos);
  auto empty = tracer::findAttachTargets(tmp.path().string());
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.status().message().find("--paused"), std::string::npos)
      << empty.status().message();
  // This test process is not recorded: it has no DETRACE_OUT_DIR and no socket.
  auto self = tracer::findAttachTargets(std::to_string(getpid()));
  ASSERT_FALSE(self.isOk());
  EXPECT_NE(self.status().message().find("not recorded by detrace"), std::string::npos)
      << self.status().message();
}

TEST(AttachClient, TalksToAServerThroughARunDirectory) {
  ServerFixture f;
  auto opts = f.options(::geteuid());
  opts.pid = getpid();  // the client checks that the pid is alive
  auto server = ControlServer::start(opts);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  std::string run = f.tmp.file("run");
  fs::create_directories(run);
  std::ofstream(control::pointerPath(run, getpid())) << "socket=" << (*server)->path() << "\n";
  std::ofstream(control::pointerPath(run, 999999999)) << "socket=/nonexistent.sock\n";
  auto targets = tracer::findAttachTargets(run);
  ASSERT_TRUE(targets.isOk()) << targets.status().message();
  ASSERT_EQ(targets->live.size(), 1u);
  EXPECT_EQ(targets->live[0].pid, getpid());
  EXPECT_EQ(targets->exited, std::vector<pid_t>{999999999});
  control::Request stop;
  stop.verb = control::Verb::kStop;
  auto reply = tracer::sendControlRequest(targets->live[0], stop);
  ASSERT_TRUE(reply.isOk()) << reply.status().message();
  EXPECT_TRUE(reply->ok);
  (*server)->stop();
  auto after = tracer::sendControlRequest(targets->live[0], stop);
  ASSERT_FALSE(after.isOk());
  EXPECT_NE(after.status().message().find("is gone"), std::string::npos)
      << after.status().message();
}

// A process whose queue is full (stopped with SIGSTOP; every client that gave up stays queued):
// the client gives up at its deadline with a message that says why, instead of waiting in
// connect for good.
TEST(AttachClient, AProcessThatTakesNoConnectionsIsGivenUpOnAtTheDeadline) {
  TempDir tmp;
  const std::string path = tmp.file("full.sock");
  std::vector<int> squatter = fullListenerAt(path);
  ASSERT_GE(squatter.size(), 2u);
  auto result = std::make_shared<Status>();
  ASSERT_TRUE(endsWithin(std::chrono::seconds(10), [path, result] {
    control::Request status;
    status.verb = control::Verb::kStatus;
    auto reply = tracer::sendControlRequest(tracer::AttachTarget{getpid(), path}, status, 500);
    *result = reply.isOk() ? Status::ok() : reply.status();
  })) << "the client waited in connect";
  EXPECT_NE(result->message().find("takes no connections"), std::string::npos) << result->message();
  for (int fd : squatter) ::close(fd);
}

// A pointer file of a run directory names a socket of a process that has exited; its pid is now
// a process of another run (its DETRACE_OUT_DIR says so), or the name is a FIFO, which would
// block a read. Neither is taken for a live process of this run, and nothing hangs.
TEST(AttachClient, APointerOfAnotherRunsProcessOrAFifoIsNotALiveTarget) {
  ServerFixture f;
  auto opts = f.options(::geteuid());
  opts.pid = getpid();
  auto server = ControlServer::start(opts);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  const std::string run = f.tmp.file("run"), other = f.tmp.file("other");
  fs::create_directories(run);
  fs::create_directories(other);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string env = "DETRACE_OUT_DIR=" + other;
    char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
    char* const envp[] = {const_cast<char*>(env.c_str()), nullptr};
    execve("/bin/sleep", argv, envp);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its environment is sleep's now
  std::ofstream(control::pointerPath(run, child)) << "socket=" << (*server)->path() << "\n";
  ASSERT_EQ(::mkfifo(control::pointerPath(run, 999999998).c_str(), 0600), 0);
  auto targets = std::make_shared<std::optional<Result<tracer::AttachTargets>>>();
  ASSERT_TRUE(endsWithin(std::chrono::seconds(10), [run, targets] { targets->emplace(tracer::findAttachTargets(run)); }))
      << "reading the run directory hung";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const Result<tracer::AttachTargets>& found = **targets;
  ASSERT_FALSE(found.isOk()) << "a process of another run was taken for this run's";
  EXPECT_NE(found.status().message().find("has exited"), std::string::npos) << found.status().message();
}

// A run whose running process is another user's is named as such, not as exited (root only: the
// test makes a process of uid 65534; as anyone else it is skipped).
TEST(AttachClient, ARunsProcessOfAnotherUserIsNamedAsSuchNotAsExited) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start a process of another user";
  testing::TempDir tmp;
  const std::string run = tmp.file("run");
  fs::create_directories(run);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(126);
    char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
    execv("/bin/sleep", argv);
    _exit(127);
  }
  for (int i = 0; i < 1000 && tracer::processUid(child) != 65534; ++i) {  // until its setuid
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(tracer::processUid(child), 65534);
  std::ofstream(control::pointerPath(run, child)) << "socket=/nonexistent/" << child << ".sock\n";
  auto found = tracer::findAttachTargets(run);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_FALSE(found.isOk());
  EXPECT_NE(found.status().message().find(fmt::format("process {} runs as uid 65534, not as you", child)),
            std::string::npos)
      << found.status().message();
  EXPECT_EQ(found.status().message().find("exited"), std::string::npos) << found.status().message();
}

// `detrace attach PID status --json` turns the reply's numeric fields into JSON numbers; one that
// is not a number (another program answering on the socket) stays text instead of aborting the CLI.
TEST(AttachClient, AReplysFieldThatIsNotANumberStaysText) {
  ServerFixture f;
  auto opts = f.options(::geteuid());
  opts.pid = getpid();
  opts.dir = control::controlDirectories(::geteuid(), std::getenv("XDG_RUNTIME_DIR"))[0];
  ASSERT_TRUE(control::ensurePrivateDirectory(opts.dir, ::geteuid()).isOk());
  opts.handler = [](const control::Request&) {
    control::Reply reply;
    reply.set("protocol", std::to_string(control::kProtocolVersion));
    reply.set("pid", "abc");
    reply.set("events", "12");
    reply.set("state", "paused");
    return reply;
  };
  auto server = ControlServer::start(opts);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  testing::ShellOutput o = testing::runShell(std::string(DETRACE_BINARY_DIR) + "/replay/detrace attach " +
                                             std::to_string(getpid()) + " status --json");
  (*server)->stop();
  ASSERT_EQ(o.status, 0) << o.out;
  auto j = nlohmann::json::parse(o.out.substr(o.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["processes"][0]["pid"], "abc") << o.out;
  EXPECT_EQ(j["processes"][0]["events"], 12) << o.out;
}

}  // namespace
}  // namespace detrace
