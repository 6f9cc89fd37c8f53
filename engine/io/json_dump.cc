// The compact serializer: one line per value, as metrics.jsonl wants.
#include "engine/io/json.h"

#include <charconv>
#include <cmath>

namespace rt::json {

namespace {

void dump_string(const std::string& s, std::string& out) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void dump_double(double d, std::string& out) {
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), d);  // shortest round-trip form
  (void)ec;  // 64 bytes always suffice for a double
  std::string_view text(buf, size_t(p - buf));
  out += text;
  if (text.find_first_of(".eE") == std::string_view::npos) out += ".0";  // stays a double on re-parse
}

void dump_to(const Value& v, std::string& out) {
  switch (v.type()) {
    case Type::null: out += "null"; break;
    case Type::boolean: out += v.as_bool() ? "true" : "false"; break;
    case Type::integer: out += std::to_string(v.as_int()); break;
    case Type::number: dump_double(v.as_double(), out); break;
    case Type::string: dump_string(v.as_string(), out); break;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const Value& e : v.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_to(e, out);
      }
      out += ']';
      break;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (const Member& m : v.as_object()) {
        if (!first) out += ',';
        first = false;
        dump_string(m.first, out);
        out += ':';
        dump_to(m.second, out);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

std::string dump(const Value& v) {
  std::string out;
  dump_to(v, out);
  return out;
}

}  // namespace rt::json
