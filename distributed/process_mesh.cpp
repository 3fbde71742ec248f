#include "distributed/process_mesh.h"

#include <cctype>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"

namespace volt {

namespace {

bool is_name(const std::string& name) {
  if (name.empty() || !std::islower(static_cast<unsigned char>(name.front()))) return false;
  for (const char c : name) {
    if (!std::islower(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)) && c != '_')
      return false;
  }
  return true;
}

void check_dimensions(const std::vector<MeshDimension>& dimensions) {
  check<ConfigurationError>(!dimensions.empty(), "mesh: no dimensions; name at least one, e.g. dp=4");
  std::set<std::string> seen;
  for (const auto& d : dimensions) {
    check<ConfigurationError>(is_name(d.name), "mesh: '", d.name, "' is not a dimension name; use lowercase letters, ",
                              "digits and '_', starting with a letter (dp, pp, tp)");
    check<ConfigurationError>(seen.insert(d.name).second, "mesh: dimension '", d.name, "' is named twice in ",
                              to_string(dimensions), "; name each once");
    check<ConfigurationError>(d.size >= 1, "mesh: dimension '", d.name, "' has size ", d.size,
                              "; sizes are whole numbers >= 1");
  }
}

}  // namespace

std::vector<MeshDimension> parse_mesh_dimensions(const std::string& text) {
  std::vector<MeshDimension> dimensions;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto equals = item.find('=');
    check<ConfigurationError>(equals != std::string::npos, "mesh: '", item, "' in '", text,
                              "' is not name=size; write the dimensions as pp=2,dp=2,tp=2");
    MeshDimension d{item.substr(0, equals), 0};
    const auto size = item.substr(equals + 1);
    size_t used = 0;
    try {
      d.size = std::stoll(size, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check<ConfigurationError>(!size.empty() && used == size.size(), "mesh: the size of '", d.name, "' in '", text,
                              "' is '", size, "', not a whole number");
    dimensions.push_back(std::move(d));
  }
  check_dimensions(dimensions);
  return dimensions;
}

std::string to_string(const std::vector<MeshDimension>& dimensions) {
  std::string out;
  for (const auto& d : dimensions) out += (out.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
  return out;
}

ProcessMesh::ProcessMesh(std::shared_ptr<Communicator> world, std::vector<MeshDimension> dimensions)
    : world_(std::move(world)), dimensions_(std::move(dimensions)) {}

std::unique_ptr<ProcessMesh> ProcessMesh::build(std::shared_ptr<Communicator> world,
                                                std::vector<MeshDimension> dimensions) {
  check_dimensions(dimensions);
  const int64_t product = std::accumulate(dimensions.begin(), dimensions.end(), int64_t{1},
                                          [](int64_t p, const MeshDimension& d) { return p * d.size; });
  check<ConfigurationError>(product == world->size(), "mesh: ", to_string(dimensions), " holds ", product,
                            " ranks, but the world has ", world->size(), "; choose sizes whose product is ",
                            world->size());
  std::unique_ptr<ProcessMesh> mesh(new ProcessMesh(std::move(world), std::move(dimensions)));
  auto& m = *mesh;
  const size_t n = m.dimensions_.size();
  m.strides_.assign(n, 1);
  for (size_t i = n - 1; i > 0; --i) m.strides_[i - 1] = m.strides_[i] * m.dimensions_[i].size;
  const int64_t rank = m.world_->rank(), world_size = m.world_->size();
  for (size_t i = 0; i < n; ++i) {
    m.index_[m.dimensions_[i].name] = i;
    m.coordinates_.push_back(rank / m.strides_[i] % m.dimensions_[i].size);
  }
  // Every group of every dimension, in one order on every rank: dimension by dimension, each
  // group by its lowest rank.
  m.groups_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t size = m.dimensions_[i].size, stride = m.strides_[i];
    if (size == world_size) {
      m.groups_[i] = m.world_;  // the whole world: no group of its own
      continue;
    }
    for (int64_t first = 0; first < world_size; ++first) {
      if (first / stride % size != 0) continue;  // not the lowest rank of its group
      std::vector<int64_t> members;
      for (int64_t k = 0; k < size; ++k) members.push_back(first + k * stride);
      auto group = m.world_->new_group(members);
      if (group) m.groups_[i] = std::move(group);
    }
  }
  return mesh;
}

size_t ProcessMesh::index_of(const std::string& name) const {
  const auto it = index_.find(name);
  check<ConfigurationError>(it != index_.end(), "mesh: no dimension '", name, "' in ", to_string(dimensions_),
                            "; name it in the mesh");
  return it->second;
}

int64_t ProcessMesh::size(const std::string& name) const { return dimensions_[index_of(name)].size; }

int64_t ProcessMesh::coordinate(const std::string& name) const { return coordinates_[index_of(name)]; }

Communicator& ProcessMesh::group(const std::string& name) const { return *groups_[index_of(name)]; }

std::vector<int64_t> ProcessMesh::group_ranks(const std::string& name) const {
  const size_t i = index_of(name);
  auto coordinates = coordinates_;
  std::vector<int64_t> ranks;
  for (int64_t k = 0; k < dimensions_[i].size; ++k) {
    coordinates[i] = k;
    ranks.push_back(rank_at(coordinates));
  }
  return ranks;
}

int64_t ProcessMesh::rank_at(const std::vector<int64_t>& coordinates) const {
  check<ConfigurationError>(coordinates.size() == dimensions_.size(), "mesh: ", coordinates.size(),
                            " coordinates for the ", dimensions_.size(), " dimensions of ", to_string(dimensions_));
  int64_t rank = 0;
  for (size_t i = 0; i < coordinates.size(); ++i) {
    check<ConfigurationError>(coordinates[i] >= 0 && coordinates[i] < dimensions_[i].size, "mesh: coordinate ",
                              coordinates[i], " on '", dimensions_[i].name, "' is outside [0, ", dimensions_[i].size,
                              ")");
    rank += coordinates[i] * strides_[i];
  }
  return rank;
}

std::string ProcessMesh::describe() const {
  std::string out = to_string(dimensions_) + " (rank " + std::to_string(world_->rank()) + ":";
  for (size_t i = 0; i < dimensions_.size(); ++i)
    out += (i ? ", " : " ") + dimensions_[i].name + " " + std::to_string(coordinates_[i]);
  return out + ")";
}

}  // namespace volt
