"""SCRAM user administration (KIP-554): DescribeUserScramCredentials (v0) and AlterUserScramCredentials (v0).

Describe answers from this broker's metadata image (Kafka's ScramImage.describe); alter is the controller's (other
brokers forward it, broker/cluster/forwarding.py) and follows ScramControlManager.alterCredentials: a user named
twice in one request is refused, each other user is validated on its own, and what passes is stored in one atomic
change. The request carries SaltedPassword, never the password; the broker keeps only salt, StoredKey, ServerKey
and the iteration count (broker/security/scram.py). Nothing here logs a credential.
"""

from __future__ import annotations

from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import ApiKey, response_class
from strata.protocol.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism

from ..authorization import authorize
from ..authorized_ops import CLUSTER_NAME, AclOperation, ResourceType
from ..metadata_store import ScramKey
from ..request_context import RequestContext
from ..security.scram import ScramCredential, credential_from_salted_password
from ..services import BrokerServices

_CLUSTER_AUTH_FAILED = "Cluster authorization failed."
_NOT_CONTROLLER = "This is not the correct controller for this cluster."
_DESCRIBE_DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_DESCRIBE_UNKNOWN = "Attempt to describe a user credential that does not exist: "
_ALTER_TWICE = "A user credential cannot be altered twice in the same request"
_DELETE_UNKNOWN = "Attempt to delete a user credential that does not exist"

Outcome = tuple[int, str | None]  # (error code, message) for one user
_OK: Outcome = (ErrorCode.NONE, None)


def _authorized(ctx: RequestContext, operation: AclOperation) -> bool:
    """Kafka checks the CLUSTER resource: DESCRIBE to describe, ALTER to alter; no authorizer allows everything."""
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


async def describe_user_scram_credentials(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
    Result = Resp.DescribeUserScramCredentialsResult
    if not _authorized(ctx, AclOperation.DESCRIBE):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # as Kafka's getErrorResponse: one result per user asked for, without its name
        results = [Result(user="", error_code=code, error_message=_CLUSTER_AUTH_FAILED, credential_infos=[])]
        return Resp(
            version=ctx.api_version,
            throttle_time_ms=0,
            error_code=code,
            error_message=_CLUSTER_AUTH_FAILED,
            results=results * len(req.users or []),
        )
    stored = services.store.scram_credentials()
    by_user: dict[str, list[ScramCredential]] = {}
    for (user, _), cred in sorted(stored.items()):
        by_user.setdefault(user, []).append(cred)
    asked: dict[str, bool] = {}  # user -> named more than once
    if not req.users:  # null or empty: every user with a credential
        asked = dict.fromkeys(by_user, False)
    else:
        for u in req.users:
            asked[u.name] = u.name in asked
    results = []
    for user, duplicate in asked.items():
        creds = by_user.get(user, [])
        infos: list[Any] = []
        if duplicate:
            code, msg = ErrorCode.DUPLICATE_RESOURCE, _DESCRIBE_DUPLICATE + user
        elif not creds:
            code, msg = ErrorCode.RESOURCE_NOT_FOUND, _DESCRIBE_UNKNOWN + user
        else:
            code, msg = ErrorCode.NONE, None
            infos = [Result.CredentialInfo(mechanism=int(c.mechanism), iterations=c.iterations) for c in creds]
        results.append(Result(user=user, error_code=code, error_message=msg, credential_infos=infos))
    return Resp(version=ctx.api_version, throttle_time_ms=0, error_code=0, error_message=None, results=results)


def _check_user_and_mechanism(user: str, mechanism: ScramMechanism) -> Outcome:
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism == ScramMechanism.UNKNOWN:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return _OK


def _check_upsertion(up: Any) -> Outcome:
    mechanism = ScramMechanism.from_type(up.mechanism)
    err = _check_user_and_mechanism(up.name, mechanism)
    if err[0]:
        return err
    if up.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if up.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return _OK


def _check_deletion(services: BrokerServices, d: Any) -> Outcome:
    mechanism = ScramMechanism.from_type(d.mechanism)
    err = _check_user_and_mechanism(d.name, mechanism)
    if err[0]:
        return err
    if services.store.scram_credential(mechanism, d.name) is None:
        return ErrorCode.RESOURCE_NOT_FOUND, _DELETE_UNKNOWN
    return _OK


async def alter_user_scram_credentials(services: BrokerServices, ctx: RequestContext, req: Any) -> Any:
    Resp = response_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    Result = Resp.AlterUserScramCredentialsResult

    def refuse_all(code: int, msg: str) -> Any:  # Kafka's getErrorResponse: every user named, sorted, once
        users = sorted({x.name for x in [*req.deletions, *req.upsertions]})
        results = [Result(user=u, error_code=code, error_message=msg) for u in users]
        return Resp(version=ctx.api_version, throttle_time_ms=0, results=results)

    if not _authorized(ctx, AclOperation.ALTER):  # first, as Kafka's ControllerApis
        return refuse_all(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_AUTH_FAILED)
    if not services.topic_manager.is_controller():
        return refuse_all(ErrorCode.NOT_CONTROLLER, _NOT_CONTROLLER)
    deletions: dict[str, Any] = {}
    upsertions: dict[str, Any] = {}
    errors: dict[str, Outcome] = {}
    for d in req.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.DUPLICATE_RESOURCE, _ALTER_TWICE)
        elif (err := _check_deletion(services, d))[0]:
            errors[d.name] = err
        else:
            deletions[d.name] = d
    for up in req.upsertions:
        if up.name in errors:
            continue
        if deletions.pop(up.name, None) is not None or upsertions.pop(up.name, None) is not None:
            errors[up.name] = (ErrorCode.DUPLICATE_RESOURCE, _ALTER_TWICE)
        elif (err := _check_upsertion(up))[0]:
            errors[up.name] = err
        else:
            upsertions[up.name] = up
    removed: list[ScramKey] = [(u, ScramMechanism(d.mechanism)) for u, d in deletions.items()]
    stored: list[tuple[str, ScramCredential]] = []
    for user, up in list(upsertions.items()):
        try:
            cred = credential_from_salted_password(
                ScramMechanism(up.mechanism), bytes(up.salt), bytes(up.salted_password), up.iterations
            )
        except ValueError as e:  # an empty salt or salted password (Kafka's formatter fails on them too)
            errors[user] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(e))
            del upsertions[user]
            continue
        stored.append((user, cred))
    if removed or stored:
        await services.store.alter_scram_credentials(stored, removed)
    outcomes = [(u, _OK) for u in deletions] + [(u, _OK) for u in upsertions] + list(errors.items())
    results = [Result(user=u, error_code=code, error_message=msg) for u, (code, msg) in outcomes]
    return Resp(version=ctx.api_version, throttle_time_ms=0, results=results)
