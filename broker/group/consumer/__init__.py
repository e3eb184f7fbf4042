"""KIP-848 consumer groups: the group and member state (group.py, member.py), reconciliation (reconcile.py), their
`__consumer_offsets` records (records.py), offset request validation (offsets.py) and the heartbeat protocol with its
timers (manager.py), hosted by strata.broker.group.coordinator beside the classic groups."""
