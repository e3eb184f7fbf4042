"""``strata acls``: add, list or remove ACLs, with kafka-acls.sh's options and output.

``strata acls --add --allow-principal User:alice --operation Read --topic orders`` (or ``strata acls add ...``).
Resources: ``--topic``, ``--group``, ``--transactional-id``, ``--delegation-token``, ``--user-principal`` (each
repeatable) and ``--cluster``, matched as ``--resource-pattern-type`` says (literal by default; prefixed; for list and
remove also any or match). ``--producer`` and ``--consumer`` add the ACLs those roles need, as kafka-acls does.
Removing asks for confirmation unless ``--force``. The broker needs an authorizer (``authorizer.class.name``); the
principal running the command needs ALTER (add, remove) or DESCRIBE (list) on the cluster.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from strata.protocol.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_principal,
)
from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from .admin_client import AdminClient, check_error
from .common import SubParsers, UsageError, add_bootstrap_option, add_timeout_option, run_action

NAME = "acls"
PROG = "strata acls"
ACTIONS = ("add", "list", "remove")

Op = AclOperation
# AclEntry.supportedOperations: what kafka-acls accepts per resource type (plus All)
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}
_OPERATION_NAMES = [op for op in AclOperation if op not in (Op.UNKNOWN, Op.ANY)]

Filter = tuple[ResourceType, str, PatternType]  # a resource pattern filter (kafka-acls' ResourcePatternFilter)


def pascal(name: str) -> str:
    """Kafka's SecurityUtils.toPascalCase: IDEMPOTENT_WRITE -> IdempotentWrite."""
    return "".join(part.capitalize() for part in name.split("_"))


def parse_operation(name: str) -> AclOperation:
    """Kafka's SecurityUtils.operation: Pascal case or any case without underscores (Strata also takes them);
    UNKNOWN for anything else (refused later, with the resource type's valid operations)."""
    key = name.strip().upper().replace("_", "")
    for op in AclOperation:
        if op.name.replace("_", "") == key:
            return op
    return Op.UNKNOWN


def pattern_text(rtype: ResourceType, name: str | None, ptype: PatternType) -> str:
    """ResourcePattern.toString, as kafka-acls prints resources."""
    shown = "<any>" if name is None else name
    return f"ResourcePattern(resourceType={rtype.name}, name={shown}, patternType={ptype.name})"


def entry_text(e: AccessControlEntry) -> str:
    """AccessControlEntryData.toString."""
    op, perm = e.operation.name, e.permission_type.name
    return f"(principal={e.principal}, host={e.host}, operation={op}, permissionType={perm})"


def _entries_block(entries: Iterable[AccessControlEntry]) -> str:
    """kafka-acls' `: $Newline ${acls.map("\t" + _).mkString(Newline)} $Newline`."""
    return ": \n " + "\n".join("\t" + entry_text(e) for e in entries) + " \n"


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        NAME,
        help="add, list or remove ACLs (kafka-acls)",
        description="Manage ACLs as kafka-acls.sh does: exactly one of --add, --list, --remove (or add|list|remove).",
    )
    add_bootstrap_option(p)
    add_timeout_option(p)
    p.add_argument("action_word", nargs="?", choices=ACTIONS, metavar="{add,list,remove}", help="the action")
    helps = {"add": "add ACLs", "list": "list ACLs (of the given resources, or all)", "remove": "remove ACLs"}
    for action in ACTIONS:
        p.add_argument(
            f"--{action}", dest="action_flags", action="append_const", const=action, default=[], help=helps[action]
        )
    resources = p.add_argument_group("resources")
    resources.add_argument("--topic", action="append", default=[], help="'*' for all topics (repeatable)")
    resources.add_argument("--group", action="append", default=[], help="'*' for all groups (repeatable)")
    resources.add_argument("--cluster", action="store_true", help="the cluster resource")
    resources.add_argument("--transactional-id", action="append", default=[], help="(repeatable)")
    resources.add_argument("--delegation-token", action="append", default=[], help="(repeatable)")
    resources.add_argument("--user-principal", action="append", default=[], help="a user as a resource (repeatable)")
    resources.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=str.lower,
        choices=("any", "match", "literal", "prefixed"),
        help="literal (default) or prefixed to add; any or match also to list or remove ('match': every ACL that "
        "applies to the resource; careful with --remove)",
    )
    entries = p.add_argument_group("ACL entries")
    names = ", ".join(pascal(op.name) for op in _OPERATION_NAMES)
    entries.add_argument("--operation", action="append", default=[], help=f"default All; one of {names} (repeatable)")
    entries.add_argument("--allow-principal", action="append", default=[], help="Type:name, e.g. User:alice or User:*")
    entries.add_argument("--deny-principal", action="append", default=[], help="Type:name; DENY wins over ALLOW")
    entries.add_argument("--allow-host", action="append", default=[], help="default * with --allow-principal")
    entries.add_argument("--deny-host", action="append", default=[], help="default * with --deny-principal")
    entries.add_argument("--principal", action="append", default=[], help="--list: only this principal's ACLs")
    entries.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE and CREATE on the topics")
    entries.add_argument("--consumer", action="store_true", help="READ and DESCRIBE on the topics, READ on the groups")
    entries.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="remove without asking")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        action = check_args(args)
        if action == "add":
            plan = resource_to_acls(args, adding=True)
            args.action_func = lambda a, args: _add(a, plan)
        elif action == "remove":
            plan = resource_to_acls(args, adding=False)
            args.action_func = lambda a, args: _remove(a, plan, args.force)
        else:
            args.action_func = _list
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1  # kafka-acls' printUsageAndExit
    return run_action(PROG, lambda bs, t: AdminClient(bs, timeout=t), args)


