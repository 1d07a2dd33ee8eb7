// See launch_params.h. Runs on the launching thread for deep-window launches only; every buffer is
// bounded by kMaxParamBytes and max_targets.
#include "detrace/tracer/launch_params.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include <cuda.h>  // CU_LAUNCH_PARAM_* (values only)

namespace detrace::tracer {
namespace {

std::string argName(size_t param, uint32_t offset_in_param) {
  std::string name = "arg" + std::to_string(param);
  if (offset_in_param != 0) name += "+" + std::to_string(offset_in_param);
  return name;
}

// A tiny cursor over layout text: skips whitespace, takes punctuation and unsigned integers.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}
  bool take(char c) {
    skipSpace();
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  std::optional<uint32_t> number() {
    skipSpace();
    uint32_t value = 0;
    const char* first = text_.data() + pos_;
    auto [ptr, ec] = std::from_chars(first, text_.data() + text_.size(), value);
    if (ec != std::errc() || ptr == first) return std::nullopt;
    pos_ += static_cast<size_t>(ptr - first);
    return value;
  }
  bool atEnd() {
    skipSpace();
    return pos_ == text_.size();
  }

 private:
  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  std::string_view text_;
  size_t pos_ = 0;
};

// The buffer and stated size that a launch's `extra` list names (nullptr/0 where it names none).
struct ExtraBuffer {
  const uint8_t* data = nullptr;
  size_t size = 0;
};
ExtraBuffer extraBuffer(void* const* extra) {
  constexpr int kMaxEntries = 64;  // a list without its end marker is not followed further
  ExtraBuffer b;
  bool sized = false;
  for (int i = 0; extra != nullptr && i < kMaxEntries && extra[0] != CU_LAUNCH_PARAM_END;
       ++i, extra += 2) {
    if (extra[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) b.data = static_cast<const uint8_t*>(extra[1]);
    if (extra[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[1] != nullptr) {
      b.size = *static_cast<const size_t*>(extra[1]);
      sized = true;
    }
  }
  if (!sized) b.data = nullptr;
  return b;
}

std::optional<ParamInfo> parsePair(Scanner& in) {
  if (!in.take('[')) return std::nullopt;
  auto offset = in.number();
  if (!offset || !in.take(',')) return std::nullopt;
  auto size = in.number();
  if (!size || !in.take(']')) return std::nullopt;
  return ParamInfo{*offset, *size};
}

// A nonzero parameter word that points into tracked memory, in parameter order.
struct PointerWord {
  Allocation alloc;
  std::string name;
};

// A word equal to the first byte of an allocation that begins exactly where the allocation of the
// previous pointer word ends may be that word's one-past-the-end pointer (a range's `last`, as
// thrust and CUB pass it) rather than a pointer into the next allocation: the two cannot be told
// apart (an output allocated right after its input looks the same), so it is kept, and its name
// marked "?".
std::vector<PointerWord> pointerWords(const std::vector<ParamInfo>& layout,
                                      const std::vector<uint8_t>& packed, const AllocationMap& map,
                                      uint64_t max_merged) {
  std::vector<PointerWord> words;
  uint64_t previous_end = 0;  // where the previous pointer word's allocation ends
  for (size_t i = 0; i < layout.size(); ++i) {
    const ParamInfo& p = layout[i];
    for (uint32_t off = 0; p.size >= 8 && off <= p.size - 8; off += 8) {
      const uint64_t at = uint64_t{p.offset} + off;
      if (at + 8 > packed.size()) break;
      uint64_t word = 0;
      std::memcpy(&word, packed.data() + at, 8);  // host byte order, as the launch passed it
      if (word == 0) continue;
      std::optional<Allocation> alloc = map.find(word, max_merged);
      if (!alloc) continue;
      std::string name = argName(i, off);
      if (word == alloc->base && word == previous_end) name += "?";
      previous_end = alloc->base + alloc->size;
      words.push_back({*alloc, std::move(name)});
    }
  }
  return words;
}

bool overlap(const Allocation& a, const Allocation& b) {
  return a.base < b.base + b.size && b.base < a.base + a.size;
}

// The smallest extent holding both (only merged mapped pieces overlap: the map's entries never do).
Allocation unite(const Allocation& a, const Allocation& b) {
  const uint64_t base = std::min(a.base, b.base);
  const uint64_t end = std::max(a.base + a.size, b.base + b.size);
  return {base, end - base, a.kind};
}

// A target: its extent and the indices of the pointer words into it.
struct TargetWords {
  Allocation alloc;
  std::vector<size_t> words;
};

// Target `at` grew: any other target it now overlaps is merged with it, into the place of the one
// that came first, until none overlaps.
void absorbOverlapping(std::vector<TargetWords>& targets, size_t at) {
  for (size_t j = 0; j < targets.size();) {
    if (j == at || !overlap(targets[at].alloc, targets[j].alloc)) {
      ++j;
      continue;
    }
    const size_t keep = std::min(at, j), gone = std::max(at, j);
    targets[keep].alloc = unite(targets[keep].alloc, targets[gone].alloc);
    targets[keep].words.insert(targets[keep].words.end(), targets[gone].words.begin(),
                               targets[gone].words.end());
    targets.erase(targets.begin() + static_cast<std::ptrdiff_t>(gone));
    at = keep;
    j = 0;
  }
}

// The words' names, comma-joined in parameter order.
std::string joinNames(const std::vector<PointerWord>& words, std::vector<size_t> indices) {
  std::sort(indices.begin(), indices.end());
  std::string out;
  for (size_t i : indices) out += (out.empty() ? "" : ",") + words[i].name;
  return out;
}

}  // namespace

std::vector<uint8_t> packParams(const std::vector<ParamInfo>& layout, void* const* kernel_params) {
  if (kernel_params == nullptr || layout.empty()) return {};
  const uint64_t total = layoutExtent(layout);
  if (total > kMaxParamBytes) return {};
  std::vector<uint8_t> packed(total, 0);
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].size == 0) continue;
    if (kernel_params[i] == nullptr) return {};
    std::memcpy(packed.data() + layout[i].offset, kernel_params[i], layout[i].size);
  }
  return packed;
}

