// SIGXFSZ and the trace writer (private to db/).
//
// A write that would take a file past the process's file-size limit (RLIMIT_FSIZE, `ulimit -f`)
// fails with EFBIG and also raises SIGXFSZ at the writing thread, whose default action ends the
// whole process. The writer runs inside other people's programs (the tracer), so a trace that
// outgrows the limit must end the trace, with an error the writer reports, and never the program.
//  - The writer's own thread blocks SIGXFSZ for its whole life (blockFileSizeSignal): a signal
//    its writes raise stays pending on it and goes away with the thread.
//  - Writes made on the caller's thread (creating the file, the final commit and checkpoint) run
//    inside a FileSizeSignalShield, which blocks SIGXFSZ for its scope and, at its end, takes back
//    a SIGXFSZ that became pending meanwhile before restoring the thread's mask. One that was
//    pending before the scope is left for the program.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <time.h>

namespace detrace::db {

inline void blockFileSizeSignal() noexcept {
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &one, nullptr);
}

class FileSizeSignalShield {
 public:
  FileSizeSignalShield() noexcept {
    sigemptyset(&one_);
    sigaddset(&one_, SIGXFSZ);
    masked_ = pthread_sigmask(SIG_BLOCK, &one_, &saved_) == 0;
    was_pending_ = pending();
  }
  ~FileSizeSignalShield() {
    if (!masked_) return;
    if (!was_pending_ && pending()) {
      const timespec now{0, 0};
      (void)sigtimedwait(&one_, nullptr, &now);  // ours: raised by a write in this scope
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  FileSizeSignalShield(const FileSizeSignalShield&) = delete;
  FileSizeSignalShield& operator=(const FileSizeSignalShield&) = delete;

 private:
  static bool pending() noexcept {
    sigset_t set;
    return sigpending(&set) == 0 && sigismember(&set, SIGXFSZ) == 1;
  }

  sigset_t one_{}, saved_{};
  bool masked_ = false, was_pending_ = false;
};

}  // namespace detrace::db
