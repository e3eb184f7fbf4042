"""Classic consumer groups: the group coordinator (a state machine on strata.broker.coordinator's runtime), the
group state machine, committed offsets and the `__consumer_offsets` record formats."""

from .coordinator import GroupCoordinator, JoinParams
from .records import OFFSETS_TOPIC, partition_for

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "JoinParams", "partition_for"]
