// HTTP(S) for the hub, over libcurl: a JSON GET and a resumable download into a file.
// Every transfer is bounded: a connect timeout, and a stall limit (too few bytes for
// too long aborts it), so a dead peer is an error, never a hang. A bearer token is
// sent to the endpoint's host only (libcurl drops it on a redirect to the CDN's host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace keel::hub {

struct HttpLimits {
  long connect_timeout_s = 15;
  long stall_seconds = 30;  // abort when below stall_bytes_per_s for this long
  long stall_bytes_per_s = 1024;
  // get(): the most bytes of a reply it reads; past it the transfer stops, too_large.
  std::size_t max_reply_bytes = 32u << 20;
};

struct HttpResult {
  long status = 0;         // 0: no HTTP answer (see error)
  std::string error;       // transport error text when status is 0
  std::string error_code;  // the hub's X-Error-Code header, when it sent one
  std::string body;        // for get(); for download() only the body of a failure
  bool too_large = false;  // get(): the reply passed HttpLimits::max_reply_bytes (status 0)
};

// Called with the bytes of this transfer so far; returns false to abort.
using ProgressFn = std::function<bool(std::uint64_t done_now)>;

class HttpFetch {
 public:
  HttpFetch(std::string bearer_token, HttpLimits limits);
  ~HttpFetch();
  HttpFetch(const HttpFetch &) = delete;
  HttpFetch &operator=(const HttpFetch &) = delete;

  HttpResult get(const std::string &url);

  // Appends the body to `out` (opened by the caller at `offset` bytes); asks for the
  // bytes from `offset` on with a Range header. `resumed` tells whether the server
  // honoured it (206): when it answered 200 instead, the caller must start over.
  // A write failure (a full disk) stops the transfer and is reported in write_errno.
  HttpResult download(const std::string &url, std::FILE *out, std::uint64_t offset,
                      const ProgressFn &progress, bool &resumed, int &write_errno);

 private:
  void *curl_;  // CURL*
  std::string token_;
  HttpLimits limits_;
};

// Percent-encodes one path segment (a revision like refs/pr/1 becomes refs%2Fpr%2F1).
std::string url_escape_segment(const std::string &s);
// Percent-encodes a relative path, keeping its '/' separators.
std::string url_escape_path(const std::string &s);

}  // namespace keel::hub
