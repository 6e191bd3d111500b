// The /debug/scheduler page (HTML and JavaScript in one document, scheduler_page.cpp).
#pragma once

#include <string_view>

namespace sg::admin {

std::string_view scheduler_page();

}  // namespace sg::admin
