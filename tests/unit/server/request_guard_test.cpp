#include "server/request_guard.h"

#include <gtest/gtest.h>

using namespace keel::server;

namespace {

HttpRequest request(HeaderList headers, std::string body = "", std::string method = "POST") {
  HttpRequest r;
  r.method = std::move(method);
  r.path = r.target = "/v1/completions";
  r.headers = std::move(headers);
  r.body = std::move(body);
  return r;
}

int status_of(const RequestGuard &g, const HttpRequest &r) {
  auto e = g.check(r);
  return e ? e->status : 0;
}

RequestGuard guard() {
  RequestGuardOptions o;
  o.allowed_origins = {"https://App.Example/"};
  o.allowed_hosts = {"keel.internal:9000"};
  o.bind_host = "127.0.0.1";
  o.machine_name = "GpuBox";
  return RequestGuard(o);
}

}  // namespace

TEST(RequestGuard, HostMustNameTheServer) {
  const RequestGuard g = guard();
  for (const char *ok :
       {"127.0.0.1:8000", "10.0.0.7", "[::1]:8000", "[fe80::1]", "localhost", "LocalHost:8000",
        "localhost.", "app.localhost:80", "keel.internal", "keel.internal:1234", "gpubox:8000", ""})
    EXPECT_EQ(status_of(g, request({{"host", ok}}, "", "GET")), 0) << ok;
  for (const char *bad : {"evil.example", "evil.example:8000", "localhost.evil.example",
                          "127.0.0.1.nip.io", "internal", "[::1", "2130706433"})
    EXPECT_EQ(status_of(g, request({{"host", bad}}, "", "GET")), 421) << bad;
  RequestGuardOptions any;
  any.allowed_hosts = {"*"};
  EXPECT_EQ(status_of(RequestGuard(any), request({{"host", "evil.example"}}, "", "GET")), 0);
}

TEST(RequestGuard, OriginMustBeTheServersOwnOrListed) {
  const RequestGuard g = guard();
  auto with = [](const char *origin, const char *host) {
    return request({{"host", host}, {"origin", origin}, {"content-type", "application/json"}},
                   "{}");
  };
  EXPECT_EQ(status_of(g, with("http://127.0.0.1:8000", "127.0.0.1:8000")), 0);
  EXPECT_EQ(status_of(g, with("http://localhost", "localhost:80")), 0);
  EXPECT_EQ(status_of(g, with("https://app.example", "127.0.0.1:8000")), 0);
  EXPECT_EQ(status_of(g, with("http://127.0.0.1:8001", "127.0.0.1:8000")), 403);
  EXPECT_EQ(status_of(g, with("https://evil.example", "127.0.0.1:8000")), 403);
  EXPECT_EQ(status_of(g, with("null", "127.0.0.1:8000")), 403);
  EXPECT_EQ(status_of(g, with("", "127.0.0.1:8000")), 403);
  EXPECT_EQ(status_of(g, with("http://127.0.0.1:8000/path", "127.0.0.1:8000")), 403);
  // GETs too (a rebinding or cross-origin read carries Origin in a fetch).
  EXPECT_EQ(
      status_of(g, request({{"host", "127.0.0.1"}, {"origin", "https://evil.example"}}, "", "GET")),
      403);
  RequestGuardOptions any;
  any.allowed_origins = {"*"};
  EXPECT_EQ(status_of(RequestGuard(any), with("https://evil.example", "127.0.0.1")), 0);
}

TEST(RequestGuard, BodiesMustBeJson) {
  const RequestGuard g = guard();
  EXPECT_EQ(status_of(g, request({{"content-type", "application/json"}}, "{}")), 0);
  EXPECT_EQ(status_of(g, request({{"content-type", " Application/JSON ; charset=utf-8"}}, "{}")),
            0);
  EXPECT_EQ(status_of(g, request({{"content-type", "text/plain"}}, "{}")), 415);
  EXPECT_EQ(status_of(g, request({{"content-type", "application/x-www-form-urlencoded"}}, "{}")),
            415);
  EXPECT_EQ(status_of(g, request({}, "{}")), 415);
  EXPECT_EQ(status_of(g, request({}, "")), 0);  // POST /v1/models/ID/load with no body
  auto e = g.check(request({{"content-type", "text/plain"}}, "{}"));
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("application/json"), std::string::npos);
}

// Checked on the headers alone, before the body is read: a body they announce counts.
TEST(RequestGuard, AnAnnouncedBodyMustBeJsonBeforeItIsRead) {
  const RequestGuard g = guard();
  EXPECT_EQ(status_of(g, request({{"content-length", "30000000"}, {"content-type", "text/plain"}})),
            415);
  EXPECT_EQ(status_of(g, request({{"transfer-encoding", "chunked"}})), 415);
  EXPECT_EQ(
      status_of(g, request({{"content-length", "30000000"}, {"content-type", "application/json"}})),
      0);
  EXPECT_EQ(status_of(g, request({{"content-length", " 00 "}})), 0);  // no body
  EXPECT_FALSE(carries_body(request({{"content-length", "0"}})));
  EXPECT_TRUE(carries_body(request({{"content-length", "1"}})));
}

TEST(RequestGuard, HelpersSplitHeaders) {
  EXPECT_EQ(host_of_authority("Example.COM:8000"), "example.com");
  EXPECT_EQ(host_of_authority("[::1]:80"), "::1");
  EXPECT_EQ(host_of_authority("localhost."), "localhost");
  EXPECT_EQ(media_type_of("text/plain;charset=UTF-8"), "text/plain");
}
