// Session: lazy start, metadata, rank, and the orderly end of a recording. See session.h.
#include "session.h"

#include <dlfcn.h>
#include <fcntl.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "commit_thread.h"
#include "detrace/tracer/driver_version.h"
#include "nvml_query.h"
#include "control.h"
#include "detrace/base/version.h"
#include "deep.h"
#include "diag_timing.h"
#include "env_setting.h"
#include "fingerprinter.h"
#include "log.h"
#include "nccl_profiler_plugin.h"
#include "next_symbol.h"
#include "placement.h"
#include "signals.h"

namespace detrace::tracer {

// The reorder buffer's events go to the TraceWriter. A dropped event is either a full queue (counted,
// recording goes on) or a writer that failed for good: then recording stops at once, with the
// writer's reason in the log, in any process (the CUPTI flusher, where there is one, also turns
// CUPTI's records and callbacks off: failIfWriterStopped).
class WriterSink final : public EventSink {
 public:
  explicit WriterSink(db::TraceWriter& w) : w_(w) {}
  std::optional<int64_t> append(const db::Event& e) override { return checked(w_.append(e)); }
  std::optional<int64_t> appendCollective(const db::Event& e, const db::Collective& c) override {
    return checked(w_.appendCollective(e, c));
  }
  std::optional<int64_t> appendGemm(const db::Event& e, const db::Gemm& g) override {
    return checked(w_.appendGemm(e, g));
  }
  std::optional<int64_t> appendMarker(const db::Event& e, const db::Marker& m) override {
    return checked(w_.appendMarker(e, m));
  }
  bool appendGraphOp(const db::GraphOp& op) override { return w_.appendGraphOp(op); }

 private:
  std::optional<int64_t> checked(std::optional<int64_t> seq) {
    if (seq.has_value() || !w_.failed()) return seq;  // a full queue drops often: no lock for it
    Session::get().failIfWriterFailed();
    return seq;
  }

  db::TraceWriter& w_;
};

namespace {

std::atomic<Session*> g_session{nullptr};
std::mutex g_create_mu;

int64_t realtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::string hostName() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// /proc/self/cmdline, arguments joined by spaces.
std::string commandLine() {
  std::string all = readSmallFile("/proc/self/cmdline");
  while (!all.empty() && all.back() == '\0') all.pop_back();
  for (char& c : all) {
    if (c == '\0') c = ' ';
  }
  return all;
}

// The NVIDIA kernel driver's version from /proc/driver/nvidia/version, or from the module's
// sysfs entry where a container hides /proc/driver; "" where neither tells.
std::string procDriverVersion() {
  return driverVersionFromFiles("/proc/driver/nvidia/version", "/sys/module/nvidia/version");
}

// The same from NVML. nvmlInit may take seconds, so this runs on a thread of the tracer's
// (nvml_query.h), never on one of the program's. The library stays loaded: the thread may still be
// in it when the process exits, and an unload then would pull its code from under it.
std::string nvmlDriverVersion() {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return "";
  using InitFn = int (*)();
  using VersionFn = int (*)(char*, unsigned);
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto version = reinterpret_cast<VersionFn>(dlsym(nvml, "nvmlSystemGetDriverVersion"));
  auto shutdown = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlShutdown"));
  std::string out;
  if (init && version && shutdown && init() == 0) {
    char text[96] = {};
    if (version(text, sizeof text - 1) == 0) out = text;
    shutdown();
  }
  return out;
}

std::string cudaVersionText(int v) {
  return v > 0 ? std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10) : "";
}

void atForkChild() { Session::resetAfterFork(); }

// At a normal exit the trace is finished within DETRACE_EXIT_TIMEOUT_S seconds (default 60): a
// stalled file system or a kernel that never ends (cuCtxSynchronize in the final flush) must not
// keep the program from exiting. Past it, what was committed stays in the file.
void atExit() {
  // Nothing recorded (paused and never started, or a forked child that did not record): nothing
  // to wait for; finishing only closes the control socket. No thread, no CUDA call.
  if (!Session::get().hasTrace()) {
    Session::get().finish(std::chrono::steady_clock::now());
    return;
  }
  const int64_t limit = envNumber("DETRACE_EXIT_TIMEOUT_S", 60, 1, 7 * 24 * 3600);  // a week: no clock overflow
  finishBounded(std::chrono::seconds(limit), "program's exit");
}

}  // namespace

