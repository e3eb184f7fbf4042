"""SCRAM (RFC 5802, KIP-84/KIP-554) facts both sides of the wire need: Kafka's ScramMechanism codes, its iteration
bounds and the client-side SaltedPassword. The broker derives its keys from these (strata.broker.security.scram);
the CLI computes SaltedPassword itself, as Kafka's tools do, so a password never travels to the broker.
"""

from __future__ import annotations

import hashlib
from enum import IntEnum


class ScramMechanism(IntEnum):
    """Kafka's ScramMechanism codes (DescribeUserScramCredentials / AlterUserScramCredentials)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self == ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        try:
            m = cls[name.upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"Unsupported SCRAM mechanism {name}") from None
        if m == cls.UNKNOWN:
            raise ValueError(f"Unsupported SCRAM mechanism {name}")
        return m

    @classmethod
    def from_type(cls, code: int) -> ScramMechanism:
        """Kafka's ScramMechanism.fromType: a code it does not know is UNKNOWN."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka refuses more (AlterUserScramCredentials: UNACCEPTABLE_CREDENTIAL)


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) = PBKDF2 with the mechanism's HMAC (SASLprep of ASCII passwords is the identity)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


__all__ = ["MAX_ITERATIONS", "MIN_ITERATIONS", "ScramMechanism", "salted_password"]
