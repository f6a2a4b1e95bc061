"""Does a message carry code, shell, logs or configuration?

The classifier learned cyber-attacks and injections from requests, so the material a developer pastes
(a `curl | jq` line, an nginx log, a Deployment manifest) reads to it like an attack: on work traffic it
blocked 13.6 % of a development set. Such material is data the user works with. A message that carries
it is judged with that in mind (`InputGuard.for_technical`): the classifier's verdicts in the policy's
`technical_flag_only` categories flag it, never block it; rules, and every other category, stand.
"""

from __future__ import annotations

import re

# Traces that ordinary prose rarely leaves: one strong trace, or two different weak ones, make a
# message technical.
_STRONG: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.MULTILINE)
    for p in (
        r"```",  # a fenced block
        r"`[^`\n]+`",  # inline code
        r"\b[A-Za-z_][\w.]*\([^()\n]*\)",  # a call: print(x), os.kill(pid, sig)
        r"(?:^|\s)--[A-Za-z][\w-]*",  # a long command-line flag
        r"\$\{?[A-Za-z_]\w*|\$\(",  # a shell variable or substitution
        r"\|\s*[a-z]+\b",  # a pipe into a command
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\b\d{2}/[A-Z][a-z]{2}/\d{4}:",  # a log timestamp
        r"(?:^|\n)\s*(?:GET|POST|PUT|DELETE|HEAD) /\S*",  # an HTTP request line
    )
)
_TRACES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.MULTILINE)
    for p in (
        r"(?:^|\s)-[A-Za-z][\w-]*",  # a command-line flag
        r"(?:^|\s)(?:~|\.{1,2})?/[\w.-]+/[\w./-]*",  # a path
        r"^\s*(?:[\w.-]+|\"[^\"]+\")\s*[:=]\s*\S.*$",  # key: value / key = value
        r"^(?: {2,}|\t)\S",  # an indented line
        r"[{}\[\];]",  # braces, brackets, semicolons
        r"\b\d{1,3}(?:\.\d{1,3}){3}\b",  # an IPv4 address
        r"\b(?:ERROR|WARN(?:ING)?|INFO|DEBUG|FATAL|Traceback|Exception|errno)\b",  # log words
        r"\b[\w-]+\.(?:py|js|ts|sh|ya?ml|json|toml|ini|conf|cfg|log|csv|txt|img|zip)\b",  # a file name
        r"(?:^|\s)(?:sudo|apt|pip|npm|git|docker|kubectl|ssh|curl|wget|grep|chmod|chown|systemctl|export|"
        r"cd|ls|cat|dd|tar|make|python3?|node|go|cargo)\s",  # a command word
    )
)


def technical(text: str) -> bool:
    """True when ``text`` carries code, shell, logs or configuration."""
    if any(s.search(text) for s in _STRONG):
        return True
    found = 0
    for trace in _TRACES:
        if trace.search(text):
            found += 1
            if found >= 2:
                return True
    return False
