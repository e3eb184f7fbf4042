"""``strata quotas set|describe``: client quotas (KIP-546) of users, client ids or both, and their defaults, as
kafka-configs sets them with ``--entity-type users|clients --alter --add-config producer_byte_rate=...``.

`set` sends one AlterClientQuotas (``--add-config`` sets, ``--delete-config`` removes), `describe` one
DescribeClientQuotas whose filter is kafka-configs': each named entity type matches exactly (``--user-defaults``:
the default entity), strictly (an entity with other types does not match); without an entity option every entity
is listed. Output lines are kafka-configs'.
"""

from __future__ import annotations

import argparse
from typing import Any

from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from .admin_client import AdminClient, AdminError, check_error, error_text
from .common import SubParsers, UsageError, add_action_command, run_action

NAME = "quotas"
PROG = "strata quotas"
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
USER, CLIENT_ID = "user", "client-id"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_TYPE_TEXT = {USER: "user-principal", CLIENT_ID: "client-id"}

Entity = list[tuple[str, str | None]]  # (entity type, name; None = the default)


def register(sub: SubParsers) -> None:
    action = add_action_command(sub, NAME, "set or describe client quotas of users and client ids", run)
    st = action("set", _set, "add or delete quota configs of a user, a client id, both, or their defaults")
    _entity_options(st)
    st.add_argument(
        "--add-config", default="", metavar="K=V[,K=V]", help=f"quota values to set, of {', '.join(QUOTA_KEYS)}"
    )
    st.add_argument("--delete-config", default="", metavar="K[,K]", help="quota configs to remove")
    st.add_argument("--validate-only", action="store_true", help="have the broker check the change, not make it")
    desc = action("describe", _describe, "quota configs of the matching entities (all without an entity option)")
    _entity_options(desc)


def _entity_options(p: argparse.ArgumentParser) -> None:
    user = p.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="PRINCIPAL", help="the user (principal name, e.g. alice)")
    user.add_argument("--user-defaults", action="store_true", help="the default user (<default>)")
    client = p.add_mutually_exclusive_group()
    client.add_argument("--client", metavar="CLIENT_ID", help="the client id")
    client.add_argument("--client-defaults", action="store_true", help="the default client id (<default>)")


def run(args: argparse.Namespace) -> int:
    return run_action(PROG, lambda bs, t: AdminClient(bs, timeout=t), args)


def entity_of(args: argparse.Namespace) -> Entity:
    entity: Entity = []
    if args.user is not None or args.user_defaults:
        entity.append((USER, None if args.user_defaults else args.user))
    if args.client is not None or args.client_defaults:
        entity.append((CLIENT_ID, None if args.client_defaults else args.client))
    return entity


def parse_ops(add: str, delete: str) -> list[tuple[str, float | None]]:
    """(key, value) to set and (key, None) to remove; UsageError for what kafka-configs refuses before sending."""
    ops: list[tuple[str, float | None]] = []
    for item in filter(None, (s.strip() for s in add.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--add-config {item!r} is not of the form key=value")
        try:
            ops.append((key.strip(), float(value)))
        except ValueError:
            raise UsageError(f"Invalid value {value!r} for {key.strip()}: a number is expected") from None
    ops += [(key, None) for key in filter(None, (s.strip() for s in delete.split(",")))]
    unknown = [k for k, _ in ops if k not in QUOTA_KEYS]
    if unknown:
        raise UsageError(f"Unexpected config names: {','.join(unknown)}")
    if not ops:
        raise UsageError("give --add-config or --delete-config")
    return ops


def alter_client_quotas(
    a: AdminClient, alterations: list[tuple[Entity, list[tuple[str, float | None]]]], validate_only: bool = False
) -> list[tuple[Entity, int, str | None]]:
    """One AlterClientQuotas; each entity's (entity, error code, message)."""
    R = REQUEST_CLASSES[ApiKey.ALTER_CLIENT_QUOTAS]
    entries = [
        R.EntryData(
            entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[R.EntryData.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops],
        )
        for entity, ops in alterations
    ]
    _, resp = a.call(ApiKey.ALTER_CLIENT_QUOTAS, entries=entries, validate_only=validate_only)
    return [([(e.entity_type, e.entity_name) for e in r.entity], r.error_code, r.error_message) for r in resp.entries]


def describe_client_quotas(
    a: AdminClient, components: list[tuple[str, int, str | None]], strict: bool
) -> list[tuple[Entity, dict[str, float]]]:
    """One DescribeClientQuotas: the matching entities and their values."""
    R = REQUEST_CLASSES[ApiKey.DESCRIBE_CLIENT_QUOTAS]
    comps = [R.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components]
    _, resp = a.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, components=comps, strict=strict)
    check_error(resp.error_code, resp.error_message, "DescribeClientQuotas: ")
    return [
        ([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
        for entry in resp.entries or []
    ]


def java_double(v: float) -> str:
    """A double as Java's Double.toString prints it (kafka-configs' output): 1048576.0, 1.0E7, 0.5."""
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        return repr(float(v))
    mantissa, exp = f"{v:.16E}".split("E")
    digits = mantissa.rstrip("0")
    digits = digits + "0" if digits.endswith(".") else digits
    return f"{digits}E{int(exp)}"


def entity_text(entity: Entity) -> str:
    order = {USER: 0, CLIENT_ID: 1}
    parts = []
    for t, n in sorted(entity, key=lambda tn: order.get(tn[0], 2)):
        kind = _TYPE_TEXT.get(t, t)
        parts.append(f"{kind} '{n}'" if n is not None else f"the default {kind}")
    return ", ".join(parts)


def _set(a: AdminClient, args: argparse.Namespace) -> int:
    entity = entity_of(args)
    if not entity:
        raise UsageError("give --user, --user-defaults, --client or --client-defaults")
    ops = parse_ops(args.add_config, args.delete_config)
    [(_, code, message)] = alter_client_quotas(a, [(entity, ops)], args.validate_only)
    if code:
        raise AdminError(f"AlterClientQuotas {entity_text(entity)}: {error_text(code, message)}", code)
    etype, name = entity[0]
    head = "users" if etype == USER else "clients"
    if name is not None:
        print(f"Completed updating config for {head[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {head} in the cluster.")
    return 0


def _describe(a: AdminClient, args: argparse.Namespace) -> int:
    components: list[tuple[str, int, Any]] = [
        (t, MATCH_EXACT if n is not None else MATCH_DEFAULT, n) for t, n in entity_of(args)
    ]
    for entity, values in describe_client_quotas(a, components, strict=bool(components)):
        text = ", ".join(f"{k}={java_double(v)}" for k, v in values.items())
        print(f"Quota configs for {entity_text(entity)} are {text}")
    return 0
