#!/usr/bin/env python3
"""A nestbox hook: logs every tool call, refuses `git push` to main or master, and sends
a bare `git push` (which pushes wherever the current branch tracks) to approval.

    nestbox mcp --backend local --hook examples/hooks/guard-push.py
    nestbox exec --backend local --hook examples/hooks/guard-push.py -- git push origin main

nestbox writes one JSON object (the call) to standard input and reads one JSON object from
standard output: {"decision": "allow"}, {"decision": "deny", "reason": "..."} or
{"decision": "ask", "reason": "..."}. Anything else, a non-zero exit, or no answer within
the hook timeout counts as a deny. See the protocol in crates/exec/src/hook.rs or README.md.

The log goes to $NESTBOX_HOOK_LOG (default: ./nestbox-hook.log), one JSON line per call.
"""

import json
import os
import shlex
import sys
import time

PROTECTED = {"main", "master"}


def answer(decision, reason=None):
    out = {"decision": decision}
    if reason:
        out["reason"] = reason
    print(json.dumps(out))
    sys.exit(0)


def pushes(words):
    """The argument lists of every `git ... push ...` in the command's words."""
    found = []
    for i, w in enumerate(words):
        if os.path.basename(w) != "git":
            continue
        rest = words[i + 1:]
        # Skip git's own options (`git -C dir push`), stop at the end of this command.
        j = 0
        while j < len(rest) and rest[j].startswith("-"):
            j += 2 if rest[j] in ("-C", "-c") else 1
        if j < len(rest) and rest[j] == "push":
            args = []
            for a in rest[j + 1:]:
                if a in (";", "&&", "||", "|", "&"):
                    break
                args.append(a)
            found.append(args)
    return found


def main():
    call = json.load(sys.stdin)
    with open(os.environ.get("NESTBOX_HOOK_LOG", "nestbox-hook.log"), "a") as log:
        log.write(json.dumps({
            "time": time.time(),
            "step_id": call["step_id"],
            "tool": call["tool"],
            "command": call.get("command"),
            "action": call.get("action"),
            "verdict": call["guard"]["verdict"],
            "findings": [f["id"] for f in call["guard"]["findings"]],
        }) + "\n")

    command = call.get("command")
    if not command:
        answer("allow")  # job operations: logged, allowed
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        answer("ask", "the hook could not split this command into words")
    for args in pushes(words):
        refs = [a for a in args if not a.startswith("-")]
        targets = {r.split(":")[-1].removeprefix("refs/heads/").lstrip("+") for r in refs[1:]}
        if targets & PROTECTED or "--all" in args or "--mirror" in args:
            answer("deny", "agents do not push to main or master: push a branch and open a pull request")
        if len(refs) < 2:
            answer("ask", "`git push` without a branch pushes wherever the current branch tracks")
    answer("allow")


if __name__ == "__main__":
    main()
