#include "data/pack/pack_resume.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "base/error.h"

namespace rt::data {

namespace {

int64_t mtime_ns_of(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec; }

// A path as the shell reads it: quoted only where it needs to be.
std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_/.,+:=@-") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string class_name(const std::vector<std::string>& classes, int64_t label) {
  return label >= 0 && label < int64_t(classes.size()) ? "'" + classes[size_t(label)] + "'" : "?";
}

std::string first_names(const std::vector<std::string>& v) {
  std::string s;
  for (size_t k = 0; k < v.size() && k < 5; ++k) s += (k ? ", " : "") + v[k];
  return s + (v.size() > 5 ? ", ..." : "");
}

// What changed about one kept input at position p; "" when nothing did. *order_only: the file
// is there, unchanged, at another position (a consequence of other files' changes).
std::string change_of(bool* order_only, const ShardInput& was, int64_t p, const PackListing& now,
                      std::unordered_map<std::string, int64_t>& position_of, const std::vector<std::string>& classes) {
  const std::string name = "'" + was.rel + "'";
  if (p >= int64_t(now.rels.size()) || now.rels[size_t(p)] != was.rel) {
    if (position_of.empty())
      for (size_t q = 0; q < now.rels.size(); ++q) position_of.emplace(now.rels[q], int64_t(q));
    const auto it = position_of.find(was.rel);
    if (it == position_of.end())
      return name + " (position " + std::to_string(p) + ") is missing: renamed, moved to another class folder or "
             "deleted";
    *order_only = true;
    return name + " was at position " + std::to_string(p) + " of the shuffled list and is now at " +
           std::to_string(it->second) + ": the order changed (files added, removed or renamed)";
  }
  if (now.labels[size_t(p)] != was.label)
    return name + " has label " + std::to_string(now.labels[size_t(p)]) + " (class " +
           class_name(now.classes, now.labels[size_t(p)]) + ") where the shard has " + std::to_string(was.label) +
           " (class " + class_name(classes, was.label) + "): its class folder changed";
  const std::string path = now.root + "/" + was.rel;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return was.size < 0 ? "" : name + " is missing: " + std::strerror(errno);
  if (int64_t(st.st_size) != was.size)
    return name + " changed content (size " + std::to_string(was.size) + " -> " + std::to_string(st.st_size) +
           " bytes)";
  if (mtime_ns_of(st) == was.mtime_ns) return "";
  ShardInput again;  // same size, another mtime: touched, or rewritten; the bytes decide
  try {
    read_input(path, &again);
  } catch (const Error& e) {
    return name + " cannot be read again: " + e.what();
  }
  return again.crc32 == was.crc32 && again.size == was.size ? ""
                                                             : name + " changed content (same size, other bytes)";
}

}  // namespace

std::vector<uint8_t> read_input(const std::string& path, ShardInput* id) {
  id->size = -1;
  id->mtime_ns = 0;
  id->crc32 = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  RT_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    RT_FAIL(path, ": not a regular file");
  }
  id->size = int64_t(st.st_size);
  id->mtime_ns = mtime_ns_of(st);
  std::vector<uint8_t> b(size_t(st.st_size));
  size_t done = 0;
  while (done < b.size()) {
    const ssize_t r = ::pread(fd, b.data() + done, b.size() - done, off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = errno;
      ::close(fd);
      RT_FAIL(path, ": read failed after ", done, " of ", b.size(), " bytes (", r == 0 ? "the file shrank" :
              std::strerror(e), ")");
    }
    done += size_t(r);
  }
  ::close(fd);
  // zlib takes lengths as uInt: a file over 4 GiB in pieces.
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < b.size();) {
    const size_t n = std::min<size_t>(b.size() - at, size_t(1) << 30);
    crc = crc32(crc, b.data() + at, uInt(n));
    at += n;
  }
  id->crc32 = uint32_t(crc);
  return b;
}

std::string start_over_command(const std::string& output) {
  return "rm -f " + shell_word(output) + "-*.tar " + shell_word(output) + "-*.idx " + shell_word(output + ".json");
}

void verify_kept_shards(const std::vector<ShardIndex>& kept, const PackListing& now, const std::string& output,
                        int64_t stored_files) {
  const std::string refuse = "pack: cannot resume '" + output + "': ";
  const std::string advice = ". Finished shards are never overwritten; to start over, run `" +
                             start_over_command(output) + "` and pack again, or choose another --output";
  // The files that changed come first; files that only moved in the shuffled order (every
  // rename or removal moves many) are listed when nothing else explains the refusal.
  std::vector<std::string> changes, moves;
  int64_t count = 0;
  std::string first_shard;
  auto note = [&](const std::string& change, const ShardIndex& s, bool order_only = false) {
    ++count;
    std::vector<std::string>& list = order_only ? moves : changes;
    if (list.size() < 5) list.push_back(change);
    if (first_shard.empty()) first_shard = s.path;
  };
  if (!kept.empty() && stored_files != int64_t(now.rels.size()))
    note("the folder holds " + std::to_string(now.rels.size()) + " images now, " + std::to_string(stored_files) +
         " when the shards were written", kept.front());
  std::unordered_map<std::string, int64_t> position_of;
  for (const ShardIndex& s : kept) {
    RT_CHECK(s.version >= 2, refuse, "'", s.path, "' was written by an older ringtape (index version 1), which ",
             "did not record the files it read, so pack cannot check they are unchanged", advice);
    if (s.classes != now.classes) {
      size_t d = 0;
      while (d < s.classes.size() && d < now.classes.size() && s.classes[d] == now.classes[d]) ++d;
      note("the class folders changed, so labels shift: the shards were labelled with " +
           std::to_string(s.classes.size()) + " classes (" + first_names(s.classes) + "), the folder now has " +
           std::to_string(now.classes.size()) + " (" + first_names(now.classes) + "); the first difference is " +
           "label " + std::to_string(d) + ": " + (d < s.classes.size() ? "'" + s.classes[d] + "'" : "none") +
           " then, " + (d < now.classes.size() ? "'" + now.classes[d] + "'" : "none") + " now", s);
      continue;  // every label of this shard would differ: the class change says it all
    }
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      bool order_only = false;
      const std::string c =
          change_of(&order_only, s.inputs[i], s.source_first + int64_t(i), now, position_of, s.classes);
      if (!c.empty()) note(c, s, order_only);
    }
  }
  if (count == 0) return;
  for (const std::string& m : moves)
    if (changes.size() < 5) changes.push_back(m);
  std::string list;
  for (const std::string& c : changes) list += (list.empty() ? "" : "; ") + c;
  if (count > int64_t(changes.size()))
    list += "; and " + std::to_string(count - int64_t(changes.size())) + " more change(s)";
  RT_FAIL(refuse, "the input changed since its finished shards were written, and keeping them would mix old and new ",
          "data: ", list, ". The first shard affected is '", first_shard, "'", advice);
}

}  // namespace rt::data
