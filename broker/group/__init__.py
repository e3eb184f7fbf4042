"""Consumer groups: the group coordinator (a state machine on strata.broker.coordinator's runtime) with the classic
group state machine, KIP-848 consumer groups (consumer/), the server-side assignors and subscription regex, committed
offsets and the `__consumer_offsets` record formats."""

from .coordinator import GroupCoordinator, JoinParams
from .records import OFFSETS_TOPIC, partition_for

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "JoinParams", "partition_for"]
