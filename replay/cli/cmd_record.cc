// detrace record -o RUN_DIR [--force] [--queue N] [--capture meta|digest|full] [--capture-ops LIST]
//                [--capture-range A:B] [--max-capture-bytes N] [--window UNIT:A:B]
//                [--deep WINDOW] [--paused] [--launch-callbacks] [--row-digests all|tokens]
//                [--graph-weights-every N] -- COMMAND...
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <csignal>
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "detrace/db/run.h"

#ifdef DETRACE_HAVE_TRACER
#include "detrace/tracer/launcher.h"
#endif

namespace detrace::cli {

namespace {

constexpr const char* kRecordHelp =
    "Record an unmodified GPU program into RUN_DIR: every kernel launch (name, grid, block, shared\n"
    "memory, registers, stream, GPU times, CUDA graph ids), memcpy and memset, every\n"
    "cuBLASLt/cuBLAS GEMM (shape, layouts, dtypes, compute type, cuBLASLt algorithm) and every\n"
    "NCCL collective or send/recv (op, dtype, count, reduction, root/peer, communicator id, rank,\n"
    "sequence number, and NCCL's algorithm/protocol/channels), in launch order; with --capture\n"
    "digest (the default) also GPU fingerprints of every GEMM's and collective's operands, whole\n"
    "and per row (token), taken on the op's own stream; with --capture full also copies of the\n"
    "selected operands' bytes, which `detrace replay` re-executes. NVTX ranges (e.g. \"step 3\",\n"
    "\"layer 5\") are recorded as markers: the diff reports positions with them and --window counts\n"
    "steps with them. Each process of the command (every rank) writes\n"
    "RUN_DIR/proc-<pid>.dtrace; detrace writes RUN_DIR/manifest.json (command, host, times, exit\n"
    "status, options, CUDA_*/NCCL_*/CUBLAS*/NVIDIA_*/TORCH_*/PYTORCH_* environment).";

constexpr const char* kRecordFooter =
    "Examples:\n"
    "  detrace record -o runA -- python serve.py --tp 2\n"
    "  detrace record -o runA --force -- torchrun --nproc-per-node 2 infer.py\n"
    "  detrace record -o runA -- ./my_cuda_app && detrace info runA\n"
    "\n"
    "  detrace record -o runA --capture meta -- ./my_cuda_app    (no fingerprints: lowest cost)\n"
    "  detrace record -o runC --capture full --capture-ops AllReduce --capture-range 40:60 -- ...\n"
    "      (copy the operands of library ops 40..59 that are all-reduces, for detrace replay)\n"
    "  detrace record -o runW --window steps:3:5 -- python serve.py   (only NVTX steps 3 and 4)\n"
    "  detrace record -o runD --deep ops:40:42 -- python serve.py\n"
    "      (deep window: the kernels of library ops 40 and 41 and every kernel after them up to\n"
    "      op 42 get their parameters and the memory they point into fingerprinted before and\n"
    "      after them; diff two such runs to name the kernel where they part)\n"
    "  detrace record --paused -o runP -- python serve.py &   then   detrace attach runP start\n"
    "      (dormant until attached: see detrace attach --help)\n"
    "  detrace record -o runW --row-digests all -- python serve.py\n"
    "      (per-row digests of every GEMM operand, the weights' too: a trace about three times\n"
    "      larger; detrace diff compares only runs recorded with the same --row-digests)\n"
    "\n"
    "Deep window (--deep WINDOW): WINDOW takes the forms of --window, or kernel:NAME@N[-B][+K]:\n"
    "the Nth launch, from 0, of a kernel whose name contains NAME, the K launches after it\n"
    "(K = 31 if left out) and the B <= 256 launches before it. NAME is looked for in the mangled\n"
    "name: a plain name anywhere, a qualified one (at::native::index_add, from the outermost\n"
    "namespace, no template arguments) as the kernel's own name or a namespace it is in. Until\n"
    "that launch comes every launch is fingerprinted speculatively and only the last B are kept.\n"
    "For each launch in the window: its parameter layout (cuFuncGetParamInfo) and bytes, and for\n"
    "every 8-byte parameter word that points into a device allocation, a digest of that whole\n"
    "allocation taken on the launch's stream just before and just after the kernel. To know the\n"
    "allocations, deep mode tracks cuMemAlloc/cudaMalloc (and the pitch, managed, async and pool\n"
    "forms), cuMemCreate + cuMemMap (PyTorch's expandable segments) and IPC imports from the\n"
    "start, and ZERO-FILLS every new allocation of the process (synchronously, or on the\n"
    "allocation's stream for stream-ordered ones; managed memory is tracked but not filled, as a\n"
    "fill from the GPU would move all its pages there) so that two runs start from identical\n"
    "bytes: a program that reads memory it never wrote behaves differently under --deep.\n"
    "Outside the window the recording costs what --capture digest costs; inside, each launch\n"
    "waits for its parameter scan and queues two digests per allocation it can reach (the\n"
    "trace's stats table reports deep_launches and deep_host_ns). Memory reached only through\n"
    "pointers stored in device memory (pointer arrays) is not followed.\n"
    "\n"
    "How kernels are placed: by default (--capture meta or digest, no --window or --deep) the\n"
    "tracer takes no callback per kernel launch: kernels come from CUPTI's activity records alone\n"
    "and go among the library calls by CUPTI's correlation id, each under the library call whose\n"
    "call it was launched in, after a hold of 500 ms (DETRACE_RECORDS_HOLD_MS) that lets records\n"
    "of slower streams come first. Such kernels have no CPU launch time and name no launch API\n"
    "(cooperative launches still say so). A call's children are the kernels on its stream, so\n"
    "with several threads launching at once on one stream a kernel launched by another thread\n"
    "during a library call is taken for that call's. --launch-callbacks (and --window, --deep,\n"
    "--capture full, which need them) follow every launch through CUPTI's launch callbacks\n"
    "instead: the launch API, its CPU time and each thread's own parents, at about 0.6-0.9 us\n"
    "more per launch on the H200 (docs/overhead.md).\n"
    "\n"
    "Library ops (GEMMs and collectives) are numbered per process from 0 in call order (the\n"
    "numbers --capture-range, --window ops: and --deep ops: take). Steps are NVTX ranges whose\n"
    "text starts with \"step\" (DETRACE_STEP_PREFIX changes it), numbered from 0 as pushed.\n"
    "\n"
    "The command must follow --. detrace starts it with CUDA_INJECTION64_PATH and\n"
    "NCCL_PROFILER_PLUGIN set to libdetrace_tracer.so, LD_PRELOAD to it followed by yours, and\n"
    "DETRACE_OUT_DIR to RUN_DIR; child processes inherit them (a NCCL_PROFILER_PLUGIN of your own\n"
    "is kept, with a warning, and NCCL's choices are then not recorded).\n"
    "\n"
    "CUDA graphs: a library op called while its stream is captured is recorded once, at capture,\n"
    "without fingerprints; its digest kernels are captured with it, and every replay of the graph\n"
    "records the op again with fingerprints of its own. Reading every GEMM's weight again at\n"
    "every replay costs a decode step 12-16% of its untraced time on the H200 (50-66 us a\n"
    "token, two measurements in docs/overhead.md);\n"
    "--graph-weights-every N digests the weights on replays 0, N, 2N, ... of each executable\n"
    "graph only, and writes the replays between with the last weight digest taken (the trace's\n"
    "meta graph_weights_every says so): a weight that changes between two sampled replays is\n"
    "seen only at the next one; sampling starts over after each `detrace attach ... start`.\n"
    "Inputs with per-row digests (activations) and outputs are digested at every replay.\n"
    "Environment: DETRACE_TRACER_LIB (the tracer library to inject), DETRACE_CUPTI_LIB (the\n"
    "libcupti.so to use), DETRACE_REORDER_TIMEOUT_MS (how long a launch waits for its GPU record,\n"
    "default 5000), DETRACE_ZEROED_BUFFERS=0 (let CUPTI clear its activity buffers itself, on the\n"
    "launching thread), DETRACE_EXIT_TIMEOUT_S (how long the command's normal exit waits for its\n"
    "trace to be finished, default 60; past it, what was committed stays), LOCAL_RANK (recorded\n"
    "as the local rank); README.md lists the rest.\n"
    "Another CUPTI user (nsys, ncu, torch.profiler) stops kernel recording; NCCL and cuBLAS calls\n"
    "are still recorded. A program that ends (or tears a CUDA context down, or stops a capture)\n"
    "within 250 ms of recording starting waits for the difference: on the H200, CUPTI lost the\n"
    "last records of a forced flush made within about 125 ms.\n"
    "If a trace stops taking writes (a full disk, a quota, the command's `ulimit -f`), that\n"
    "process stops recording with one line saying why and runs on; its file keeps everything\n"
    "committed before. The last line counts the files that were not finished; detrace info names\n"
    "them.\n"
    "\n"
    "Exit status: the command's own exit status (128+N if signal N killed it; killed by SIGINT,\n"
    "SIGTERM or SIGHUP, detrace then dies of the same signal, so a script running it stops on\n"
    "Ctrl-C); 2 if detrace could not start it (the message says why). SIGINT/SIGTERM/SIGHUP/SIGQUIT\n"
    "sent to detrace go to the command; a signal detrace was started ignoring (nohup) stays ignored.\n";

}  // namespace

void addRecordCommand(CLI::App& app, Runner& run) {
  struct Options {
    std::string out_dir;
    bool force = false;
    int64_t queue = 0;
    std::string capture = "digest";
    std::string capture_ops, capture_range, window, deep;
    std::optional<int64_t> max_capture_bytes;  // a 0 given is refused, not the default
    bool paused = false;
    bool launch_callbacks = false;
    std::string row_digests = "tokens";
    int64_t graph_weights_every = 1;
    std::vector<std::string> command;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("record", kRecordHelp);
  cmd->add_option("-o,--output", opts->out_dir, "Run directory to create (must be empty or new)")
      ->required();
  cmd->add_flag("--force", opts->force,
                "Record into a non-empty RUN_DIR, replacing its run (its manifest and proc-*.dtrace "
                "files; nothing else); refused while that run is still being recorded");
  cmd->add_option("--queue", opts->queue,
                  "Events each process's writer queue holds before it drops (default 262144; "
                  "1024 to 16777216)")
      ->check(integerIn(1024, int64_t{1} << 24))
      ->type_name("N");
  cmd->add_option("--capture", opts->capture,
                  "What to record: meta (kernel launches, GEMMs, collectives and their choices), "
                  "digest (meta plus GPU fingerprints of every GEMM's and collective's operands) or "
                  "full (digest plus copies of the selected operands' bytes, for detrace replay)")
      ->check(CLI::IsMember({"meta", "digest", "full"}))
      ->capture_default_str();
  cmd->add_option("--capture-ops", opts->capture_ops,
                  "With --capture full: whose operands to copy: gemm, collective and/or op names "
                  "(AllReduce, ReduceScatter, cublasLtMatmul, cublasGemmEx, ...), comma-separated "
                  "(default: every library op)");
  cmd->add_option("--capture-range", opts->capture_range,
                  "With --capture full: copy only library ops A <= op < B (A:B, A:, :B or A)");
  cmd->add_option("--max-capture-bytes", opts->max_capture_bytes,
                  "With --capture full: bytes copied per process at most, more than 0 (suffixes "
                  "K, M, G; default 1G); later operands keep their fingerprints only, and are "
                  "counted")
      ->transform(CLI::Validator(
          [](std::string& text) -> std::string {  // a sign would wrap around in AsSizeValue
            if (!text.empty() && text.front() == '-')
              return "must be a positive size, e.g. 512M (got '" + text + "')";
            std::string problem = CLI::AsSizeValue(false)(text);
            // AsSizeValue saturates what does not fit: a typo's extra digits must not pass as "no cap".
            if (problem.empty() && (text.size() > 19 || std::stoull(text) > uint64_t{1} << 62)) {
              return "is larger than any memory (at most 4E; e.g. 512M, 64G)";
            }
            return problem;
          },
          ""))
      ->type_name("SIZE");
  cmd->add_option("--window", opts->window,
                  "Record only a window: steps:A:B (NVTX steps A <= s < B), ops:A:B (library ops), "
                  "launches:A:B (kernel launches; a library call in range is recorded too) or "
                  "kernel:NAME@N[+K] (the Nth launch, from 0, of a kernel named NAME and the K "
                  "launches after it, K = 31 if left out); default: everything");
  cmd->add_option("--deep", opts->deep,
                  "Deep window: fingerprint the memory each launch in WINDOW can reach, before and "
                  "after it (steps:A:B, ops:A:B, launches:A:B or kernel:NAME@N[-B][+K]); zero-fills "
                  "every new allocation. See below")
      ->type_name("WINDOW");
  cmd->add_flag("--paused", opts->paused,
                "Start dormant: the tracer is loaded but records nothing (callbacks off) until "
                "`detrace attach RUN_DIR start`; `detrace attach RUN_DIR stop` pauses it again");
  cmd->add_flag("--launch-callbacks", opts->launch_callbacks,
                "Follow every kernel launch through CUPTI's launch callbacks (launch API, CPU launch "
                "time, exact parents with many launching threads) instead of placing kernels by "
                "correlation id; costs more per launch (see below)");
  cmd->add_option("--row-digests", opts->row_digests,
                  "Which GEMM operands get per-row digests besides their whole digest: tokens "
                  "(only those whose rows are tokens: B, C and D, and A where it is batched, as "
                  "attention's keys are; all the diff's batch rows use) or all (A too where it is "
                  "a linear layer's weight, whose rows are most of a digest trace's bytes). "
                  "Collectives are not affected")
      ->check(CLI::IsMember({"all", "tokens"}))
      ->capture_default_str();
  cmd->add_option("--graph-weights-every", opts->graph_weights_every,
                  "A GEMM replayed from a CUDA graph gets its weight (an input without per-row "
                  "digests over 64 KiB: a linear layer's weight under --row-digests tokens) "
                  "digested on replays 0, N, 2N, ... of its graph only; the "
                  "replays between carry the last weight digest taken (12-16% of an untraced "
                  "decode step on an H200; see below). Default 1: every replay")
      ->check(integerIn(1, 1000000))
      ->type_name("N")
      ->capture_default_str();
  cmd->add_option("COMMAND", opts->command, "The program to record and its arguments, after --");
  cmd->footer(kRecordFooter);
  cmd->callback([opts, &run] {
    run = [opts] {
      const auto& args = rawArgs();
      bool has_separator = std::find(args.begin(), args.end(), "--") != args.end();
      if (!has_separator || opts->command.empty()) {
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  "put the command to record after --, e.g. detrace record -o runA "
                                  "-- python serve.py"));
      }
      if (!opts->out_dir.empty() && opts->out_dir[0] == '-') {  // `-o -- cmd`: -o took the separator
        return reportError(Status(ErrorCode::kInvalidArgument,
                                  fmt::format("-o got \"{}\", which looks like a flag: give the run "
                                              "directory right after -o (write ./{} for a directory "
                                              "whose name starts with -)",
                                              opts->out_dir, opts->out_dir)));
      }
#ifdef DETRACE_HAVE_TRACER
      tracer::RecordOptions options;
      options.out_dir = opts->out_dir;
      options.force = opts->force;
      options.queue = opts->queue;
      options.capture = opts->capture;
      options.capture_ops = opts->capture_ops;
      options.capture_range = opts->capture_range;
      options.max_capture_bytes = opts->max_capture_bytes;
      options.window = opts->window;
      options.deep = opts->deep;
      options.paused = opts->paused;
      options.launch_callbacks = opts->launch_callbacks;
      options.row_digests = opts->row_digests;
      options.graph_weights_every = opts->graph_weights_every;
      options.command = opts->command;
      auto result = tracer::record(options);
      if (!result.isOk()) return reportError(result.status());
      size_t idle = 0, unfinished = 0, unreadable = 0;
      std::string notes;
      if (auto opened = db::Run::open(opts->out_dir); opened.isOk()) {
        idle = opened->idleFiles().size();
        unfinished = opened->unfinishedFiles().size();
        unreadable = opened->unreadableFiles().size();
      } else if (!result->trace_files.empty()) {
        notes = fmt::format("; but the run cannot be read: {}", opened.status().message());
      }
      if (idle > 0) notes += fmt::format(" ({} of them did no GPU work: not ranks)", idle);
      if (result->trace_files.empty() && opts->paused) {
        notes += ": recording was never started (detrace attach RUN_DIR start)";
      } else if (result->trace_files.empty() && result->term_signal == 0) {
        notes += ": no process of the command made a CUDA, NCCL or cuBLAS call that detrace records";
      }
      if (unreadable > 0) {
        notes += fmt::format("; {} hold nothing recorded (their processes stopped as they began) and "
                             "are left out: detrace info {} names them",
                             unreadable, opts->out_dir);
      }
      if (unfinished > 0) {
        notes += fmt::format("; {} not finished (killed, still running, or stopped on a write error): "
                             "detrace info {} names them",
                             unfinished, opts->out_dir);
      }
      const std::string how =
          result->term_signal > 0
              ? fmt::format("was killed by signal {} ({}; exit status {})", result->term_signal,
                            strsignal(result->term_signal), result->exit_status)
              : fmt::format("exited with status {}", result->exit_status);
      std::fprintf(stderr, "detrace: %s %s; %zu process trace(s) in %s%s\n", opts->command[0].c_str(),
                   how.c_str(), result->trace_files.size(), opts->out_dir.c_str(), notes.c_str());
      // A command that SIGINT (SIGTERM, SIGHUP) killed kills detrace with the same signal, so the
      // shell that runs detrace sees an interrupt and stops its script, as it would without
      // detrace: bash takes an exit status of 130 for an interrupt the program handled, and goes on.
      // Not a signal detrace itself was started ignoring (nohup's SIGHUP): it would not have
      // killed detrace either.
      struct sigaction own{};
      const int sig = result->term_signal;
      if ((sig == SIGINT || sig == SIGTERM || sig == SIGHUP) && sigaction(sig, nullptr, &own) == 0 &&
          ((own.sa_flags & SA_SIGINFO) != 0 || own.sa_handler != SIG_IGN)) {
        std::fflush(nullptr);
        std::signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, nullptr);
        raise(sig);
      }
      return result->exit_status;
#else
      return reportError(Status(ErrorCode::kUnavailable,
                                "this detrace was built without the tracer (CUDA 13 with CUPTI was "
                                "not found at build time); rebuild with CUDA in /usr/local/cuda"));
#endif
    };
  });
}

}  // namespace detrace::cli
