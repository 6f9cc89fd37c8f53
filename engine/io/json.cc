#include "engine/io/json.h"

#include <algorithm>
#include <charconv>
#include <unordered_set>

namespace rt::json {

const char* type_name(Type t) {
  switch (t) {
    case Type::null: return "null";
    case Type::boolean: return "bool";
    case Type::integer: return "integer";
    case Type::number: return "number";
    case Type::string: return "string";
    case Type::array: return "array";
    case Type::object: return "object";
  }
  return "?";
}

// ---- typed access ---------------------------------------------------------------------

namespace {
[[noreturn]] void wrong_type(const Value& v, const char* want) {
  RT_FAIL("JSON value is ", v.type_name(), ", expected ", want);
}
}  // namespace

bool Value::as_bool() const {
  if (!is_bool()) wrong_type(*this, "bool");
  return std::get<bool>(v_);
}
int64_t Value::as_int() const {
  if (!is_int()) wrong_type(*this, "integer");
  return std::get<int64_t>(v_);
}
double Value::as_double() const {
  if (is_int()) return double(std::get<int64_t>(v_));
  if (type() != Type::number) wrong_type(*this, "number");
  return std::get<double>(v_);
}
const std::string& Value::as_string() const& {
  if (!is_string()) wrong_type(*this, "string");
  return std::get<std::string>(v_);
}
std::string Value::as_string() && {
  if (!is_string()) wrong_type(*this, "string");
  return std::move(std::get<std::string>(v_));
}
const Array& Value::as_array() const& {
  if (!is_array()) wrong_type(*this, "array");
  return std::get<Array>(v_);
}
Array& Value::as_array() & {
  if (!is_array()) wrong_type(*this, "array");
  return std::get<Array>(v_);
}
Array Value::as_array() && {
  if (!is_array()) wrong_type(*this, "array");
  return std::move(std::get<Array>(v_));
}
const Object& Value::as_object() const& {
  if (!is_object()) wrong_type(*this, "object");
  return std::get<Object>(v_);
}
Object& Value::as_object() & {
  if (!is_object()) wrong_type(*this, "object");
  return std::get<Object>(v_);
}
Object Value::as_object() && {
  if (!is_object()) wrong_type(*this, "object");
  return std::move(std::get<Object>(v_));
}

const Value* Value::find(std::string_view key) const {
  for (const Member& m : as_object())
    if (m.first == key) return &m.second;
  return nullptr;
}

Value& Value::set(std::string key, Value v) {
  Object& o = as_object();
  for (Member& m : o)
    if (m.first == key) return m.second = std::move(v);
  o.emplace_back(std::move(key), std::move(v));
  return o.back().second;
}

void Value::push_back(Value v) { as_array().push_back(std::move(v)); }

// ---- parser ---------------------------------------------------------------------------

namespace {

// Describes the byte at the error position for the message: a printable character in
// quotes, else its hex code, or "end of input".
std::string describe_byte(std::string_view s, size_t pos) {
  if (pos >= s.size()) return "end of input";
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c >= 0x20 && c < 0x7f) return detail::cat("'", char(c), "'");
  static const char* hex = "0123456789abcdef";
  return detail::cat("byte 0x", hex[c >> 4], hex[c & 15]);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

// Length of the well-formed UTF-8 sequence starting at s[pos] (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 if it is malformed.
size_t utf8_sequence_length(std::string_view s, size_t pos) {
  auto byte = [&](size_t i) -> unsigned { return i < s.size() ? static_cast<unsigned char>(s[i]) : 0u; };
  const unsigned c = byte(pos);
  auto cont = [&](size_t i, unsigned lo = 0x80, unsigned hi = 0xbf) { return byte(i) >= lo && byte(i) <= hi; };
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(pos + 1) ? 2 : 0;
  if (c == 0xe0) return cont(pos + 1, 0xa0) && cont(pos + 2) ? 3 : 0;
  if (c == 0xed) return cont(pos + 1, 0x80, 0x9f) && cont(pos + 2) ? 3 : 0;  // not a surrogate
  if (c >= 0xe1 && c <= 0xef) return cont(pos + 1) && cont(pos + 2) ? 3 : 0;
  if (c == 0xf0) return cont(pos + 1, 0x90) && cont(pos + 2) && cont(pos + 3) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return cont(pos + 1) && cont(pos + 2) && cont(pos + 3) ? 4 : 0;
  if (c == 0xf4) return cont(pos + 1, 0x80, 0x8f) && cont(pos + 2) && cont(pos + 3) ? 4 : 0;
  return 0;
}

// For a syntactically valid JSON number that from_chars called out of range: true when
// it underflows (its decimal magnitude is negative), false when it overflows.
bool below_smallest_double(std::string_view num) {
  size_t i = num[0] == '-' ? 1 : 0;
  int64_t int_digits = 0, magnitude = 0;
  bool found = false;  // first non-zero digit seen
  for (; i < num.size() && num[i] >= '0' && num[i] <= '9'; ++i, ++int_digits) {
    if (!found && num[i] != '0') found = true, magnitude = -int_digits;  // fixed up below
  }
  if (found) magnitude += int_digits - 1;
  if (i < num.size() && num[i] == '.') {
    for (int64_t j = 1; ++i < num.size() && num[i] >= '0' && num[i] <= '9'; ++j)
      if (!found && num[i] != '0') found = true, magnitude = -j;
  }
  int64_t exp = 0;
  bool neg_exp = false;
  if (i < num.size() && (num[i] == 'e' || num[i] == 'E')) {
    ++i;
    if (i < num.size() && (num[i] == '+' || num[i] == '-')) neg_exp = num[i++] == '-';
    for (; i < num.size(); ++i) exp = std::min<int64_t>(exp * 10 + (num[i] - '0'), int64_t(1) << 40);  // saturate
  }
  return magnitude + (neg_exp ? -exp : exp) < 0;
}

class Parser {
 public:
  Parser(std::string_view s, const ParseOptions& o) : s_(s), opt_(o) {}

