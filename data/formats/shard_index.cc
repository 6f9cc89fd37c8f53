#include "data/formats/shard_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "data/formats/tar.h"

namespace rt::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "ringtape-shard-index";

bool is_image_field(const std::string& f) {
  std::string l = f;
  for (char& c : l) c = char(std::tolower(static_cast<unsigned char>(c)));
  return l == "jpg" || l == "jpeg" || l == "png";
}

// A label written as decimal text ("123", "123\n"); false for anything else.
bool parse_label(const std::string& text, int64_t* out) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  if (b == e || e - b > 18) return false;
  int64_t v = 0;
  for (size_t i = b; i < e; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  *out = v;
  return true;
}

}  // namespace

std::string escape_token(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '_' || c == '/' || c == '-' || c == '.') out += char(c);
    else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

bool unescape_token(const std::string& t, std::string* out) {
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  out->clear();
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '%') {
      *out += t[i];
      continue;
    }
    if (i + 2 >= t.size()) return false;
    const int hi = digit(t[i + 1]), lo = digit(t[i + 2]);
    if (hi < 0 || lo < 0) return false;
    *out += char(hi * 16 + lo);
    i += 2;
  }
  return true;
}

std::pair<std::string, std::string> split_member_name(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

std::vector<std::string> expand_braces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  const size_t close_any = pattern.find('}');
  if (open == std::string::npos) {
    RT_CHECK(close_any == std::string::npos, "shard pattern '", pattern, "': '}' without '{'");
    return {pattern};
  }
  const size_t close = pattern.find('}', open);
  RT_CHECK(close != std::string::npos, "shard pattern '", pattern, "': '{' without '}'");
  RT_CHECK(close_any >= open, "shard pattern '", pattern, "': '}' before '{'");
  const std::string body = pattern.substr(open + 1, close - open - 1);
  RT_CHECK(body.find('{') == std::string::npos, "shard pattern '", pattern, "': nested braces are not supported");
  std::vector<std::string> items;
  const size_t dots = body.find("..");
  if (dots != std::string::npos) {
    const std::string lo = body.substr(0, dots), hi = body.substr(dots + 2);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 12 &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    RT_CHECK(digits(lo) && digits(hi), "shard pattern '", pattern, "': {", body,
             "} is not a numeric range like {000000..000146}");
    const int64_t a = std::stoll(lo), b = std::stoll(hi);
    RT_CHECK(a <= b, "shard pattern '", pattern, "': the range {", body, "} runs backwards");
    RT_CHECK(b - a < 10'000'000, "shard pattern '", pattern, "': the range {", body, "} names over 10 million shards");
    for (int64_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      items.push_back(s);
    }
  } else {
    std::stringstream ss(body);
    for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
    if (!body.empty() && body.back() == ',') items.push_back("");
    RT_CHECK(!items.empty(), "shard pattern '", pattern, "': empty braces {}");
  }
  std::vector<std::string> out;
  const std::string head = pattern.substr(0, open);
  const std::vector<std::string> rests = expand_braces(pattern.substr(close + 1));
  for (const std::string& item : items)  // the first brace varies slowest, as in a shell
    for (const std::string& rest : rests) out.push_back(head + item + rest);
  return out;
}

std::vector<std::string> list_shards(const std::string& data_path, const std::string& prefix) {
  std::error_code ec;
  std::vector<std::string> shards;
  if (data_path.find('{') == std::string::npos && fs::is_directory(data_path, ec)) {
    for (const auto& e : fs::directory_iterator(data_path, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > prefix.size() + 5 && name.rfind(prefix + "-", 0) == 0 &&
          name.compare(name.size() - 4, 4, ".tar") == 0)
        shards.push_back(e.path().string());
    }
    RT_CHECK(!ec, "webdataset: cannot list '", data_path, "': ", ec.message());
    std::sort(shards.begin(), shards.end());
    RT_CHECK(!shards.empty(), "webdataset: no ", prefix, "-*.tar shards in '", data_path, "'; write them with ",
             "`ringtape pack --data-path imagenet/", prefix == "val" ? "val" : "train", " --output ",
             (fs::path(data_path) / prefix).string(), "`, or give a brace pattern like '", data_path, "/", prefix,
             "-{000000..000009}.tar'");
    return shards;
  }
  shards = expand_braces(data_path);
  for (const std::string& s : shards)
    RT_CHECK(fs::is_regular_file(s, ec), "webdataset: shard '", s, "' not found",
             shards.size() > 1 ? " (the pattern '" + data_path + "' names " + std::to_string(shards.size()) + " shards)"
                               : std::string(),
             "; check the path and the pattern's range, or re-run `ringtape pack` to write it");
  return shards;
}

