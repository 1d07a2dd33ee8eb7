#include "write_failure.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <initializer_list>

#include <fmt/format.h>

namespace detrace::db {

std::string writeFailureCause(std::initializer_list<std::string> files, int64_t slack) {
  rlimit lim{};
  if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    for (const std::string& f : files) {
      struct stat sb{};
      if (::stat(f.c_str(), &sb) == 0 &&
          static_cast<int64_t>(sb.st_size) + slack > static_cast<int64_t>(lim.rlim_cur)) {
        return fmt::format("the file reached the process's file-size limit (`ulimit -f`, {} bytes); "
                           "raise the limit and re-record",
                           static_cast<unsigned long long>(lim.rlim_cur));
      }
    }
  }
  for (const std::string& f : files) {
    const std::string dir = std::filesystem::path(f).parent_path().string();
    struct statvfs fs{};
    // (A filesystem of no blocks at all, /proc or /sys, is not a full disk: it takes no files.)
    if (::statvfs(dir.empty() ? "." : dir.c_str(), &fs) == 0 && fs.f_blocks > 0 &&
        static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize) < slack + 65536) {
      return "the disk is full; free space and re-record";
    }
  }
  return {};
}

}  // namespace detrace::db
