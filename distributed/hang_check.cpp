// Note [Diagnosing a hang]: the positions ranks publish, and the verdict read from them.
#include "distributed/hang_check.h"

#include <map>
#include <sstream>

namespace volt {

namespace {

std::vector<int64_t> ranks_of(const std::string& group) {
  std::vector<int64_t> ranks;
  std::istringstream in(group);
  std::string rank;
  while (std::getline(in, rank, ',')) {
    try {
      ranks.push_back(std::stoll(rank));
    } catch (const std::exception&) {
      return {};
    }
  }
  return ranks;
}

std::string joined(const std::vector<int64_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

// Fields are separated by tabs, which no field holds (sites are replaced where they would).
std::string without_tabs(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n') c = ' ';
  }
  return text;
}

}  // namespace

std::string RankPosition::signature() const {
  return group + "|" + std::to_string(sequence) + "|" + kind + "|" + std::to_string(bytes) + "|" + dtype +
         (point_to_point ? "|p2p" : "");
}

std::string RankPosition::describe() const {
  if (!known) return "unknown";
  if (!blocked) return "running, in no collective";
  std::string text = kind + " #" + std::to_string(sequence) + " of " + std::to_string(bytes) + " bytes";
  if (!dtype.empty()) text += " (" + dtype + ")";
  text += " in group " + group;
  if (!site.empty()) text += " (" + site + ")";
  return text;
}

std::string RankPosition::serialize() const {
  if (!blocked) return "running";
  return "blocked\t" + group + "\t" + std::to_string(sequence) + "\t" + without_tabs(kind) + "\t" +
         std::to_string(bytes) + "\t" + without_tabs(dtype) + "\t" + (point_to_point ? "p2p" : "collective") + "\t" +
         without_tabs(site);
}

RankPosition RankPosition::parse(const std::string& line) {
  RankPosition position;
  std::vector<std::string> fields;
  std::istringstream in(line);
  std::string field;
  while (std::getline(in, field, '\t')) fields.push_back(field);
  if (fields.empty()) return position;
  if (fields[0] == "running") {
    position.known = true;
    return position;
  }
  if (fields[0] != "blocked" || fields.size() < 7) return position;
  try {
    position.group = fields[1];
    position.sequence = std::stoll(fields[2]);
    position.kind = fields[3];
    position.bytes = std::stoll(fields[4]);
    position.dtype = fields[5];
    position.point_to_point = fields[6] == "p2p";
    position.site = fields.size() > 7 ? fields[7] : "";
  } catch (const std::exception&) {
    return RankPosition{};
  }
  position.known = position.blocked = true;
  return position;
}

std::string explain_hang(const std::vector<RankPosition>& ranks, int64_t me) {
  if (me < 0 || me >= static_cast<int64_t>(ranks.size())) return "";
  for (const auto& rank : ranks) {
    if (!rank.known || !rank.blocked) return "";  // a running rank may yet arrive
  }
  const RankPosition& mine = ranks[static_cast<size_t>(me)];
  if (mine.point_to_point) return "";  // a send or receive pairs two ranks; the group collectives decide
  const auto members = ranks_of(mine.group);
  if (members.empty()) return "";
  // The members by the collective each is blocked in, in the order of their lowest rank.
  std::map<std::string, std::vector<int64_t>> by_position;
  std::map<std::string, std::string> described;
  std::vector<std::string> order;
  for (const int64_t member : members) {
    if (member < 0 || member >= static_cast<int64_t>(ranks.size())) return "";
    const auto& position = ranks[static_cast<size_t>(member)];
    const auto key = position.signature();
    if (!by_position.count(key)) {
      order.push_back(key);
      described[key] = position.describe();
    }
    by_position[key].push_back(member);
  }
  if (by_position.size() == 1) return "";  // every member is in this collective: it is not out of step
  std::string report = "hang: the ranks of group " + mine.group +
                       " are blocked in different collectives, "
                       "so none can complete: ";
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& in = by_position[order[i]];
    if (i > 0) report += i + 1 == order.size() ? " while " : ", ";
    report += joined(in) + (in.size() == 1 ? " is in " : " are in ") + described[order[i]];
  }
  return report;
}

}  // namespace volt
