// `ringtape plot`: metrics.jsonl files written here (a resumed run with repeated steps and a
// null loss, a run without evaluations whose last line is cut short, a run of one step) are
// read, drawn, and the SVG parsed back as XML: well-formed, one group per run and metric
// with the right number of points, ticks covering the data, the legend. Then the command's
// files (only the one asked for, atomically) and its errors.
#include "cli/plot.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "cli/flags.h"
#include "cli/plot_data.h"
#include "cli/plot_files.h"
#include "cli/svg_chart.h"
#include "base/error.h"

namespace rt::cli {
namespace {

namespace fs = std::filesystem;

// Just enough XML to check a document and read it back: elements, attributes in double
// quotes, text with the five predefined entities, an <?xml ...?> prolog. Anything else
// (unbalanced or mismatched tags, a duplicate attribute, a bare '&' or '<') throws.
struct XmlNode {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<XmlNode> children;
  std::string text;  // the text directly inside, entities decoded

  std::string attr(const std::string& key) const {
    const auto it = attrs.find(key);
    return it == attrs.end() ? "" : it->second;
  }
  // This element and those under it that `pred` accepts, in document order.
  std::vector<const XmlNode*> find_all(const std::function<bool(const XmlNode&)>& pred) const {
    std::vector<const XmlNode*> out;
    if (pred(*this)) out.push_back(this);
    for (const XmlNode& c : children)
      for (const XmlNode* n : c.find_all(pred)) out.push_back(n);
    return out;
  }
  std::string all_text() const {
    std::string t = text;
    for (const XmlNode& c : children) t += " " + c.all_text();
    return t;
  }
};

class XmlParser {
 public:
  explicit XmlParser(const std::string& s) : s_(s) {}