def check_args(args: argparse.Namespace) -> str:
    """AclCommandOptions.checkArgs, in its words."""
    actions = list(args.action_flags) + ([args.action_word] if args.action_word else [])
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove.")
    action: str = actions[0]
    if action == "list":
        for opt in ("producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal"):
            if getattr(args, opt):
                raise UsageError(f'Option "--list" can\'t be used with option "--{opt.replace("_", "-")}"')
    for role in ("producer", "consumer"):
        if getattr(args, role):
            for opt in ("operation", "deny_principal", "deny_host"):
                if getattr(args, opt):
                    raise UsageError(f'Option "--{role}" can\'t be used with option "--{opt.replace("_", "-")}"')
    if args.principal and action != "list":
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (
        not args.topic or not args.group or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "With --consumer you must specify a --topic and a --group and no --cluster or --transactional-id "
            "option should be specified."
        )
    if action == "add" and args.resource_pattern_type in ("any", "match"):
        raise UsageError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not valid when adding acls."
        )
    return action


def resource_filters(args: argparse.Namespace, required: bool = True) -> list[Filter]:
    """getResourceFilter: one per resource option (--cluster only with the literal pattern type, as kafka-acls)."""
    ptype = PatternType[args.resource_pattern_type.upper()]
    out: list[Filter] = [(ResourceType.TOPIC, t.strip(), ptype) for t in args.topic]
    if ptype == PatternType.LITERAL and (args.cluster or args.idempotent):
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    out += [(ResourceType.GROUP, g.strip(), ptype) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t, ptype) for t in args.transactional_id]
    out += [(ResourceType.DELEGATION_TOKEN, t.strip(), ptype) for t in args.delegation_token]
    out += [(ResourceType.USER, u.strip(), ptype) for u in args.user_principal]
    if not out and required:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
            "--delegation-token <Delegation Token ID>"
        )
    return list(dict.fromkeys(out))


def _principals(values: list[str]) -> list[str]:
    out = []
    for v in values:
        try:
            kind, name = parse_principal(v.strip())
        except ValueError as e:
            raise UsageError(str(e)) from None
        out.append(f"{kind}:{name}")
    return list(dict.fromkeys(out))


def _entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> list[AccessControlEntry]:
    """getAcl: every (principal, operation, host) of the allow and deny options."""
    out: list[AccessControlEntry] = []
    for perm, principals, hosts in (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    ):
        who = _principals(principals)
        where = [h.strip() for h in hosts] or ([WILDCARD] if who else [])
        out += [AccessControlEntry(p, h, op, perm) for p in who for op in operations for h in where]
    return list(dict.fromkeys(out))


