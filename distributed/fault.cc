#include "distributed/fault.h"

#include <cstdlib>
#include <sstream>
#include <vector>

#include "base/error.h"

namespace rt::dist {

Fault parse_fault(const std::string& text) {
  Fault f;
  if (text.empty()) return f;
  std::vector<std::string> parts;
  std::stringstream s(text);
  for (std::string p; std::getline(s, p, ':');) parts.push_back(p);
  const char* forms = "skip-bucket:RANK:STEP:BUCKET or barrier-for-bucket:RANK:STEP:BUCKET";
  RT_CHECK(parts.size() == 4, "RINGTAPE_FAULT '", text, "': expected ", forms);
  if (parts[0] == "skip-bucket")
    f.kind = Fault::Kind::skip_bucket;
  else if (parts[0] == "barrier-for-bucket")
    f.kind = Fault::Kind::barrier_for_bucket;
  else
    RT_FAIL("RINGTAPE_FAULT '", text, "': unknown fault '", parts[0], "'; expected ", forms);
  auto number = [&](const std::string& v, const char* what) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    RT_CHECK(!v.empty() && *end == '\0' && n >= 0, "RINGTAPE_FAULT '", text, "': ", what,
             " must be an integer >= 0, got '", v, "'");
    return int64_t(n);
  };
  f.rank = int(number(parts[1], "RANK"));
  f.step = number(parts[2], "STEP");
  f.bucket = int(number(parts[3], "BUCKET"));
  return f;
}

const Fault& injected_fault() {
  static const Fault f = [] {
    const char* v = std::getenv("RINGTAPE_FAULT");
    return parse_fault(v ? v : "");
  }();
  return f;
}

}  // namespace rt::dist
