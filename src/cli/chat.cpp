// cli/chat.cpp — `specula chat`: an interactive chat in the terminal, as `ollama run` and
// `llama-cli -cnv` give. Each line typed is a user turn; the conversation so far is
// rendered with the model's chat template (or --chat-template-file), the answer streams
// as it is made, and the engine's prompt cache starts each turn from the previous turn's
// state (only the new turn is prefilled). The sampling flags are generate's.
//
// Commands: /exit or /bye (or Ctrl-D) ends; /clear forgets the conversation; /help.
// A line ending with a backslash continues on the next line. Ctrl-C while an answer is
// being written stops that answer (what was written stays in the conversation) and
// returns to the prompt; at the prompt it clears the line. When the conversation no
// longer fits the context, its oldest turns are dropped (the system prompt stays).
// Does not: edit lines (no readline; the terminal's own line editing applies), or load
// and save sessions.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat/prompt.h"
#include "cli/common.h"
#include "engine/engine.h"
#include "engine/setup.h"
#include "tokenizer/detokenizer.h"

namespace specula::cli {
namespace {

using json = nlohmann::ordered_json;

struct ChatArgs {
  std::string quantize, model, chat_template_file, system;
  int n_predict = -1, threads = 0;
  int64_t ctx = 4096;
  bool verbose = false, ignore_eos = false;
  SamplingFlags sampling;
  CacheArgs cache;
  LoraArgs lora;
};

// Ctrl-C: before the session starts (loading the model) it ends the program, as usual;
// during the session it only sets the flag, which the prompt and the answer poll (whatever
// thread the signal lands on).
std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_session{false};
void on_sigint(int) {
  if (!g_session.load()) {  // die of the signal, so that a shell sees why
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  g_interrupted.store(true);
}
void install_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
}

enum class Read { kLine, kInterrupted, kEnd };

// One line from stdin (without its newline and a CRLF's carriage return); polls so that a
// Ctrl-C is seen at once.
Read read_line(std::string& line) {
  line.clear();
  for (;;) {
    if (g_interrupted.exchange(false)) return Read::kInterrupted;
    pollfd pfd{STDIN_FILENO, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 100);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return Read::kLine;
      }
      line += c;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return line.empty() ? Read::kEnd : Read::kLine;
  }
}

// Streams one answer to stdout and keeps its text.
class AnswerSink : public RequestSink {
 public:
  explicit AnswerSink(const tokenizer::Tokenizer& tok) : detok_(tok) {}
  bool on_tokens(std::span<const TokenEvent> events) override {
    for (const TokenEvent& e : events) {
      auto piece = detok_.push(e.id);
      if (!piece) return false;
      write(*piece);
    }
    return true;
  }
  void on_finish(const RequestSummary& s) override {
    write(detok_.finish(/*drop_incomplete_tail=*/true));
    std::lock_guard<std::mutex> lock(mu_);
    summary_ = s;
    done_ = true;
    cv_.notify_all();
  }
  // Waits for the end; Ctrl-C cancels the request (then waits for its end too).
  RequestSummary wait(RequestHandle& handle) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return done_; }))
      if (g_interrupted.exchange(false)) handle.cancel();
    return summary_;
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  void write(const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
    std::lock_guard<std::mutex> lock(mu_);
    text_ += s;
  }
  tokenizer::StreamingDetokenizer detok_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string text_;
  RequestSummary summary_;
};

class ChatSession {
 public:
  ChatSession(const ChatArgs& a, Loaded& l, chat::ChatTemplate tpl, std::unique_ptr<Engine> engine, int64_t n_ctx,
              std::shared_ptr<const LoraSet> lora)
      : a_(a), l_(l), tpl_(std::move(tpl)), engine_(std::move(engine)), n_ctx_(n_ctx), lora_(std::move(lora)) {
    clear();
  }
  int run();

 private:
  void clear() {
    messages_ = json::array();
    if (!a_.system.empty()) messages_.push_back({{"role", "system"}, {"content", a_.system}});
  }
  // The prompt ids of `messages`; drops its oldest turns while it does not leave room for
  // an answer (the caller keeps the trimmed list only when this succeeds).
  Result<std::vector<int32_t>> prompt(json& messages) const;
  // Tokens kept free for the answer when trimming.
  int64_t answer_room() const {
    return std::min<int64_t>(a_.n_predict > 0 ? a_.n_predict : 64, n_ctx_ / 2);
  }
  void answer(const std::string& user_text);

