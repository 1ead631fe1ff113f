#!/usr/bin/env python3
"""tests/integration/test_chat_tmux.py — `specula chat` used as a person uses it: in a real
terminal (tmux), typing with send-keys and reading the screen with capture-pane.

Checks, on Gemma 3 270M with the committed Gemma chat template:
  - the prompt appears; a typed line gets a streamed answer and a new prompt;
  - the second turn starts from the first turn's state (--verbose: its prompt tokens are
    mostly cached) and carries the history (more prompt tokens than the first);
  - /clear forgets it (the next turn's prompt is short again);
  - Ctrl-C during a long answer (--ignore-eos) stops the answer, prints [stopped] and
    returns to the prompt; the program goes on and answers the next line;
  - Ctrl-C at the prompt clears the line and does not end the program;
  - /exit ends it with status 0; Ctrl-D (end of input) too.
Skips (exit 77) without the model or tmux.
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import specula_server as S


# A tmux server of the test's own (its own socket), kept alive by a session that only
# sleeps: killing a pane's session must not end the server, or the next new-session can
# race the server's exit ("server exited unexpectedly").
SOCKET = f"specula_test_{os.getpid()}"


def tmux(*args, check=True):
    r = subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise S.TestFailure(f"tmux {' '.join(args[:2])} exited {r.returncode}: {r.stderr.strip()}")
    return r


class Pane:
    def __init__(self, name, command):
        self.name = name
        # The shell ignores Ctrl-C (the chat sets its own handler), so that it stays to
        # print the exit status.
        tmux("new-session", "-d", "-s", name, "-x", "220", "-y", "200",
             f"trap '' INT; {command}; echo EXITED=$?; sleep 60")

    def screen(self):
        return tmux("capture-pane", "-p", "-J", "-S", "-2000", "-t", self.name).stdout

    def send(self, *keys):
        tmux("send-keys", "-t", self.name, *keys)

    def type_line(self, text):
        self.send("-l", text)
        self.send("Enter")

    def wait(self, pred, what, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.2)
        raise S.TestFailure(f"timed out waiting for {what}; screen:\n{self.screen()[-3000:]}")

    def prompts(self, s=None):
        return (s if s is not None else self.screen()).count(">>> ")

    def close(self):
        tmux("kill-session", "-t", self.name, check=False)


def stats(screen):
    """(prompt tokens, cached) of every answer, from --verbose lines."""
    return [(int(a), int(b)) for a, b in re.findall(r"\[(\d+) prompt tokens \((\d+) cached\)", screen)]


def main():
    model = S.require_model()
    if shutil.which("tmux") is None:
        S.skip("tmux not installed (scripts/install_deps.sh installs it)")
    cli = S.cli_path()
    base = [cli, "chat", "-m", model, "--chat-template-file", S.gemma_template(), "-t", "1", "-c", "2048"]
    tmux("new-session", "-d", "-s", "keeper", "sleep 3600")
    try:
        return conversation(base)
    finally:
        tmux("kill-server", check=False)


def conversation(base):
    # A conversation: answers, history through the prompt cache, /clear, /exit.
    pane = Pane("talk", " ".join(shlex.quote(a) for a in base + ["--greedy", "-n", "24", "--verbose"]))
    try:
        pane.wait(lambda s: pane.prompts(s) >= 1, "the first prompt")
        pane.type_line("Say hello in French.")
        s = pane.wait(lambda s: pane.prompts(s) >= 2 and len(stats(s)) >= 1, "the first answer")
        answer = s.split("Say hello in French.", 1)[1].split(">>> ", 1)[0]
        S.check(answer.strip(), f"no answer text on screen:\n{s}")
        pane.type_line("And in German?")
        s = pane.wait(lambda s: pane.prompts(s) >= 3 and len(stats(s)) >= 2, "the second answer")
        (n1, c1), (n2, c2) = stats(s)[:2]
        S.check(n2 > n1, f"the second turn's prompt ({n2} tokens) does not hold the first ({n1})")
        S.check(c2 >= n1, f"the second turn reused {c2} cached tokens, want at least the first prompt's {n1}")
        pane.type_line("/clear")
        pane.wait(lambda s: "conversation was cleared" in s and pane.prompts(s) >= 4, "/clear")
        pane.type_line("And in German?")
        s = pane.wait(lambda s: len(stats(s)) >= 3, "the answer after /clear")
        n3, _ = stats(s)[2]
        S.check(n3 < n2, f"after /clear the prompt has {n3} tokens, not fewer than {n2}")
        pane.wait(lambda s: pane.prompts(s) >= 5, "the prompt after /clear's answer")
        pane.type_line("/exit")
        pane.wait(lambda s: "EXITED=0" in s, "exit status 0 after /exit", timeout=30)
    finally:
        pane.close()

    # Ctrl-C: during an answer it stops the answer only; at the prompt it clears the line.
    pane = Pane("ctrl_c", " ".join(shlex.quote(a) for a in base + ["--ignore-eos", "-n", "1500", "--temp", "0.7",
                                                                   "--seed", "1"]))
    try:
        pane.wait(lambda s: pane.prompts(s) >= 1, "the first prompt")
        pane.type_line("Tell me a long story.")
        pane.wait(lambda s: len(s.split("Tell me a long story.", 1)[-1].strip()) > 40, "the answer to start")
        pane.send("C-c")
        s = pane.wait(lambda s: "[stopped]" in s and pane.prompts(s) >= 2, "[stopped] and a new prompt", timeout=30)
        S.check("EXITED" not in s, f"Ctrl-C ended the program:\n{s[-2000:]}")
        pane.send("-l", "half a line")
        pane.send("C-c")
        s = pane.wait(lambda s: "cleared the line" in s and pane.prompts(s) >= 3, "Ctrl-C at the prompt", timeout=30)
        S.check("EXITED" not in s, f"Ctrl-C at the prompt ended the program:\n{s[-2000:]}")
        pane.type_line("Hi")
        s = pane.wait(lambda s: s.count("[stopped]") >= 1 and pane.prompts(s) >= 3 and "Hi" in s.split("cleared the line")[-1],
                      "the next line typed")
        time.sleep(2)  # a few tokens of the (long) answer
        pane.send("C-c")
        pane.wait(lambda s: s.count("[stopped]") >= 2 and pane.prompts(s) >= 4, "the second answer stopped", timeout=30)
        pane.send("C-d")
        pane.wait(lambda s: "EXITED=0" in s, "exit status 0 after Ctrl-D", timeout=30)
    finally:
        pane.close()
    # Ctrl-C while the model loads ends the program (killed by SIGINT), as usual. (When the
    # load is over before the signal lands, the session took it: nothing to judge then.)
    p = subprocess.Popen(base, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.15)
    p.send_signal(signal.SIGINT)
    try:
        code = p.wait(20)
        S.check(code == -signal.SIGINT, f"Ctrl-C during the load: exit {code}")
        load_judged = True
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        err = p.stderr.read().decode("utf-8", "replace")
        S.check("specula chat with" in err, f"Ctrl-C during the load neither ended the program nor the load: {err}")
        load_judged = False

    # A message too long for the context is refused, and the conversation is kept (stdin
    # from a pipe: a script can drive the chat too).
    long_line = "word " * 300
    r = subprocess.run(base[:-1] + ["200", "--greedy", "-n", "8", "--verbose"], capture_output=True, timeout=300,
                       input=("My name is Bob\n" + long_line + "\nWhat is my name?\n").encode())
    err = r.stderr.decode("utf-8", "replace")
    S.check(r.returncode == 0, f"chat over a pipe exited {r.returncode}: {err[-2000:]}")
    S.check("does not fit the context" in err and "the conversation is kept" in err, f"no refusal: {err[-2000:]}")
    counts = stats(err)
    S.check(len(counts) == 2 and counts[1][0] > counts[0][0] and counts[1][1] >= counts[0][0],
            f"the turn after the refused message lost the conversation: {counts}")
    return ("conversation, history via the prompt cache, /clear, Ctrl-C during an answer, at the prompt and "
            f"during the load ({'judged' if load_judged else 'the load was over first'}), /exit, Ctrl-D, a message too "
            "long for the context")


if __name__ == "__main__":
    S.run_main("chat_tmux", main)
