#include "event_filter.h"

namespace detrace::gui {
namespace {

// For each string id of a side: does it contain the text?
std::vector<char> nameMatches(const RankView& view, int side, const QString& text) {
  std::vector<char> out(view.names[side].size(), text.isEmpty());
  if (text.isEmpty()) return out;
  const std::string needle = text.toLower().toStdString();
  for (size_t i = 0; i < out.size(); ++i) {
    std::string s = view.names[side][i];
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[i] = s.find(needle) != std::string::npos;
  }
  return out;
}

bool sideMatches(const RankView& view, int side, int64_t seq, const EventFilter& f,
                 const std::vector<char>& names) {
  if (seq < 0 || seq >= static_cast<int64_t>(view.events[side].size())) return false;
  const auto& e = view.events[side][static_cast<size_t>(seq)];
  if (!f.kinds.isEmpty() && !f.kinds.contains(static_cast<int>(e.kind))) return false;
  return e.name >= 0 && static_cast<size_t>(e.name) < names.size()
             ? names[static_cast<size_t>(e.name)] != 0
             : f.name.isEmpty();
}

}  // namespace

std::vector<int64_t> filterRows(const RankView& view, const EventFilter& filter) {
  std::vector<int64_t> out;
  const bool only_differing =
      !filter.statuses.isEmpty() &&
      !filter.statuses.contains(static_cast<int>(replay::PairStatus::kIdentical));
  const std::vector<char> names[2] = {nameMatches(view, 0, filter.name),
                                      nameMatches(view, 1, filter.name)};
  auto consider = [&](int64_t row) {
    replay::AlignedRow p = view.rows.at(row);
    if (!filter.statuses.isEmpty() && !filter.statuses.contains(static_cast<int>(p.status))) return;
    if (filter.kinds.isEmpty() && filter.name.isEmpty()) {
      out.push_back(row);
    } else if (sideMatches(view, 0, p.a, filter, names[0]) ||
               sideMatches(view, 1, p.b, filter, names[1])) {
      out.push_back(row);
    }
  };
  if (only_differing) {
    for (int64_t row : view.rows.differingRows()) consider(row);
  } else {
    for (int64_t row = 0; row < view.rows.size(); ++row) consider(row);
  }
  return out;
}

}  // namespace detrace::gui
