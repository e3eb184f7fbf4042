"""Classic consumer groups: the group coordinator, its state machine and the `__consumer_offsets` record formats."""
from .coordinator import GroupCoordinator, JoinParams
from .records import OFFSETS_TOPIC, partition_for

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "JoinParams", "partition_for"]
