"""The transaction coordinator on `__transaction_state` (Kafka's transaction-coordinator), transaction.version 1."""

from .coordinator import TransactionCoordinator, TxnConfig
from .records import TRANSACTION_STATE_TOPIC

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinator", "TxnConfig"]
