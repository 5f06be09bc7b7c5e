// The web page's server side (issue 29): the embedded files and what they
// reference, and GET /v1/cache/tree's parameter and JSON.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "server/cache_tree.h"
#include "server/webui_assets.h"

namespace kvfork::server {
namespace {

TEST(WebUiAssets, IndexIsServedAtRootWithTypes) {
  const WebAsset* index = FindWebUiAsset("/");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->path, "/index.html");
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_NE(index->body.find("<!doctype html>"), std::string_view::npos);
  EXPECT_EQ(FindWebUiAsset("/index.html"), index);
  EXPECT_EQ(FindWebUiAsset("/nope.js"), nullptr);
  EXPECT_EQ(FindWebUiAsset("/embed.cmake"), nullptr) << "only page files are embedded";
  for (const WebAsset& a : WebUiAssets()) {
    EXPECT_FALSE(a.body.empty()) << a.path;
    if (a.path.ends_with(".js")) {
      EXPECT_EQ(a.content_type, "text/javascript; charset=utf-8");
    }
    if (a.path.ends_with(".css")) {
      EXPECT_EQ(a.content_type, "text/css; charset=utf-8");
    }
  }
}

// Every file the page loads is embedded, and none comes from elsewhere: no
// CDN, no absolute URL, nothing fetched at run time but this server's API.
TEST(WebUiAssets, EveryReferenceResolvesAndNothingIsExternal) {
  const std::regex html_ref(R"re((?:src|href)="([^"]*)")re");
  const std::regex js_import(R"re(import\s[^'"]*from\s+'\./([^']+)')re");
  int refs = 0;
  for (const WebAsset& a : WebUiAssets()) {
    // The SVG namespace is a name, not a URL anything fetches.
    const std::string body =
        std::regex_replace(std::string(a.body), std::regex(R"(http://www\.w3\.org/2000/svg)"), "");
    EXPECT_EQ(body.find("http://"), std::string::npos) << a.path;
    EXPECT_EQ(body.find("https://"), std::string::npos) << a.path;
    if (a.path.ends_with(".html")) {
      for (std::sregex_iterator it(body.begin(), body.end(), html_ref), end; it != end; ++it) {
        const std::string ref = (*it)[1];
        if (ref.starts_with("#")) continue;
        EXPECT_NE(FindWebUiAsset(ref), nullptr) << a.path << " loads " << ref;
        ++refs;
      }
      EXPECT_EQ(body.find("<script>"), std::string::npos) << "inline script (the CSP forbids it)";
    }
    if (a.path.ends_with(".js")) {
      for (std::sregex_iterator it(body.begin(), body.end(), js_import), end; it != end; ++it) {
        EXPECT_NE(FindWebUiAsset("/" + std::string((*it)[1])), nullptr)
            << a.path << " imports " << (*it)[1];
        ++refs;
      }
    }
  }
  EXPECT_GE(refs, 3);
}

TEST(CacheTree, MaxNodesParameter) {
  int64_t n = -1;
  EXPECT_FALSE(ParseMaxTreeNodes("", &n));
  EXPECT_EQ(n, kDefaultTreeNodes);
  EXPECT_FALSE(ParseMaxTreeNodes("0", &n));
  EXPECT_EQ(n, 0);
  EXPECT_FALSE(ParseMaxTreeNodes(std::to_string(kMaxTreeNodes), &n));
  EXPECT_EQ(n, kMaxTreeNodes);
  for (const char* bad : {"-1", "abc", "10x", " 5", "16385", "99999999999999999999"}) {
    auto err = ParseMaxTreeNodes(bad, &n);
    ASSERT_TRUE(err) << bad;
    EXPECT_EQ(err->http_status, 400);
    EXPECT_EQ(err->param, "max_nodes");
  }
}

TEST(CacheTree, JsonHasCountsColumnsAndRows) {
  PrefixTreeSnapshot t;
  t.has_tree = true;
  t.block_size = 16;
  t.blocks_total = 100;
  t.blocks_used = 3;
  t.blocks_cached = 7;
  t.blocks_free = 90;
  t.num_registered = 8;
  t.num_nodes = 9;
  t.num_salts = 2;
  t.clock = 77;
  t.truncated = true;
  t.num_hash_only = 3;
  t.nodes = {{4, -1, 16, 1, 70, true, true}, {9, 4, 5, 0, 77, true}, {12, 4, 16, 0, 0, false, true}};
  nlohmann::json j = CacheTreeJson(t, 2);
  EXPECT_EQ(j["object"], "kv_cache.tree");
  EXPECT_EQ(j["has_tree"], true);
  EXPECT_EQ(j["block_size"], 16);
  EXPECT_EQ(j["blocks"],
            (nlohmann::json{{"total", 100}, {"used", 3}, {"cached", 7}, {"free", 90}}));
  EXPECT_EQ(j["clock"], 77);
  EXPECT_EQ(j["tenant_salts"], 2);
  EXPECT_EQ(j["nodes_total"], 9);
  EXPECT_EQ(j["pool_nodes"], 8);
  EXPECT_EQ(j["disk_unplaced"], 3);
  EXPECT_EQ(j["max_nodes"], 2);
  EXPECT_EQ(j["truncated"], true);
  EXPECT_EQ(j["columns"],
            (nlohmann::json{"id", "parent", "tokens", "refcount", "last_use", "location"}));
  EXPECT_EQ(j["nodes"], (nlohmann::json{{4, -1, 16, 1, 70, "both"},
                                        {9, 4, 5, 0, 77, "pool"},
                                        {12, 4, 16, 0, 0, "disk"}}));
}

}  // namespace
}  // namespace kvfork::server
