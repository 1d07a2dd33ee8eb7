// A fake-NCCL program that a test drives line by line on stdin, for the control (attach) and
// signal tests. Linked against fake_nccl, it runs anywhere; the tests run it with the real
// tracer preloaded. It opens a 4-rank communicator as rank 0, prints "ready <pid>", then answers
// each command with one line:
//   call N        one ncclAllReduce of N elements (N identifies the call in the trace)  -> "ok"
//   gemm M        one cublasSgemm_v2 of M x 1 x 1 (fake cuBLAS; M identifies it)        -> "ok"
//   group-start / group-end   ncclGroupStart / ncclGroupEnd (calls between are recorded, and
//                 completed with NCCL's choices, at the group's end)                     -> "ok"
//   group-simulate-end  ncclGroupSimulateEnd (the group's calls never run)               -> "ok"
//   annotate-begin N  begins an annotated all-reduce of N elements (detrace/annotate.h)  -> "ok"
//   annotate-end  ends the last one begun                                                 -> "ok"
//   handle-term   installs the program's own SIGTERM handler now (after the tracer's)   -> "ok"
//   take-fds PATH as a daemon might: opens PATH and puts it on every descriptor above stderr
//                 opened since main began (the tracer's included), closing what was there -> "ok N"
//   take-fds-socket  the same with one end of a socket pair the program keeps the other end of,
//                 with "ping" sent to the taken end                                       -> "ok N"
//   check-socket  bytes that reached the program's end, and bytes still unread on a taken
//                 number                                                 -> "received N unread M"
//   block-term    blocks SIGTERM on this thread (as a program with a thread for its signals
//                 does: then a SIGTERM stays pending until it is waited for)            -> "ok"
//   take-term     waits up to 10 s for a SIGTERM with sigtimedwait -> "waited term" or "timeout"
//   exec-sleep    execs /bin/sleep 60 (the pid stays; the tracer's socket file and pointer file
//                 stay behind with nobody listening)                      -> nothing, or "exec failed"
//   exit          returns from main (normal exit: atexit handlers run)
// With --own-sigint it installs its own SIGINT handler before anything else; a SIGINT then prints
// "sigint" and the program goes on (--own-sigint-once: a one-shot handler, SA_RESETHAND, so a
// second SIGINT takes the default action). With its SIGTERM handler, a SIGTERM prints "term" and exits 0.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <cublas_api.h>
#include <nccl.h>

#include "detrace/annotate.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace {

volatile sig_atomic_t g_sigint = 0;
volatile sig_atomic_t g_sigterm = 0;

void onSigint(int) { g_sigint = 1; }
void onSigterm(int) { g_sigterm = 1; }

void install(int sig, void (*handler)(int), int flags = 0) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = flags;  // no SA_RESTART: the blocking read below returns EINTR
  sigaction(sig, &sa, nullptr);
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

// One line from stdin (without the newline); false at EOF. Reports signals as they arrive.
bool readLine(std::string& line) {
  line.clear();
  for (;;) {
    if (g_sigint) {
      g_sigint = 0;
      say("sigint");
    }
    if (g_sigterm) {
      say("term");
      std::exit(0);
    }
    // A signal that lands between the checks above and the read would wait for the next input
    // line: a short poll looks at the flags again (the tests wait for "sigint" before they write).
    pollfd in{0, POLLIN, 0};
    const int ready = poll(&in, 1, 20);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    char c;
    ssize_t n = read(0, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return !line.empty();
    if (c == '\n') return true;
    line += c;
  }
}

// The descriptors open when main began: inherited from the parent, or opened by a preloaded
// library's constructor. They are not the tracer's (it opens its own once it records, after main
// began), and whoever uses them would write to what take-fds puts there, tracer or not:
// take-fds leaves them alone.
std::vector<int> g_at_start;
int g_peer = -1;   // take-fds-socket: the program's end of the pair it put on the numbers
int g_taken = -1;  // one of the numbers it took

// What descriptor `fd` names ("pipe:[123]", a path).
std::string linkOf(int fd) {
  char target[256] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  (void)!readlink(link.c_str(), target, sizeof target - 1);
  return target;
}

// The open descriptors above stderr.
std::vector<int> openDescriptors() {
  std::vector<int> fds;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      int fd = std::atoi(e->d_name);
      if (fd > 2 && fd != dirfd(d)) fds.push_back(fd);
    }
    closedir(d);
  }
  return fds;
}

// dup2()s `theirs` onto every descriptor above stderr opened since main began, but `keep`;
// returns how many.
int takeDescriptors(int theirs, int keep = -1) {
  std::vector<int> fds;
  for (int fd : openDescriptors()) {
    if (std::find(g_at_start.begin(), g_at_start.end(), fd) != g_at_start.end()) {
      std::fprintf(stderr, "control_app: leaves descriptor %d (%s): open when main began\n", fd,
                   linkOf(fd).c_str());
    } else if (fd != keep) {
      fds.push_back(fd);
    }
  }
  if (theirs < 0) return -1;
  int taken = 0;
  for (int fd : fds) {
    std::fprintf(stderr, "control_app: takes descriptor %d (%s)\n", fd, linkOf(fd).c_str());
    if (fd != theirs && dup2(theirs, fd) == fd) {
      ++taken;
      g_taken = fd;
    }
  }
  return taken;
}

}  // namespace

