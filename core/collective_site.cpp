#include "core/collective_site.h"

#include <utility>

namespace volt {

namespace {
thread_local std::string innermost_site;
}  // namespace

CollectiveSite::CollectiveSite(std::string name) : previous_(std::exchange(innermost_site, std::move(name))) {}

CollectiveSite::~CollectiveSite() { innermost_site = std::move(previous_); }

const std::string& current_collective_site() { return innermost_site; }

}  // namespace volt