Session& Session::get() {
  Session* s = g_session.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  std::lock_guard lk(g_create_mu);
  s = g_session.load(std::memory_order_relaxed);
  if (s == nullptr) {
    s = new Session();  // never deleted: C callbacks may run during the host's static teardown
    g_session.store(s, std::memory_order_release);
    static bool once = [] { return pthread_atfork(nullptr, nullptr, atForkChild) == 0; }();
    (void)once;
  }
  return *s;
}

void Session::resetAfterFork() {
  // The parent's writer thread does not exist here and its mutexes may be held: leak the old
  // session and begin again (the child records into its own proc-<pid>.dtrace), unless that
  // thread was inside SQLite at the fork: then SQLite's own process-wide locks may be held too,
  // and the child's first SQLite call would wait for them forever.
  const bool mid_write = db::sqliteInUse();
  resetControlAfterFork();
  resetSignalsAfterFork();
  resetCommitThreadAfterFork();
  resetNvmlAfterFork();
  Fingerprinter::resetAfterFork();
  auto* s = new Session();
  s->forked_mid_write_ = mid_write;
  g_session.store(s, std::memory_order_release);
}

Session::Session()
    : policy_(CapturePolicy::fromEnvironment(policy_problems_)), gate_(policy_.window) {
  if (policy_.deep) deep_gate_ = std::make_unique<WindowGate>(policy_.deep_window);
  const char* dir = std::getenv("DETRACE_OUT_DIR");
  if (dir != nullptr && *dir != '\0') {
    out_dir_ = dir;
    enabled_ = true;
  }
  // `detrace record --paused`: dormant until `detrace attach ... start`.
  if (const char* p = std::getenv("DETRACE_PAUSED"); p != nullptr && std::strcmp(p, "1") == 0) {
    capturing_.store(false, std::memory_order_relaxed);
  }
}

int64_t Session::now() const {
  auto clock = clock_.load(std::memory_order_relaxed);
  return clock ? clock() : realtimeNs();
}

ReorderBuffer* Session::buffer() {
  if (!enabled()) return nullptr;
  if (!capturing_.load(std::memory_order_acquire)) {
    startControl();  // a GPU process, dormant: `detrace attach` must be able to reach it
    return nullptr;
  }
  if (started_.load(std::memory_order_acquire)) return buffer_.get();
  std::lock_guard lk(mu_);
  if (!started_.load(std::memory_order_relaxed) && !startLocked()) return nullptr;
  return buffer_.get();
}

db::TraceWriter* Session::writer() {
  return buffer() != nullptr ? writer_.get() : nullptr;
}

