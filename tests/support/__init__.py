"""Helpers shared by the integration tests: a broker process manager and a raw-socket Kafka client."""