  Value parse_document() {
    skip_ws();
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("end of input after the top-level value");
    return v;
  }

 private:
  [[noreturn]] void fail(const char* expected) const { fail_at(pos_, expected); }
  [[noreturn]] void fail_at(size_t pos, const char* expected) const {
    RT_FAIL("JSON parse error at byte ", pos, ": expected ", expected, ", got ", describe_byte(s_, pos));
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_ws() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  void expect_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) fail("a JSON value (object, array, string, number, true, false or null)");
    pos_ += lit.size();
  }

  Value parse_value(int depth) {
    if (++values_ > opt_.max_values)
      RT_FAIL("JSON parse error at byte ", pos_, ": more than ", opt_.max_values,
              " values in the document (the limit); split the document or raise ParseOptions::max_values");
    switch (peek()) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return Value(parse_string());
      case 't': expect_literal("true"); return Value(true);
      case 'f': expect_literal("false"); return Value(false);
      case 'n': expect_literal("null"); return Value();
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
        fail("a JSON value (object, array, string, number, true, false or null)");
    }
  }

  void check_depth(int depth) const {
    if (depth > opt_.max_depth)
      RT_FAIL("JSON parse error at byte ", pos_, ": nesting deeper than the limit of ", opt_.max_depth,
              " arrays/objects; flatten the document or raise ParseOptions::max_depth");
  }

  Value parse_object(int depth) {
    check_depth(depth);
    ++pos_;  // '{'
    Object obj;
    // Duplicate keys make "which value wins" parser-dependent: a hostile safetensors
    // header could show one tensor to us and another to PyTorch. Reject them.
    std::unordered_set<std::string> seen;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return Value(std::move(obj));
    }
    for (;;) {
      skip_ws();
      if (peek() != '"') fail("'\"' starting an object key");
      const size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second)
        RT_FAIL("JSON parse error at byte ", key_pos, ": duplicate object key \"", clip_for_message(key),
                "\" (each key may appear once)");
      skip_ws();
      if (peek() != ':') fail("':' after an object key");
      ++pos_;
      skip_ws();
      Value v = parse_value(depth);
      obj.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return Value(std::move(obj));
      }
      fail("',' or '}' after an object member");
    }
  }

  Value parse_array(int depth) {
    check_depth(depth);
    ++pos_;  // '['
    Array arr;
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return Value(std::move(arr));
    }
    for (;;) {
      skip_ws();
      arr.push_back(parse_value(depth));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return Value(std::move(arr));
      }
      fail("',' or ']' after an array element");
    }
  }

  uint32_t parse_hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else fail("4 hex digits after \\u");
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail("'\"' closing the string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("a string character (control characters must be escaped)");
      if (c == '\\') {
        ++pos_;
        const char e = peek();
        ++pos_;
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': out_codepoint(out); break;
          default: --pos_; fail("an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        }
        continue;
      }
      const size_t n = utf8_sequence_length(s_, pos_);
      if (n == 0) fail("valid UTF-8");
      out.append(s_.substr(pos_, n));
      pos_ += n;
    }
  }

  // After "\u": one code point, combining a UTF-16 surrogate pair when there is one.
  void out_codepoint(std::string& out) {
    const size_t start = pos_ - 2;
    uint32_t cp = parse_hex4();
    if (cp >= 0xdc00 && cp <= 0xdfff) fail_at(start, "a high surrogate before a low surrogate \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (s_.substr(pos_, 2) != "\\u") fail("a \\uXXXX low surrogate after a high surrogate");
      pos_ += 2;
      const uint32_t lo = parse_hex4();
      if (lo < 0xdc00 || lo > 0xdfff) fail_at(pos_ - 6, "a low surrogate (\\uDC00-\\uDFFF) after a high surrogate");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    append_utf8(out, cp);
  }

  Value parse_number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d0 = pos_;
      while (peek() >= '0' && peek() <= '9') ++pos_;
      return pos_ - d0;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;  // a leading zero stands alone: "01" is not JSON
    } else if (digits() == 0) {
      fail("a digit");
    }
    bool integral = true;
    if (peek() == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0) fail("a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      integral = false;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("a digit in the exponent");
    }
    const char* b = s_.data() + start;
    const char* e = s_.data() + pos_;
    if (integral) {
      int64_t i;
      auto [p, ec] = std::from_chars(b, e, i);
      if (ec == std::errc() && p == e) return Value(i);
      // Out of int64 range: fall through to a (rounded) double, like most parsers.
    }
    double d;
    auto [p, ec] = std::from_chars(b, e, d);
    if (ec == std::errc::result_out_of_range && below_smallest_double(std::string_view(b, size_t(e - b))))
      return Value(*b == '-' ? -0.0 : 0.0);  // 1e-400: underflow rounds to zero, as in strtod
    // Overflow (1e999): JSON has no infinity, and a silent inf would poison whatever reads it.
    if (ec != std::errc() || p != e) fail_at(start, "a number within double range (magnitude below 1.8e308)");
    return Value(d);
  }

  std::string_view s_;
  ParseOptions opt_;
  size_t pos_ = 0;
  size_t values_ = 0;
};

}  // namespace

Value parse(std::string_view text, const ParseOptions& options) { return Parser(text, options).parse_document(); }

}  // namespace rt::json
