#include "cli/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace rt::cli::svg {
namespace {

constexpr double kTickFont = 11, kTitleFont = 14, kNoteFont = 11, kAxisFont = 12, kLegendFont = 12;
constexpr const char* kInk = "#222222";
constexpr const char* kGrey = "#666666";
constexpr const char* kGrid = "#e4e4e4";

void text(std::string& out, double x, double y, double font_px, const char* anchor, const std::string& s,
          const std::string& extra = "") {
  out += "<text x=\"" + coord(x) + "\" y=\"" + coord(y) + "\" font-size=\"" + coord(font_px) + "\" text-anchor=\"" +
         anchor + "\"" + extra + ">" + escape(s) + "</text>\n";
}

void line(std::string& out, double x1, double y1, double x2, double y2, const char* colour, double width) {
  out += "<line x1=\"" + coord(x1) + "\" y1=\"" + coord(y1) + "\" x2=\"" + coord(x2) + "\" y2=\"" + coord(y2) +
         "\" stroke=\"" + colour + "\" stroke-width=\"" + coord(width) + "\"/>\n";
}

void circle(std::string& out, double x, double y, double r, const std::string& colour, const char* cls) {
  out += std::string("<circle class=\"") + cls + "\" cx=\"" + coord(x) + "\" cy=\"" + coord(y) + "\" r=\"" +
         coord(r) + "\" fill=\"" + colour + "\"/>\n";
}

// The range of the x values, and of the y values, of the finite points; false when none.
bool data_range(const Chart& c, double* x0, double* x1, double* y0, double* y1) {
  bool any = false;
  for (const Series& s : c.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      *x0 = any ? std::min(*x0, s.x[i]) : s.x[i];
      *x1 = any ? std::max(*x1, s.x[i]) : s.x[i];
      *y0 = any ? std::min(*y0, s.y[i]) : s.y[i];
      *y1 = any ? std::max(*y1, s.y[i]) : s.y[i];
      any = true;
    }
  return any;
}

}  // namespace

Ticks nice_ticks(double lo, double hi, int target, bool integer) {
  RT_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi && target >= 1, "nice_ticks: bad range [", lo, ", ",
           hi, "] or target ", target);
  if (hi == lo) {  // one value: a range around it, so that it sits inside the axis
    double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    if (integer) pad = std::max(pad, 1.0);
    lo -= pad;
    hi += pad;
  }
  // Of 1, 2, 5 and 10 times the power of ten below (hi - lo) / target, the step whose tick
  // count comes closest to target; on a tie the larger step (fewer, less crowded labels).
  const double mag = std::pow(10.0, std::floor(std::log10((hi - lo) / target)));
  Ticks t;
  double best_miss = HUGE_VAL;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    const double s = integer ? std::max(m * mag, 1.0) : m * mag;
    // The 1e-9 (in units of steps) keeps a bound that is a multiple of s up to rounding
    // from adding a step.
    const double count = std::ceil(hi / s - 1e-9) - std::floor(lo / s + 1e-9);
    const double miss = std::abs(count - target);
    if (miss <= best_miss) best_miss = miss, t.step = s;
  }
  const double first = std::floor(lo / t.step + 1e-9), last = std::max(std::ceil(hi / t.step - 1e-9), first + 1);
  for (double k = first; k <= last; ++k) t.values.push_back(k * t.step);  // k * step: no accumulated error
  t.lo = t.values.front();
  t.hi = t.values.back();
  return t;
}

std::string format_tick(double v, double step) {
  if (std::abs(v) < step * 1e-6) v = 0;  // -0 and 1e-17 (rounding of k * step) read as 0
  char b[64];
  if (std::max(std::abs(v), step) >= 1e7 || step < 1e-5) {
    std::snprintf(b, sizeof b, "%.3g", v);
  } else {
    const int decimals = std::max(0, int(std::ceil(-std::log10(step) - 1e-9)));
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
  }
  return b;
}

std::string escape(std::string_view s) {
  std::string o;
  for (char ch : s) switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default: o += ch;
    }
  return o;
}

std::string coord(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", std::abs(v) < 0.05 ? 0.0 : v);
  return b;
}

double text_width(std::string_view s, double font_px) {
  size_t glyphs = 0;
  for (unsigned char ch : s) glyphs += (ch & 0xC0) != 0x80;  // UTF-8: count characters, not bytes
  return double(glyphs) * 0.62 * font_px;
}

std::string fit_text(const std::string& s, double font_px, double width, bool keep_end) {
  if (text_width(s, font_px) <= width) return s;
  // Whole UTF-8 characters: the start of each one.
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  const size_t keep = std::min(starts.size(), size_t(std::max(0.0, width / (0.62 * font_px) - 1)));
  if (keep == 0) return "\u2026";
  if (keep_end) return "\u2026" + s.substr(starts[starts.size() - keep]);
  return s.substr(0, keep < starts.size() ? starts[keep] : s.size()) + "\u2026";
}

