// See capture_policy.h.
#include "detrace/tracer/capture_policy.h"

#include <strings.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "detrace/db/records.h"

namespace detrace::tracer {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// The names --capture-ops selects ops by: a collective's op (db::collOpName; an annotated
// collective's too, whatever its own name) and the entry points whose GEMMs cublas_wrappers.cc
// records (the `api` it passes to recordLibraryOp).
const std::vector<std::string>& opNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (auto op = static_cast<int32_t>(db::CollOp::kAllReduce); op <= static_cast<int32_t>(db::CollOp::kScatter); ++op) {
      v.emplace_back(db::collOpName(static_cast<db::CollOp>(op)));
    }
    for (const char* api : {"cublasLtMatmul", "cublasGemmEx", "cublasGemmStridedBatchedEx", "cublasSgemm",
                            "cublasSgemmStridedBatched"}) {
      v.emplace_back(api);
    }
    return v;
  }();
  return names;
}

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// Whether `item` (lower case) is all or part of a name ops are selected by.
bool namesAnOp(const std::string& item) {
  return std::any_of(opNames().begin(), opNames().end(),
                     [&](const std::string& n) { return lower(n).find(item) != std::string::npos; });
}

// " (did you mean X?)" for the name nearest a misspelt `item`, "" when none is near.
std::string nearestOpName(const std::string& item) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, item.size() / 3) + 1;
  for (const std::string& n : opNames()) {
    size_t d = editDistance(item, lower(n));
    if (d < best_distance) best = n, best_distance = d;
  }
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

