"""Metadata: brokers, topics with ids (v10+), and topic auto-creation when both broker and client allow it."""
from __future__ import annotations

from protocol.errors import ErrorCode, KafkaApiError
from protocol.registry import ApiKey, response_class


def advertised_broker(server, ctx):
    """The advertised endpoint of the listener the request came in on (Kafka's per-listener metadata)."""
    return server.advertised_endpoint(ctx.conn.listener)


async def handle(server, ctx, req):
    Resp = response_class(ApiKey.METADATA)
    Topic = Resp.MetadataResponseTopic
    Part = Topic.MetadataResponsePartition
    v = ctx.api_version
    store = server.store
    host, port = advertised_broker(server, ctx)
    broker_id = server.broker_id
    allow_auto = v < 4 or bool(req.allow_auto_topic_creation)

    if req.topics is None:
        wanted = [(t.name, None) for t in store.topics().values()]
    else:
        wanted = []
        for t in req.topics:
            if t.name is None and t.topic_id is not None:
                info = store.topic_by_id(t.topic_id)
                wanted.append((info.name if info else None, t.topic_id))
            else:
                wanted.append((t.name, None))

    topics = []
    for name, tid in wanted:
        info = store.topic(name) if name is not None else None
        if info is None and name is not None and allow_auto and server.config["auto.create.topics.enable"]:
            try:
                info = await server.topic_manager.create_topic(name)
            except KafkaApiError as e:
                topics.append(Topic(error_code=e.code, name=name, topic_id=None, is_internal=False, partitions=[]))
                continue
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(Topic(error_code=code, name=name, topic_id=tid, is_internal=False, partitions=[]))
            continue
        parts = []
        for i in range(info.partitions):
            p = server.replica_manager.get_partition(info.name, i)
            epoch = p.leader_epoch if p is not None else 0
            parts.append(Part(error_code=0, partition_index=i, leader_id=broker_id, leader_epoch=epoch,
                              replica_nodes=[broker_id], isr_nodes=[broker_id], offline_replicas=[]))
        topics.append(Topic(error_code=0, name=info.name, topic_id=info.topic_id, is_internal=info.internal,
                            partitions=parts))
    brokers = [Resp.MetadataResponseBroker(node_id=broker_id, host=host, port=port,
                                           rack=server.config["broker.rack"] or None)]
    return Resp(version=v, throttle_time_ms=0, brokers=brokers, cluster_id=store.cluster_id,
                controller_id=broker_id, topics=topics, error_code=0)
