# Issue 29: the web page. Unit: its embedded files and the cache tree route's
# JSON. e2e: the routes on the real server (node), and the page in a real
# browser (Debian's chromium through puppeteer-core; skips, saying so, only
# when chromium is not installed).
kvfork_test(webui_unit_test
  SOURCES webui_test.cc
  LABELS unit LIBS kvfork_server)

find_program(KVFORK_NODE node)
if(KVFORK_NODE)
  kvfork_script_test(webui_routes_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/webui_routes.test.mjs
    LABELS e2e TIMEOUT 300)
  kvfork_script_test(webui_browser_e2e_test
    COMMAND ${KVFORK_NODE} --test --test-concurrency=1
            ${PROJECT_SOURCE_DIR}/tools/node/tests/webui_browser.test.mjs
    LABELS e2e TIMEOUT 600)
endif()
