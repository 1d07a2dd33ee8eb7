// libFuzzer target: arbitrary bytes opened as a trace and read through every reader entry point.
// Any Status is fine; a crash, a sanitizer report, a leak or a hang is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "detrace/db/reader.h"

namespace {

std::string scratchPath() {
  static const std::string path = "/tmp/detrace-fuzz-" + std::to_string(getpid()) + ".dtrace";
  return path;
}

void readEverything(detrace::db::TraceReader& r) {
  (void)r.eventCount();
  (void)r.countsByKind();
  (void)r.timeSpan();
  (void)r.stats();
  (void)r.collectives();
  (void)r.gemms();
  auto cursor = r.events();
  if (!cursor.isOk()) return;
  for (int n = 0; n < 100000; ++n) {
    auto more = cursor->next();
    if (!more.isOk() || !*more) break;
    const auto& e = cursor->event();
    (void)r.str(e.name);
    if (n < 64) {
      (void)r.collective(e.seq);
      (void)r.gemm(e.seq);
      (void)r.marker(e.seq);
      auto ops = r.operands(e.seq);
      if (ops.isOk()) {
        for (const auto& o : *ops) (void)r.captureBytes(o.id);
      }
    }
  }
  (void)r.event(0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratchPath();
  for (const char* suffix : {"-wal", "-shm"}) std::remove((path + suffix).c_str());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto reader = detrace::db::TraceReader::open(path);
  if (reader.isOk()) readEverything(**reader);
  return 0;
}
