#include "engine/io/json.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace json = rt::json;

namespace {

// The message of the rt::Error that parsing `text` throws ("" when it does not throw).
std::string parse_error(std::string_view text, const json::ParseOptions& opt = {}) {
  try {
    json::parse(text, opt);
  } catch (const rt::Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("json: scalars keep their types") {
  CHECK(json::parse("null").is_null());
  CHECK(json::parse("true").as_bool() == true);
  CHECK(json::parse(" false ").as_bool() == false);
  CHECK(json::parse("0").as_int() == 0);
  CHECK(json::parse("-0").as_int() == 0);
  CHECK(json::parse("42").is_int());
  CHECK(json::parse("1.5").type() == json::Type::number);
  CHECK(json::parse("1e3").type() == json::Type::number);  // an exponent makes it a double
  CHECK(json::parse("1e3").as_double() == 1000.0);
  CHECK(json::parse("-2.5E-1").as_double() == -0.25);
}

TEST_CASE("json: int64 stays exact at both ends of its range") {
  CHECK(json::parse("9223372036854775807").as_int() == INT64_MAX);
  CHECK(json::parse("-9223372036854775808").as_int() == INT64_MIN);
  CHECK(json::parse("9007199254740993").as_int() == 9007199254740993);  // 2^53 + 1: not a double
  // One past int64 becomes a double (there is no exact representation to keep).
  const json::Value big = json::parse("9223372036854775808");
  CHECK(big.type() == json::Type::number);
  CHECK(big.as_double() == 9223372036854775808.0);
  // A double is never truncated into an integer.
  CHECK_THROWS_AS(json::parse("2.0").as_int(), rt::Error);
  CHECK(json::parse("2").as_double() == 2.0);
}

TEST_CASE("json: doubles at the range limits") {
  CHECK(json::parse("1e-400").as_double() == 0.0);  // underflow rounds to zero
  CHECK(json::parse("4.9e-324").as_double() > 0.0);  // smallest subnormal
  CHECK(json::parse("0.000000000000000000000000000001e-300").as_double() == 0.0);
  CHECK(contains(parse_error("1e400"), "within double range"));
  CHECK(contains(parse_error("-123456789e305"), "within double range"));
}

TEST_CASE("json: strings and escapes") {
  CHECK(json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(json::parse(R"("\u0041\u00e9\u20ac")").as_string() == "A\xc3\xa9\xe2\x82\xac");  // A é €
  CHECK(json::parse(R"("\ud83d\ude00")").as_string() == "\xf0\x9f\x98\x80");            // surrogate pair
  CHECK(json::parse(R"("\u0000")").as_string() == std::string(1, '\0'));
  CHECK(json::parse("\"caf\xc3\xa9\"").as_string() == "caf\xc3\xa9");  // raw UTF-8 passes through
}

TEST_CASE("json: containers, order and lookup") {
  const json::Value v = json::parse(R"( { "z": [1, 2.5, "x", null, [] , {}], "a": {"k": true} } )");
  REQUIRE(v.is_object());
  REQUIRE(v.as_object().size() == 2);
  CHECK(v.as_object()[0].first == "z");  // insertion order, not sorted
  CHECK(v.as_object()[1].first == "a");
  const json::Array& z = v.find("z")->as_array();
  REQUIRE(z.size() == 6);
  CHECK(z[0].as_int() == 1);
  CHECK(z[2].as_string() == "x");
  CHECK(z[4].as_array().empty());
  CHECK(z[5].as_object().empty());
  CHECK(v.find("a")->find("k")->as_bool());
  CHECK(v.find("missing") == nullptr);
}

TEST_CASE("json: wrong-type access names both types") {
  try {
    json::parse("\"s\"").as_int();
    FAIL("expected an error");
  } catch (const rt::Error& e) {
    CHECK(contains(e.what(), "string"));
    CHECK(contains(e.what(), "integer"));
  }
}

TEST_CASE("json: parse errors give the byte offset and what was expected") {
  CHECK(contains(parse_error(""), "at byte 0"));
  CHECK(contains(parse_error("[1, 2"), "at byte 5: expected ',' or ']'"));
  CHECK(contains(parse_error("[1, 2"), "end of input"));
  CHECK(contains(parse_error("{\"a\" 1}"), "at byte 5: expected ':'"));
  CHECK(contains(parse_error("{\"a\":1,}"), "at byte 7: expected '\"' starting an object key"));
  CHECK(contains(parse_error("{a:1}"), "object key"));
  CHECK(contains(parse_error("[1,]"), "at byte 3"));
  CHECK(contains(parse_error("01"), "end of input after the top-level value"));
  CHECK(contains(parse_error("1 2"), "at byte 2"));
  CHECK(contains(parse_error("-"), "a digit"));
  CHECK(contains(parse_error("1."), "after the decimal point"));
  CHECK(contains(parse_error("1e"), "exponent"));
  CHECK(contains(parse_error(".5"), "a JSON value"));
  CHECK(contains(parse_error("+1"), "a JSON value"));
  CHECK(contains(parse_error("nul"), "a JSON value"));
  CHECK(contains(parse_error("NaN"), "a JSON value"));
  CHECK(contains(parse_error("\"abc"), "closing the string"));
  CHECK(contains(parse_error("\"a\nb\""), "control characters must be escaped"));
  CHECK(contains(parse_error("\"\\x\""), "an escape"));
  CHECK(contains(parse_error("\"\\u12G4\""), "4 hex digits"));
  CHECK(contains(parse_error("\"\\ud800\""), "low surrogate"));          // lone high surrogate
  CHECK(contains(parse_error("\"\\ud800\\u0041\""), "low surrogate"));   // high + non-low
  CHECK(contains(parse_error("\"\\udc00\""), "high surrogate"));         // lone low surrogate
  CHECK(contains(parse_error("\"\xff\""), "valid UTF-8"));
  CHECK(contains(parse_error("\"\xc0\xaf\""), "valid UTF-8"));           // overlong '/'
  CHECK(contains(parse_error("\"\xed\xa0\x80\""), "valid UTF-8"));       // encoded surrogate
  CHECK(contains(parse_error("\"\xe2\x82\""), "valid UTF-8"));           // truncated sequence
  CHECK(contains(parse_error("{\"a\":1,\"a\":2}"), "duplicate object key \"a\""));
  CHECK(contains(parse_error("[1] x"), "at byte 4"));
}

TEST_CASE("json: nesting depth is bounded") {
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  CHECK(json::parse(ok).is_array());
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  CHECK(contains(parse_error(deep), "nesting deeper than the limit of 64"));
  // A hostile document far deeper than the stack could take fails fast and cleanly.
  const std::string hostile(10'000'000, '[');
  CHECK(contains(parse_error(hostile), "nesting deeper"));
  json::ParseOptions shallow;
  shallow.max_depth = 2;
  CHECK(json::parse("[[1]]", shallow).is_array());
  CHECK(contains(parse_error("[{\"a\":[]}]", shallow), "limit of 2"));
}

TEST_CASE("json: the number of values is bounded when asked") {
  json::ParseOptions few;
  few.max_values = 3;
  CHECK(json::parse("[1,2]", few).as_array().size() == 2);  // 3 values: the array and two numbers
  CHECK(json::parse(R"({"a":1,"b":2})", few).is_object());  // keys do not count
  CHECK(contains(parse_error("[1,2,3]", few), "at byte 5: more than 3 values"));
  CHECK(contains(parse_error(R"({"a":1,"b":2,"c":[]})", few), "more than 3 values"));
}

TEST_CASE("json: compact serializer") {
  json::Value v = json::Value::object();
  v.set("step", 100);
  v.set("loss", 0.25);
  v.set("lr", 1.0);
  v.set("name", "a\"b\n\x01");
  v.set("ok", true);
  v.set("none", nullptr);
  json::Value arr = json::Value::array();
  arr.push_back(int64_t(-3));
  arr.push_back(std::string("x"));
  v.set("list", arr);
  v.set("step", 101);  // replaces in place
  CHECK(json::dump(v) ==
        R"({"step":101,"loss":0.25,"lr":1.0,"name":"a\"b\n\u0001","ok":true,"none":null,"list":[-3,"x"]})");
  CHECK(json::dump(json::Value(std::numeric_limits<double>::quiet_NaN())) == "null");
  CHECK(json::dump(json::Value(-std::numeric_limits<double>::infinity())) == "null");
  CHECK(json::dump(json::Value(1e300)) == "1e+300");
  CHECK(json::dump(json::Value(INT64_MIN)) == "-9223372036854775808");
  CHECK(json::dump(json::Value("\xe2\x82\xac")) == "\"\xe2\x82\xac\"");  // UTF-8 kept
  CHECK_THROWS_AS(json::Value(uint64_t(1) << 63), rt::Error);
}

TEST_CASE("json: dump then parse round-trips exactly") {
  const double tricky[] = {0.1, 1.0 / 3.0, 5e-324, 1.7976931348623157e308, -0.0, 123456789.125, 3.0};
  for (double d : tricky) {
    const json::Value back = json::parse(json::dump(json::Value(d)));
    CHECK(back.type() == json::Type::number);
    CHECK(back.as_double() == d);
  }
  const char* docs[] = {
      R"({"a":[1,2,{"b":null}],"c":"\u00e9\ud83d\ude00","d":-7,"e":false})",
      R"([])",
      R"({"x":{"y":{"z":[[],[{}]]}}})",
      R"("\u0000\u001f")",
  };
  for (const char* doc : docs) {
    const json::Value v = json::parse(doc);
    CHECK(json::parse(json::dump(v)) == v);
  }
}

TEST_CASE("json: members of a temporary are moved out, so a range-for over one is safe") {
  // Before, as_object() on the temporary returned a reference that dangled inside the
  // loop (AddressSanitizer: stack-use-after-scope in tests/train/train_test.cc).
  std::string seen;
  for (const auto& [k, v] : json::parse(R"({"a": "x", "b": "y"})").as_object()) seen += k + "=" + v.as_string() + ";";
  CHECK(seen == "a=x;b=y;");
  int64_t sum = 0;
  for (const json::Value& v : json::parse("[1, 2, 3]").as_array()) sum += v.as_int();
  CHECK(sum == 6);
  const std::string s = json::parse(R"("text")").as_string();
  CHECK(s == "text");
  // Lvalues still give references into the value.
  json::Value obj = json::parse(R"({"a": [1]})");
  const json::Value& cobj = obj;
  CHECK(&obj.as_object() == &cobj.as_object());
  CHECK(&obj.as_object()[0].second.as_array() == &cobj.as_object()[0].second.as_array());
  std::string err;
  try {
    for (const auto& m : json::parse("1").as_object()) err += m.first;
  } catch (const rt::Error& e) {
    err = e.what();
  }
  CHECK(err.find("expected object") != std::string::npos);
}
