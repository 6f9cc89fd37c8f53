#include "cli/plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/flags.h"
#include "cli/plot_files.h"
#include "cli/svg_chart.h"
#include "base/error.h"

namespace rt::cli {
namespace {

namespace fs = std::filesystem;
using detail::cat;

const char* kUsage =
    "usage: ringtape plot RUN_DIR [RUN_DIR...] [-o OUT.svg|OUT.png] [flags]\n\n"
    "Draws the metrics.jsonl of one or more training runs (each RUN_DIR the --output-dir of a\n"
    "`ringtape train`) as one SVG: training loss, learning rate and images/s against the step, and\n"
    "evaluation top-1 and top-5 against the epoch, the runs overlaid in one colour each. A run still\n"
    "training can be plotted: a line it is writing is ignored with a warning.\n\n"
    "-o OUT.svg (default <first RUN_DIR>/plot.svg) also writes OUT.png when rsvg-convert is on PATH\n"
    "(Debian/Ubuntu: librsvg2-bin); -o OUT.png writes only the PNG and needs rsvg-convert. Nothing\n"
    "but the named file (and that PNG) is written.";

// d3's category10, then five of Paul Tol's "muted" colours unlike those (black, indigo, wine,
// olive, teal): fifteen lines told apart on white. Beyond them, hues a golden angle apart.
std::string colour(size_t i) {
  static const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                   "#000000", "#332288", "#882255", "#999933", "#44aa99"};
  constexpr size_t kNamed = sizeof kPalette / sizeof kPalette[0];
  if (i < kNamed) return kPalette[i];
  // HSL(h, 65%, 42%) to RGB.
  const double h = std::fmod(double(i - kNamed) * 137.508 + 15, 360.0) / 60, c = (1 - std::abs(2 * 0.42 - 1)) * 0.65;
  const double x = c * (1 - std::abs(std::fmod(h, 2.0) - 1)), m = 0.42 - c / 2;
  const int sector = int(h);
  const double r = sector == 0 || sector == 5 ? c : sector == 1 || sector == 4 ? x : 0;
  const double g = sector == 1 || sector == 2 ? c : sector == 0 || sector == 3 ? x : 0;
  const double b = sector == 3 || sector == 4 ? c : sector == 2 || sector == 5 ? x : 0;
  char s[8];
  std::snprintf(s, sizeof s, "#%02x%02x%02x", int((r + m) * 255), int((g + m) * 255), int((b + m) * 255));
  return s;
}

// "a, b and 3 more": names for a panel's note, short enough for its line.
std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  size_t i = 0;
  for (; i < names.size() && i < 3; ++i) s += (i ? ", " : "") + names[i];
  if (i < names.size()) s += cat(" and ", names.size() - i, " more");
  return s;
}

// A panel whose x axis counts (steps, epochs) from 0.
svg::Chart panel(const char* id, const char* title, const char* x_title, const char* y_title, const char* empty,
                 bool y_from_zero) {
  svg::Chart c;
  c.id = id;
  c.title = title;
  c.x_title = x_title;
  c.y_title = y_title;
  c.empty_text = empty;
  c.x_integer = c.x_from_zero = true;
  c.y_from_zero = y_from_zero;
  return c;
}

svg::Series series(const std::string& run, const std::string& metric, const std::string& colour) {
  svg::Series s;
  s.run = run;
  s.metric = metric;
  s.colour = colour;
  return s;
}

svg::Series train_series(const RunMetrics& r, const std::string& label, const std::string& metric,
                         const std::string& col, double TrainPoint::*field) {
  svg::Series s = series(label, metric, col);
  for (const TrainPoint& p : r.train) s.x.push_back(double(p.step)), s.y.push_back(p.*field);
  return s;
}

