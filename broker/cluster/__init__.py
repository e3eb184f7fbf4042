"""Cluster mode: the metadata model shared by every MetadataStore, the etcd store, the controller and replication
(see docs/cluster.md)."""
