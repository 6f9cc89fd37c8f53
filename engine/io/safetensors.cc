// Header validation and loading. Save lives in safetensors_save.cc.
#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "engine/io/json.h"
#include "engine/io/safetensors_util.h"

// Tensor bytes are copied between file and memory as they are: the format is
// little-endian, so the host must be too.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace rt {

namespace {

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kSafetensorsNames[] = {{"F32", DType::f32}, {"F64", DType::f64}, {"BF16", DType::bf16},
                                     {"F16", DType::f16}, {"I32", DType::i32}, {"I64", DType::i64},
                                     {"U8", DType::u8}};
constexpr const char* kSupportedList = "F32, F64, BF16, F16, I32, I64, U8";
// In the format but with no ringtape dtype: named separately so the message says
// "unsupported" rather than "unknown".
constexpr const char* kOtherSpecDTypes[] = {"BOOL", "I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2",
                                            "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

// Names, keys and values from the header are clipped in messages (clip_for_message): a
// hostile header may hold a name of megabytes.

template <typename... A>
[[noreturn]] void fail_file(const std::string& path, const A&... a) {
  RT_FAIL("safetensors file '", path, "': ", a...);
}
template <typename... A>
[[noreturn]] void fail_entry(const std::string& path, std::string_view name, const A&... a) {
  RT_FAIL("safetensors file '", path, "': tensor '", clip_for_message(name), "': ", a...);
}

// A JSON value shown in an error message, clipped like names.
std::string shown(const json::Value& v) { return clip_for_message(json::dump(v)); }

DType parse_dtype(const std::string& path, const std::string& name, const json::Value& v) {
  if (!v.is_string()) fail_entry(path, name, "\"dtype\" must be a string like \"F32\", got ", shown(v));
  const std::string& s = v.as_string();
  for (const DTypeName& d : kSafetensorsNames)
    if (s == d.name) return d.dtype;
  for (const char* other : kOtherSpecDTypes)
    if (s == other)
      fail_entry(path, name, "dtype ", s, " is not supported by ringtape (supported: ", kSupportedList,
                 "); convert the tensor before saving");
  fail_entry(path, name, "unknown dtype \"", clip_for_message(s), "\" (supported: ", kSupportedList, ")");
}

Shape parse_shape(const std::string& path, const std::string& name, const json::Value& v) {
  if (!v.is_array()) fail_entry(path, name, "\"shape\" must be an array of integers, got ", shown(v));
  const json::Array& a = v.as_array();
  if (a.size() > kSafetensorsMaxRank)
    fail_entry(path, name, "shape has ", a.size(), " dimensions, more than the limit of ", kSafetensorsMaxRank);
  Shape shape;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_int() || a[i].as_int() < 0)
      fail_entry(path, name, "shape dimension ", i, " must be a non-negative integer below 2^63, got ", shown(a[i]));
    shape.push_back(a[i].as_int());
  }
  return shape;
}

// numel * element size, or a clear error when the product does not fit in 63 bits. Zero
// dims do not excuse the others: [0, 2^62, 2^62] is as absurd as [2^62, 2^62].
uint64_t entry_bytes(const std::string& path, const std::string& name, const Shape& shape, DType dtype) {
  int64_t product = 1;  // of the non-zero dims
  bool has_zero = false;
  for (int64_t d : shape) {
    if (d == 0) {
      has_zero = true;
    } else if (__builtin_mul_overflow(product, d, &product)) {
      fail_entry(path, name, "shape ", shape_str(shape), " has more elements than fit in 63 bits");
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(product, int64_t(dtype_size(dtype)), &bytes))
    fail_entry(path, name, "shape ", shape_str(shape), " of ", dtype_name(dtype),
               " needs more bytes than fit in 63 bits");
  return has_zero ? 0 : uint64_t(bytes);
}

void parse_offsets(const std::string& path, const std::string& name, const json::Value& v, SafetensorsEntry& e) {
  const bool ok = v.is_array() && v.as_array().size() == 2 && v.as_array()[0].is_int() &&
                  v.as_array()[1].is_int() && v.as_array()[0].as_int() >= 0 && v.as_array()[1].as_int() >= 0;
  if (!ok)
    fail_entry(path, name, "\"data_offsets\" must be [begin, end] with non-negative integers, got ", shown(v));
  e.begin = uint64_t(v.as_array()[0].as_int());
  e.end = uint64_t(v.as_array()[1].as_int());
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json::Value& v) {
  if (v.is_null()) return {};  // the reference implementation reads null as "no metadata"
  if (!v.is_object()) fail_file(path, "\"__metadata__\" must be an object of strings, got ", shown(v));
  std::map<std::string, std::string> m;
  for (const json::Member& kv : v.as_object()) {
    if (!kv.second.is_string())
      fail_file(path, "\"__metadata__\" value for key '", clip_for_message(kv.first), "' must be a string, got ",
                shown(kv.second));
    m.emplace(kv.first, kv.second.as_string());
  }
  return m;
}

const json::Value& required(const std::string& path, const std::string& name, const json::Value& entry,
                            const char* key) {
  const json::Value* v = entry.find(key);
  if (!v) fail_entry(path, name, "missing \"", key, "\" (each tensor needs dtype, shape and data_offsets)");
  return *v;
}

// The tensors must tile [0, buffer_bytes) exactly: anything else is a corrupt or crafted
// file (overlaps alias two tensors' data; holes hide bytes no reader looks at).
void check_coverage(const std::string& path, std::vector<SafetensorsEntry>& entries, uint64_t buffer_bytes) {
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin < covered)
      fail_entry(path, e.name, "data_offsets [", e.begin, ", ", e.end, ") overlap tensor '",
                 clip_for_message(prev->name), "' at [", prev->begin, ", ", prev->end, "); tensors must not share bytes");
    if (e.begin > covered)
      fail_entry(path, e.name, "data starts at byte ", e.begin, " but the data before it ends at byte ", covered,
                 "; the buffer has a hole of ", e.begin - covered, " bytes (tensors must cover it exactly)");
    covered = e.end;
    prev = &e;
  }
  if (covered != buffer_bytes)
    fail_file(path, "the data buffer holds ", buffer_bytes, " bytes but the tensors cover only the first ", covered,
              "; the file has trailing bytes no tensor owns");
}

