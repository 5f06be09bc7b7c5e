// The web page's files (src/server/webui/), embedded in the binary at build
// time by webui/embed.cmake. GET / serves /index.html; the page loads the
// rest by path (/app.js, /style.css, ...). No file is read at run time.
//
// Immutable static data; safe from any thread.
#pragma once

#include <span>
#include <string_view>

namespace kvfork::server {

struct WebAsset {
  std::string_view path;          // "/index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view body;
};

// Every embedded file, sorted by path (generated: webui_assets_data.cc).
std::span<const WebAsset> WebUiAssets();

// The asset served for a request path ("/" = "/index.html"), or nullptr.
const WebAsset* FindWebUiAsset(std::string_view path);

}  // namespace kvfork::server