std::string opNameList() {
  std::string list;
  for (const std::string& n : opNames()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

bool parseIndex(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out >= 0;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

Result<IndexRange> parseIndexRange(const std::string& raw) {
  std::string text = trim(raw);
  auto bad = [&] {
    return makeError(ErrorCode::kInvalidArgument,
                     "'{}' is not a range: write A:B (A <= i < B), A: (from A), :B (before B) or A "
                     "(just A), with non-negative integers",
                     raw);
  };
  IndexRange r;
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    if (!parseIndex(text, r.begin) || r.begin == std::numeric_limits<int64_t>::max()) return bad();
    r.end = r.begin + 1;
    return r;
  }
  std::string a = text.substr(0, colon), b = text.substr(colon + 1);
  if (a.empty() && b.empty()) return bad();
  if (!a.empty() && !parseIndex(a, r.begin)) return bad();
  if (!b.empty() && !parseIndex(b, r.end)) return bad();
  if (r.end <= r.begin) {
    return makeError(ErrorCode::kInvalidArgument, "the range '{}' is empty: its end must be after its start", raw);
  }
  return r;
}

namespace {

// What a kernel window looks for in a launch's name, which CUDA gives mangled: a plain NAME as it
// is; a qualified one (a::b::c, std::d) as the Itanium ABI encodes a nested name, each part after
// its length (1a1b1c, St1d), which is how it appears inside the mangled name whatever follows
// (template arguments, parameters). Its parts must be plain identifiers.
Result<std::string> kernelNeedle(const std::string& raw, const std::string& name) {
  std::string plain = name.rfind("::", 0) == 0 ? name.substr(2) : name;
  if (plain.empty()) return makeError(ErrorCode::kInvalidArgument, "'{}': the kernel's name is empty", raw);
  if (plain.find("::") == std::string::npos) return plain;
  std::string needle;
  size_t from = 0;
  for (bool first = true;; first = false) {
    const size_t to = plain.find("::", from);
    const std::string part = plain.substr(from, to == std::string::npos ? std::string::npos : to - from);
    const bool identifier = !part.empty() && !std::isdigit(static_cast<unsigned char>(part[0])) &&
                            std::all_of(part.begin(), part.end(), [](char c) {
                              return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                            });
    if (!identifier) {
      return makeError(ErrorCode::kInvalidArgument,
                       "'{}': a qualified kernel name is matched through its mangled form, so each "
                       "part between '::' must be a plain identifier ('{}' is not): leave out "
                       "template arguments and parameters (at::native::index_add), or give the "
                       "last part alone (index_add)",
                       raw, part);
    }
    needle += first && part == "std" ? "St" : std::to_string(part.size()) + part;
    if (to == std::string::npos) break;
    from = to + 2;
  }
  return needle;
}

// "NAME@N" or "NAME@N+K" (after "kernel:").
Result<RecordWindow> parseKernelWindow(const std::string& raw, const std::string& rest) {
  auto bad = [&] {
    return makeError(ErrorCode::kInvalidArgument,
                     "'{}': write kernel:NAME@N (the Nth launch, from 0, of a kernel whose name "
                     "contains NAME, and the {} launches after it), kernel:NAME@N+K (and the K "
                     "launches after it) or kernel:NAME@N-B+K (and also the B <= {} launches "
                     "before it)",
                     raw, kDefaultKernelWindowLaunches - 1, kMaxKernelWindowBefore);
  };
  size_t at = rest.rfind('@');
  if (at == std::string::npos || at == 0) return bad();
  RecordWindow w;
  w.unit = RecordWindow::Unit::kKernel;
  w.kernel = rest.substr(0, at);
  auto needle = kernelNeedle(raw, w.kernel);
  if (!needle.isOk()) return needle.status();
  w.kernel_needle = std::move(*needle);
  w.kernel_qualified = w.kernel.find("::", w.kernel.rfind("::", 0) == 0 ? 2 : 0) != std::string::npos;
  std::string nk = rest.substr(at + 1);
  size_t plus = nk.find('+');
  std::string nb = nk.substr(0, plus);
  size_t minus = nb.find('-');
  int64_t n = 0, k = kDefaultKernelWindowLaunches - 1;
  if (!parseIndex(nb.substr(0, minus), n)) return bad();
  if (minus != std::string::npos &&
      (!parseIndex(nb.substr(minus + 1), w.before) || w.before > kMaxKernelWindowBefore))
    return bad();
  if (plus != std::string::npos && !parseIndex(nk.substr(plus + 1), k)) return bad();
  if (k > (int64_t{1} << 40) || n > std::numeric_limits<int64_t>::max() - k - 1) return bad();
  w.range.begin = n;
  w.range.end = n + k + 1;
  return w;
}

}  // namespace

bool kernelNameMatches(const RecordWindow& w, const char* name) {
  if (name == nullptr) return false;
  if (!w.kernel_qualified) return std::strstr(name, w.kernel_needle.c_str()) != nullptr;
  // The kernel's own name comes first: _ZN<parts>... for a nested name; _ZSt<part>... for one
  // directly in std (needle "St...", which the nested form writes _ZNSt...).
  const std::string_view n(name);
  const std::string_view needle(w.kernel_needle);
  auto at = [&](std::string_view prefix) {
    return n.substr(0, prefix.size()) == prefix && n.substr(prefix.size(), needle.size()) == needle;
  };
  return at("_ZN") || (needle.substr(0, 2) == "St" && at("_Z"));
}

std::string windowText(const RecordWindow& w) {
  std::string text;
  auto range = [&](const char* unit) {
    text.append(unit).append(std::to_string(w.range.begin)).append(":");
    if (w.range.end != std::numeric_limits<int64_t>::max()) text.append(std::to_string(w.range.end));
  };
  switch (w.unit) {
    case RecordWindow::Unit::kAll: break;
    case RecordWindow::Unit::kSteps: range("steps:"); break;
    case RecordWindow::Unit::kOps: range("ops:"); break;
    case RecordWindow::Unit::kLaunches: range("launches:"); break;
    case RecordWindow::Unit::kKernel:
      text.append("kernel:").append(w.kernel).append("@").append(std::to_string(w.range.begin));
      if (w.before > 0) text.append("-").append(std::to_string(w.before));
      text.append("+").append(std::to_string(w.range.end - w.range.begin - 1));
      break;
  }
  return text;
}

Result<RecordWindow> parseWindow(const std::string& raw) {
  RecordWindow w;
  std::string text = trim(raw);
  if (text.empty()) return w;
  size_t colon = text.find(':');
  std::string unit = lower(text.substr(0, colon));
  if (unit == "kernel" && colon != std::string::npos) return parseKernelWindow(raw, text.substr(colon + 1));
  if (unit == "steps" || unit == "step") {
    w.unit = RecordWindow::Unit::kSteps;
  } else if (unit == "ops" || unit == "op") {
    w.unit = RecordWindow::Unit::kOps;
  } else if (unit == "launches" || unit == "launch") {
    w.unit = RecordWindow::Unit::kLaunches;
  } else {
    return makeError(ErrorCode::kInvalidArgument,
                     "window '{}': write steps:A:B (NVTX steps), ops:A:B (GEMMs and collectives), "
                     "launches:A:B (kernel launches, library calls not counted), A <= i < B, or "
                     "kernel:NAME@N[+K] (from the Nth launch of kernel NAME)",
                     raw);
  }
  if (colon == std::string::npos) {
    return makeError(ErrorCode::kInvalidArgument, "window '{}' has no range: e.g. {}:2:4", raw, unit);
  }
  auto range = parseIndexRange(text.substr(colon + 1));
  if (!range.isOk()) return range.status();  // the caller names the setting
  w.range = *range;
  return w;
}

bool OpFilter::matches(bool is_gemm, const std::string& name) const {
  if (by_kind && (is_gemm ? gemms : collectives)) return true;
  if (!names.empty()) {
    std::string n = lower(name);
    return std::any_of(names.begin(), names.end(),
                       [&](const std::string& want) { return n.find(want) != std::string::npos; });
  }
  return !by_kind;  // nothing named: every op
}

Result<OpFilter> parseOpFilter(const std::string& text) {
  OpFilter f;
  if (trim(text).empty()) return f;
  bool any_kind = false;
  bool want_gemms = false, want_collectives = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string given = trim(text.substr(start, comma - start));
    const std::string item = lower(given);
    start = comma + 1;
    if (item.empty()) continue;
    if (item == "gemm" || item == "gemms") {
      want_gemms = any_kind = true;
    } else if (item == "collective" || item == "collectives" || item == "nccl") {
      want_collectives = any_kind = true;
    } else if (namesAnOp(item)) {
      f.names.push_back(item);
    } else {
      return makeError(ErrorCode::kInvalidArgument,
                       "--capture-ops: '{}' is not the name of an op detrace records{}; name ops "
                       "by kind (gemm, collective) or by name, whole or in part: {}",
                       given, nearestOpName(item), opNameList());
    }
  }
  f.by_kind = any_kind;
  f.gemms = want_gemms;
  f.collectives = want_collectives;
  if (!any_kind && f.names.empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--capture-ops '{}' selects nothing: list gemm, collective or op names "
                     "(AllReduce, ReduceScatter, cublasLtMatmul, cublasGemmEx, ...), comma-separated",
                     text);
  }
  return f;
}

