#include "loadgen/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace keel::loadgen {

namespace {

constexpr int kWidth = 560, kHeight = 300;
constexpr int kLeft = 64, kRight = 140, kTop = 30, kBottom = 44;
constexpr const char *kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v, bool share) {
  char buf[32];
  if (share)
    std::snprintf(buf, sizeof buf, "%.0f%%", v * 100);
  else if (std::fabs(v) >= 1000)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A round step giving about n ticks over [0, hi].
double nice_step(double hi, int n) {
  if (hi <= 0) return 1;
  const double raw = hi / n;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

}  // namespace

std::string svg_chart(const Chart &c) {
  double xmin = 0, xmax = 1, ymax = 0;
  bool any = false;
  for (const auto &s : c.series)
    for (const auto &[x, y] : s.points) {
      xmin = any ? std::min(xmin, x) : x;
      xmax = any ? std::max(xmax, x) : x;
      ymax = std::max(ymax, y);
      any = true;
    }
  if (!c.x_categories.empty()) {
    xmin = -0.5;
    xmax = static_cast<double>(c.x_categories.size()) - 0.5;
  }
  if (xmax <= xmin) xmax = xmin + 1;
  if (c.y_is_share) ymax = 1;
  const double ystep = nice_step(ymax > 0 ? ymax : 1, 5);
  const double ytop = std::max(ystep, std::ceil((ymax > 0 ? ymax : 1) / ystep) * ystep);
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double y) { return kTop + ph - y / ytop * ph; };

  std::string o = "<svg class=\"chart\" viewBox=\"0 0 " + std::to_string(kWidth) + " " +
                  std::to_string(kHeight) + "\" width=\"" + std::to_string(kWidth) +
                  "\" height=\"" + std::to_string(kHeight) + "\" role=\"img\">";
  o += "<text x=\"" + std::to_string(kLeft) + "\" y=\"18\" class=\"title\">" +
       html_escape(c.title) + "</text>";
  for (double y = 0; y <= ytop + ystep / 2; y += ystep) {
    o += "<line x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + pw) + "\" y1=\"" + num(py(y)) +
         "\" y2=\"" + num(py(y)) + "\" class=\"grid\"/>";
    o += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py(y) + 4) + "\" text-anchor=\"end\">" +
         tick_label(y, c.y_is_share) + "</text>";
  }
  if (!c.x_categories.empty()) {
    for (std::size_t i = 0; i < c.x_categories.size(); ++i)
      o += "<text x=\"" + num(px(static_cast<double>(i))) + "\" y=\"" + num(kTop + ph + 16) +
           "\" text-anchor=\"middle\">" + html_escape(c.x_categories[i]) + "</text>";
  } else {
    const double xstep = nice_step(xmax - xmin, 5);
    for (double x = std::ceil(xmin / xstep) * xstep; x <= xmax + 1e-9; x += xstep)
      o += "<text x=\"" + num(px(x)) + "\" y=\"" + num(kTop + ph + 16) +
           "\" text-anchor=\"middle\">" + tick_label(x, false) + "</text>";
  }
  o += "<text x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(kHeight - 6) +
       "\" text-anchor=\"middle\">" + html_escape(c.x_label) + "</text>";
  o += "<text x=\"14\" y=\"" + num(kTop + ph / 2) +
       "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " + num(kTop + ph / 2) + ")\">" +
       html_escape(c.y_label) + "</text>";
  o += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) +
       "\" height=\"" + num(ph) + "\" class=\"frame\"/>";
  for (std::size_t si = 0; si < c.series.size(); ++si) {
    const auto &s = c.series[si];
    const char *color = kColors[si % std::size(kColors)];
    std::string pts;
    for (const auto &[x, y] : s.points) pts += num(px(x)) + "," + num(py(y)) + " ";
    o += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
         "\" stroke-width=\"2\" points=\"" + pts + "\"/>";
    if (s.points.size() <= 64)
      for (const auto &[x, y] : s.points)
        o += "<circle cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) + "\" r=\"3\" fill=\"" + color +
             "\"><title>" + html_escape(s.name) + ": " + tick_label(y, c.y_is_share) +
             "</title></circle>";
    const double ly = kTop + 10 + 18.0 * static_cast<double>(si);
    o += "<rect x=\"" + num(kLeft + pw + 10) + "\" y=\"" + num(ly - 8) +
         "\" width=\"10\" height=\"10\" fill=\"" + color + "\"/>";
    o += "<text x=\"" + num(kLeft + pw + 24) + "\" y=\"" + num(ly + 1) + "\">" +
         html_escape(s.name) + "</text>";
  }
  o += "</svg>";
  return o;
}

}  // namespace keel::loadgen
