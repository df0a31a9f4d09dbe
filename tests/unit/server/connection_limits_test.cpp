#include "server/connection_limits.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

using namespace keel::server;

TEST(ConnectionLimits, ConnectionsLeaveAReserveOfDescriptors) {
  EXPECT_EQ(connections_for_open_files(1024), 1024u - 128u);  // an eighth of a small limit
  EXPECT_EQ(connections_for_open_files(1 << 20), (1u << 20) - 256u);
  EXPECT_EQ(connections_for_open_files(64), 56u);
  EXPECT_EQ(connections_for_open_files(8), 16u);  // never fewer than 16
}

TEST(ConnectionLimits, RaisesTheSoftLimitToTheHardOne) {
  const OpenFilesLimit l = raise_open_files_limit();
  ASSERT_TRUE(l.error.empty()) << l.error;
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, l.now);
  EXPECT_GE(l.now, l.before);
  if (now.rlim_max != RLIM_INFINITY) EXPECT_EQ(now.rlim_cur, now.rlim_max);
}
