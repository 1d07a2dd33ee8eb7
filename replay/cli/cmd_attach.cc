// detrace attach PID|RUN_DIR start|stop|status [--capture meta|digest|full] [--window UNIT:A:B]
// [--json]
#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"

#ifdef DETRACE_HAVE_TRACER
#include "detrace/tracer/attach.h"
#endif

namespace detrace::cli {

namespace {

constexpr const char* kAttachHelp =
    "Switch recording on or off in running processes recorded by `detrace record`, typically\n"
    "started dormant with `detrace record --paused`. TARGET is a process id or a run directory\n"
    "(every live process of the run; the pid of `detrace record` itself stands for its run).\n"
    "ACTION is one of:\n"
    "  start   start capturing now; the trace file (RUN_DIR/proc-<pid>.dtrace) is created at the\n"
    "          first start and later starts append to it\n"
    "  stop    stop capturing: launches already made get their GPU records (up to ~2 s), then\n"
    "          everything is committed and the file stays valid and readable while the program\n"
    "          runs on unrecorded\n"
    "  status  print each process's state (capturing, paused, finished, or failed with the\n"
    "          reason: a full disk, ...), capture level, window, trace file and events written";

constexpr const char* kAttachFooter =
    "Examples:\n"
    "  detrace record --paused -o runA -- python serve.py &   (dormant: nothing is recorded)\n"
    "  detrace attach runA start                              (every process of runA records)\n"
    "  detrace attach runA stop && detrace info runA\n"
    "  detrace attach 4242 start --capture meta               (one process, lowest cost)\n"
    "  detrace attach runA start --window steps:0:3           (the next 3 NVTX steps only)\n"
    "  detrace attach runA status --json\n"
    "\n"
    "--capture and --window go with start and apply from that start; a window's range counts from\n"
    "the start (steps:0:3 is the next three steps to begin), and without --window the process\n"
    "records until stop. To change them while capturing, stop first.\n"
    "How it works: each recorded process that uses CUDA, NCCL or cuBLAS listens on a Unix socket,\n"
    "$XDG_RUNTIME_DIR/detrace/<pid>.sock (else, or where that directory is another user's,\n"
    "/tmp/detrace-<uid>/<pid>.sock), in a directory of mode 0700; the socket is mode 0600 and the\n"
    "process accepts only its own user (checked with SO_PEERCRED), logging every refusal on its\n"
    "stderr. RUN_DIR/proc-<pid>.dtrace-control names the socket. A process that takes no\n"
    "connections (stopped with SIGSTOP, in a debugger) is given up on after 30 s, and a request\n"
    "given up on is not carried out later. While paused the tracer's CUDA callbacks and activity\n"
    "records are off (once a capture has put fingerprints into a CUDA graph, the graph launch\n"
    "callbacks stay on, to keep that graph's launches ordered).\n"
    "\n"
    "Exit status: 0 when every targeted process answered ok; 2 otherwise (each failure says why:\n"
    "no such process, not recorded or no socket yet, another user's process, a refused request).\n";

#ifdef DETRACE_HAVE_TRACER
using tracer::control::Reply;

std::string describe(const Reply& r) {
  std::string out = "pid " + r.get("pid");
  if (!r.get("rank").empty()) out += " (rank " + r.get("rank") + "/" + r.get("world_size") + ")";
  out += ": " + r.get("state") + " (" + r.get("capture");
  if (!r.get("window").empty()) out += ", window " + r.get("window");
  out += ")";
  if (r.get("trace").empty()) {
    out += "; no trace yet (created at the first start)";
  } else {
    out += "; " + r.get("events") + " events in " + r.get("trace");
    if (r.get("dropped") != "0" && !r.get("dropped").empty())
      out += " (" + r.get("dropped") + " dropped)";
  }
  if (!r.get("reason").empty()) out += "; recording stopped: " + r.get("reason");
  if (r.get("committing") == "1") {
    out += "; the commit is still under way (a slow file system): the trace's last events are "
           "not in the file yet (status shows them once written)";
  }
  return out;
}

nlohmann::json toJson(const Reply& r) {
  nlohmann::json j;
  for (const auto& [k, v] : r.fields) {
    bool number = k == "pid" || k == "events" || k == "dropped" || k == "rank" ||
                  k == "world_size" || k == "protocol";
    long long n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    // A field that should be a number and is not (another program's reply) stays text.
    const bool parsed = ec == std::errc() && end == v.data() + v.size() && !v.empty();
    j[k] = number && parsed ? nlohmann::json(n) : nlohmann::json(v);
  }
  return j;
}

int runAttach(const std::string& target, const std::string& action, const std::string& capture,
              const std::string& window, bool json) {
  auto verb = tracer::control::parseVerb(action);
  if (!verb.isOk()) return reportError(verb.status());
  tracer::control::Request request;
  request.verb = *verb;
  request.capture = capture;
  request.window = window;
  if (request.verb != tracer::control::Verb::kStart && (!capture.empty() || !window.empty())) {
    return reportError(Status(
        ErrorCode::kInvalidArgument,
        "--capture and --window go with start, e.g. detrace attach RUN start --capture meta"));
  }
  auto targets = tracer::findAttachTargets(target);
  if (!targets.isOk()) return reportError(targets.status());
  nlohmann::json out = {{"processes", nlohmann::json::array()},
                        {"errors", nlohmann::json::array()},
                        {"exited", targets->exited},
                        {"not_listening", targets->not_listening}};
  // Every process is asked at once: one deadline (30 s) for the whole run, not 30 s per stopped
  // rank one after another, and the ranks start and stop together.
  const std::vector<tracer::AttachTarget>& live = targets->live;
  std::vector<std::optional<Result<Reply>>> replies(live.size());
  {
    std::vector<std::thread> askers;
    for (size_t i = 0; i < live.size(); ++i) {
      try {
        askers.emplace_back([&, i] { replies[i].emplace(tracer::sendControlRequest(live[i], request)); });
      } catch (const std::system_error&) {  // no thread: ask it here
        replies[i].emplace(tracer::sendControlRequest(live[i], request));
      }
    }
    for (std::thread& a : askers) a.join();
  }
  bool all_ok = true;
  for (size_t i = 0; i < live.size(); ++i) {
    const tracer::AttachTarget& t = live[i];
    Result<Reply>& reply = *replies[i];
    std::string error;
    if (!reply.isOk()) {
      error = reply.status().message();
    } else if (!reply->ok) {
      error = "process " + std::to_string(t.pid) + ": " + reply->error;
    }
    if (!error.empty()) {
      all_ok = false;
      out["errors"].push_back({{"pid", t.pid}, {"error", error}});
      if (!json) std::fprintf(stderr, "detrace: error: %s\n", error.c_str());
      continue;
    }
    out["processes"].push_back(toJson(*reply));
    if (!json) {
      const char* what = request.verb == tracer::control::Verb::kStart  ? "started: "
                         : request.verb == tracer::control::Verb::kStop ? "stopped: "
                                                                        : "";
      std::printf("%s%s\n", what, describe(*reply).c_str());
    }
  }
  if (json) {
    // Paths and echoed arguments are bytes, not necessarily UTF-8: replace what is not, rather
    // than abort (dump throws type_error 316) after the request was already carried out.
    printJson(out);
  } else {
    if (!targets->exited.empty()) {
      std::printf("(%zu process(es) of the run have exited)\n", targets->exited.size());
    }
    if (!targets->not_listening.empty()) {
      std::printf("(%zu process(es) of the run are running but no longer listen for detrace: they "
                  "exec'd another program, or their pid is another process's now)\n",
                  targets->not_listening.size());
    }
  }
  return all_ok ? kExitOk : kExitError;
}
#endif

}  // namespace

void addAttachCommand(CLI::App& app, Runner& run) {
  struct Options {
    std::string target, action, capture, window;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("attach", kAttachHelp);
  cmd->add_option("TARGET", opts->target,
                  "A process id, or a run directory (all its live processes)")
      ->required();
  cmd->add_option("ACTION", opts->action, "start, stop or status")
      ->required()
      ->check(CLI::IsMember({"start", "stop", "status"}));
  cmd->add_option("--capture", opts->capture,
                  "With start: meta (launches, GEMMs, collectives), digest (plus operand "
                  "fingerprints) or full (plus operand copies); default: the level it was "
                  "recorded with, whatever an earlier start set")
      ->check(CLI::IsMember({"meta", "digest", "full"}));
  cmd->add_option("--window", opts->window,
                  "With start: record only steps:A:B, ops:A:B, launches:A:B or kernel:NAME@N[+K] "
                  "(as detrace record --window), counted from this start; default: until stop");
  cmd->add_flag("--json", opts->json, "Print JSON (processes, errors, exited, not_listening) instead of lines");
  cmd->footer(kAttachFooter);
  cmd->callback([opts, &run] {
    run = [opts] {
#ifdef DETRACE_HAVE_TRACER
      return runAttach(opts->target, opts->action, opts->capture, opts->window, opts->json);
#else
      return reportError(Status(ErrorCode::kUnavailable,
                                "this detrace was built without the tracer (CUDA 13 with CUPTI was "
                                "not found at build time); rebuild with CUDA in /usr/local/cuda"));
#endif
    };
  });
}

}  // namespace detrace::cli
