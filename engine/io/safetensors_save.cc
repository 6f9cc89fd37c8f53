// Atomic safetensors writing: a crash, a full disk or a bad tensor at any point leaves
// the previous checkpoint at `path` as it was.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "engine/io/safetensors_util.h"

namespace rt {

namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes through a FILE*; the first failure removes the temporary file and throws.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(path), tmp_(save_temp_path(path)) {
    f_ = std::fopen(tmp_.c_str(), "wbe");  // 'e': O_CLOEXEC, a forked child must not hold it
    if (!f_) fail("creating the temporary file", errno);
  }
  ~TempFile() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* p, size_t n) {
    if (n > 0 && std::fwrite(p, 1, n, f_) != n) fail("writing the temporary file", errno);
  }

  // Flush to the disk, then replace `path`: readers see the old file or the new one,
  // never a torn mix.
  void commit() {
    if (std::fflush(f_) != 0) fail("flushing the temporary file", errno);
    if (::fsync(::fileno(f_)) != 0) fail("fsync of the temporary file", errno);
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail("closing the temporary file", errno);
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("renaming the temporary file over it", errno);
    committed_ = true;
    sync_dir();
  }

 private:
  [[noreturn]] void fail(const char* what, int err) const {
    RT_FAIL("save_safetensors: cannot write '", path_, "': ", what, " ('", tmp_, "') failed: ", std::strerror(err),
            "; the file previously at that path (if any) is unchanged");
  }

  // The rename lives in the directory: without this fsync a power loss may undo it.
  void sync_dir() const {
    const std::string dir = parent_dir(path_);
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      RT_FAIL("save_safetensors: wrote '", path_, "' but cannot open its directory '", dir,
              "' to fsync it: ", std::strerror(errno), "; the new file may not survive a power loss");
    const io_detail::FdCloser closer{fd};
    // EINVAL: the filesystem does not support fsync on directories; nothing more to do.
    if (::fsync(fd) != 0 && errno != EINVAL)
      RT_FAIL("save_safetensors: wrote '", path_, "' but fsync of its directory '", dir,
              "' failed: ", std::strerror(errno), "; the new file may not survive a power loss");
  }

  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Everything that can fail on the tensors (undefined, device copies) happens before the
  // temporary file exists.
  json::Value header = json::Value::object();
  if (!metadata.empty()) {
    json::Object m;
    for (const auto& [k, v] : metadata) m.emplace_back(k, v);
    header.as_object().emplace_back("__metadata__", std::move(m));
  }
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // std::map: sorted keys, and data in that order
    RT_CHECK(name != "__metadata__", "save_safetensors('", path,
             "'): \"__metadata__\" is reserved for the metadata map; rename the tensor");
    RT_CHECK(t.defined(), "save_safetensors('", path, "'): tensor '", name,
             "' is undefined; pass only defined tensors");
    Tensor h = t.to(Device::cpu()).contiguous();
    json::Array shape;
    for (int64_t d : h.shape()) shape.emplace_back(d);
    json::Object entry;
    entry.emplace_back("dtype", safetensors_dtype_name(h.dtype()));
    entry.emplace_back("shape", std::move(shape));
    entry.emplace_back("data_offsets", json::Array{json::Value(offset), json::Value(offset + h.nbytes())});
    header.as_object().emplace_back(name, std::move(entry));
    offset += h.nbytes();
    host.push_back(std::move(h));
  }
  std::string text = json::dump(header);
  // Pad with spaces (JSON whitespace) so the data starts 8-byte aligned, as the
  // reference implementation does: readers may then map tensors in place.
  text.append((8 - text.size() % 8) % 8, ' ');

  unsigned char len_bytes[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len_bytes[i] = static_cast<unsigned char>(n & 0xff);

  TempFile out(path);
  out.write(len_bytes, 8);
  out.write(text.data(), text.size());
  for (const Tensor& h : host) out.write(h.raw_data(), h.nbytes());
  out.commit();
}

std::string save_temp_path(const std::string& path) { return path + kSaveTempMark + std::to_string(::getpid()); }

}  // namespace rt