bool Session::startLocked() {
  if (!enabled() || finished_) return false;
  if (forked_mid_write_) {
    enabled_ = false;
    logLine("not recording this process: it was forked while its parent's trace writer was inside "
            "SQLite, whose locks no thread of this process can release; it runs on unrecorded");
    return false;
  }
  db::WriterOptions options;
  // The file is made on the writer's thread: this call (the program's first recorded one, which
  // other threads that record wait for) never waits on the file system. A file that cannot be made
  // stops the recording a little later (failIfWriterFailed), or at the exit, with the reason.
  options.open_in_background = true;
  // Tests only: the writer's thread waits inside every batch's transaction (a fork then finds it
  // inside SQLite).
  options.hold_in_batch = std::chrono::milliseconds(envNumber("DETRACE_DIAG_WRITER_HOLD_MS", 0, 0, 10'000));
  options.policy = db::OverflowPolicy::kDrop;
  // As `record --queue` allows: a hand-set DETRACE_QUEUE out of range is brought into it.
  options.queue_capacity = static_cast<size_t>(envNumber("DETRACE_QUEUE", kDefaultQueueEvents, kMinQueueEvents, kMaxQueueEvents));
  std::string path = out_dir_ + "/proc-" + std::to_string(getpid()) + ".dtrace";
  auto w = [&] {
    SignalsBlockedScope blocked;  // the writer thread never takes the host's signals
    return db::TraceWriter::create(path, options);
  }();
  if (!w.isOk()) {
    enabled_ = false;
    logLine("cannot record this process (%s); it runs on unrecorded", w.status().message().c_str());
    return false;
  }
  writer_ = std::move(*w);
  sink_ = std::make_unique<WriterSink>(*writer_);
  ReorderOptions ro;
  ro.timeout_ns = envNumber("DETRACE_REORDER_TIMEOUT_MS", 5000, 1, 3'600'000) * 1'000'000;
  ro.records_hold_ns = envNumber("DETRACE_RECORDS_HOLD_MS", 500, 1, 60'000) * 1'000'000;
  ro.on_written = [](uint64_t token, int64_t seq) { Fingerprinter::get().noteSeq(token, seq); };
  ro.drop_unmatched = gate().windowed();
  // The capture switch (captureOn) may have chosen placement by correlation id before this first
  // use of the buffer; later starts set it on the buffer themselves.
  ro.place_records = placementByRecords();
  for (const std::string& p : policy_problems_) logLine("ignoring a setting: %s", p.c_str());
  buffer_ = std::make_unique<ReorderBuffer>(*sink_, ro);
  startCommitThread();  // until CUPTI's flusher runs, if it ever does (commit_thread.h)
  writeMetadataLocked();
  writer_->setMeta("kernel_placement", ro.place_records ? "correlation" : "callbacks");
  started_.store(true, std::memory_order_release);
  // Registered now, after the CUDA runtime's own exit handlers, so it runs before them.
  std::atexit(atExit);
  installSignalHandlers();
  startControl();
  return true;
}

void Session::writeMetadataLocked() {
  db::TraceWriter& w = *writer_;
  rank_.pid = getpid();
  rank_.host = hostName();
  if (const char* lr = std::getenv("LOCAL_RANK"); lr && *lr) rank_.local_rank = std::atoi(lr);
  w.setMeta("tool_version", kToolVersion);
  w.setMeta("host", rank_.host);
  w.setMeta("pid", std::to_string(rank_.pid));
  w.setMeta("command", commandLine());
  w.setMeta("start_time_ns", std::to_string(realtimeNs()));
  w.setMeta("capture", capturing() ? noteLevelLocked() : std::string(captureLevelName(policy_.level)));
  w.setMeta("row_digests", rowDigestsName(policy_.row_digests));
  w.setMeta("graph_weights_every", std::to_string(policy_.graph_weights_every));
  if (const char* win = std::getenv("DETRACE_WINDOW"); win && *win) w.setMeta("window", win);
  if (policy_.deep) w.setMeta("deep_window", windowText(policy_.deep_window));
  // Without /proc's answer, a thread of the tracer's asks NVML (nvml_query.h).
  if (std::string v = procDriverVersion(); !v.empty()) {
    w.setMeta("driver_version", v);
  } else {
    askNvmlForDriverVersion();
  }

  using IntFn = int (*)(int*);
  if (auto f = reinterpret_cast<IntFn>(loadedSymbol("cudaRuntimeGetVersion", "libcudart"))) {
    int v = 0;
    if (f(&v) == 0) w.setMeta("cuda_version", cudaVersionText(v));
  } else if (auto d = reinterpret_cast<IntFn>(loadedSymbol("cuDriverGetVersion", "libcuda.so"))) {
    int v = 0;
    if (d(&v) == 0) w.setMeta("cuda_version", cudaVersionText(v));
  }
  if (auto f = reinterpret_cast<IntFn>(loadedSymbol("ncclGetVersion", "libnccl"))) {
    int v = 0;
    if (f(&v) == 0 && v > 0) {
      // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
      w.setMeta("nccl_version", std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) +
                                    "." + std::to_string(v % 100));
    }
  }
  using SizeFn = size_t (*)();
  if (auto f = reinterpret_cast<SizeFn>(loadedSymbol("cublasLtGetVersion", "libcublasLt"))) {
    size_t v = f();  // major*10000 + minor*100 + patch
    w.setMeta("cublas_version", std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) +
                                    "." + std::to_string(v % 100));
  }
  // The current device, through the driver API, if the program already made a context current;
  // otherwise noteDevice() fills it in from the first activity record.
  if (const int dev = currentDevice(); dev >= 0) describeDeviceLocked(dev);
  for (const char* key : {"CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK"}) {
    if (const char* v = std::getenv(key)) w.setMeta(std::string("env.") + key, v);
  }
  w.setRank(rank_);
}

void Session::noteDriverVersion() noexcept {
  try {
    // writer_ was set before writeMetadataLocked started this thread (its creation orders the
    // two); /proc was read there and gave nothing.
    if (!writer_) return;
    if (std::string v = nvmlDriverVersion(); !v.empty()) writer_->setMeta("driver_version", v);
  } catch (...) {
  }
}

void Session::describeDeviceLocked(int32_t dev) {
  using NameFn = int (*)(char*, int, int);
  using UuidFn = int (*)(unsigned char*, int);
  rank_.device = dev;
  char name[256] = {};
  if (auto f = reinterpret_cast<NameFn>(loadedSymbol("cuDeviceGetName", "libcuda.so"));
      f && f(name, sizeof name - 1, dev) == 0) {
    rank_.gpu_name = name;
    if (writer_) writer_->setMeta("gpu_model", name);
  }
  unsigned char u[16] = {};
  auto uuid = reinterpret_cast<UuidFn>(loadedSymbol("cuDeviceGetUuid_v2", "libcuda.so"));
  if (uuid == nullptr) uuid = reinterpret_cast<UuidFn>(loadedSymbol("cuDeviceGetUuid", "libcuda.so"));
  if (uuid && uuid(u, dev) == 0) {
    char text[64];
    std::snprintf(text, sizeof text,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                  u[14], u[15]);
    rank_.gpu_uuid = text;
  }
}

void Session::noteDevice(int32_t device) {
  if (device < 0 || device_known_.load(std::memory_order_acquire)) return;
  try {
    std::lock_guard lk(mu_);
    if (!writer_ || finished_ || device_known_.exchange(true)) return;
    if (rank_.gpu_name.empty() || rank_.device < 0) {
      describeDeviceLocked(device);
      writer_->setRank(rank_);
    }
  } catch (...) {
  }
}

void Session::updateRank() {
  auto widest = comms_.widest();
  if (!widest) return;
  std::lock_guard lk(mu_);
  if (!writer_ || finished_) return;
  if (rank_.rank == widest->rank && rank_.world_size == widest->nranks &&
      (widest->device < 0 || rank_.device == widest->device)) {
    return;
  }
  rank_.rank = widest->rank;
  rank_.world_size = widest->nranks;
  if (widest->device >= 0) rank_.device = widest->device;
  writer_->setRank(rank_);
}

// Out of memory in the writer's map loses the count, never the host: callers count from noexcept
// wrappers and callbacks.
void Session::addStat(const char* key, int64_t delta) noexcept {
  try {
    if (db::TraceWriter* w = startedWriter()) w->addStat(key, delta);
  } catch (...) {
  }
}

void Session::setStat(const char* key, int64_t value) noexcept {
  try {
    if (db::TraceWriter* w = startedWriter()) w->setStat(key, value);
  } catch (...) {
  }
}

bool Session::failIfWriterFailed() noexcept {
  Status st = writerStatus();
  if (st.isOk()) return false;
  fail(writer_->opened() ? "the trace could not be written" : "cannot record this process", st.message().c_str());
  return true;
}

void Session::fail(const char* what, const char* detail) noexcept {
  bool was = enabled_.exchange(false);
  if (was) {
    std::snprintf(reason_, sizeof reason_, "%s%s%s", what, detail != nullptr ? ": " : "",
                  detail != nullptr ? detail : "");
    reason_set_.store(true, std::memory_order_release);
    logLine("recording stopped: %s%s%s; the program continues unrecorded", what,
            detail != nullptr ? ": " : "", detail != nullptr ? detail : "");
  }
}

// ---- the capture switch: `detrace record --paused` and `detrace attach` ----

ReorderBuffer* Session::startedBuffer() {
  return enabled() && started_.load(std::memory_order_acquire) ? buffer_.get() : nullptr;
}

db::TraceWriter* Session::startedWriter() {
  return enabled() && started_.load(std::memory_order_acquire) ? writer_.get() : nullptr;
}

Status Session::writerStatus() const {
  return started_.load(std::memory_order_acquire) && writer_ && writer_->failed() ? writer_->status() : Status::ok();
}

void Session::setCaptureHooks(const CaptureHooks& hooks) {
  std::lock_guard lk(capture_mu_);
  hooks_ = hooks;
  if (capturing_.load(std::memory_order_acquire) && hooks_.start) hooks_.start();
}

Status Session::setCaptureLevel(CaptureLevel level) {
  if (capturing()) {
    return makeError(ErrorCode::kInvalidArgument, "stop capturing before changing the capture level");
  }
  policy_.level = level;
  return Status::ok();
}

Status Session::setWindow(const std::string& spec) {
  if (capturing()) return makeError(ErrorCode::kInvalidArgument, "stop capturing before changing the window");
  if (spec.empty() && !gate().windowed()) {  // no window wanted, none in force
    window_spec_.clear();
    return Status::ok();
  }
  DETRACE_ASSIGN_OR_RETURN(RecordWindow window, parseWindow(spec));
  if (window.before > 0) {
    return makeError(ErrorCode::kInvalidArgument,
                     "a recording window cannot look back (kernel:NAME@N-B); only --deep can");
  }
  constexpr size_t kMaxGates = 4096;  // each start with a window keeps a small gate alive
  if (attach_gates_.size() >= kMaxGates) {
    return makeError(ErrorCode::kUnavailable, "too many windowed starts in this process; start without --window");
  }
  attach_gates_.push_back(std::make_unique<WindowGate>(window));  // counts from 0: from now on
  gate_ptr_.store(attach_gates_.back().get(), std::memory_order_release);
  policy_.window = window;
  window_spec_ = spec;
  // GPU records of launches the window skips must stay out of the trace (they have no slot).
  if (ReorderBuffer* b = startedBuffer()) b->setDropUnmatched(window.unit != RecordWindow::Unit::kAll);
  return Status::ok();
}

// The levels captured at so far with the current one, in order of first use: a trace whose starts
// used several says so ("digest,meta"; diff and info read it). Under mu_.
const std::string& Session::noteLevelLocked() {
  const std::string name = captureLevelName(policy_.level);
  if (("," + levels_used_ + ",").find("," + name + ",") == std::string::npos) {
    levels_used_ += (levels_used_.empty() ? "" : ",") + name;
  }
  return levels_used_;
}

Status Session::startCapture(const std::string& level, const std::string& window) {
  std::lock_guard lk(capture_mu_);
  if (!enabled()) {
    return makeError(ErrorCode::kUnavailable, "this process no longer records (it finished, or "
                     "recording failed: its stderr says why)");
  }
  if (capturing()) {
    if (level.empty() && window.empty()) return Status::ok();
    return makeError(ErrorCode::kInvalidArgument,
                     "already capturing; stop first (detrace attach PID stop) to change --capture or --window");
  }
  CaptureLevel wanted = recorded_level_;  // no --capture: the level the process was recorded with
  if (!level.empty()) {
    DETRACE_ASSIGN_OR_RETURN(wanted, parseCaptureLevel(level));
  }
  DETRACE_RETURN_IF_ERROR(setCaptureLevel(wanted));
  DETRACE_RETURN_IF_ERROR(setWindow(window));
  {
    std::lock_guard m(mu_);
    if (!started_.load(std::memory_order_relaxed) && !startLocked()) {
      return makeError(ErrorCode::kIo, "cannot create the trace in {} (the process's stderr says why)", out_dir_);
    }
    writer_->setMeta("capture", noteLevelLocked());
    writer_->addStat("capture_starts", 1);
  }
  if (hooks_.start) hooks_.start();
  capture_starts_.fetch_add(1, std::memory_order_acq_rel);
  capturing_.store(true, std::memory_order_release);
  logLine("capture started (%s%s%s)", captureLevelName(policy_.level), window.empty() ? "" : ", window ",
          window.c_str());
  return Status::ok();
}

Status Session::stopCapture() {
  std::lock_guard lk(capture_mu_);
  if (!capturing_.exchange(false, std::memory_order_acq_rel)) return Status::ok();
  if (hooks_.stop_launches) hooks_.stop_launches();
  // A look-back deep window's held launches would keep every result queued after them from this
  // stop's commit: they are dropped.
  if (policy_.deep) deep::dropLookBack();
  if (ReorderBuffer* b = startedBuffer()) {
    // Launches already made still wait for their GPU records: collect them, for at most ~2 s.
    for (int i = 0; i < 200 && b->pending() > 0; ++i) {
      if (hooks_.drain) hooks_.drain();
      b->poll(now());
      if (b->pending() == 0) break;
      timespec ts{0, 10'000'000};
      nanosleep(&ts, nullptr);
    }
    b->flush();
  }
  if (hooks_.stop_activities) hooks_.stop_activities();
  if (enabled()) {
    logLine("capture stopped; the program runs on unrecorded until the next start");
  } else {  // recording failed (fail()): this only turns CUPTI off
    logLine("CUPTI's records and launch callbacks are off");
  }
  // Bounded: `detrace attach` waits for this answer, and the program's exit for this thread. A
  // commit still under way is no failure of the stop: it lands a little later.
  if (db::TraceWriter* w = startedWriter()) {
    Status st = w->flush(std::chrono::milliseconds(2000));
    stop_commit_late_.store(st.code() == ErrorCode::kUnavailable, std::memory_order_release);
    if (st.code() != ErrorCode::kUnavailable) return st;
    logLine("%s", st.message().c_str());
  }
  return Status::ok();
}

Session::CaptureState Session::captureState() {
  CaptureState st;
  {
    std::lock_guard lk(capture_mu_);
    st.capturing = capturing();
    st.level = captureLevelName(policy_.level);
    st.window = window_spec_;
  }
  std::lock_guard lk(mu_);
  st.started = started_.load();
  st.finished = finished_;
  st.failed = !enabled() && !finished_;
  if (st.failed && reason_set_.load(std::memory_order_acquire)) st.reason = reason_;
  if (writer_) {
    st.trace = writer_->path();
    db::WriterCounters c = writer_->counters();
    st.events = c.events_written;
    st.dropped = c.events_dropped;
  }
  st.rank = rank_.rank;
  st.world_size = rank_.world_size;
  // Only while it lasts: a zero wait says whether the writer has committed everything since
  // (once it has, later statuses ask the writer nothing).
  if (!st.capturing && writer_ && stop_commit_late_.load(std::memory_order_acquire)) {
    st.committing = writer_->flush(std::chrono::milliseconds(0)).code() == ErrorCode::kUnavailable;
    if (!st.committing) stop_commit_late_.store(false, std::memory_order_release);
  }
  return st;
}

void Session::commit(Held held, uint32_t context) noexcept {
  try {
    ReorderBuffer* b = startedBuffer();
    db::TraceWriter* w = startedWriter();
    if (b == nullptr || w == nullptr) return;
    b->poll(now());
    if (held == Held::kSettle) b->settle(context);  // its records still to come will not
    // Bounded: this runs inside the program's own call (cuCtxDestroy, ...), and what is not
    // committed in time still is, by the writer's thread, a little later.
    (void)w->flush(std::chrono::milliseconds(2000));
  } catch (...) {
  }
}

// The tracer's counters, as totals: the reorder buffer's and deep mode's (the fingerprints' are
// the caller's: Fingerprinter::publishStats).
void Session::writeCountersLocked() {
  if (policy_.deep) deep::writeStats(*writer_);
  ReorderStats s = buffer_->stats();
  const std::pair<const char*, int64_t> counters[] = {
      {"tracer_launches", s.launches},
      {"tracer_library_ops", s.library_ops},
      {"tracer_activities", s.activities},
      {"tracer_activities_matched", s.matched},
      {"tracer_sink_dropped", s.sink_dropped},
      {"tracer_activities_unmatched", s.unmatched},
      {"tracer_activities_matched_by_alias", s.matched_by_alias},
      {"tracer_activities_late", s.late},
      {"tracer_slots_timed_out", s.timed_out},
      {"tracer_graph_launches_varying", s.varying_graph_launches},
      {"tracer_slots_incomplete_at_exit", s.flushed_incomplete},
      {"tracer_slots_overflowed", s.overflowed},
      {"tracer_launches_failed", s.failed_launches},
      {"tracer_graph_records_dropped", s.group_records_dropped},
      {"tracer_own_records_dropped", s.own_records},
      {"tracer_graph_ops", s.graph_ops},
      {"tracer_graph_ops_placed_by_count", s.graph_ops_by_count},
      {"tracer_graph_op_rows_dropped", s.graph_op_rows_dropped},
      {"tracer_activities_held_early", s.held_early},
      {"tracer_ingress_full", s.ingress_full},
      {"tracer_records_placed", s.placed},
      {"tracer_ops_discarded", s.discarded_ops},
      {"tracer_records_placed_late", s.placed_late},
      {"tracer_records_placed_forced", s.placed_forced},
      {"tracer_records_placed_with_parent", s.placed_with_parent},
      {"nccl_profiler_inits", ncclProfilerInits()},  // 0 with NCCL calls: no choices (info warns)
  };
  for (const auto& [key, value] : counters) writer_->setStat(key, value);
}

void Session::publishStats() noexcept {
  try {
    db::TraceWriter* w = startedWriter();
    if (w == nullptr) return;
    // Not under mu_: the program's threads hold the fingerprinter's lock across CUDA calls (an
    // allocation, a digest launch), and mu_ must not wait for them. finish() stops the threads
    // that call this before it writes the last values.
    Fingerprinter::get().publishStats(*w);
    std::lock_guard lk(mu_);
    if (finished_ || !writer_ || !buffer_ || !started_.load(std::memory_order_acquire) || !enabled()) return;
    writeCountersLocked();
  } catch (...) {  // out of memory: the last publication stands
  }
}

void Session::finish(std::chrono::steady_clock::time_point gpu_deadline) {
  // A second finish (SIGTERM during the exit's) waits for the first, within its own caller's
  // bound, instead of closing the file under the first one's final flush.
  std::lock_guard one_at_a_time(finish_mu_);
  stopControl();  // first: `detrace attach` must not start a capture into a closing file
  stopCommitThread();
  waitForNvml();  // the driver's version, where /proc hides it: at most 1 s
  if (auto hook = flush_hook_.exchange(nullptr)) hook(gpu_deadline);
  std::lock_guard lk(mu_);
  if (finished_ || !writer_) {
    finished_ = true;
    return;
  }
  finished_ = true;
  buffer_->flush();
  if (!finishAbandoned()) Fingerprinter::get().finish(writer_.get());  // CUDA calls: not past the bound
  diagWriteStats(*writer_);  // after the final flush (the hook above): every site's calls are in
  enabled_ = false;  // from here on, calls into the wrappers only forward
  // Its lock is held by program threads across CUDA calls: not taken while CUDA is torn down
  // (the last second's publication stands).
  if (!finishAbandoned()) Fingerprinter::get().publishStats(*writer_);
  writeCountersLocked();
  Status st = writer_->close();
  if (st.isOk()) return;
  if (writer_->opened()) {
    logLine("the trace %s may be incomplete: %s", writer_->path().c_str(), st.message().c_str());
  } else if (!reason_set_.load(std::memory_order_acquire)) {  // not said yet (failIfWriterFailed)
    logLine("cannot record this process (%s); it ran unrecorded", st.message().c_str());
  }
}

}  // namespace detrace::tracer
