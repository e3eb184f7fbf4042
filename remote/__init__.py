"""Strata remote layer: KIP-405 tiered storage, RSM, RLMM, RLM (see docs/architecture.md).

Looking for the follower's "rebuild aux state" (KIP-405 BuildRemoteLogAuxState: error 109 -> restore the epoch cache
and producer state from a remote segment)? It is part of the replica fetcher, in
broker/cluster/replica_fetcher_tier_state.py (remote/ never imports broker/).
"""