def resource_to_acls(args: argparse.Namespace, adding: bool) -> dict[Filter, list[AccessControlEntry]]:
    """getResourceFilterToAcls (and, adding, getResourceToAcls's checks)."""
    plan: dict[Filter, list[AccessControlEntry]] = {}
    filters = resource_filters(args)
    if not args.producer and not args.consumer:
        ops = [parse_operation(o) for o in args.operation] or [Op.ALL]
        acls = _entries(args, list(dict.fromkeys(ops)))
        plan = dict.fromkeys(filters, acls)
    if args.producer:
        for f in filters:
            if f[0] == ResourceType.TOPIC:
                plan[f] = _entries(args, (Op.WRITE, Op.DESCRIBE, Op.CREATE))
            elif f[0] == ResourceType.TRANSACTIONAL_ID:
                plan[f] = _entries(args, (Op.WRITE, Op.DESCRIBE))
        if args.idempotent:
            plan[(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = _entries(args, (Op.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in filters:
            if f[0] == ResourceType.TOPIC:
                plan[f] = list(dict.fromkeys(plan.get(f, []) + _entries(args, (Op.READ, Op.DESCRIBE))))
            elif f[0] == ResourceType.GROUP:
                plan[f] = list(dict.fromkeys(plan.get(f, []) + _entries(args, (Op.READ,))))
    for (rtype, _, _), acls in plan.items():  # validateOperation
        valid = (*SUPPORTED_OPERATIONS[rtype], Op.ALL)
        if any(e.operation not in valid for e in acls):
            names = ", ".join(pascal(op.name) for op in valid)
            raise UsageError(f"ResourceType {rtype.name} only supports operations {names}")
    if adding and any(not acls for acls in plan.values()):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    return plan


# ---- requests -----------------------------------------------------------------------------------------------------
def create_acls(a: AdminClient, bindings: list[AclBinding]) -> None:
    C = REQUEST_CLASSES[ApiKey.CREATE_ACLS].AclCreation
    creations = [C(**b.wire_fields("resource_pattern_type")) for b in bindings]
    _, resp = a.call(ApiKey.CREATE_ACLS, creations=creations)
    for r in resp.results:
        check_error(r.error_code, r.error_message, "CreateAcls: ")


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission_type),
    }


def describe_acls(a: AdminClient, f: AclBindingFilter) -> list[AclBinding]:
    _, resp = a.call(ApiKey.DESCRIBE_ACLS, **_filter_fields(f))
    check_error(resp.error_code, resp.error_message, "DescribeAcls: ")
    out = []
    for r in resp.resources:
        pattern = ResourcePattern(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type))
        for e in r.acls:
            entry = AccessControlEntry(
                e.principal, e.host, AclOperation(e.operation), AclPermissionType(e.permission_type)
            )
            out.append(AclBinding(pattern, entry))
    return out


def delete_acls(a: AdminClient, filters: list[AclBindingFilter]) -> list[AclBinding]:
    F = REQUEST_CLASSES[ApiKey.DELETE_ACLS].DeleteAclsFilter
    _, resp = a.call(ApiKey.DELETE_ACLS, filters=[F(**_filter_fields(f)) for f in filters])
    deleted = []
    for r in resp.filter_results:
        check_error(r.error_code, r.error_message, "DeleteAcls: ")
        for m in r.matching_acls:
            check_error(m.error_code, m.error_message, "DeleteAcls: ")
            pattern = ResourcePattern(ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type))
            perm = AclPermissionType(m.permission_type)
            deleted.append(
                AclBinding(pattern, AccessControlEntry(m.principal, m.host, AclOperation(m.operation), perm))
            )
    return deleted


# ---- actions ------------------------------------------------------------------------------------------------------
def _sorted(entries: Iterable[AccessControlEntry]) -> list[AccessControlEntry]:
    return sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))


def _add(a: AdminClient, plan: dict[Filter, list[AccessControlEntry]]) -> int:
    for (rtype, name, ptype), acls in plan.items():
        print(f"Adding ACLs for resource `{pattern_text(rtype, name, ptype)}`{_entries_block(_sorted(acls))}")
        create_acls(a, [AclBinding(ResourcePattern(rtype, name, ptype), e) for e in acls])
    return 0


def _confirm(force: bool, message: str) -> bool:
    if force:
        return True
    print(message, flush=True)
    return sys.stdin.readline().strip().lower() == "y"


def _remove(a: AdminClient, plan: dict[Filter, list[AccessControlEntry]], force: bool) -> int:
    for (rtype, name, ptype), acls in plan.items():
        shown = pattern_text(rtype, name, ptype)
        if not acls:
            if _confirm(force, f"Are you sure you want to delete all ACLs for resource filter `{shown}`? (y/n)"):
                delete_acls(a, [AclBindingFilter(rtype, name, ptype)])
            continue
        block = _entries_block(_sorted(acls))
        if _confirm(force, f"Are you sure you want to remove ACLs{block} from resource filter `{shown}`? (y/n)"):
            filters = [
                AclBindingFilter(rtype, name, ptype, e.principal, e.host, e.operation, e.permission_type) for e in acls
            ]
            delete_acls(a, filters)
    return 0


def _print_resources(bindings: Iterable[AclBinding]) -> None:
    by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, set()).add(b.entry)
    for p in sorted(by_pattern, key=lambda p: (p.resource_type, p.pattern_type, p.name)):
        text = pattern_text(p.resource_type, p.name, p.pattern_type)
        print(f"Current ACLs for resource `{text}`{_entries_block(_sorted(by_pattern[p]))}")


def _list(a: AdminClient, args: argparse.Namespace) -> int:
    filters = resource_filters(args, required=False)
    if not filters:
        bindings = describe_acls(a, AclBindingFilter())
    else:
        bindings = [b for f in filters for b in describe_acls(a, AclBindingFilter(*f))]
    principals = _principals(args.principal)
    if not principals:
        _print_resources(bindings)
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        _print_resources(b for b in bindings if b.entry.principal == principal)
    return 0