std::string index_path_of(const std::string& tar_path) {
  const fs::path p(tar_path);
  return p.extension() == ".tar" ? fs::path(p).replace_extension(".idx").string() : tar_path + ".idx";
}

namespace {

// The version 2 sections after the samples: "classes" and "inputs" (Note [Shard index files]).
template <class Next, class Bad>
void read_inputs(std::istream& in, ShardIndex& x, int64_t& line_no, Next& next, Bad& bad) {
  std::string line, word;
  int64_t c = -1, m = -1;
  try {
    c = std::stoll(next("classes"));
  } catch (const std::logic_error&) {
    bad("malformed number");
  }
  if (c < 0 || c > 100'000'000) bad("class count " + std::to_string(c) + " is not plausible");
  x.classes.resize(size_t(c));
  for (std::string& name : x.classes) {
    ++line_no;
    if (!std::getline(in, line) || !unescape_token(line, &name)) bad("malformed class name");
  }
  try {
    m = std::stoll(next("inputs"));
  } catch (const std::logic_error&) {
    bad("malformed number");
  }
  if (m != x.source_end - x.source_first) bad("inputs " + std::to_string(m) + " where source covers " +
                                              std::to_string(x.source_end - x.source_first) + " positions");
  x.inputs.resize(size_t(m));
  for (ShardInput& f : x.inputs) {
    ++line_no;
    if (!std::getline(in, line)) bad("ends before its inputs do");
    std::istringstream ls(line);
    std::string crc;
    if (!(ls >> word >> f.size >> f.mtime_ns >> f.label >> crc) || !unescape_token(word, &f.rel) || crc.size() != 8 ||
        crc.find_first_not_of("0123456789abcdef") != std::string::npos)
      bad("malformed input line");
    f.crc32 = uint32_t(std::stoul(crc, nullptr, 16));
  }
}

}  // namespace

bool read_shard_index(const std::string& tar_path, int64_t tar_bytes, ShardIndex* out, bool with_inputs) {
  const std::string path = index_path_of(tar_path);
  std::ifstream in(path);
  if (!in) return false;
  ShardIndex x;
  x.path = tar_path;
  std::string line;
  int64_t line_no = 0;
  auto bad = [&](const std::string& what) {
    RT_FAIL("webdataset: index '", path, "' line ", line_no, ": ", what, "; delete it (it is rebuilt by scanning '",
            tar_path, "') or re-run `ringtape pack`");
  };
  auto next = [&](const char* name) {
    ++line_no;
    if (!std::getline(in, line)) bad(std::string("ends before its \"") + name + "\" line");
    std::istringstream ls(line);
    std::string word;
    ls >> word;
    if (word != name) bad(std::string("expected \"") + name + "\", found \"" + line.substr(0, 40) + "\"");
    std::string rest;
    std::getline(ls, rest);
    if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    return rest;
  };
  const std::string version = next(kMagic);
  if (version != "1" && version != "2") bad("unknown version " + version + " (this ringtape reads versions 1 and 2)");
  x.version = version == "1" ? 1 : 2;
  int64_t n = -1;
  try {
    x.tar_bytes = std::stoll(next("tar_bytes"));
    std::istringstream src(next("source"));
    if (!(src >> x.source_first >> x.source_end)) bad("malformed \"source\" line");
    x.options = next("options");
    n = std::stoll(next("samples"));
  } catch (const std::logic_error&) {  // stoll: not a number, or out of range
    bad("malformed number");
  }
  if (x.tar_bytes != tar_bytes) return false;  // the tar changed since: scan it
  if (n < 0 || n > x.tar_bytes / 1024) bad("sample count " + std::to_string(n) + " cannot fit the tar");
  x.samples.resize(size_t(n));
  for (ShardSample& s : x.samples) {
    ++line_no;
    if (!std::getline(in, line)) bad("ends after " + std::to_string(line_no - 6) + " of " + std::to_string(n) +
                                     " samples");
    std::istringstream ls(line);
    if (!(ls >> s.key >> s.field >> s.offset >> s.size >> s.label)) bad("malformed sample line");
    if (!is_image_field(s.field) || s.offset < 512 || s.size < 0 || s.label < 0 || s.offset > tar_bytes - s.size)
      bad("sample '" + s.key + "' lies outside the tar or has a bad field or label");
  }
  if (with_inputs && x.version >= 2) read_inputs(in, x, line_no, next, bad);
  *out = std::move(x);
  return true;
}

