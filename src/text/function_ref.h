// A non-owning reference to a callable: the pre-tokenizer chain calls one per
// pre-token, so it must not allocate as std::function may.
#pragma once

#include <type_traits>
#include <utility>

namespace keel::text {

template <typename Sig>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F &&f)  // NOLINT: implicit by design
      : obj_(const_cast<void *>(static_cast<const void *>(&f))), call_([](void *o, Args... a) -> R {
          return (*static_cast<std::remove_reference_t<F> *>(o))(std::forward<Args>(a)...);
        }) {}
  R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

 private:
  void *obj_;
  R (*call_)(void *, Args...);
};

}  // namespace keel::text