// Reads exactly n bytes at `offset`; the file may not shrink under us.
void read_exact(int fd, const std::string& path, uint64_t offset, void* dst, uint64_t n) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = size_t(std::min<uint64_t>(n, 1u << 30));
    const ssize_t r = ::pread(fd, p, chunk, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail_file(path, "read at byte ", offset, " failed: ", std::strerror(errno));
    if (r == 0) fail_file(path, "unexpected end of file at byte ", offset, " (was it truncated while reading?)");
    p += r;
    offset += uint64_t(r);
    n -= uint64_t(r);
  }
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const DTypeName& d : kSafetensorsNames)
    if (d.dtype == t) return d.name;
  RT_FAIL("dtype ", dtype_name(t), " has no safetensors name");
}

SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t buffer_bytes,
                                           const std::string& path) {
  json::Value root;
  try {
    json::ParseOptions opt;
    opt.max_values = kSafetensorsMaxHeaderValues;
    root = json::parse(header_json, opt);
  } catch (const Error& e) {
    fail_file(path, "header is not valid JSON (", e.what(), "); the file is corrupt or not a safetensors file");
  }
  if (!root.is_object()) fail_file(path, "header must be a JSON object, got a JSON ", root.type_name());

  SafetensorsHeader h;
  for (const json::Member& kv : root.as_object()) {
    const std::string& name = kv.first;
    if (name == "__metadata__") {
      h.metadata = parse_metadata(path, kv.second);
      continue;
    }
    if (!kv.second.is_object())
      fail_entry(path, name, "entry must be an object {dtype, shape, data_offsets}, got ", shown(kv.second));
    SafetensorsEntry e;
    e.name = name;
    e.dtype = parse_dtype(path, name, required(path, name, kv.second, "dtype"));
    e.shape = parse_shape(path, name, required(path, name, kv.second, "shape"));
    parse_offsets(path, name, required(path, name, kv.second, "data_offsets"), e);
    const uint64_t bytes = entry_bytes(path, name, e.shape, e.dtype);
    if (e.begin > e.end) fail_entry(path, name, "data_offsets [", e.begin, ", ", e.end, "] have begin > end");
    if (e.end > buffer_bytes)
      fail_entry(path, name, "data_offsets [", e.begin, ", ", e.end, "] reach past the end of the ", buffer_bytes,
                 "-byte data buffer; the file is truncated or corrupt");
    if (e.end - e.begin != bytes)
      fail_entry(path, name, "data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin, " bytes but ",
                 dtype_name(e.dtype), shape_str(e.shape), " needs ", bytes);
    h.entries.push_back(std::move(e));
  }
  // (Duplicate names never get here: the JSON parser rejects duplicate keys.)
  check_coverage(path, h.entries, buffer_bytes);
  return h;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(path, "cannot open: ", std::strerror(errno));
  const io_detail::FdCloser closer{fd};

  struct stat st;
  if (::fstat(fd, &st) != 0) fail_file(path, "cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail_file(path, "not a regular file");
  const uint64_t file_bytes = uint64_t(st.st_size);
  if (file_bytes < 8)
    fail_file(path, "file is ", file_bytes, " bytes, too short for the 8-byte header length; it is truncated or not "
              "a safetensors file");

  unsigned char len_bytes[8];
  read_exact(fd, path, 0, len_bytes, 8);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len_bytes[i];
  if (header_bytes > kSafetensorsMaxHeaderBytes)
    fail_file(path, "header length field says ", header_bytes, " bytes, more than the ", kSafetensorsMaxHeaderBytes,
              "-byte limit; the file is corrupt or not a safetensors file");
  if (header_bytes > file_bytes - 8)
    fail_file(path, "header length field says ", header_bytes, " bytes but only ", file_bytes - 8,
              " bytes follow it; the file is truncated");

  std::string header(size_t(header_bytes), '\0');
  read_exact(fd, path, 8, header.data(), header_bytes);
  SafetensorsHeader h = parse_safetensors_header(header, file_bytes - 8 - header_bytes, path);

  // Every size below was checked against the file's size, so these allocations are bounded.
  std::map<std::string, Tensor> out;
  const uint64_t data_start = 8 + header_bytes;
  for (const SafetensorsEntry& e : h.entries) {
    Tensor t;
    try {
      t = Tensor::empty(e.shape, e.dtype, Device::cpu());
    } catch (const OutOfMemory& oom) {
      // The size is the file's, not a batch's: say so instead of the allocator's hint.
      fail_entry(path, e.name, "the file declares ", dtype_name(e.dtype), shape_str(e.shape), " (", e.end - e.begin,
                 " bytes), more than this machine can allocate (", oom.without_hint(),
                 "); is it the right file?");
    }
    read_exact(fd, path, data_start + e.begin, t.raw_data(), e.end - e.begin);
    out.emplace(e.name, std::move(t));
  }
  if (metadata) *metadata = std::move(h.metadata);
  return out;
}

}  // namespace rt
