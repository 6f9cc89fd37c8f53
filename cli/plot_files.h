// The files `ringtape plot` writes: atomically (a temporary name beside the target, created
// exclusively so that nothing already there is touched, then renamed over the target), and
// a PNG made from the SVG by rsvg-convert (librsvg), run as a subprocess without a shell.
#pragma once

#include <string>

namespace rt::cli {

// The executable `name` in a directory of $PATH, or "" when there is none.
std::string find_on_path(const std::string& name);

// Writes `bytes` to `path` atomically. Throws rt::Error naming the path and the reason.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Renders the SVG file `svg_path` into `png_path` (atomically, at twice its pixel size)
// with the rsvg-convert at `rsvg`. Throws rt::Error when it cannot be started or fails
// (its own message goes to stderr before).
void svg_to_png(const std::string& rsvg, const std::string& svg_path, const std::string& png_path);

// The temporary file "<path>.tmp.<pid><suffix>", created empty and exclusively (throws
// rt::Error when it cannot be, or already exists), removed when this object goes unless
// released (renamed into place).
class TempFile {
 public:
  explicit TempFile(const std::string& path, const std::string& suffix = "");
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace rt::cli