Result<CaptureLevel> parseCaptureLevel(const std::string& text) {
  if (text == "meta") return CaptureLevel::kMeta;
  if (text == "digest") return CaptureLevel::kDigest;
  if (text == "full") return CaptureLevel::kFull;
  return makeError(ErrorCode::kInvalidArgument,
                   "--capture {}: use meta (launches and library calls), digest (plus GPU "
                   "fingerprints) or full (plus copies of the selected operands, for replay)",
                   text);
}

const char* captureLevelName(CaptureLevel level) {
  switch (level) {
    case CaptureLevel::kMeta: return "meta";
    case CaptureLevel::kDigest: return "digest";
    case CaptureLevel::kFull: return "full";
  }
  return "digest";
}

Result<RowDigests> parseRowDigests(const std::string& text) {
  if (text == "all") return RowDigests::kAll;
  if (text == "tokens") return RowDigests::kTokens;
  return makeError(ErrorCode::kInvalidArgument,
                   "--row-digests {}: use all (every GEMM operand per row, weights included) or "
                   "tokens (only the operands whose rows are tokens: B, C and D of PyTorch's linear "
                   "layers, and a batched A)",
                   text);
}

const char* rowDigestsName(RowDigests rows) { return rows == RowDigests::kTokens ? "tokens" : "all"; }