  const ChatArgs& a_;
  Loaded& l_;
  chat::ChatTemplate tpl_;
  std::unique_ptr<Engine> engine_;
  int64_t n_ctx_;
  std::shared_ptr<const LoraSet> lora_;  // every answer's adapters (null: none)
  json messages_;
};

Result<std::vector<int32_t>> ChatSession::prompt(json& messages) const {
  const tokenizer::Vocab& vocab = l_.tok->vocab();
  for (;;) {
    json ctx = {{"messages", messages},
                {"add_generation_prompt", true},
                {"bos_token", vocab.valid_id(vocab.bos_id()) ? vocab.text(vocab.bos_id()) : ""},
                {"eos_token", vocab.valid_id(vocab.eos_id()) ? vocab.text(vocab.eos_id()) : ""}};
    auto rendered = tpl_.render_marked(ctx);
    if (!rendered) return rendered.status();
    std::vector<int32_t> ids = chat::prompt_ids(*l_.tok, *rendered);
    if (static_cast<int64_t>(ids.size()) + answer_room() <= n_ctx_) return ids;
    // Too long: drop the oldest turn after the system prompt (a user turn and its answer).
    const size_t first = !messages.empty() && messages[0]["role"] == "system" ? 1 : 0;
    if (messages.size() <= first + 1)
      return Status::error(StatusCode::kContextOverflow, "[chat] this message does not fit the context of " +
                                                             std::to_string(n_ctx_) + " tokens with room for an answer "
                                                             "(raise --ctx); the conversation is kept");
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
    if (messages.size() > first && messages[first]["role"] == "assistant")
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
  }
}

void ChatSession::answer(const std::string& user_text) {
  json messages = messages_;
  messages.push_back({{"role", "user"}, {"content", user_text}});
  auto ids = prompt(messages);
  if (!ids) {
    std::fprintf(stderr, "specula: %s\n", ids.message().c_str());
    return;
  }
  if (messages.size() < messages_.size() + 1)
    std::fprintf(stderr, "[the oldest turns were dropped to fit the context]\n");
  auto sampling = a_.sampling.resolve(model_sampling_defaults(l_.model->file()), l_.tok.get());
  if (!sampling) {
    std::fprintf(stderr, "specula: %s\n", sampling.message().c_str());
    return;
  }
  EngineRequest req;
  req.prompt = std::move(ids).value();
  const int64_t room = n_ctx_ - static_cast<int64_t>(req.prompt.size());
  req.max_tokens = static_cast<int32_t>(a_.n_predict > 0 ? std::min<int64_t>(a_.n_predict, room) : room);
  req.sampling = std::move(sampling).value();
  req.ignore_eos = a_.ignore_eos;
  req.lora = lora_;
  auto sink = std::make_shared<AnswerSink>(*l_.tok);
  g_interrupted.store(false);
  Submission sub = engine_->submit(std::move(req), sink);
  if (!sub.ok()) {
    std::fprintf(stderr, "specula: %s\n", sub.status.message().c_str());
    return;
  }
  messages_ = std::move(messages);
  const RequestSummary s = sink->wait(*sub.handle);
  std::fputs("\n", stdout);
  if (s.outcome == Outcome::kCancelled) std::fputs("[stopped]\n", stdout);
  if (s.outcome == Outcome::kFailed) std::fprintf(stderr, "specula: %s\n", s.error.c_str());
  std::fflush(stdout);
  messages_.push_back({{"role", "assistant"}, {"content", sink->text()}});
  if (a_.verbose)
    std::fprintf(stderr, "[%lld prompt tokens (%lld cached), %.2f tokens/s prefill; %lld generated, %.2f tokens/s]\n",
                 static_cast<long long>(s.n_prompt), static_cast<long long>(s.cached_tokens),
                 (s.n_prompt - s.cached_tokens) / std::max(1e-9, s.prefill_seconds), static_cast<long long>(s.n_generated),
                 std::max<int64_t>(0, s.n_generated - 1) / std::max(1e-9, s.decode_seconds));
}