void draw_chart(std::string& out, const Chart& c, double x, double y, double w, double h) {
  out += "<g data-panel=\"" + escape(c.id) + "\">\n";
  // Bold glyphs are wider than text_width's average: the title gets 10% more room.
  text(out, x, y + 16, kTitleFont, "start", fit_text(c.title, kTitleFont * 1.1, w),
       " font-weight=\"bold\" fill=\"" + std::string(kInk) + "\"");
  if (!c.note.empty())
    text(out, x, y + 32, kNoteFont, "start", fit_text(c.note, kNoteFont, w), " fill=\"" + std::string(kGrey) + "\"");
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  const bool any = data_range(c, &x0, &x1, &y0, &y1);
  if (c.x_from_zero) x0 = std::min(x0, 0.0), x1 = std::max(x1, 0.0);
  if (c.y_from_zero) y0 = std::min(y0, 0.0), y1 = std::max(y1, 0.0);
  const Ticks xt = nice_ticks(x0, x1, 6, c.x_integer), yt = nice_ticks(y0, y1, 5);

  // The plot area: room on the left for the widest y label and the y title, below for the
  // x labels and the x title, on the right for half of the last x label.
  double label_w = 0;
  if (any)
    for (double v : yt.values) label_w = std::max(label_w, text_width(format_tick(v, yt.step), kTickFont));
  const double last_x_label = any ? text_width(format_tick(xt.hi, xt.step), kTickFont) : 0;
  const double left = x + 24 + std::max(label_w, 18.0), right = x + w - std::max(12.0, last_x_label / 2 + 4);
  const double top = y + 44, bottom = y + h - 42;
  const double pw = right - left, ph = bottom - top;
  out += "<rect x=\"" + coord(left) + "\" y=\"" + coord(top) + "\" width=\"" + coord(pw) + "\" height=\"" +
         coord(ph) + "\" fill=\"none\" stroke=\"#bbbbbb\"/>\n";
  text(out, left + pw / 2, bottom + 36, kAxisFont, "middle", c.x_title, " fill=\"" + std::string(kInk) + "\"");
  const double ty = top + ph / 2;
  text(out, x + 12, ty, kAxisFont, "middle", c.y_title,
       " fill=\"" + std::string(kInk) + "\" transform=\"rotate(-90 " + coord(x + 12) + " " + coord(ty) + ")\"");
  if (!any) {
    text(out, left + pw / 2, ty, kAxisFont, "middle", c.empty_text, " fill=\"" + std::string(kGrey) + "\"");
    out += "</g>\n";
    return;
  }

  const auto sx = [&](double v) { return left + (v - xt.lo) / (xt.hi - xt.lo) * pw; };
  const auto sy = [&](double v) { return bottom - (v - yt.lo) / (yt.hi - yt.lo) * ph; };
  for (double v : yt.values) {
    if (v != yt.lo && v != yt.hi) line(out, left, sy(v), right, sy(v), kGrid, 1);
    line(out, left - 4, sy(v), left, sy(v), kGrey, 1);
    text(out, left - 6, sy(v) + 4, kTickFont, "end", format_tick(v, yt.step),
         " class=\"ytick\" fill=\"" + std::string(kInk) + "\"");
  }
  for (double v : xt.values) {
    if (v != xt.lo && v != xt.hi) line(out, sx(v), top, sx(v), bottom, kGrid, 1);
    line(out, sx(v), bottom, sx(v), bottom + 4, kGrey, 1);
    text(out, sx(v), bottom + 16, kTickFont, "middle", format_tick(v, xt.step),
         " class=\"xtick\" fill=\"" + std::string(kInk) + "\"");
  }

  for (const Series& s : c.series) {
    out += "<g data-run=\"" + escape(s.run) + "\" data-metric=\"" + escape(s.metric) + "\">\n";
    // Each unbroken stretch of finite points: a polyline, or a dot when it is one point.
    for (size_t i = 0; i < s.x.size();) {
      const auto finite = [&](size_t k) { return std::isfinite(s.x[k]) && std::isfinite(s.y[k]); };
      if (!finite(i)) {
        ++i;
        continue;
      }
      size_t j = i;
      std::string pts;
      for (; j < s.x.size() && finite(j); ++j)
        pts += (pts.empty() ? "" : " ") + coord(sx(s.x[j])) + "," + coord(sy(s.y[j]));
      if (j - i == 1) {
        circle(out, sx(s.x[i]), sy(s.y[i]), 3.5, s.colour, "point");
      } else {
        out += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + s.colour +
               "\" stroke-width=\"1.8\" stroke-linejoin=\"round\" stroke-linecap=\"round\"" +
               (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
        if (s.markers)
          for (size_t k = i; k < j; ++k) circle(out, sx(s.x[k]), sy(s.y[k]), 2.6, s.colour, "marker");
      }
      i = j;
    }
    out += "</g>\n";
  }
  out += "</g>\n";
}

double draw_legend(std::string& out, const std::vector<LegendEntry>& entries, double x, double y, double width) {
  constexpr double kRow = 20, kSwatch = 22;
  out += "<g class=\"legend\">\n";
  double cx = x, cy = y + kRow / 2;
  for (const LegendEntry& e : entries) {
    const std::string label = fit_text(e.label, kLegendFont, width - kSwatch - 6, true);
    const double ew = kSwatch + 6 + text_width(label, kLegendFont) + 18;
    if (cx > x && cx + ew > x + width) cx = x, cy += kRow;  // wrap to a new row
    out += "<line x1=\"" + coord(cx) + "\" y1=\"" + coord(cy) + "\" x2=\"" + coord(cx + kSwatch) + "\" y2=\"" +
           coord(cy) + "\" stroke=\"" + e.colour + "\" stroke-width=\"3\"/>\n";
    text(out, cx + kSwatch + 6, cy + 4, kLegendFont, "start", label,
         " class=\"legend-label\" fill=\"" + std::string(kInk) + "\"");
    cx += ew;
  }
  out += "</g>\n";
  return entries.empty() ? 0 : cy + kRow / 2 - y;
}

std::string document(double w, double h, const std::string& body) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" +
         coord(w) + "\" height=\"" + coord(h) + "\" viewBox=\"0 0 " + coord(w) + " " + coord(h) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
         "fill=\"white\"/>\n" +
         body + "</svg>\n";
}

}  // namespace rt::cli::svg
