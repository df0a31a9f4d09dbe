// Small line charts as inline SVG, for a report that must open offline: no scripts,
// no fonts or styles from elsewhere. Text is escaped.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text/jinja/pystr.h"

namespace keel::loadgen {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

struct Chart {
  std::string title;
  std::string x_label;
  std::string y_label;
  // When set, x values are indices into these labels (e.g. "c=16") instead of numbers.
  std::vector<std::string> x_categories;
  std::vector<ChartSeries> series;
  bool y_is_share = false;  // 0..1 shown as percent
};

std::string svg_chart(const Chart &chart);

// Escapes &, <, >, " and ' for HTML text and attributes (the chat templates' escape).
using jinja::py::html_escape;

}  // namespace keel::loadgen
