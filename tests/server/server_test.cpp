// tests/server/server_test.cpp — an in-process server::Server (port 0) driven by
// cpp-httplib's client: health/models/metrics, a greedy completion whose streamed text
// equals the whole one, SSE framing, API-key refusals on a reused keep-alive connection
// (the next request must not see a bogus 400), 413, 404, and stop() — including a stop()
// that comes before serve(), and speculation (usage.speculative, /metrics counters,
// "speculative": false, two speculating rows). Real model (skipped when absent), one
// thread, tiny context.
// Does not: cover the OpenAI Python client or load (tests/integration/*.py do).
#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "decoding/draft.h"
#include "../test_util.h"

namespace specula::server {
namespace {

using nlohmann::json;

struct Running {
  std::unique_ptr<Server> server;
  std::thread thread;
  int port = 0;
  ~Running() { stop(); }
  void stop() {
    if (server) server->stop();
    if (thread.joinable()) thread.join();
  }
};

std::unique_ptr<Running> start(ServerOptions so) {
  ModelOptions mo;
  mo.n_threads = 1;
  auto m = load_model(testing::default_model_path(), mo);
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m.is_ok()) return nullptr;
  so.host = "127.0.0.1";
  so.port = 0;
  so.engine.n_rows = 2;
  so.engine.n_ctx = 256;
  so.engine.step_tokens = 256;
  auto s = Server::create(std::move(m).value(), so);
  EXPECT_TRUE(s.is_ok()) << s.message();
  if (!s.is_ok()) return nullptr;
  auto r = std::make_unique<Running>();
  r->server = std::move(s).value();
  Status st = r->server->bind();
  EXPECT_TRUE(st.is_ok()) << st.message();
  r->port = r->server->port();
  EXPECT_GT(r->port, 0);
  r->thread = std::thread([srv = r->server.get()] { srv->serve(); });
  return r;
}

void expect_error_body(const httplib::Result& res, int status, const std::string& what) {
  ASSERT_TRUE(res) << what << ": no response (" << httplib::to_string(res.error()) << ")";
  EXPECT_EQ(res->status, status) << what << ": " << res->body;
  json j = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << res->body;
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << what << ": " << k;
  EXPECT_TRUE(j["error"]["message"].is_string());
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::default_model_present()) GTEST_SKIP() << "model not found: " << testing::default_model_path();
  }
};

