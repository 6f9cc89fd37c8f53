// A small JSON value type, parser and compact serializer: enough for safetensors headers
// and metrics.jsonl lines, no more.
//
// Numbers keep their integer-ness: a literal without fraction or exponent that fits in
// int64 stays an exact int64 (tensor offsets and step counts must not round through a
// double); everything else is a double. Objects keep their keys in insertion order so a
// serialized line reads in the order it was built.
//
// The parser is meant for untrusted input (a downloaded checkpoint's header): it never
// recurses deeper than ParseOptions::max_depth, rejects duplicate object keys, invalid
// UTF-8 and lone surrogates, and every error names the byte offset and what was expected.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.h"

namespace rt::json {

class Value;
using Array = std::vector<Value>;
using Member = std::pair<std::string, Value>;
using Object = std::vector<Member>;

enum class Type : uint8_t { null, boolean, integer, number, string, array, object };
const char* type_name(Type t);  // "null", "bool", "integer", "number", ...

class Value {
 public:
  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  // Any integer type (not bool). An unsigned value above INT64_MAX throws rather than wrap.
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  Value(T i) : v_(int64_t(i)) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      RT_CHECK(i <= T(INT64_MAX), "JSON integer ", i, " does not fit in int64");
    }
  }
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(Array a) : v_(std::move(a)) {}
  Value(Object o) : v_(std::move(o)) {}
  static Value array() { return Value(Array{}); }
  static Value object() { return Value(Object{}); }

  Type type() const { return Type(v_.index()); }
  const char* type_name() const { return json::type_name(type()); }
  bool is_null() const { return type() == Type::null; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_int() const { return type() == Type::integer; }
  bool is_number() const { return is_int() || type() == Type::number; }  // int or double
  bool is_string() const { return type() == Type::string; }
  bool is_array() const { return type() == Type::array; }
  bool is_object() const { return type() == Type::object; }

  // Typed access; a wrong type throws rt::Error naming both types. On a temporary
  // (`json::parse(text).as_object()`) the string, array or object is moved out and
  // returned by value: a reference into the temporary would dangle, e.g. in a range-for
  // (AddressSanitizer: stack-use-after-scope).
  bool as_bool() const;
  int64_t as_int() const;    // integers only: a double is never silently truncated
  double as_double() const;  // any number
  const std::string& as_string() const&;
  std::string as_string() &&;
  const Array& as_array() const&;
  Array& as_array() &;
  Array as_array() &&;
  const Object& as_object() const&;
  Object& as_object() &;
  Object as_object() &&;

  // Object member lookup (linear: objects here are small); nullptr when absent.
  const Value* find(std::string_view key) const;
  // Object: replaces the member `key` or appends it, keeping the first position.
  Value& set(std::string key, Value v);
  // Array: appends.
  void push_back(Value v);

  bool operator==(const Value& o) const { return v_ == o.v_; }

 private:
  // Index order matches enum Type.
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> v_;
};

struct ParseOptions {
  // Deep enough for any real header or config; shallow enough that a hostile
  // "[[[[..." cannot exhaust the stack (parsing and destruction both recurse).
  int max_depth = 64;
  // Values (of any kind) in the whole document. A parsed value takes ~20x the bytes of
  // its text ("0," becomes a 40-byte Value), so callers that parse untrusted input of
  // up to N bytes set this to bound memory by something smaller than 20 * N.
  size_t max_values = SIZE_MAX;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Throws rt::Error
// "JSON parse error at byte <offset>: expected <what>, got <what came>".
Value parse(std::string_view text, const ParseOptions& options = {});

// Compact serialization (no spaces, no newline), members in stored order. Non-ASCII is
// written as UTF-8, control characters escaped. Doubles use the shortest text that reads
// back to the same double and always carry a '.' or exponent so they parse back as
// doubles; NaN and infinities (not representable in JSON) are written as null.
std::string dump(const Value& v);

}  // namespace rt::json
