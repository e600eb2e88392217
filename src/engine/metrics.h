// Prometheus text exposition: latency histograms and the server's counters and gauges, named as
// vLLM names them (with the "pagoda:" prefix).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class Histogram {
 public:
  // `bounds`: the upper bounds of the buckets, increasing (+Inf is implied).
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The histogram in Prometheus text format: # HELP, # TYPE, _bucket{le=...}, _sum, _count.
  std::string render(std::string_view name, std::string_view help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative), the last for +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// A gauge or counter in Prometheus text format.
std::string render_metric(std::string_view name, std::string_view type, std::string_view help,
                          double value);

}  // namespace pagoda