svg::Series eval_series(const RunMetrics& r, const std::string& label, const std::string& metric,
                        const std::string& col, double EvalPoint::*field, bool dashed) {
  svg::Series s = series(label, metric, col);
  s.dashed = dashed;
  s.markers = true;
  // An eval record's epoch is the one that just ended (0-based): after it, epoch + 1 are done.
  for (const EvalPoint& p : r.eval) s.x.push_back(double(p.epoch + 1)), s.y.push_back(p.*field);
  return s;
}

// Splits the command line into RUN_DIRs and the flags' tokens ("-o X" is "--output X").
void split_args(const std::vector<std::string>& args, std::vector<std::string>* runs, std::vector<std::string>* flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-o" || a == "--output") {
      if (i + 1 >= args.size()) throw UsageError(a + " needs a file name ending in .svg or .png");
      flags->push_back("--output");
      flags->push_back(args[++i]);
    } else if (a.rfind("--", 0) == 0) {
      flags->push_back(a);
    } else if (a.size() > 1 && a[0] == '-') {
      throw UsageError("unknown flag " + a + " (see ringtape plot --help)");
    } else {
      runs->push_back(a);
    }
  }
}

std::string lower_extension(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  for (char& ch : e) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return e;
}

// The output must be an .svg or .png in a directory that exists: the plot writes no other
// kind of file, so a slip of -o cannot replace metrics.jsonl or a checkpoint.
void check_output(const std::string& out) {
  const std::string ext = lower_extension(out);
  if (ext != ".svg" && ext != ".png")
    throw UsageError("-o '" + out + "': the output must end in .svg or .png");
  std::error_code ec;
  if (fs::is_directory(out, ec)) throw UsageError("-o '" + out + "' is a directory: give a file name ending in " + ext);
  const fs::path dir = fs::path(out).parent_path();
  if (!dir.empty() && !fs::is_directory(dir, ec))
    throw UsageError("-o '" + out + "': '" + dir.string() + "' " +
                     (fs::exists(dir, ec) ? "is not a directory" : "does not exist (create it first)"));
}

}  // namespace

std::string plot_svg(const std::vector<RunMetrics>& runs, const std::vector<std::string>& labels) {
  RT_CHECK(runs.size() == labels.size(), "plot_svg: ", runs.size(), " runs but ", labels.size(), " labels");
  const char* kNoSteps = "no training step logged yet";
  svg::Chart loss = panel("loss", "Training loss", "step", "loss", kNoSteps, false);
  svg::Chart acc = panel("accuracy", "Evaluation accuracy: top-1 (solid), top-5 (dashed)", "epochs completed",
                         "accuracy (%)", "no evaluation yet (one runs at the end of each epoch)", false);
  svg::Chart lr = panel("lr", "Learning rate", "step", "learning rate", kNoSteps, true);
  svg::Chart ips = panel("throughput", "Throughput (all processes)", "step", "images / s", kNoSteps, true);
  std::vector<std::string> no_train, no_eval;
  std::vector<svg::LegendEntry> legend;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    const std::string& name = labels[i];
    const std::string col = colour(i);
    loss.series.push_back(train_series(r, name, "loss", col, &TrainPoint::loss));
    lr.series.push_back(train_series(r, name, "lr", col, &TrainPoint::lr));
    ips.series.push_back(train_series(r, name, "img_per_s", col, &TrainPoint::img_per_s));
    if (!r.eval.empty()) {
      acc.series.push_back(eval_series(r, name, "top1", col, &EvalPoint::top1, false));
      acc.series.push_back(eval_series(r, name, "top5", col, &EvalPoint::top5, true));
    } else {
      no_eval.push_back(name);
    }
    if (r.train.empty()) no_train.push_back(name);
    legend.push_back({r.train.empty() && r.eval.empty() ? name + " (no records yet)" : name, col});
  }
  // A note names the runs missing from a panel that others fill; a panel no run fills says so
  // in its middle instead.
  if (!acc.series.empty() && !no_eval.empty()) acc.note = "no evaluation yet: " + name_list(no_eval);
  if (no_train.size() < runs.size() && !no_train.empty())
    lr.note = ips.note = std::string(kNoSteps) + ": " + name_list(no_train);
  loss.note = lr.note.empty() ? "each point: the mean over the steps since the previous one" : lr.note;

  constexpr double kWidth = 1200, kMargin = 24, kGap = 36, kPanelH = 330;
  std::string body;
  body += "<text x=\"" + svg::coord(kMargin) + "\" y=\"30\" font-size=\"18\" font-weight=\"bold\" fill=\"#222222\">" +
          svg::escape(cat("ringtape training metrics: ", runs.size(), runs.size() == 1 ? " run" : " runs")) +
          "</text>\n";
  const double legend_h = svg::draw_legend(body, legend, kMargin, 42, kWidth - 2 * kMargin);
  const double top = 42 + legend_h + 16, pw = (kWidth - 2 * kMargin - kGap) / 2;
  svg::draw_chart(body, loss, kMargin, top, pw, kPanelH);
  svg::draw_chart(body, acc, kMargin + pw + kGap, top, pw, kPanelH);
  svg::draw_chart(body, lr, kMargin, top + kPanelH + 20, pw, kPanelH);
  svg::draw_chart(body, ips, kMargin + pw + kGap, top + kPanelH + 20, pw, kPanelH);
  return svg::document(kWidth, top + 2 * kPanelH + 20 + kMargin, body);
}

