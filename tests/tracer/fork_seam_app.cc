// A program that records NCCL calls (linked against fake_nccl, so it runs anywhere) and forks a
// child that makes calls of its own without exec, as a worker forked from a recorded process
// would. argv[1]: milliseconds to wait before the fork (the parent's writer is then busy with its
// first batch when the test makes it hold there). The seam test records it with `detrace record`.
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                              \
  do {                                                           \
    if ((call) != ncclSuccess) {                                 \
      std::fprintf(stderr, "fork_seam_app: %s failed\n", #call); \
      return 1;                                                  \
    }                                                            \
  } while (0)

int main(int argc, char** argv) {
  const int wait_ms = argc > 1 ? std::atoi(argv[1]) : 0;
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, 4, id, 0));
  auto* stream = reinterpret_cast<cudaStream_t>(0x1234);
  char buf[64];
  CHECK(ncclAllReduce(buf, buf + 8, 101, ncclFloat32, ncclSum, comm, stream));
  usleep(static_cast<useconds_t>(wait_ms) * 1000);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    for (int i = 0; i < 2; ++i) CHECK(ncclAllReduce(buf, buf + 8, 202, ncclFloat32, ncclSum, comm, stream));
    std::printf("fork_seam_app: child %d done\n", static_cast<int>(getpid()));
    std::exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 3;
  CHECK(ncclAllReduce(buf, buf + 8, 303, ncclFloat32, ncclSum, comm, stream));
  std::printf("fork_seam_app: parent %d done\n", static_cast<int>(getpid()));
  return 0;
}
