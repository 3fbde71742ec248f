#pragma once
// What the replicas and the lighthouse write to each other through the lighthouse's store
// (lighthouse.h, replica_link.h); private to distributed/fault_tolerance/. Every key is under
// "volt/ft/":
//   hb/<replica>                    a counter the replica's leader adds 1 to at every heartbeat
//   req/<replica>                   its latest request (JoinRequest::encode)
//   ans/<replica>/<nonce>/<seq>     the answer to it: "ok " + Quorum::encode(), or "error " + why
//   status                          what the lighthouse waits for (Lighthouse::status)
//   group/<generation>/<rank>/...   the cross-replica group of each rank of a replica
#include <cstdint>
#include <sstream>
#include <string>

#include "core/error.h"

namespace volt::lighthouse_protocol {

inline const std::string kPrefix = "volt/ft";

inline std::string heartbeat_key(int64_t replica) { return "hb/" + std::to_string(replica); }
inline std::string request_key(int64_t replica) { return "req/" + std::to_string(replica); }
inline std::string answer_key(int64_t replica, uint64_t nonce, int64_t seq) {
  return "ans/" + std::to_string(replica) + "/" + std::to_string(nonce) + "/" + std::to_string(seq);
}
inline const std::string kStatusKey = "status";
inline std::string group_prefix(int64_t generation, int64_t replica_rank) {
  return kPrefix + "/group/" + std::to_string(generation) + "/" + std::to_string(replica_rank);
}

struct JoinRequest {
  int64_t replicas = 0;     // the run's replica count, as this replica was told
  uint64_t nonce = 0;       // drawn once per process: tells a restarted replica from its predecessor
  int64_t seq = 0;          // this process's requests before this one
  int64_t step = 0;         // committed optimizer steps
  bool failed = false;      // its last step did not commit
  std::string fingerprint;  // the model and replica size, without spaces

  std::string encode() const {
    std::ostringstream text;
    text << "request " << replicas << " " << nonce << " " << seq << " " << step << " " << failed << " " << fingerprint;
    return text.str();
  }
  static JoinRequest decode(const std::string& text) {
    std::istringstream in(text);
    std::string word;
    JoinRequest request;
    in >> word >> request.replicas >> request.nonce >> request.seq >> request.step >> request.failed >>
        request.fingerprint;
    check<DistributedError>(in && word == "request", "lighthouse: expected a join request, got '", text, "'");
    return request;
  }
};

}  // namespace volt::lighthouse_protocol
