// A non-owning reference to a callable, for callbacks that do not outlive the call they
// are passed to (a load balancer's "usable" test): unlike std::function it never
// allocates (a lambda capturing three references does not fit std::function's inline
// storage, which cost a malloc per proxied request) and calls through one pointer.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace sg {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): passed like a std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::add_pointer_t<std::remove_reference_t<F>>>(o))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace sg
