// The lock that keeps two `ringtape pack` runs off one output (Note [Pack output lock]).
//
// Note [Pack output lock]
// Two packs writing one OUTPUT would interleave their shards: each finishes shards the other
// then resumes from or renames over, and one of them exits 0 with mixed data. So a pack holds
// an exclusive flock(2) on OUTPUT.lock from before it looks at the output until it returns;
// a second pack fails at once, naming the first's host and pid (written into the file after
// locking). The kernel releases the lock when the process ends however it ends, so a killed
// pack never leaves a stale lock. The file itself is never removed: unlinking it would let a
// third pack lock a new file of that name while the second still holds the old one. flock is
// advisory and, on some network file systems, local to one machine: packs on two machines
// into one NFS folder may not see each other's lock.
#pragma once

#include <string>

namespace rt::data {

class PackOutputLock {
 public:
  // Locks OUTPUT.lock (creating it), or throws rt::Error naming the pack that holds it and
  // what to do (wait for it, or stop it).
  explicit PackOutputLock(const std::string& output);
  ~PackOutputLock();  // releases the lock
  PackOutputLock(const PackOutputLock&) = delete;
  PackOutputLock& operator=(const PackOutputLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace rt::data