int plot_command(const std::vector<std::string>& args) {
  Flags flags({{"output", FlagType::string, "<first RUN_DIR>/plot.svg",
                "-o: the file to write, ending in .svg or .png", {}},
               {"no-png", FlagType::boolean, "false", "with an .svg output, do not also write the PNG beside it", {}}});
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::printf("%s\n", flags.help(kUsage).c_str());
    return 0;
  }
  std::vector<std::string> run_dirs, flag_args;
  split_args(args, &run_dirs, &flag_args);
  flags.parse(flag_args);
  if (run_dirs.empty()) throw UsageError("no RUN_DIR: name the --output-dir of one or more training runs");
  // Every run is read before anything is written: a bad RUN_DIR leaves no file behind. The
  // runs come first so that `ringtape plot FILE` says FILE is not a run.
  std::vector<RunMetrics> runs;
  for (const auto& d : run_dirs) {
    runs.push_back(read_run(d));
    for (const auto& w : runs.back().warnings) std::fprintf(stderr, "ringtape plot: warning: %s\n", w.c_str());
    if (runs.back().train.empty() && runs.back().eval.empty())
      std::fprintf(stderr, "ringtape plot: warning: %s has no training or evaluation record yet\n",
                   runs.back().path.c_str());
  }
  const std::string out = flags.given("output") ? flags.str("output") : (fs::path(run_dirs[0]) / "plot.svg").string();
  check_output(out);
  const bool png_only = lower_extension(out) == ".png";
  const std::string rsvg = find_on_path("rsvg-convert");
  if (png_only && rsvg.empty())
    throw Error("-o '" + out + "': writing a PNG needs rsvg-convert, which is not on PATH: install it (Debian/Ubuntu: "
                "apt-get install librsvg2-bin) or write an SVG (-o NAME.svg) and open it in a browser");

  const std::string doc = plot_svg(runs, run_labels(run_dirs));
  if (!png_only) {
    write_file_atomic(out, doc);
    std::printf("wrote %s\n", out.c_str());
    if (rsvg.empty() || flags.boolean("no-png")) return 0;
  }
  const std::string png = png_only ? out : fs::path(out).replace_extension(".png").string();
  if (png_only) {
    // rsvg-convert reads a file: for a PNG alone, the SVG goes to a temporary one beside it.
    TempFile svg_tmp(out, ".svg");
    write_file_atomic(svg_tmp.path(), doc);
    svg_to_png(rsvg, svg_tmp.path(), png);
  } else {
    svg_to_png(rsvg, out, png);
  }
  std::printf("wrote %s\n", png.c_str());
  return 0;
}

}  // namespace rt::cli
