"""Kafka's JAAS configuration values (`sasl.jaas.config`, `listener.name.<l>.<mechanism>.sasl.jaas.config`).

    org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="x" user_admin="x";

One or more login modules, each a class name, a control flag, `key=value` options (values quoted or bare) and a
terminating `;`. Only the parsing lives here; the mechanisms read the options they need (PLAIN's `user_<name>`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


class JaasConfigError(ValueError):
    """A malformed value; the message quotes no option value (they hold passwords)."""


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # options hold secrets: never printed
        return f"LoginModule({self.class_name} {self.flag}, options={sorted(self.options)})"


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasConfigError(f"JAAS config: unexpected character at position {pos}")
        quoted, word, eq, semi = m.groups()
        if quoted is not None:
            out.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            out.append(("word", word))
        elif eq:
            out.append(("=", "="))
        elif semi:
            out.append((";", ";"))
        pos = m.end()
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    toks = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(toks):
        if i + 1 >= len(toks) or toks[i][0] != "word" or toks[i + 1][0] != "word":
            raise JaasConfigError("JAAS config entry must be: <LoginModule class> <control flag> <options> ;")
        class_name, flag = toks[i][1], toks[i + 1][1].lower()
        if flag not in _FLAGS:
            raise JaasConfigError(f"JAAS config: invalid control flag {toks[i + 1][1]!r} for {class_name}")
        i += 2
        options: dict[str, str] = {}
        while i < len(toks) and toks[i][0] != ";":
            if (
                i + 2 >= len(toks)
                or toks[i][0] != "word"
                or toks[i + 1][0] != "="
                or toks[i + 2][0] not in ("word", "value")
            ):
                raise JaasConfigError(f"JAAS config: malformed option in {class_name} (expected key=value)")
            options[toks[i][1]] = toks[i + 2][1]
            i += 3
        if i >= len(toks):
            raise JaasConfigError(f"JAAS config: {class_name} entry does not end with ';'")
        i += 1
        modules.append(LoginModule(class_name, flag, options))
    if not modules:
        raise JaasConfigError("JAAS config is empty")
    return modules


__all__ = ["JaasConfigError", "LoginModule", "parse_jaas_config"]