int ChatSession::run() {
  g_interrupted.store(false);
  g_session.store(true);
  std::fprintf(stderr, "specula chat with %s. /exit or Ctrl-D ends, /clear forgets, /help lists the commands.\n",
               l_.model->info().name.c_str());
  std::string line, text;
  for (;;) {
    std::fputs(text.empty() ? ">>> " : "... ", stdout);
    std::fflush(stdout);
    const Read r = read_line(line);
    if (r == Read::kEnd) {
      if (!text.empty()) answer(text);  // a continued line ended by Ctrl-D
      break;
    }
    if (r == Read::kInterrupted) {
      std::fputs("\n(Ctrl-C cleared the line; /exit or Ctrl-D ends)\n", stdout);
      text.clear();
      continue;
    }
    if (!line.empty() && line.back() == '\\') {  // continues on the next line
      text += line.substr(0, line.size() - 1) + "\n";
      continue;
    }
    text += line;
    if (text == "/exit" || text == "/bye") break;
    if (text == "/clear") {
      clear();
      std::fputs("(the conversation was cleared)\n", stdout);
    } else if (text == "/help" || text == "/?") {
      std::fputs("/exit, /bye  end the chat (so does Ctrl-D)\n/clear       forget the conversation\n"
                 "a line ending with \\ continues on the next one; Ctrl-C stops an answer\n",
                 stdout);
    } else if (!text.empty()) {
      answer(text);
    }
    text.clear();
  }
  std::fputs("\n", stdout);
  return 0;
}

Result<chat::ChatTemplate> chat_template(const ChatArgs& a, const Model& model) {
  std::string source;
  if (!a.chat_template_file.empty()) {
    std::ifstream in(a.chat_template_file, std::ios::binary);
    if (!in) return Status::not_found("[cli] cannot read --chat-template-file " + a.chat_template_file);
    std::ostringstream ss;
    ss << in.rdbuf();
    source = ss.str();
  } else if (auto src = chat::chat_template_from_gguf(model.file())) {
    source = *src;
  } else {
    return Status::invalid_argument("[cli] this model has no chat template; give one with --chat-template-file FILE");
  }
  return chat::ChatTemplate::parse(source);
}

int run_chat(const RuntimeConfig& config, const ChatArgs& a) {
  install_sigint();
  if (auto check = a.sampling.resolve({}, nullptr); !check) return fail(check.message());  // before loading
  auto l = load(config, a.model, a.threads, a.quantize);
  if (!l) return fail(l.message());
  Model& model = *l->model;
  auto tpl = chat_template(a, model);
  if (!tpl) return fail(tpl.message());
  const int64_t n_ctx = std::min<int64_t>(a.ctx, model.info().n_ctx_train > 0 ? model.info().n_ctx_train : a.ctx);
  EngineOptions eo;
  eo.n_rows = 1;
  eo.n_ctx = n_ctx;
  eo.eog_ids = chat::end_of_generation_ids(l->tok->vocab(), model.file());
  eo.cache = a.cache.options();
  PromptCacheOptions po;  // each turn starts from the previous turn's state
  po.ram_bytes = int64_t{1} << 30;
  po.fingerprint = prompt_cache_fingerprint(l->path, model, eo.cache);
  auto pc = PromptCache::create(po);
  if (!pc) return fail(pc.message());
  eo.prompt_cache = std::shared_ptr<PromptCache>(std::move(pc).value());
  auto engine = Engine::create(model, eo);
  if (!engine) return fail(engine.message());
  auto lora = a.lora.load(model);
  if (!lora) return fail(lora.message());
  ChatSession session(a, *l, std::move(tpl).value(), std::move(engine).value(), n_ctx, std::move(lora).value());
  return session.run();
}

}  // namespace

Verb add_chat(CLI::App& app, const RuntimeConfig& config) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (its chat template, streaming)");
  cmd->add_option("-m,--model", a->model, kModelHelp);
  cmd->add_option("--chat-template-file", a->chat_template_file, "Jinja chat template to use instead of the model's");
  cmd->add_option("--system", a->system, "System prompt");
  cmd->add_option("-n,--n-predict", a->n_predict, "Most tokens per answer (default: until the context is full)")
      ->check(CLI::Range(-1, 1 << 24));
  a->sampling.add(cmd);
  add_quantize_option(cmd, a->quantize);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("-c,--ctx", a->ctx, "Context size in tokens (default 4096, at most the model's)")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 24));
  cmd->add_flag("--verbose", a->verbose, "Print each answer's token counts and speeds");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep answering past end-of-generation tokens (until -n or Ctrl-C)");
  a->lora.add_options(cmd);
  add_cache_options(cmd, a->cache, false);
  return Verb{cmd, [a, &config] { return run_chat(config, *a); }};
}

}  // namespace specula::cli
