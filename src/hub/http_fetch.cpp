#include "hub/http_fetch.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace keel::hub {

namespace {

// curl_global_init is not thread-safe before 7.84; once per process is enough.
void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct WriteState {
  std::string *text = nullptr;  // collects the body (get, or a failed download)
  std::size_t text_limit = 0;   // get(): past this many bytes the transfer stops
  bool text_over = false;
  std::FILE *file = nullptr;  // receives the body of a successful download
  long status = 0;
  CURL *curl = nullptr;
  int write_errno = 0;
  std::uint64_t written = 0;
  std::uint64_t offset = 0;    // a resumed download asked for bytes from here on
  bool range_ignored = false;  // ...and the server sent the whole file (200) instead
};

std::size_t on_write(char *data, std::size_t size, std::size_t n, void *user) {
  auto *st = static_cast<WriteState *>(user);
  const std::size_t len = size * n;
  if (st->file) {
    if (st->status == 0) curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &st->status);
    if (st->status == 200 && st->offset > 0) {
      st->range_ignored = true;
      return 0;  // the whole file again: the caller starts over from byte 0
    }
    if (st->status == 200 || st->status == 206) {
      if (std::fwrite(data, 1, len, st->file) != len) {
        st->write_errno = errno ? errno : EIO;
        return 0;  // aborts the transfer
      }
      st->written += len;
      return len;
    }
  }
  if (st->text_limit > 0) {  // get(): the whole reply, within its limit
    if (st->text->size() + len > st->text_limit) {
      st->text_over = true;
      return 0;  // aborts the transfer
    }
    st->text->append(data, len);
    return len;
  }
  if (st->text && st->text->size() < (1u << 20)) st->text->append(data, len);  // a failure's
  return len;
}

struct HeaderState {
  std::string error_code;
};

std::size_t on_header(char *data, std::size_t size, std::size_t n, void *user) {
  auto *st = static_cast<HeaderState *>(user);
  std::string_view line(data, size * n);
  constexpr std::string_view kName = "x-error-code:";
  if (line.size() > kName.size()) {
    bool match = true;
    for (std::size_t i = 0; i < kName.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(line[i])) != kName[i]) match = false;
    if (match) {
      std::string_view v = line.substr(kName.size());
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' '))
        v.remove_suffix(1);
      st->error_code = std::string(v);
    }
  }
  return size * n;
}

struct ProgressState {
  const ProgressFn *fn = nullptr;
};

int on_progress(void *user, curl_off_t, curl_off_t now, curl_off_t, curl_off_t) {
  auto *st = static_cast<ProgressState *>(user);
  if (st->fn && *st->fn && !(*st->fn)(static_cast<std::uint64_t>(now))) return 1;
  return 0;
}

std::string escape(const std::string &s, bool keep_slash) {
  static const char *hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string url_escape_segment(const std::string &s) { return escape(s, false); }
std::string url_escape_path(const std::string &s) { return escape(s, true); }

HttpFetch::HttpFetch(std::string bearer_token, HttpLimits limits)
    : curl_(nullptr), token_(std::move(bearer_token)), limits_(limits) {
  init_curl_once();
  curl_ = curl_easy_init();
  if (!curl_) throw Error(ErrorCode::kInternal, "libcurl: curl_easy_init failed");
}

HttpFetch::~HttpFetch() { curl_easy_cleanup(static_cast<CURL *>(curl_)); }

namespace {

void common_options(CURL *c, const std::string &url, const std::string &token,
                    const HttpLimits &lim, curl_slist **headers) {
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, lim.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, lim.stall_bytes_per_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, lim.stall_seconds);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "keel/hub");
  if (!token.empty()) {
    // CURLAUTH_BEARER: libcurl sends it to the first host only, not after a redirect
    // to another host (the CDN), unless told otherwise.
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
    curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, token.c_str());
  }
  *headers = curl_slist_append(*headers, "Accept: application/json, */*");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, *headers);
}

}  // namespace

HttpResult HttpFetch::get(const std::string &url) {
  CURL *c = static_cast<CURL *>(curl_);
  curl_slist *headers = nullptr;
  common_options(c, url, token_, limits_, &headers);
  HttpResult r;
  WriteState ws;
  ws.text = &r.body;
  ws.text_limit = std::max<std::size_t>(limits_.max_reply_bytes, 1);
  ws.curl = c;
  HeaderState hs;
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &ws);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &hs);
  // A reply that announces more than the limit is refused before its body is read.
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(ws.text_limit));
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  if (ws.text_over || rc == CURLE_FILESIZE_EXCEEDED) {
    r.too_large = true;
    r.body.clear();
    r.error = "the reply is larger than " + std::to_string(ws.text_limit) + " bytes";
    return r;
  }
  if (rc != CURLE_OK) {
    r.error = curl_easy_strerror(rc);
    return r;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  r.error_code = hs.error_code;
  return r;
}

HttpResult HttpFetch::download(const std::string &url, std::FILE *out, std::uint64_t offset,
                               const ProgressFn &progress, bool &resumed, int &write_errno) {
  CURL *c = static_cast<CURL *>(curl_);
  curl_slist *headers = nullptr;
  common_options(c, url, token_, limits_, &headers);
  HttpResult r;
  WriteState ws;
  ws.text = &r.body;
  ws.file = out;
  ws.curl = c;
  ws.offset = offset;
  HeaderState hs;
  ProgressState ps{&progress};
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &ws);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &hs);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &ps);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  if (offset > 0) curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(offset));
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  r.error_code = hs.error_code;
  resumed = r.status == 206;
  write_errno = ws.write_errno;
  if (ws.range_ignored) {
    r.error = "the server ignored the byte range";
    return r;  // status 200, resumed false: start over
  }
  if (rc != CURLE_OK) {
    r.error = curl_easy_strerror(rc);
    // A cut connection after some bytes: the status was 200/206 but the body is short.
    if (ws.written > 0 || write_errno) r.status = 0;
  }
  return r;
}

}  // namespace keel::hub
