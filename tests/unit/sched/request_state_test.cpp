#include "core/request_state.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace keel {
namespace {

using S = RequestState;
const S kAll[] = {S::kWaiting,      S::kLoadingCache,   S::kRunning,       S::kPreempted,
                  S::kFinishedStop, S::kFinishedLength, S::kFinishedAbort, S::kFinishedError};

TEST(RequestState, LegalPathsWork) {
  S s = S::kWaiting;
  transition(s, S::kLoadingCache);
  transition(s, S::kRunning);
  transition(s, S::kPreempted);
  transition(s, S::kRunning);
  transition(s, S::kFinishedLength);
  EXPECT_EQ(s, S::kFinishedLength);
  EXPECT_TRUE(is_finished(s));
}

TEST(RequestState, FinishedIsFinal) {
  for (S f : {S::kFinishedStop, S::kFinishedLength, S::kFinishedAbort, S::kFinishedError})
    for (S to : kAll) {
      S s = f;
      EXPECT_THROW(transition(s, to), Error)
          << request_state_name(f) << "->" << request_state_name(to);
      EXPECT_EQ(s, f);  // unchanged on failure
    }
}

TEST(RequestState, AbortAndErrorFromEveryLiveState) {
  for (S from : {S::kWaiting, S::kLoadingCache, S::kRunning, S::kPreempted})
    for (S to : {S::kFinishedAbort, S::kFinishedError}) EXPECT_TRUE(is_legal_transition(from, to));
}

TEST(RequestState, IllegalTransitionsThrowInternal) {
  struct Case {
    S from, to;
  } cases[] = {{S::kWaiting, S::kPreempted},      {S::kWaiting, S::kFinishedStop},
               {S::kWaiting, S::kFinishedLength}, {S::kLoadingCache, S::kPreempted},
               {S::kRunning, S::kWaiting},        {S::kRunning, S::kLoadingCache},
               {S::kPreempted, S::kWaiting},      {S::kRunning, S::kRunning}};
  for (auto c : cases) {
    S s = c.from;
    try {
      transition(s, c.to);
      ADD_FAILURE() << request_state_name(c.from) << "->" << request_state_name(c.to);
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), ErrorCode::kInternal);
      EXPECT_NE(std::string(e.what()).find(request_state_name(c.to)), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace keel
