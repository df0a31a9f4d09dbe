// report.html: one self-contained page (inline SVG and CSS, no script, no request to
// any origin) with the run's configuration, a table per level and the charts.
#pragma once

#include <string>

#include "loadgen/results.h"

namespace keel::loadgen {

std::string report_html(const BenchResults &results);

// "c=16" or "r=2.5/s": how a level is named in tables and charts.
std::string level_label(const LevelSummary &level);

}  // namespace keel::loadgen
