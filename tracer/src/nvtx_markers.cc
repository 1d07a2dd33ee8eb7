// See nvtx_markers.h.
#include "nvtx_markers.h"

#include <generated_nvtx_meta.h>

#include <mutex>
#include <string>
#include <unordered_set>

#include "log.h"
#include "placement.h"
#include "session.h"

namespace detrace::tracer {
namespace {

thread_local int t_depth = 0;  // NVTX push/pop ranges open on this thread

// An id for the calling thread (its thread-local's address: unique among live threads).
uint64_t threadId() { return reinterpret_cast<uint64_t>(&t_depth); }

const char* messageOf(const nvtxEventAttributes_t* a) {
  if (a == nullptr || a->messageType != NVTX_MESSAGE_TYPE_ASCII) return nullptr;
  return a->message.ascii;
}

// Distinct marker texts interned so far: the writer's string table never shrinks, and some
// programs put a counter in every range's text ("aten::mm, seq = 81723"). Past the cap, markers
// get one shared name and are counted (stats: nvtx_names_capped).
constexpr size_t kMaxMarkerNames = 1 << 16;
std::mutex g_names_mu;
auto& g_marker_names = *new std::unordered_set<std::string>;  // leaked: used during static teardown too

int64_t markerName(Session& s, db::TraceWriter& w, const char* text) {
  std::string t = text != nullptr ? text : "";
  {
    std::lock_guard lk(g_names_mu);
    if (g_marker_names.size() >= kMaxMarkerNames && !g_marker_names.count(t)) {
      s.addStat("nvtx_names_capped", 1);
      return w.intern("<nvtx range: too many distinct names>");
    }
    g_marker_names.insert(t);
  }
  return w.intern(t);
}

// Appends a marker in API order (between the launches around it).
void recordMarker(db::MarkerKind kind, const char* text, int64_t value) {
  Session& s = Session::get();
  ReorderBuffer* buffer = s.buffer();
  db::TraceWriter* w = s.writer();
  if (buffer == nullptr || w == nullptr) return;
  LibraryOp op;
  op.event.kind = db::EventKind::kMarker;
  op.event.cpu_ns = s.now();
  op.event.name = markerName(s, *w, text);
  op.detail = db::Marker{kind, db::kUnset, value};
  op.position = markerCorrelation();  // its place among kernel records (placement.h)
  buffer->addLibraryOp(op, 0, true);
}

void push(const char* text) {
  Session& s = Session::get();
  int depth = t_depth++;
  bool is_step = s.policy().isStep(text);
  if (WindowGate* deep = s.deepGate()) deep->notePush(is_step, depth, threadId());
  if (s.gate().notePush(is_step, depth, threadId())) {
    recordMarker(db::MarkerKind::kRangeStart, text != nullptr ? text : "<unnamed range>", depth);
  }
}

void pop() {
  Session& s = Session::get();
  if (t_depth > 0) --t_depth;
  if (WindowGate* deep = s.deepGate()) deep->notePop(t_depth, threadId());
  if (s.gate().notePop(t_depth, threadId())) recordMarker(db::MarkerKind::kRangeEnd, "", t_depth);
}

template <typename Params>
const Params* paramsOf(const CUpti_NvtxData* d) {
  return static_cast<const Params*>(d->functionParams);
}

}  // namespace

void onNvtxCallback(CUpti_CallbackId cbid, const void* data) noexcept {
  try {
    const auto* d = static_cast<const CUpti_NvtxData*>(data);
    if (d == nullptr || d->functionParams == nullptr || !Session::get().enabled()) return;
    switch (cbid) {
      case CUPTI_CBID_NVTX_nvtxRangePushA:
        push(paramsOf<nvtxRangePushA_params>(d)->message);
        break;
      case CUPTI_CBID_NVTX_nvtxRangePushEx:
        push(messageOf(paramsOf<nvtxRangePushEx_params>(d)->eventAttrib));
        break;
      case CUPTI_CBID_NVTX_nvtxDomainRangePushEx:
        push(messageOf(paramsOf<nvtxDomainRangePushEx_params>(d)->core.eventAttrib));
        break;
      case CUPTI_CBID_NVTX_nvtxRangePop:
      case CUPTI_CBID_NVTX_nvtxDomainRangePop:
        pop();
        break;
      case CUPTI_CBID_NVTX_nvtxMarkA:
        recordMarker(db::MarkerKind::kInstant, paramsOf<nvtxMarkA_params>(d)->message, db::kUnset);
        break;
      case CUPTI_CBID_NVTX_nvtxMarkEx:
        recordMarker(db::MarkerKind::kInstant, messageOf(paramsOf<nvtxMarkEx_params>(d)->eventAttrib), db::kUnset);
        break;
      case CUPTI_CBID_NVTX_nvtxDomainMarkEx:
        recordMarker(db::MarkerKind::kInstant,
                     messageOf(paramsOf<nvtxDomainMarkEx_params>(d)->core.eventAttrib), db::kUnset);
        break;
      default:
        break;
    }
  } catch (...) {
    Session::get().fail("recording an NVTX range");
  }
}

}  // namespace detrace::tracer
