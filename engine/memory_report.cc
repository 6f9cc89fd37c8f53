#include "engine/memory_report.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace rt {
namespace {

// Reports list the big consumers of a training step first and the untagged rest last.
constexpr MemoryTag kReportOrder[] = {MemoryTag::activations,     MemoryTag::parameters, MemoryTag::gradients,
                                      MemoryTag::optimizer_state, MemoryTag::workspace,  MemoryTag::other};
static_assert(sizeof(kReportOrder) / sizeof(kReportOrder[0]) == kNumMemoryTags, "a MemoryTag missing from reports");

// "optimizer state": the tag's name as prose.
std::string tag_label(MemoryTag t) {
  std::string s = memory_tag_name(t);
  for (char& c : s)
    if (c == '_') c = ' ';
  return s;
}

json::Value tag_object(const TagBytes& bytes) {
  json::Value o = json::Value::object();
  for (MemoryTag t : kReportOrder) o.set(memory_tag_name(t), bytes[size_t(t)]);
  return o;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const uint64_t mag = bytes < 0 ? uint64_t(0) - uint64_t(bytes) : uint64_t(bytes);
  const char* sign = bytes < 0 ? "-" : "";
  if (mag < 1024) return std::string(sign) + std::to_string(mag) + " B";
  double v = double(mag) / 1024;
  size_t u = 0;
  // Move up a unit when one decimal would print 1024.0 (1048575 bytes is "1.0 MiB").
  while (v >= 1024 - 0.05 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%.1f %s", sign, v, kUnits[u]);
  return buf;
}

std::string format_tag_bytes(const TagBytes& bytes) {
  std::string s;
  for (MemoryTag t : kReportOrder) {
    if (!s.empty()) s += ", ";
    s += tag_label(t) + " " + format_bytes(bytes[size_t(t)]);
  }
  return s;
}

std::string memory_log_line(Device device, const AllocatorStats& s) {
  return "memory " + device.str() + ": peak " + format_bytes(s.peak_bytes) + " allocated, " +
         format_bytes(s.peak_reserved_bytes) + " reserved; at peak: " + format_tag_bytes(s.tag_at_peak);
}

json::Value memory_json(Device device, const AllocatorStats& s) {
  json::Value o = json::Value::object();
  o.set("device", device.str());
  o.set("peak_allocated_bytes", s.peak_bytes);
  o.set("peak_reserved_bytes", s.peak_reserved_bytes);
  o.set("at_peak", tag_object(s.tag_at_peak));
  o.set("tag_peak", tag_object(s.tag_peak));
  return o;
}

OutOfMemory out_of_memory_error(const OutOfMemoryFacts& f) {
  std::string by_tag;  // non-zero tags only: before scopes are set everything is `other`
  for (MemoryTag t : kReportOrder) {
    const int64_t b = f.stats.tag_bytes[size_t(t)];
    if (b == 0) continue;
    by_tag += (by_tag.empty() ? " (" : ", ") + tag_label(t) + " " + format_bytes(b);
  }
  if (!by_tag.empty()) by_tag += ")";
  const std::string system =
      f.system_free >= 0 && f.system_total >= 0
          ? detail::cat(f.system, " has ", format_bytes(f.system_free), " of ", format_bytes(f.system_total), " free")
          : detail::cat("what ", f.system, " has free is unknown");
  std::string account = detail::cat(
      f.failure, ": tried to allocate ", f.requested, " bytes (", format_bytes(int64_t(std::min<uint64_t>(f.requested, INT64_MAX))),
      f.request_detail.empty() ? "" : ", ", f.request_detail, "); ", system, "; tensors hold ",
      format_bytes(f.stats.current_bytes), by_tag, "; the largest free block in the allocator's cache is ",
      format_bytes(f.largest_cached_free), " (of ", format_bytes(f.stats.reserved_bytes), " reserved)");
  return OutOfMemory(std::move(account),
                     "To use less memory: a smaller batch with K steps of gradient accumulation keeps the global "
                     "batch (batch size x K images per optimizer step); bf16 precision stores activations in half "
                     "the bytes; the channels_last memory format if the run uses contiguous.");
}

}  // namespace rt
