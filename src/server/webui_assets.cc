#include "server/webui_assets.h"

namespace kvfork::server {

const WebAsset* FindWebUiAsset(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const WebAsset& a : WebUiAssets())
    if (a.path == path) return &a;
  return nullptr;
}

}  // namespace kvfork::server