void write_shard_index(const ShardIndex& x) {
  const std::string path = index_path_of(x.path), tmp = path + ".tmp";
  std::ostringstream os;
  os << kMagic << " 2\ntar_bytes " << x.tar_bytes << "\nsource " << x.source_first << ' ' << x.source_end
     << "\noptions " << x.options << "\nsamples " << x.samples.size() << '\n';
  for (const ShardSample& s : x.samples)
    os << s.key << ' ' << s.field << ' ' << s.offset << ' ' << s.size << ' ' << s.label << '\n';
  os << "classes " << x.classes.size() << '\n';
  for (const std::string& c : x.classes) os << escape_token(c) << '\n';
  os << "inputs " << x.inputs.size() << '\n';
  char crc[16];
  for (const ShardInput& f : x.inputs) {
    std::snprintf(crc, sizeof crc, "%08x", unsigned(f.crc32));
    os << escape_token(f.rel) << ' ' << f.size << ' ' << f.mtime_ns << ' ' << f.label << ' ' << crc << '\n';
  }
  const std::string text = os.str();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RT_CHECK(fd >= 0, "webdataset: cannot write '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      RT_FAIL("webdataset: writing '", tmp, "' failed: ", std::strerror(e));
    }
    done += size_t(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const int e = errno;
  RT_CHECK(::close(fd) == 0 && synced, "webdataset: writing '", tmp, "' failed: ", std::strerror(e));
  RT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "webdataset: cannot rename '", tmp, "' to '", path, "': ",
           std::strerror(errno));
}

ShardIndex scan_shard(const std::string& tar_path) {
  const RandomAccessFile file(tar_path);
  const std::vector<TarMember> members = list_tar(file);
  ShardIndex x;
  x.path = tar_path;
  x.tar_bytes = file.size();
  std::string label_text;
  auto report = [&](const std::string& key, const std::string& why) {
    ++x.skipped;
    if (x.skipped <= 5)
      std::fprintf(stderr, "webdataset: %s: sample '%s' skipped: %s\n", tar_path.c_str(), key.c_str(), why.c_str());
  };
  for (size_t i = 0; i < members.size();) {
    const std::string key = split_member_name(members[i].name).first;
    ShardSample s;
    s.key = key;
    bool have_image = false, have_label = false, bad_label = false;
    std::string dotted;  // a member named like "<key>.1.jpg": an image whose key held a dot
    for (; i < members.size() && split_member_name(members[i].name).first == key; ++i) {
      const TarMember& m = members[i];
      const std::string field = split_member_name(m.name).second;
      const size_t last_dot = field.rfind('.');
      if (dotted.empty() && last_dot != std::string::npos && is_image_field(field.substr(last_dot + 1)))
        dotted = m.name;
      if (is_image_field(field) && !have_image) {
        have_image = true;
        s.field = field;
        s.offset = m.data_offset;
        s.size = m.size;
      } else if (field == "cls" && !have_label) {
        have_label = true;
        if (m.size > 64) {
          bad_label = true;
          continue;
        }
        std::vector<uint8_t> buf(size_t(m.size));
        file.read_exact(m.data_offset, buf);
        label_text.assign(buf.begin(), buf.end());
        bad_label = !parse_label(label_text, &s.label);
      }
    }
    if (!have_image && !dotted.empty())
      report(key, "no jpg, jpeg or png member: its member '" + dotted + "' has the field '" +
                      split_member_name(dotted).second + "', because WebDataset's key ends at the first dot of the "
                      "file name (\"a/img.1.jpg\" is key \"a/img\", field \"1.jpg\"); the tool that wrote this tar "
                      "must not put dots in keys (ringtape pack does not)");
    else if (!have_image) report(key, "no jpg, jpeg or png member");
    else if (!have_label) report(key, "no cls member (the class index)");
    else if (bad_label) report(key, "its cls member is not a class index (decimal text)");
    else x.samples.push_back(std::move(s));
  }
  if (x.skipped > 5)
    std::fprintf(stderr, "webdataset: %s: %lld samples skipped in all\n", tar_path.c_str(), (long long)x.skipped);
  return x;
}

ShardIndex load_shard(const std::string& tar_path) {
  std::error_code ec;
  const auto bytes = fs::file_size(tar_path, ec);
  RT_CHECK(!ec, "webdataset: shard '", tar_path, "': ", ec.message());
  ShardIndex x;
  if (read_shard_index(tar_path, int64_t(bytes), &x)) return x;
  return scan_shard(tar_path);
}

}  // namespace rt::data
