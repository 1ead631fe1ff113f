#!/usr/bin/env python3
"""The chat page at / (server/webui.h, webui/index.html) in headless Chromium (Debian's):
a message typed and sent, the answer streamed into the page, the Stop button aborting the
request — and the server freeing its row — a complete answer with the page's settings, the
markdown renderer escaping what it renders, and the conversation kept across a reload.

Chromium is driven over the DevTools protocol on --remote-debugging-pipe (JSON messages
ending in NUL on file descriptors 3 and 4), so no WebDriver or npm package is needed.
Exits 77 (skipped) when no chromium is installed."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402

check = ss.check


class Chromium:
    """Headless Chromium with the DevTools protocol on a pipe; one page."""

    def __init__(self, binary):
        self.profile = tempfile.mkdtemp(prefix="specula-webui-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds():  # the protocol's descriptors: 3 reads commands, 4 writes answers
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)  # (either may be 3 or 4 already)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-pipe",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=fds, close_fds=False)  # 3 and 4 (dup2-ed: inheritable) stay open
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next = 0
        self.session = None

    def send(self, method, params=None, session=True, timeout=60):
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" not in self._buf:
                chunk = os.read(self._from_chrome, 1 << 16)
                if not chunk:
                    raise ss.TestFailure("chromium closed its DevTools pipe: " + self.proc.stderr.read().decode()[-2000:])
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise ss.TestFailure(f"DevTools {method}: {reply['error']}")
                return reply.get("result", {})
        raise ss.TestFailure(f"DevTools {method}: no answer in {timeout}s")

    def open(self, url):
        target = self.send("Target.createTarget", {"url": url}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]

    def js(self, expression):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise ss.TestFailure(f"page script failed: {expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                v = self.js(expression)
            except ss.TestFailure as e:
                # A page that is navigating (a reload under way) answers no evaluation: ask again.
                if "navigated or closed" not in str(e):
                    raise
                v = None
            if v:
                return v
            time.sleep(0.1)
        raise ss.TestFailure(f"page: {what} not seen within {timeout}s")

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


LAST = "(() => { const m = document.querySelectorAll('.message.assistant'); return m.length ? m[m.length - 1] : null; })()"


def main():
    ss.require_model()
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        ss.skip("no chromium (scripts/install_deps.sh installs Debian's)")
    with ss.Server("--parallel", "1", "--ctx", "4096", "--chat-template-file", ss.gemma_template()) as srv:
        browser = Chromium(binary)
        try:
            browser.open(srv.url + "/")
            browser.wait_for("document.readyState === 'complete' && !!document.getElementById('send')", 60, "the page")
            # The markdown renderer: markup for code and emphasis, the text itself escaped.
            html = browser.js("renderMarkdown('**bold** and `x<y`\\n\\n```py\\nif a < b:\\n    pass\\n```\\n- one\\n- two')")
            check("<strong>bold</strong>" in html and "<code>x&lt;y</code>" in html and "<pre><code" in html
                  and "if a &lt; b:" in html and "<ul><li>one</li><li>two</li></ul>" in html, f"markdown: {html}")
            check("<script>" not in browser.js("renderMarkdown('<script>alert(1)</script>')"), "markdown escapes HTML")
            # A long answer: it streams into the page; Stop aborts it and the server frees the row.
            browser.js("document.getElementById('input').value = 'Tell me a very long story about a cat.';"
                       "document.getElementById('send').click(); true")
            first = browser.wait_for(f"(() => {{ const m = {LAST}; return m && m.textContent.length > 20 ? "
                                     "m.textContent.length : 0; })()", 120, "streamed text")
            time.sleep(1.0)
            later = browser.js(f"{LAST}.textContent.length")
            check(later > first, f"the answer did not grow while streaming ({first} -> {later} characters)")
            m = srv.metrics()
            check(m.get("specula_running_rows") == 1, f"no row running while the page streams: {m.get('specula_running_rows')}")
            check(browser.js("!document.getElementById('stop').disabled"), "Stop is not enabled while streaming")
            browser.js("document.getElementById('stop').click(); true")
            browser.wait_for("!document.getElementById('send').disabled", 30, "the page after Stop")
            srv.wait_idle(timeout=10)  # the request was cancelled and its row freed
            stopped = browser.js(f"{LAST}.textContent")
            check("stopped" in stopped, f"the stopped answer is not marked: {stopped[-200:]!r}")
            # A complete answer with the page's settings (max tokens 8), with its statistics.
            browser.js("localStorage.setItem('specula.settings', JSON.stringify({max_tokens: '8', temperature: '0'}));"
                       "window.__old_page = true; location.reload(); true")
            # Until the reload replaces it, the old page still answers 'complete': wait for the new one.
            browser.wait_for("!window.__old_page && document.readyState === 'complete' && "
                             "!!document.getElementById('send')", 60, "reload")
            n_before = browser.js("document.querySelectorAll('.message').length")
            check(n_before >= 2, f"the conversation was not kept across the reload ({n_before} messages)")
            browser.js("document.getElementById('input').value = 'Say hello.';"
                       "document.getElementById('send').click(); true")
            browser.wait_for(f"(() => {{ const m = {LAST}; return document.getElementById('send').disabled === false && "
                             "m && m.querySelector('.stats') !== null; })()", 120, "a finished answer")
            stats_text = browser.js(f"{LAST}.querySelector('.stats').textContent")
            check(stats_text.startswith("8 tokens"), f"the answer's statistics: {stats_text!r}")
        finally:
            browser.close()
        check(srv.alive(), "server died")
    return "page loaded, answer streamed, Stop freed the row, settings applied, conversation kept"


if __name__ == "__main__":
    ss.run_main("test_webui", main)