  XmlNode document() {
    space();
    if (s_.compare(i_, 5, "<?xml") == 0) {
      const size_t end = s_.find("?>", i_);
      if (end == std::string::npos) fail("an unterminated <?xml prolog");
      i_ = end + 2;
    }
    space();
    XmlNode root = element();
    space();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("XML: " + what + " at byte " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string name() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' || s_[i_] == '_' ||
                              s_[i_] == ':'))
      ++i_;
    if (i_ == start) fail("expected a name");
    return s_.substr(start, i_ - start);
  }
  // Text up to `stop`, entities decoded; a '<' (or '&' that starts no entity) is an error.
  std::string chars(char stop) {
    std::string out;
    while (i_ < s_.size() && s_[i_] != stop) {
      if (s_[i_] == '<') fail("a '<' inside text or an attribute");
      if (s_[i_] != '&') {
        out += s_[i_++];
        continue;
      }
      bool known = false;
      for (const auto& [entity, ch] : {std::pair{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'},
                                       {"&apos;", '\''}})
        if (s_.compare(i_, std::strlen(entity), entity) == 0) {
          out += ch;
          i_ += std::strlen(entity);
          known = true;
          break;
        }
      if (!known) fail("a bare '&'");
    }
    return out;
  }
  XmlNode element() {
    XmlNode n;
    expect('<');
    n.name = name();
    for (;;) {
      space();
      if (s_.compare(i_, 2, "/>") == 0) {
        i_ += 2;
        return n;
      }
      if (i_ < s_.size() && s_[i_] == '>') break;
      const std::string key = name();
      expect('=');
      expect('"');
      if (!n.attrs.emplace(key, chars('"')).second) fail("a duplicate attribute " + key);
      expect('"');
    }
    ++i_;  // '>'
    for (;;) {
      if (i_ >= s_.size()) fail("<" + n.name + "> is never closed");
      if (s_.compare(i_, 2, "</") == 0) {
        i_ += 2;
        const std::string closing = name();
        if (closing != n.name) fail("</" + closing + "> closes <" + n.name + ">");
        space();
        expect('>');
        return n;
      }
      if (s_[i_] == '<') {
        n.children.push_back(element());
      } else {
        n.text += chars('<');
      }
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

XmlNode parse_xml(const std::string& s) { return XmlParser(s).document(); }

fs::path fresh_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base ? base : "/tmp") / ("plot_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Steps 4 to an epoch. The first attempt logs to step 10 and crashes; the second resumes
// from the checkpoint at step 4, logs steps 6 to 12 again (step 8's loss null: every step of
// its window skipped) and evaluates epochs 1 and 2 again.
const char* kResumed =
    R"({"type":"train","epoch":0,"step":2,"loss":2.3,"lr":0.1,"img_per_s":100.0,"eta_s":9.0}
{"type":"train","epoch":0,"step":4,"loss":2.0,"lr":0.1,"img_per_s":110.0,"eta_s":8.0}
{"type":"eval","epoch":0,"step":4,"loss":1.9,"top1":40.0,"top5":80.0,"nonfinite_logits":0}
{"type":"train","epoch":1,"step":6,"loss":1.8,"lr":0.08,"img_per_s":120.0,"eta_s":7.0}
{"type":"train","epoch":1,"step":8,"loss":1.6,"lr":0.06,"img_per_s":120.0,"eta_s":6.0}
{"type":"eval","epoch":1,"step":8,"loss":1.5,"top1":50.0,"top5":85.0,"nonfinite_logits":0}
{"type":"train","epoch":2,"step":10,"loss":1.4,"lr":0.04,"img_per_s":120.0,"eta_s":5.0}
{"type":"train","epoch":1,"step":6,"loss":1.7,"lr":0.08,"img_per_s":90.0,"eta_s":7.0}
{"type":"train","epoch":1,"step":8,"loss":null,"lr":0.06,"img_per_s":95.0,"eta_s":6.0,"skipped_steps":2}
{"type":"eval","epoch":1,"step":8,"loss":1.5,"top1":55.0,"top5":86.0,"nonfinite_logits":0}
{"type":"train","epoch":2,"step":10,"loss":1.5,"lr":0.04,"img_per_s":100.0,"eta_s":4.0}
{"type":"train","epoch":2,"step":12,"loss":1.3,"lr":0.02,"img_per_s":105.0,"eta_s":0.0}
{"type":"eval","epoch":2,"step":12,"loss":1.2,"top1":60.0,"top5":90.0,"nonfinite_logits":0}
{"type":"overlap","steps":12,"allreduce_s_per_step":0.01,"hidden_fraction":0.5}
)";

// Five steps, no evaluation, and a line the run is still writing.
const char* kStillWriting =
    R"({"type":"train","epoch":0,"step":1,"loss":3.0,"lr":0.05,"img_per_s":50.0,"eta_s":9.0}
{"type":"train","epoch":0,"step":2,"loss":2.9,"lr":0.05,"img_per_s":60.0,"eta_s":8.0}
{"type":"train","epoch":0,"step":3,"loss":2.7,"lr":0.05,"img_per_s":61.0,"eta_s":7.0}
{"type":"train","epoch":0,"step":4,"loss":2.6,"lr":0.05,"img_per_s":62.0,"eta_s":6.0}
{"type":"train","epoch":0,"step":5,"loss":2.4,"lr":0.05,"img_per_s":63.0,"eta_s":5.0}
{"type":"train","epo)";

const char* kOneStep = R"({"type":"train","epoch":0,"step":1,"loss":2.5,"lr":0.1,"img_per_s":40.0,"eta_s":1.0}
)";

// The points of every <polyline> and lone <circle class="point"> in `g`, as (x, y) pairs.
std::vector<std::pair<double, double>> points_of(const XmlNode& g, int* polylines) {
  std::vector<std::pair<double, double>> pts;
  *polylines = 0;
  for (const XmlNode* n : g.find_all([](const XmlNode& e) { return e.name == "polyline"; })) {
    ++*polylines;
    std::istringstream in(n->attr("points"));
    std::string xy;
    while (in >> xy) {
      const size_t comma = xy.find(',');
      REQUIRE(comma != std::string::npos);
      pts.emplace_back(std::stod(xy.substr(0, comma)), std::stod(xy.substr(comma + 1)));
    }
  }
  for (const XmlNode* n : g.find_all([](const XmlNode& e) { return e.name == "circle" && e.attr("class") == "point"; }))
    pts.emplace_back(std::stod(n->attr("cx")), std::stod(n->attr("cy")));
  return pts;
}

const XmlNode& panel(const XmlNode& doc, const std::string& id) {
  const auto found = doc.find_all([&](const XmlNode& e) { return e.attr("data-panel") == id; });
  REQUIRE_MESSAGE(found.size() == 1, "panel ", id);
  return *found[0];
}

const XmlNode* series(const XmlNode& p, const std::string& run, const std::string& metric) {
  const auto found =
      p.find_all([&](const XmlNode& e) { return e.attr("data-run") == run && e.attr("data-metric") == metric; });
  REQUIRE(found.size() <= 1);
  return found.empty() ? nullptr : found[0];
}

std::vector<double> ticks(const XmlNode& p, const std::string& cls) {
  std::vector<double> v;
  for (const XmlNode* n : p.find_all([&](const XmlNode& e) { return e.name == "text" && e.attr("class") == cls; }))
    v.push_back(std::stod(n->text));
  return v;
}

TEST_CASE("a resumed run: the later record of a step wins, the abandoned tail goes, null is a gap") {
  const RunMetrics r = parse_metrics(kResumed, "runs/a/metrics.jsonl");
  CHECK(r.warnings.empty());
  REQUIRE(r.train.size() == 6);
  for (size_t i = 0; i < 6; ++i) CHECK(r.train[i].step == int64_t(2 * i + 2));
  CHECK(r.train[2].loss == doctest::Approx(1.7));  // the resumed attempt's step 6
  CHECK(r.train[2].img_per_s == doctest::Approx(90));
  CHECK(std::isnan(r.train[3].loss));
  CHECK(r.train[3].lr == doctest::Approx(0.06));
  REQUIRE(r.eval.size() == 3);
  CHECK(r.eval[1].epoch == 1);
  CHECK(r.eval[1].top1 == doctest::Approx(55));  // evaluated again after the resume
  CHECK(r.eval[2].top5 == doctest::Approx(90));
}

TEST_CASE("cut lines: the last one is ignored, one in the middle skipped, each with a warning naming it") {
  RunMetrics r = parse_metrics(kStillWriting, "b/metrics.jsonl");
  CHECK(r.train.size() == 5);
  REQUIRE(r.warnings.size() == 1);
  CHECK(has(r.warnings[0], "b/metrics.jsonl:6"));
  CHECK(has(r.warnings[0], "incomplete"));

  // A complete record without its newline is accepted.
  r = parse_metrics(std::string(kOneStep).substr(0, std::string(kOneStep).size() - 1), "c/metrics.jsonl");
  CHECK(r.train.size() == 1);
  CHECK(r.warnings.empty());

  // A crash cut a line and the resumed run appended after it.
  r = parse_metrics(std::string(R"({"type":"train","epoch":0,"st)") + kOneStep +
                        R"({"type":"train","epoch":0,"step":2,"loss":2.4,"lr":0.1,"img_per_s":40.0,"eta_s":0.0})" "\n",
                    "d/metrics.jsonl");
  CHECK(r.train.size() == 1);
  REQUIRE(r.warnings.size() == 1);
  CHECK(has(r.warnings[0], "d/metrics.jsonl:1: the line is not JSON"));
  r = parse_metrics(std::string(kOneStep) + "{\"type\":\"tr\n" + kOneStep, "d/metrics.jsonl");
  CHECK(r.train.size() == 1);
  REQUIRE(r.warnings.size() == 1);
  CHECK(has(r.warnings[0], "d/metrics.jsonl:2: the line is not JSON"));

  // A line of a wrong type of value for a plotted field: a gap, and a warning.
  r = parse_metrics(R"({"type":"train","epoch":0,"step":1,"loss":"high","lr":0.1,"img_per_s":1.0})"
                    "\n",
                    "e/metrics.jsonl");
  REQUIRE(r.train.size() == 1);
  CHECK(std::isnan(r.train[0].loss));
  CHECK(r.warnings.size() == 1);
}

TEST_CASE("an empty file has no records and no warnings; a file of garbage is an error; warnings are capped") {
  const RunMetrics r = parse_metrics("", "e/metrics.jsonl");
  CHECK(r.train.empty());
  CHECK(r.eval.empty());
  CHECK(r.warnings.empty());
  CHECK_THROWS_WITH_AS(parse_metrics("hello\nworld\n", "f/metrics.jsonl"),
                       doctest::Contains("f/metrics.jsonl holds no metrics record"), Error);
  std::string many;
  for (int i = 0; i < 50; ++i) many += "not json\n";
  const RunMetrics m = parse_metrics(many + kOneStep, "g/metrics.jsonl");
  CHECK(m.train.size() == 1);
  REQUIRE(m.warnings.size() == 6);
  CHECK(has(m.warnings.back(), "45 more line(s) skipped"));
}

TEST_CASE("run labels: directory names, with parents only where two are the same") {
  CHECK(run_labels({"/r/a/x/run", "/r/b/x/run", "/r/c/other"}) ==
        std::vector<std::string>{"a/x/run", "b/x/run", "other"});
  CHECK(run_labels({"runs/r1/", "runs/r2"}) == std::vector<std::string>{"r1", "r2"});
  CHECK(run_labels({"/runs/r1", "/runs/r1/"}) == std::vector<std::string>{"r1", "r1 (2)"});
  CHECK(run_labels({"/r/comm/n1", "/r/compute/n1", "/r/comm/n2"}) ==
        std::vector<std::string>{"comm/n1", "compute/n1", "n2"});
}

TEST_CASE("nice ticks: steps of 1, 2 or 5 times a power of ten that cover the range") {
  const double ranges[][2] = {{0, 14},        {2.2, 27.5}, {0.0084, 0.1}, {-3.5, 7.25}, {1e-7, 3e-7},
                              {92.1, 93.4},   {0, 1e6},    {5, 5},        {0, 0},       {-2, -2},
                              {12345, 12399}, {0, 0.001}};
  for (const auto& r : ranges)
    for (bool integer : {false, true}) {
      CAPTURE(r[0]);
      CAPTURE(r[1]);
      CAPTURE(integer);
      const svg::Ticks t = svg::nice_ticks(r[0], r[1], 5, integer);
      CHECK(t.lo <= r[0]);
      CHECK(t.hi >= r[1]);
      CHECK(t.hi > t.lo);
      CHECK(t.values.size() >= 2);
      CHECK(t.values.size() <= 13);
      const double mantissa = t.step / std::pow(10.0, std::floor(std::log10(t.step) + 1e-9));
      CHECK((std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9));
      if (integer) CHECK(t.step >= 1);
      for (size_t i = 1; i < t.values.size(); ++i) CHECK(t.values[i] - t.values[i - 1] == doctest::Approx(t.step));
    }
  CHECK(svg::nice_ticks(0, 14, 6, true).step == 2);
  CHECK(svg::nice_ticks(0, 0.1, 5).step == doctest::Approx(0.02));
  CHECK(svg::format_tick(0.30000000000000004, 0.1) == "0.3");
  CHECK(svg::format_tick(-1e-17, 0.02) == "0.00");
  CHECK(svg::format_tick(1500, 500) == "1500");
  CHECK(svg::format_tick(2e-7, 1e-7) == "2e-07");
  CHECK(svg::escape("a<b & \"c\"") == "a&lt;b &amp; &quot;c&quot;");
}

TEST_CASE("text too long for its place is cut with an ellipsis, keeping the end of a run's name") {
  const std::string name = "very/long/path/to/some/experiments/2024-06-01/sweep-lr/lr0.1-wd5e-4-run7";
  CHECK(svg::fit_text(name, 12, 1000) == name);
  const std::string end = svg::fit_text(name, 12, 200, true);
  CHECK(svg::text_width(end, 12) <= 200);
  CHECK(end.rfind("\u2026", 0) == 0);
  CHECK(has(end, "lr0.1-wd5e-4-run7"));
  const std::string start = svg::fit_text("Évaluation accuracy: top-1 (solid), top-5 (dashed)", 14, 120);
  CHECK(svg::text_width(start, 14) <= 120);
  CHECK(start.rfind("Év", 0) == 0);  // cut between characters, not inside one
  CHECK(svg::fit_text(name, 12, 3, true) == "\u2026");
}

TEST_CASE("the SVG: well-formed, four panels, a series per run and metric with its points, ticks, legend") {
  const std::vector<RunMetrics> runs = {parse_metrics(kResumed, "x/run/metrics.jsonl"),
                                        parse_metrics(kStillWriting, "y/run/metrics.jsonl"),
                                        parse_metrics(kOneStep, "solo/metrics.jsonl")};
  const std::vector<std::string> labels = {"x/run", "y/run", "solo"};
  const std::string svg = plot_svg(runs, labels);
  XmlNode doc;
  REQUIRE_NOTHROW(doc = parse_xml(svg));
  CHECK(doc.name == "svg");
  CHECK(doc.attr("xmlns") == "http://www.w3.org/2000/svg");

  // Training panels: x/run has 6 steps (loss: 3 before the gap, 2 after), y/run 5, solo 1.
  const XmlNode& loss = panel(doc, "loss");
  int lines = 0;
  CHECK(points_of(*series(loss, "x/run", "loss"), &lines).size() == 5);
  CHECK(lines == 2);
  CHECK(points_of(*series(loss, "y/run", "loss"), &lines).size() == 5);
  CHECK(lines == 1);
  CHECK(points_of(*series(loss, "solo", "loss"), &lines).size() == 1);  // a dot
  CHECK(lines == 0);
  for (const auto& [id, metric] : {std::pair{"lr", "lr"}, {"throughput", "img_per_s"}}) {
    CHECK(points_of(*series(panel(doc, id), "x/run", metric), &lines).size() == 6);
    CHECK(lines == 1);
  }

  // Every point lies in its panel's plot area, and the ticks cover the data.
  const XmlNode* frame = loss.find_all([](const XmlNode& e) { return e.name == "rect"; }).at(0);
  const double fx = std::stod(frame->attr("x")), fy = std::stod(frame->attr("y"));
  const double fw = std::stod(frame->attr("width")), fh = std::stod(frame->attr("height"));
  for (const std::string run : {"x/run", "y/run", "solo"})
    for (const auto& [x, y] : points_of(*series(loss, run, "loss"), &lines)) {
      CHECK(x >= fx - 0.05);
      CHECK(x <= fx + fw + 0.05);
      CHECK(y >= fy - 0.05);
      CHECK(y <= fy + fh + 0.05);
    }
  const std::vector<double> yt = ticks(loss, "ytick"), xt = ticks(loss, "xtick");
  REQUIRE(yt.size() >= 2);
  CHECK(*std::min_element(yt.begin(), yt.end()) <= 1.3);
  CHECK(*std::max_element(yt.begin(), yt.end()) >= 3.0);
  CHECK(*std::min_element(xt.begin(), xt.end()) <= 0);
  CHECK(*std::max_element(xt.begin(), xt.end()) >= 12);

  // Evaluation: only x/run has some (epochs 1 to 3 completed); the note names the others.
  const XmlNode& acc = panel(doc, "accuracy");
  CHECK(points_of(*series(acc, "x/run", "top1"), &lines).size() == 3);
  CHECK(points_of(*series(acc, "x/run", "top5"), &lines).size() == 3);
  CHECK(series(acc, "y/run", "top1") == nullptr);
  CHECK(has(acc.all_text(), "no evaluation yet: y/run, solo"));
  const std::vector<double> at = ticks(acc, "xtick");
  CHECK(*std::max_element(at.begin(), at.end()) >= 3);
  const std::vector<double> ay = ticks(acc, "ytick");
  CHECK(*std::min_element(ay.begin(), ay.end()) <= 40);
  CHECK(*std::max_element(ay.begin(), ay.end()) >= 90);

  std::vector<std::string> legend;
  for (const XmlNode* n : doc.find_all([](const XmlNode& e) { return e.attr("class") == "legend-label"; }))
    legend.push_back(n->text);
  CHECK(legend == labels);
}

TEST_CASE("no evaluation and no steps at all: the panels say so") {
  const std::string svg = plot_svg({parse_metrics("", "a/metrics.jsonl")}, {"a"});
  const XmlNode doc = parse_xml(svg);
  CHECK(has(panel(doc, "accuracy").all_text(), "no evaluation yet"));
  CHECK(has(panel(doc, "loss").all_text(), "no training step logged yet"));
  CHECK(has(doc.all_text(), "a (no records yet)"));
}

// The command, with PATH set to `path` (rsvg-convert found or not) for its duration.
int plot_with_path(const std::string& path, const std::vector<std::string>& args) {
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", path.c_str(), 1);
  struct Restore {
    std::string v;
    ~Restore() { ::setenv("PATH", v.c_str(), 1); }
  } restore{saved};
  return plot_command(args);
}

TEST_CASE("ringtape plot: writes the file asked for, atomically, and nothing else") {
  const fs::path root = fresh_dir("command");
  const fs::path no_tools = root / "empty-bin";
  fs::create_directories(no_tools);
  write(root / "a/run/metrics.jsonl", kResumed);
  write(root / "b/run/metrics.jsonl", kStillWriting);
  const std::string a = (root / "a/run").string(), b = (root / "b/run").string();
  fs::create_directories(root / "out");
  write(root / "out/plot.svg", "an older plot");

  CHECK(plot_with_path(no_tools, {a, b, "-o", (root / "out/plot.svg").string()}) == 0);
  CHECK(listing(root / "out") == std::set<std::string>{"plot.svg"});  // no PNG without rsvg-convert, no temp
  const std::string svg = read(root / "out/plot.svg");
  const XmlNode doc = parse_xml(svg);
  CHECK(has(doc.all_text(), "a/run"));
  CHECK(has(doc.all_text(), "b/run"));
  CHECK(listing(root / "a/run") == std::set<std::string>{"metrics.jsonl"});
  CHECK(read(root / "a/run/metrics.jsonl") == kResumed);

  // Default: <first RUN_DIR>/plot.svg.
  CHECK(plot_with_path(no_tools, {a, "--no-png"}) == 0);
  CHECK(listing(root / "a/run") == std::set<std::string>{"metrics.jsonl", "plot.svg"});
}

TEST_CASE("ringtape plot: errors name the problem and the fix, and leave no file") {
  const fs::path root = fresh_dir("errors");
  const fs::path no_tools = root / "empty-bin";
  fs::create_directories(no_tools);
  write(root / "run/metrics.jsonl", kOneStep);
  fs::create_directories(root / "not-a-run");
  const std::string run = (root / "run").string();

  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {(root / "not-a-run").string()}),
                       doctest::Contains("not-a-run/metrics.jsonl' does not exist"), UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {(root / "not-a-run").string()}),
                       doctest::Contains("must be the --output-dir of a ringtape train run"), UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {run, (root / "gone").string()}), doctest::Contains("does not exist"),
                       UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {(root / "run/metrics.jsonl").string()}),
                       doctest::Contains("metrics.jsonl' is not a directory: give the --output-dir"), UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {}), doctest::Contains("no RUN_DIR"), UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {run, "-x"}), doctest::Contains("unknown flag -x"), UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {run, "--colour", "red"}), doctest::Contains("unknown flag --colour"),
                       UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {run, "-o"}), doctest::Contains("needs a file name"), UsageError);
  // Only .svg or .png: a slip of -o cannot replace the run's metrics.
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {run, "-o", (root / "run/metrics.jsonl").string()}),
                       doctest::Contains("must end in .svg or .png"), UsageError);
  CHECK(read(root / "run/metrics.jsonl") == kOneStep);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {run, "-o", (root / "nowhere/p.svg").string()}),
                       doctest::Contains("does not exist (create it first)"), UsageError);
  CHECK_THROWS_WITH_AS(plot_with_path(no_tools, {run, "-o", (root / "p.png").string()}),
                       doctest::Contains("install it (Debian/Ubuntu: apt-get install librsvg2-bin) or write an SVG"),
                       Error);
  CHECK(listing(root / "run") == std::set<std::string>{"metrics.jsonl"});
  CHECK(listing(root) == std::set<std::string>{"empty-bin", "not-a-run", "run"});
}

TEST_CASE("ringtape plot: a PNG through rsvg-convert, when it is installed") {
  const char* path = std::getenv("PATH");
  if (!path || find_on_path("rsvg-convert").empty()) {
    MESSAGE("rsvg-convert is not on PATH (Debian: librsvg2-bin): the PNG cases are not run");
    return;
  }
  const fs::path root = fresh_dir("png");
  write(root / "run/metrics.jsonl", kResumed);
  fs::create_directories(root / "out");
  const std::string run = (root / "run").string();
  CHECK(plot_with_path(path, {run, "-o", (root / "out/p.png").string()}) == 0);
  CHECK(listing(root / "out") == std::set<std::string>{"p.png"});  // the SVG it was made from is gone
  CHECK(read(root / "out/p.png").substr(0, 8) == "\x89PNG\r\n\x1a\n");
  CHECK(plot_with_path(path, {run, "-o", (root / "out/q.svg").string()}) == 0);  // and its PNG beside it
  CHECK(listing(root / "out") == std::set<std::string>{"p.png", "q.png", "q.svg"});
  CHECK(read(root / "out/q.png").substr(0, 4) == "\x89PNG");
}

}  // namespace
}  // namespace rt::cli
