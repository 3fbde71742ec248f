#pragma once
// Note [Process mesh]
// The world's ranks arranged on named dimensions, such as pp=2,dp=2,tp=2 (torchtitan's
// ParallelDims, PyTorch's DeviceMesh): a rank's coordinate on each dimension says which pipeline
// stage, data-parallel replica and tensor-parallel shard it is. The arrangement is row-major, the
// first dimension outermost: rank r's coordinate on dimension i is (r / stride_i) % size_i, where
// stride_i is the product of the sizes after i. So the last dimension's groups are runs of
// consecutive ranks, which launchers put on one node: name last the dimension that communicates
// most (tensor parallelism), as torchtitan does.
//
// Each dimension has one group per rank: the ranks that share every other coordinate (the dp group
// of a pipeline stage: its replicas). Every group of every dimension is built once, when the mesh
// is, in one order on every rank (Communicator::new_group), so a strategy asks for a group by name
// and never builds one on the way.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/communicator.h"

namespace volt {

struct MeshDimension {
  std::string name;
  int64_t size = 1;
};

// "pp=2,dp=2,tp=2" as dimensions, in order. Names are lowercase letters, digits and '_', starting
// with a letter, each once; sizes whole numbers >= 1; ConfigurationError naming the fix otherwise.
std::vector<MeshDimension> parse_mesh_dimensions(const std::string& text);
// The dimensions back as text, "pp=2,dp=2,tp=2".
std::string to_string(const std::vector<MeshDimension>& dimensions);

class ProcessMesh {
 public:
  // Arranges `world`'s ranks on `dimensions` (checked as parse_mesh_dimensions checks them; their
  // sizes must multiply to the world size: ConfigurationError naming both otherwise) and builds
  // every group of every dimension. [collective over `world`]
  static std::unique_ptr<ProcessMesh> build(std::shared_ptr<Communicator> world, std::vector<MeshDimension> dimensions);

  const std::vector<MeshDimension>& dimensions() const { return dimensions_; }
  Communicator& world() const { return *world_; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  // The dimension's size, and this rank's coordinate on it (ConfigurationError for a name the mesh
  // does not have, listing those it has).
  int64_t size(const std::string& name) const;
  int64_t coordinate(const std::string& name) const;
  // This rank's group along the dimension: the ranks with its coordinates on every other one,
  // ordered by their coordinate on this one (so the group's rank is the coordinate).
  Communicator& group(const std::string& name) const;
  // The world ranks of that group, in the group's order.
  std::vector<int64_t> group_ranks(const std::string& name) const;
  // The world rank at `coordinates` (one per dimension, in order).
  int64_t rank_at(const std::vector<int64_t>& coordinates) const;
  // "pp=2,dp=2,tp=2 (rank 5: pp 1, dp 0, tp 1)", for messages and logs.
  std::string describe() const;

 private:
  ProcessMesh(std::shared_ptr<Communicator> world, std::vector<MeshDimension> dimensions);
  size_t index_of(const std::string& name) const;

  std::shared_ptr<Communicator> world_;
  std::vector<MeshDimension> dimensions_;
  std::map<std::string, size_t> index_;
  std::vector<int64_t> strides_;
  std::vector<int64_t> coordinates_;                   // this rank's, one per dimension
  std::vector<std::shared_ptr<Communicator>> groups_;  // this rank's, one per dimension
};

}  // namespace volt
