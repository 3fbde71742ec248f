#pragma once
// Note [Diagnosing a hang] A collective that one rank never enters (a save called on rank 0
// only, a branch taken on one rank, two ranks at collectives of different sizes) waits until the
// timeout, 30 minutes by default, and then says only that it timed out. volt tells it apart in
// seconds:
//   - every collective a rank starts is recorded (kind, group, the group's sequence number, bytes,
//     dtype, and the CollectiveSite it was called from) in a ring of its last 64 (PeerMonitor);
//   - while a rank's thread is blocked waiting for a collective, its heartbeat (Note [Naming the
//     failed rank]) carries that collective's position; otherwise it says the rank is running;
//   - once a rank has waited longer than the hang check interval (--hang-check, default 5 s), its
//     heartbeat thread reads every rank's: when every rank is blocked, the positions stay the same
//     over two heartbeats while every rank still beats (alive, not frozen), and a member of the
//     group this rank waits in is blocked in another collective (another kind, sequence number,
//     size or dtype, or another group), no rank can ever proceed: a hang, certain, not a slow peer.
//     A rank that is running (computing, writing a file) may yet reach the collective, so a run
//     with a rank outside any collective is never reported; the timeout still bounds it.
//   - each rank then prints one report naming the collectives and the ranks in each, writes its
//     ring to the diagnostics directory, and (action fail, the default) its blocked collective
//     fails with the report, so that the run ends non-zero within a few heartbeats of the
//     interval; with action warn it keeps waiting.
// Covered: collectives over Gloo's process group, volt's rings and shared memory, whose waits are
// on the host. NCCL's are ordered on the stream (Note [Waiting for NCCL without blocking the
// host]): their records are kept and written, but no rank blocks in them, so no hang is reported.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace volt {

// How long a rank waits in a collective before the ranks' positions are compared, what a certain
// hang does, and where the rings are written.
struct HangCheckOptions {
  std::chrono::milliseconds interval{0};  // 0: no hang check
  bool warn_only = false;                 // report and keep waiting, instead of failing
  std::string report_directory;           // where collectives_rank<r>.txt goes ("": not written)
};

// Where a rank is, as its heartbeat publishes it.
struct RankPosition {
  bool known = false;    // a heartbeat was read
  bool blocked = false;  // waiting for the collective below
  std::string group;     // the group's global ranks, "0,1,2,3"
  int64_t sequence = 0;  // the collective's number in that group (point to point: apart)
  std::string kind;      // "all_reduce", "broadcast", "send", ...
  int64_t bytes = 0;
  std::string dtype;
  std::string site;  // CollectiveSite, "" when none
  bool point_to_point = false;

  // What must be equal on every rank of the group for a collective to complete.
  std::string signature() const;
  // "all_reduce #57 of 4096 bytes (float) in group 0,1 (ddp bucket 2, backward)".
  std::string describe() const;
  // One line of text, for the store; parse() reads it back (known stays false on garbage).
  std::string serialize() const;
  static RankPosition parse(const std::string& line);
};

// The report of a certain hang seen from rank `me`, given every rank's position by global rank
// (Note [Diagnosing a hang]); "" when the positions do not prove one (a rank unknown or running,
// or every member of `me`'s group in `me`'s collective).
std::string explain_hang(const std::vector<RankPosition>& ranks, int64_t me);

}  // namespace volt
