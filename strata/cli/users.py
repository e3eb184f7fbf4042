"""``strata users scram add|list|delete``: SCRAM-SHA-256/512 credentials of users (KIP-554), what kafka-configs does
with ``--entity-type users --add-config 'SCRAM-SHA-256=[...]'`` (strata configs accepts that form too).

The password is read from a file (``--password-file``), from stdin (``--password-stdin``) or at a terminal prompt,
never from the command line, where other users of the machine can read it. As Kafka's admin client does, the salt
and SaltedPassword are computed here; the broker receives neither the password nor anything it could reverse.
"""

from __future__ import annotations

import argparse
import getpass
import re
import sys
from pathlib import Path

from strata.protocol.scram import MIN_ITERATIONS, ScramMechanism

from .admin_client import AdminClient, ScramUpsertion, UserScramCredentials, error_text
from .common import SubParsers, UsageError, add_action_command, error, run_action

NAME = "users"
PROG = "strata users scram"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = MIN_ITERATIONS  # kafka-configs' default (4096)
# kafka-configs' value of a SCRAM config: [iterations=N,]password=P
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="manage users' SCRAM credentials")
    kinds = p.add_subparsers(dest="kind", required=True)
    action = add_action_command(kinds, "scram", "add, list or delete SCRAM-SHA-256/512 credentials", run)
    add = action("add", _add, "store (or replace) a user's credential for one mechanism")
    _user_and_mechanism(add)
    add.add_argument(
        "--iterations", type=int, default=DEFAULT_ITERATIONS, help=f"default {DEFAULT_ITERATIONS} (4096-16384)"
    )
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password-file", metavar="FILE", help="read the password from the first line of FILE")
    source.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    lst = action("list", _list, "users with credentials, and their mechanisms and iterations")
    lst.add_argument("--user", action="append", help="only this user (repeatable)")
    delete = action("delete", _delete, "remove a user's credential for one mechanism")
    _user_and_mechanism(delete)


def _user_and_mechanism(p: argparse.ArgumentParser) -> None:
    p.add_argument("--user", required=True)
    p.add_argument("--mechanism", required=True, choices=MECHANISMS)


def run(args: argparse.Namespace) -> int:
    if args.action == "add":  # before connecting: a prompt or a missing source comes first
        try:
            args.password = read_password(args)
        except UsageError as e:
            error(PROG, str(e))
            return 1
    return run_action(PROG, lambda bs, t: AdminClient(bs, timeout=t), args)


def read_password(args: argparse.Namespace) -> str:
    if args.password_file:
        try:
            lines = Path(args.password_file).read_text().splitlines()
        except OSError as e:
            raise UsageError(f"cannot read --password-file: {e.strerror or e}") from None
        password = lines[0] if lines else ""
    elif args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"Password for {args.user}: ")
        if getpass.getpass("Again: ") != password:
            raise UsageError("the passwords do not match")
    else:
        raise UsageError("give --password-file or --password-stdin (or run at a terminal to be prompted)")
    if not password:
        raise UsageError("the password is empty")
    return password


def _add(a: AdminClient, args: argparse.Namespace) -> int:
    mech = ScramMechanism.from_name(args.mechanism)
    a.alter_user_scram_credentials([ScramUpsertion.from_password(args.user, mech, args.password, args.iterations)])
    print(f"Completed updating {args.mechanism} credential for user {args.user}.")
    return 0


def _delete(a: AdminClient, args: argparse.Namespace) -> int:
    a.alter_user_scram_credentials(deletions=[(args.user, ScramMechanism.from_name(args.mechanism))])
    print(f"Completed deleting {args.mechanism} credential for user {args.user}.")
    return 0


def _list(a: AdminClient, args: argparse.Namespace) -> int:
    return print_credentials(a.describe_user_scram_credentials(args.user))


def print_credentials(users: list[UserScramCredentials]) -> int:
    """kafka-configs' lines for users' SCRAM credentials; 1 if any user had an error (printed on its line)."""
    failed = False
    for u in users:
        if u.error_code:
            failed = True
            msg = error_text(u.error_code, u.error_message)
            print(f"Error retrieving SCRAM credential configs for user-principal '{u.user}': {msg}")
            continue
        text = ", ".join(f"{m.mechanism_name}=iterations={i}" for m, i in u.credentials)
        print(f"SCRAM credential configs for user-principal '{u.user}' are {text}")
    return 1 if failed else 0


def parse_scram_config(user: str, mechanism_name: str, value: str) -> ScramUpsertion:
    """An upsertion from kafka-configs' `SCRAM-SHA-256=[iterations=8192,password=...]` value (iterations default
    to 4096, as there; -1 means the default)."""
    m = _CREDENTIAL.fullmatch(value)
    if m is None:
        raise UsageError(f"Invalid credential property {mechanism_name}: expected [iterations=N,]password=P")
    iterations = int(m.group(1)) if m.group(1) not in (None, "", "-1") else DEFAULT_ITERATIONS
    if iterations < MIN_ITERATIONS:
        raise UsageError(
            f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {mechanism_name}"
        )
    return ScramUpsertion.from_password(user, ScramMechanism.from_name(mechanism_name), m.group(2), iterations)