Result<int64_t> parseGraphWeightsEvery(const std::string& text) {
  constexpr int64_t kMax = 1'000'000;
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > kMax) {
    return makeError(ErrorCode::kInvalidArgument,
                     "--graph-weights-every {}: give a whole number of replays from 1 (every "
                     "replay, the default) to {}, e.g. --graph-weights-every 64",
                     text, kMax);
  }
  return n;
}

bool CapturePolicy::isStep(const char* text) const {
  return text != nullptr && !step_prefix.empty() &&
         strncasecmp(text, step_prefix.c_str(), step_prefix.size()) == 0;
}

CapturePolicy CapturePolicy::fromEnvironment(std::vector<std::string>& problems) {
  CapturePolicy p;
  auto note = [&](const Status& s) { problems.push_back(s.message()); };
  if (const char* v = env("DETRACE_CAPTURE")) {
    if (auto l = parseCaptureLevel(v); l.isOk()) p.level = *l; else note(l.status());
  } else if (const char* d = env("DETRACE_DIGEST"); d && std::string(d) == "0") {
    p.level = CaptureLevel::kMeta;
  }
  if (const char* v = env("DETRACE_CAPTURE_OPS")) {
    if (auto f = parseOpFilter(v); f.isOk()) {
      p.ops = *f;
    } else {  // a misspelt list copies nothing, rather than every op (the default)
      note(f.status().withContext("copying no operands"));
      p.ops = OpFilter{};
      p.ops.by_kind = true;  // no kind and no name: nothing matches
    }
  }
  if (const char* v = env("DETRACE_CAPTURE_RANGE")) {
    if (auto r = parseIndexRange(v); r.isOk()) p.op_range = *r; else note(r.status());
  }
  if (const char* v = env("DETRACE_MAX_CAPTURE_BYTES")) {
    int64_t n = 0;
    if (parseIndex(v, n)) p.max_capture_bytes = n;
    else problems.push_back(std::string("DETRACE_MAX_CAPTURE_BYTES=") + v + " is not a byte count");
  }
  if (const char* v = env("DETRACE_WINDOW")) {
    if (auto w = parseWindow(v); !w.isOk()) {
      problems.push_back(std::string("DETRACE_WINDOW=") + v + ": " + w.status().message());
    } else if (w->before > 0) {  // as `record --window` refuses it
      problems.push_back(std::string("DETRACE_WINDOW=") + v +
                         ": a recording window cannot look back; only DETRACE_DEEP can");
    } else {
      p.window = *w;
    }
  }
  if (const char* v = env("DETRACE_DEEP")) {
    if (auto w = parseWindow(v); w.isOk()) {
      p.deep = true;
      p.deep_window = *w;
      if (p.level == CaptureLevel::kMeta) p.level = CaptureLevel::kDigest;
    } else {
      problems.push_back("DETRACE_DEEP: " + w.status().message());
    }
  }
  if (const char* v = env("DETRACE_STEP_PREFIX")) p.step_prefix = v;
  if (const char* v = env("DETRACE_ROW_DIGESTS")) {
    if (auto r = parseRowDigests(v); r.isOk()) p.row_digests = *r; else note(r.status());
  }
  if (const char* v = env("DETRACE_GRAPH_WEIGHTS_EVERY")) {
    if (auto n = parseGraphWeightsEvery(v); n.isOk()) p.graph_weights_every = *n; else note(n.status());
  }
  return p;
}

}  // namespace detrace::tracer