int main(int argc, char** argv) {
  g_at_start = openDescriptors();
  if (argc > 1 && std::strcmp(argv[1], "--own-sigint") == 0) install(SIGINT, onSigint);
  if (argc > 1 && std::strcmp(argv[1], "--own-sigint-once") == 0) install(SIGINT, onSigint, SA_RESETHAND);
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 4, id, 0) != ncclSuccess) {
    say("nccl init failed");
    return 1;
  }
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  auto* stream = reinterpret_cast<cudaStream_t>(0x1234);
  static char buf[64];
  cublasHandle_t blas = nullptr;
  std::vector<uint64_t> annotations;  // tokens begun and not yet ended
  std::string line;
  while (readLine(line)) {
    if (line.rfind("call ", 0) == 0) {
      size_t count = std::strtoull(line.c_str() + 5, nullptr, 10);
      say(ncclAllReduce(buf, buf + 8, count, ncclFloat32, ncclSum, comm, stream) == ncclSuccess
              ? "ok"
              : "failed");
    } else if (line.rfind("gemm ", 0) == 0) {
      const int m = std::atoi(line.c_str() + 5);
      static float a[1024], b[1024], c[1024];
      const float one = 1.0f, zero = 0.0f;
      bool ok = (blas != nullptr || cublasCreate_v2(&blas) == CUBLAS_STATUS_SUCCESS) &&
                cublasSetStream_v2(blas, stream) == CUBLAS_STATUS_SUCCESS &&
                cublasSgemm_v2(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, 1, 1, &one, a, m, b, 1, &zero, c, m) ==
                    CUBLAS_STATUS_SUCCESS;
      say(ok ? "ok" : "failed");
    } else if (line == "group-start" || line == "group-end") {
      say((line == "group-start" ? ncclGroupStart() : ncclGroupEnd()) == ncclSuccess ? "ok" : "failed");
    } else if (line == "group-simulate-end") {
      ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
      say(ncclGroupSimulateEnd(&sim) == ncclSuccess ? "ok" : "failed");
    } else if (line.rfind("annotate-begin ", 0) == 0) {
      detrace_collective c = DETRACE_COLLECTIVE_INIT;
      c.name = "custom_allreduce";
      c.op = DETRACE_ALLREDUCE;
      c.dtype = DETRACE_F32;
      c.send = buf;
      c.recv = buf + 32;
      c.count = std::strtoull(line.c_str() + 15, nullptr, 10);
      c.comm_id = 0xfeedull;
      c.rank = 0;
      c.nranks = 4;
      c.stream = stream;
      annotations.push_back(detrace_annotate_begin(&c));
      say("ok");
    } else if (line == "annotate-end") {
      if (!annotations.empty()) {
        detrace_annotate_end(annotations.back());
        annotations.pop_back();
      }
      say("ok");
    } else if (line == "handle-term") {
      install(SIGTERM, onSigterm);
      say("ok");
    } else if (line.rfind("take-fds ", 0) == 0) {
      say(("ok " + std::to_string(takeDescriptors(open(line.c_str() + 9, O_RDWR | O_CLOEXEC)))).c_str());
    } else if (line == "take-fds-socket") {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        say("failed");
        continue;
      }
      g_peer = sv[1];
      int taken = takeDescriptors(sv[0], g_peer);
      (void)!write(g_peer, "ping", 4);  // readable on every taken number: nobody else may read it
      say(("ok " + std::to_string(taken)).c_str());
    } else if (line == "check-socket") {
      // What reached the program's end, and what is still unread on one of the taken numbers.
      char buf[64];
      ssize_t got = recv(g_peer, buf, sizeof buf, MSG_DONTWAIT);
      ssize_t unread = recv(g_taken, buf, sizeof buf, MSG_DONTWAIT);
      say(("received " + std::to_string(got < 0 ? 0 : got) + " unread " +
           std::to_string(unread < 0 ? 0 : unread)).c_str());
    } else if (line == "block-term" || line == "take-term") {
      sigset_t term;
      sigemptyset(&term);
      sigaddset(&term, SIGTERM);
      if (line == "block-term") {
        say(pthread_sigmask(SIG_BLOCK, &term, nullptr) == 0 ? "ok" : "failed");
        continue;
      }
      struct timespec limit {10, 0};
      say(sigtimedwait(&term, nullptr, &limit) == SIGTERM ? "waited term" : "timeout");
    } else if (line == "exec-sleep") {
      std::fflush(stdout);
      execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
      say("exec failed");
    } else if (line == "exit") {
      break;
    } else {
      say("unknown command");
    }
  }
  ncclCommDestroy(comm);
  return 0;
}