uint64_t layoutExtent(const std::vector<ParamInfo>& layout) {
  uint64_t extent = 0;
  for (const ParamInfo& p : layout)
    extent = std::max<uint64_t>(extent, uint64_t{p.offset} + p.size);
  return extent;
}

LaunchParamBytes launchParamBytes(const std::vector<ParamInfo>& layout, void* const* kernel_params,
                                  void* const* extra) {
  LaunchParamBytes out;
  const uint64_t extent = layoutExtent(layout);
  if (extent > kMaxParamBytes) {
    out.problem = ParamsProblem::kTooLarge;
    return out;
  }
  if (kernel_params != nullptr) {
    out.bytes = packParams(layout, kernel_params);
  } else if (ExtraBuffer b = extraBuffer(extra); b.data != nullptr) {
    const size_t n = std::min<uint64_t>(b.size, extent);
    out.bytes.assign(b.data, b.data + n);
  }
  if (out.bytes.empty()) out.problem = ParamsProblem::kMissing;
  return out;
}

std::vector<DeepTarget> deepTargets(const std::vector<ParamInfo>& layout,
                                    const std::vector<uint8_t>& packed, const AllocationMap& map,
                                    size_t max_targets, uint64_t max_merged,
                                    size_t* words_ignored) {
  std::vector<PointerWord> words = pointerWords(layout, packed, map, max_merged);
  std::vector<TargetWords> targets;
  size_t ignored = 0;
  for (size_t w = 0; w < words.size(); ++w) {
    auto into = std::find_if(targets.begin(), targets.end(), [&](const TargetWords& t) {
      return overlap(t.alloc, words[w].alloc);
    });
    if (into == targets.end()) {
      if (targets.size() < max_targets) {
        targets.push_back({words[w].alloc, {w}});
      } else {
        ++ignored;
      }
      continue;
    }
    into->alloc = unite(into->alloc, words[w].alloc);
    into->words.push_back(w);
    absorbOverlapping(targets, static_cast<size_t>(into - targets.begin()));
  }
  if (words_ignored != nullptr) *words_ignored = ignored;
  std::vector<DeepTarget> out;
  out.reserve(targets.size());
  for (TargetWords& t : targets) out.push_back({t.alloc, joinNames(words, t.words)});
  return out;
}

std::string layoutText(const std::vector<ParamInfo>& layout) {
  std::string out = "[";
  for (size_t i = 0; i < layout.size(); ++i) {
    if (i) out += ",";
    out += "[" + std::to_string(layout[i].offset) + "," + std::to_string(layout[i].size) + "]";
  }
  return out + "]";
}

std::optional<std::vector<ParamInfo>> parseLayoutText(std::string_view text) {
  Scanner in(text);
  std::vector<ParamInfo> layout;
  if (!in.take('[')) return std::nullopt;
  if (!in.take(']')) {
    do {
      auto pair = parsePair(in);
      if (!pair) return std::nullopt;
      layout.push_back(*pair);
    } while (in.take(','));
    if (!in.take(']')) return std::nullopt;
  }
  if (!in.atEnd()) return std::nullopt;
  return layout;
}

}  // namespace detrace::tracer
