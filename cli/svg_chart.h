// A small SVG line-chart writer for `ringtape plot`: linear axes with "nice" ticks (steps of
// 1, 2 or 5 times a power of ten that cover the data), tick labels, axis titles, one or more
// polylines per chart with gaps at NaN, a legend. It emits plain SVG 1.1 elements with
// presentation attributes (no CSS, no scripts), so browsers and rsvg-convert draw it alike.
//
// Every series is a <g data-run="..." data-metric="..."> holding a <polyline> per unbroken
// stretch of two or more points and a <circle class="point"> per lone point (a run with
// one logged step, or a value between two gaps): a test, or a script, can read the data
// back from the document.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rt::cli::svg {

struct Ticks {
  double lo = 0, hi = 1, step = 1;  // the axis runs from lo to hi, both multiples of step
  std::vector<double> values;       // lo, lo + step, ..., hi
};

// Ticks covering [lo, hi] in about `target` steps of 1, 2 or 5 times a power of ten;
// `integer`: steps of at least 1 (step and epoch counts). An empty range (lo == hi) is
// widened around its value. lo and hi must be finite.
Ticks nice_ticks(double lo, double hi, int target, bool integer = false);

// A tick's label: as many decimals as the step needs ("0.25", "1500"), no "-0".
std::string format_tick(double v, double step);

// Text for an XML attribute or element: &, <, >, " and ' escaped.
std::string escape(std::string_view s);

// A number as an SVG coordinate ("12.5").
std::string coord(double v);

struct Series {
  std::string run, metric;  // the group's data-run and data-metric
  std::string colour;       // any SVG colour ("#1f77b4")
  bool dashed = false;
  bool markers = false;       // a dot at every point, not just at lone ones
  std::vector<double> x, y;   // same length; a NaN y is a gap
};

struct Chart {
  std::string id;          // data-panel of the chart's group
  std::string title;       // above the plot area
  std::string note;        // a second, smaller line under the title; "" for none
  std::string x_title, y_title;  // with units: "step", "accuracy (%)"
  std::string empty_text;  // shown in the plot area when no series has a finite point
  bool x_integer = false;  // the x axis counts (steps, epochs)
  bool x_from_zero = false, y_from_zero = false;  // the axis includes 0
  std::vector<Series> series;
};

// Appends the chart's elements (one <g data-panel="id">) for the box at (x, y) of size w x h.
void draw_chart(std::string& out, const Chart& c, double x, double y, double w, double h);

struct LegendEntry {
  std::string label, colour;
};

// Appends the legend (a <g class="legend">: a line in each colour, then its label) in rows
// from (x, y), wrapping at `width`; returns the height it took.
double draw_legend(std::string& out, const std::vector<LegendEntry>& entries, double x, double y, double width);

// An estimate of the width of `text` at `font_px` (no font metrics here: an average
// sans-serif glyph is about 0.6 em wide).
double text_width(std::string_view text, double font_px);

// `s`, or as much of it as fits in `width` at `font_px` with "…" in place of the rest (of its
// beginning when `keep_end`: the end of a path tells runs apart).
std::string fit_text(const std::string& s, double font_px, double width, bool keep_end = false);

// `body` in a standalone SVG document of w x h pixels on a white background.
std::string document(double w, double h, const std::string& body);

}  // namespace rt::cli::svg
