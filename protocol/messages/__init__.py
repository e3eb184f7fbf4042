"""Apache Kafka message JSON for the APIs the pinned kafka-python lacks (ConsumerGroupHeartbeat 68,
ConsumerGroupDescribe 69), vendored as package data: strata.protocol.extra_messages builds their codec classes."""