TEST_F(ServerTest, RoutesCompletionAndStream) {
  ServerOptions so;
  so.model_id = "tiny";
  so.max_body_bytes = 2048;
  auto r = start(so);
  ASSERT_NE(r, nullptr);
  httplib::Client cli("127.0.0.1", r->port);
  cli.set_read_timeout(120, 0);

  auto h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = cli.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "tiny");

  const json body = {{"prompt", "The capital of France is"}, {"max_tokens", 6}, {"temperature", 0}};
  auto c = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(c);
  ASSERT_EQ(c->status, 200) << c->body;
  json whole = json::parse(c->body);
  EXPECT_EQ(whole["object"], "text_completion");
  const std::string text = whole["choices"][0]["text"];
  EXPECT_FALSE(text.empty());

  json sbody = body;
  sbody["stream"] = true;
  auto s = cli.Post("/v1/completions", sbody.dump(), "application/json");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200);
  EXPECT_EQ(s->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  // Every event is "data: <payload>\n\n"; the last is [DONE].
  std::string streamed, rest = s->body;
  std::vector<std::string> events;
  while (!rest.empty()) {
    ASSERT_EQ(rest.rfind("data: ", 0), 0u) << rest.substr(0, 80);
    const size_t end = rest.find("\n\n");
    ASSERT_NE(end, std::string::npos);
    events.push_back(rest.substr(6, end - 6));
    rest.erase(0, end + 2);
  }
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    streamed += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);

  expect_error_body(cli.Post("/v1/completions", std::string(4096, ' '), "application/json"), 413, "body over limit");
  expect_error_body(cli.Get("/nope"), 404, "unknown route");
  expect_error_body(cli.Post("/v1/completions", "{", "application/json"), 400, "invalid JSON");
  expect_error_body(cli.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})",
                             "application/json"),
                    400, "chat without a template");
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("specula_running_rows 0"), std::string::npos) << metrics->body.substr(0, 400);
  // KV memory: nothing held or reserved once the requests are over; the budget is reported.
  EXPECT_NE(metrics->body.find("\nspecula_kv_bytes 0\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("\nspecula_kv_reserved_bytes 0\n"), std::string::npos);
  const size_t at = metrics->body.find("\nspecula_kv_budget_bytes ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(metrics->body.substr(at + 25)), 1e6);
}

TEST_F(ServerTest, ApiKeyRefusalsKeepTheConnectionUsable) {
  ServerOptions so;
  so.api_key = "secret";
  auto r = start(so);
  ASSERT_NE(r, nullptr);
  httplib::Client cli("127.0.0.1", r->port);
  cli.set_keep_alive(true);
  cli.set_read_timeout(120, 0);
  const std::string body = R"({"prompt": "hi", "max_tokens": 1})";
  // Several refused POSTs with bodies on one keep-alive connection: each must be a 401 (a
  // body left unread would be parsed as the next request: 400).
  for (int i = 0; i < 3; ++i) expect_error_body(cli.Post("/v1/completions", body, "application/json"), 401, "no key");
  expect_error_body(cli.Get("/v1/models"), 401, "models without a key");
  auto h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  httplib::Headers bad = {{"Authorization", "Bearer secret2"}};
  expect_error_body(cli.Post("/v1/completions", bad, body, "application/json"), 401, "wrong key");
  httplib::Headers good = {{"Authorization", "Bearer secret"}};
  auto ok = cli.Post("/v1/completions", good, body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(ServerTest, StopBeforeServeReturnsAtOnce) {
  ModelOptions mo;
  mo.n_threads = 1;
  auto m = load_model(testing::default_model_path(), mo);
  ASSERT_TRUE(m.is_ok());
  ServerOptions so;
  so.port = 0;
  so.engine.n_rows = 1;
  so.engine.n_ctx = 64;
  auto s = Server::create(std::move(m).value(), so);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_TRUE((*s)->bind().is_ok());
  (*s)->stop();  // e.g. a SIGTERM right after start
  auto done = std::async(std::launch::async, [&] { (*s)->serve(); });
  EXPECT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "serve() ignored an earlier stop()";
  if (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    (*s)->stop();
    done.wait();
  }
}

TEST_F(ServerTest, StopEndsARunningStreamPromptly) {
  auto r = start(ServerOptions{});
  ASSERT_NE(r, nullptr);
  auto fut = std::async(std::launch::async, [port = r->port] {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(120, 0);
    return cli.Post("/v1/completions", R"({"prompt": "Story:", "max_tokens": 200, "ignore_eos": true, "stream": true})",
                    "application/json");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = std::chrono::steady_clock::now();
  r->stop();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 10.0) << "stop() waited for a 200-token stream";
  fut.wait();
}


// Speculation through the server (n-gram drafts): a repetitive prompt drafts and accepts,
// usage.speculative reports it, /metrics counts it, the text equals the same request with
// "speculative": false (which reports no speculation), and two concurrent requests
// both speculate (spec_max_batch allows 2). Greedy.
TEST_F(ServerTest, SpeculativeUsageMetricsAndOptOut) {
  ServerOptions so;
  so.engine.draft = std::shared_ptr<DraftSource>(make_ngram_draft());
  so.engine.spec_depth = 4;
  so.engine.spec_max_batch = 2;
  auto r = start(so);
  ASSERT_NE(r, nullptr);
  httplib::Client cli("127.0.0.1", r->port);
  cli.set_read_timeout(300, 0);
  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += "def add(a, b):\n    return a + b\n\n";
  json body = {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}};
  auto spec = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->status, 200) << spec->body;
  const json js = json::parse(spec->body);
  ASSERT_TRUE(js["usage"].contains("speculative")) << js["usage"].dump();
  const json& u = js["usage"]["speculative"];
  EXPECT_GT(u["rounds"].get<int>(), 0);
  EXPECT_GT(u["draft_tokens"].get<int>(), 0);
  EXPECT_GT(u["accepted_tokens"].get<int>(), 0);
  EXPECT_LE(u["accepted_tokens"].get<int>(), u["draft_tokens"].get<int>());
  EXPECT_GT(u["acceptance_rate"].get<double>(), 0.0);
  EXPECT_LE(u["acceptance_rate"].get<double>(), 1.0);

  json off = body;
  off["speculative"] = false;
  auto plain = cli.Post("/v1/completions", off.dump(), "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const json jp = json::parse(plain->body);
  EXPECT_FALSE(jp["usage"].contains("speculative")) << jp["usage"].dump();
  EXPECT_EQ(jp["choices"][0]["text"], js["choices"][0]["text"]);
  EXPECT_EQ(jp["usage"]["completion_tokens"], js["usage"]["completion_tokens"]);

  // Two at once: both rows speculate, and both texts equal the lone run.
  std::vector<std::future<httplib::Result>> two;
  for (int i = 0; i < 2; ++i)
    two.push_back(std::async(std::launch::async, [port = r->port, b = body.dump()] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(300, 0);
      return c.Post("/v1/completions", b, "application/json");
    }));
  for (auto& f : two) {
    auto res = f.get();
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    EXPECT_EQ(j["choices"][0]["text"], js["choices"][0]["text"]);
    ASSERT_TRUE(j["usage"].contains("speculative"));
    // Each row drafted in every step, as when alone (two rows <= spec_max_batch).
    EXPECT_EQ(j["usage"]["speculative"]["rounds"], u["rounds"]);
  }

  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  auto value = [&](const std::string& name) {
    const size_t at = metrics->body.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name;
    return at == std::string::npos ? -1.0 : std::stod(metrics->body.substr(at + name.size() + 2));
  };
  EXPECT_GE(value("specula_spec_draft_tokens_total"), 3 * u["draft_tokens"].get<double>());
  EXPECT_GE(value("specula_spec_accepted_tokens_total"), 3 * u["accepted_tokens"].get<double>());
  EXPECT_GT(value("specula_spec_rounds_total"), 0.0);
  EXPECT_GT(value("specula_spec_acceptance_rate"), 0.0);
  EXPECT_EQ(value("specula_spec_source_draft_tokens_total{source=\"ngram\"}"), value("specula_spec_draft_tokens_total"));
  EXPECT_EQ(value("specula_spec_source_accepted_tokens_total{source=\"ngram\"}"),
            value("specula_spec_accepted_tokens_total"));
}

}  // namespace
}  // namespace specula::server
