"""`ssl.principal.mapping.rules`: Kafka's rules turning a client certificate's distinguished name into a principal
name (mTLS), e.g. `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT`.

Rules are tried in order; a `RULE:pattern/replacement/[L|U]` applies when its pattern matches the whole DN, and
`DEFAULT` yields the DN itself. The DN is the certificate subject in RFC 2253/4514 form (most specific attribute
first, `CN=alice,OU=eng,O=acme,C=US`), as Java's X500Principal prints it, so rules written for Kafka carry over.
Patterns are Python regular expressions: the rules users write for Kafka (anchors, classes, lazy groups) read the
same; `$n` in the replacement is a back reference, or literal text where the pattern has no group n.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule yields a name for this DN (Kafka fails the authentication)."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        name = _expand(self.replacement, m)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name


def _expand(replacement: str, m: re.Match[str]) -> str:
    """Java's Matcher replacement syntax: `$n` a group (the longest prefix of the digits that names one, as Kafka
    reads `$12` with fewer groups; none: the text stays literal), `\\c` the character c."""
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\" and i + 1 < n:
            out.append(replacement[i + 1])
            i += 2
            continue
        digits = _BACK_REFERENCE.match(replacement, i) if c == "$" else None
        if digits is None:
            out.append(c)
            i += 1
            continue
        ref = digits.group(1)
        if ref.startswith("0"):  # $0: the whole match
            out.append(m.group(0) + ref[1:])
            i = digits.end()
            continue
        for cut in range(len(ref), 0, -1):
            if int(ref[:cut]) <= m.re.groups:
                out.append((m.group(int(ref[:cut])) or "") + ref[cut:])
                break
        else:
            out.append(digits.group(0))
        i = digits.end()
    return "".join(out)


class SslPrincipalMapper:
    def __init__(self, rules: str | None = DEFAULT_RULES) -> None:
        self.rules = self._parse((rules or DEFAULT_RULES).strip())

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        parsed: list[_Rule] = []
        for m in _SPLITTER.finditer(text):
            rule = m.group(1)
            if not rule:
                continue  # empty rules are ignored, as in Kafka
            p = _PARSER.match(rule)
            if p is None or p.end() != len(rule):
                raise ValueError(f"Invalid rule: `{rule}`")
            if p.group(1):
                parsed.append(_Rule(None))
            elif p.group(2) is not None:
                try:
                    pattern = re.compile(p.group(2))
                except re.error as e:
                    raise ValueError(f"Invalid rule: `{rule}`: {e}") from None
                parsed.append(_Rule(pattern, p.group(3), p.group(4)))
            else:
                raise ValueError(f"Invalid rule: `{rule}`")
        return parsed

    def name(self, dn: str) -> str:
        for r in self.rules:
            got = r.apply(dn)
            if got is not None:
                return got
        raise NoMatchingRule(f"No rules apply to {dn}")


def certificate_dn(der: bytes) -> str:
    """The subject of a DER certificate in RFC 4514 form (Kafka prints RFC 2253, the same for the usual attributes)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


__all__ = ["DEFAULT_RULES", "NoMatchingRule", "SslPrincipalMapper", "certificate_dn"]
